"""The summary benchmarks/gpu_probe.sh prints last: per run its wall-clock, exit code, the chains it probed, how
many kernels were ok / failed / unsupported (and other statuses), FlashInfer's attention set-up (its JIT compile
on a fresh machine); then, per run, every kernel that ran or was stopped for a reason of its own, and the run's
timeline (seconds from its start): harness ready, chains read, each FlashInfer JIT build (with its slowest
compile units), then one line per kernel, sorted by start: started, set-up done, let through, ended.

    python3 benchmarks/probe_summary.py OUTDIR      (reads OUTDIR/times.txt and OUTDIR/probe-LABEL.json)
"""

from __future__ import annotations

import json
import re
import sys
from collections import Counter
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from launcher.probe.chains import NOT_PROBED

TIME_LINE = re.compile(r"^(\S+) exit (\d+) in ([\d.]+) s", re.M)
MAIN = ("ok", "failed", "unsupported")


def flashinfer_setup_s(report: dict[str, Any]) -> float | None:
    for k in report.get("kernels", []):
        if k.get("chain") == "attention" and k.get("kernel") == "FLASHINFER":
            return k.get("setup_s")
    return None


def worth_listing(k: dict[str, Any]) -> bool:
    """Kernels nemolaunch does not run by design, or has no probe for, are in the report, not the summary."""
    error = k.get("error") or ""
    return not (k.get("status") == "not-probed" and (not error or "no probe" in error or k.get("kernel") in NOT_PROBED))


def at(t: Any) -> str:
    return f"{t:6.1f}" if isinstance(t, (int, float)) else "     -"


def timeline(report: dict[str, Any]) -> list[str]:
    """Where the time went, compactly."""
    tl = report.get("timeline") or {}
    lines = [f"  timeline: harness ready {tl.get('harness_ready', '-')} s, chains read {tl.get('chains_read', '-')} s"]
    preload = tl.get("harness_preload_s") or {}
    if preload:
        slow = ", ".join(f"{n.rsplit('.', 1)[-1]} {t}" for n, t in sorted(preload.items(), key=lambda i: -i[1])[:4])
        skipped = tl.get("harness_preload_skipped")
        lines[0] += f"; preloads {sum(preload.values()):.1f} s ({slow}){f', skipped {skipped}' if skipped else ''}"
    for name, b in (tl.get("builds") or {}).items():
        slow = sorted(b.get("units") or [], key=lambda u: -u[1])[:3]
        units = ", ".join(f"{u} {s} s" for u, s in slow)
        lines.append(
            f"  build {name}: {b.get('status')} {b.get('started')}-{b.get('ended')} s"
            f"{'  slowest: ' + units if units else ''}{'  ' + (b.get('error') or '')[:100] if b.get('error') else ''}"
        )
    ran = [k for k in report.get("kernels", []) if k.get("timeline")]
    ran.sort(key=lambda k: (k["timeline"].get("started") is None, k["timeline"].get("started") or 0))
    if ran:
        lines.append(f"  {'started':>7} {'set up':>6} {'through':>7} {'ended':>6}  kernel")
    for k in ran:
        t = k["timeline"]
        lines.append(
            f"  {at(t.get('started')):>7} {at(t.get('set_up'))} {at(t.get('let_through')):>7} {at(t.get('ended'))}"
            f"  {k.get('chain', '?')}: {k.get('kernel', '?')} {k.get('status')}"
        )
    return lines


def summarize(out: Path) -> str:
    times = {m[1]: (int(m[2]), float(m[3])) for m in TIME_LINE.finditer((out / "times.txt").read_text())}
    lines = [f"{'run':28} {'wall s':>7} {'exit':>4} {'report s':>8}  {'chains':28} ok/failed/unsupported (other)  "
             "FlashInfer set-up s"]  # fmt: skip
    details = []
    for label, (rc, wall) in times.items():
        try:
            report = json.loads((out / f"probe-{label}.json").read_text())
        except (OSError, json.JSONDecodeError):
            log = (out / f"probe-{label}.log").read_text(errors="replace").strip().splitlines()
            lines.append(f"{label:28} {wall:>7} {rc:>4}  no report: {(log or ['no output'])[-1][:120]}")
            continue
        counts = Counter(k.get("status") for k in report.get("kernels", []))
        other = ", ".join(f"{s} {n}" for s, n in sorted(counts.items()) if s not in MAIN)
        chains = ",".join(sorted(report.get("chains_probed", {})))
        main = "/".join(str(counts[s]) for s in MAIN)
        lines.append(
            f"{label:28} {wall:>7} {rc:>4} {report.get('seconds', '?'):>8}  {chains:28} {main} ({other})  "
            f"{flashinfer_setup_s(report)}"
        )
        details.append((label, report))
    lines += [line for line in (out / "times.txt").read_text().splitlines() if " builds: " in line]
    for label, report in details:
        lines.append(f"\n{label}: recommended {report.get('recommended')}")
        for k in filter(worth_listing, report.get("kernels", [])):
            lines.append(
                f"  {k.get('chain', '?'):11} {k.get('kernel', '?')[:36]:36} {k.get('status', '?'):11} "
                f"{k.get('seconds', 0):>6} s  set-up {k.get('setup_s')}  {(k.get('error') or '')[:110]}"
            )
        lines += timeline(report)
    return "\n".join(lines)


if __name__ == "__main__":
    print(summarize(Path(sys.argv[1])))
