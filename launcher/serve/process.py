"""A vLLM OpenAI-compatible server as a child process group: start, wait until it serves, check that the server
answering is this one, watch its processes, stop cleanly.

HTTP: the simple JSON calls (readiness, the model list, serve's one smoke completion) use the standard
library's urllib, synchronously, from a plain loop; only bench's client, which streams hundreds of requests at
once, uses aiohttp (asyncio). One call here needs no event loop, and urllib adds no dependency to serve.
"""

from __future__ import annotations

import json
import os
import socket
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from subprocess import Popen
from typing import Any

import psutil

from checks.proc import spawn_group, stop_group
from checks.secrets import bearer
from launcher.errors import NemolaunchError
from launcher.serve.lifetime import Tether, tied_to_parent


def free_port() -> int:
    """A port on 127.0.0.1 that nothing holds now, for a server private to one run (bench --profile, ab's sides)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def get_json(url: str, timeout: float = 5.0, key: str | None = None) -> Any:
    headers = bearer(key)
    with urllib.request.urlopen(urllib.request.Request(url, headers=headers), timeout=timeout) as resp:
        return json.loads(resp.read() or b"null")


def last_lines(path: Path, n: int = 5) -> list[str]:
    """The last n non-empty lines of a log, read from its tail only."""
    with path.open("rb") as f:
        f.seek(0, 2)
        f.seek(max(0, f.tell() - 16384))
        lines = f.read().decode("utf-8", "replace").splitlines()
    return [ln for ln in lines if ln.strip() and not ln.startswith("# nemolaunch")][-n:]


def open_log(path: Path) -> int:
    """The log for appending, never through a symlink (O_NOFOLLOW), with the mode a plain open() gives."""
    path.parent.mkdir(parents=True, exist_ok=True)
    try:
        return os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_NOFOLLOW, 0o666)
    except OSError as e:
        from launcher.errors import BadInput

        link = " (it is a symlink: nemolaunch does not write through one)" if path.is_symlink() else ""
        raise BadInput(f"cannot write the log {path}: {e.strerror}{link}", "give another --log-file") from None


@dataclass
class Server:
    proc: Popen[bytes]
    url: str
    log_path: Path
    key: str | None = None
    started_at: float = field(default_factory=time.monotonic)
    family: dict[int, str] = field(default_factory=dict)  # pid -> name of vLLM's processes once it serves
    tether: Tether | None = None  # stops the group if nemolaunch dies without stopping it

    @classmethod
    def start(
        cls,
        argv: Sequence[str],
        env: Mapping[str, str],
        url: str,
        log_path: Path,
        header: str | None = None,
        key: str | None = None,
    ) -> Server:
        fd = open_log(log_path)
        with os.fdopen(fd, "ab") as log:
            if header:
                log.write(header.encode() + b"\n")
                log.flush()
            proc = spawn_group(argv, env, log, preexec=tied_to_parent())
        return cls(proc, url, log_path, key, tether=Tether.tie(proc.pid))

    def alive(self) -> bool:
        return self.proc.poll() is None

    def wait_ready(
        self,
        timeout_s: float,
        poll_s: float = 0.5,
        progress: Callable[[float], None] | None = None,
        progress_every_s: float = 30.0,
    ) -> list[str]:
        """Block until /health answers and /v1/models lists a model; returns the served model ids. The model
        list is asked for with the API key when vLLM was given one. `progress` hears the seconds waited, every
        `progress_every_s` (a start takes a minute on the CPU engine, several on a GPU)."""
        deadline = time.monotonic() + timeout_s
        next_progress = self.started_at + progress_every_s
        while time.monotonic() < deadline:
            if progress is not None and time.monotonic() >= next_progress:
                progress(time.monotonic() - self.started_at)
                next_progress += progress_every_s
            if not self.alive():
                tail = " | ".join(last_lines(self.log_path, 3)) or "(empty log)"
                raise NemolaunchError(
                    f"vLLM exited with code {self.proc.returncode} before serving: {tail}",
                    f"see the whole log in {self.log_path}",
                )
            try:
                with urllib.request.urlopen(f"{self.url}/health", timeout=2):
                    pass
                models = get_json(f"{self.url}/v1/models", key=self.key)
                ids = [m["id"] for m in models.get("data", [])]
                if ids:
                    return ids
            except urllib.error.HTTPError as e:
                if e.code == 401:
                    raise NemolaunchError(
                        "vLLM answered 401: it asks for an API key "
                        + ("and refused the one nemolaunch sent" if self.key else "that nemolaunch was not given"),
                        "give serve the key vLLM uses: --api-key-file FILE, or $VLLM_API_KEY",
                    ) from None
            except (urllib.error.URLError, ConnectionError, TimeoutError, json.JSONDecodeError):
                pass
            time.sleep(poll_s)
        raise NemolaunchError(f"vLLM did not serve within {timeout_s:.0f} s", f"see {self.log_path}")

    def processes(self) -> dict[int, str]:
        """pid -> name of the server's process and all its descendants."""
        try:
            leader = psutil.Process(self.proc.pid)
            members = [leader, *leader.children(recursive=True)]
        except psutil.NoSuchProcess:
            return {}
        out = {}
        for p in members:
            try:
                out[p.pid] = p.name()
            except psutil.Error:
                continue
        return out

    @staticmethod
    def listeners(port: int) -> list[tuple[str, int | None]]:
        """(address, pid) of every TCP socket listening on `port` (pid None where the kernel does not say)."""
        try:
            conns = psutil.net_connections(kind="tcp")
        except psutil.AccessDenied:
            return []
        found = []
        for c in conns:
            if c.status == psutil.CONN_LISTEN and c.laddr and c.laddr[1] == port:
                found.append((str(c.laddr[0]), c.pid))
        return found

    def check_ours(self, port: int) -> list[str]:
        """The addresses this server's processes listen on; an error when another process answers the port
        and none of ours listens there (a second serve must never report someone else's server)."""
        self.family = self.processes()
        found = self.listeners(port)
        ours = [f"{ip}:{port}" for ip, pid in found if pid in self.family]
        others = [pid for _, pid in found if pid is not None and pid not in self.family]
        if not ours and others:
            try:
                name = psutil.Process(others[0]).name()
            except psutil.Error:
                name = "?"
            raise NemolaunchError(
                f"port {port} is answered by another process (pid {others[0]}, {name}), not the vLLM "
                "nemolaunch started",
                "stop that server or pick another --port",
            )
        return ours

    def dead_child(self) -> tuple[int, str] | None:
        """(pid, name) of a process of the serving family that has gone while the server still runs."""
        for pid, name in self.family.items():
            if pid == self.proc.pid:
                continue
            try:
                gone = psutil.Process(pid).status() == psutil.STATUS_ZOMBIE
            except psutil.NoSuchProcess:
                gone = True
            if gone:
                return pid, name
        return None

    def stop(self, grace_s: float = 15.0) -> int | None:
        code = stop_group(self.proc, grace_s)
        if self.tether is not None:
            self.tether.release()
        return code
