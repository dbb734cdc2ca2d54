"""Nothing nemolaunch starts outlives it. Three ways a command can end, one guard for each:

- SIGTERM or SIGHUP (a `kill`, a closed terminal or ssh session): `interrupts()` turns both into KeyboardInterrupt,
  as Ctrl-C is, so every `finally:` that stops a server runs; on exit it puts back the handlers that were there
  before (asyncio's remove_signal_handler puts back SIG_DFL instead: `async_interrupts()` restores them too).
- SIGKILL (the OOM killer's way): no handler runs. The server's leader gets PR_SET_PDEATHSIG (the kernel signals it
  when its parent dies), and a watchdog process (launcher/child/watchdog.py), outside nemolaunch's process group,
  stops the server's whole process group, where vLLM's engine core (a grandchild) lives.
- A normal stop: `Tether.release()` tells the watchdog to go without killing anything.

PR_SET_PDEATHSIG fires when the *thread* that started the child ends: servers are started from the main thread.
"""

from __future__ import annotations

import asyncio
import contextlib
import ctypes
import os
import signal
import subprocess
import sys
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from types import FrameType
from typing import Any

from launcher.paths import CHILD_DIR

WATCHDOG = CHILD_DIR / "watchdog.py"
SIGNALS = (signal.SIGTERM, signal.SIGHUP)  # the ways a command is ended besides Ctrl-C
PR_SET_PDEATHSIG = 1

_interrupted = False  # one KeyboardInterrupt per command: a second SIGTERM must not break the clean-up it started
_depth = 0


def _raise_once(signum: int, frame: FrameType | None) -> None:
    global _interrupted
    if _interrupted:
        return
    _interrupted = True
    raise KeyboardInterrupt


@contextlib.contextmanager
def interrupts() -> Iterator[None]:
    """SIGTERM and SIGHUP raise KeyboardInterrupt inside (once: later ones are ignored while stopping); the previous
    handlers are put back on the way out. Nestable; outside the main thread it does nothing."""
    global _depth, _interrupted
    try:
        previous = {sig: signal.signal(sig, _raise_once) for sig in SIGNALS}
    except ValueError:  # not the main thread: signals are delivered to the main thread only
        yield
        return
    _depth += 1
    try:
        yield
    finally:
        _depth -= 1
        for sig, handler in previous.items():
            signal.signal(sig, handler)
        if _depth == 0:
            _interrupted = False


@contextlib.contextmanager
def async_interrupts(on_signal: Callable[[], Any]) -> Iterator[None]:
    """Inside a running event loop: SIGTERM and SIGHUP call `on_signal` (the sweep cancels its task, as Ctrl-C
    does); on the way out the handlers that were there before are put back, not SIG_DFL."""
    loop = asyncio.get_running_loop()
    previous = {sig: signal.getsignal(sig) for sig in SIGNALS}
    added = []
    for sig in SIGNALS:
        try:
            loop.add_signal_handler(sig, on_signal)
            added.append(sig)
        except (ValueError, RuntimeError, NotImplementedError):  # not the main thread, or no signals here
            break
    try:
        yield
    finally:
        for sig in added:
            with contextlib.suppress(ValueError, RuntimeError, NotImplementedError):
                loop.remove_signal_handler(sig)
            handler = previous[sig]
            signal.signal(sig, handler if handler is not None else signal.SIG_DFL)


def tied_to_parent() -> Callable[[], None] | None:
    """A server's preexec_fn: the kernel sends it SIGTERM when nemolaunch dies (None off Linux). prctl is looked up
    here, in the parent, so the child between fork and exec only calls it."""
    if not sys.platform.startswith("linux"):
        return None
    try:
        prctl = ctypes.CDLL(None, use_errno=True).prctl  # libc's, already loaded: no library search
    except (OSError, AttributeError):
        return None
    prctl.argtypes = [ctypes.c_int, ctypes.c_ulong]
    prctl.restype = ctypes.c_int

    def preexec() -> None:
        prctl(PR_SET_PDEATHSIG, signal.SIGTERM)

    return preexec


@dataclass
class Tether:
    """A watchdog tied to one server's process group: it stops the group if nemolaunch dies first."""

    watchdog: subprocess.Popen[bytes] | None
    pipe: int | None  # the write end; only this process holds it

    @classmethod
    def tie(cls, pgid: int, grace_s: float = 10.0) -> Tether:
        read, write = os.pipe()  # both ends close on exec: only the watchdog gets the read end, as its stdin
        try:
            watchdog = subprocess.Popen(
                [sys.executable, "-I", "-S", str(WATCHDOG), str(pgid), str(grace_s)],
                stdin=read,
                stdout=subprocess.DEVNULL,
                stderr=subprocess.DEVNULL,
                start_new_session=True,
            )
        except OSError:
            os.close(write)
            return cls(None, None)  # the kernel's PDEATHSIG still stops the leader
        finally:
            os.close(read)
        return cls(watchdog, write)

    def release(self) -> None:
        """The server was stopped here: the watchdog leaves without killing anything."""
        if self.pipe is not None:
            with contextlib.suppress(OSError):
                os.write(self.pipe, b"x")
            os.close(self.pipe)
            self.pipe = None
        if self.watchdog is not None:
            with contextlib.suppress(subprocess.TimeoutExpired):
                self.watchdog.wait(timeout=5)
            self.watchdog = None
