"""Shared output conventions: JSON documents with a schema key, plain tables, atomic files, and the one path every
document and line goes through on its way out, which masks secrets (checks/secrets.py):

- `write_json` / `write_text`: a document or report written atomically, secrets masked;
- `json_document`: a command's --json output, secrets masked;
- `redacted_streams`: stdout and stderr for the whole command (the CLI's boundary installs it), each line masked,
  so no progress line, warning or log echo can print a key.

`hold` locks an output folder for one run at a time.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import io
import json
import os
import sys
from collections.abc import Iterable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any, TextIO

from checks.files import atomic_write_text
from checks.secrets import redact_obj, redact_text
from launcher.errors import BadInput, NemolaunchError

__all__ = [
    "Unwritable",
    "atomic_write_text",
    "create_exclusive",
    "hold",
    "json_document",
    "os_error_line",
    "redacted_streams",
    "table",
    "write_json",
    "write_text",
]

LOCK_NAME = ".nemolaunch.lock"


class Unwritable(NemolaunchError):
    """A folder that cannot take a write (read-only, full, a file where a folder should be): one line, and what
    was written before stays whole (every write is atomic)."""

    def __init__(self, path: Path | str | None, error: OSError) -> None:
        where = f" {path}" if path else ""
        super().__init__(
            f"cannot write{where}: {error.strerror or error}",
            "give a writable output folder with free space (what was written before is kept there)",
        )


def os_error_line(error: OSError) -> str:
    """The error boundary's one line for an OSError no stage caught: what failed, on which path."""
    if error.errno == errno.EEXIST and error.filename and not os.path.isdir(error.filename):
        return Unwritable(error.filename, OSError(errno.ENOTDIR, "a file is there, not a folder")).line()
    if error.errno in _WRITE_ERRORS:
        return Unwritable(error.filename, error).line()
    where = f"{error.filename}: " if error.filename else ""
    return f"{where}{error.strerror or error}"


_WRITE_ERRORS = {
    errno.EROFS,
    errno.ENOSPC,
    errno.EDQUOT,
    errno.EACCES,
    errno.EPERM,
    errno.ENOTDIR,
    errno.EISDIR,
    errno.EFBIG,
    errno.ENAMETOOLONG,
}


def json_document(command: str, payload: Mapping[str, Any]) -> str:
    """A command's machine output, secrets masked; `schema` comes first so readers can dispatch on it. A document
    that names its own schema (bench's summary.json, ab.json, tune.json) keeps it: --json prints what the file holds."""
    schema = payload.get("schema") or f"nemolaunch.{command}/1"
    body = {k: v for k, v in payload.items() if k != "schema"}
    return json.dumps(redact_obj({"schema": schema, **body}), indent=2, default=str)


def write_json(path: Path, doc: Mapping[str, Any], indent: int | None = 2) -> None:
    """A JSON document written atomically, secrets masked (by key name and by shape; token counts and token ids
    are kept). Raises OSError as the write does."""
    atomic_write_text(path, json.dumps(redact_obj(doc), indent=indent, default=str) + ("\n" if indent else ""))


def write_text(path: Path, text: str) -> None:
    """A text document (report.md, a README) written atomically, secrets masked."""
    atomic_write_text(path, redact_text(text))


class _RedactedStream(io.TextIOBase):
    """A text stream that masks secrets line by line before they reach `target` (a carriage return ends a line
    too: tqdm's bars redraw with one). Looks enough like the real stream for click to write to it directly."""

    def __init__(self, target: TextIO) -> None:
        self.target = target
        self.pending = ""

    @property
    def encoding(self) -> str:  # type: ignore[override]
        return getattr(self.target, "encoding", None) or "utf-8"

    @property
    def errors(self) -> str:  # type: ignore[override]
        return getattr(self.target, "errors", None) or "strict"

    def isatty(self) -> bool:
        return self.target.isatty()

    def fileno(self) -> int:
        return self.target.fileno()

    def writable(self) -> bool:
        return True

    def write(self, text: str) -> int:
        self.pending += text
        cut = max(self.pending.rfind("\n"), self.pending.rfind("\r"))
        if cut >= 0:
            done, self.pending = self.pending[: cut + 1], self.pending[cut + 1 :]
            self.target.write(redact_text(done))
        return len(text)

    def flush(self) -> None:
        if self.pending:
            self.target.write(redact_text(self.pending))
            self.pending = ""
        self.target.flush()


@contextlib.contextmanager
def redacted_streams() -> Iterator[None]:
    """sys.stdout and sys.stderr masked line by line for the duration; put back (flushed) on the way out."""
    saved = sys.stdout, sys.stderr
    sys.stdout, sys.stderr = _RedactedStream(saved[0]), _RedactedStream(saved[1])
    try:
        yield
    finally:
        for stream in (sys.stdout, sys.stderr):
            with contextlib.suppress(OSError, ValueError):
                stream.flush()
        sys.stdout, sys.stderr = saved


_held: set[Path] = set()  # the folders this process holds: a stage inside another (bench inside ab) holds once


@contextlib.contextmanager
def hold(out: Path, what: str = "run") -> Iterator[None]:
    """One run at a time in an output folder: an exclusive lock on OUT/.nemolaunch.lock (fcntl.flock, released by
    the kernel when the process dies, so a killed run never leaves a stale lock). The folder is created; one this
    call created and nothing was written into is removed on the way out. A second run into a live folder gets one
    line naming the holder's pid."""
    key = out.resolve()
    if key in _held:
        yield
        return
    created = not out.exists()
    try:
        out.mkdir(parents=True, exist_ok=True)
        fd = os.open(out / LOCK_NAME, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW, 0o666)
    except OSError as e:
        raise Unwritable(out, e) from None
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = os.pread(fd, 32, 0).decode(errors="replace").strip() or "?"
            raise BadInput(
                f"{out} is in use by another nemolaunch {what} (pid {holder})",
                "wait for it to end, or give another --out",
            ) from None
        os.ftruncate(fd, 0)
        os.pwrite(fd, f"{os.getpid()}\n".encode(), 0)
        _held.add(key)
        try:
            yield
        finally:
            _held.discard(key)
            if created and [p.name for p in out.iterdir()] == [LOCK_NAME]:
                with contextlib.suppress(OSError):
                    (out / LOCK_NAME).unlink()
                    out.rmdir()
    finally:
        os.close(fd)  # closing the descriptor releases the lock


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
