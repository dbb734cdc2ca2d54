"""The summary benchmarks/gpu_probe_starts.sh prints last: per run its wall-clock, exit code, the probe's own
seconds and its starts; then, per run and chain, the recommendation, the kernels tied with it, and every kernel
measured correctly with its speed (time relative to the fastest, geometric mean over the shapes) in each start
and their spread.

    python3 benchmarks/probe_starts_summary.py OUTDIR      (reads OUTDIR/times.txt and OUTDIR/probe-LABEL.json)
"""

from __future__ import annotations

import json
import re
import sys
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from launcher.ranking import relative_speed, start_speeds

TIME_LINE = re.compile(r"^(\S+) exit (\d+) in ([\d.]+) s", re.M)


def chains(report: dict[str, Any]) -> list[str]:
    lines = []
    for chain, pick in (report.get("recommended") or {}).items():
        ties = (report.get("ties") or {}).get(chain) or []
        lines.append(f"  {chain}: recommended {pick}" + (f"; tied with {', '.join(ties)}" if ties else ""))
        for k in report.get("kernels", []):
            if k.get("chain") != chain or k.get("status") != "ok" or not k.get("shapes"):
                continue
            speeds = start_speeds(k["shapes"])
            spread = f"  spread {max(speeds) / min(speeds) - 1:.1%}" if len(speeds) > 1 else ""
            median = relative_speed(k["shapes"])
            each = " ".join(f"{s:.3f}" for s in speeds)
            lines.append(f"    {k['kernel']:42s} {median or 0:.3f}  starts {each}{spread}  {k.get('seconds')} s")
    return lines


def main(out: Path) -> None:
    runs = {m[1]: (int(m[2]), float(m[3])) for m in TIME_LINE.finditer((out / "times.txt").read_text())}
    print(f"{'run':10s} {'wall s':>7s} {'exit':>4s} {'probe s':>8s} {'starts':>6s}")
    reports: dict[str, dict[str, Any]] = {}
    for label, (rc, wall) in runs.items():
        try:
            reports[label] = json.loads((out / f"probe-{label}.json").read_text())
        except (OSError, json.JSONDecodeError):
            print(f"{label:10s} {wall:7.1f} {rc:4d}  no report")
            continue
        report = reports[label]
        print(f"{label:10s} {wall:7.1f} {rc:4d} {report.get('seconds', 0):8.1f} {report.get('starts', 1):6d}")
    for label, report in reports.items():
        print(f"\n{label}:")
        print("\n".join(chains(report)))


if __name__ == "__main__":
    main(Path(sys.argv[1]))
