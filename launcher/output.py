"""Shared output conventions: JSON documents with a schema key, plain tables, atomic files."""

from __future__ import annotations

import json
import os
import tempfile
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any


def json_document(command: str, payload: dict[str, Any]) -> str:
    """A command's machine output; `schema` comes first so readers can dispatch on it."""
    return json.dumps({"schema": f"nemolaunch.{command}/1", **payload}, indent=2, default=str)


def table(headers: Sequence[str], rows: Iterable[Sequence[object]]) -> str:
    """A left-aligned text table; None renders as '-'."""
    cells = [[("-" if c is None else str(c)) for c in row] for row in rows]
    widths = [len(h) for h in headers]
    for row in cells:
        widths = [max(w, len(c)) for w, c in zip(widths, row, strict=True)]
    lines = ["  ".join(h.ljust(w) for h, w in zip(headers, widths, strict=True)).rstrip()]
    lines.append("  ".join("-" * w for w in widths))
    lines += ["  ".join(c.ljust(w) for c, w in zip(row, widths, strict=True)).rstrip() for row in cells]
    return "\n".join(lines)


def _umask() -> int:
    """The process's umask. Python can only read it by setting it, so it is set and put back at once."""
    mask = os.umask(0o022)
    os.umask(mask)
    return mask


def atomic_write_text(path: Path, text: str) -> None:
    """Write through a temporary file in the same folder, then rename: readers never see half a file. The file
    gets the mode a plain open() would give it (0666 less the umask), not mkstemp's private 0600."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", dir=path.parent)
    try:
        os.fchmod(fd, 0o666 & ~_umask())
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            f.write(text)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def create_exclusive(path: Path) -> Path:
    """Create `path` empty, exclusively and never through a symlink (O_CREAT | O_EXCL | O_NOFOLLOW), with the
    umask's mode: in a shared folder nobody can have put a file or a link there first. When the name is taken,
    NAME-2.EXT, NAME-3.EXT, ... Returns the path created."""
    path.parent.mkdir(parents=True, exist_ok=True)
    for n in range(1, 1000):
        candidate = path if n == 1 else path.with_name(f"{path.stem}-{n}{path.suffix}")
        try:
            fd = os.open(candidate, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o666)
        except FileExistsError:
            continue
        os.close(fd)
        return candidate
    raise FileExistsError(f"no free name for {path} (tried 999)")
