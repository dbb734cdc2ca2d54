"""Serving profiles: TOML files that state intent (graphs on, 0.85 memory, Marlin MoE), with the evidence.

A profile never holds a vLLM command line; `launcher.profiles.flags` turns it into one for a given vLLM version.

    schema = 1
    description = "..."
    python = "~/venvs/vllm/bin/python"     # optional: the engine's interpreter

    [vllm]                                   # the settings below, all optional
    gpu_memory_utilization = 0.85

    [env]                                    # extra environment, passed as is
    [why]                                    # setting -> the evidence behind it

    [placement]                              # optional: the nodes of a multi-node launch
    nodes = ["10.0.0.1", "10.0.0.2"]         # each node's address (its VLLM_HOST_IP), the head first
    port = 29500                             # the head's port: torch.distributed (mp) or DP RPC
    ray_port = 6379                          # the Ray head's port (executor ray)
"""

from __future__ import annotations

import re
import tomllib
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from launcher.errors import BadInput
from launcher.paths import data_dir

SCHEMA_VERSION = 1

# setting -> (type, what it means). bool is checked before int: in Python True is an int.
SETTINGS: dict[str, tuple[type, str]] = {
    "cuda_graphs": (bool, "capture CUDA graphs (false means --enforce-eager)"),
    "gpu_memory_utilization": (float, "fraction of GPU memory for weights and KV cache"),
    "kv_cache_dtype": (str, "KV cache dtype: auto, fp8, ..."),
    "attention_backend": (str, "attention backend: TRITON_ATTN, FLASH_ATTN, FLASHINFER, ..."),
    "moe_backend": (str, "MoE kernel backend: marlin, cutlass, flashinfer_cutlass, triton, ..."),
    "disabled_kernels": (list, "linear kernel classes vLLM must not select"),
    "max_num_seqs": (int, "most sequences in one batch"),
    "max_num_batched_tokens": (int, "most tokens in one scheduler step (prefill chunk budget)"),
    "max_model_len": (int, "context length"),
    "tensor_parallel_size": (int, "GPUs per pipeline stage (attention heads are split across them)"),
    "pipeline_parallel_size": (int, "pipeline stages (layers are split across them; usually one per node)"),
    "data_parallel_size": (int, "replicas, each of tensor x pipeline GPUs (max_num_seqs is per replica)"),
    "data_parallel_size_local": (int, "data-parallel replicas on each node (multi-node data parallelism)"),
    "data_parallel_backend": (str, "how data-parallel ranks are started: mp (one launch per node) or ray"),
    "distributed_executor_backend": (str, "the workers of one replica: mp (one host, or --nnodes) or ray"),
    "enable_expert_parallel": (bool, "split MoE experts across the data x tensor parallel GPUs"),
    "async_scheduling": (bool, "overlap scheduling with execution"),
    "chunked_prefill": (bool, "split long prefills into chunks"),
    "trust_remote_code": (bool, "run the model repository's own code"),
    "sleep_when_idle": (bool, "let idle workers sleep instead of spinning (older vLLM only)"),
    "extra_args": (list, "vLLM flags passed as they are, after the rendered ones"),
}
TOP_LEVEL = {
    "schema": int,
    "description": str,
    "python": str,
    "vllm": dict,
    "env": dict,
    "why": dict,
    "placement": dict,
    "tuned": dict,  # written by `nemolaunch tune`: the stack and workload it was tuned on (see launcher/tunestack.py)
}
PARALLEL_SIZES = ("tensor_parallel_size", "pipeline_parallel_size", "data_parallel_size", "data_parallel_size_local")
BACKENDS = {"distributed_executor_backend": ("mp", "ray"), "data_parallel_backend": ("mp", "ray")}
# [placement] key -> (type, what it means)
PLACEMENT: dict[str, tuple[type, str]] = {
    "nodes": (list, "each node's address, the head first; a node's address becomes its VLLM_HOST_IP"),
    "port": (int, "the head's port for torch.distributed (--master-port) or data-parallel RPC"),
    "ray_port": (int, "the Ray head's GCS port (distributed_executor_backend = ray)"),
}


@dataclass(frozen=True)
class Placement:
    """Where a multi-node launch runs: the nodes (head first) and the head's ports."""

    nodes: tuple[str, ...]
    port: int = 29500
    ray_port: int = 6379

    @property
    def head(self) -> str:
        return self.nodes[0]


# flags nemolaunch sets itself: a profile's extra_args may not override them (it would serve another model, or
# bind an address nemolaunch does not know and so cannot print, check or warn about)
OWNED_FLAGS = ("--host", "--port", "--model", "--uds")
POSITIVE_INTS = ("max_num_seqs", "max_model_len")  # the parallel sizes: PARALLEL_SIZES below
# the one wording of what eager mode costs (serve's warning, profile write's why, bench's misconfiguration warning,
# tune's note; the knowledge base says "several times slower" and points at ab)
EAGER_COST = "the seed measured 27 instead of 97 tok/s at concurrency 1 without CUDA graphs (3.6x slower)"


@dataclass(frozen=True)
class ServingProfile:
    name: str
    path: Path
    description: str = ""
    python: str | None = None
    settings: dict[str, Any] = field(default_factory=dict)
    env: dict[str, str] = field(default_factory=dict)
    why: dict[str, str] = field(default_factory=dict)
    placement: Placement | None = None
    tuned: dict[str, Any] = field(default_factory=dict)

    def parallel(self, setting: str) -> int:
        """A parallel size, 1 when the profile leaves it out."""
        return int(self.settings.get(setting, 1))

    def to_dict(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "path": str(self.path),
            "description": self.description,
            "python": self.python,
            "vllm": self.settings,
            "env": self.env,
            "why": self.why,
            "placement": None
            if self.placement is None
            else {
                "nodes": list(self.placement.nodes),
                "port": self.placement.port,
                "ray_port": self.placement.ray_port,
            },
            "tuned": self.tuned,
        }


def _line_of(text: str, key: str, section: str | None) -> int | None:
    """The line where `key` is assigned (inside [section] when given); tomllib does not keep positions."""
    current: str | None = None
    for number, line in enumerate(text.splitlines(), 1):
        header = re.match(r"\s*\[([^\]]+)\]", line)
        if header:
            current = header.group(1).strip()
        elif current == section and re.match(rf"\s*\"?{re.escape(key)}\"?\s*=", line):
            return number
    return None


def _type_name(t: type) -> str:
    return {bool: "true/false", int: "an integer", float: "a number", str: "a string", list: "a list", dict: "a table"}[
        t
    ]


def _fits(value: object, expected: type) -> bool:
    if expected is bool or isinstance(value, bool):
        return isinstance(value, bool) and expected is bool
    if expected is float:
        return isinstance(value, int | float)
    return isinstance(value, expected)


def parse_profile(text: str, path: Path, name: str | None = None) -> ServingProfile:
    def fail(message: str, key: str | None = None, section: str | None = None) -> BadInput:
        line = _line_of(text, key, section) if key else None
        where = f"{path}:{line}" if line else str(path)
        return BadInput(f"{where}: {message}", "fix the profile (nemolaunch profile show cpu prints an example)")

    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as e:
        raise BadInput(f"{path}: not valid TOML: {e}", "fix the syntax at that line") from None
    for key, value in data.items():
        if key not in TOP_LEVEL:
            raise fail(f"unknown key {key!r} (known: {', '.join(TOP_LEVEL)})", key)
        if not _fits(value, TOP_LEVEL[key]):
            raise fail(f"{key!r} must be {_type_name(TOP_LEVEL[key])}, not {value!r}", key)
    if data.get("schema") != SCHEMA_VERSION:
        raise fail(f"schema must be {SCHEMA_VERSION} (found {data.get('schema')!r})", "schema")
    settings: dict[str, Any] = data.get("vllm", {})
    for key, value in settings.items():
        if key not in SETTINGS:
            raise fail(f"unknown setting [vllm].{key} (known: {', '.join(SETTINGS)})", key, "vllm")
        expected = SETTINGS[key][0]
        if not _fits(value, expected):
            raise fail(f"[vllm].{key} must be {_type_name(expected)}, not {value!r}", key, "vllm")
        if expected is list and not all(isinstance(v, str) for v in value):
            raise fail(f"[vllm].{key} must be a list of strings", key, "vllm")
    for key in POSITIVE_INTS:
        if key in settings and settings[key] < 1:
            raise fail(f"[vllm].{key} must be a positive integer, not {settings[key]}", key, "vllm")
    for arg in settings.get("extra_args", []):
        if arg.split("=", 1)[0] in OWNED_FLAGS:
            raise BadInput(
                f"{path}: [vllm].extra_args sets {arg.split('=', 1)[0]}, which nemolaunch owns",
                f"remove it from the profile; give it to nemolaunch serve as {arg.split('=', 1)[0]}",
            )
    gmu = settings.get("gpu_memory_utilization")
    if gmu is not None and not 0 < gmu <= 1:
        raise fail(f"[vllm].gpu_memory_utilization must be in (0, 1], not {gmu}", "gpu_memory_utilization", "vllm")
    for key in PARALLEL_SIZES:
        if key in settings and settings[key] < 1:
            raise fail(f"[vllm].{key} must be 1 or more, not {settings[key]}", key, "vllm")
    for key, allowed in BACKENDS.items():
        if key in settings and settings[key] not in allowed:
            raise fail(f"[vllm].{key} must be one of {', '.join(allowed)}, not {settings[key]!r}", key, "vllm")
    dp, dp_local = settings.get("data_parallel_size", 1), settings.get("data_parallel_size_local")
    if dp_local is not None and dp % dp_local:
        raise fail(
            f"[vllm].data_parallel_size_local ({dp_local}) must divide data_parallel_size ({dp})",
            "data_parallel_size_local",
            "vllm",
        )
    placement = _placement(data.get("placement"), fail)
    if placement is not None and dp > 1 and dp_local is None:
        raise fail(
            "a multi-node data-parallel profile needs [vllm].data_parallel_size_local (replicas per node)",
            "data_parallel_size",
            "vllm",
        )
    if placement is not None and dp_local is not None and dp_local * len(placement.nodes) != dp:
        raise fail(
            f"data_parallel_size_local {dp_local} x {len(placement.nodes)} nodes is not data_parallel_size {dp}",
            "data_parallel_size_local",
            "vllm",
        )
    for table in ("env", "why"):
        for key, value in data.get(table, {}).items():
            if not isinstance(value, str):
                raise fail(f"[{table}].{key} must be a string, not {value!r}", key, table)
    for key in data.get("why", {}):
        if key not in SETTINGS:
            raise fail(f"[why].{key} explains a setting that does not exist", key, "why")
    return ServingProfile(
        name=name or path.stem,
        path=path,
        description=data.get("description", ""),
        python=data.get("python"),
        settings=settings,
        env=data.get("env", {}),
        why=data.get("why", {}),
        placement=placement,
        tuned=data.get("tuned", {}),
    )


def _placement(table: dict[str, Any] | None, fail: Callable[..., BadInput]) -> Placement | None:
    if table is None:
        return None
    for key, value in table.items():
        if key not in PLACEMENT:
            raise fail(f"unknown key [placement].{key} (known: {', '.join(PLACEMENT)})", key, "placement")
        if not _fits(value, PLACEMENT[key][0]):
            raise fail(f"[placement].{key} must be {_type_name(PLACEMENT[key][0])}, not {value!r}", key, "placement")
    nodes = table.get("nodes", [])
    if len(nodes) < 2 or not all(isinstance(n, str) and n for n in nodes):
        raise fail("[placement].nodes must list two or more node addresses, the head first", "nodes", "placement")
    if len(set(nodes)) != len(nodes):
        raise fail("[placement].nodes names a node twice", "nodes", "placement")
    for key in ("port", "ray_port"):
        if key in table and not 0 < table[key] < 65536:
            raise fail(f"[placement].{key} must be a port (1-65535), not {table[key]}", key, "placement")
    return Placement(tuple(nodes), table.get("port", 29500), table.get("ray_port", 6379))


_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]*")


def check_name(name: str) -> None:
    """A profile name is a file name: no folder separators, no `..`, nothing that writes outside its folder."""
    if not _NAME.fullmatch(name) or ".." in name or len(name) > 100:
        raise BadInput(
            f"profile name {name!r} is not a plain name",
            "use letters, digits, '.', '_' and '-' (no '/' or '..'); give --out for another folder",
        )


def profiles_dir() -> Path:
    return data_dir("profiles")


def list_profiles() -> list[ServingProfile]:
    return [load_profile(str(p)) for p in sorted(profiles_dir().glob("*.toml"))]


def load_profile(name_or_path: str) -> ServingProfile:
    """A shipped profile by name (`sm120`), or a TOML file by path."""
    path = Path(name_or_path).expanduser()
    if path.suffix != ".toml" and "/" not in name_or_path:
        path = profiles_dir() / f"{name_or_path}.toml"
        if not path.is_file():
            known = ", ".join(p.stem for p in sorted(profiles_dir().glob("*.toml")))
            raise BadInput(f"no profile named {name_or_path!r}", f"pick one of: {known}, or give a path")
    if not path.is_file():
        raise BadInput(f"profile file {path} does not exist", "give the path of a .toml profile")
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as e:
        raise BadInput(f"cannot read profile {path}: {e}") from None
    return parse_profile(text, path)
