"""Read what the engine's vLLM accepts (version, flags, env vars), in a child process, cached per install."""

from __future__ import annotations

import contextlib
import hashlib
import json
from pathlib import Path
from typing import Any

from checks import child
from checks.files import cache_dir
from checks.proc import ChildResult, run_python
from launcher.engine import Interpreter
from launcher.errors import NemolaunchError, NotReady
from launcher.output import atomic_write_text
from launcher.profiles.flags import EngineSurface

SURFACE_SCRIPT = Path(child.__file__).resolve().parent / "vllm_surface.py"


def engine_surface(interpreter: Interpreter, timeout_s: float = 180.0) -> EngineSurface:
    """The installed vLLM's version, parser options and env registry. Building the parser imports vLLM
    (seconds), so the answer is cached, keyed by the interpreter and the vLLM install's envs.py stamp."""
    info = _parse(run_python(interpreter.path, SURFACE_SCRIPT, timeout=30), interpreter)
    envs_py = Path(str(info["package_dir"])) / "envs.py"
    stamp = f"{interpreter.path}|{info['version']}|{envs_py.stat().st_mtime_ns}"
    cache = cache_dir("surface") / (hashlib.sha256(stamp.encode()).hexdigest()[:16] + ".json")
    full = _cached(cache)
    if full is None:
        result = run_python(interpreter.path, SURFACE_SCRIPT, ["--options"], timeout=timeout_s)
        if result.timed_out:
            raise NemolaunchError(f"reading vLLM's argument parser took over {timeout_s:.0f} s")
        full = _parse(result, interpreter)
        with contextlib.suppress(OSError):  # a cache that cannot be written is read again next time
            atomic_write_text(cache, json.dumps(full))
    entry = info.get("entry")  # from this run, not the cache: a cache written before it was asked has none
    return EngineSurface(
        str(full["version"]),
        frozenset(full["options"]),
        frozenset(full["env_vars"]),
        str(entry) if entry else None,
    )


def _cached(path: Path) -> dict[str, Any] | None:
    """A surface cached earlier; None when there is none or it is unreadable or of another shape (then it is read
    from vLLM again and rewritten)."""
    try:
        doc = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    ok = isinstance(doc, dict) and isinstance(doc.get("version"), str)
    lists = ok and all(isinstance(doc.get(k), list) and all(isinstance(v, str) for v in doc[k]) for k in LISTS)
    return doc if lists else None


LISTS = ("options", "env_vars")


def _parse(result: ChildResult, interpreter: Interpreter) -> dict[str, Any]:
    info: dict[str, Any] | None = result.json()
    if info is None:
        raise NemolaunchError(f"cannot inspect vLLM in {interpreter.describe()}: {result.last_error()}")
    if info.get("error") or not info.get("version"):
        raise NotReady(
            f"vLLM is not installed in {interpreter.describe()}",
            "name the engine's interpreter with --python (make engine builds the CPU one)",
        )
    return info
