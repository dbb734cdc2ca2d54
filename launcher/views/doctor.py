"""How `nemolaunch doctor` reads on a terminal: one line per check, the fix under each problem, the verdict."""

from __future__ import annotations

from collections.abc import Callable

from launcher.doctor.run import DoctorReport
from launcher.output import table

Style = Callable[..., str]  # click.style, or a plain identity where colour is off
MARKS = {
    "pass": ("[ok]", "green"),
    "warn": ("[!] ", "yellow"),
    "fail": ("[x] ", "red"),
    "skip": ("[-] ", None),
    "crash": ("[!!]", "magenta"),
}


def render_checks(checks: list[tuple[str, str]]) -> str:
    return table(["check", "what it looks at"], checks)


def render_report(report: DoctorReport, style: Style) -> str:
    lines = [f"engine Python: {report.interpreter.describe()}", ""]
    for r in report.results:
        mark, colour = MARKS[r.status]
        lines.append(style(mark, fg=colour) + f" {r.id}: {r.observed}")
        if r.status in ("warn", "fail", "crash") and r.fix:
            lines.append(f"      fix: {r.fix}")
    tally = ", ".join(f"{n} {s}" for s, n in report.counts().items() if n)
    lines += ["", f"{report.verdict()} ({tally}; {report.seconds:.1f} s)"]
    return "\n".join(lines)
