"""The decode step's memory-bandwidth roofline: how many bytes one step moves, and what that allows.

One decode step at concurrency c and context length L reads every weight the step uses once (for an MoE, only the
experts the c tokens are routed to) plus the KV cache of the c sequences. A step can not be faster than those bytes
over the GPU's memory bandwidth, so

    ceiling (tok/s over all users) = c x bandwidth / step_bytes(c, L)
    % of the bandwidth limit       = measured tok/s / ceiling = (measured tok/s / c) x step_bytes / bandwidth

At c=1 the ceiling is the physical limit per user. Bandwidth comes from NVML (max memory clock x bus width x 2 for
double data rate) or from the datasheet table below. It applies to a GPU: on the CPU engine it says so and stops.
Compute, launch overheads and prefill are left out on purpose: this is the memory ceiling only, and a measured
throughput over a run's wall time (prefill included) reads a little below the decode-only figure, which the
TPOT-based percentage gives.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from checks.model_config import read_hf_quant_config
from launcher.bench.traffic import (
    BYTES_PER_PARAM,
    ModelTraffic,
    RooflineError,
    StepBytes,
    expected_distinct_experts,
    mamba_state_bytes,
    model_traffic,
    state_dtype,
    step_bytes,
)
from launcher.errors import ExitCode
from launcher.model import quant
from launcher.model.quant import Quantization

# the traffic model's names, re-exported: callers reach the roofline and its parts through this module
__all__ = [
    "BYTES_PER_PARAM",
    "ModelTraffic",
    "RooflineError",
    "expected_distinct_experts",
    "model_traffic",
    "step_bytes",
]

# Datasheet memory bandwidth per GPU, bytes/s; matched by substring of NVML's name, most specific first.
DATASHEET_BANDWIDTH: tuple[tuple[str, float, str], ...] = (
    ("H200", 4.8e12, "https://www.nvidia.com/en-us/data-center/h200/ (H200 SXM and NVL: 4.8 TB/s)"),
    ("H100 NVL", 3.9e12, "https://www.nvidia.com/en-us/data-center/h100/ (H100 NVL: 3.9 TB/s)"),
    ("H100 PCIe", 2.0e12, "https://www.nvidia.com/en-us/data-center/h100/ (H100 PCIe: 2 TB/s)"),
    ("H100", 3.35e12, "https://www.nvidia.com/en-us/data-center/h100/ (H100 SXM: 3.35 TB/s)"),
    ("B200", 8.0e12, "https://www.nvidia.com/en-us/data-center/dgx-b200/ (HGX B200: 8 TB/s per GPU)"),
    (
        "RTX PRO 6000 Blackwell",
        1.792e12,
        "https://www.nvidia.com/en-us/products/workstations/professional-desktop-gpus/rtx-pro-6000/ (1792 GB/s)",
    ),
    ("RTX 5090", 1.792e12, "https://www.nvidia.com/en-us/geforce/graphics-cards/50-series/rtx-5090/ (1792 GB/s)"),
    ("GB10", 273e9, "https://www.nvidia.com/en-us/products/workstations/dgx-spark/ (DGX Spark: 273 GB/s)"),
    ("A100-SXM4-80GB", 2.039e12, "https://www.nvidia.com/en-us/data-center/a100/ (A100 80GB SXM: 2039 GB/s)"),
)


def ceiling_tok_s(bytes_per_step: float, concurrency: float, bandwidth: float) -> float:
    """The most output tokens per second (all users together) that memory bandwidth allows."""
    return concurrency * bandwidth / bytes_per_step


def percent_of_limit(measured_tok_s: float, bytes_per_step: float, concurrency: float, bandwidth: float) -> float:
    return 100.0 * measured_tok_s / ceiling_tok_s(bytes_per_step, concurrency, bandwidth)


@dataclass(frozen=True)
class Bandwidth:
    bytes_per_s: float  # the one used
    source: str  # "nvml" or "datasheet"
    gpu_name: str
    gpus: int  # GPUs a step's bytes are spread over (tensor parallel)
    nvml_bytes_per_s: float | None
    datasheet_bytes_per_s: float | None
    datasheet_source: str | None


def nvml_bandwidth(gpu: dict[str, Any]) -> float | None:
    """Max memory clock (MHz) x bus width (bits) / 8 x 2: NVML reports the memory clock, data moves on both edges."""
    clock, width = gpu.get("memory_clock_max_mhz"), gpu.get("memory_bus_width_bits")
    if not clock or not width:
        return None
    return float(clock) * 1e6 * float(width) / 8 * 2


def datasheet_bandwidth(name: str) -> tuple[float, str] | None:
    for key, value, source in DATASHEET_BANDWIDTH:
        if key.lower() in name.lower():
            return value, source
    return None


def gpu_bandwidth(gpu: dict[str, Any], gpus: int = 1) -> Bandwidth | None:
    """NVML's figure when it has one, else the datasheet's; None when neither knows this GPU."""
    name = str(gpu.get("name") or "")
    nvml, sheet = nvml_bandwidth(gpu), datasheet_bandwidth(name)
    if nvml is None and sheet is None:
        return None
    chosen, source = (nvml, "nvml") if nvml is not None else (sheet[0] if sheet else 0.0, "datasheet")
    return Bandwidth(chosen * gpus, source, name, gpus, nvml, sheet[0] if sheet else None, sheet[1] if sheet else None)


def quantization_of(
    config: dict[str, Any], server_argv: list[str], hf_quant: dict[str, Any] | None = None
) -> Quantization:
    """The weights' storage per module: the checkpoint's quantization_config (or its hf_quant_config.json), else
    vLLM's --quantization fp8 (online), else the config's dtype."""
    try:
        return quant.read(config, hf_quant, _flag_value(server_argv, "--quantization"))
    except quant.UnknownQuantization as e:
        raise RooflineError(str(e)) from None


def weight_dtype_of(config: dict[str, Any], server_argv: list[str]) -> str:
    """The weights' storage in one word ("mixed nvfp4+fp8" for a per-module map)."""
    return quantization_of(config, server_argv).label


def _flag_value(argv: list[str], *flags: str) -> str | None:
    for i, arg in enumerate(argv):
        for flag in flags:
            if arg == flag and i + 1 < len(argv):
                return argv[i + 1]
            if arg.startswith(flag + "="):
                return arg.split("=", 1)[1]
    return None


@dataclass(frozen=True)
class LevelRoofline:
    concurrency: float  # the level's; a request-rate level's mean requests in flight (achieved_concurrency)
    context_len: float
    distinct_experts: float | None
    weight_bytes: float
    kv_bytes: float
    mamba_bytes: float  # Mamba state read and written back (hybrid models; 0 otherwise)
    step_bytes: float
    ceiling_tok_s: float
    measured_tok_s: float | None
    percent_of_limit: float | None  # from output tok/s over the level's wall time (prefill included)
    tpot_ms: float | None
    percent_of_limit_decode: float | None  # from mean TPOT: the decode steps alone
    request_rate: float | str | None = None  # set on a request-rate level


@dataclass(frozen=True)
class Roofline:
    applies: bool
    reason: str  # why it does not apply, or what it assumed
    bandwidth: Bandwidth | None = None
    weight_dtype: str | None = None
    kv_dtype: str | None = None
    context_len: float | None = None
    ceiling_per_user_tok_s: float | None = None  # at c=1
    levels: list[LevelRoofline] = field(default_factory=list)
    mamba_state_bytes_per_seq: float | None = None  # hybrid models: one sequence's conv + SSM state
    skipped: list[str] = field(default_factory=list)  # levels left out, each with why

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


def _number(value: Any) -> float | None:
    return float(value) if isinstance(value, int | float) and not isinstance(value, bool) and value > 0 else None


def annotate(
    summary: dict[str, Any],
    model_config: dict[str, Any],
    gpu: dict[str, Any] | None = None,
    served_args: list[str] | None = None,
    hf_quant: dict[str, Any] | None = None,
) -> Roofline:
    """The roofline of every level of a bench summary (schema nemolaunch.bench/1). The GPU is `gpu` or the first
    of the summary's provenance.gpu (NVML); the weights' storage (config.json's quantization_config, else
    `hf_quant`, the hf_quant_config.json beside it), the KV cache's and tensor parallelism come from the config
    and the server's argv when nemolaunch launched it. The mean context of a decode step is taken as the level's
    prompt length (as the server counted it; else the sweep's input_len) + output_len / 2. A request-rate level
    has no fixed concurrency: its decode batch is taken as the mean requests in flight (achieved_concurrency)."""
    provenance = summary.get("provenance") or {}
    gpus = provenance.get("gpu") or []
    gpu = gpu or (gpus[0] if gpus else None)
    if gpu is None:
        return Roofline(
            False, "no NVIDIA GPU in this run (the CPU engine): a GPU memory-bandwidth roofline does not apply"
        )
    # the server's flags: from the provenance when nemolaunch launched it, else what the caller knows (a shape
    # folder records the flags it is served with, --quantization fp8 among them)
    argv = [str(a) for a in ((provenance.get("launched_by_nemolaunch") or {}).get("argv") or served_args or [])]
    tp = int(_flag_value(argv, "--tensor-parallel-size", "-tp") or 1)
    bandwidth = gpu_bandwidth(gpu, tp)
    if bandwidth is None:
        return Roofline(
            False, f"no memory bandwidth known for {gpu.get('name')!r} (NVML gave none, no datasheet entry)"
        )
    try:
        traffic = model_traffic(model_config)
        weights = quantization_of(model_config, argv, hf_quant)
    except RooflineError as e:
        return Roofline(False, str(e), bandwidth)
    kv_flag = _flag_value(argv, "--kv-cache-dtype") or "auto"
    # "auto" is the checkpoint's KV quantization when it has one (vLLM's resolve_kv_cache_dtype_string)
    kv_dtype = "fp8" if kv_flag.startswith("fp8") or (kv_flag == "auto" and weights.kv == "fp8") else "bf16"
    conv_dtype = state_dtype(_flag_value(argv, "--mamba-cache-dtype"), weights.base)
    ssm_dtype = state_dtype(_flag_value(argv, "--mamba-ssm-cache-dtype"), traffic.ssm_state_dtype)
    dummy = _flag_value(argv, "--load-format") == "dummy"
    workload = summary.get("workload") or {}

    def context_of(level: dict[str, Any]) -> float:
        # the first number of: the prompts as the server counted them, the level's length, the sweep's (a summary
        # written before 2026-12-02's fix has "<redacted>" for the first)
        given = (level.get("mean_prompt_tokens"), level.get("input_len"), workload.get("input_len"))
        prompt = next((v for v in map(_number, given) if v), 0.0)
        return prompt + float(workload.get("output_len") or 0) / 2

    def step(c: float, context: float) -> StepBytes:
        return step_bytes(
            traffic, c, context, weights, kv_dtype, conv_dtype=conv_dtype, ssm_dtype=ssm_dtype, dummy_weights=dummy
        )

    levels, skipped = [], []
    for level in summary.get("levels") or []:
        rate = level.get("request_rate") if level.get("concurrency") is None else None
        c = _number(level.get("concurrency")) or _number(level.get("achieved_concurrency"))
        if c is None:
            skipped.append(f"the level at request rate {rate} has no concurrency nor achieved_concurrency")
            continue
        context = context_of(level)
        sb = step(c, context)
        measured = level.get("output_throughput_tok_s")
        tpot = (level.get("tpot_ms") or {}).get("mean")
        levels.append(
            LevelRoofline(
                concurrency=int(c) if c.is_integer() else c,
                context_len=context,
                distinct_experts=sb.distinct_experts,
                weight_bytes=sb.weights,
                kv_bytes=sb.kv,
                mamba_bytes=sb.mamba,
                step_bytes=sb.total,
                ceiling_tok_s=ceiling_tok_s(sb.total, c, bandwidth.bytes_per_s),
                measured_tok_s=measured,
                percent_of_limit=percent_of_limit(measured, sb.total, c, bandwidth.bytes_per_s) if measured else None,
                tpot_ms=tpot,
                percent_of_limit_decode=100.0 * sb.total / (tpot / 1000) / bandwidth.bytes_per_s if tpot else None,
                request_rate=rate,
            )
        )
    context = levels[0].context_len if levels else context_of({})  # the ceiling at c=1: the first level's prompts
    one = step(1, context)
    state = mamba_state_bytes(traffic, conv_dtype, ssm_dtype) if traffic.mamba_layers else None
    reason = (
        f"{bandwidth.gpu_name} x{tp}, {bandwidth.bytes_per_s / 1e12:.2f} TB/s ({bandwidth.source}); weights "
        f"{weights.label}, KV cache {kv_dtype}"
        + (f", Mamba state {state / 1e6:.1f} MB per sequence (SSM {ssm_dtype}, conv {conv_dtype})" if state else "")
        + f", mean context {context:g} tokens"
        + (
            f"; routed experts: the same {traffic.top_k} per layer at every level (dummy weights: the router's "
            "correction bias picks them)"
            if dummy and traffic.biased_router
            else ""
        )
    )
    return Roofline(
        True,
        reason,
        bandwidth,
        weights.label,
        kv_dtype,
        context,
        ceiling_tok_s(one.total, 1, bandwidth.bytes_per_s),
        levels,
        state,
        skipped,
    )


def annotate_files(summary: Path, model: Path) -> Roofline:
    """`nemolaunch roofline SUMMARY --model DIR`: a bench summary.json against a model folder (or its config.json).
    A shape folder records the flags it is served with (--quantization fp8 sets the weights' bytes)."""
    from launcher.documents import read_json
    from launcher.model.shapes import MARKER, launch_args

    doc = read_json(summary, "give a bench summary.json")
    config = read_json(model / "config.json" if model.is_dir() else model, "give the model's config.json")
    served_args = launch_args(str(model), [])[0] if (model / MARKER).is_file() else []
    return annotate(doc, config, served_args=served_args, hf_quant=read_hf_quant_config(model))


def exit_code(roofline: Roofline) -> ExitCode:
    """A roofline that does not apply (no GPU, no bandwidth known, an unknown architecture) is not ready."""
    return ExitCode.OK if roofline.applies else ExitCode.NOT_READY
