"""fleet doctor: one row per node, then what differs and what it means."""

from __future__ import annotations

import click

from launcher.doctor.fleet import MUST_MATCH, SHOULD_MATCH, FleetReport
from launcher.output import table


def render_fleet(report: FleetReport, marks: dict[str, tuple[str, str | None]]) -> str:
    keys = [*MUST_MATCH, *SHOULD_MATCH]
    rows = [[n.address, n.hostname, *(n.summary.get(k) for k in keys), n.problems()] for n in report.nodes]
    lines = [
        f"Ray cluster {report.address}: {len(report.nodes)} node(s)",
        table(["node", "host", *keys, "fails"], rows),
    ]
    if report.differences:
        lines.append("differs: " + ", ".join(report.differences))
    for f in report.findings:
        mark, colour = marks[f.status]
        lines.append(click.style(mark, fg=colour) + f" {f.id}: {f.observed}")
        if f.fix:
            lines.append(f"      fix: {f.fix}")
    lines.append("the nodes can serve together" if report.serves_together() else "the nodes would not serve together")
    return "\n".join(lines)
