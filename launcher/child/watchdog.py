"""Kills a server's process group when the nemolaunch process that started it dies without stopping it (SIGKILL,
the OOM killer). Run by nemolaunch's own interpreter: `python -I -S watchdog.py PGID GRACE_S`, its stdin the read end
of a pipe whose only write end nemolaunch holds. A byte on the pipe means "stopped cleanly, go"; end of file without
one means nemolaunch is gone: SIGTERM the group (vLLM shuts its engine core down), SIGKILL what is left after
GRACE_S. The group holds the grandchildren (vLLM's engine core) that PR_SET_PDEATHSIG alone would leave behind.
Standard library only; it runs in its own session, so a hangup or Ctrl-C for the terminal does not reach it."""

import contextlib
import os
import signal
import sys
import time


def group_alive(pgid: int) -> bool:
    try:
        os.killpg(pgid, 0)
    except (ProcessLookupError, PermissionError):
        return False
    return True


def main() -> None:
    pgid, grace_s = int(sys.argv[1]), float(sys.argv[2])
    for sig in (signal.SIGHUP, signal.SIGINT):
        signal.signal(sig, signal.SIG_IGN)
    try:
        released = os.read(0, 1)
    except OSError:
        released = b""
    if released or not group_alive(pgid):
        return
    try:
        os.killpg(pgid, signal.SIGTERM)
    except (ProcessLookupError, PermissionError):
        return
    deadline = time.monotonic() + grace_s
    while time.monotonic() < deadline and group_alive(pgid):
        time.sleep(0.1)
    if group_alive(pgid):
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(pgid, signal.SIGKILL)


if __name__ == "__main__":
    main()
