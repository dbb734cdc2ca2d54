"""Shared output conventions: JSON documents with a schema key, plain tables, atomic files."""

from __future__ import annotations

import json
import os
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

from checks.files import atomic_write_text

__all__ = ["atomic_write_text", "create_exclusive", "json_document", "table"]


def json_document(command: str, payload: Mapping[str, Any]) -> str:
    """A command's machine output; `schema` comes first so readers can dispatch on it. A document that names its
    own schema (bench's summary.json, ab.json, tune.json) keeps it: --json prints what the file holds."""
    schema = payload.get("schema") or f"nemolaunch.{command}/1"
    body = {k: v for k, v in payload.items() if k != "schema"}
    return json.dumps({"schema": schema, **body}, indent=2, default=str)


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
