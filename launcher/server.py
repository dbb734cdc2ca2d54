"""A vLLM OpenAI-compatible server as a child process group: start, wait until it serves, stop cleanly."""

from __future__ import annotations

import json
import time
import urllib.error
import urllib.request
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from subprocess import Popen
from typing import Any

from checks.proc import spawn_group, stop_group
from launcher.errors import NemolaunchError


def get_json(url: str, timeout: float = 5.0) -> Any:
    with urllib.request.urlopen(url, timeout=timeout) as resp:
        return json.loads(resp.read() or b"null")


def last_lines(path: Path, n: int = 5) -> list[str]:
    """The last n non-empty lines of a log, read from its tail only."""
    with path.open("rb") as f:
        f.seek(0, 2)
        f.seek(max(0, f.tell() - 16384))
        lines = f.read().decode("utf-8", "replace").splitlines()
    return [ln for ln in lines if ln.strip()][-n:]


@dataclass
class Server:
    proc: Popen[bytes]
    url: str
    log_path: Path
    started_at: float = field(default_factory=time.monotonic)

    @classmethod
    def start(cls, argv: Sequence[str], env: Mapping[str, str], url: str, log_path: Path) -> Server:
        log_path.parent.mkdir(parents=True, exist_ok=True)
        with log_path.open("ab") as log:
            proc = spawn_group(argv, env, log)
        return cls(proc, url, log_path)

    def alive(self) -> bool:
        return self.proc.poll() is None

    def wait_ready(self, timeout_s: float, poll_s: float = 0.5) -> list[str]:
        """Block until /health answers and /v1/models lists a model; returns the served model ids."""
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if not self.alive():
                tail = " | ".join(last_lines(self.log_path, 3)) or "(empty log)"
                raise NemolaunchError(
                    f"vLLM exited with code {self.proc.returncode} before serving: {tail}",
                    f"see the whole log in {self.log_path}",
                )
            try:
                with urllib.request.urlopen(f"{self.url}/health", timeout=2):
                    pass
                models = get_json(f"{self.url}/v1/models")
                ids = [m["id"] for m in models.get("data", [])]
                if ids:
                    return ids
            except (urllib.error.URLError, ConnectionError, TimeoutError, json.JSONDecodeError):
                pass
            time.sleep(poll_s)
        raise NemolaunchError(f"vLLM did not serve within {timeout_s:.0f} s", f"see {self.log_path}")

    def stop(self, grace_s: float = 15.0) -> int | None:
        return stop_group(self.proc, grace_s)
