"""How `nemolaunch lock verify` reads on a terminal."""

from __future__ import annotations

from checks.lockfile import Lock, Mismatch
from launcher.engine import Interpreter
from launcher.output import table


def render_verify(lockfile: object, lock: Lock, interpreter: Interpreter, mismatches: list[Mismatch]) -> str:
    failed = [m for m in mismatches if m.severity == "fail"]
    lines = [f"{lockfile}: {len(lock.pins)} pins against {interpreter.describe()}"]
    if mismatches:
        lines.append(table(["kind", "what", "fix"], [(m.kind, m.what, m.fix) for m in mismatches]))
    warned = len(mismatches) - len(failed)
    lines.append(
        "matches the lock"
        if not mismatches
        else f"{len(failed)} mismatch(es)" + (f", {warned} warning(s)" if warned else "")
    )
    return "\n".join(lines)
