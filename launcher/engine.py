"""The engine's interpreter: the Python where vLLM is installed, which may not be nemolaunch's own."""

from __future__ import annotations

import os
import shutil
import sys
from dataclasses import dataclass
from pathlib import Path

from launcher.errors import BadInput


@dataclass(frozen=True)
class Interpreter:
    path: Path
    source: str  # how it was chosen, shown to the user: "--python", "$NEMOLAUNCH_PYTHON", ...

    def describe(self) -> str:
        return f"{self.path} (from {self.source})"


def resolve_python(explicit: Path | None = None, from_profile: str | None = None) -> Interpreter:
    """--python, then $NEMOLAUNCH_PYTHON, then the profile's `python`, then this interpreter."""
    candidates = [
        (explicit, "--python"),
        (os.environ.get("NEMOLAUNCH_PYTHON") or None, "$NEMOLAUNCH_PYTHON"),
        (from_profile, "the profile"),
    ]
    for value, source in candidates:
        if value:
            path = Path(os.path.expanduser(str(value)))
            if len(path.parts) == 1:  # a bare name such as python3: look it up on PATH
                path = Path(shutil.which(str(path)) or path)
            if not (path.is_file() and os.access(path, os.X_OK)):
                raise BadInput(
                    f"engine interpreter {path} (from {source}) does not exist or is not executable",
                    "point it at the bin/python of the venv where vLLM is installed (make engine builds one)",
                )
            return Interpreter(path, source)
    return Interpreter(Path(sys.executable), "this interpreter")
