"""The noise an ab run judges with, and where it comes from: this run's own A/A (--calibrate), a noise stored for
this machine by an earlier calibrated run, an ab.json or a number given with --noise, or none ("noise not
measured", said so in every verdict).

A machine's noise is stored once an A/A measured it (3 rounds or more), keyed by what changes it: the GPUs (their
UUIDs: a different card of the same model is another machine), the driver, the vLLM version, co-resident or restart,
the level, the pass window and the workload. It is reused while all of these match and it is under a week old, so a
user pays the calibration once. (The model is part of the key too: a MoE's noise is not a dense model's.)
"""

from __future__ import annotations

import hashlib
import json
import socket
import time
from pathlib import Path
from typing import Any

from checks.files import cache_dir
from launcher.ab.document import LevelNoise, NoiseDoc, read_ab
from launcher.ab.passes import METRICS
from launcher.ab.stats import Noise
from launcher.errors import BadInput
from launcher.output import atomic_write_text

FRESH_DAYS = 7
GIVEN_DF = 30  # a noise given as a number is taken as measured over 31 rounds (its own uncertainty is small)
Levels = dict[int, dict[str, Noise]]


def parse_noise_option(text: str) -> tuple[Levels, str]:
    """--noise: a fraction (the per-round log-ratio spread, 0.015 = 1.5%, at every level and metric) or the
    ab.json of a run whose A/A measured it."""
    try:
        value = float(text)
    except ValueError:
        pass
    else:
        if not 0 < value < 1:
            raise BadInput(f"--noise {text} is not a fraction in (0, 1)", "e.g. --noise 0.015 for 1.5% per round")
        return {0: {m: Noise(value, GIVEN_DF, 0.0, f"--noise {value}") for m in METRICS}}, f"--noise {value}"
    path = Path(text)
    got = from_doc(read_ab(path)["noise"], str(path))
    if not got:
        raise BadInput(
            f"{path} measured no noise: its A/A side has fewer than 3 valid rounds (or it ran none)",
            "continue that ab with the same command and --out (more --rounds), or give a fraction",
        )
    return got, str(path)


def from_doc(doc: NoiseDoc, source: str) -> Levels:
    out: Levels = {}
    for c, metrics in doc["levels"].items():
        got = {m: Noise(v["sd"], v["df"], v["bias"], source) for m, v in metrics.items() if v is not None}
        if got:
            out[int(c)] = got
    return out


def for_level(levels: Levels, c: int, metric: str) -> Noise | None:
    """A level's noise; a number given for every level (key 0) applies to each."""
    return (levels.get(c) or levels.get(0) or {}).get(metric)


def as_doc(levels: dict[int, dict[str, Noise | None]], source: str) -> NoiseDoc:
    def one(n: Noise | None) -> LevelNoise | None:
        return None if n is None else {"sd": round(n.sd, 5), "df": n.df, "bias": round(n.bias, 5)}

    return {
        "source": source,
        "measured": any(v is not None for lv in levels.values() for v in lv.values()),
        "levels": {str(c): {m: one(n) for m, n in lv.items()} for c, lv in levels.items()},
    }


def machine(
    model: str, vllm: str | None, mode: str, window_s: float, input_len: int, output_len: int
) -> dict[str, Any]:
    """What a stored noise is valid for (the level is added per entry): the machine, the engine, the model (its
    config.json's digest: a copied folder is the same model), the arrangement and the workload."""
    from checks.facts import nvml_facts

    nvml = nvml_facts()
    gpus = [g.get("uuid") or g.get("name") for g in nvml.get("gpus", [])] if nvml.get("ok") else []
    try:
        shape = hashlib.sha256((Path(model) / "config.json").read_bytes()).hexdigest()[:16]
    except OSError:
        shape = model
    return {
        "gpus": gpus or [f"no GPU ({socket.gethostname()})"],
        "model": shape,
        "driver": nvml.get("driver"),
        "vllm": vllm,
        "mode": mode,
        "window_s": window_s,
        "input_len": input_len,
        "output_len": output_len,
    }


def _path(key: dict[str, Any], c: int) -> Path:
    text = json.dumps({**key, "concurrency": c}, sort_keys=True)
    return cache_dir("noise") / (hashlib.sha256(text.encode()).hexdigest()[:16] + ".json")


def store(key: dict[str, Any], levels: dict[int, dict[str, Noise | None]], where: str) -> None:
    """Keep what an A/A measured for this machine (one file per level)."""
    for c, metrics in levels.items():
        got = {m: {"sd": n.sd, "df": n.df, "bias": n.bias} for m, n in metrics.items() if n is not None}
        if got:
            doc = {"key": {**key, "concurrency": c}, "date": time.time(), "measured_in": where, "metrics": got}
            path = _path(key, c)
            path.parent.mkdir(parents=True, exist_ok=True)
            atomic_write_text(path, json.dumps(doc, indent=2))


def stored(key: dict[str, Any], concurrency: tuple[int, ...]) -> tuple[Levels, str] | None:
    """This machine's stored noise for every level asked, when all match and are fresh; None otherwise."""
    out: Levels = {}
    wheres = set()
    for c in concurrency:
        try:
            doc = json.loads(_path(key, c).read_text())
            if doc["key"] != {**key, "concurrency": c} or time.time() - doc["date"] > FRESH_DAYS * 86400:
                return None
            age = (time.time() - doc["date"]) / 86400
            source = f"stored for this machine ({age:.1f} days old, measured in {doc['measured_in']})"
            out[c] = {m: Noise(float(v["sd"]), int(v["df"]), float(v["bias"]), source)
                      for m, v in doc["metrics"].items()}  # fmt: skip
            wheres.add(source)
        except (OSError, ValueError, KeyError, TypeError):
            return None
    return out, "; ".join(sorted(wheres))
