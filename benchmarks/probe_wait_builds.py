"""Wait (up to LIMIT_S) for the FlashInfer JIT builds a probe run left running, so the next (warm) run finds them
done; prints one line for times.txt saying how each ended.

    python3 benchmarks/probe_wait_builds.py REPORT.json LABEL LIMIT_S
"""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path


def wait(report: Path, label: str, limit_s: float) -> str:
    try:
        builds = json.loads(report.read_text()).get("timeline", {}).get("builds", {})
    except (OSError, json.JSONDecodeError) as e:
        return f"{label} builds: no report to read ({type(e).__name__})"
    if not builds:
        return f"{label} builds: none started"
    start, words = time.monotonic(), []
    for name, build in builds.items():
        status = Path(build["log"]).with_suffix(".json")
        while not status.exists() and time.monotonic() - start < limit_s:
            time.sleep(0.5)
        waited = time.monotonic() - start
        if not status.exists():
            words.append(f"{name} NOT done after waiting {waited:.0f} s (the warm run is not warm for it)")
            continue
        found = json.loads(status.read_text())
        took = found["ended"] - found["started"]
        state = "done" if found.get("ok") else f"FAILED ({found.get('error')})"
        words.append(f"{name} {state}, {took:.0f} s from its start (waited {waited:.0f} s after the run)")
    return f"{label} builds: " + "; ".join(words)


if __name__ == "__main__":
    print(wait(Path(sys.argv[1]), sys.argv[2], float(sys.argv[3])))
