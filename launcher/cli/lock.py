"""`nemolaunch lock verify/capture/bundle`: lockfiles of whole serving stacks."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

import click

from launcher.cli.options import JSON_OPTION, PYTHON_OPTION
from launcher.errors import ExitCode

if TYPE_CHECKING:
    from launcher.lock.run import Verification


@click.group()
def lock() -> None:
    """Verify, capture and bundle lockfiles of whole serving stacks."""


@lock.command("verify")
@click.argument("lockfile", type=click.Path(exists=True, dir_okay=False, path_type=Path))
@PYTHON_OPTION
@JSON_OPTION
def lock_verify(lockfile: Path, python: Path | None, as_json: bool) -> int:
    """Check the installed stack (the engine's Python) and this host against LOCKFILE (.toml manifest or .txt).

    Exit 1 on a mismatch; each one comes with the command that fixes it.
    """
    from launcher.lock import run as stage
    from launcher.output import json_document

    result = stage.verify_engine(lockfile, python)
    click.echo(json_document("lock", result.to_json()) if as_json else render_verify(result))
    return result.exit_code()


@lock.command("capture")
@click.option(
    "--out",
    required=True,
    type=click.Path(dir_okay=False, path_type=Path),
    help="The lock to write: OUT.toml, OUT.txt and OUT.in (any suffix is replaced).",
)
@click.option("--name", help="The lock's name [default: OUT's stem].")
@click.option("--validated", help="Where this stack was proven, e.g. a bench summary.json.")
@PYTHON_OPTION
def lock_capture(out: Path, name: str | None, validated: str | None, python: Path | None) -> int:
    """Write the working stack of the engine's Python (and this host's driver, CUDA, GPU family) as a lock."""
    from launcher.engine import resolve_python
    from launcher.lock import run as stage

    interpreter = resolve_python(python)
    for note in stage.capture(interpreter.path, out, name or out.with_suffix("").name, validated):
        click.secho(f"note: {note}", fg="yellow", err=True)
    click.echo(f"wrote {out.with_suffix('.toml')} and {out.with_suffix('.txt')} from {interpreter.describe()}")
    return ExitCode.OK


@lock.command("bundle")
@click.argument("lockfile", type=click.Path(exists=True, dir_okay=False, path_type=Path))
@click.option("--out", required=True, type=click.Path(file_okay=False, path_type=Path), help="Folder for the wheels.")
def lock_bundle(lockfile: Path, out: Path) -> int:
    """Download every pinned wheel of LOCKFILE for its Python and platform, for hosts without internet."""
    from launcher.lock import run as stage

    install = stage.bundle(lockfile, out)
    click.echo(f"on the offline host, with {out} copied there:\n  {install}")
    return ExitCode.OK


def render_verify(result: Verification) -> str:
    from launcher.output import table

    mismatches = result.mismatches
    lines = [f"{result.path}: {len(result.lock.pins)} pins against {result.interpreter.describe()}"]
    if mismatches:
        lines.append(table(["kind", "what", "fix"], [(m.kind, m.what, m.fix) for m in mismatches]))
    warned = len(mismatches) - len(result.failed)
    lines.append(
        "matches the lock"
        if not mismatches
        else f"{len(result.failed)} mismatch(es)" + (f", {warned} warning(s)" if warned else "")
    )
    return "\n".join(lines)
