"""The conversation with the probe harness (launcher/child/kernel_probe.py): hand it every kernel it can drive,
the slowest set-ups first, and record its answers as they come.

The harness imports torch and vLLM once, then forks one child per kernel with a timeout, so an illegal memory
access, a hang or an autotuner storm takes down only that probe. Up to PARALLEL children set up and check their
kernels at once (JIT compiles overlap); only one at a time is timed, and nothing else touches the GPU heavily
meanwhile (launcher/child/isolate.py).
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from typing import Any

from checks.proc import Conversation
from launcher.errors import NotReady
from launcher.probe import chains as chain_table
from launcher.probe.builds import NEEDS_BUILD
from launcher.probe.report import KernelResult
from launcher.probe.selection import Layer, shapes_for

# kernels set up side by side: most of a set-up is CPU work (each child's first call into vLLM's CUDA library
# took ~8 s on the H200, JIT compiles longer), so half the cores, at most 6 (each child holds a CUDA context)
PARALLEL = max(1, min(6, (os.cpu_count() or 2) // 2))
HARNESS_START_S = 180.0  # importing torch + vLLM + FlashInfer on a cold disk
# process starts per kernel measured correctly: its first, then again in fresh children (launcher/child/starts.py),
# so that a gap between two kernels can be told from the spread of their repeats (launcher/ranking.py's tie rule)
STARTS = 3


def slow_first(k: KernelResult) -> int:
    """Longest set-ups first, so they overlap everything else: FlashInfer's kernels (dispatched as soon as their
    JIT build is done; without the build, NEMOLAUNCH_FLASHINFER_PREBUILD=0, they compile in their slot: 114-145 s
    for its attention on a fresh H200, 48-54 s for its FP8 GEMM), FLEX_ATTENTION (torch.compile, 37-41 s), then
    the MoE set-ups (25-30 s each on the H200 when they quantized every expert)."""
    if "flashinfer" in k.kernel.lower() or k.kernel == "FLEX_ATTENTION":
        return 0
    return 1 if k.chain.endswith("_moe") else 2


def probe_all(
    harness: Conversation,
    kernels: list[KernelResult],
    layer: Layer,
    timeout_s: float,
    progress: Callable[[str], None],
    builds: dict[str, dict[str, Any]] | None = None,
    start: float | None = None,
    timeline: dict[str, Any] | None = None,
    starts: int = STARTS,
) -> bool:
    """Hand every kernel the harness can drive to it and record its answers as they come; returns whether the
    run was interrupted (Ctrl-C). Kernels it never answered for say why. A kernel that needs one of `builds`
    waits for it in the harness; times are made relative to `start` (monotonic) and go into `timeline`. Each
    kernel measured correctly is timed in `starts` process starts in all."""
    builds = builds or {}
    start = time.monotonic() if start is None else start
    timeline = {} if timeline is None else timeline
    try:
        hello = harness.receive(HARNESS_START_S)
    except TimeoutError:
        hello = None
    if not hello or "kernels" not in hello:
        raise NotReady(
            f"the probe harness does not start: {harness.last_error()}", "the engine's Python needs torch with CUDA"
        )
    if isinstance(hello.get("t_ready"), (int, float)):
        timeline["harness_ready"] = round(hello["t_ready"] - start, 1)
    timeline["harness_preload_s"] = hello.get("preload_s")
    timeline["harness_preload_skipped"] = hello.get("cuda_initialized_by")  # they initialized CUDA
    probed = {tuple(pair) for pair in hello["kernels"]}
    waiting: dict[tuple[str, str], KernelResult] = {}
    for k in kernels:
        if (k.chain, k.kernel) in probed:
            waiting[(k.chain, k.kernel)] = k
        else:
            k.error = chain_table.NOT_PROBED.get(k.kernel, "nemolaunch has no probe for this kernel yet")
    jobs: list[dict[str, Any]] = []
    for k in sorted(waiting.values(), key=slow_first):
        job = {"chain": k.chain, "kernel": k.kernel, "shapes": shapes_for(k.chain, layer), "layer": layer.for_child()}
        need = NEEDS_BUILD.get((k.chain, k.kernel))
        jobs.append({**job, "needs": need} if need in builds else job)
    harness.send({"jobs": jobs, "timeout_s": timeout_s, "parallel": PARALLEL, "builds": builds, "starts": starts})
    progress(f"{len(jobs)} kernels, {PARALLEL} set up at a time, one timed at a time, {starts} starts each")
    why_unanswered = "the probe harness ended without an answer"
    # a kernel waiting for a build may be answered only when its wait ends
    wait_ends = max((b["wait_until"] - time.monotonic() for b in builds.values()), default=0.0)
    silence = max(2 * timeout_s, wait_ends) + 60
    try:
        while waiting:
            # each kernel phase is bounded by timeout_s in the harness: silence past two phases means it hangs
            answer = harness.receive(silence)
            if answer is None:
                why_unanswered = f"the probe harness died: {harness.last_error()}"
                break
            key = (answer.get("chain"), answer.get("kernel"))
            if key not in waiting:
                continue
            k = waiting.pop(key)
            k.status, k.error = answer["status"], answer.get("error")
            k.shapes, k.noise_lines = answer.get("shapes", []), answer.get("noise", 0)
            k.seconds, k.setup_s, k.timed_s = answer.get("seconds", 0.0), answer.get("setup_s"), answer.get("timed_s")
            k.timeline = {
                what: round(t - start, 1) if isinstance(t, (int, float)) else None
                for what, t in (answer.get("t") or {}).items()
            }
            k.starts = answer.get("starts", [])
            progress(f"{k.chain}: {k.kernel}: {k.status} ({k.seconds:.0f} s)")
    except TimeoutError:
        why_unanswered = f"the probe harness stopped answering for {silence:.0f} s (killed)"
    except KeyboardInterrupt:
        for k in waiting.values():
            k.status, k.error = "interrupted", "Ctrl-C before it finished"
        return True
    for k in waiting.values():
        k.status, k.error = "crashed", why_unanswered
    return False
