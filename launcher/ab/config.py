"""What an ab or tune run is asked to do: the workload both share (its lengths and levels default to
launcher.defaults, as every measuring command's do; the rest is ab's own and defaults here, where the CLI reads
them), and an ab run's configuration."""

from __future__ import annotations

import hashlib
import json
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Literal

from launcher import defaults

if TYPE_CHECKING:
    from launcher.ab.sides import Side

Mode = Literal["auto", "co-resident", "restart"]


@dataclass(frozen=True)
class Workload:
    """The load every pass of an ab or tune run sends (bench's options of the same names)."""

    concurrency: tuple[int, ...] = defaults.COMPARE_LEVELS
    input_len: int = defaults.INPUT_LEN
    output_len: int = defaults.OUTPUT_LEN
    num_prompts: int | None = None  # per level and pass; bench's default (4 x concurrency, at least 8)
    warmup_requests: int = 2
    seed: int = 0


WORKLOAD = Workload()
ROUNDS = 3  # ABBA blocks an ab run asks for by default (and tune's final)
# the H200 warms up 20-30% over a fresh server's first passes (9.4k, 11.4k, then 11.3-12.7k tok/s at c=64, measured
# 2026-12-01): the second pass is already inside the steady range, so one whole unmeasured pass per server start
# is discarded, and the ABBA order cancels the linear part of what drift remains
WARMUP_PASSES = 1


@dataclass(frozen=True)
class AbConfig:
    model: str
    sides: tuple[Side, ...]  # the first is the baseline every other side is judged against
    workload: Workload = WORKLOAD
    rounds: int = ROUNDS
    warmup_passes: int = WARMUP_PASSES
    mode: Mode = "auto"
    calibrate: bool = False
    noise_floor: dict[int, dict[str, float]] | None = None  # stored floor per level and metric
    noise_floor_source: str | None = None
    python: Path | None = None
    same_answers: bool = True

    def digest(self) -> str:
        """What makes two runs the same run (a rerun with the same --out continues it); rounds may grow."""
        doc = {k: v for k, v in asdict(self).items() if k != "rounds"}
        return hashlib.sha256(json.dumps(doc, sort_keys=True, default=str).encode()).hexdigest()[:12]
