"""`nemolaunch diagnose`: known serving failures in a vLLM log, each with its fix."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import TYPE_CHECKING

import click

from launcher.cli.options import JSON_OPTION, PYTHON_OPTION

if TYPE_CHECKING:
    from launcher.diagnose.run import Finding


@click.command()
@click.argument("logfile", type=click.Path(exists=True, dir_okay=False, allow_dash=True))
@click.option(
    "--gpu", help="The GPU the log came from (SM120, sm_121, 'RTX 5090', 'GB10', ...): some findings depend on it."
)
@PYTHON_OPTION
@click.option(
    "--source",
    "sources",
    multiple=True,
    type=click.Path(path_type=Path),
    help="A package's source folder to read messages from beside the engine's own (one the engine lacks, e.g. an "
    "unpacked wheel's sglang/); repeatable.",
)
@JSON_OPTION
def diagnose(logfile: str, gpu: str | None, python: Path | None, sources: tuple[Path, ...], as_json: bool) -> int:
    """Find known serving failures in a vLLM log (LOGFILE, or - for stdin) and give each its fix.

    Lines are matched against the knowledge base and against the error messages of the engine's installed
    packages (vLLM, SGLang, torch, FlashInfer, ...), read from their sources once per set of versions and cached.

    Exit 1 when an error-level finding exists, 0 otherwise.
    """
    from checks.gpu_family import family_from_text
    from launcher.diagnose import run as stage
    from launcher.errors import BadInput
    from launcher.output import json_document

    family = family_from_text(gpu) if gpu else None
    if gpu and not family:
        raise BadInput(f"--gpu {gpu!r} names no GPU family I know", "write it like SM120, sm_121, 12.0 or GB10")

    def say(line: str) -> None:
        click.echo(f"nemolaunch: {line}", err=True)

    diagnosis = stage.diagnose_file(logfile, sys.stdin.buffer, family, python, on_build=say, sources=sources)
    findings, lines = diagnosis.findings, diagnosis.lines
    if as_json:
        index = diagnosis.index.to_json() if diagnosis.index else None
        doc = {"log": logfile, "lines": lines, "gpu_family": family, "index": index}
        click.echo(json_document("diagnose", {**doc, "findings": [f.to_json() for f in findings]}))
    else:
        click.echo(render_text(findings, lines, "stdin" if logfile == "-" else logfile))
        if diagnosis.index is not None:
            packages = ", ".join(f"{name} {version}" for name, version in diagnosis.index.packages.items())
            click.echo(f"\nmessage index: {diagnosis.index.templates} messages of {packages}")
        else:
            click.echo(f"\nmessage index: none ({diagnosis.index_note}); --python names the engine's interpreter")
    return stage.exit_code(findings)


def render_text(findings: list[Finding], lines: int, name: str) -> str:
    if not findings:
        return f"{name}: {lines} lines, no known failure found"
    out = [f"{name}: {lines} lines, {len(findings)} finding(s)"]
    # what vLLM and its libraries warned about, and nothing more is known of: one line each, after the rest
    notes = [f for f in findings if f.origin == "index" and f.severity == "info"]
    for f in findings:
        if f in notes:
            continue
        out.append(f"\n[{f.severity}] {f.rule.title}  ({f.rule.id}, {f.count} line(s))")
        out += [f"  line {n}: {t}" for n, t in f.evidence]
        if f.stage is not None or (f.origin == "fallback" and f.severity == "error"):
            out.append(f"  stage: {f.stage or 'start-up (before loading weights)'}")
        if f.site is not None:
            out.append(f"  raised by: {f.site.where()}" + (f" when {f.site.guard}" if f.site.guard else ""))
        out.append(f"  cause: {f.rule.cause}")
        out.append(f"  fix:   {f.fix()}")
        if f.rule.avoid:
            out.append(f"  profile: {f.rule.avoid}")
    if notes:
        out.append("\nalso logged (warnings of the installed packages, from their sources):")
        out += [f"  line {f.first_line}: {f.rule.title}" for f in notes]
    return "\n".join(out)
