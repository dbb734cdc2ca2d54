"""What an ab or tune run is asked to do: the workload both share (its lengths and levels default to
launcher.defaults, as every measuring command's do; the rest is ab's own and defaults here, where the CLI reads
them), and an ab run's configuration."""

from __future__ import annotations

import hashlib
import json
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Literal

from launcher import defaults, noise

if TYPE_CHECKING:
    from launcher.ab.calibration import Levels
    from launcher.ab.sides import Side

Mode = Literal["auto", "co-resident", "restart"]


@dataclass(frozen=True)
class Workload:
    """The load every pass of an ab or tune run sends (bench's options of the same names)."""

    concurrency: tuple[int, ...] = defaults.COMPARE_LEVELS
    input_len: int = defaults.INPUT_LEN
    output_len: int = defaults.OUTPUT_LEN
    num_prompts: int | None = None  # per level and pass; None: enough to fill the window
    seed: int = 0


WORKLOAD = Workload()
ROUNDS = 8  # the most rounds a run plans; it stops as soon as the headline is decided
# The steady window a pass aims for, extended per level when the slowest side needs more for its 10 x concurrency
# requests and 5 request latencies (launcher.ab.warmup). On the H200 (2026-12-02) 1-second whole passes at c=64
# spread the A/A by +-20%, mostly ramp and drain; 11-16 s whole passes (2026-12-03) spread 2.4-3.0% per round.
# 5 s of steady state is ~1,100 requests of 128/32 tokens at c=64 there and 20 of them at c=1, well past the rule,
# and keeps a 3-level round of three co-resident servers near 2 minutes; benchmarks/gpu_ab.sh measures the A/A
# spread it gives (issue 26's target: 1.5% per round).
WINDOW_S = 5.0
# warm-up: passes per server start and level until throughput stops drifting (CoV of the last 5 one-second bins
# under 2%: Georges et al.'s rule); the H200 rose 20-30% over a fresh server's first 3-4 short passes
WARMUP_PASSES = 3
WARM_COV = 0.02


@dataclass(frozen=True)
class AbConfig:
    model: str
    sides: tuple[Side, ...]  # the first is the baseline every other side is judged against
    workload: Workload = WORKLOAD
    rounds: int = ROUNDS
    warmup_passes: int = WARMUP_PASSES
    window_s: float = WINDOW_S
    threshold: float = noise.THRESHOLD
    budget_min: float | None = None
    headline_level: int | None = None  # default: the highest level asked
    mode: Mode = "auto"
    mode_reason: str | None = None  # why this mode, when the caller chose it (ab --against-fallbacks from memory)
    calibrate: bool = False
    noise: Levels | None = None  # given with --noise (a number or an ab.json)
    noise_source: str | None = None
    python: Path | None = None
    same_answers: bool = True

    @property
    def headline(self) -> int:
        return self.headline_level or max(self.workload.concurrency)

    def digest(self) -> str:
        """What makes two runs the same run (a rerun with the same --out continues it): not the rounds or the
        budget, which may grow."""
        doc = {k: v for k, v in asdict(self).items() if k not in ("rounds", "budget_min")}
        return hashlib.sha256(json.dumps(doc, sort_keys=True, default=str).encode()).hexdigest()[:12]
