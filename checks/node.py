"""What one node of a fleet reports about itself: doctor's facts, gathered there, and whether the head's
address and port can be reached from there. Runs inside a Ray task on that node (launcher.doctor.fleet ships this
package to every node), so it imports nothing from launcher/."""

from __future__ import annotations

import errno
import os
import platform
import socket
import sys
from pathlib import Path
from typing import Any

from checks.facts import gather


def reach(address: str, port: int, timeout_s: float = 3.0) -> dict[str, Any]:
    """A TCP connect to address:port. "refused" still proves the host is reachable (nothing listens yet: the
    head's vLLM is not started); a timeout or an unreachable network means a firewall or a wrong address."""
    try:
        with socket.create_connection((address, port), timeout=timeout_s):
            return {"address": address, "port": port, "result": "connected"}
    except ConnectionRefusedError:
        return {"address": address, "port": port, "result": "refused"}
    except TimeoutError:
        return {"address": address, "port": port, "result": "timeout"}
    except OSError as e:
        kind = "unreachable" if e.errno in (errno.ENETUNREACH, errno.EHOSTUNREACH) else "error"
        return {"address": address, "port": port, "result": kind, "error": str(e)}


def report(python: str | None, targets: list[tuple[str, int]]) -> dict[str, Any]:
    """This node's facts (with the engine interpreter `python`, default: the one running this task) and a
    connect to each target."""
    engine = Path(python) if python else Path(sys.executable)
    return {
        "hostname": platform.node(),
        "python": str(engine),
        "facts": gather(engine, os.environ, None),
        "reach": [reach(address, port) for address, port in targets],
    }
