"""The engine's interpreter: the Python where vLLM is installed, which may not be nemolaunch's own."""

from __future__ import annotations

import hashlib
import importlib.util
import os
import shutil
import sys
from dataclasses import dataclass
from pathlib import Path

from launcher.errors import BadInput
from launcher.paths import data_dir

# Where `make engine` installs the vLLM CPU engine (the Makefile's ENGINE_DIR): one venv per hash of the lock it was
# installed from, marked complete once vLLM imported there.
ENGINE_HOME = Path("~/.cache/nemolaunch").expanduser()
ENGINE_LOCK = "cpu.txt"
# an Interpreter's source when none was named and vLLM is not here: every command that names its engine says it
BUILT = "the engine `make engine` built; vLLM is not installed in nemolaunch's own Python"


@dataclass(frozen=True)
class Interpreter:
    path: Path
    source: str  # how it was chosen, shown to the user: "--python", "$NEMOLAUNCH_PYTHON", ...

    def describe(self) -> str:
        return f"{self.path} (from {self.source})"


def built_engine() -> Path | None:
    """The interpreter of the engine `make engine` built: the one of the shipped lock's hash, else the newest complete
    one (an older lock's); None when there is none."""
    try:
        digest = hashlib.sha256((data_dir("lockfiles") / ENGINE_LOCK).read_bytes()).hexdigest()[:12]
    except (OSError, FileNotFoundError):
        digest = None
    complete = [p.parent for p in ENGINE_HOME.glob("engine-*/.complete")]
    exact = [d for d in complete if d.name == f"engine-{digest}"]
    for folder in exact or sorted(complete, key=lambda d: d.stat().st_mtime, reverse=True):
        python = folder / "bin" / "python"
        if python.is_file() and os.access(python, os.X_OK):
            return python
    return None


def _default() -> Interpreter:
    """This interpreter when vLLM is installed here; else the engine `make engine` built."""
    if importlib.util.find_spec("vllm") is None and (built := built_engine()) is not None:
        return Interpreter(built, BUILT)
    return Interpreter(Path(sys.executable), "this interpreter")


def resolve_python(explicit: Path | None = None, from_profile: str | None = None) -> Interpreter:
    """--python, then $NEMOLAUNCH_PYTHON, then the profile's `python`, then this interpreter when vLLM is installed
    here, else the engine `make engine` built, else this interpreter."""
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
                    "point it at the bin/python of the venv where vLLM is installed "
                    f"(`make engine` builds one in {ENGINE_HOME})",
                )
            return Interpreter(path, source)
    return _default()
