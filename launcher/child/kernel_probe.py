"""The probe harness: set up, check and time kernels of vLLM's chains on this GPU.

    python kernel_probe.py --serve [--chains A,B]
                                      imports torch and vLLM once (the modules of those chains), prints
                                      {"kernels": [...]}, reads one request
                                      {"jobs": [{"chain", "kernel", "shapes": [[M, N, K], ...], "layer": {...}}],
                                      "timeout_s", "parallel", "starts"} on stdin, runs each job in a forked
                                      child (isolate.py), a kernel measured correctly again in `starts` fresh
                                      children in all (starts.py), and prints one JSON line per kernel as its
                                      last start ends, then {"done": true}

If importing a preloaded module initializes CUDA (forked children could not use the GPU then), the harness starts
again without that module (the children that need it import it themselves); the hello says which and how long each
preload took.

Each kernel is called through the library call vLLM uses for it (probe_kernels/, one module per family). Inputs
are fresh random values, never zeros; where a kernel writes into a buffer it is given, the buffer is poisoned with
NaN first so an unwritten element fails the check. The reference is computed in float32 from the same
(dequantized) inputs, so the check measures the kernel, not the quantization. Times are medians of CUDA-graph
replays (events around each replay), falling back to plain launches if capture fails.
"""

import importlib
import json
import math
import os
import re
import statistics
import sys
import time
from collections.abc import Callable

import torch
from isolate import Build, run_isolated
from probe_kernels import attention, gates, linear, mamba, moe
from probe_kernels.inputs import KernelLayer
from starts import Starts
from verdict import classify

# relative Frobenius error allowed: bf16 output of exact inputs; and where the kernel itself quantizes an
# intermediate to FP8 (e4m3 keeps 3 mantissa bits, so a few percent is that rounding, not a bug)
BOUND = {"bf16": 1e-2, "fp8-internal": 6e-2}
# lines a kernel prints when an autotuner skips tactics or a library falls back: counted per kernel
NOISE = re.compile(r"Skipping tactic|\[Autotuner\]|Error Internal|UserWarning|falling back", re.IGNORECASE)
# imported once by the harness so that each forked child starts warm, per chain (only the chains of this run:
# on the H200, warm, vllm._custom_ops took 8-10 s and fused_moe 8-9 s). Not flashinfer: importing it initializes
# CUDA, so the harness would start again and import everything twice; its kernels' children import it themselves.
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
    "mamba": ("vllm.model_executor.layers.mamba.ops.mamba_ssm",),
}
# every kernel the harness can set up: (chain, kernel) -> setup(m, n, k, layer) -> (run, reference)
KERNELS: dict[tuple[str, str], Callable] = {
    **linear.KERNELS,
    **moe.KERNELS,
    **attention.KERNELS,
    **mamba.KERNELS,
    **gates.GATES,
}


def preloads(chains: list[str] | None) -> list[str]:
    """The modules to import up front for these chains (every chain's when None), each once, in order."""
    picked = [""] + (list(PRELOAD) if chains is None else chains)
    return list(dict.fromkeys(m for c in picked for m in PRELOAD.get(c, ())))


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
    layer = KernelLayer(**spec.get("layer", {}))
    torch.manual_seed(0)
    started = time.monotonic()
    prepared = []
    bound = BOUND["fp8-internal" if (spec["chain"], spec["kernel"]) in moe.INTERNAL_FP8 else "bf16"]
    for m, n, k in spec["shapes"]:
        try:
            fn, reference = setup(m, n, k, layer)
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
    starts = Starts(request.get("starts", 1))

    def ended(job: dict, result: dict) -> list[dict]:
        again, combined = starts.record(job, result)
        if combined is not None:
            answer({"chain": job["chain"], "kernel": job["kernel"], **combined})
        return again

    run_isolated(
        request["jobs"],
        probe,
        request["timeout_s"],
        request["parallel"],
        ended,
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
