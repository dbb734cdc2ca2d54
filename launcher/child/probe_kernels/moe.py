"""The fused MoE kernels of vLLM's fp8_moe and nvfp4_moe chains (Triton, CUTLASS, FlashInfer's CUTLASS, Marlin),
with Triton on bf16 weights as the yardstick: M tokens routed top-k over the layer's experts, expert
intermediate N, hidden K (a LatentMoE's latent). A few distinct experts are quantized and tiled over all of them
(DISTINCT_EXPERTS). The experts' activation is the layer's: SiLU-gated (w1 holds gate and up, 2N rows) or, as
Nemotron-H's, relu2 without a gate (w1 holds N rows)."""

import os

import torch
from verdict import NotProbed, Unsupported

from .gates import check_moe_backend
from .inputs import FP8_MAX, KernelLayer, capability, quantize_fp8


def moe_routing(m: int, layer: KernelLayer):
    weights, ids = torch.topk(torch.softmax(torch.randn(m, layer.experts, device=layer.device), -1), layer.topk)
    return weights, ids.to(torch.int32)


ACTIVATIONS = ("silu", "relu2_no_mul")  # the experts' activations the set-ups and the reference know


def gated(layer: KernelLayer) -> bool:
    if layer.moe_activation not in ACTIVATIONS:
        raise NotProbed(f"the probe's MoE set-ups know the activations {', '.join(ACTIVATIONS)}, not this one")
    return not layer.moe_activation.endswith("_no_mul")


def moe_reference(x, w1, w2, weights, ids, s1=None, s2=None, activation="silu"):
    """float32 MoE: w1 [E, 2N, K] (gate rows first, then up; SiLU-gated) or [E, N, K] (relu2_no_mul: relu(h)^2),
    w2 [E, K, N], each expert's weight times its scale in s1 / s2 if given (dequantized as it is used); only the
    routed experts."""
    ref = torch.zeros(x.shape[0], w2.shape[1], device=x.device)
    for j in range(ids.shape[1]):
        for ex in ids[:, j].unique().tolist():
            rows = ids[:, j] == ex
            a = w1[ex].float() * (1.0 if s1 is None else s1[ex])
            b = w2[ex].float() * (1.0 if s2 is None else s2[ex])
            h = x[rows].float() @ a.t()
            if activation == "silu":
                g, u = h.chunk(2, dim=-1)
                h = torch.nn.functional.silu(g) * u
            else:
                h = torch.relu(h).square()
            ref[rows] += weights[rows, j, None] * (h @ b.t())
    return ref


# experts with weights of their own; the others repeat them (expert e is a copy of expert e % DISTINCT_EXPERTS).
# A kernel reads every routed expert's bytes whatever their values, so its time is the same, while quantizing
# and repacking 4 experts instead of all of them (Qwen3-30B-A3B has 128) cuts the set-up; routing a token to the
# wrong expert still shows in the numerics check (3 in 4 wrong experts hold other weights)
DISTINCT_EXPERTS = 4


def tile_experts(t: torch.Tensor, layer: KernelLayer) -> torch.Tensor:
    """[d, ...] per distinct expert -> [E, ...], expert e a copy of t[e % d] (its own memory, like a real one)."""
    reps = -(-layer.experts // t.shape[0])
    return t.repeat(reps, *([1] * (t.dim() - 1)))[: layer.experts].contiguous()


def moe_distinct_weights(n: int, k: int, layer: KernelLayer):
    """The distinct experts' bf16 weights: w1 [d, 2N, K] (gated) or [d, N, K], w2 [d, K, N]."""
    d = min(layer.experts, DISTINCT_EXPERTS)
    w1 = torch.randn(d, (2 if gated(layer) else 1) * n, k, device=layer.device, dtype=torch.bfloat16) / k**0.5
    w2 = torch.randn(d, k, n, device=layer.device, dtype=torch.bfloat16) / n**0.5
    return w1, w2


def moe_bf16_weights(n: int, k: int, layer: KernelLayer):
    return tuple(tile_experts(w, layer) for w in moe_distinct_weights(n, k, layer))


def moe_triton_bf16(m, n, k, layer: KernelLayer):
    """vLLM's Triton fused MoE (the TRITON backend), unquantized, as a chain baseline."""
    from vllm.model_executor.layers.fused_moe import fused_experts
    from vllm.model_executor.layers.fused_moe.activation import MoEActivation

    x = torch.randn(m, k, device=layer.device, dtype=torch.bfloat16)
    w1, w2 = moe_bf16_weights(n, k, layer)
    weights, ids = moe_routing(m, layer)
    activation = MoEActivation(layer.moe_activation)
    return (lambda: fused_experts(x, w1, w2, weights, ids, activation=activation)), lambda: moe_reference(
        x, w1, w2, weights, ids, activation=layer.moe_activation
    )


def moe_fp8_inputs(m: int, n: int, k: int, layer: KernelLayer):
    """FP8 expert weights with one scale per expert; the reference uses the dequantized weights."""
    x = torch.randn(m, k, device=layer.device, dtype=torch.bfloat16)
    w1, w2 = moe_distinct_weights(n, k, layer)
    q1, s1 = zip(*(quantize_fp8(w, per_row=False) for w in w1), strict=True)
    q2, s2 = zip(*(quantize_fp8(w, per_row=False) for w in w2), strict=True)
    w1q, w2q = tile_experts(torch.stack(q1), layer), tile_experts(torch.stack(q2), layer)
    w1s, w2s = (tile_experts(torch.stack(sc).float().reshape(-1), layer) for sc in (s1, s2))
    weights, ids = moe_routing(m, layer)

    def reference():
        return moe_reference(x, w1q, w2q, weights, ids, w1s, w2s, layer.moe_activation)

    return x, w1q, w2q, w1s, w2s, weights, ids, reference


def moe_triton_fp8(m, n, k, layer: KernelLayer):
    """vLLM's Triton fused MoE with FP8 weights and dynamic per-tensor FP8 activations: the TRITON backend."""
    import vllm.model_executor.layers.fused_moe  # noqa: F401  (registers torch.ops.vllm.fused_experts)

    x, w1q, w2q, w1s, w2s, weights, ids, reference = moe_fp8_inputs(m, n, k, layer)

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
            activation=layer.moe_activation,
        )

    return run, reference


def moe_cutlass_fp8(m, n, k, layer: KernelLayer):
    """vLLM's CUTLASS grouped-GEMM FP8 MoE (the VLLM_CUTLASS backend), through run_cutlass_moe_fp8 with the
    workspaces and strides CutlassExpertsFp8 gives it; activations quantized per tensor, dynamically."""
    from vllm import _custom_ops as ops
    from vllm.model_executor.layers.fused_moe.activation import MoEActivation
    from vllm.model_executor.layers.fused_moe.experts.cutlass_moe import run_cutlass_moe_fp8

    if not ops.cutlass_group_gemm_supported(capability()):
        raise Unsupported(f"vLLM's CUTLASS grouped GEMM is not built for sm_{capability()}")
    if not gated(layer):
        raise Unsupported(
            f"vLLM's CUTLASS FP8 MoE runs gated activations only (run_cutlass_moe_fp8 asserts it), not "
            f"{layer.moe_activation}"
        )
    x, w1q, w2q, w1s, w2s, weights, ids, reference = moe_fp8_inputs(m, n, k, layer)
    out = torch.full((m, k), float("nan"), device=layer.device, dtype=torch.bfloat16)
    workspace13 = torch.empty(m * layer.topk, max(2 * n, k), device=layer.device, dtype=torch.bfloat16)
    workspace2 = torch.empty(m * layer.topk, max(n, k), device=layer.device, dtype=torch.bfloat16)
    strides_k = torch.full((layer.experts,), k, device=layer.device, dtype=torch.int64)
    strides_n = torch.full((layer.experts,), n, device=layer.device, dtype=torch.int64)
    strides_2n = torch.full((layer.experts,), 2 * n, device=layer.device, dtype=torch.int64)

    def run():
        xq, xs = ops.scaled_fp8_quant(x, None)
        run_cutlass_moe_fp8(
            out, xq, w1q, w2q, ids, MoEActivation.SILU, layer.experts, None, w1s, w2s, xs, None,
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


def moe_flashinfer_cutlass_fp8(m, n, k, layer: KernelLayer):
    """FlashInfer's CUTLASS fused MoE with per-tensor FP8 (vLLM's FLASHINFER_CUTLASS backend, FlashInferExperts),
    called as FlashInferExperts.apply calls it. vLLM picks it for per-tensor FP8 only with static activation
    scales (an FP8 checkpoint's), so the scales are static here, calibrated on these inputs; the gate-up weight in
    FlashInfer's [up; gate] order (vLLM's swap_w13_to_w31); quant_scales as vLLM's make_fp8_moe_quant_config
    gives them: w13 scale x a1 scale, 1 / a2 scale, w2 scale x a2 scale, a1 scale."""
    check_moe_backend("fp8", "FLASHINFER_CUTLASS", layer)
    flashinfer_cutlass_moe_module()
    if not gated(layer):
        raise NotProbed(f"the probe drives FlashInfer's CUTLASS MoE with SwiGLU only, not {layer.moe_activation}")
    from flashinfer.fused_moe.core import ActivationType
    from vllm import _custom_ops as ops
    from vllm.model_executor.layers.quantization.utils.flashinfer_utils import swap_w13_to_w31
    from vllm.utils.flashinfer import flashinfer_cutlass_fused_moe

    x, w1q, w2q, w1s, w2s, weights, ids, reference = moe_fp8_inputs(m, n, k, layer)
    a1 = (x.abs().amax().float() / FP8_MAX).reshape(())
    # the second GEMM's input (SiLU(gate) * up) over a sample of tokens, with room for the tokens not sampled
    sample, amax = min(m, 256), torch.zeros((), device=layer.device)
    for ex in ids[:sample].unique().tolist():
        rows = (ids[:sample] == ex).any(-1)
        g, u = (x[:sample][rows].float() @ (w1q[ex].float() * w1s[ex]).t()).chunk(2, dim=-1)
        amax = torch.maximum(amax, (torch.nn.functional.silu(g) * u).abs().amax())
    a2 = (2 * amax / FP8_MAX).reshape(())
    scales = [(w1s * a1).float().contiguous(), (1.0 / a2).float(), (w2s * a2).float().contiguous(), a1]
    w31 = swap_w13_to_w31(w1q).contiguous()
    out = torch.full((m, k), float("nan"), device=layer.device, dtype=torch.bfloat16)

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

    def setup(m, n, k, layer: KernelLayer):
        from vllm.model_executor.layers.fused_moe.activation import MoEActivation
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

        x = torch.randn(m, k, device=layer.device, dtype=torch.bfloat16)
        w1, w2 = moe_distinct_weights(n, k, layer)  # quantized and repacked once per distinct expert, then tiled
        p1 = list(zip(*(quantize(w) for w in w1), strict=True))
        p2 = list(zip(*(quantize(w) for w in w2), strict=True))
        (r1, q1, s1), (r2, q2, s2) = ([tile_experts(torch.stack(t), layer) for t in p[:3]] for p in (p1, p2))
        g1, g2 = (tile_experts(torch.stack(p[3]).reshape(-1), layer) if quant == "nvfp4" else None for p in (p1, p2))
        weights, ids = moe_routing(m, layer)
        kind = scalar_types.float4_e2m1f if quant == "nvfp4" else scalar_types.float8_e4m3fn
        activation = MoEActivation(layer.moe_activation)

        def run():
            return fused_marlin_moe(
                hidden_states=x, w1=q1, w2=q2, bias1=None, bias2=None, w1_scale=s1, w2_scale=s2,
                topk_weights=weights, topk_ids=ids, quant_type_id=kind.id, global_num_experts=layer.experts,
                global_scale1=g1, global_scale2=g2, activation=activation,
            )  # fmt: skip

        return run, lambda: moe_reference(x, r1, r2, weights, ids, activation=layer.moe_activation)

    return setup


KERNELS = {
    ("fp8_moe", "TRITON (bf16 weights)"): moe_triton_bf16,
    ("fp8_moe", "TRITON"): moe_triton_fp8,
    ("fp8_moe", "VLLM_CUTLASS"): moe_cutlass_fp8,
    ("fp8_moe", "FLASHINFER_CUTLASS"): moe_flashinfer_cutlass_fp8,
    ("fp8_moe", "MARLIN"): moe_marlin("fp8"),
    ("nvfp4_moe", "MARLIN"): moe_marlin("nvfp4"),
}
# kernels that quantize an intermediate themselves (their bound is the FP8 one)
INTERNAL_FP8 = {("fp8_moe", "TRITON"), ("fp8_moe", "VLLM_CUTLASS"), ("fp8_moe", "FLASHINFER_CUTLASS")}
