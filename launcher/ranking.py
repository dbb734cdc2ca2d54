"""The ranking metric and the tie rule, in one place: probe ranks kernels by them, profile write and probe --recheck
compare them by them.

A kernel's speed is the geometric mean, over the shapes it was timed at, of its time relative to the fastest
usable kernel at that shape (1.0 = fastest everywhere; decode-like and prefill-like shapes weigh the same). Each
kernel is timed in several process starts (launcher/child/starts.py); its speed per start gives the spread of its
repeats, and two kernels whose gap lies inside that spread are a tie: neither is faster.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from typing import Any


def relative_speed(shapes: Iterable[dict[str, Any]]) -> float | None:
    """The geometric mean of each shape's "relative"; None when there is no shape or one was not compared (a
    kernel measured at some shapes only cannot be ranked against one measured at all)."""
    relative: list[float] = []
    for s in shapes:
        r = s.get("relative")
        if not isinstance(r, int | float) or not r > 0:
            return None
        relative.append(float(r))
    return math.exp(sum(math.log(r) for r in relative) / len(relative)) if relative else None


def start_speeds(shapes: Iterable[dict[str, Any]]) -> list[float]:
    """A kernel's speed at each process start it was timed in: per start, the geometric mean over its shapes of
    that start's time relative to the fastest kernel's median there ("relative_starts"). Empty when a shape has
    none or the shapes were timed in different numbers of starts."""
    per_shape: list[list[float]] = []
    for s in shapes:
        r = s.get("relative_starts")
        if not isinstance(r, list) or not r or not all(isinstance(x, int | float) and x > 0 for x in r):
            return []
        per_shape.append([float(x) for x in r])
    if not per_shape or len({len(r) for r in per_shape}) != 1:
        return []
    return [math.exp(sum(math.log(r[i]) for r in per_shape) / len(per_shape)) for i in range(len(per_shape[0]))]


def tied(a: list[float], b: list[float]) -> bool:
    """Two kernels tie when the gap between them lies inside the spread of their repeats: each one's fastest start
    is no slower than the other's slowest (their per-start speeds overlap). Only kernels timed in at least two
    starts each can be told apart or tied; with fewer, nothing is called a tie."""
    return len(a) >= 2 and len(b) >= 2 and min(a) <= max(b) and min(b) <= max(a)
