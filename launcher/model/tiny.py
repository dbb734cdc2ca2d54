"""The tiny random-weight model behind the embedded CPU default (and the tests that need a real engine), and the
project's tokenizer that model shapes reuse. Both are built by child/tiny_model.py in the engine's interpreter."""

from __future__ import annotations

import shutil
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from checks.proc import run_python
from launcher.errors import BadInput, NemolaunchError, NotReady
from launcher.paths import CHILD_DIR

SCRIPT = CHILD_DIR / "tiny_model.py"


@contextmanager
def fresh_folder(out_dir: Path) -> Iterator[Path]:
    """A temporary sibling of OUT_DIR to fill; renamed into place only if the block succeeds, so a failed or
    interrupted build never leaves a half-written model."""
    if out_dir.exists() and (not out_dir.is_dir() or any(out_dir.iterdir())):
        raise BadInput(f"{out_dir} exists and is not an empty folder", "remove it or name a new folder")
    out_dir.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{out_dir.name}.", dir=out_dir.parent))
    try:
        yield tmp
        if out_dir.exists():
            out_dir.rmdir()
        tmp.chmod(0o755)
        tmp.rename(out_dir)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def run_builder(python: Path, args: list[str], what: str, timeout_s: float = 300.0) -> dict[str, Any]:
    """Run child/tiny_model.py with the engine's interpreter; its one JSON line, or one clear error."""
    result = run_python(python, SCRIPT, args, timeout=timeout_s)
    if result.timed_out:
        raise NemolaunchError(f"building {what} took over {timeout_s:.0f} s", "rerun with -v")
    if not result.ok:
        last = result.last_error()
        if "No module named" in last:
            raise NotReady(
                f"{python} cannot build {what}: {last}",
                "name the engine's interpreter with --python (make engine builds one)",
            )
        raise NemolaunchError(f"building {what} failed: {last}")
    info: dict[str, Any] = result.json()
    return info


def build(python: Path, out_dir: Path, timeout_s: float = 300.0) -> str:
    with fresh_folder(out_dir) as tmp:
        info = run_builder(python, [str(tmp)], "the tiny model", timeout_s)
    return f"built {out_dir}: {info['parameters']:,} parameters, vocab {info['vocab_size']}"


def write_tokenizer(python: Path, vocab_size: int, out_dir: Path, timeout_s: float = 300.0) -> dict[str, Any]:
    """The tiny model's tokenizer, padded to vocab_size ids, into an existing folder (model shapes use it)."""
    return run_builder(python, ["--tokenizer-only", str(vocab_size), str(out_dir)], "the tokenizer", timeout_s)
