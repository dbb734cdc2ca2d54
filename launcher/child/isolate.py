"""Run jobs in forked children, each isolated, with at most one child in its timed section at a time.

kernel_probe.py imports torch and vLLM once (without touching CUDA), then forks one child per kernel: the
children set up and check their kernels side by side (so JIT compiles overlap), then take turns for the timed
section, so no two kernels are ever timed at once. A timed child holds an exclusive lock on the GPU until it
ends; the heavy GPU work of a set-up (a float32 reference) takes the same lock, so it never runs while another
child is being timed. A child that hangs is killed when its phase's time is up (set-up and timing each get
`timeout_s`; waiting for the turn does not count), one that crashes is reported by its signal or exit code and
its last line of output; the others go on. Standard library only, so the tests can drive it with jobs that
hang, crash or print.

A job may need a build that runs outside the pool (FlashInfer's JIT modules, launcher/child/flashinfer_build.py):
it is forked only once the build's status file says it is done; a failed build fails its jobs with the build's
last error line, and a build still running when nothing else is left and its wait limit has passed leaves its
jobs "not-built" (the build goes on; the next run finds it done). Every result carries its timeline: the
monotonic times (system-wide on Linux, so the caller can make them run-relative) it was forked, ready to be
timed, let through and ended.
"""

from __future__ import annotations

import contextlib
import ctypes
import faulthandler
import fcntl
import json
import os
import re
import select
import signal
import sys
import tempfile
import time
import traceback
from collections import deque
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

PR_SET_PDEATHSIG = 1


class Turn:
    """What a child's worker gets besides its job: wait() when it is ready to be timed (from then on it has the
    GPU to itself until it ends), quiet() around short GPU work that must not overlap another child's timing."""

    def __init__(self, to_parent: int, from_parent: int, lock_path: str) -> None:
        self._to_parent, self._from_parent, self._lock_path = to_parent, from_parent, lock_path

    def wait(self) -> None:
        sys.stdout.flush()
        os.write(self._to_parent, b"READY\n")
        if os.read(self._from_parent, 1) != b"G":  # the harness went away
            os._exit(1)
        lock = os.open(self._lock_path, os.O_RDWR)  # kept open (and locked) until this child exits
        fcntl.flock(lock, fcntl.LOCK_EX)

    @contextlib.contextmanager
    def quiet(self) -> Iterator[None]:
        lock = os.open(self._lock_path, os.O_RDWR)
        try:
            fcntl.flock(lock, fcntl.LOCK_EX)
            yield
        finally:
            os.close(lock)


Worker = Callable[[dict[str, Any], Turn], dict[str, Any]]


@dataclass(eq=False)
class _Child:
    job: dict[str, Any]
    pid: int
    from_child: int
    to_child: int
    log: str
    started: float
    deadline: float | None
    phase: str = "setting up"
    buffer: bytes = b""
    result: dict[str, Any] | None = None
    timed_at: float | None = None
    ready_at: float | None = None
    reaped: bool = False


@dataclass(frozen=True)
class Build:
    """A build some jobs need, running in a process of its own: `status` is the JSON file it writes (atomically)
    when it ends ({"ok": bool, "error": last error line}); its jobs wait for it until `wait_until` (monotonic) once
    nothing else is left to run; `log` is where it writes its output."""

    status: str
    wait_until: float
    log: str
    label: str = "the build"

    def outcome(self) -> dict[str, Any] | None:
        try:
            with open(self.status) as f:
                found = json.load(f)
        except (OSError, json.JSONDecodeError):
            return None
        return found if isinstance(found, dict) else {"ok": False, "error": "unreadable status"}


def _die_with_parent() -> None:
    """Ask Linux to kill this child when the harness dies (nemolaunch kills the harness on Ctrl-C or timeout,
    and the children live in their own process groups)."""
    with contextlib.suppress(OSError, AttributeError):  # not Linux: the harness's own cleanup covers normal exits
        ctypes.CDLL(None, use_errno=True).prctl(PR_SET_PDEATHSIG, signal.SIGKILL)


def _run_child(job: dict[str, Any], worker: Worker, turn: Turn, to_parent: int, log_fd: int) -> None:
    faulthandler.disable()  # a parent's crash handler would write into the parent's output, not this child's log
    os.setpgid(0, 0)  # its own group, so a kill also takes whatever it started (a JIT compiler)
    _die_with_parent()
    os.dup2(log_fd, 1)
    os.dup2(log_fd, 2)
    # Python-level writers too, in case the parent had replaced them (a test runner capturing output)
    sys.stdout = open(1, "w", buffering=1, closefd=False)  # noqa: SIM115
    sys.stderr = open(2, "w", buffering=1, closefd=False)  # noqa: SIM115
    try:
        result = worker(job, turn)
    except BaseException as e:  # the job failed: its class and message are the finding
        result = {
            "status": "failed",
            "error_class": type(e).__name__,
            "error": traceback.format_exception_only(type(e), e)[-1].strip()[:500],
        }
    sys.stdout.flush()
    sys.stderr.flush()
    os.write(to_parent, json.dumps(result).encode() + b"\n")
    os._exit(0)


def _start(job: dict[str, Any], worker: Worker, timeout_s: float, logdir: str) -> _Child:
    up_r, up_w = os.pipe()
    down_r, down_w = os.pipe()
    log_fd, log = tempfile.mkstemp(dir=logdir, suffix=".log")
    sys.stdout.flush()
    sys.stderr.flush()
    pid = os.fork()
    if pid == 0:
        os.close(up_r)
        os.close(down_w)
        _run_child(job, worker, Turn(up_w, down_r, os.path.join(logdir, "gpu.lock")), up_w, log_fd)
    os.close(up_w)
    os.close(down_r)
    os.close(log_fd)
    now = time.monotonic()
    return _Child(job, pid, up_r, down_w, log, now, now + timeout_s)


def _outcome(child: _Child, timed_out: bool, timeout_s: float, noise: re.Pattern[str] | None) -> dict[str, Any]:
    with open(child.log, "rb") as f:
        text = f.read().decode(errors="replace")
    lines = text.splitlines()
    result: dict[str, Any]
    if timed_out:
        result = {"status": "timed-out", "error": f"no result within {timeout_s:.0f} s while {child.phase} (killed)"}
    elif child.result is not None:
        result = child.result
    else:
        _, status = os.waitpid(child.pid, 0)
        child.reaped = True
        how = (
            f"killed by signal {os.WTERMSIG(status)}"
            if os.WIFSIGNALED(status)
            else f"exit code {os.waitstatus_to_exitcode(status)}"
        )
        last = next((line.strip() for line in reversed(lines) if line.strip()), "no output")
        result = {"status": "crashed", "error": f"{how} while {child.phase}: {last[:300]}"}
    result["noise"] = sum(1 for line in lines if noise and noise.search(line))
    now = time.monotonic()
    result["seconds"] = round(now - child.started, 1)
    if child.timed_at is not None:
        result["timed_s"] = round(now - child.timed_at, 1)
    result["t"] = {"started": child.started, "set_up": child.ready_at, "let_through": child.timed_at, "ended": now}
    return result


def _without_child(job: dict[str, Any], build: Build, found: dict[str, Any] | None) -> dict[str, Any]:
    """The result of a job whose build failed (found) or missed its wait limit (found is None)."""
    name, now = build.label, time.monotonic()
    if found is None:
        why = (
            f"{name} was still building when the probe's wait for it ended; it goes on in the background "
            f"(log: {build.log}) and the next run finds it built"
        )
        result = {"status": "not-built", "error": why}
    else:
        result = {"status": "failed", "error": f"{name} build failed: {found.get('error') or 'no error line'}"}
    return {**result, "noise": 0, "seconds": 0.0, "t": {"started": None, "set_up": None, "let_through": None,
                                                        "ended": now}}  # fmt: skip


def _reap(child: _Child) -> None:
    for fd in (child.from_child, child.to_child):
        with contextlib.suppress(OSError):
            os.close(fd)
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(child.pid, signal.SIGKILL)  # the child or what it left behind
    if not child.reaped:
        with contextlib.suppress(ChildProcessError):
            os.waitpid(child.pid, 0)
    os.unlink(child.log)


def run_isolated(
    jobs: list[dict[str, Any]],
    worker: Worker,
    timeout_s: float,
    parallel: int,
    emit: Callable[[dict[str, Any], dict[str, Any]], list[dict[str, Any]] | None],
    noise: re.Pattern[str] | None = None,
    builds: dict[str, Build] | None = None,
    poll_s: float = 0.5,
) -> None:
    """Run worker(job, turn) for every job in its own forked child, at most `parallel` alive at once.

    The worker calls turn.wait() once, when it is ready for its timed section; the harness lets one child at a
    time through. emit(job, result) is called as each child ends, with the worker's result (or timed-out /
    crashed / failed) plus "noise" (lines of its output matching `noise`), "seconds" and, once it was let
    through, "timed_s", and "t" (its timeline); the jobs it returns run after those pending (a job started
    again in a fresh process). A job with "needs": NAME waits for builds[NAME] (see Build).
    """
    builds = builds or {}
    pending = deque(jobs)
    live: dict[int, _Child] = {}
    waiting: deque[_Child] = deque()
    timing: _Child | None = None
    with tempfile.TemporaryDirectory(prefix="nemolaunch-probe-") as logdir:
        open(os.path.join(logdir, "gpu.lock"), "w").close()
        try:
            while pending or live:
                finished = {name: b.outcome() for name, b in builds.items()}
                for job in [j for j in pending if j.get("needs") in builds]:
                    found = finished[job["needs"]]
                    if found is not None and not found.get("ok"):  # a failed build: its jobs fail without a child
                        pending.remove(job)
                        pending.extend(emit(job, _without_child(job, builds[job["needs"]], found)) or [])
                runnable = [j for j in pending if j.get("needs") not in builds or finished[j["needs"]] is not None]
                while runnable and len(live) < parallel:
                    job = runnable.pop(0)
                    pending.remove(job)
                    child = _start(job, worker, timeout_s, logdir)
                    live[child.from_child] = child
                if not live and not runnable:  # only jobs waiting for builds are left
                    now = time.monotonic()
                    for job in [j for j in pending if now >= builds[j["needs"]].wait_until]:
                        pending.remove(job)
                        pending.extend(emit(job, _without_child(job, builds[job["needs"]], None)) or [])
                    if pending:
                        time.sleep(min(poll_s, max(0.0, min(builds[j["needs"]].wait_until for j in pending) - now)))
                    continue
                if timing is None and waiting:
                    timing = waiting.popleft()
                    timing.phase, timing.timed_at = "being timed", time.monotonic()
                    timing.deadline = timing.timed_at + timeout_s
                    os.write(timing.to_child, b"G")
                deadlines = [c.deadline for c in live.values() if c.deadline is not None]
                wait = max(0.0, min(deadlines) - time.monotonic()) if deadlines else None
                if pending:  # some wait for a build: look at its status now and then
                    wait = poll_s if wait is None else min(wait, poll_s)
                readable, _, _ = select.select(list(live), [], [], wait)
                ended: list[tuple[_Child, bool]] = []
                for fd in readable:
                    child = live[fd]
                    data = os.read(fd, 1 << 16)
                    if not data:
                        ended.append((child, False))
                        continue
                    child.buffer += data
                    *complete, child.buffer = child.buffer.split(b"\n")
                    for line in complete:
                        if line == b"READY":
                            child.phase, child.deadline = "waiting for its turn", None
                            child.ready_at = time.monotonic()
                            waiting.append(child)
                        else:
                            try:
                                child.result = json.loads(line)
                            except json.JSONDecodeError:  # not an answer: the crash report says what it printed
                                child.result = None
                now = time.monotonic()
                ended += [
                    (c, True) for c in live.values() if c.deadline is not None and now > c.deadline and c.result is None
                ]
                for child, timed_out in ended:
                    if child.from_child not in live:
                        continue
                    if timed_out:
                        with contextlib.suppress(ProcessLookupError, PermissionError):
                            os.killpg(child.pid, signal.SIGKILL)
                    pending.extend(emit(child.job, _outcome(child, timed_out, timeout_s, noise)) or [])
                    del live[child.from_child]
                    if child in waiting:
                        waiting.remove(child)
                    if child is timing:
                        timing = None
                    _reap(child)
        finally:
            for child in live.values():
                _reap(child)
