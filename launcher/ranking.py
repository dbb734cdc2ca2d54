"""The ranking metric, in one place: probe ranks kernels by it, profile write and probe --recheck compare them by it.

A kernel's speed is the geometric mean, over the shapes it was timed at, of its time relative to the fastest
usable kernel at that shape (1.0 = fastest everywhere; decode-like and prefill-like shapes weigh the same).
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
