"""Where the project's data lives: the checkout's top folders, or launcher/data inside a wheel."""

from __future__ import annotations

from pathlib import Path

_PACKAGE = Path(__file__).resolve().parent

# The engine-side scripts, run by path under the engine's interpreter (never imported).
CHILD_DIR = _PACKAGE / "child"


def data_dir(name: str) -> Path:
    """`profiles` or `lockfiles`, from an installed wheel or from a checkout (editable install)."""
    for candidate in (_PACKAGE / "data" / name, _PACKAGE.parent / name):
        if candidate.is_dir():
            return candidate
    raise FileNotFoundError(f"nemolaunch data folder {name!r} is missing from this installation")
