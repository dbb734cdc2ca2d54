"""Statistics of one level, as the README's "What bench measures" defines them. Pure functions of the request
records: no I/O, so every formula is checked by hand in the tests."""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from launcher.bench.client import RequestRecord
from launcher.bench.config import LevelSpec

PERCENTILES = (50, 90, 99)


@dataclass(frozen=True)
class Stats:
    """Milliseconds; None when no request completed."""

    mean: float | None = None
    p50: float | None = None
    p90: float | None = None
    p99: float | None = None

    @classmethod
    def of(cls, seconds: list[float]) -> Stats:
        if not seconds:
            return cls()
        arr = np.asarray(seconds) * 1000
        p50, p90, p99 = (round(float(v), 3) for v in np.percentile(arr, PERCENTILES))
        return cls(round(float(arr.mean()), 3), p50, p90, p99)


@dataclass(frozen=True)
class RunThroughput:
    wall_s: float
    output_throughput_tok_s: float
    request_throughput_req_s: float
    achieved_concurrency: float


@dataclass(frozen=True)
class Goodput:
    """vLLM bench serve's goodput: a request is good when it meets every SLO (TPOT of a 1-token output is 0)."""

    slo_ms: dict[str, float]
    good: int
    share: float | None  # of the requests sent (failed requests meet no SLO)
    request_goodput_req_s: float | None
    met: bool  # at least the asked share of the requests sent met every SLO


@dataclass(frozen=True)
class LevelResult:
    """One entry of summary.json's `levels` (schema nemolaunch.bench/1)."""

    concurrency: int | None
    request_rate: float | None
    input_len: int
    repeats: int
    completed: int
    failed: int
    failures: dict[str, int]
    length_mismatched: int
    output_throughput_tok_s: float
    output_throughput_stdev: float | None
    request_throughput_req_s: float
    achieved_concurrency: float
    per_user_tok_s: float | None
    ttft_ms: Stats
    tpot_ms: Stats
    itl_ms: Stats
    e2el_ms: Stats
    runs: list[RunThroughput] = field(default_factory=list)
    goodput: Goodput | None = None
    # the prompts' mean length as the server counted it (usage): what a dataset level really sent, where
    # input_len is only the sweep's setting
    mean_prompt_tokens: float | None = None


def tpot_s(r: RequestRecord) -> float | None:
    if r.e2e_s is None or r.ttft_s is None:
        return None
    return (r.e2e_s - r.ttft_s) / (r.output_tokens - 1) if r.output_tokens > 1 else 0.0


def run_throughput(records: list[RequestRecord], wall: float) -> RunThroughput:
    good = [r for r in records if r.ok]
    if wall <= 0:
        return RunThroughput(round(wall, 3), 0.0, 0.0, 0.0)
    return RunThroughput(
        wall_s=round(wall, 3),
        output_throughput_tok_s=round(sum(r.output_tokens for r in good) / wall, 2),
        request_throughput_req_s=round(len(good) / wall, 3),
        achieved_concurrency=round(sum(r.e2e_s or 0 for r in good) / wall, 2),
    )


def goodput(records: list[RequestRecord], wall_total: float, slo_ms: dict[str, float], share: float) -> Goodput:
    def meets(r: RequestRecord) -> bool:
        got = {"ttft": r.ttft_s, "tpot": tpot_s(r), "e2el": r.e2e_s}
        return r.ok and all(got[k] is not None and got[k] * 1000 <= v for k, v in slo_ms.items())  # type: ignore[operator]

    good = sum(1 for r in records if meets(r))
    return Goodput(
        slo_ms=dict(slo_ms),
        good=good,
        share=round(good / len(records), 4) if records else None,
        request_goodput_req_s=round(good / wall_total, 3) if wall_total > 0 else None,
        met=bool(records) and good >= share * len(records),
    )


def summarize(
    spec: LevelSpec,
    runs: list[tuple[list[RequestRecord], float]],
    slo_ms: dict[str, float] | None = None,
    slo_share: float = 0.9,
) -> LevelResult:
    """One level: latency statistics over the requests of every repeat; throughput as the mean of repeats. A level
    that completed nothing has zero throughput and empty statistics (None), never NaN."""
    records = [r for recs, _ in runs for r in recs]
    ok = [r for r in records if r.ok]
    per_run = [run_throughput(recs, wall) for recs, wall in runs]
    tput = [p.output_throughput_tok_s for p in per_run]
    tpots = [t for t in (tpot_s(r) for r in ok if r.output_tokens > 1) if t is not None]
    return LevelResult(
        concurrency=spec.concurrency,
        request_rate=spec.request_rate,
        input_len=spec.input_len,
        repeats=len(runs),
        completed=len(ok),
        failed=len(records) - len(ok),
        failures=dict(Counter(r.error_class or "unknown" for r in records if not r.ok)),
        length_mismatched=sum(1 for r in ok if r.length_ok is False),
        output_throughput_tok_s=round(float(np.mean(tput)), 2) if tput else 0.0,
        output_throughput_stdev=round(float(np.std(tput, ddof=1)), 2) if len(tput) > 1 else None,
        request_throughput_req_s=round(float(np.mean([p.request_throughput_req_s for p in per_run])), 3)
        if per_run
        else 0.0,
        achieved_concurrency=round(float(np.mean([p.achieved_concurrency for p in per_run])), 2) if per_run else 0.0,
        per_user_tok_s=round(float(np.mean([r.output_tokens / r.e2e_s for r in ok if r.e2e_s])), 2) if ok else None,
        ttft_ms=Stats.of([r.ttft_s for r in ok if r.ttft_s is not None]),
        tpot_ms=Stats.of(tpots),
        itl_ms=Stats.of([g for r in ok for g in r.itl_s]),
        e2el_ms=Stats.of([r.e2e_s for r in ok if r.e2e_s is not None]),
        runs=per_run,
        goodput=goodput(records, sum(w for _, w in runs), slo_ms, slo_share) if slo_ms else None,
        mean_prompt_tokens=round(float(np.mean(counted)), 1)
        if (counted := [r.prompt_tokens for r in ok if r.prompt_tokens])
        else None,
    )


def level_label(level: LevelResult | dict[str, Any], with_input: bool = False) -> str:
    """How a level is named in messages: c=8, rate=4/s (c<=16), c=1 in=2048."""
    d = level if isinstance(level, dict) else level.__dict__
    parts = []
    if d.get("request_rate") is not None:
        parts.append(f"rate={d['request_rate']:g}/s")
        if d.get("concurrency") is not None:
            parts.append(f"(c<={d['concurrency']})")
    else:
        parts.append(f"c={d.get('concurrency')}")
    if with_input:
        parts.append(f"in={d.get('input_len')}")
    return " ".join(parts)
