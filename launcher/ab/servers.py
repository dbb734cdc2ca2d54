"""The servers of an ab run: each side's vLLM started through serve (its own port on 127.0.0.1, its own log),
kept up (co-resident) or one at a time (restart).

What would fail every start (no engine, no model, a profile vLLM refuses, a prompt beyond the context) is found by
`preflight` (bench's, for every side) before any server starts and raised as it is: a usage error is never a
result. Only a server that was launched and did not come up makes its side infeasible (StartFailed, with the log's
diagnosis).

Each server lives in a thread of its own that holds it for its whole life: the kernel's PR_SET_PDEATHSIG (serve's
lifetime guard) follows the thread that started a process, so the thread lives exactly as long as its server.
Co-resident servers on the CPU engine start in parallel (each sizes its KV cache with VLLM_CPU_KVCACHE_SPACE). On a
GPU they start one after the other: vLLM sizes its KV cache from the memory it sees free while it profiles, so a
server starting beside another counts the other's allocations as its own (the H200, 2026-12-03, three Llama-3.1-8B
servers at 0.28 each started together: two failed "No available memory for the cache blocks").
"""

from __future__ import annotations

import json
import threading
import urllib.error
import urllib.request
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

from checks.secrets import bearer, redact_obj
from launcher.ab.sides import Side, is_cpu_engine, side_profile
from launcher.errors import ExitCode, NemolaunchError
from launcher.profiles.profile import ServingProfile
from launcher.serve.process import free_port

if TYPE_CHECKING:
    from launcher.bench.config import BenchConfig
    from launcher.serve.run import Running, ServePlan

Say = Callable[[str], None]
# two servers at 0.42 each fit on one H200 (measured 2026-12-01): the total kept for co-resident servers
CO_RESIDENT_MEMORY = 0.84
# vLLM's dev endpoints: ab resets the prefix cache before each pass (POST /reset_prefix_cache, vLLM 0.26 and 0.32
# register it only with this variable; vLLM's own `bench sweep` sets it the same way). The servers bind 127.0.0.1.
DEV_MODE = {"VLLM_SERVER_DEV_MODE": "1"}


class StartFailed(NemolaunchError):
    """A launched server that did not come up: its side is infeasible (the message carries the diagnosis)."""


@dataclass
class Up:
    url: str
    served_model: str
    startup_s: float
    info: dict[str, Any]  # bench's `served` provenance, secrets masked
    api_key: str | None = None  # the key vLLM was given (serve resolved it): bench's passes send it
    log: Path | None = None
    running: Running | None = field(default=None, repr=False)

    def alive(self) -> bool:
        """The server and every process of it still run (a killed engine core leaves an API server that only
        answers errors)."""
        if self.running is None:
            return True
        return self.running.server.alive() and self.running.server.dead_child() is None


def reset_prefix_cache(up: Up) -> str:
    """Empty the server's prefix cache before a pass, so every pass starts from the same cache state: "reset", or
    why not (vLLM answers 404 without VLLM_SERVER_DEV_MODE=1; a pool that did not start the server may lack it)."""
    request = urllib.request.Request(
        f"{up.url}/reset_prefix_cache", data=b"", method="POST", headers=bearer(up.api_key)
    )
    try:
        with urllib.request.urlopen(request, timeout=30) as resp:
            answer = json.loads(resp.read() or b"{}")
    except urllib.error.HTTPError as e:
        return f"not reset: HTTP {e.code}"
    except (OSError, ValueError) as e:
        return f"not reset: {type(e).__name__}"
    # vLLM 0.26/0.32 answer {"success": false} while blocks are still held (a request in flight): not reset
    return "reset" if not isinstance(answer, dict) or answer.get("success", True) else "not reset: blocks in use"


class _Owner(threading.Thread):
    """One server's life: started, handed over once it serves, stopped when released."""

    def __init__(self, plan: ServePlan, model: str, log: Path, say: Say, ready_timeout_s: float) -> None:
        super().__init__(name=f"server {log.stem}", daemon=True)
        self.plan, self.model, self.log, self.say, self.ready_timeout_s = plan, model, log, say, ready_timeout_s
        self.ready = threading.Event()
        self.done = threading.Event()
        self.result: Up | BaseException | None = None

    def run(self) -> None:
        from launcher.serve import run as serve

        plan = self.plan
        try:
            with serve.launched(plan, self.model, self.log, self.say, None, self.ready_timeout_s) as running:
                info = redact_obj({**plan.provenance(), "startup_s": round(running.startup_s, 1), "log": str(self.log)})
                key = plan.key.value if plan.key else None
                self.result = Up(plan.url, running.models[0], running.startup_s, info, key, self.log, running)
                self.ready.set()
                self.done.wait()
        except BaseException as e:  # handed to the thread that asked for the server
            self.result = e
        finally:
            self.ready.set()

    def stop(self) -> None:
        self.done.set()
        if self.result is not None and not isinstance(self.result, BaseException):
            self.join()  # a serving server: stopped cleanly (serve says so); a starting one dies with nemolaunch


class ServerPool:
    """The servers of an ab run. Co-resident: each started once and kept up until close(); restart: one at a time
    (starting one stops the others)."""

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
        self.owners: dict[str, _Owner] = {}
        self.up: dict[str, Up] = {}

    def profile_for(self, side: Side) -> ServingProfile:
        """The side's profile as its server gets it: its share of memory when co-resident, and vLLM's dev mode."""
        memory: dict[str, Any] = {}
        if self.mode == "co-resident" and not is_cpu_engine(side_profile(side)):
            memory = {"gpu_memory_utilization": round(CO_RESIDENT_MEMORY / self.shares, 3)}
        return side_profile(side, {**memory, **side.overrides}, DEV_MODE)

    def _plan(self, side: Side, port: int) -> ServePlan:
        from launcher.serve import run as serve

        return serve.make_plan(self.profile_for(side), self.model, self.python, "127.0.0.1", port)

    def preflight(self, sides: Iterable[Side], workload: BenchConfig) -> str | None:
        """bench's preflight for every side as its server would get it (model, engine, vLLM, the side's flags, the
        workload, its prompt plus output against the side's context). Raises its usage and environment errors.
        Returns the vLLM version the sides will run."""
        from launcher.bench.preflight import preflight

        version = None
        for side in sides:
            try:
                version = preflight(self.profile_for(side), self.model, self.python, workload).rendered.vllm_version
            except NemolaunchError as e:
                if side.overrides:  # the profile's name alone does not say which configuration it is
                    e.message = f"configuration {side.name} ({side.label()}): {e.message}"
                raise
        return version

    def pids(self) -> set[int]:
        """Every process of every server of this pool (they may use the GPU; anything else is foreign)."""
        return {pid for up in self.up.values() if up.running for pid in up.running.server.processes()}

    def _log(self, name: str) -> Path:
        """logs/NAME-N.log, N the first number not taken (a resumed run keeps the earlier starts' logs)."""
        n = 1
        while (self.logs / f"{name}-{n}.log").exists():
            n += 1
        return self.logs / f"{name}-{n}.log"

    def start(self, sides: list[Side]) -> dict[str, Up | StartFailed]:
        """The servers of `sides` not up yet (together on the CPU engine, one after the other on a GPU); each is up,
        or failed to start."""
        wanted = [s for s in sides if s.name not in self.up]
        if self.mode == "restart" and wanted:
            self.close()
            wanted = wanted[:1]
        owners = {}
        for side in wanted:
            owner = _Owner(self._plan(side, free_port()), self.model, self._log(side.name), self.say,
                           self.ready_timeout_s)  # fmt: skip
            self.owners[side.name] = owners[side.name] = owner
            owner.start()
            if not is_cpu_engine(side_profile(side)):
                owner.ready.wait()  # a GPU server measures free memory while it starts: one at a time
        got: dict[str, Up | StartFailed] = {}
        for name, owner in owners.items():
            owner.ready.wait()
            if isinstance(owner.result, Up):
                self.up[name] = got[name] = owner.result
                continue
            self.owners.pop(name)
            error = owner.result
            if isinstance(error, NemolaunchError) and error.code == ExitCode.PROBLEM:
                got[name] = StartFailed(error.message, error.fix)
            elif isinstance(error, BaseException):
                raise error
        return got

    def ensure(self, side: Side) -> tuple[Up, bool]:
        """The side's server, started if it is not up; True when it was started now. Raises StartFailed."""
        if side.name in self.up:
            return self.up[side.name], False
        got = self.start([side])[side.name]
        if isinstance(got, StartFailed):
            raise got
        return got, True

    def release(self, name: str) -> None:
        self.up.pop(name, None)
        owner = self.owners.pop(name, None)
        if owner is not None:
            owner.stop()

    def close(self) -> None:
        for name in list(self.owners):
            self.release(name)
