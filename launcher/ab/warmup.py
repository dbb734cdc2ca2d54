"""A fresh server's warm-up, and each level's pass length: passes with prompts the measured passes never send
(other seeds), at the measured concurrency, until throughput stops drifting (CoV of the last one-second bins under
the limit: Georges et al.'s rule) or the passes allowed are spent; then every level's window is sized so that the
slowest side completes enough requests inside it."""

from __future__ import annotations

import math
from collections.abc import Callable

from launcher.ab.config import WARM_COV
from launcher.ab.document import PassDoc
from launcher.ab.guard import compiled_during, log_offset
from launcher.ab.measure import bench_pass, pass_folder
from launcher.ab.servers import ServerPool, Up, reset_prefix_cache
from launcher.ab.state import AbRun
from launcher.ab.window import MIN_LATENCIES, MIN_REQUESTS_PER_STREAM, Window, drift, settled

Say = Callable[[str], None]
WARMUP_SEED = 1000  # warm-up prompts come from seeds the measured passes never use
MAX_WINDOW_S = 600.0


def warm_up(run: AbRun, pool: ServerPool, up: Up, name: str, say: Say, passes: int) -> None:
    """A server at every level: passes with prompts the measured passes never send, until its throughput stops
    drifting (CoV of the last throughput bins under the limit) or `passes` are spent. Each pass also paces the
    side (its requests per second and latency), which sizes the windows."""
    start = len(run.states[name].startups_s)
    for c in run.cfg.workload.concurrency:
        cov, done, k = None, False, 0
        for k in range(1, passes + 1):
            reset_prefix_cache(up)
            since = log_offset(up.log)
            folder = pass_folder(run, f"warmup-{name}-{start}-c{c}-{k}")
            result = bench_pass(run, up, folder, name, c, WARMUP_SEED + k, run.windows.get(c, run.cfg.window_s))
            if result.window is not None and (got := pace(result.window)) is not None:
                run.paces[(name, c)] = got
            bins = result.window.bins if result.window else ()
            cov = drift(bins)
            done = settled(bins, WARM_COV) and not compiled_during(up.log, since)
            if done:
                break
        run.warmups.append({"side": name, "start": start, "level": c, "passes": k, "settled": done,
                            "cov": None if cov is None else round(cov, 4)})  # fmt: skip
        if passes and not done:
            say(f"{name}: c={c} still drifting after {k} warm-up pass(es); measuring anyway (the report says so)")


def pace(window: Window) -> tuple[float, float] | None:
    """A side's requests per second and request latency at one level. A closed loop's rate is the requests in
    flight over their latency (Little's law); counting the completions inside a window shorter than a few latencies
    undercounts it (the H200, 2026-12-03: eager Nano at c=8, seconds per request, a 5 s warm-up window completed
    a few and sized the passes at the 600 s cap)."""
    if window.latency_s <= 0 or window.in_flight <= 0:
        return None
    return window.in_flight / window.latency_s, window.latency_s


def _hold(run: AbRun, c: int, paces: list[tuple[float, float]]) -> float:
    """The seconds a pass at level c holds the load so that the slowest side completes 10 x c requests and 5
    request latencies inside its window (with a fifth more to spare), never under --window nor over the cap."""
    need = max(max(MIN_REQUESTS_PER_STREAM * c / rate, MIN_LATENCIES * latency) for rate, latency in paces) * 1.2
    return min(MAX_WINDOW_S, max(run.cfg.window_s, math.ceil(need * 2) / 2))


def size_windows(run: AbRun, say: Say) -> None:
    """Each level's pass length, fixed once every side has warmed up there (from the warm-up's pace)."""
    for c in run.cfg.workload.concurrency:
        paces = [pace for (side, level), pace in run.paces.items() if level == c]
        if c in run.windows or not paces:
            continue
        run.windows[c] = _hold(run, c, paces)
        if run.windows[c] > run.cfg.window_s:
            say(f"ab: c={c}: passes hold the load {run.windows[c]:g} s (the slowest side needs that for its window)")


def lengthen_short(run: AbRun, passes: list[PassDoc], say: Say) -> None:
    """A level whose passes came out short (a side ran slower than its warm-up paced it: the H200, 2026-12-03,
    eager Nano took 2.2-3.1 s a request at c=1 against the warm-up's 1.9 s, and one of its two passes was dropped)
    holds the load longer from the next round on, sized from this round's own passes. Windows only grow; both
    sides of a comparison always hold the same length."""
    for c in run.cfg.workload.concurrency:
        at = [p["window"] for p in passes if p["level"] == c and p["window"] is not None]
        if not any(w["short"] for w in at):
            continue
        paces = [(w["in_flight"] / w["latency_s"], w["latency_s"]) for w in at if w["latency_s"] > 0 < w["in_flight"]]
        longer = _hold(run, c, paces) if paces else run.windows.get(c, run.cfg.window_s)
        if longer > run.windows.get(c, run.cfg.window_s):
            run.windows[c] = longer
            say(f"ab: c={c}: passes came out short; they hold the load {longer:g} s from the next round on")


def round_estimate(run: AbRun) -> float:
    """Seconds one round takes at the sized windows: each side passes twice per level, each pass holds its window,
    then drains (the slowest side's request latency) and is written (about a second)."""
    total = 0.0
    for c in run.cfg.workload.concurrency:
        latency = max((lat for (_, level), (_, lat) in run.paces.items() if level == c), default=0.0)
        total += 2 * len(run.live_names()) * (run.windows.get(c, run.cfg.window_s) + latency + 1.0)
    return total
