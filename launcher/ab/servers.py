"""The servers of an ab run: each side's vLLM started through serve (its own port on 127.0.0.1, its own log),
kept up (co-resident) or one at a time (restart)."""

from __future__ import annotations

import contextlib
import socket
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from launcher.ab.sides import Side, is_cpu_engine, side_profile
from launcher.profiles.profile import ServingProfile

Say = Callable[[str], None]
# two servers at 0.42 each fit on one H200 (measured 2026-12-01): the total kept for co-resident servers
CO_RESIDENT_MEMORY = 0.84


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@dataclass
class Up:
    url: str
    served_model: str
    startup_s: float
    info: dict[str, Any]  # bench's `served` provenance
    stack: contextlib.ExitStack
    api_key: str | None = None  # the key vLLM was given (serve resolved it): bench's passes send it


class ServerPool:
    """The servers of an ab run. Co-resident: each started once and kept up until close(); restart: one at a time
    (starting one stops the others). A start that fails raises NemolaunchError carrying the log's diagnosis."""

    def __init__(
        self,
        model: str,
        python: Path | None,
        mode: Literal["co-resident", "restart"],
        logs: Path,
        say: Say,
        shares: int,
        ready_timeout_s: float = 900.0,
    ) -> None:
        self.model, self.python, self.mode, self.logs, self.say = model, python, mode, logs, say
        self.shares = max(1, shares)
        self.ready_timeout_s = ready_timeout_s
        self.up: dict[str, Up] = {}
        self.starts: dict[str, int] = {}

    def profile_for(self, side: Side) -> ServingProfile:
        profile = side_profile(side)
        if self.mode == "co-resident" and not is_cpu_engine(profile) and "gpu_memory_utilization" not in side.overrides:
            share = round(CO_RESIDENT_MEMORY / self.shares, 3)
            profile = side_profile(side, {"gpu_memory_utilization": share})
        return profile

    def ensure(self, side: Side) -> tuple[Up, bool]:
        """The side's server, started if it is not up; True when it was started now."""
        if side.name in self.up:
            return self.up[side.name], False
        if self.mode == "restart":
            for name in list(self.up):
                self.release(name)
        from launcher.serve import run as serve

        plan = serve.make_plan(self.profile_for(side), self.model, self.python, "127.0.0.1", free_port())
        self.starts[side.name] = self.starts.get(side.name, 0) + 1
        log = self.logs / f"{side.name}-{self.starts[side.name]}.log"
        stack = contextlib.ExitStack()
        try:
            running = stack.enter_context(
                serve.launched(plan, self.model, log, self.say, echo_log=None, ready_timeout_s=self.ready_timeout_s)
            )
        except BaseException:
            stack.close()
            raise
        info = {**plan.provenance(), "startup_s": round(running.startup_s, 1), "log": str(log)}
        up = Up(plan.url, running.models[0], running.startup_s, info, stack, plan.key.value if plan.key else None)
        self.up[side.name] = up
        return up, True

    def release(self, name: str) -> None:
        up = self.up.pop(name, None)
        if up is not None:
            up.stack.close()

    def close(self) -> None:
        for name in list(self.up):
            self.release(name)
