"""The one place nemolaunch spawns processes.

Anything that can crash or hang an interpreter (a CUDA kernel, the import of a broken wheel, the server)
runs in a child in its own session with a timeout; on timeout the whole process group is killed.
"""

from __future__ import annotations

import contextlib
import json
import os
import select
import signal
import subprocess
import tempfile
import time
from collections.abc import Callable, Mapping, Sequence
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


def spawn_group(
    argv: Sequence[str], env: Mapping[str, str], log: IO[bytes], preexec: Callable[[], None] | None = None
) -> subprocess.Popen[bytes]:
    """Start a long-running process (the server) in its own process group, output to `log`; `preexec` runs in the
    child before it executes argv (the server's tie to its parent's life)."""
    return subprocess.Popen(
        list(argv),
        env=dict(env),
        stdin=subprocess.DEVNULL,
        stdout=log,
        stderr=subprocess.STDOUT,
        start_new_session=True,
        preexec_fn=preexec,
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


class Conversation:
    """A child that answers in JSON lines while it runs (the probe harness): send it one request, then read
    its answers as they come, each within a deadline. It runs in its own session; close() kills the group."""

    def __init__(self, argv: Sequence[str | os.PathLike[str]], env: Mapping[str, str] | None = None) -> None:
        self._stderr = tempfile.TemporaryFile()  # noqa: SIM115  (lives as long as the conversation)
        self._buffer = b""
        self.proc = subprocess.Popen(
            [str(a) for a in argv],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=self._stderr,
            env=dict(env) if env is not None else None,
            start_new_session=True,
        )

    def __enter__(self) -> Conversation:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def send(self, message: Any) -> None:
        assert self.proc.stdin is not None
        with contextlib.suppress(BrokenPipeError):  # it died: receive() says so
            self.proc.stdin.write(json.dumps(message).encode() + b"\n")
            self.proc.stdin.close()

    def receive(self, timeout: float) -> Any:
        """The next JSON value it prints (other lines are skipped); None once it has ended.
        Raises TimeoutError when nothing arrives within timeout seconds."""
        assert self.proc.stdout is not None
        fd = self.proc.stdout.fileno()
        deadline = time.monotonic() + timeout
        while True:
            while b"\n" in self._buffer:
                line, self._buffer = self._buffer.split(b"\n", 1)
                with contextlib.suppress(json.JSONDecodeError):
                    return json.loads(line)
            remaining = deadline - time.monotonic()
            if remaining <= 0 or not select.select([fd], [], [], remaining)[0]:
                raise TimeoutError(f"no answer within {timeout:.0f} s")
            data = os.read(fd, 1 << 16)
            if not data:
                return None
            self._buffer += data

    def last_error(self) -> str:
        self._stderr.seek(0)
        lines = self._stderr.read().decode(errors="replace").strip().splitlines()
        return (lines or ["no output"])[-1][:300]

    def close(self) -> None:
        _kill_group(self.proc, signal.SIGKILL)
        self.proc.wait()
        for stream in (self.proc.stdin, self.proc.stdout):
            if stream is not None:
                with contextlib.suppress(OSError):
                    stream.close()
        self._stderr.close()
