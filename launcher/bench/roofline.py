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

from launcher.errors import ExitCode

# Bytes per weight parameter, scales included: NVFP4 is 4 bits plus one FP8 scale per 16 values (0.5 + 1/16);
# MXFP4 one E8M0 scale per 32 (0.5 + 1/32); INT4 with a 16-bit scale per group of 128.
BYTES_PER_PARAM = {
    "fp32": 4.0,
    "bf16": 2.0,
    "fp16": 2.0,
    "fp8": 1.0,
    "int8": 1.0,
    "nvfp4": 0.5625,
    "mxfp4": 0.53125,
    "int4": 0.5 + 2 / 128,
}
_TORCH_DTYPES = {"float32": "fp32", "bfloat16": "bf16", "float16": "fp16", "half": "fp16"}

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


class RooflineError(ValueError):
    """The model's config can not be turned into a traffic model (a field missing, an unknown quantization)."""


@dataclass(frozen=True)
class ModelTraffic:
    """Parameters of a decoder-only transformer, split by how a decode step reads them (counts, not bytes)."""

    layers: int
    dense_params: int  # attention projections and dense MLPs of all layers: read every step, quantizable
    head_params: int  # lm_head (hidden x vocab): read every step, kept in the base dtype
    embed_params: int  # the input embedding: c rows gathered per step (counted in totals only, unless tied)
    moe_layers: int = 0
    experts: int = 0
    top_k: int = 0
    expert_params: int = 0  # one expert of one layer (gate, up, down)
    shared_params: int = 0  # per MoE layer: shared experts, read every step
    router_params: int = 0  # per MoE layer, base dtype
    kv_per_token: int = 0  # KV elements per token of context, all layers (full attention)
    window_kv_per_token: int = 0  # of those, on layers with a sliding window
    sliding_window: int | None = None

    @property
    def total_params(self) -> int:
        moe = self.moe_layers * (self.experts * self.expert_params + self.shared_params + self.router_params)
        return self.dense_params + self.head_params + self.embed_params + moe

    @property
    def active_params(self) -> int:
        """Read per token: every dense weight, the lm_head, and top-k experts per MoE layer."""
        moe = self.moe_layers * (self.top_k * self.expert_params + self.shared_params + self.router_params)
        return self.dense_params + self.head_params + moe


def _int(config: dict[str, Any], *keys: str, default: int | None = None) -> int:
    for key in keys:
        value = config.get(key)
        if isinstance(value, int) and not isinstance(value, bool):
            return value
    if default is not None:
        return default
    raise RooflineError(f"config.json has no {' or '.join(keys)}")


def model_traffic(config: dict[str, Any]) -> ModelTraffic:
    """From a Hugging Face config.json of a Llama/Qwen/Mixtral-style decoder (gated MLPs, GQA attention)."""
    config = {**config, **(config.get("text_config") or {})}
    if "kv_lora_rank" in config:
        raise RooflineError("multi-head latent attention (DeepSeek-style) is not modelled")
    hidden = _int(config, "hidden_size")
    layers = _int(config, "num_hidden_layers")
    heads = _int(config, "num_attention_heads")
    kv_heads = _int(config, "num_key_value_heads", default=heads)
    head_dim = _int(config, "head_dim", default=hidden // heads)
    vocab = _int(config, "vocab_size")
    attn = hidden * heads * head_dim * 2 + hidden * kv_heads * head_dim * 2  # q and o; k and v
    experts = _int(config, "num_experts", "num_local_experts", "n_routed_experts", default=0)
    moe_layers, dense_mlp_layers = 0, layers
    expert = shared = router = top_k = 0
    if experts:
        top_k = _int(config, "num_experts_per_tok", "moe_topk")
        expert = 3 * hidden * _int(config, "moe_intermediate_size", "intermediate_size")
        shared = 3 * hidden * _int(config, "shared_expert_intermediate_size", default=0)
        router = hidden * experts
        step = _int(config, "decoder_sparse_step", default=1) or 1
        dense_only = set(config.get("mlp_only_layers") or [])
        moe_layers = sum(1 for i in range(layers) if i not in dense_only and (i + 1) % step == 0)
        dense_mlp_layers = layers - moe_layers
    dense_mlp = 3 * hidden * _int(config, "intermediate_size", default=0) if dense_mlp_layers else 0
    window = config.get("sliding_window") if config.get("use_sliding_window", True) is not False else None
    kv_layer = kv_heads * head_dim * 2
    return ModelTraffic(
        layers=layers,
        dense_params=layers * attn + dense_mlp_layers * dense_mlp,
        head_params=hidden * vocab,
        embed_params=0 if config.get("tie_word_embeddings") else hidden * vocab,
        moe_layers=moe_layers,
        experts=experts,
        top_k=top_k,
        expert_params=expert,
        shared_params=shared,
        router_params=router,
        kv_per_token=0 if window else layers * kv_layer,
        window_kv_per_token=layers * kv_layer if window else 0,
        sliding_window=window if isinstance(window, int) else None,
    )


def expected_distinct_experts(experts: int, top_k: int, tokens: int) -> float:
    """Experts of one layer that at least one of `tokens` is routed to, when each token picks top_k of the experts
    uniformly: E x (1 - (1 - k/E)^tokens). It is k at one token and approaches E as the batch grows."""
    if not experts:
        return 0.0
    return experts * (1.0 - (1.0 - top_k / experts) ** tokens)


@dataclass(frozen=True)
class StepBytes:
    weights: float
    kv: float
    distinct_experts: float | None

    @property
    def total(self) -> float:
        return self.weights + self.kv


def step_bytes(
    traffic: ModelTraffic,
    concurrency: int,
    context_len: float,
    weight_dtype: str = "bf16",
    kv_dtype: str = "bf16",
    base_dtype: str = "bf16",
) -> StepBytes:
    """Bytes one decode step reads at `concurrency` sequences of `context_len` tokens each. Quantization applies
    to the attention, MLP and expert weights; the lm_head and the router stay in the base dtype (as vLLM's online
    FP8 and NVIDIA's NVFP4 checkpoints keep them)."""
    q, base, kv = BYTES_PER_PARAM[weight_dtype], BYTES_PER_PARAM[base_dtype], BYTES_PER_PARAM[kv_dtype]
    distinct = expected_distinct_experts(traffic.experts, traffic.top_k, concurrency) if traffic.experts else None
    moe = traffic.moe_layers * (
        q * ((distinct or 0.0) * traffic.expert_params + traffic.shared_params) + base * traffic.router_params
    )
    weights = q * traffic.dense_params + base * traffic.head_params + moe
    windowed = min(context_len, traffic.sliding_window) if traffic.sliding_window else context_len
    kv_bytes = concurrency * kv * (traffic.kv_per_token * context_len + traffic.window_kv_per_token * windowed)
    return StepBytes(weights, kv_bytes, distinct)


def ceiling_tok_s(bytes_per_step: float, concurrency: int, bandwidth: float) -> float:
    """The most output tokens per second (all users together) that memory bandwidth allows."""
    return concurrency * bandwidth / bytes_per_step


def percent_of_limit(measured_tok_s: float, bytes_per_step: float, concurrency: int, bandwidth: float) -> float:
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


def weight_dtype_of(config: dict[str, Any], server_argv: list[str]) -> str:
    """The weights' storage: the checkpoint's quantization_config, else vLLM's --quantization fp8 (online), else
    torch_dtype."""
    qc = config.get("quantization_config")
    if isinstance(qc, dict):
        method = str(qc.get("quant_method", "")).lower()
        algo = str(qc.get("quant_algo") or (qc.get("quantization") or {}).get("quant_algo") or "").upper()
        if method.startswith("modelopt") and "FP4" in algo:
            return "nvfp4"
        if method in ("fp8", "fbgemm_fp8") or (method.startswith("modelopt") and "FP8" in algo):
            return "fp8"
        if method == "mxfp4":
            return "mxfp4"
        if method == "compressed-tensors":
            weights = [g.get("weights") or {} for g in (qc.get("config_groups") or {}).values()]
            bits = {(w.get("num_bits"), w.get("type")) for w in weights}
            if (4, "float") in bits:
                return "nvfp4"
            if (8, "float") in bits or (8, "int") in bits:
                return "fp8" if (8, "float") in bits else "int8"
            if (4, "int") in bits:
                return "int4"
        raise RooflineError(f"quantization {method or qc!r} is not modelled")
    online = _flag_value(server_argv, "--quantization")
    if online == "fp8":
        return "fp8"
    return _TORCH_DTYPES.get(str(config.get("torch_dtype") or config.get("dtype") or "bfloat16"), "bf16")


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
    concurrency: int
    context_len: float
    distinct_experts: float | None
    weight_bytes: float
    kv_bytes: float
    step_bytes: float
    ceiling_tok_s: float
    measured_tok_s: float | None
    percent_of_limit: float | None  # from output tok/s over the level's wall time (prefill included)
    tpot_ms: float | None
    percent_of_limit_decode: float | None  # from mean TPOT: the decode steps alone


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

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


def annotate(
    summary: dict[str, Any],
    model_config: dict[str, Any],
    gpu: dict[str, Any] | None = None,
    served_args: list[str] | None = None,
) -> Roofline:
    """The roofline of every level of a bench summary (schema nemolaunch.bench/1). The GPU is `gpu` or the first
    of the summary's provenance.gpu (NVML); the weights' dtype, the KV cache's and tensor parallelism come from the
    config and the server's argv when nemolaunch launched it. The mean context of a decode step is taken as the
    level's prompt length (as the server counted it; else the sweep's input_len) + output_len / 2."""
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
        weight_dtype = weight_dtype_of(model_config, argv)
    except RooflineError as e:
        return Roofline(False, str(e), bandwidth)
    kv_flag = _flag_value(argv, "--kv-cache-dtype") or "auto"
    kv_dtype = "fp8" if kv_flag.startswith("fp8") else "bf16"
    workload = summary.get("workload") or {}

    def context_of(level: dict[str, Any]) -> float:
        # the first number of: the prompts as the server counted them, the level's length, the sweep's (a summary
        # written before 2026-12-02's fix has "<redacted>" for the first)
        given = (level.get("mean_prompt_tokens"), level.get("input_len"), workload.get("input_len"))
        prompt = next((v for v in given if isinstance(v, int | float) and not isinstance(v, bool) and v > 0), 0)
        return float(prompt) + float(workload.get("output_len") or 0) / 2

    levels = []
    for level in summary.get("levels") or []:
        c = int(level["concurrency"])
        context = context_of(level)
        sb = step_bytes(traffic, c, context, weight_dtype, kv_dtype)
        measured = level.get("output_throughput_tok_s")
        tpot = (level.get("tpot_ms") or {}).get("mean")
        levels.append(
            LevelRoofline(
                concurrency=c,
                context_len=context,
                distinct_experts=sb.distinct_experts,
                weight_bytes=sb.weights,
                kv_bytes=sb.kv,
                step_bytes=sb.total,
                ceiling_tok_s=ceiling_tok_s(sb.total, c, bandwidth.bytes_per_s),
                measured_tok_s=measured,
                percent_of_limit=percent_of_limit(measured, sb.total, c, bandwidth.bytes_per_s) if measured else None,
                tpot_ms=tpot,
                percent_of_limit_decode=100.0 * sb.total / (tpot / 1000) / bandwidth.bytes_per_s if tpot else None,
            )
        )
    context = levels[0].context_len if levels else context_of({})  # the ceiling at c=1: the first level's prompts
    one = step_bytes(traffic, 1, context, weight_dtype, kv_dtype)
    reason = (
        f"{bandwidth.gpu_name} x{tp}, {bandwidth.bytes_per_s / 1e12:.2f} TB/s ({bandwidth.source}); weights "
        f"{weight_dtype}, KV cache {kv_dtype}, mean context {context:g} tokens"
    )
    return Roofline(
        True,
        reason,
        bandwidth,
        weight_dtype,
        kv_dtype,
        context,
        ceiling_tok_s(one.total, 1, bandwidth.bytes_per_s),
        levels,
    )


def annotate_files(summary: Path, model: Path) -> Roofline:
    """`nemolaunch roofline SUMMARY --model DIR`: a bench summary.json against a model folder (or its config.json).
    A shape folder records the flags it is served with (--quantization fp8 sets the weights' bytes)."""
    from launcher.documents import read_json
    from launcher.model.shapes import MARKER, launch_args

    doc = read_json(summary, "give a bench summary.json")
    config = read_json(model / "config.json" if model.is_dir() else model, "give the model's config.json")
    served_args = launch_args(str(model), [])[0] if (model / MARKER).is_file() else []
    return annotate(doc, config, served_args=served_args)


def exit_code(roofline: Roofline) -> ExitCode:
    """A roofline that does not apply (no GPU, no bandwidth known, an unknown architecture) is not ready."""
    return ExitCode.OK if roofline.applies else ExitCode.NOT_READY
