"""The steady-state window of one bench pass at one level, from its per-request records (bench's requests.jsonl):
the seconds in which the requests in flight held at >= 95% of the concurrency asked for. Ramp-up (the first
requests' prefills) and drain (the last requests finishing alone) are measured and reported, never averaged in:
on the H200 a one-second pass at c=64 was mostly ramp and drain, and its A/A read 0.89-1.03.

A window counts when it holds at least 10 x concurrency completed requests (SGLang's "stable" rule) and lasts at
least 5 median request latencies; otherwise the pass is "short" and says why.
"""

from __future__ import annotations

import math
import statistics
from dataclasses import dataclass
from typing import Any

HOLD = 0.95  # in flight >= this share of the concurrency: vLLM bench's steady-state rule
MIN_REQUESTS_PER_STREAM = 10
MIN_LATENCIES = 5
BIN_S = 1.0  # throughput bins for the warm-up rule: about this wide, whole request latencies (at least MIN_BINS)
MIN_BINS = 5


@dataclass(frozen=True)
class Window:
    concurrency: int
    start_s: float  # from the pass's (level's) start
    end_s: float
    ramp_s: float  # first request sent -> window start
    drain_s: float  # window end -> last token
    in_flight: float  # time-weighted mean in flight inside the window
    requests: int  # completed inside the window
    tok_s: float | None  # output tokens produced inside the window, per second
    ttft_ms: float | None  # mean over requests sent inside the window
    tpot_ms: float | None
    latency_s: float  # median request latency of the pass
    bins: tuple[float, ...]  # output tok/s in consecutive bins across the window
    short: str | None  # why the window does not count, or None

    @property
    def seconds(self) -> float:
        return self.end_s - self.start_s


def _token_times(r: dict[str, Any]) -> list[float]:
    """When each output token arrived (seconds from the pass's start): from the inter-token gaps when they cover
    every token, else spread evenly between the first token and the end."""
    first = r["start_s"] + r["ttft_s"]
    end = r["start_s"] + r["e2e_s"]
    n = int(r.get("output_tokens") or 0)
    itl = r.get("itl_s") or []
    if n <= 1:
        return [first] * n
    if len(itl) == n - 1:
        times, t = [first], first
        for gap in itl:
            t += gap
            times.append(t)
        return times
    step = (end - first) / (n - 1)
    return [first + i * step for i in range(n)]


def steady_window(records: list[dict[str, Any]], concurrency: int) -> Window | None:
    """The pass's steady window at this concurrency; None when no request completed."""
    done = [r for r in records if r.get("ok") and r.get("e2e_s") is not None and r.get("ttft_s") is not None]
    if not done:
        return None
    events = sorted([(r["start_s"], 1) for r in done] + [(r["start_s"] + r["e2e_s"], -1) for r in done],
                    key=lambda e: (e[0], e[1]))  # fmt: skip  # at one instant, ends before starts
    need = math.ceil(HOLD * concurrency)
    level, first_at, last_at = 0, None, None
    for t, step in events:  # the first moment `need` are in flight, and the last moment they still are
        level += step
        if level >= need:
            first_at = t if first_at is None else first_at
            last_at = None
        elif first_at is not None and last_at is None:
            last_at = t
    begin = min(r["start_s"] for r in done)
    finish = max(r["start_s"] + r["e2e_s"] for r in done)
    latencies = sorted(r["e2e_s"] for r in done)
    latency = statistics.median(latencies)
    if first_at is None:  # never reached the concurrency (fewer requests than streams)
        return Window(concurrency, begin, begin, 0.0, finish - begin, 0.0, 0, None, None, None, latency, (),
                      f"never {need} requests in flight")  # fmt: skip
    end = last_at if last_at is not None else finish
    span = max(end - first_at, 1e-9)
    in_flight = _mean_in_flight(done, first_at, end)
    tokens = [t for r in done for t in _token_times(r)]
    inside = sum(1 for t in tokens if first_at <= t <= end)
    sent = [r for r in done if first_at <= r["start_s"] <= end and r["start_s"] + r["e2e_s"] <= end]
    ttft = statistics.fmean(r["ttft_s"] * 1000 for r in sent) if sent else None
    tpots = [(r["e2e_s"] - r["ttft_s"]) * 1000 / (r["output_tokens"] - 1) for r in sent if r["output_tokens"] > 1]
    completed = sum(1 for r in done if first_at <= r["start_s"] + r["e2e_s"] <= end)
    nbins, width = _bins(span, latency)
    counts = [0] * nbins
    for t in tokens:
        if first_at <= t <= first_at + nbins * width:
            counts[min(nbins - 1, int((t - first_at) / width))] += 1
    short = None
    if completed < MIN_REQUESTS_PER_STREAM * concurrency:
        short = f"{completed} requests completed in the window, fewer than {MIN_REQUESTS_PER_STREAM} x {concurrency}"
    elif span < MIN_LATENCIES * latency:
        short = f"the window lasted {span:.1f} s, under {MIN_LATENCIES} request latencies ({latency:.2f} s each)"
    return Window(
        concurrency=concurrency,
        start_s=first_at,
        end_s=end,
        ramp_s=first_at - begin,
        drain_s=finish - end,
        in_flight=in_flight,
        requests=completed,
        tok_s=inside / span if span > 1e-6 else None,
        ttft_ms=ttft,
        tpot_ms=statistics.fmean(tpots) if tpots else None,
        latency_s=latency,
        bins=tuple(c / width for c in counts),
        short=short,
    )


def _bins(span: float, latency: float) -> tuple[int, float]:
    """How many throughput bins the window holds and how wide: whole request latencies each, about a second. A
    closed loop at high concurrency runs in waves (the streams' prefills together, then their decodes), one wave a
    request latency; one-second bins cut the waves unevenly and read 15-25% apart with nothing drifting (the H200,
    2026-12-03, third lease: every side's warm-up at c=32 and 64, against 1.2-1.4% at c=1). A window under 5
    latencies (short anyway) gets 5 equal bins; the tail past the last whole bin is left out."""
    if latency <= 0 or span < MIN_BINS * latency:
        return MIN_BINS, span / MIN_BINS
    per_bin = max(1, min(math.ceil(BIN_S / latency), int(span / latency) // MIN_BINS))
    return int(span // (per_bin * latency)), per_bin * latency


def _mean_in_flight(done: list[dict[str, Any]], start: float, end: float) -> float:
    """The time-weighted mean of requests in flight over [start, end]."""
    busy = sum(max(0.0, min(end, r["start_s"] + r["e2e_s"]) - max(start, r["start_s"])) for r in done)
    return busy / (end - start) if end > start else 0.0


def drift(bins: tuple[float, ...], last: int = MIN_BINS) -> float | None:
    """The coefficient of variation of the last `last` throughput bins (Georges et al.'s steady-state measure);
    None with fewer bins."""
    tail = bins[-last:]
    if len(tail) < last or statistics.fmean(tail) <= 0:
        return None
    return statistics.stdev(tail) / statistics.fmean(tail)


def settled(bins: tuple[float, ...], cov_limit: float) -> bool:
    """Throughput has stopped drifting: the last bins' CoV is under the limit."""
    cov = drift(bins)
    return cov is not None and cov < cov_limit
