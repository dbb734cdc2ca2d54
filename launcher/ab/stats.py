"""The verdict statistics of `nemolaunch ab`: pure functions of paired per-round ratios, no I/O.

Each round is one order-balanced block (A B B A) per level, so each round gives one ratio B/A per level and
metric, and linear drift within a block cancels. The unit of analysis is the round (never a request: requests of
one pass are not independent). The decision works on log-ratios (a 10% gain and a 10% loss are symmetric):

- the noise is the standard deviation of the per-round log-ratio. An A/A (the baseline against a second server of
  itself, --calibrate) measures it, with the bias between two instances of one configuration; a stored machine
  noise can stand in for it. With a measured noise the variance is pooled (the comparison's own rounds and the
  A/A's), which is what lets 2-4 rounds decide; without one, only the comparison's own rounds count and the report
  says "noise not measured";
- an instance bias the A/A shows beyond its own sampling error widens every interval (two servers of one
  configuration differ by that much, so two configurations may too);
- the threshold is the smallest change worth acting on (default 2%), separate from the noise;
- ab looks after every round from the second, so each look uses Pocock's constant nominal level for the planned
  number of looks (computed here by numerical integration of the group-sequential boundary): the chance that any
  look wrongly clears the threshold stays at 5% (benchmarks/ab_error_rates.py simulates it);
- one interval, three outcomes (launcher.noise.position): wholly beyond +-threshold is "better"/"worse", wholly
  within it is "equivalent" (two one-sided tests at the same level), across a bound is "inconclusive".
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from functools import lru_cache

from scipy import stats

from launcher import noise
from launcher.ab.document import Kind, VerdictDoc

ALPHA = 0.05  # two-sided: 95% intervals, a 5% chance of a wrong "better" or "worse" over all looks
THRESHOLD = noise.THRESHOLD
METHOD = (
    "t interval on the mean per-round log-ratio B/A (paired order-balanced rounds), variance pooled with the A/A's "
    "and widened by its instance bias; Pocock's group-sequential level for the planned looks"
)
# output tok/s: higher is better; TPOT and TTFT: lower is better
HIGHER_IS_BETTER = {"output_tok_s": True, "tpot_ms": False, "ttft_ms": False}


@dataclass(frozen=True)
class Noise:
    """What an A/A measured: the per-round log-ratio's spread and the bias between two instances."""

    sd: float
    df: int  # the A/A's rounds - 1
    bias: float = 0.0  # the A/A's mean log-ratio
    source: str = "A/A"

    @property
    def bias_var(self) -> float:
        """The squared bias beyond its own sampling error: added to every comparison's variance."""
        if self.df < 1:
            return 0.0
        return max(0.0, self.bias**2 - self.sd**2 / (self.df + 1))


def measure_noise(aa_ratios: list[float], source: str = "A/A") -> Noise | None:
    """The noise an A/A's per-round ratios show; None with fewer than 3 rounds (2 give one degree of freedom)."""
    logs = _logs(aa_ratios)
    if len(logs) < 3:
        return None
    mean = sum(logs) / len(logs)
    sd = math.sqrt(sum((x - mean) ** 2 for x in logs) / (len(logs) - 1))
    return Noise(sd, len(logs) - 1, mean, source)


def _logs(ratios: list[float]) -> list[float]:
    return [math.log(r) for r in ratios if r > 0 and math.isfinite(r)]


def _crossing(c: float, looks: int, step: float = 0.01) -> float:
    """P(|S_k| >= c sqrt(k) at some look k <= looks) for S_k a sum of k standard normals (Armitage, McPherson and
    Rowe's recursion on a grid)."""
    import numpy as np

    edge = c * math.sqrt(looks) + 6
    x = np.arange(-edge, edge + step / 2, step)
    kernel = stats.norm.pdf(np.arange(-6, 6 + step / 2, step)) * step
    density = stats.norm.pdf(x) * (np.abs(x) < c)
    for k in range(2, looks + 1):
        density = np.convolve(density, kernel, mode="same") * (np.abs(x) < c * math.sqrt(k))
    return float(1 - density.sum() * step)


@lru_cache(maxsize=64)
def pocock_level(looks: int, alpha: float = ALPHA) -> float:
    """The nominal two-sided level to use at each of `looks` equally spaced looks so that the chance of crossing at
    any of them is `alpha` (Pocock 1977; 5 looks at 0.05: constant 2.413, level 0.0158)."""
    if looks <= 1:
        return alpha
    lo, hi = stats.norm.ppf(1 - alpha / 2), 5.0
    for _ in range(40):
        mid = (lo + hi) / 2
        lo, hi = (mid, hi) if _crossing(mid, looks) > alpha else (lo, mid)
    return float(2 * (1 - stats.norm.cdf(hi)))


@dataclass(frozen=True)
class Interval:
    n: int
    mean: float  # ratios (1.05 = +5%)
    lo: float
    hi: float
    sd: float  # the per-round log-ratio spread the interval used (pooled when a noise was measured)
    df: int


@lru_cache(maxsize=1024)
def _t_quantile(p: float, df: int) -> float:
    """Student's t quantile, kept: scipy's ppf costs ~0.2 ms a call, and a simulated run (benchmarks/ab_error_rates.py)
    asks for the same few levels and degrees of freedom thousands of times."""
    return float(stats.t.ppf(p, df))


def interval(ratios: list[float], level: float = ALPHA, measured: Noise | None = None) -> Interval | None:
    """The two-sided (1 - level) t interval of the mean log-ratio, back on the ratio scale; with a measured noise,
    the variance is pooled with it and widened by its instance bias. None when there is no variance to use."""
    logs = _logs(ratios)
    n = len(logs)
    if n == 0 or (n < 2 and measured is None):
        return None
    mean = sum(logs) / n
    own = sum((x - mean) ** 2 for x in logs)  # (n - 1) x the sample variance
    df = n - 1
    if measured is not None:
        own += measured.df * measured.sd**2
        df += measured.df
    sd = math.sqrt(own / df) if df else 0.0
    se = math.sqrt(sd**2 / n + (measured.bias_var if measured else 0.0))
    half = min(_t_quantile(1 - level / 2, df) * se, 50.0) if se > 0 else 0.0  # e^50: no bound at all
    return Interval(n, math.exp(mean), math.exp(mean - half), math.exp(mean + half), sd, df)


def rounds_needed(sd: float, effect: float, threshold: float, level: float = ALPHA, power: float = 0.8) -> int | None:
    """About how many rounds let an interval at `level` decide, with the given power, for a true change of
    `effect` (a fraction) at this per-round spread: clear the threshold when the change is beyond it, fit within
    +-threshold when it is inside. None when the change sits on the threshold (no number of rounds decides)."""
    gap = abs(math.log1p(abs(effect)) - math.log1p(threshold))
    if gap == 0:
        return None
    if sd == 0:
        return 2
    import numpy as np

    n = np.arange(2, 1000)
    q = stats.t.ppf(1 - level / 2, n - 1) + stats.t.ppf(power, n - 1)
    enough = np.nonzero(q * sd / np.sqrt(n) < gap)[0]
    return int(n[enough[0]]) if enough.size else None


def decide(metric: str, iv: Interval | None, threshold: float) -> Kind:
    """The interval's position against the threshold (launcher.noise), as a verdict's kind."""
    if iv is None:
        return "insufficient"
    where = noise.position(iv.lo, iv.hi, threshold)
    if where in ("above", "below"):
        return "better" if (where == "above") == HIGHER_IS_BETTER[metric] else "worse"
    return "equivalent" if where == "within" else "inconclusive"


def verdict(
    metric: str,
    ratios: list[float],
    threshold: float = THRESHOLD,
    measured: Noise | None = None,
    level: float = ALPHA,
) -> VerdictDoc:
    """The verdict on B against A for one metric at one level, from its paired per-round ratios B/A (data: the
    sentence is rendered from it by launcher.ab.report)."""
    iv = interval(ratios, level, measured)
    kind = decide(metric, iv, threshold)
    more: int | None = None
    if iv is not None and kind == "inconclusive":
        need = rounds_needed(iv.sd, iv.mean - 1, threshold, level)
        more = None if need is None else max(1, need - iv.n)
    return {
        "metric": metric,
        "kind": kind,
        "n": iv.n if iv else len(ratios),
        "mean": round(iv.mean, 5) if iv else None,
        "lo": round(iv.lo, 5) if iv else None,
        "hi": round(iv.hi, 5) if iv else None,
        "level": round(level, 5),
        "threshold": round(threshold, 5),
        "noise": round(measured.sd, 5) if measured else None,
        "noise_source": measured.source if measured else None,
        "sd": round(iv.sd, 5) if iv else None,
        "more_rounds": more,
        "ratios": [round(r, 5) for r in ratios],
        "headline": True,
        "dropped": [],
    }
