"""One bench pass at one level as ab and tune see it: bench's summary (validated by launcher.documents, the one
shape of summary.json) for its status and failures, and its requests (requests.jsonl, one record per request as
bench wrote it) for the steady window the verdict uses."""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from launcher.ab.document import WindowDoc
from launcher.ab.window import Window, steady_window
from launcher.documents import validate_bench

METRICS = ("output_tok_s", "tpot_ms", "ttft_ms")  # the metrics ab judges, in report order


@dataclass(frozen=True)
class PassResult:
    folder: Path
    status: str  # bench's: complete, interrupted, server-died
    failed: int  # requests that failed
    window: Window | None

    def values(self) -> dict[str, float | None]:
        w = self.window
        return {"output_tok_s": w.tok_s, "tpot_ms": w.tpot_ms, "ttft_ms": w.ttft_ms} if w else dict.fromkeys(METRICS)

    def invalid(self) -> str | None:
        """Why the pass cannot be averaged in, from what bench measured (the guard adds the machine's reasons)."""
        if self.status != "complete":
            return f"bench stopped: {self.status}"
        if self.failed:
            return f"{self.failed} failed request(s)"
        if self.window is None:
            return "no request completed"
        return f"short window: {self.window.short}" if self.window.short else None


def read_records(folder: Path) -> list[dict[str, Any]]:
    records = []
    try:
        with (folder / "requests.jsonl").open(encoding="utf-8") as f:
            for line in f:
                if line.strip():
                    records.append(json.loads(line))
    except (OSError, ValueError):
        return []
    return records


def pass_result(summary: dict[str, Any], folder: Path, concurrency: int) -> PassResult:
    doc = validate_bench(summary, folder / "summary.json")
    failed = sum(int(level.get("failed") or 0) for level in summary.get("levels", []))  # validated above
    return PassResult(folder, doc["status"], failed, steady_window(read_records(folder), concurrency))


def window_doc(w: Window | None) -> WindowDoc | None:
    if w is None:
        return None

    def r(x: float | None, digits: int = 3) -> float | None:
        return None if x is None else round(x, digits)

    return {
        "start_s": round(w.start_s, 3),
        "end_s": round(w.end_s, 3),
        "ramp_s": round(w.ramp_s, 3),
        "drain_s": round(w.drain_s, 3),
        "in_flight": round(w.in_flight, 2),
        "requests": w.requests,
        "tok_s": r(w.tok_s, 2),
        "ttft_ms": r(w.ttft_ms),
        "tpot_ms": r(w.tpot_ms),
        "latency_s": round(w.latency_s, 4),
        "short": w.short,
    }
