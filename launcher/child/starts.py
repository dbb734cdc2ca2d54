"""Each kernel timed in several process starts: a kernel whose first start measured it correctly is started again
in a fresh process (a new fork, its own CUDA context, allocations and library heuristics; the harness's imports and
the on-disk JIT caches of the first start are reused), until it has `starts` medians per shape. The harness answers
once per kernel with the starts combined. Standard library only: the tests drive it without torch.

Combined, a shape's "us" is the median of its starts' medians and "us_starts" lists them, in order; the kernel's
status is the first start's, or the first later start that was not ok (its error says which start), so a kernel
that fails or goes wrong on any start is never recommended. "seconds", "timed_s" and "noise" add up over the
starts, "setup_s" is the first start's (where JIT compiles land), "t" runs from the first start's fork to the
last start's end, and "starts" keeps each start's own seconds, set-up, timed section and timeline.
"""

from __future__ import annotations

import math
import statistics
from typing import Any


class Starts:
    """The starts of every kernel of one request: record(job, result) as each child ends."""

    def __init__(self, starts: int) -> None:
        self.starts = max(1, starts)
        self._done: dict[tuple[str, str], list[dict[str, Any]]] = {}

    def record(self, job: dict[str, Any], result: dict[str, Any]) -> tuple[list[dict[str, Any]], dict[str, Any] | None]:
        """(jobs to run next, the kernel's combined result once it has every start it will get)."""
        key = (job["chain"], job["kernel"])
        results = self._done.setdefault(key, [])
        results.append(result)
        if result.get("status") == "ok" and len(results) < self.starts:
            return [{**job, "start": len(results) + 1}], None
        del self._done[key]
        return [], combine(results, self.starts)


def combine(results: list[dict[str, Any]], planned: int) -> dict[str, Any]:
    """One kernel's result from its starts' results (see the module's docstring)."""
    first = results[0]
    if len(results) == 1 and planned == 1:
        return first
    combined = dict(first)
    bad = next(((i, r) for i, r in enumerate(results) if r.get("status") != "ok"), None)
    if bad is not None and bad[0] > 0:
        i, r = bad
        combined["status"] = r.get("status")
        why = r.get("error") or ("its output failed the numerics check" if r.get("status") == "wrong" else "")
        combined["error"] = f"start {i + 1} of {planned}: {why or r.get('status')}"
    timed = [r for r in results if r.get("shapes")]
    if timed:
        combined["shapes"] = [_shape([r["shapes"][j] for r in timed]) for j in range(len(first.get("shapes", [])))]
    combined["noise"] = sum(r.get("noise", 0) for r in results)
    combined["seconds"] = round(sum(r.get("seconds", 0.0) for r in results), 1)
    if any(r.get("timed_s") is not None for r in results):
        combined["timed_s"] = round(sum(r.get("timed_s") or 0.0 for r in results), 1)
    last = results[-1].get("t") or {}
    combined["t"] = {**(first.get("t") or {}), "ended": last.get("ended")}
    combined["starts"] = [{k: r.get(k) for k in ("status", "seconds", "setup_s", "timed_s", "t")} for r in results]
    return combined


def _shape(per_start: list[dict[str, Any]]) -> dict[str, Any]:
    """One shape over the starts that timed it: the median of their medians, each start's, the worst numerics."""
    shape = dict(per_start[0])
    times = [s["us"] for s in per_start if isinstance(s.get("us"), int | float)]
    if times:
        shape["us"], shape["us_starts"] = statistics.median(times), times
    errors = [s["rel_err"] for s in per_start if isinstance(s.get("rel_err"), int | float)]
    if errors:  # the worst start's (NaN, an output that was not finite, is the worst)
        shape["rel_err"] = max(errors, key=lambda e: math.inf if math.isnan(e) else e)
    if any("numerics_ok" in s for s in per_start):
        shape["numerics_ok"] = all(s.get("numerics_ok", False) for s in per_start)
    return shape
