"""The noise floor an ab run judges against: measured by its own A/A side (--calibrate), read from a stored one
(--noise-floor: a fraction or the ab.json of a calibrated run), or not measured (the default margin, said so)."""

from __future__ import annotations

from pathlib import Path

from launcher.ab import stats
from launcher.ab.document import NoiseDoc, read_ab
from launcher.ab.passes import METRICS
from launcher.errors import BadInput

Floors = dict[int, dict[str, float | None]]


def load_noise_floor(text: str) -> tuple[dict[int, dict[str, float]], str]:
    """--noise-floor: a fraction (0.03 = 3% at every level and metric) or an ab.json whose run calibrated."""
    try:
        value = float(text)
    except ValueError:
        pass
    else:
        if not 0 <= value < 1:
            raise BadInput(f"--noise-floor {text} is not a fraction in [0, 1)", "e.g. --noise-floor 0.03")
        return {0: {m: value for m in METRICS}}, f"--noise-floor {value}"
    path = Path(text)
    doc = read_ab(path)
    if not doc["noise_floor"]["source"].startswith("calibrated"):
        raise BadInput(f"{path} is not an ab.json of a calibrated run", "run nemolaunch ab --calibrate first")
    floors = {
        int(c): {m: float(v) for m, v in lv.items() if v is not None} for c, lv in doc["noise_floor"]["levels"].items()
    }
    if not any(floors.values()):
        raise BadInput(
            f"{path} measured no noise floor: its A/A side has fewer than 2 valid rounds",
            "continue that ab with the same command and --out (more --rounds), or give a fraction",
        )
    return floors, str(path)


def measured(aa: dict[int, dict[str, list[float]]]) -> tuple[Floors, str]:
    """The floor of this run's own A/A side from its per-round ratios."""
    floors: Floors = {c: {m: stats.noise_floor(aa[c][m]) for m in METRICS} for c in aa}
    if not any(v is not None for lv in floors.values() for v in lv.values()):
        return floors, (
            f"calibrated (A/A this run) but not measured yet: fewer than 2 valid A/A rounds, default margin "
            f"{stats.DEFAULT_MARGIN:.0%}"
        )
    return floors, "calibrated (A/A this run)"


def stored(levels: tuple[int, ...], floor: dict[int, dict[str, float]], source: str | None) -> tuple[Floors, str]:
    """A stored floor for these levels: a level it did not measure gets the widest floor it did, per metric; a
    metric no level measured has no floor (the default margin), never a floor of 0."""
    widest = {m: max((v for lv in floor.values() if (v := lv.get(m)) is not None), default=None) for m in METRICS}
    return {c: {m: (floor.get(c) or {}).get(m, widest[m]) for m in METRICS} for c in levels}, f"stored ({source})"


def unmeasured(levels: tuple[int, ...]) -> tuple[Floors, str]:
    return (
        {c: {m: None for m in METRICS} for c in levels},
        f"not measured: default margin {stats.DEFAULT_MARGIN:.0%} (run with --calibrate to measure it)",
    )


def as_doc(floors: Floors, source: str) -> NoiseDoc:
    return {
        "source": source,
        "measured": any(v is not None for lv in floors.values() for v in lv.values()),
        "levels": {str(c): dict(v) for c, v in floors.items()},
    }
