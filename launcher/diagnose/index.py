"""The message index of the installed serving stack: built by a child under the engine's interpreter
(launcher/child/message_index.py), cached by the versions of the packages it read, so it follows an upgrade
by itself and costs one small child (the versions) when nothing changed.
"""

from __future__ import annotations

import fcntl
import hashlib
import json
import os
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from checks.files import atomic_write_text, cache_dir
from checks.proc import run_python
from launcher.diagnose.templates import TemplateIndex, anchors
from launcher.errors import BadInput
from launcher.paths import CHILD_DIR

SCRIPT = CHILD_DIR / "message_index.py"
TEMPLATES_SCRIPT = CHILD_DIR / "message_templates.py"  # the child imports it
VERSIONS_TIMEOUT_S = 60.0
BUILD_TIMEOUT_S = 900.0  # a cold build reads ~8,000 source files: about a minute on two cores


class IndexUnavailable(Exception):
    """The index could not be built: the reason, one line."""


@dataclass(frozen=True)
class IndexInfo:
    python: str
    packages: dict[str, str]
    templates: int
    path: Path
    cached: bool
    build_s: float | None  # the child's build time when it was built now

    def to_json(self) -> dict[str, Any]:
        return {
            "python": self.python,
            "packages": self.packages,
            "templates": self.templates,
            "cache": str(self.path),
            "cached": self.cached,
            "build_s": self.build_s,
        }


def _key(python: str, packages: dict[str, str], sources: list[str]) -> str:
    """Changes when the interpreter, a package version, the folders read or the index's own code change."""
    code = b"".join(p.read_bytes() for p in (SCRIPT, TEMPLATES_SCRIPT, Path(__file__).with_name("templates.py")))
    blob = json.dumps([python, packages, sources, hashlib.sha256(code).hexdigest()], sort_keys=True)
    return hashlib.sha256(blob.encode()).hexdigest()[:16]


def _versions(python: str) -> dict[str, str]:
    r = run_python(python, SCRIPT, ["--versions"], timeout=VERSIONS_TIMEOUT_S)
    answer = r.json()
    if not r.ok or not isinstance(answer, dict):
        raise IndexUnavailable(f"{python} could not list its packages: {r.last_error()}")
    return {str(k): str(v) for k, v in answer.items()}


@contextmanager
def _one_builder(lock: Path) -> Iterator[None]:
    """An exclusive lock on `lock` (fcntl.flock, released when the process ends), waited for."""
    with lock.open("a") as f:
        fcntl.flock(f, fcntl.LOCK_EX)
        yield


def source_tree(folder: Path) -> tuple[str, tuple[Path, str]]:
    """A package's source folder that the interpreter does not have installed (an unpacked wheel): its import name
    (the folder's name) and version (from the wheel's .dist-info beside it whose RECORD lists the folder; "?" when
    there is none)."""
    if not folder.is_dir() or next(folder.glob("*.py"), None) is None:
        raise BadInput(
            f"{folder} is not a package's source folder", "give a folder of .py files, e.g. an unpacked wheel's sglang/"
        )
    name = folder.name
    for info in sorted(folder.parent.glob("*.dist-info")):
        record = info / "RECORD"
        if record.is_file() and any(line.startswith(f"{name}/") for line in record.read_text().splitlines()):
            for line in (info / "METADATA").read_text(errors="replace").splitlines():
                if line.startswith("Version:"):
                    return name, (folder.resolve(), line.split(":", 1)[1].strip())
    return name, (folder.resolve(), "?")


def load_index(
    python: str | os.PathLike[str],
    sources: dict[str, tuple[Path, str]] | None = None,
    refresh: bool = False,
    on_build: Callable[[str], None] | None = None,
    extra: dict[str, tuple[Path, str]] | None = None,
) -> tuple[TemplateIndex, IndexInfo]:
    """The index of what `python` has installed, with the folders of `extra` beside it (packages it lacks), or of
    `sources` alone ({package: (folder, version)}: an unpacked wheel of another version); from the cache when its
    packages have not changed since it was built."""
    python = str(python)
    given = sources or extra or {}
    args = [f"{name}={folder}@{version}" for name, (folder, version) in sorted(given.items())]
    if sources:
        packages = {name: version for name, (_, version) in sources.items()}
    else:
        packages = _versions(python) | {name: version for name, (_, version) in given.items()}
        args = ["--add", *args] if args else args
    if not packages:
        raise IndexUnavailable(f"{python} has none of the packages the index reads (vllm, torch, ...)")
    # one index per interpreter and set of folders: a rebuild replaces the one an upgrade made stale
    folders = sorted((name, str(folder)) for name, (folder, _) in given.items())
    owner = hashlib.sha256(json.dumps([python, folders]).encode()).hexdigest()[:8]
    path = cache_dir("diagnose") / f"index-{owner}-{_key(python, packages, args)}.json"
    build_s = None
    path.parent.mkdir(parents=True, exist_ok=True)
    with _one_builder(path.parent / f".index-{owner}.lock"):  # a second process waits, then reads what it built
        if refresh or not path.is_file():
            for stale in path.parent.glob(f"index-{owner}-*.json"):
                stale.unlink(missing_ok=True)
            if on_build is not None:
                listed = ", ".join(f"{name} {version}" for name, version in sorted(packages.items()))
                on_build(f"reading the messages of {listed} (once per set of versions; up to a minute or two)")
            tmp = path.with_name(f".{path.name}.{os.getpid()}.child")
            try:
                r = run_python(python, SCRIPT, [str(tmp), *args], timeout=BUILD_TIMEOUT_S)
                if not r.ok or not tmp.is_file():
                    reason = "timed out" if r.timed_out else r.last_error()
                    raise IndexUnavailable(f"building the message index under {python} failed: {reason}")
                doc = json.loads(tmp.read_text())
            finally:
                tmp.unlink(missing_ok=True)
            doc["anchors"] = anchors(doc["templates"])
            build_s = float(doc.get("seconds", 0.0))
            atomic_write_text(path, json.dumps(doc, separators=(",", ":")))
        else:
            doc = json.loads(path.read_text())
    index = TemplateIndex(doc)
    return index, IndexInfo(python, doc["packages"], len(index), path, build_s is None, build_s)
