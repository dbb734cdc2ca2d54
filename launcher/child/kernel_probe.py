"""Run one kernel of one chain on this GPU, check its numerics, time it: python -I kernel_probe.py SPEC_JSON
SPEC_JSON: {"chain", "kernel", "shapes": [[M, N, K], ...], "repeats"}. Prints one JSON object.

Each kernel is called through the library call vLLM uses for it. Inputs are fresh random values, never zeros;
the output is poisoned with NaN first so an unwritten element fails the check. The reference is computed in
float32 from the same (dequantized) inputs, so the check measures the kernel, not the quantization. Times are
medians of CUDA-graph replays (events around each replay), falling back to plain launches if capture fails.
"""

import json
import statistics
import sys
import traceback

import torch

FP8 = torch.float8_e4m3fn
# relative Frobenius error allowed: bf16 output of exact inputs; and where the kernel itself quantizes an
# intermediate to FP8 (e4m3 keeps 3 mantissa bits, so a few percent is that rounding, not a bug)
BOUND = {"bf16": 1e-2, "fp8-internal": 6e-2}


class Unsupported(Exception):
    """The kernel says it cannot run here (capability, missing library): not a failure of the kernel."""


def quantize_fp8(x: torch.Tensor, per_row: bool) -> tuple[torch.Tensor, torch.Tensor]:
    amax = x.abs().amax(dim=1, keepdim=True) if per_row else x.abs().amax()
    scale = (amax.float() / torch.finfo(FP8).max).clamp(min=1e-12)
    return (x / scale).to(FP8), scale


def fp8_inputs(m: int, n: int, k: int, per_row: bool):
    a = torch.randn(m, k, device="cuda", dtype=torch.bfloat16)
    w = torch.randn(n, k, device="cuda", dtype=torch.bfloat16) / k**0.5
    qa, sa = quantize_fp8(a, per_row)
    qw, sw = quantize_fp8(w, per_row)
    ref = (qa.float() * sa) @ (qw.float() * sw).t()
    return qa, sa, qw, sw, ref


def fp8_torch(per_row: bool):
    def setup(m, n, k):
        qa, sa, qw, sw, ref = fp8_inputs(m, n, k, per_row)
        sa = sa.reshape(m, 1) if per_row else sa.reshape(())
        sw = sw.reshape(1, n) if per_row else sw.reshape(())
        return (lambda: torch._scaled_mm(qa, qw.t(), scale_a=sa, scale_b=sw, out_dtype=torch.bfloat16)), ref

    return setup


def fp8_cutlass(m, n, k):
    from vllm import _custom_ops as ops

    qa, sa, qw, sw, ref = fp8_inputs(m, n, k, per_row=False)
    if not ops.cutlass_scaled_mm_supports_fp8(
        torch.cuda.get_device_capability()[0] * 10 + torch.cuda.get_device_capability()[1]
    ):
        raise Unsupported("vLLM's CUTLASS build has no FP8 scaled-mm for this capability")
    b = qw.t()  # K x N, column-major as vLLM stores it
    return (
        lambda: ops.cutlass_scaled_mm(
            qa, b, scale_a=sa.reshape(1, 1), scale_b=sw.reshape(1, 1), out_dtype=torch.bfloat16
        )
    ), ref


def fp8_flashinfer(m, n, k):
    import flashinfer

    qa, sa, qw, sw, ref = fp8_inputs(m, n, k, per_row=False)
    a3, b3 = qa.unsqueeze(0), qw.t().unsqueeze(0)
    return (lambda: flashinfer.bmm_fp8(a3, b3, sa.reshape(()), sw.reshape(()), torch.bfloat16).squeeze(0)), ref


def bf16_baseline(m, n, k):
    a = torch.randn(m, k, device="cuda", dtype=torch.bfloat16)
    w = torch.randn(n, k, device="cuda", dtype=torch.bfloat16) / k**0.5
    return (lambda: a @ w.t()), a.float() @ w.float().t()


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

    cap = torch.cuda.get_device_capability()
    if not ops.cutlass_scaled_mm_supports_fp4(cap[0] * 10 + cap[1]):
        raise Unsupported(f"vLLM's CUTLASS FP4 GEMM needs SM100+ (this GPU is sm_{cap[0]}{cap[1]})")
    raise Unsupported("FP4 weight packing for this probe is not implemented yet")


def moe_triton_bf16(m, n, k):
    """vLLM's Triton fused MoE (the TRITON backend), unquantized: 8 experts, top-2, as a chain baseline."""
    from vllm.model_executor.layers.fused_moe import fused_experts

    e, topk = 8, 2
    x = torch.randn(m, k, device="cuda", dtype=torch.bfloat16)
    w1 = torch.randn(e, 2 * n, k, device="cuda", dtype=torch.bfloat16) / k**0.5
    w2 = torch.randn(e, k, n, device="cuda", dtype=torch.bfloat16) / n**0.5
    weights, ids = torch.topk(torch.softmax(torch.randn(m, e, device="cuda"), -1), topk)
    ids = ids.to(torch.int32)
    return (lambda: fused_experts(x, w1, w2, weights, ids)), moe_reference(x, w1, w2, weights, ids)


def moe_reference(x, w1, w2, weights, ids):
    e = w1.shape[0]
    ref = torch.zeros(x.shape[0], w2.shape[1], device=x.device)
    for j in range(ids.shape[1]):
        for ex in range(e):
            rows = ids[:, j] == ex
            if rows.any():
                g, u = (x[rows].float() @ w1[ex].float().t()).chunk(2, dim=-1)
                ref[rows] += weights[rows, j, None] * ((torch.nn.functional.silu(g) * u) @ w2[ex].float().t())
    return ref


def moe_triton_fp8(m, n, k):
    """vLLM's Triton fused MoE with FP8 weights and activations (per-tensor scales): the TRITON FP8 backend."""
    import vllm.model_executor.layers.fused_moe  # noqa: F401  (registers torch.ops.vllm.fused_experts)

    e, topk = 8, 2
    x = torch.randn(m, k, device="cuda", dtype=torch.bfloat16)
    w1 = torch.randn(e, 2 * n, k, device="cuda", dtype=torch.bfloat16) / k**0.5
    w2 = torch.randn(e, k, n, device="cuda", dtype=torch.bfloat16) / n**0.5
    q1, s1 = zip(*(quantize_fp8(w1[i], per_row=False) for i in range(e)), strict=True)
    q2, s2 = zip(*(quantize_fp8(w2[i], per_row=False) for i in range(e)), strict=True)
    w1q, w2q = torch.stack(q1), torch.stack(q2)
    w1s, w2s = torch.stack(s1).float().reshape(e), torch.stack(s2).float().reshape(e)
    weights, ids = torch.topk(torch.softmax(torch.randn(m, e, device="cuda"), -1), topk)
    ids = ids.to(torch.int32)
    ref = moe_reference(x, w1q.float() * w1s[:, None, None], w2q.float() * w2s[:, None, None], weights, ids)

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

    return run, ref


def paged_inputs(m, n, k, heads=32, kv_heads=8, head_dim=128, block=16):
    """m sequences, each with n new query tokens at the end of a k-token context, KV in a shuffled paged cache.
    Returns the keyword arguments both paged-attention kernels take (output poisoned with NaN) and the reference."""
    blocks_per_seq = -(-k // block)
    num_blocks = m * blocks_per_seq + 1
    q = torch.randn(m * n, heads, head_dim, device="cuda", dtype=torch.bfloat16)
    k_cache = torch.randn(num_blocks, block, kv_heads, head_dim, device="cuda", dtype=torch.bfloat16)
    v_cache = torch.randn(num_blocks, block, kv_heads, head_dim, device="cuda", dtype=torch.bfloat16)
    table = torch.randperm(num_blocks - 1, device="cuda", dtype=torch.int32)[: m * blocks_per_seq].view(m, -1)
    scale = head_dim**-0.5
    ref = torch.empty(m * n, heads, head_dim, device="cuda")
    group = heads // kv_heads
    for i in range(m):
        kk = k_cache[table[i].long()].reshape(-1, kv_heads, head_dim)[:k].float().repeat_interleave(group, 1)
        vv = v_cache[table[i].long()].reshape(-1, kv_heads, head_dim)[:k].float().repeat_interleave(group, 1)
        scores = torch.einsum("qhd,khd->hqk", q[i * n : (i + 1) * n].float(), kk) * scale
        pos_q = torch.arange(k - n, k, device="cuda")[:, None]
        scores = scores.masked_fill(torch.arange(k, device="cuda")[None, :] > pos_q, float("-inf"))
        ref[i * n : (i + 1) * n] = torch.einsum("hqk,khd->qhd", torch.softmax(scores, -1), vv)
    kwargs = {
        "q": q,
        "k": k_cache,
        "v": v_cache,
        "out": torch.full_like(q, float("nan")),
        "cu_seqlens_q": torch.arange(0, m * n + 1, n, device="cuda", dtype=torch.int32),
        "max_seqlen_q": n,
        "seqused_k": torch.full((m,), k, device="cuda", dtype=torch.int32),
        "max_seqlen_k": k,
        "softmax_scale": scale,
        "causal": True,
        "block_table": table,
    }
    return kwargs, ref


def attention_triton(m, n, k):
    from vllm.v1.attention.ops.triton_unified_attention import unified_attention

    kwargs, ref = paged_inputs(m, n, k)

    def run():
        unified_attention(**kwargs, window_size=(-1, -1), softcap=0, q_descale=None, k_descale=None, v_descale=None)
        return kwargs["out"]

    return run, ref


def attention_flash(m, n, k):
    from vllm.vllm_flash_attn import flash_attn_varlen_func

    kwargs, ref = paged_inputs(m, n, k)
    version = 3 if torch.cuda.get_device_capability()[0] == 9 else 2

    def run():
        flash_attn_varlen_func(**kwargs, window_size=[-1, -1], fa_version=version)
        return kwargs["out"]

    return run, ref


KERNELS = {
    ("fp8_dense", "bf16 (unquantized baseline)"): bf16_baseline,
    ("fp8_dense", "PerTensorTorchFP8ScaledMMLinearKernel"): fp8_torch(per_row=False),
    ("fp8_dense", "ChannelWiseTorchFP8ScaledMMLinearKernel"): fp8_torch(per_row=True),
    ("fp8_dense", "CutlassFP8ScaledMMLinearKernel"): fp8_cutlass,
    ("fp8_dense", "FlashInferFP8ScaledMMLinearKernel"): fp8_flashinfer,
    ("nvfp4_dense", "TorchNvFp4LinearKernel"): nvfp4_torch,
    ("nvfp4_dense", "CutlassNvFp4LinearKernel"): nvfp4_cutlass,
    ("fp8_moe", "TRITON (bf16 weights)"): moe_triton_bf16,
    ("fp8_moe", "TRITON"): moe_triton_fp8,
    ("attention", "TRITON_ATTN"): attention_triton,
    ("attention", "FLASH_ATTN"): attention_flash,
}
# kernels that quantize an intermediate themselves (their bound is the FP8 one)
INTERNAL_FP8 = {("fp8_moe", "TRITON")}


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


def probe(spec: dict) -> dict:
    setup = KERNELS.get((spec["chain"], spec["kernel"]))
    if setup is None:
        return {"status": "not-probed", "error": "nemolaunch has no probe for this kernel yet"}
    torch.manual_seed(0)
    shapes = []
    for m, n, k in spec["shapes"]:
        try:
            fn, ref = setup(m, n, k)
            out = fn()
            torch.cuda.synchronize()
        except Unsupported as e:
            return {"status": "unsupported", "error": str(e)}
        except (ImportError, AttributeError, TypeError) as e:
            if isinstance(e, ImportError) or "has no attribute" in str(e) or "argument" in str(e):
                return {"status": "unavailable", "error": f"{type(e).__name__}: {e}"[:400]}
            raise
        except RuntimeError as e:
            text = str(e)
            if "NOT_SUPPORTED" in text or "not supported" in text.lower() or "no kernel image" in text:
                return {"status": "unsupported", "error": f"{type(e).__name__}: {text.splitlines()[0]}"[:400]}
            raise
        shape = {"m": m, "n": n, "k": k}
        if ref is not None:
            diff = (out.float() - ref).norm() / ref.norm()
            shape["rel_err"] = float(diff) if torch.isfinite(diff) else float("nan")
            bound = BOUND["fp8-internal" if (spec["chain"], spec["kernel"]) in INTERNAL_FP8 else "bf16"]
            shape["numerics_ok"] = bool(torch.isfinite(out).all()) and shape["rel_err"] <= bound
        shape["us"], shape["timing"] = time_us(fn, spec.get("repeats", 20))
        shapes.append(shape)
    if any("numerics_ok" not in s for s in shapes):
        return {"status": "unchecked", "shapes": shapes}
    ok = all(s["numerics_ok"] for s in shapes)
    return {"status": "ok" if ok else "wrong", "shapes": shapes}


if __name__ == "__main__":
    if sys.argv[1] == "--list":
        print(json.dumps(sorted(KERNELS)))
        raise SystemExit
    spec = json.loads(sys.argv[1])
    try:
        result = probe(spec)
    except Exception as e:  # the kernel failed: its class and message are the finding
        result = {
            "status": "failed",
            "error_class": type(e).__name__,
            "error": traceback.format_exception_only(type(e), e)[-1].strip()[:500],
        }
    print(json.dumps(result), flush=True)
