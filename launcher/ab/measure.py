"""One pass at one level: a timed bench run against a side's server, with the prefix cache emptied first, NVML
watching, and the server's log checked for compilation after; what it measured and whether it counts."""

from __future__ import annotations

import time
from pathlib import Path

from launcher.ab.document import PassDoc
from launcher.ab.guard import compiled_during, log_offset, watch_gpu
from launcher.ab.passes import PassResult, pass_result, window_doc
from launcher.ab.servers import ServerPool, Up, reset_prefix_cache
from launcher.ab.sides import is_cpu_engine
from launcher.ab.state import AbRun
from launcher.errors import ExitCode, NemolaunchError

# vLLM's CPU engine always runs its worker in a separate process fed through a shared-memory queue whose reader
# spins (sched_yield) for 1 s after its last read before it sleeps on a socket (vLLM 0.32 shm_broadcast
# SpinCondition, busy_loop_s=1); idle after that, a co-resident CPU server measured 1.4% CPU. So before a pass on
# another side than the last one, wait out the idle server's spin: it would otherwise share the 2 cores with the
# first second of the measured pass. A single-GPU server (vLLM 0.26 'uni' executor) has no such queue: no wait.
CPU_SETTLE_S = 1.2
Values = dict[str, float | None] | None  # a pass's metrics, None when it is not averaged in


class ServerDied(NemolaunchError):
    """A side's server stopped between or during passes: that side is out of the run (the others go on)."""


def bench_pass(run: AbRun, up: Up, folder: Path, side: str, c: int, seed: int, seconds: float) -> PassResult:
    """One timed bench pass at level c: the concurrency held for the window (and its ramp and drain)."""
    from launcher import bench

    if run.mode == "co-resident" and run.last_side not in (None, side) and is_cpu_engine(run.profiles[side]):
        time.sleep(CPU_SETTLE_S)
    run.last_side = side
    w = run.cfg.workload
    cfg = bench.BenchConfig(url=up.url, model=up.served_model, concurrency=(c,), input_len=w.input_len,
                            output_len=w.output_len, num_prompts=w.num_prompts, duration_s=seconds,
                            warmup=0, label=side, seed=seed, api_key=up.api_key)  # fmt: skip
    try:
        outcome = bench.run(cfg, folder, up.info, lambda m: None)
    except NemolaunchError as e:
        if up.alive():
            raise
        raise ServerDied(f"the server stopped answering in {folder.relative_to(run.out)} ({e.message})") from None
    if outcome.code == ExitCode.INTERRUPTED:
        raise KeyboardInterrupt
    if not up.alive():
        raise ServerDied(f"the server died during {folder.relative_to(run.out)}")
    return pass_result(outcome.summary, folder, c)


def pass_folder(run: AbRun, stem: str) -> Path:
    """passes/STEM, or STEM-2, -3 ... when an interrupted attempt left that folder (never overwritten)."""
    folder, k = run.out / "passes" / stem, 1
    while folder.exists():
        k += 1
        folder = run.out / "passes" / f"{stem}-{k}"
    return folder


def measure(run: AbRun, pool: ServerPool, up: Up, name: str, c: int, stem: str) -> tuple[PassDoc, Values]:
    """A measured pass: the prefix cache emptied first, NVML watching, the log checked for compilation after."""
    folder = pass_folder(run, stem)
    reset = reset_prefix_cache(up)
    since, started = log_offset(up.log), time.monotonic()
    with watch_gpu(pool.pids()) as gpu:
        result = bench_pass(run, up, folder, name, c, run.cfg.workload.seed, run.windows.get(c, run.cfg.window_s))
    compiled = compiled_during(up.log, since)
    invalid = (
        result.invalid()
        or (f"the server compiled a kernel during the pass: {compiled}" if compiled else None)
        or gpu.invalid()
    )
    doc: PassDoc = {
        "side": name,
        "level": c,
        "folder": str(folder.relative_to(run.out)),
        "status": result.status,
        "invalid": invalid,
        "window": window_doc(result.window),
        "gpu": gpu.summary(),
        "prefix_reset": reset,
        "seconds": round(time.monotonic() - started, 2),
    }
    return doc, (None if invalid else result.values())
