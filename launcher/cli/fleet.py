"""`nemolaunch fleet doctor`: one row per node, then what differs and what it means."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

import click

from launcher.cli.doctor import MARKS
from launcher.cli.options import JSON_OPTION, PYTHON_OPTION

if TYPE_CHECKING:
    from launcher.doctor.fleet import FleetReport


@click.group()
def fleet() -> None:
    """Several nodes at once (needs the ray extra: pip install 'nemolaunch[ray]')."""


@fleet.command("doctor")
@click.option("--ray", "address", required=True, help="The running Ray cluster's address (HEAD:6379, or auto).")
@click.option(
    "--profile",
    "profile_ref",
    help="A multi-node profile: check only its [placement].nodes, and that each reaches the head's port.",
)
@click.option("--timeout", "timeout_s", default=300.0, show_default=True, help="Seconds to wait for every node.")
@PYTHON_OPTION
@JSON_OPTION
def fleet_doctor(address: str, profile_ref: str | None, timeout_s: float, python: Path | None, as_json: bool) -> int:
    """Run doctor on every node of a Ray cluster (one task pinned to each) and show what differs.

    Exit 1 when the nodes would not serve together: a package, Python, NCCL or GPU family differs, a node's
    doctor fails, or a node cannot reach the head's port."""
    from launcher.doctor import fleet as stage
    from launcher.output import json_document

    report = stage.run(address, profile_ref, python, timeout_s)
    click.echo(json_document("fleet", report.to_json()) if as_json else render_fleet(report))
    return stage.exit_code(report)


def render_fleet(report: FleetReport) -> str:
    from launcher.doctor.fleet import MUST_MATCH, SHOULD_MATCH
    from launcher.output import table

    keys = [*MUST_MATCH, *SHOULD_MATCH]
    rows = [[n.address, n.hostname, *(n.summary.get(k) for k in keys), n.problems()] for n in report.nodes]
    lines = [
        f"Ray cluster {report.address}: {len(report.nodes)} node(s)",
        table(["node", "host", *keys, "fails"], rows),
    ]
    if report.differences:
        lines.append("differs: " + ", ".join(report.differences))
    for f in report.findings:
        mark, colour = MARKS[f.status]
        lines.append(click.style(mark, fg=colour) + f" {f.id}: {f.observed}")
        if f.fix:
            lines.append(f"      fix: {f.fix}")
    lines.append("the nodes can serve together" if report.serves_together() else "the nodes would not serve together")
    return "\n".join(lines)
