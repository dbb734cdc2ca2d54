"""`nemolaunch doctor`: one line per check, the fix under each problem, the verdict."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

import click

from launcher.cli.options import JSON_OPTION, NAMES, PYTHON_OPTION
from launcher.errors import ExitCode

if TYPE_CHECKING:
    from launcher.doctor.run import DoctorReport

MARKS = {
    "pass": ("[ok]", "green"),
    "warn": ("[!] ", "yellow"),
    "fail": ("[x] ", "red"),
    "skip": ("[-] ", None),
    "crash": ("[!!]", "magenta"),
}


@click.command()
@JSON_OPTION
@click.option("--strict", is_flag=True, help="Warnings fail too (exit 1).")
@click.option("--only", type=NAMES, help="Run only these checks (comma-separated ids; see --list-checks).")
@click.option("--list-checks", is_flag=True, help="List the checks and exit.")
@click.option(
    "--lock",
    type=click.Path(exists=True, dir_okay=False, path_type=Path),
    help="Compare installed versions with this lock (name==version lines).",
)
@click.option("--model", type=click.Path(path_type=Path), help="A model folder: check memory headroom for it.")
@click.option(
    "--profile",
    "profile_ref",
    help="A serving profile: check its tensor/pipeline/data parallel sizes against --model and the GPUs, and a "
    "tuned profile's stack against the installed one.",
)
@click.option("--no-cache", is_flag=True, help="Re-run the import probes even if nothing changed.")
@PYTHON_OPTION
def doctor(
    as_json: bool,
    strict: bool,
    only: tuple[str, ...] | None,
    list_checks: bool,
    lock: Path | None,
    model: Path | None,
    profile_ref: str | None,
    no_cache: bool,
    python: Path | None,
) -> int:
    """Check driver, CUDA, torch, vLLM, FlashInfer and the GPU; give each problem its fix.

    Exit 0 when nothing fails (warnings allowed unless --strict), 1 when a check fails. On a host without an
    NVIDIA driver the GPU checks are skipped and doctor says that only the CPU engine can serve there.
    """
    from launcher.doctor import run as stage
    from launcher.output import json_document

    if list_checks:
        click.echo(render_checks(stage.known_checks()))
        return ExitCode.OK
    report = stage.run(python, model, lock, list(only) if only else None, use_cache=not no_cache, profile=profile_ref)
    click.echo(json_document("doctor", report.to_json()) if as_json else render_report(report))
    return stage.exit_code(report, strict)


def render_checks(checks: list[tuple[str, str]]) -> str:
    from launcher.output import table

    return table(["check", "what it looks at"], checks)


def render_report(report: DoctorReport) -> str:
    lines = [f"engine Python: {report.interpreter.describe()}", ""]
    for r in report.results:
        mark, colour = MARKS[r.status]
        lines.append(click.style(mark, fg=colour) + f" {r.id}: {r.observed}")
        if r.status in ("warn", "fail", "crash") and r.fix:
            lines.append(f"      fix: {r.fix}")
    tally = ", ".join(f"{n} {s}" for s, n in report.counts().items() if n)
    lines += ["", f"{report.verdict()} ({tally}; {report.seconds:.1f} s)"]
    return "\n".join(lines)
