"""One bench pass as ab and tune see it: the few typed numbers per level that a verdict needs, taken from the
summary bench just returned (validated by launcher.documents.validate_bench, the one shape of summary.json)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from launcher.documents import validate_bench

METRICS = ("output_tok_s", "tpot_ms", "ttft_ms")  # the metrics ab judges, in report order


@dataclass(frozen=True)
class PassLevel:
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
    levels: dict[int, PassLevel]


def pass_result(summary: dict[str, Any], folder: Path) -> PassResult:
    doc = validate_bench(summary, folder / "summary.json")
    levels: dict[int, PassLevel] = {}
    for raw in doc["levels"]:
        extra: dict[str, Any] = dict(raw)
        concurrency = raw["concurrency"]
        if concurrency is None:  # ab's passes sweep concurrency levels: a request-rate level is none of them
            continue
        levels[concurrency] = PassLevel(
            concurrency=concurrency,
            completed=int(extra.get("completed") or 0),
            failed=int(extra.get("failed") or 0),
            values={
                "output_tok_s": raw["output_throughput_tok_s"],
                "tpot_ms": raw["tpot_ms"]["mean"],
                "ttft_ms": raw["ttft_ms"]["mean"],
            },
        )
    return PassResult(folder, doc["status"], levels)
