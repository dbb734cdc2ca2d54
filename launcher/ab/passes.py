"""The one reader of a bench pass for `ab` and `tune`: a bench result folder's summary.json, as the few typed
numbers a verdict needs. If bench's schema changes, this is the one place that follows it."""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from launcher.errors import NemolaunchError

METRICS = ("output_tok_s", "tpot_ms", "ttft_ms")


@dataclass(frozen=True)
class LevelResult:
    concurrency: int
    completed: int
    failed: int
    values: dict[str, float | None]  # METRICS -> value

    @property
    def valid(self) -> bool:
        """A level with a failed request (or none completed) is not averaged in."""
        return self.failed == 0 and self.completed > 0


@dataclass(frozen=True)
class PassResult:
    folder: Path
    status: str  # complete, interrupted, server-died, running
    levels: dict[int, LevelResult]


def _level(raw: dict[str, Any], where: Path) -> LevelResult:
    try:
        return LevelResult(
            concurrency=int(raw["concurrency"]),
            completed=int(raw["completed"]),
            failed=int(raw["failed"]),
            values={
                "output_tok_s": raw["output_throughput_tok_s"],
                "tpot_ms": raw["tpot_ms"]["mean"],
                "ttft_ms": raw["ttft_ms"]["mean"],
            },
        )
    except (KeyError, TypeError, ValueError) as e:
        raise NemolaunchError(f"{where}: a level lacks {e} (not a nemolaunch.bench/1 summary)") from None


def read_pass(folder: Path) -> PassResult:
    path = folder / "summary.json"
    try:
        doc = json.loads(path.read_text())
    except (OSError, json.JSONDecodeError) as e:
        raise NemolaunchError(f"cannot read the pass result {path}: {e}") from None
    if doc.get("schema") != "nemolaunch.bench/1":
        raise NemolaunchError(f"{path} has schema {doc.get('schema')!r}, not nemolaunch.bench/1")
    levels = {lv.concurrency: lv for lv in (_level(raw, path) for raw in doc.get("levels", []))}
    return PassResult(folder, str(doc.get("status", "")), levels)
