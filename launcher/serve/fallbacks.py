"""Silent fallbacks in a vLLM startup log: every place vLLM took a slower path than its own first choice, or than
the profile asked for, named with its fix and the profile overrides that force the alternative.

vLLM logs its choices at INFO; a fallback reads like any other line ("Using 'MARLIN' NvFp4 MoE backend out of
potential backends: [...]"), so a user sees the speed and not the cause. The chains below are vLLM 0.26's, read
from its wheel (vllm/model_executor/kernels/linear/__init__.py `_POSSIBLE_*_KERNELS[CUDA]`, the MoE oracles'
AVAILABLE_BACKENDS as the log prints them, cuda.py's attention priorities). What is named:

- a MoE backend other than the profile's moe_backend, or after the first CUDA candidate vLLM printed;
- Marlin emulation of FP4 (FP4 weights dequantized in the kernel, BF16 math: W4A16), and vLLM's warning "Your GPU
  does not have native support for FP4 computation";
- a linear kernel after the first of its chain that the GPU could run (FP8, block FP8, NVFP4; Marlin FP8 is
  forced-only, and a kernel the profile disables is not counted);
- an attention backend other than the first valid one, Triton attention, a --block-size that precluded better ones;
- CUDA graphs lowered (PIECEWISE, FULL_DECODE_ONLY) or off (NONE, enforce-eager);
- DeepGEMM unavailable or disabled; default (untuned) fused-MoE configs; FlashInfer's default tactics for lack of an
  autotune cache.

Each `Fallback` carries `alternatives`: profile overrides {"vllm": {setting: value}, "env": {NAME: value}} that
build the other side of an A/B run (`ab --against-fallbacks`); an "extra_args" list is appended to the profile's.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from launcher.profiles.write import MOE_FLAG

if TYPE_CHECKING:
    from launcher.profiles.profile import ServingProfile

# The log line's prefix: "(EngineCore pid=12) INFO 12-03 10:44:32 [file.py:728] " (or without the process tag).
_PREFIX = re.compile(r"^(?:\([^)]*\)\s+)?(?:[A-Z]+\s+\d\d-\d\d \d\d:\d\d:\d\d(?:\.\d+)?\s+\[[^\]]*\]\s+)?")
_QUOTES = str.maketrans({"\u2018": "'", "\u2019": "'", '"': "'"})

# MoE candidates vLLM prints on every platform; those run only off CUDA (ROCm, Intel, CPU) are not CUDA's first.
_NOT_CUDA = {"AITER", "XPU", "CPU", "HPC", "FLYDSL"}
# MoE backend names as the log prints them -> the profile's moe_backend (vLLM's --moe-backend), every MoE chain's
_MOE_FLAG = {name: flag for chain in MOE_FLAG.values() for name, flag in chain.items()}
# Linear kernel chains on CUDA, in vLLM 0.26's priority order, each kernel with its --linear-backend value.
_LINEAR_CHAINS: dict[str, list[tuple[str, str]]] = {
    "FP8": [
        ("MarlinFP8ScaledMMLinearKernel", "marlin"),
        ("FlashInferFP8ScaledMMLinearKernel", "flashinfer_cutlass"),
        ("CutlassFP8ScaledMMLinearKernel", "cutlass"),
        ("PerTensorTorchFP8ScaledMMLinearKernel", "torch"),
        ("ChannelWiseTorchFP8ScaledMMLinearKernel", "torch"),
        ("HummingFP8ScaledMMLinearKernel", "humming"),
    ],
    "block FP8": [
        ("FlashInferFp8DeepGEMMDynamicBlockScaledKernel", "flashinfer_cutlass"),
        ("DeepGemmFp8BlockScaledMMKernel", "deep_gemm"),
        ("CutlassFp8BlockScaledMMKernel", "cutlass"),
        ("TritonFp8BlockScaledMMKernel", "triton"),
    ],
    "NVFP4": [
        ("FlashInferCuteDslNvFp4LinearKernel", "flashinfer_cutedsl"),
        ("FlashInferCutlassNvFp4LinearKernel", "flashinfer_cutlass"),
        ("CutlassNvFp4LinearKernel", "cutlass"),
        ("MarlinNvFp4LinearKernel", "marlin"),
        ("FlashInferTrtllmNvFp4LinearKernel", "flashinfer_trtllm"),
        ("FlashInferCudnnNvFp4LinearKernel", "flashinfer_cudnn"),
        ("FbgemmNvFp4LinearKernel", "fbgemm"),
        ("EmulationNvFp4LinearKernel", "emulation"),
        ("HummingNvFp4LinearKernel", "humming"),
    ],
}
_FORCED_ONLY = {"MarlinFP8ScaledMMLinearKernel"}  # selected only under VLLM_TEST_FORCE_FP8_MARLIN
_FULL_GRAPH_ATTENTION = ("FLASH_ATTN", "FLASHINFER")  # attention backends that capture full CUDA graphs
_FP4_EMULATION = (
    "Marlin runs FP4 weights as W4A16: they are dequantized to BF16 in the kernel, no FP4 tensor cores are used"
)


@dataclass(frozen=True)
class Alternative:
    label: str  # "moe_backend = 'flashinfer_cutlass'"
    overrides: dict[str, Any]  # {"vllm": {...}} and/or {"env": {...}}


@dataclass(frozen=True)
class Fallback:
    kind: str  # moe-backend, fp4-emulation, linear-kernel, attention, cuda-graphs, deep-gemm, moe-config, autotune
    what: str  # what vLLM did instead of what
    fix: str  # the profile setting or step that gives the alternative (or why there is none here)
    line_no: int  # 1-based, in the log
    line: str  # the log line, prefix removed
    alternatives: tuple[Alternative, ...] = ()
    asked: bool = False  # the profile asked for this choice: named, not a surprise

    def to_json(self) -> dict[str, Any]:
        return {**self.__dict__, "alternatives": [a.__dict__ for a in self.alternatives]}


@dataclass
class _Context:
    settings: dict[str, Any]
    env: dict[str, str]
    found: list[Fallback] = field(default_factory=list)


def _vllm(setting: str, value: Any) -> Alternative:
    return Alternative(f"{setting} = {value!r}", {"vllm": {setting: value}})


def _linear(backend: str) -> Alternative:
    return Alternative(f"--linear-backend {backend}", {"vllm": {"extra_args": ["--linear-backend", backend]}})


def _moe(ctx: _Context, no: int, line: str, chosen: str, kind: str, listed: str) -> None:
    candidates = [c.strip(" '") for c in listed.split(",") if c.strip(" '")]
    cuda = [c for c in candidates if c not in _NOT_CUDA and not c.startswith("BATCHED_")]
    asked = str(ctx.settings.get("moe_backend") or "").lower()
    fp4 = chosen == "MARLIN" and kind.lower() in ("nvfp4", "mxfp4")
    if not fp4 and (not cuda or chosen == cuda[0]) and (not asked or _MOE_FLAG.get(chosen) == asked):
        return
    ahead = cuda[: cuda.index(chosen)] if chosen in cuda else cuda
    alts = tuple(_vllm("moe_backend", _MOE_FLAG[c]) for c in ahead if c in _MOE_FLAG)
    what = f"{kind} MoE on {chosen}" + (
        f", not {cuda[0]} (vLLM's first CUDA candidate)" if cuda and cuda[0] != chosen else ""
    )
    if fp4:
        what += f": {_FP4_EMULATION}"
    fix = (
        "set moe_backend in the profile to one of " + ", ".join(a.label.split(" = ")[1] for a in alts)
        if alts
        else "none in this vLLM on this GPU: no other candidate precedes it"
    ) + (" (a GPU without FP4 tensor cores refuses them at start, which says why)" if fp4 else "")
    ctx.found.append(
        Fallback("fp4-emulation" if fp4 else "moe-backend", what, fix, no, line, alts, _MOE_FLAG.get(chosen) == asked)
    )


def _linear_kernel(ctx: _Context, no: int, line: str, chosen: str) -> None:
    disabled = set(ctx.settings.get("disabled_kernels") or []) | set(
        filter(None, ctx.env.get("VLLM_DISABLED_KERNELS", "").split(","))
    )
    for chain_name, chain in _LINEAR_CHAINS.items():
        names = [k for k, _ in chain]
        if chosen not in names:
            continue
        usable = [k for k in names if k not in _FORCED_ONLY and k not in disabled]
        if chosen == usable[0]:
            return
        ahead = [(k, b) for k, b in chain if k in usable[: usable.index(chosen)]] if chosen in usable else []
        alts = tuple(_linear(b) for _, b in dict((b, (k, b)) for k, b in ahead).values())
        fp4 = chosen.startswith("Marlin") and chain_name == "NVFP4"
        what = f"{chain_name} linear layers on {chosen}, not {usable[0]}" + (f": {_FP4_EMULATION}" if fp4 else "")
        fix = (
            "give the profile extra_args " + " or ".join(a.label for a in alts)
            if alts
            else "nothing ahead of it can be forced"
        ) + "; a kernel vLLM rejects on this GPU fails the start, which says why"
        ctx.found.append(Fallback("fp4-emulation" if fp4 else "linear-kernel", what, fix, no, line, alts))
        return


def _attention(ctx: _Context, no: int, line: str, chosen: str, listed: str | None) -> None:
    asked = str(ctx.settings.get("attention_backend") or "").upper()
    valid = [c.strip(" '") for c in (listed or "").split(",") if c.strip(" '")]
    first = valid[0] if valid else None
    if chosen != "TRITON_ATTN" and (first is None or chosen == first) and (not asked or asked == chosen):
        return
    others = [c for c in (valid or list(_FULL_GRAPH_ATTENTION)) if c != chosen]
    alts = tuple(_vllm("attention_backend", c) for c in others)
    what = f"attention on {chosen}" + (
        f", not {first} (vLLM's first valid backend)" if first and first != chosen else ""
    )
    if chosen == "TRITON_ATTN":
        what += "; Triton attention" + (" is the only backend vLLM found valid here" if valid == [chosen] else "")
    fix = ("set attention_backend to " + " or ".join(a.label.split(" = ")[1] for a in alts)) if alts else "none"
    ctx.found.append(Fallback("attention", what, fix, no, line, alts, asked == chosen))


def _graphs(ctx: _Context, no: int, line: str, mode: str, backend: str | None) -> None:
    alts: tuple[Alternative, ...]
    if mode == "NONE":
        what, alts = "CUDA graphs off", (_vllm("cuda_graphs", True),)
    else:
        what = f"CUDA graphs lowered to {mode}"
        alts = tuple(_vllm("attention_backend", b) for b in _FULL_GRAPH_ATTENTION if b != backend)
    cause = f" ({backend} cannot capture full graphs)" if backend else ""
    fix = (
        "cuda_graphs = true in the profile"
        if mode == "NONE" and not backend
        else ("an attention backend that captures full graphs: " + ", ".join(a.label for a in alts))
    )
    ctx.found.append(
        Fallback("cuda-graphs", what + cause, fix, no, line, alts, ctx.settings.get("cuda_graphs") is False)
    )


Handler = Callable[[_Context, int, str, "re.Match[str]"], None]
_RULES: list[tuple[re.Pattern[str], Handler]] = [
    (
        re.compile(r"Using '?(\w+)'? (\w+) MoE backend out of potential backends: \[(.*)\]"),
        lambda ctx, no, line, m: _moe(ctx, no, line, m[1], m[2], m[3]),
    ),
    (
        re.compile(r"Using (?:NvFp4LinearBackend\.)?(\w+) for NVFP4 GEMM"),
        lambda ctx, no, line, m: _nvfp4_name(ctx, no, line, m[1]),
    ),
    (
        re.compile(r"Selected (\w+Kernel) for \w+"),
        lambda ctx, no, line, m: _linear_kernel(ctx, no, line, m[1]),
    ),
    (
        re.compile(r"Using (\w+) attention backend out of potential backends: \[(.*)\]"),
        lambda ctx, no, line, m: _attention(ctx, no, line, m[1], m[2]),
    ),
    (
        re.compile(r"^Using (?:AttentionBackendEnum\.)?(\w*ATTN\w*|FLASHINFER\w*|FLEX_ATTENTION) backend\.$"),
        lambda ctx, no, line, m: _attention(ctx, no, line, m[1], None),
    ),
    (
        re.compile(r"--block-size \d+ precluded higher-priority backend\(s\) ([\w, ]+)\. Using (\w+) instead"),
        lambda ctx, no, line, m: _attention(ctx, no, line, m[2], m[1] + ", " + m[2]),
    ),
    (
        re.compile(
            r"CUDAGraphMode\.\w+ is not supported ?with (?:spec-decode for attention backend )?(\w+)"
            r".*setting cudagraph_mode=(\w+)"
        ),
        lambda ctx, no, line, m: _graphs(ctx, no, line, m[2], m[1]),
    ),
    (
        re.compile(r"Overriding cudagraph_mode (?:from \w+ )?to (\w+)"),
        lambda ctx, no, line, m: _graphs(ctx, no, line, m[1], None),
    ),
    (
        re.compile(r"Enforce eager set, disabling torch\.compile(?: and|,) CUDAGraphs"),  # 0.26; 0.32 adds JIT warmup
        lambda ctx, no, line, m: _graphs(ctx, no, line, "NONE", None),
    ),
]
# Lines that name one fallback each, with no choice to force from the profile: (pattern, kind, what, fix).
_NAMED: list[tuple[re.Pattern[str], str, str, str]] = [
    (
        re.compile(r"does not have native support for FP4"),
        "fp4-emulation",
        f"vLLM's warning: no FP4 tensor cores on this GPU; {_FP4_EMULATION}",
        "a GPU with FP4 tensor cores (SM100, SM120); on this one Marlin is vLLM's only FP4 path",
    ),
    (
        re.compile(r"(?:^|\s)Using Marlin backend$"),
        "fp4-emulation",
        f"FP4 MoE on Marlin (older vLLM's wording, MXFP4 or NVFP4): {_FP4_EMULATION}",
        "moe_backend in the profile, where this vLLM offers another FP4 MoE backend for this GPU",
    ),
    (
        re.compile(r"Failed to import vendored deep_gemm|Vendored deep_gemm not found|DeepGEMM not supported on this"),
        "deep-gemm",
        "DeepGEMM unavailable: block-FP8 layers and MoE use the next kernel of their chain",
        "a vLLM build with DeepGEMM for this GPU (SM90, SM100); VLLM_USE_DEEP_GEMM=0 in [env] turns it off on purpose",
    ),
    (
        re.compile(r"Using default MoE config\. Performance might be sub-optimal"),
        "moe-config",
        "fused-MoE Triton kernel on vLLM's default tile config (no tuned file for this GPU and shape)",
        "tune one (vLLM's benchmarks/kernels/benchmark_moe.py --tune); VLLM_TUNED_CONFIG_FOLDER in [env] finds it",
    ),
    (
        re.compile(r"No FlashInfer autotune cache entries found\. ?Falling back to default tactics"),
        "autotune",
        "FlashInfer kernels on default tactics (no autotune cache yet: a first start on this machine)",
        "start once more here: vLLM reuses ~/.cache/vllm/flashinfer_autotune_cache",
    ),
]


def _nvfp4_name(ctx: _Context, no: int, line: str, name: str) -> None:
    """vLLM 0.26 names the class (MarlinNvFp4LinearKernel); older vLLM the enum (NvFp4LinearBackend.MARLIN)."""
    known = {k.lower().removesuffix("nvfp4linearkernel"): k for k, _ in _LINEAR_CHAINS["NVFP4"]}
    _linear_kernel(ctx, no, line, known.get(name.lower().replace("_", ""), name))


def detect(log: str, settings: dict[str, Any] | None = None, env: dict[str, str] | None = None) -> list[Fallback]:
    """Every fallback in a vLLM log (startup and after), in log order, each line's once. `settings` and `env` are
    the profile's [vllm] and [env] tables: what the profile asked for is marked, and kernels it disabled are not
    counted as skipped."""
    ctx = _Context(dict(settings or {}), dict(env or {}))
    seen: set[str] = set()
    for no, raw in enumerate(log.splitlines(), 1):
        line = _PREFIX.sub("", raw.strip()).translate(_QUOTES)
        if not line or line in seen:
            continue
        for pattern, handle in _RULES:
            if match := pattern.search(line):
                seen.add(line)
                handle(ctx, no, line, match)
                break
        else:
            for pattern, kind, what, fix in _NAMED:
                if pattern.search(line):
                    seen.add(line)
                    ctx.found.append(Fallback(kind, what, fix, no, line))
                    break
    return ctx.found


def alternatives(
    log: str, settings: dict[str, Any] | None = None, env: dict[str, str] | None = None
) -> list[tuple[Fallback, list[dict[str, Any]]]]:
    """For `ab --against-fallbacks`: each fallback that has an alternative, with the overrides that force each one
    (to merge into the profile's [vllm] / [env]; "extra_args" appends)."""
    return [(f, [a.overrides for a in f.alternatives]) for f in detect(log, settings, env) if f.alternatives]


def in_log(log_path: Path, profile: ServingProfile) -> list[Fallback]:
    """The fallbacks in a server log that `profile` started; none when the log can not be read."""
    try:
        text = log_path.read_text(encoding="utf-8", errors="replace")
    except OSError:
        return []
    return detect(text, profile.settings, profile.env)


def line_of(fallback: Fallback) -> str:
    """One line for the console: what vLLM did, and how to get the alternative."""
    asked = " (the profile asks for it)" if fallback.asked else ""
    return f"fallback: {fallback.what}{asked}; fix: {fallback.fix} (log line {fallback.line_no})"
