"""`nemolaunch serve`: launch the planned vLLM (launcher/serve/plan.py), follow and diagnose its log
(launcher/serve/watch.py), serve until Ctrl-C, SIGTERM, SIGHUP or its death, and stop it cleanly."""

from __future__ import annotations

import contextlib
import json
import os
import socket
import threading
import time
import urllib.request
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from checks.secrets import bearer
from launcher.errors import BadInput, ExitCode, NemolaunchError
from launcher.output import create_exclusive
from launcher.serve import fallbacks
from launcher.serve.lifetime import interrupts
from launcher.serve.plan import Say, ServePlan, check_model, make_plan, warnings
from launcher.serve.process import Server, last_lines
from launcher.serve.watch import LOG_HEADER, LogWatch, follow

__all__ = ["Running", "ServePlan", "check_model", "launched", "make_plan", "run", "warnings"]


def default_log_path(now: float | None = None) -> Path:
    """nemolaunch-logs/serve-<time>.log, created here exclusively (never through a symlink; a unique name when
    one exists)."""
    return create_exclusive(Path("nemolaunch-logs") / time.strftime("serve-%Y%m%d-%H%M%S.log", time.localtime(now)))


def check_can_launch(plan: ServePlan, model: str) -> None:
    """What would cost a whole vLLM start to find out: the model folder and the port."""
    check_model(model)
    family = socket.AF_INET6 if ":" in plan.host else socket.AF_INET
    with socket.socket(family) as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # as uvicorn does: TIME_WAIT is no conflict
        try:
            s.bind((plan.host, plan.port))
        except OSError as e:
            holder = Server.listeners(plan.port)
            who = f" (held by pid {holder[0][1]})" if holder and holder[0][1] else ""
            raise BadInput(
                f"cannot bind {plan.host or '(every interface)'}:{plan.port}: {e.strerror}{who}",
                "pick another --port or stop what holds it",
            ) from None


def smoke_completion(url: str, model: str, key: str | None = None, max_tokens: int = 16) -> tuple[int, float]:
    """One streamed completion; returns (completion tokens, seconds)."""
    body = {
        "model": model,
        "prompt": "def main():",
        "max_tokens": max_tokens,
        "stream": True,
        "ignore_eos": True,
        "stream_options": {"include_usage": True},
    }
    headers = {"Content-Type": "application/json", **bearer(key)}
    req = urllib.request.Request(f"{url}/v1/completions", data=json.dumps(body).encode(), headers=headers)
    from launcher.serve.sse import DONE, SSEReader

    start, tokens, reader = time.monotonic(), 0, SSEReader()
    with urllib.request.urlopen(req, timeout=120) as resp:
        for raw in resp:
            for data in reader.feed(raw):
                if data != DONE:
                    usage = json.loads(data).get("usage")
                    tokens = usage["completion_tokens"] if usage else tokens
    return tokens, time.monotonic() - start


@dataclass
class Running:
    server: Server
    watch: LogWatch
    models: list[str]
    startup_s: float
    listening: list[str]  # the addresses vLLM's processes listen on, as the kernel reports them
    log: Path
    drain: Callable[[], None]  # stop following the log once it is read to its end


@contextmanager
def launched(
    plan: ServePlan,
    model: str,
    log_path: Path | None,
    say: Say,
    echo_log: Say | None,
    ready_timeout_s: float = 900.0,
    gpu_family: str | None = None,
) -> Iterator[Running]:
    """vLLM started, its log followed and diagnosed live, serving when this yields; on exit (normal, error,
    Ctrl-C or SIGTERM) the whole process group is stopped. If vLLM dies before serving, the error names the
    root cause the knowledge base found. "Serving" is said only once the answering server is this vLLM. Without a
    log path the log goes to nemolaunch-logs/, created only once the port and model are known good."""
    check_can_launch(plan, model)
    log_path = log_path or default_log_path()
    env = {**os.environ, **plan.env}
    stop = threading.Event()
    watch = LogWatch(say, echo_log, gpu_family)

    def drain() -> None:
        stop.set()
        watcher.join(timeout=5)

    with interrupts():
        # a header without the command: the log is diagnosed line by line, and argv would match the rules
        header = (
            f"{LOG_HEADER} profile {plan.profile.name} ({plan.profile.path}), vLLM {plan.rendered.vllm_version}"
            f", {plan.interpreter.path}, {time.strftime('%Y-%m-%dT%H:%M:%S%z')}"
        )
        server = Server.start(plan.argv, env, plan.url, log_path, header, plan.key.value if plan.key else None)
        watcher = threading.Thread(target=follow, args=(log_path, stop, watch.line, say), daemon=True)
        watcher.start()
        # the engine named once, here, unless this command line gave it (--python)
        engine = f" with {plan.interpreter.describe()}" if plan.interpreter.source != "--python" else ""
        say(f"starting vLLM {plan.rendered.vllm_version}{engine}, profile {plan.profile.name} (log {log_path})")

        def waiting(seconds: float) -> None:
            last = last_lines(log_path, 1)
            say(f"still starting after {seconds:.0f} s" + (f"; the log's last line: {last[0][:160]}" if last else ""))

        try:
            try:
                models = server.wait_ready(ready_timeout_s, progress=waiting)
                listening = server.check_ours(plan.port)
            except NemolaunchError as e:
                drain()
                cause = watch.root_cause()
                raise NemolaunchError(f"{e.message}; diagnosis: {cause}" if cause else e.message, e.fix) from None
            startup = time.monotonic() - server.started_at
            where = f" (vLLM listens on {', '.join(listening)})" if listening else ""
            say(
                f"serving {plan.url}{where} (model {models[0]}) after {startup:.0f} s, "
                f"profile {plan.profile.name}, log {log_path}"
            )
            for found in fallbacks.in_log(log_path, plan.profile):
                say(fallbacks.line_of(found))
            yield Running(server, watch, models, startup, listening, log_path, drain)
        finally:
            watch.echo_log = None  # vLLM's teardown is in the log; the terminal gets the one line below
            code = server.stop()
            drain()
            with contextlib.suppress(OSError):  # a closed terminal (SIGHUP) must not stop the clean-up of others
                say(f"stopped vLLM (exit {code}); log kept in {log_path}")


def run(
    plan: ServePlan,
    model: str,
    log_path: Path | None,
    say: Say,
    echo_log: Say | None,
    smoke: bool = False,
    ready_timeout_s: float = 900.0,
    gpu_family: str | None = None,
) -> int:
    """Launch, wait until it serves, then serve until Ctrl-C/SIGTERM or its death (or the death of one of its
    processes: an engine core killed by the OOM killer leaves an API server that only answers errors)."""
    if plan.rendered.headless:
        return _run_headless(plan, model, log_path, say, echo_log, gpu_family)
    with launched(plan, model, log_path, say, echo_log, ready_timeout_s, gpu_family) as running:
        if smoke:
            tokens, seconds = smoke_completion(plan.url, running.models[0], plan.key.value if plan.key else None)
            say(f"smoke test: one streamed completion of {tokens} tokens in {seconds:.2f} s")
            return ExitCode.OK
        dead = None
        while running.server.alive() and dead is None:
            dead = running.server.dead_child()
            time.sleep(0.5)
        running.drain()  # the follower reads the log to its end, then stops: the diagnosis sees the last lines
        cause = running.watch.root_cause()
        if dead is not None:
            pid, name = dead
            raise NemolaunchError(
                f"vLLM's {name} (pid {pid}) died while serving" + (f": {cause}" if cause else ""),
                "when the log says nothing, the kernel killed it: the OOM killer does this (check dmesg); "
                f"the whole log is in {running.log}",
            )
        reason = cause or " | ".join(last_lines(running.log, 3))
        raise NemolaunchError(
            f"vLLM exited with code {running.server.proc.returncode}: {reason}", f"the whole log is in {running.log}"
        )


def _run_headless(
    plan: ServePlan, model: str, log_path: Path | None, say: Say, echo_log: Say | None, gpu_family: str | None
) -> int:
    """A headless node serves no API: run its engine workers, following the log, until they exit or Ctrl-C."""
    if not Path(model).expanduser().exists():
        raise BadInput(f"model path {model} does not exist", "every node needs the model at the same path")
    log_path = log_path or default_log_path()
    stop = threading.Event()
    watch = LogWatch(say, echo_log, gpu_family)
    with interrupts():
        server = Server.start(plan.argv, {**os.environ, **plan.rendered.env}, plan.url, log_path)
        watcher = threading.Thread(target=follow, args=(log_path, stop, watch.line), daemon=True)
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
