"""The probe harness: set up, check and time kernels of vLLM's chains on this GPU.

    python kernel_probe.py --serve [--chains A,B]
                                      imports torch and vLLM once (the modules of those chains), prints
                                      {"kernels": [...]}, reads one request
                                      {"jobs": [{"chain", "kernel", "shapes": [[M, N, K], ...], "layer": {...}}],
                                      "timeout_s", "parallel"} on stdin, runs each job in a forked child
                                      (isolate.py) and prints one JSON line per kernel as it ends, then
                                      {"done": true}

If importing a preloaded module initializes CUDA (forked children could not use the GPU then), the harness starts
again without that module (the children that need it import it themselves); the hello says which and how long each
preload took.

Each kernel is called through the library call vLLM uses for it. Inputs are fresh random values, never zeros;
where a kernel writes into a buffer it is given, the buffer is poisoned with NaN first so an unwritten element
fails the check. The reference is computed in float32 from the same (dequantized) inputs, so the check measures
the kernel, not the quantization. Times are medians of CUDA-graph replays (events around each replay), falling
back to plain launches if capture fails.
"""

import importlib
import inspect
import json
import math
import os
import re
import statistics
import sys
import time
from collections.abc import Callable
from types import SimpleNamespace

import torch
from isolate import Build, run_isolated
from verdict import NotProbed, Unsupported, classify

FP8 = torch.float8_e4m3fn
FP8_MAX = 448.0
# relative Frobenius error allowed: bf16 output of exact inputs; and where the kernel itself quantizes an
# intermediate to FP8 (e4m3 keeps 3 mantissa bits, so a few percent is that rounding, not a bug)
BOUND = {"bf16": 1e-2, "fp8-internal": 6e-2}
# lines a kernel prints when an autotuner skips tactics or a library falls back: counted per kernel
NOISE = re.compile(r"Skipping tactic|\[Autotuner\]|Error Internal|UserWarning|falling back", re.IGNORECASE)
# imported once by the harness so that each forked child starts warm, per chain (only the chains of this run:
# on the H200, warm, vllm._custom_ops took 8-10 s and fused_moe 8-9 s). Not flashinfer: importing it (0.6.14)
# initializes CUDA, so the harness had to start again and import everything twice (harness ready at 42-55 s
# instead of ~20, H200 2026-12-02); the FlashInfer kernels' children import it themselves.
_MARLIN_FP8 = "vllm.model_executor.layers.quantization.utils.marlin_utils_fp8"
_MARLIN_FP4 = "vllm.model_executor.layers.quantization.utils.marlin_utils_fp4"
_MOE = (
    "vllm.model_executor.layers.fused_moe",
    "vllm.model_executor.layers.fused_moe.experts.cutlass_moe",
    "vllm.model_executor.layers.fused_moe.experts.marlin_moe",
)
PRELOAD: dict[str, tuple[str, ...]] = {
    "": ("vllm._custom_ops",),
    "fp8_dense": (_MARLIN_FP8,),
    "nvfp4_dense": (_MARLIN_FP4,),
    "fp8_moe": (*_MOE, _MARLIN_FP8),
    "nvfp4_moe": (*_MOE, _MARLIN_FP4),
    "attention": ("vllm.v1.attention.ops.triton_unified_attention", "vllm.vllm_flash_attn"),
}


def preloads(chains: list[str] | None) -> list[str]:
    """The modules to import up front for these chains (every chain's when None), each once, in order."""
    picked = [""] + (list(PRELOAD) if chains is None else chains)
    return list(dict.fromkeys(m for c in picked for m in PRELOAD.get(c, ())))


def capability() -> int:
    major, minor = torch.cuda.get_device_capability()
    return major * 10 + minor


def quantize_fp8(x: torch.Tensor, per_row: bool) -> tuple[torch.Tensor, torch.Tensor]:
    amax = x.abs().amax(dim=1, keepdim=True) if per_row else x.abs().amax()
    scale = (amax.float() / torch.finfo(FP8).max).clamp(min=1e-12)
    return (x / scale).to(FP8), scale


def fp8_inputs(m: int, n: int, k: int, per_row: bool):
    a = torch.randn(m, k, device="cuda", dtype=torch.bfloat16)
    w = torch.randn(n, k, device="cuda", dtype=torch.bfloat16) / k**0.5
    qa, sa = quantize_fp8(a, per_row)
    qw, sw = quantize_fp8(w, per_row)
    return qa, sa, qw, sw, lambda: (qa.float() * sa) @ (qw.float() * sw).t()


def fp8_torch(per_row: bool):
    def setup(m, n, k):
        qa, sa, qw, sw, reference = fp8_inputs(m, n, k, per_row)
        sa = sa.reshape(m, 1) if per_row else sa.reshape(())
        sw = sw.reshape(1, n) if per_row else sw.reshape(())
        return (lambda: torch._scaled_mm(qa, qw.t(), scale_a=sa, scale_b=sw, out_dtype=torch.bfloat16)), reference

    return setup


def fp8_cutlass(m, n, k):
    from vllm import _custom_ops as ops

    qa, sa, qw, sw, reference = fp8_inputs(m, n, k, per_row=False)
    if not ops.cutlass_scaled_mm_supports_fp8(capability()):
        raise Unsupported("vLLM's CUTLASS build has no FP8 scaled-mm for this capability")
    b = qw.t()  # K x N, column-major as vLLM stores it
    return (
        lambda: ops.cutlass_scaled_mm(
            qa, b, scale_a=sa.reshape(1, 1), scale_b=sw.reshape(1, 1), out_dtype=torch.bfloat16
        )
    ), reference


def fp8_flashinfer(m, n, k):
    import flashinfer

    qa, sa, qw, sw, reference = fp8_inputs(m, n, k, per_row=False)
    a3, b3 = qa.unsqueeze(0), qw.t().unsqueeze(0)
    return (lambda: flashinfer.bmm_fp8(a3, b3, sa.reshape(()), sw.reshape(()), torch.bfloat16).squeeze(0)), reference


def bf16_baseline(m, n, k):
    a = torch.randn(m, k, device="cuda", dtype=torch.bfloat16)
    w = torch.randn(n, k, device="cuda", dtype=torch.bfloat16) / k**0.5
    return (lambda: a @ w.t()), lambda: a.float() @ w.float().t()


def nvfp4_torch(m, n, k):
    if not hasattr(torch, "float4_e2m1fn_x2"):
        raise Unsupported(f"torch {torch.__version__} has no float4_e2m1fn_x2")
    a = torch.randint(0, 255, (m, k // 2), device="cuda", dtype=torch.uint8).view(torch.float4_e2m1fn_x2)
    b = torch.randint(0, 255, (n, k // 2), device="cuda", dtype=torch.uint8).view(torch.float4_e2m1fn_x2)

    def blocks(rows: int) -> int:  # one e4m3 scale per 16 values, in cuBLAS's swizzled 128x4 tiles
        return -(-rows // 128) * 128 * (-(-(k // 16) // 4) * 4)

    sa = torch.ones(blocks(m), device="cuda", dtype=torch.float8_e4m3fn)
    sb = torch.ones(blocks(n), device="cuda", dtype=torch.float8_e4m3fn)
    # random packed codes: the reference would need an FP4 decoder, so numerics stay unchecked (never recommended)
    return (lambda: torch._scaled_mm(a, b.t(), scale_a=sa, scale_b=sb, out_dtype=torch.bfloat16)), None


def nvfp4_cutlass(m, n, k):
    from vllm import _custom_ops as ops

    if not ops.cutlass_scaled_mm_supports_fp4(capability()):
        raise Unsupported(f"vLLM's CUTLASS FP4 GEMM needs SM100+ (this GPU is sm_{capability()})")
    raise NotProbed("vLLM's CUTLASS FP4 GEMM runs here, but the probe cannot pack FP4 weights for it yet")


def marlin_workspace():
    from vllm.model_executor.layers.quantization.utils.marlin_utils import marlin_make_workspace_new

    return marlin_make_workspace_new(torch.device("cuda", torch.cuda.current_device()))


def fp8_marlin(m, n, k):
    """MarlinFP8: FP8 weights (one scale per output channel, as vLLM converts per-tensor checkpoints), bf16
    activations (W8A16)."""
    from vllm.model_executor.layers.quantization.utils.marlin_utils_fp8 import (
        apply_fp8_marlin_linear,
        marlin_quant_fp8_torch,
    )

    x = torch.randn(m, k, device="cuda", dtype=torch.bfloat16)
    w_ref, qweight, scales = marlin_quant_fp8_torch(torch.randn(n, k, device="cuda", dtype=torch.bfloat16) / k**0.5, -1)
    workspace = marlin_workspace()
    return (
        lambda: apply_fp8_marlin_linear(x, qweight, scales, workspace, n, k, None)
    ), lambda: x.float() @ w_ref.float()


def nvfp4_marlin(m, n, k):
    """MarlinNvFp4: NVFP4 weights (16-value blocks, e4m3 block scales, a global scale), bf16 activations."""
    from vllm.model_executor.layers.quantization.utils.marlin_utils_fp4 import (
        apply_fp4_marlin_linear,
        rand_marlin_weight_nvfp4_like,
    )

    x = torch.randn(m, k, device="cuda", dtype=torch.bfloat16)
    w = torch.randn(n, k, device="cuda", dtype=torch.bfloat16) / k**0.5
    w_ref, qweight, scales, global_scale = rand_marlin_weight_nvfp4_like(w, 16)
    workspace = marlin_workspace()
    return (
        lambda: apply_fp4_marlin_linear(x, qweight, scales, global_scale, workspace, n, k)
    ), lambda: x.float() @ w_ref.float()


def vllm_capability() -> int | None:
    """The capability as vLLM's platform sees it (None where it sees no CUDA device): the gates below ask vLLM's
    own checks, so they work (and say "not this device") without a GPU too."""
    from vllm.platforms import current_platform

    found = current_platform.get_device_capability()
    return found.to_int() if found is not None else None


def device_words() -> str:
    cap = vllm_capability()
    return f"sm_{cap}" if cap is not None else "this device (vLLM sees no CUDA GPU)"


def check_source(fn) -> str:
    """A vLLM check's own condition, one line (the reason it gives is its code: most have no message)."""
    try:
        lines = inspect.getsource(fn).splitlines()
    except (OSError, TypeError):
        return fn.__qualname__
    skip = ("@", "def ", '"""', "#", "p = current_platform")
    body = " ".join(line.strip() for line in lines if not line.strip().startswith(skip))
    return re.sub(r"\s+", " ", body.replace("return ", "")).replace("( ", "(").replace(" )", ")")[:240]


# the per-tensor schemes of the model's MoE weights, as vLLM's Fp8MoEMethod keys them: FP8 with static activation
# scales for a checkpoint that has them, dynamic ones for online FP8 (without a model: static, the widest scheme
# vLLM's per-tensor FP8 MoE kernels accept); NVFP4 static weight, dynamic activation scales
def moe_scheme(quant: str):
    from vllm.model_executor.layers.quantization.utils import quant_utils as qu

    if quant == "fp8":
        dynamic = LAYER.static_activations is False
        return qu.kFp8StaticTensorSym, qu.kFp8DynamicTensorSym if dynamic else qu.kFp8StaticTensorSym
    return qu.kNvfp4Static, qu.kNvfp4Dynamic


def check_moe_backend(quant: str, backend: str):
    """The experts class vLLM's oracle maps `backend` to, if one runs on this device with this quantization:
    vLLM's own _supports_current_device and _supports_quant_scheme decide; otherwise Unsupported, with the
    condition each class checks."""
    oracle = importlib.import_module(f"vllm.model_executor.layers.fused_moe.oracle.{quant}")
    enum = oracle.Fp8MoeBackend if quant == "fp8" else oracle.NvFp4MoeBackend
    if backend not in enum.__members__:
        raise ImportError(f"this vLLM has no {quant} MoE backend {backend}")
    weight_key, activation_key = moe_scheme(quant)
    reasons = []
    for cls in oracle.backend_to_kernel_cls(enum[backend]):
        if not cls._supports_current_device():
            reasons.append(f"{cls.__name__} not on {device_words()} ({check_source(cls._supports_current_device)})")
        elif not cls._supports_quant_scheme(weight_key, activation_key):
            reasons.append(f"{cls.__name__} not for {weight_key} x {activation_key} on {device_words()}")
        else:
            return cls
    raise Unsupported(f"vLLM's {quant} MoE backend {backend}: " + "; ".join(reasons))


def moe_gate(quant: str, backend: str):
    """A MoE backend vLLM runs only on other GPUs (SM100/SM120): vLLM's checks say why not here; where they say it
    runs, the probe that drives it is still to be written (not-probed), never a silent skip."""

    def setup(m, n, k):
        if backend == "HUMMING":
            humming_available()
        cls = check_moe_backend(quant, backend)
        raise NotProbed(f"vLLM's {cls.__name__} runs on {device_words()}, but nemolaunch has no probe driving it yet")

    return setup


def linear_gate(table: str, name: str):
    """A linear kernel vLLM runs only on other GPUs: its own is_supported(capability) says why not here."""

    def setup(m, n, k):
        from vllm.platforms.interface import PlatformEnum

        linear = importlib.import_module("vllm.model_executor.kernels.linear")
        kernel = next((c for c in getattr(linear, table)[PlatformEnum.CUDA] if c.__name__ == name), None)
        if kernel is None:
            raise ImportError(f"this vLLM has no {name} in {table}")
        ok, reason = kernel.is_supported(compute_capability=vllm_capability())
        if not ok:
            raise Unsupported(f"vLLM's {name}.is_supported on {device_words()}: {reason}")
        raise NotProbed(f"vLLM's {name} runs on {device_words()}, but nemolaunch has no probe driving it yet")

    return setup


def humming_available() -> None:
    from vllm.utils.import_utils import has_humming

    if not has_humming():
        raise ImportError("the optional humming package is not installed (vLLM's has_humming() is False)")


def linear_layer(n: int, k: int) -> torch.nn.Module:
    """The attributes vLLM's linear layers carry that kernels' process_weights_after_loading read."""
    layer = torch.nn.Module()
    layer.input_size_per_partition, layer.input_size, layer.output_size = k, k, n
    layer.output_partition_sizes, layer.logical_widths = [n], [n]
    layer.params_dtype, layer.has_bias = torch.bfloat16, False
    return layer


def parameter(t: torch.Tensor, **attrs) -> torch.nn.Parameter:
    p = torch.nn.Parameter(t, requires_grad=False)
    for name, value in attrs.items():
        setattr(p, name, value)
    return p


def fp8_humming(m, n, k):
    """vLLM's HummingFP8ScaledMMLinearKernel as Fp8LinearMethod leaves an online-FP8 layer for it: a per-tensor
    FP8 weight transposed to K x N, one weight scale, no input scale; then the kernel's own
    process_weights_after_loading and apply_weights (bf16 activations)."""
    humming_available()
    from vllm.model_executor.kernels.linear.scaled_mm.humming import HummingFP8ScaledMMLinearKernel
    from vllm.model_executor.kernels.linear.scaled_mm.ScaledMMLinearKernel import FP8ScaledMMLinearLayerConfig
    from vllm.model_executor.layers.quantization.utils.quant_utils import kFp8DynamicTokenSym, kFp8StaticTensorSym

    x = torch.randn(m, k, device="cuda", dtype=torch.bfloat16)
    qw, sw = quantize_fp8(torch.randn(n, k, device="cuda", dtype=torch.bfloat16) / k**0.5, per_row=False)
    # the kernel itself, as init_fp8_linear_kernel builds the one it picks (forcing it there would fall back to
    # another kernel silently if it could not be used)
    config = FP8ScaledMMLinearLayerConfig(
        weight_quant_key=kFp8StaticTensorSym, activation_quant_key=kFp8DynamicTokenSym, weight_shape=(n, k),
        input_dtype=torch.bfloat16, out_dtype=torch.bfloat16,
    )  # fmt: skip
    kernel = HummingFP8ScaledMMLinearKernel(config, ["weight", "weight_scale", "input_scale", "input_scale_ub"])
    layer = linear_layer(n, k)
    layer.weight = parameter(qw.t(), input_dim=0, output_dim=1)
    layer.weight_scale = parameter(sw.reshape(1))
    layer.input_scale = None
    kernel.process_weights_after_loading(layer)
    return (lambda: kernel.apply_weights(layer, x)), lambda: x.float() @ (qw.float() * sw).t()


def nvfp4_weight(n: int, k: int):
    """Random NVFP4 codes packed two per byte (low nibble first), e4m3 scales per 16 values and a global scale,
    with the bf16 weight they decode to (the decoding of vLLM's rand_marlin_weight_nvfp4_like)."""
    w = torch.randn(n, k, device="cuda", dtype=torch.bfloat16) / k**0.5
    scales = w.view(n, -1, 16).abs().amax(-1).float() / 6
    global_scale = scales.max() / FP8_MAX
    scales = (scales / global_scale).to(FP8)
    packed = torch.randint(0, 256, (n, k // 2), dtype=torch.uint8, device="cuda")

    def decode(code):  # an e2m1 nibble in the top of a byte, read as e4m3 and rescaled
        return ((code & 0b10000000) | ((code & 0b01110000) >> 2)).view(FP8).to(torch.bfloat16) * 2**6

    ref = torch.stack([decode(packed << 4), decode(packed)], 2).view(n, k)
    ref = ref * global_scale.to(torch.bfloat16) * scales.to(torch.bfloat16).repeat_interleave(16, 1)
    return packed, scales, global_scale.reshape(()), ref


def nvfp4_humming(m, n, k):
    """vLLM's HummingNvFp4LinearKernel as the compressed-tensors NVFP4 scheme leaves a layer for it (W4A16):
    packed weight, e4m3 block scales, the global scale already inverted to the dequantizing one; then the
    kernel's own process_weights_after_loading and apply_weights."""
    humming_available()
    from vllm.model_executor.kernels.linear.nvfp4.base import NvFp4LinearLayerConfig
    from vllm.model_executor.kernels.linear.nvfp4.humming import HummingNvFp4LinearKernel

    x = torch.randn(m, k, device="cuda", dtype=torch.bfloat16)
    packed, scales, global_scale, ref = nvfp4_weight(n, k)
    kernel = HummingNvFp4LinearKernel(NvFp4LinearLayerConfig())
    layer = linear_layer(n, k)
    layer.weight = parameter(packed, input_dim=1, output_dim=0)
    layer.weight_scale = parameter(scales, input_dim=1, output_dim=0)
    layer.weight_global_scale = parameter(global_scale.float())
    kernel.process_weights_after_loading(layer)
    return (lambda: kernel.apply_weights(layer, x)), lambda: x.float() @ ref.float().t()


# the layer the shapes come from: an 8-expert top-2 MoE and a Llama-8B-like attention unless the job gives a
# model's (each child probes one kernel, so the harness sets it once per child from the job)
LAYER = SimpleNamespace(experts=8, topk=2, heads=32, kv_heads=8, head_dim=128, static_activations=None)


def moe_routing(m):
    weights, ids = torch.topk(torch.softmax(torch.randn(m, LAYER.experts, device=DEVICE), -1), LAYER.topk)
    return weights, ids.to(torch.int32)


def moe_reference(x, w1, w2, weights, ids, s1=None, s2=None):
    """float32 SiLU-gated MoE: w1 [E, 2N, K] (gate rows first, then up), w2 [E, K, N], each expert's weight times
    its scale in s1 / s2 if given (dequantized as it is used); only the routed experts."""
    ref = torch.zeros(x.shape[0], w2.shape[1], device=x.device)
    for j in range(ids.shape[1]):
        for ex in ids[:, j].unique().tolist():
            rows = ids[:, j] == ex
            a = w1[ex].float() * (1.0 if s1 is None else s1[ex])
            b = w2[ex].float() * (1.0 if s2 is None else s2[ex])
            g, u = (x[rows].float() @ a.t()).chunk(2, dim=-1)
            ref[rows] += weights[rows, j, None] * ((torch.nn.functional.silu(g) * u) @ b.t())
    return ref


# experts with weights of their own; the others repeat them (expert e is a copy of expert e % DISTINCT_EXPERTS).
# A kernel reads every routed expert's bytes whatever their values, so its time is the same, while quantizing
# and repacking 4 experts instead of all of them (Qwen3-30B-A3B has 128) cuts the set-up; routing a token to the
# wrong expert still shows in the numerics check (3 in 4 wrong experts hold other weights)
DISTINCT_EXPERTS = 4


def tile_experts(t: torch.Tensor) -> torch.Tensor:
    """[d, ...] per distinct expert -> [E, ...], expert e a copy of t[e % d] (its own memory, like a real one)."""
    reps = -(-LAYER.experts // t.shape[0])
    return t.repeat(reps, *([1] * (t.dim() - 1)))[: LAYER.experts].contiguous()


def moe_distinct_weights(n, k):
    """The distinct experts' bf16 weights: w1 [d, 2N, K], w2 [d, K, N]."""
    d = min(LAYER.experts, DISTINCT_EXPERTS)
    w1 = torch.randn(d, 2 * n, k, device=DEVICE, dtype=torch.bfloat16) / k**0.5
    w2 = torch.randn(d, k, n, device=DEVICE, dtype=torch.bfloat16) / n**0.5
    return w1, w2


def moe_bf16_weights(n, k):
    return tuple(map(tile_experts, moe_distinct_weights(n, k)))


def moe_triton_bf16(m, n, k):
    """vLLM's Triton fused MoE (the TRITON backend), unquantized, as a chain baseline."""
    from vllm.model_executor.layers.fused_moe import fused_experts

    x = torch.randn(m, k, device="cuda", dtype=torch.bfloat16)
    w1, w2 = moe_bf16_weights(n, k)
    weights, ids = moe_routing(m)
    return (lambda: fused_experts(x, w1, w2, weights, ids)), lambda: moe_reference(x, w1, w2, weights, ids)


def moe_fp8_inputs(m, n, k):
    """FP8 expert weights with one scale per expert; the reference uses the dequantized weights."""
    x = torch.randn(m, k, device=DEVICE, dtype=torch.bfloat16)
    w1, w2 = moe_distinct_weights(n, k)
    q1, s1 = zip(*(quantize_fp8(w, per_row=False) for w in w1), strict=True)
    q2, s2 = zip(*(quantize_fp8(w, per_row=False) for w in w2), strict=True)
    w1q, w2q = tile_experts(torch.stack(q1)), tile_experts(torch.stack(q2))
    w1s, w2s = (tile_experts(torch.stack(sc).float().reshape(-1)) for sc in (s1, s2))
    weights, ids = moe_routing(m)
    return x, w1q, w2q, w1s, w2s, weights, ids, lambda: moe_reference(x, w1q, w2q, weights, ids, w1s, w2s)


def moe_triton_fp8(m, n, k):
    """vLLM's Triton fused MoE with FP8 weights and dynamic per-tensor FP8 activations: the TRITON backend."""
    import vllm.model_executor.layers.fused_moe  # noqa: F401  (registers torch.ops.vllm.fused_experts)

    x, w1q, w2q, w1s, w2s, weights, ids, reference = moe_fp8_inputs(m, n, k)

    def run():
        return torch.ops.vllm.fused_experts(
            hidden_states=x,
            w1=w1q,
            w2=w2q,
            topk_weights=weights,
            topk_ids=ids,
            use_fp8_w8a8=True,
            w1_scale=w1s,
            w2_scale=w2s,
            a1_scale=None,
            a2_scale=None,
        )

    return run, reference


def moe_cutlass_fp8(m, n, k):
    """vLLM's CUTLASS grouped-GEMM FP8 MoE (the VLLM_CUTLASS backend), through run_cutlass_moe_fp8 with the
    workspaces and strides CutlassExpertsFp8 gives it; activations quantized per tensor, dynamically."""
    from vllm import _custom_ops as ops
    from vllm.model_executor.layers.fused_moe.activation import MoEActivation
    from vllm.model_executor.layers.fused_moe.experts.cutlass_moe import run_cutlass_moe_fp8

    if not ops.cutlass_group_gemm_supported(capability()):
        raise Unsupported(f"vLLM's CUTLASS grouped GEMM is not built for sm_{capability()}")
    x, w1q, w2q, w1s, w2s, weights, ids, reference = moe_fp8_inputs(m, n, k)
    out = torch.full((m, k), float("nan"), device="cuda", dtype=torch.bfloat16)
    workspace13 = torch.empty(m * LAYER.topk, max(2 * n, k), device="cuda", dtype=torch.bfloat16)
    workspace2 = torch.empty(m * LAYER.topk, max(n, k), device="cuda", dtype=torch.bfloat16)
    strides_k = torch.full((LAYER.experts,), k, device="cuda", dtype=torch.int64)
    strides_n = torch.full((LAYER.experts,), n, device="cuda", dtype=torch.int64)
    strides_2n = torch.full((LAYER.experts,), 2 * n, device="cuda", dtype=torch.int64)

    def run():
        xq, xs = ops.scaled_fp8_quant(x, None)
        run_cutlass_moe_fp8(
            out, xq, w1q, w2q, ids, MoEActivation.SILU, LAYER.experts, None, w1s, w2s, xs, None,
            strides_k, strides_n, strides_2n, strides_k, workspace13, workspace2, None, torch.bfloat16,
            False, False, False, weights, None,
        )  # fmt: skip
        return out

    return run, reference


def flashinfer_cutlass_moe_module():
    """FlashInfer's CUTLASS fused-MoE module for this GPU, as cutlass_fused_moe loads it; a fresh machine has to
    JIT-compile it (hundreds of CUTLASS instantiations: many minutes of nvcc, past any probe's timeout), so the
    probe runs it only where it is compiled already (vLLM or an earlier probe built it, or FlashInfer's AOT
    cache has it), or when NEMOLAUNCH_PROBE_COMPILE=1 allows the compile."""
    from flashinfer.jit import fused_moe as jit

    cap = capability()
    gen = {90: "sm90", 100: "sm100", 110: "sm100", 103: "sm103", 120: "sm120", 121: "sm120"}.get(cap)
    if gen is None:
        raise Unsupported(f"FlashInfer's CUTLASS fused MoE has no module for sm_{cap}")
    spec = getattr(jit, f"gen_cutlass_fused_moe_{gen}_module")()
    if not (spec.is_aot or spec.is_compiled) and os.environ.get("NEMOLAUNCH_PROBE_COMPILE") != "1":
        raise NotProbed(
            f"FlashInfer's {spec.name} is not compiled on this machine ({len(spec.sources)} CUDA sources to JIT; "
            "vLLM compiles it on its first start with this backend); NEMOLAUNCH_PROBE_COMPILE=1 with a larger "
            "--timeout lets the probe compile it"
        )


def moe_flashinfer_cutlass_fp8(m, n, k):
    """FlashInfer's CUTLASS fused MoE with per-tensor FP8 (vLLM's FLASHINFER_CUTLASS backend, FlashInferExperts),
    called as FlashInferExperts.apply calls it. vLLM picks it for per-tensor FP8 only with static activation
    scales (an FP8 checkpoint's), so the scales are static here, calibrated on these inputs; the gate-up weight in
    FlashInfer's [up; gate] order (vLLM's swap_w13_to_w31); quant_scales as vLLM's make_fp8_moe_quant_config
    gives them: w13 scale x a1 scale, 1 / a2 scale, w2 scale x a2 scale, a1 scale."""
    check_moe_backend("fp8", "FLASHINFER_CUTLASS")
    flashinfer_cutlass_moe_module()
    from flashinfer.fused_moe.core import ActivationType
    from vllm import _custom_ops as ops
    from vllm.model_executor.layers.quantization.utils.flashinfer_utils import swap_w13_to_w31
    from vllm.utils.flashinfer import flashinfer_cutlass_fused_moe

    x, w1q, w2q, w1s, w2s, weights, ids, reference = moe_fp8_inputs(m, n, k)
    a1 = (x.abs().amax().float() / FP8_MAX).reshape(())
    # the second GEMM's input (SiLU(gate) * up) over a sample of tokens, with room for the tokens not sampled
    sample, amax = min(m, 256), torch.zeros((), device="cuda")
    for ex in ids[:sample].unique().tolist():
        rows = (ids[:sample] == ex).any(-1)
        g, u = (x[:sample][rows].float() @ (w1q[ex].float() * w1s[ex]).t()).chunk(2, dim=-1)
        amax = torch.maximum(amax, (torch.nn.functional.silu(g) * u).abs().amax())
    a2 = (2 * amax / FP8_MAX).reshape(())
    scales = [(w1s * a1).float().contiguous(), (1.0 / a2).float(), (w2s * a2).float().contiguous(), a1]
    w31 = swap_w13_to_w31(w1q).contiguous()
    out = torch.full((m, k), float("nan"), device="cuda", dtype=torch.bfloat16)

    def run():
        xq, _ = ops.scaled_fp8_quant(x, a1)
        flashinfer_cutlass_fused_moe(
            input=xq, token_selected_experts=ids, token_final_scales=weights, fc1_expert_weights=w31,
            fc2_expert_weights=w2q, output=out, output_dtype=torch.bfloat16, quant_scales=scales, input_sf=None,
            tp_size=1, tp_rank=0, ep_size=1, ep_rank=0, activation_type=ActivationType.Swiglu,
        )  # fmt: skip
        return out

    return run, reference


def moe_marlin(quant: str):
    """vLLM's Marlin fused MoE (the MARLIN backend): FP8 (one scale per channel) or NVFP4 weights, bf16
    activations."""

    def setup(m, n, k):
        from vllm.model_executor.layers.fused_moe.experts.marlin_moe import fused_marlin_moe
        from vllm.model_executor.layers.quantization.utils.marlin_utils_fp4 import rand_marlin_weight_nvfp4_like
        from vllm.model_executor.layers.quantization.utils.marlin_utils_fp8 import marlin_quant_fp8_torch
        from vllm.scalar_type import scalar_types

        def quantize(w):  # per expert: (dequantized [rows, cols], marlin weight, scales, global scale)
            if quant == "nvfp4":
                ref, q, s, g = rand_marlin_weight_nvfp4_like(w, 16)
                return ref.t(), q, s, g
            ref, q, s = marlin_quant_fp8_torch(w, -1)
            return ref.t(), q, s, None

        x = torch.randn(m, k, device="cuda", dtype=torch.bfloat16)
        w1, w2 = moe_distinct_weights(n, k)  # quantized and repacked once per distinct expert, then tiled
        p1 = list(zip(*(quantize(w) for w in w1), strict=True))
        p2 = list(zip(*(quantize(w) for w in w2), strict=True))
        (r1, q1, s1), (r2, q2, s2) = ([tile_experts(torch.stack(t)) for t in p[:3]] for p in (p1, p2))
        g1, g2 = (tile_experts(torch.stack(p[3]).reshape(-1)) if quant == "nvfp4" else None for p in (p1, p2))
        weights, ids = moe_routing(m)
        kind = scalar_types.float4_e2m1f if quant == "nvfp4" else scalar_types.float8_e4m3fn

        def run():
            return fused_marlin_moe(
                hidden_states=x, w1=q1, w2=q2, bias1=None, bias2=None, w1_scale=s1, w2_scale=s2,
                topk_weights=weights, topk_ids=ids, quant_type_id=kind.id, global_num_experts=LAYER.experts,
                global_scale1=g1, global_scale2=g2,
            )  # fmt: skip

        return run, lambda: moe_reference(x, r1, r2, weights, ids)

    return setup


BLOCK = 16  # vLLM's default KV-cache block size
DEVICE = "cuda"  # of the paged-attention inputs (the tests build FLEX_ATTENTION's on the CPU engine)


def paged_inputs(m, n, k):
    """m sequences, each with n new query tokens at the end of a k-token context, KV in a shuffled paged cache.
    Returns the keyword arguments both of vLLM's own paged-attention kernels take (output poisoned with NaN) and
    the float32 reference (a function: it runs later, when it cannot disturb another kernel's timing)."""
    blocks_per_seq = -(-k // BLOCK)
    num_blocks = m * blocks_per_seq + 1
    q = torch.randn(m * n, LAYER.heads, LAYER.head_dim, device=DEVICE, dtype=torch.bfloat16)
    k_cache = torch.randn(num_blocks, BLOCK, LAYER.kv_heads, LAYER.head_dim, device=DEVICE, dtype=torch.bfloat16)
    v_cache = torch.randn(num_blocks, BLOCK, LAYER.kv_heads, LAYER.head_dim, device=DEVICE, dtype=torch.bfloat16)
    table = torch.randperm(num_blocks - 1, device=DEVICE, dtype=torch.int32)[: m * blocks_per_seq].view(m, -1)
    scale = LAYER.head_dim**-0.5

    def reference():
        ref = torch.empty(m * n, LAYER.heads, LAYER.head_dim, device=DEVICE)
        group = LAYER.heads // LAYER.kv_heads
        for i in range(m):
            kk = (
                k_cache[table[i].long()]
                .reshape(-1, LAYER.kv_heads, LAYER.head_dim)[:k]
                .float()
                .repeat_interleave(group, 1)
            )
            vv = (
                v_cache[table[i].long()]
                .reshape(-1, LAYER.kv_heads, LAYER.head_dim)[:k]
                .float()
                .repeat_interleave(group, 1)
            )
            scores = torch.einsum("qhd,khd->hqk", q[i * n : (i + 1) * n].float(), kk) * scale
            pos_q = torch.arange(k - n, k, device=DEVICE)[:, None]
            scores = scores.masked_fill(torch.arange(k, device=DEVICE)[None, :] > pos_q, float("-inf"))
            ref[i * n : (i + 1) * n] = torch.einsum("hqk,khd->qhd", torch.softmax(scores, -1), vv)
        return ref

    kwargs = {
        "q": q,
        "k": k_cache,
        "v": v_cache,
        "out": torch.full_like(q, float("nan")),
        "cu_seqlens_q": torch.arange(0, m * n + 1, n, device=DEVICE, dtype=torch.int32),
        "max_seqlen_q": n,
        "seqused_k": torch.full((m,), k, device=DEVICE, dtype=torch.int32),
        "max_seqlen_k": k,
        "softmax_scale": scale,
        "causal": True,
        "block_table": table,
    }
    return kwargs, reference


def attention_triton(m, n, k):
    from vllm.v1.attention.ops.triton_unified_attention import unified_attention

    kwargs, reference = paged_inputs(m, n, k)

    def run():
        unified_attention(**kwargs, window_size=(-1, -1), softcap=0, q_descale=None, k_descale=None, v_descale=None)
        return kwargs["out"]

    return run, reference


def attention_flash(m, n, k):
    from vllm.vllm_flash_attn import flash_attn_varlen_func

    kwargs, reference = paged_inputs(m, n, k)
    version = 3 if torch.cuda.get_device_capability()[0] == 9 else 2

    def run():
        flash_attn_varlen_func(**kwargs, window_size=[-1, -1], fa_version=version)
        return kwargs["out"]

    return run, reference


def attention_flex(m, n, k):
    """vLLM's FLEX_ATTENTION backend: its FlexAttentionImpl.forward on the FlexAttentionMetadata its builder makes
    (block sizes from the builder's own rule, vLLM's physical-to-logical map, the direct block mask over the
    paged cache, causal, decode offsets), K and V packed in one cache tensor laid out as the backend's
    get_kv_cache_shape and stride order say. torch.compile builds the kernel on the first call of each shape,
    in this process (one compile thread: no worker pool shared between forked probes)."""
    import torch._inductor.config as inductor_config
    from vllm.v1.attention.backends import flex_attention as flex

    inductor_config.compile_threads = 1
    kwargs, reference = paged_inputs(m, n, k)
    # (blocks, kv heads, block, 2 x dim) over memory laid out (blocks, block, kv heads, 2 x dim); every page one up:
    # vLLM keeps page 0 as its null block, and the direct block mask skips it
    packed = torch.roll(torch.cat([kwargs["k"], kwargs["v"]], -1), 1, 0)
    kv_cache = packed.permute(0, 2, 1, 3)
    table = (kwargs["block_table"] + 1).to(torch.int32)
    seq_lens, starts = kwargs["seqused_k"], kwargs["cu_seqlens_q"]
    blocks, tokens, pages = kv_cache.shape[0], m * n, table.shape[1]
    small = flex.is_torch_equal_or_newer("2.9.0.dev0")
    sizes = SimpleNamespace(flex_attn_q_block_size=None, flex_attn_block_m=None, flex_attn_kv_block_size=None,
                            flex_attn_block_n=None)  # fmt: skip
    q_block, kv_block = flex.FlexAttentionMetadataBuilder._get_block_sizes(sizes, small, BLOCK)
    groups = -(-tokens // q_block)
    meta = flex.FlexAttentionMetadata(
        causal=True, num_actual_tokens=tokens, max_query_len=n, query_start_loc=starts,
        query_start_loc_cpu=starts.cpu(), max_seq_len=k, seq_lens=seq_lens, block_table=table,
        slot_mapping=torch.zeros(tokens, device=DEVICE, dtype=torch.int64), use_cascade=False, common_prefix_len=0,
        cu_prefix_query_lens=None, prefix_kv_lens=None, suffix_kv_lens=None, total_cache_tokens=blocks * BLOCK,
        block_size=BLOCK, max_possible_sequence_length=k, num_reqs=m,
        physical_to_logical=flex.physical_to_logical_mapping(table, seq_lens, BLOCK, blocks),
        decode_offset=(seq_lens - n).to(torch.int32), num_blocks_per_seq=-(seq_lens // -BLOCK),
        persistent_kv_indices=torch.empty(groups, q_block * pages, device=DEVICE, dtype=torch.int32),
        persistent_kv_num_blocks=torch.empty(groups, device=DEVICE, dtype=torch.int32),
        persistent_doc_ids=torch.empty(tokens, device=DEVICE, dtype=torch.int32),
        direct_build=small and kv_block == BLOCK, q_block_size=q_block, kv_block_size=kv_block,
    )  # fmt: skip
    meta.block_mask = meta._build_block_mask_direct() if meta.direct_build else meta.build_block_mask()
    impl = flex.FlexAttentionImpl(
        num_heads=LAYER.heads, head_size=LAYER.head_dim, scale=kwargs["softmax_scale"], num_kv_heads=LAYER.kv_heads,
        alibi_slopes=None, sliding_window=None, kv_cache_dtype="auto",
    )  # fmt: skip
    layer, out = torch.nn.Module(), kwargs["out"]
    return (lambda: impl.forward(layer, kwargs["q"], None, None, kv_cache, meta, out)), reference


def attention_flashinfer(m, n, k):
    """FlashInfer's paged wrappers as vLLM's FLASHINFER backend builds them: the decode wrapper with tensor
    cores for one new token, the prefill wrapper otherwise; backend "auto", buffers fixed for CUDA graphs. Their
    JIT modules are built before this runs (launcher/child/flashinfer_build.py, started by the probe ahead of
    everything else), unless NEMOLAUNCH_FLASHINFER_PREBUILD=0: then the wrappers compile them here, one after the
    other."""
    import flashinfer

    kwargs, reference = paged_inputs(m, n, k)
    table = kwargs["block_table"]
    pages = table.shape[1]
    indptr = torch.arange(0, m * pages + 1, pages, device="cuda", dtype=torch.int32)
    indices = table.reshape(-1).contiguous()
    last_len = torch.full((m,), k - (pages - 1) * BLOCK, device="cuda", dtype=torch.int32)
    workspace = torch.zeros(256 << 20, device="cuda", dtype=torch.uint8)  # FlashInfer wants it zeroed
    dims = (LAYER.heads, LAYER.kv_heads, LAYER.head_dim, BLOCK)
    types = {"q_data_type": torch.bfloat16, "kv_data_type": torch.bfloat16, "sm_scale": kwargs["softmax_scale"]}
    if n == 1:
        wrapper = flashinfer.BatchDecodeWithPagedKVCacheWrapper(
            workspace, "NHD", use_cuda_graph=True, use_tensor_cores=True, paged_kv_indptr_buffer=indptr,
            paged_kv_indices_buffer=indices, paged_kv_last_page_len_buffer=last_len,
        )  # fmt: skip
        wrapper.plan(indptr, indices, last_len, *dims, **types)
    else:
        qo_indptr = kwargs["cu_seqlens_q"]
        wrapper = flashinfer.BatchPrefillWithPagedKVCacheWrapper(
            workspace, "NHD", use_cuda_graph=True, qo_indptr_buf=qo_indptr, paged_kv_indptr_buf=indptr,
            paged_kv_indices_buf=indices, paged_kv_last_page_len_buf=last_len,
        )  # fmt: skip
        wrapper.plan(qo_indptr, indptr, indices, last_len, *dims, causal=True, **types)
    out = kwargs["out"]
    return (lambda: wrapper.run(kwargs["q"], (kwargs["k"], kwargs["v"]), out=out)), reference


KERNELS: dict[tuple[str, str], Callable] = {
    ("fp8_dense", "bf16 (unquantized baseline)"): bf16_baseline,
    ("fp8_dense", "PerTensorTorchFP8ScaledMMLinearKernel"): fp8_torch(per_row=False),
    ("fp8_dense", "ChannelWiseTorchFP8ScaledMMLinearKernel"): fp8_torch(per_row=True),
    ("fp8_dense", "CutlassFP8ScaledMMLinearKernel"): fp8_cutlass,
    ("fp8_dense", "FlashInferFP8ScaledMMLinearKernel"): fp8_flashinfer,
    ("fp8_dense", "MarlinFP8ScaledMMLinearKernel"): fp8_marlin,
    ("nvfp4_dense", "TorchNvFp4LinearKernel"): nvfp4_torch,
    ("nvfp4_dense", "CutlassNvFp4LinearKernel"): nvfp4_cutlass,
    ("nvfp4_dense", "MarlinNvFp4LinearKernel"): nvfp4_marlin,
    ("nvfp4_moe", "MARLIN"): moe_marlin("nvfp4"),
    ("fp8_moe", "TRITON (bf16 weights)"): moe_triton_bf16,
    ("fp8_moe", "TRITON"): moe_triton_fp8,
    ("fp8_moe", "VLLM_CUTLASS"): moe_cutlass_fp8,
    ("fp8_moe", "MARLIN"): moe_marlin("fp8"),
    ("attention", "TRITON_ATTN"): attention_triton,
    ("attention", "FLASH_ATTN"): attention_flash,
    ("attention", "FLASHINFER"): attention_flashinfer,
    ("attention", "FLEX_ATTENTION"): attention_flex,
    ("fp8_moe", "FLASHINFER_CUTLASS"): moe_flashinfer_cutlass_fp8,
    ("fp8_dense", "HummingFP8ScaledMMLinearKernel"): fp8_humming,
    ("nvfp4_dense", "HummingNvFp4LinearKernel"): nvfp4_humming,
}
# kernels vLLM runs on other GPUs only (SM100/SM120), or only with an optional package: vLLM's own checks say why
# not here (where they say it runs, the kernel is reported not-probed: the probe driving it is still to write)
GATED_MOE = {
    "fp8": ("FLASHINFER_TRTLLM", "HUMMING"),
    "nvfp4": (
        "FLASHINFER_TRTLLM", "FLASHINFER_CUTEDSL", "FLASHINFER_CUTEDSL_BATCHED", "FLASHINFER_CUTLASS",
        "FLASHINFER_B12X", "VLLM_CUTLASS", "HUMMING",
    ),
}  # fmt: skip
GATED_LINEAR = {
    "fp8_dense": ("_POSSIBLE_FP8_KERNELS", ("B12xTensorFP8ScaledMMLinearKernel",)),
    "nvfp4_dense": (
        "_POSSIBLE_NVFP4_KERNELS",
        (
            "FlashInferCuteDslNvFp4LinearKernel", "FlashInferCutlassNvFp4LinearKernel",
            "FlashInferB12xNvFp4LinearKernel", "FlashInferCuteDslNvFp4W4A16LinearKernel",
            "FlashInferTrtllmNvFp4LinearKernel", "FlashInferCudnnNvFp4LinearKernel", "FbgemmNvFp4LinearKernel",
            "B12xNvFp4LinearKernel", "B12xNvFp4W4A16LinearKernel",
        ),
    ),
}  # fmt: skip
GATES: dict[tuple[str, str], Callable] = {
    (f"{quant}_moe", backend): moe_gate(quant, backend) for quant, names in GATED_MOE.items() for backend in names
}
GATES.update(
    {(chain, name): linear_gate(table, name) for chain, (table, names) in GATED_LINEAR.items() for name in names}
)
KERNELS.update(GATES)
# kernels that quantize an intermediate themselves (their bound is the FP8 one)
INTERNAL_FP8 = {("fp8_moe", "TRITON"), ("fp8_moe", "VLLM_CUTLASS"), ("fp8_moe", "FLASHINFER_CUTLASS")}


def time_us(fn, repeats: int) -> tuple[float, str]:
    for _ in range(3):
        fn()
    torch.cuda.synchronize()
    inner = 10
    try:
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            for _ in range(inner):
                fn()
        run, how = graph.replay, "graph"
    except Exception:
        torch.cuda.synchronize()

        def run():
            for _ in range(inner):
                fn()

        how = "eager"
    samples = []
    for _ in range(repeats):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        run()
        end.record()
        end.synchronize()
        samples.append(start.elapsed_time(end) * 1000 / inner)
    return statistics.median(samples), how


def probe(spec: dict, turn) -> dict:
    """Set up every shape, run it once and check it (side by side with other kernels; the float32 references,
    the heaviest GPU work of a set-up, in turn.quiet() so they never overlap another kernel's timing), then wait
    for the turn and time every shape alone on the GPU."""
    setup = KERNELS.get((spec["chain"], spec["kernel"]))
    if setup is None:
        return {"status": "not-probed", "error": "nemolaunch has no probe for this kernel yet"}
    vars(LAYER).update(spec.get("layer", {}))
    torch.manual_seed(0)
    started = time.monotonic()
    prepared = []
    bound = BOUND["fp8-internal" if (spec["chain"], spec["kernel"]) in INTERNAL_FP8 else "bf16"]
    for m, n, k in spec["shapes"]:
        try:
            fn, reference = setup(m, n, k)
            out = fn()  # the first call: JIT compiles land here
            torch.cuda.synchronize()
        except Exception as e:
            verdict = classify(e)
            if verdict is None:
                raise
            return verdict
        shape = {"m": m, "n": n, "k": k}
        if reference is not None:
            with turn.quiet():
                ref = reference()
                diff = float((out.float() - ref).norm() / ref.norm())
                shape["rel_err"] = diff if math.isfinite(diff) else float("nan")
                shape["numerics_ok"] = bool(torch.isfinite(out).all()) and shape["rel_err"] <= bound
                del ref
        prepared.append((fn, shape))
        del out
    setup_s = round(time.monotonic() - started, 1)
    turn.wait()
    for fn, shape in prepared:
        shape["us"], shape["timing"] = time_us(fn, spec.get("repeats", 20))
    shapes = [shape for _, shape in prepared]
    if any("numerics_ok" not in s for s in shapes):
        return {"status": "unchecked", "shapes": shapes, "setup_s": setup_s}
    ok = all(s["numerics_ok"] for s in shapes)
    return {"status": "ok" if ok else "wrong", "shapes": shapes, "setup_s": setup_s}


def serve(skip: list[str], chains: list[str] | None) -> None:
    """`skip`: preloads left out because importing them initialized CUDA (the harness started again without them);
    `chains`: the chains this run probes (their preloads only; None: every chain's)."""
    # answers go to the original stdout; everything else printed to stdout (vLLM logs there) goes to stderr
    answers = os.fdopen(os.dup(1), "w")
    os.dup2(2, 1)

    def answer(message: dict) -> None:
        answers.write(json.dumps(message) + "\n")
        answers.flush()

    errors: dict[str, str] = {}
    took: dict[str, float] = {}
    for name in (n for n in preloads(chains) if n not in skip):
        started = time.monotonic()
        try:
            importlib.import_module(name)
        except Exception as e:  # the child that needs it will fail on the same import and say so
            errors[name] = f"{type(e).__name__}: {e}"[:200]
        took[name] = round(time.monotonic() - started, 2)
        if torch.cuda.is_initialized():  # forked children could not use CUDA: start again without this one
            os.dup2(answers.fileno(), 1)
            again = ["--skip", ",".join([*skip, name])] + (["--chains", ",".join(chains)] if chains is not None else [])
            os.execv(sys.executable, [sys.executable, __file__, "--serve", *again])
    answer({"kernels": sorted(KERNELS), "preload_errors": errors, "cuda_initialized_by": skip or None,
            "preload_s": took, "t_ready": time.monotonic()})  # fmt: skip
    request = json.loads(sys.stdin.readline())
    run_isolated(
        request["jobs"],
        probe,
        request["timeout_s"],
        request["parallel"],
        lambda job, result: answer({"chain": job["chain"], "kernel": job["kernel"], **result}),
        NOISE,
        {name: Build(**b) for name, b in request.get("builds", {}).items()},
    )
    answer({"done": True})


def _option(name: str) -> list[str] | None:
    """--serve [--chains A,B] [--skip M,N]: a comma-separated option's values (None when absent)."""
    if name not in sys.argv[2:]:
        return None
    i = sys.argv.index(name, 2)
    return [v for v in (sys.argv[i + 1] if i + 1 < len(sys.argv) else "").split(",") if v]


if __name__ == "__main__":
    serve(_option("--skip") or [], _option("--chains"))  # --skip: after a preload initialized CUDA
