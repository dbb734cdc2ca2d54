"""The verdict statistics of `nemolaunch ab`: pure functions of paired per-round ratios, no I/O.

Each round is one order-balanced block (A B B A), so each round gives one ratio B/A per level and metric, and
linear drift within a block cancels. The decision works on log-ratios (a 10% gain and a 10% loss are symmetric):

- the interval is a two-sided 95% Student t interval on the mean per-round log-ratio (scipy.stats.ttest_1samp).
  With the 3-6 rounds a server start allows, a bootstrap has only 10-462 distinct resamples and its percentile
  interval comes out too narrow, and a Wilcoxon signed-rank test cannot reach p < 0.05 below 6 pairs; the t
  interval is honest at small n (it widens with it);
- the margin is the noise floor: the widest bound of an A/A run's interval (the same configuration on both sides),
  measured with --calibrate or read from a stored floor, and never below MIN_MARGIN;
- "faster" only when the whole interval clears the margin; "equivalent" when the whole interval lies within
  +-margin; otherwise "inconclusive", with the rounds that would decide if the spread stays as measured.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from scipy import stats

from launcher import noise
from launcher.ab.document import VerdictDoc

CONFIDENCE = 0.95
MIN_MARGIN = 0.01  # a difference under 1% is not worth a profile change, whatever the noise
DEFAULT_MARGIN = 0.03  # without an A/A measurement: the 0.1-3% an H200 A/A showed after its first round (NOTES.md)
# an A/A floor wider than this makes "equivalent" meaningless (a noisy run would call a 30% change "equivalent"):
# such a run can still find a difference that clears the floor, but never calls two sides equivalent
MAX_EQUIVALENCE_MARGIN = 0.10
METHOD = "95% Student t interval on the mean per-round log-ratio B/A (scipy.stats.ttest_1samp), paired ABBA rounds"
MAX_EXTRA_ROUNDS = 100

# output tok/s: higher is better; TPOT and TTFT: lower is better
HIGHER_IS_BETTER = {"output_tok_s": True, "tpot_ms": False, "ttft_ms": False}


@dataclass(frozen=True)
class Interval:
    """The mean ratio and its interval, as ratios (1.05 = +5%)."""

    n: int
    mean: float
    lo: float
    hi: float
    log_sd: float  # standard deviation of the per-round log-ratios

    @property
    def widest(self) -> float:
        """The largest distance of either bound from 1, as a fraction: an A/A run's noise floor."""
        return max(abs(self.lo - 1), abs(self.hi - 1))


def interval(ratios: list[float], confidence: float = CONFIDENCE) -> Interval | None:
    """The t interval of the mean log-ratio, back on the ratio scale; None with fewer than 2 valid ratios."""
    logs = [math.log(r) for r in ratios if r > 0 and math.isfinite(r)]
    if len(logs) < 2:
        return None
    mean = sum(logs) / len(logs)
    sd = math.sqrt(sum((x - mean) ** 2 for x in logs) / (len(logs) - 1))
    if sd == 0.0:  # identical ratios: scipy would return nan; the interval is the point
        lo = hi = mean
    else:
        ci = stats.ttest_1samp(logs, 0.0).confidence_interval(confidence)
        lo, hi = float(ci.low), float(ci.high)
    return Interval(len(logs), math.exp(mean), math.exp(lo), math.exp(hi), sd)


def noise_floor(aa_ratios: list[float]) -> float | None:
    """An A/A run's floor: how far from 1 its interval reaches (None when it has fewer than 2 rounds)."""
    iv = interval(aa_ratios)
    return None if iv is None else iv.widest


def margin_for(floor: float | None) -> float:
    return DEFAULT_MARGIN if floor is None else max(MIN_MARGIN, floor)


def rounds_to_decide(iv: Interval, margin: float, confidence: float = CONFIDENCE) -> int | None:
    """About how many rounds in all would let the interval clear the margin (or fit inside it), if the spread
    stays as measured; None when no number of rounds would (the mean sits on the margin)."""
    gap = abs(abs(math.log(iv.mean)) - math.log1p(margin))
    if gap == 0:
        return None
    if iv.log_sd == 0:
        return iv.n + 1
    n = iv.n
    while n <= iv.n + MAX_EXTRA_ROUNDS:
        n += 1
        half = stats.t.ppf(0.5 + confidence / 2, n - 1) * iv.log_sd / math.sqrt(n)
        if half < gap:
            return n
    return None


def verdict(metric: str, ratios: list[float], margin: float) -> VerdictDoc:
    """The verdict on B against A for one metric at one level, from its paired per-round ratios B/A (data: the
    sentence is rendered from it by launcher.ab.report)."""
    iv = interval(ratios)
    doc: VerdictDoc = {
        "metric": metric,
        "kind": "insufficient",
        "n": iv.n if iv else len(ratios),
        "mean": round(iv.mean, 5) if iv else None,
        "lo": round(iv.lo, 5) if iv else None,
        "hi": round(iv.hi, 5) if iv else None,
        "margin": round(margin, 5),
        "more_rounds": None,
        "ratios": [round(r, 5) for r in ratios],
    }
    if iv is None:
        return doc
    where = noise.position(iv.lo, iv.hi, margin)
    if where in ("above", "below"):
        doc["kind"] = "better" if (where == "above") == HIGHER_IS_BETTER[metric] else "worse"
    elif where == "within" and margin <= MAX_EQUIVALENCE_MARGIN:
        doc["kind"] = "equivalent"
    else:
        doc["kind"] = "inconclusive"
        if where == "straddles":
            need = rounds_to_decide(iv, margin)
            doc["more_rounds"] = None if need is None else max(1, need - iv.n)
    return doc


def noise_side(v: VerdictDoc) -> VerdictDoc:
    """The A/A side whose interval is the noise floor: judged against itself it would always read "inconclusive:
    about N more rounds would decide", which no number of rounds would."""
    return {**v, "kind": "noise", "more_rounds": None} if v["mean"] is not None else v
