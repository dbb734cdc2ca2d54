"""The tiny random-weight model behind the embedded CPU default (and the tests that need a real engine)."""

from __future__ import annotations

import shutil
import tempfile
from pathlib import Path

from checks.proc import run_python
from launcher.errors import BadInput, NemolaunchError, NotReady

SCRIPT = Path(__file__).resolve().parent / "child" / "tiny_model.py"


def build(python: Path, out_dir: Path, timeout_s: float = 300.0) -> str:
    """Build into a temporary sibling folder, then rename it into place: never a half-written model."""
    if out_dir.exists() and any(out_dir.iterdir()):
        raise BadInput(f"{out_dir} exists and is not empty", "remove it or name a new folder")
    out_dir.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{out_dir.name}.", dir=out_dir.parent))
    try:
        result = run_python(python, SCRIPT, [str(tmp)], timeout=timeout_s)
        if result.timed_out:
            raise NemolaunchError(f"building the tiny model took over {timeout_s:.0f} s", "rerun with -v")
        if not result.ok:
            last = result.last_error()
            if "No module named" in last:
                raise NotReady(
                    f"{python} cannot build the model: {last}",
                    "name the engine's interpreter with --python (make engine builds one)",
                )
            raise NemolaunchError(f"building the tiny model failed: {last}")
        info = result.json()
        if out_dir.exists():
            out_dir.rmdir()
        tmp.chmod(0o755)
        tmp.rename(out_dir)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return f"built {out_dir}: {info['parameters']:,} parameters, vocab {info['vocab_size']}"
