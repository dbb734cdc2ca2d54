"""The workload every measuring command sends when not told otherwise, written once: bench's options and
BenchConfig, ab's and tune's options and their configs all read it (a light module: `--help` imports it)."""

from __future__ import annotations

INPUT_LEN = 512  # prompt tokens per request
OUTPUT_LEN = 256  # generated tokens per request (ignore_eos: exactly this many)
SWEEP_LEVELS = (1, 2, 4, 8, 16, 32, 64)  # bench: the concurrency curve
# ab and tune: three points of that curve; each is measured in every pass (sides x 2 x rounds), so fewer levels
COMPARE_LEVELS = (1, 8, 32)


def levels_text(levels: tuple[int, ...]) -> str:
    """How a level list is written on the command line: 1,8,32."""
    return ",".join(map(str, levels))
