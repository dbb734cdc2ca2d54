"""The one place for how nemolaunch writes files and where it caches: `checks/` may import nothing from
`launcher/`, so both live here and launcher.output re-exports the writer."""

from __future__ import annotations

import os
import tempfile
from pathlib import Path


def cache_dir(*parts: str) -> Path:
    """$XDG_CACHE_HOME/nemolaunch/PARTS (default ~/.cache/nemolaunch/PARTS): the doctor's import probes, the
    engine's parser surface. `make engine` installs the engine beside them (engine-<lock hash>)."""
    base = os.environ.get("XDG_CACHE_HOME") or os.path.expanduser("~/.cache")
    return Path(base, "nemolaunch", *parts)


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
