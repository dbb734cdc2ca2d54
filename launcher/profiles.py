"""Serving profiles: TOML files that state intent (graphs on, 0.85 memory, Marlin MoE), with the evidence.

A profile never holds a vLLM command line; `launcher.render` turns it into one for a given vLLM version.

    schema = 1
    description = "..."
    python = "~/venvs/vllm/bin/python"     # optional: the engine's interpreter

    [vllm]                                   # the settings below, all optional
    gpu_memory_utilization = 0.85

    [env]                                    # extra environment, passed as is
    [why]                                    # setting -> the evidence behind it
"""

from __future__ import annotations

import re
import tomllib
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
    "max_model_len": (int, "context length"),
    "tensor_parallel_size": (int, "GPUs per replica"),
    "async_scheduling": (bool, "overlap scheduling with execution"),
    "chunked_prefill": (bool, "split long prefills into chunks"),
    "trust_remote_code": (bool, "run the model repository's own code"),
    "sleep_when_idle": (bool, "let idle workers sleep instead of spinning (older vLLM only)"),
    "extra_args": (list, "vLLM flags passed as they are, after the rendered ones"),
}
TOP_LEVEL = {"schema": int, "description": str, "python": str, "vllm": dict, "env": dict, "why": dict}


@dataclass(frozen=True)
class ServingProfile:
    name: str
    path: Path
    description: str = ""
    python: str | None = None
    settings: dict[str, Any] = field(default_factory=dict)
    env: dict[str, str] = field(default_factory=dict)
    why: dict[str, str] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "path": str(self.path),
            "description": self.description,
            "python": self.python,
            "vllm": self.settings,
            "env": self.env,
            "why": self.why,
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
    gmu = settings.get("gpu_memory_utilization")
    if gmu is not None and not 0 < gmu <= 1:
        raise fail(f"[vllm].gpu_memory_utilization must be in (0, 1], not {gmu}", "gpu_memory_utilization", "vllm")
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
