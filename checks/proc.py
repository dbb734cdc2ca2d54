"""The one place nemolaunch spawns processes.

Anything that can crash or hang an interpreter (a CUDA kernel, the import of a broken wheel, the server)
runs in a child in its own session with a timeout; on timeout the whole process group is killed.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any


@dataclass(frozen=True)
class ChildResult:
    argv: tuple[str, ...]
    returncode: int | None  # None when it timed out and was killed
    stdout: str
    stderr: str
    elapsed_s: float

    @property
    def timed_out(self) -> bool:
        return self.returncode is None

    @property
    def ok(self) -> bool:
        return self.returncode == 0

    def json(self) -> Any:
        """The child's answer: the JSON object on its last line of output, or None when there is none."""
        try:
            return json.loads(self.stdout.strip().splitlines()[-1])
        except (IndexError, json.JSONDecodeError):
            return None

    def last_error(self) -> str:
        """The child's last line on stderr: usually the exception that ended it."""
        return (self.stderr.strip().splitlines() or ["no output"])[-1][:300]


def _kill_group(proc: subprocess.Popen[str] | subprocess.Popen[bytes], sig: int) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(proc.pid, sig)


def run_child(
    argv: Sequence[str | os.PathLike[str]],
    timeout: float,
    env: Mapping[str, str] | None = None,
    stdin_text: str | None = None,
) -> ChildResult:
    """Run argv to completion or until timeout (then kill its process group); never raises on exit codes."""
    args = tuple(str(a) for a in argv)
    start = time.monotonic()
    try:
        proc = subprocess.Popen(
            args,
            stdin=subprocess.PIPE if stdin_text is not None else subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            errors="replace",
            env=dict(env) if env is not None else None,
            start_new_session=True,
        )
    except OSError as e:  # not found, not executable
        return ChildResult(args, 127, "", f"{type(e).__name__}: {e}", 0.0)
    try:
        out, err = proc.communicate(stdin_text, timeout=timeout)
        code: int | None = proc.returncode
    except subprocess.TimeoutExpired:
        _kill_group(proc, signal.SIGKILL)
        out, err = proc.communicate()
        code = None
    except BaseException:
        _kill_group(proc, signal.SIGKILL)
        proc.wait()
        raise
    return ChildResult(args, code, out, err, time.monotonic() - start)


def run_python(
    python: Path | str,
    script: Path,
    args: Sequence[str] = (),
    timeout: float = 30.0,
    env: Mapping[str, str] | None = None,
) -> ChildResult:
    """Run one of the project's child scripts under another interpreter, with the environment vLLM would
    see when launched (so PYTHONPATH and friends count)."""
    return run_child([str(python), str(script), *args], timeout=timeout, env=env)


def spawn_group(argv: Sequence[str], env: Mapping[str, str], log: IO[bytes]) -> subprocess.Popen[bytes]:
    """Start a long-running process (the server) in its own process group, output to `log`."""
    return subprocess.Popen(
        list(argv),
        env=dict(env),
        stdin=subprocess.DEVNULL,
        stdout=log,
        stderr=subprocess.STDOUT,
        start_new_session=True,
    )


def stop_group(proc: subprocess.Popen[bytes], grace_s: float = 15.0) -> int | None:
    """SIGTERM the process group, wait up to grace_s, then SIGKILL it and wait until every member is gone;
    returns the leader's exit code."""
    if proc.poll() is None:
        _kill_group(proc, signal.SIGTERM)
        with contextlib.suppress(subprocess.TimeoutExpired):
            proc.wait(timeout=grace_s)
    # children may outlive the leader (vLLM's engine core): always sweep the group, then wait for it to empty
    _kill_group(proc, signal.SIGKILL)
    try:
        code: int | None = proc.wait(timeout=5)
    except subprocess.TimeoutExpired:
        code = None
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        try:
            os.killpg(proc.pid, 0)
        except (ProcessLookupError, PermissionError):
            break
        time.sleep(0.05)
    return code
