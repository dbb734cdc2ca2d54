"""The one rule that says whether a measured difference is outside the noise, for every command that compares
(ab's paired rounds, compare's repeated runs): the confidence interval of the ratio B/A against the smallest change
worth acting on. Each caller brings its own interval (its design decides how it is computed); the rule is here.

It lives at the top of launcher/ because compare (bench/) and ab (above bench) both import it.
"""

from __future__ import annotations

import math
from typing import Literal

Position = Literal["above", "below", "within", "straddles"]
# the smallest change worth acting on, unless the user says otherwise: a 2% throughput change is about what a
# profile flag is worth keeping for (vLLM's recipes prefer fewer overrides within 1%; criterion's noise threshold is
# 1%); differences smaller than this are not findings however precisely they are measured
THRESHOLD = 0.02


def position(lo: float, hi: float, threshold: float) -> Position:
    """Where the interval [lo, hi] of a ratio lies against +-threshold: wholly above 1 + threshold, wholly below
    1 / (1 + threshold), wholly within the two, or across a bound (undecided)."""
    if lo > 1 + threshold:
        return "above"
    if hi < 1 / (1 + threshold):
        return "below"
    if lo >= 1 / (1 + threshold) and hi <= 1 + threshold:
        return "within"
    return "straddles"


def unpaired_interval(
    a: tuple[float, float, int], b: tuple[float, float, int], confidence: float = 0.95
) -> tuple[float, float] | None:
    """The interval of the ratio of two means from independent repeats, each (mean, sd, n): Welch's t on the log
    scale (delta method: the log of a mean has sd ~ sd / mean / sqrt(n)). None without two repeats on each side."""
    (ma, sa, na), (mb, sb, nb) = a, b
    if na < 2 or nb < 2 or ma <= 0 or mb <= 0:
        return None
    va, vb = (sa / ma) ** 2 / na, (sb / mb) ** 2 / nb
    se = math.sqrt(va + vb)
    log_ratio = math.log(mb / ma)
    if se == 0:
        return math.exp(log_ratio), math.exp(log_ratio)
    df = (va + vb) ** 2 / (va**2 / (na - 1) + vb**2 / (nb - 1))
    from scipy import stats  # heavy (~0.9 s): imported here, off the --help path

    half = float(stats.t.ppf(0.5 + confidence / 2, df)) * se
    return math.exp(log_ratio - half), math.exp(log_ratio + half)
