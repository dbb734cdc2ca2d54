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
BOUND = {"bf16": 1e-2}  # relative Frobenius error for bf16 output


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
    logits = torch.randn(m, e, device="cuda")
    weights, ids = torch.topk(torch.softmax(logits, -1), topk)
    ids = ids.to(torch.int32)
    ref = torch.zeros(m, k, device="cuda")
    for j in range(topk):
        for ex in range(e):
            rows = ids[:, j] == ex
            if rows.any():
                h = x[rows].float() @ w1[ex].float().t()
                g, u = h.chunk(2, dim=-1)
                ref[rows] += weights[rows, j, None] * ((torch.nn.functional.silu(g) * u) @ w2[ex].float().t())
    return (lambda: fused_experts(x, w1, w2, weights, ids)), ref


KERNELS = {
    ("fp8_dense", "bf16 (unquantized baseline)"): bf16_baseline,
    ("fp8_dense", "PerTensorTorchFP8ScaledMMLinearKernel"): fp8_torch(per_row=False),
    ("fp8_dense", "ChannelWiseTorchFP8ScaledMMLinearKernel"): fp8_torch(per_row=True),
    ("fp8_dense", "CutlassFP8ScaledMMLinearKernel"): fp8_cutlass,
    ("fp8_dense", "FlashInferFP8ScaledMMLinearKernel"): fp8_flashinfer,
    ("nvfp4_dense", "TorchNvFp4LinearKernel"): nvfp4_torch,
    ("nvfp4_dense", "CutlassNvFp4LinearKernel"): nvfp4_cutlass,
    ("fp8_moe", "TRITON (bf16 weights)"): moe_triton_bf16,
}


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
            shape["numerics_ok"] = bool(torch.isfinite(out).all()) and shape["rel_err"] <= BOUND["bf16"]
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
