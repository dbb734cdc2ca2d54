"""The configurations an ab run compares: a profile plus per-side overrides of its [vllm] settings, parsed from
the command line, resolved into the profile each server is given, and the server arrangement (co-resident or
restarted) that suits them."""

from __future__ import annotations

import hashlib
import json
import re
import tomllib
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Literal

from launcher.errors import BadInput
from launcher.profiles.profile import ServingProfile, load_profile, parse_profile

if TYPE_CHECKING:
    from launcher.ab.config import AbConfig


@dataclass(frozen=True)
class Side:
    """One configuration: a profile plus per-side overrides of its [vllm] settings."""

    name: str
    profile_ref: str
    overrides: dict[str, Any] = field(default_factory=dict)

    def label(self) -> str:
        sets = ",".join(f"{k}={v}" for k, v in self.overrides.items())
        return f"{self.profile_ref}" + (f" + {sets}" if sets else "")


def parse_value(text: str) -> Any:
    """A --set value as TOML reads it (8, 0.5, true, "fp8", ["A", "B"]); a bare word is a string."""
    try:
        return tomllib.loads(f"v = {text}")["v"]
    except tomllib.TOMLDecodeError:
        return text


def parse_sets(items: tuple[str, ...] | list[str], option: str) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for item in items:
        key, sep, value = item.partition("=")
        if not sep or not key.strip():
            raise BadInput(f"{option} {item!r} is not KEY=VALUE", f"e.g. {option} max_num_seqs=8")
        out[key.strip()] = parse_value(value.strip())
    return out


def parse_config(text: str) -> Side:
    """--config NAME=PROFILE[,KEY=VALUE...]; NAME becomes folder and file names: letters, digits, '.', '-', '_'."""
    name, sep, rest = text.partition("=")
    if not sep or not name or not rest:
        raise BadInput(f"--config {text!r} is not NAME=PROFILE[,KEY=VALUE...]", "e.g. --config slow=cpu,max_num_seqs=1")
    if not re.fullmatch(r"[A-Za-z0-9][A-Za-z0-9._-]*", name.strip()):
        raise BadInput(f"--config name {name.strip()!r} is not a plain name", "use letters, digits, '.', '-' and '_'")
    profile, *sets = _split_top_level(rest)
    return Side(name.strip(), profile.strip(), parse_sets(sets, "--config"))


def _split_top_level(text: str) -> list[str]:
    """`text` split at the commas outside brackets, braces and quotes, so a setting's value may be a list:
    `torch=sm90,disabled_kernels=["A","B"],max_num_seqs=8` gives three parts."""
    parts, depth, quote, start = [], 0, "", 0
    for i, ch in enumerate(text):
        if quote:
            quote = "" if ch == quote else quote
        elif ch in "\"'":
            quote = ch
        elif ch in "[{":
            depth += 1
        elif ch in "]}":
            depth = max(0, depth - 1)
        elif ch == "," and depth == 0:
            parts.append(text[start:i])
            start = i + 1
    return [*parts, text[start:]]


def sides_from_options(
    a_ref: str | None,
    b_ref: str | None,
    set_a: tuple[str, ...],
    set_b: tuple[str, ...],
    configs: tuple[str, ...],
) -> tuple[Side, ...]:
    """--a/--b (with --set-a/--set-b) and --config, in that order; the first is the baseline."""
    if bool(a_ref) != bool(b_ref):
        raise BadInput("give both --a and --b (or only --config)", "e.g. --a cpu --b cpu --set-b max_num_seqs=1")
    if (set_a or set_b) and not a_ref:
        raise BadInput("--set-a/--set-b need --a and --b", "or put the settings in --config NAME=PROFILE,KEY=VALUE")
    sides: list[Side] = []
    if a_ref and b_ref:
        sides += [Side("A", a_ref, parse_sets(set_a, "--set-a")), Side("B", b_ref, parse_sets(set_b, "--set-b"))]
    sides += [parse_config(c) for c in configs]
    return tuple(sides)


def side_profile(side: Side, extra: dict[str, Any] | None = None, env: dict[str, str] | None = None) -> ServingProfile:
    """The side's profile with its overrides (and `extra` settings and `env` variables ab adds), validated as a
    profile file would be (unknown or mistyped keys are refused with the profile's own message)."""
    import tomli_w

    base = load_profile(side.profile_ref)
    settings = {**base.settings, **side.overrides, **(extra or {})}
    doc: dict[str, Any] = {
        "schema": 1,
        "description": base.description,
        "vllm": settings,
        "env": {**base.env, **(env or {})},
    }
    if base.python:
        doc["python"] = base.python
    doc["why"] = {k: v for k, v in base.why.items() if k in settings}
    if base.tuned:
        doc["tuned"] = base.tuned
    return parse_profile(tomli_w.dumps(doc), base.path, base.name)


def is_cpu_engine(profile: ServingProfile) -> bool:
    """The CPU engine sizes its KV cache with VLLM_CPU_KVCACHE_SPACE, per process: nothing to share."""
    return "VLLM_CPU_KVCACHE_SPACE" in profile.env


def choose_mode(mode: str, sides: tuple[Side, ...]) -> tuple[Literal["co-resident", "restart"], str]:
    if mode == "co-resident":
        return "co-resident", "asked for"
    if mode == "restart":
        return "restart", "asked for"
    sets_memory = [s.name for s in sides if "gpu_memory_utilization" in s.overrides]
    if sets_memory:
        return "restart", (
            f"{', '.join(sets_memory)} set gpu_memory_utilization: memory is what is compared, so each server gets "
            "the device alone"
        )
    return "co-resident", (
        "default: servers started once and benched alternately (on one H200 two servers at 0.42 of memory each fit "
        "and an A/A agreed within 0.1-3% after the first round)"
    )


def dummy_weights(argv: list[str]) -> bool:
    joined = " ".join(argv)
    return "--load-format dummy" in joined or "--load-format=dummy" in joined


def run_digest(cfg: AbConfig) -> str:
    """What makes two ab runs the same run (a rerun with the same --out continues it): the options, and what each
    side resolves to now, the profile's contents and the engine's interpreter, so rounds of an edited profile or of
    another engine are never averaged with the old ones."""
    from launcher.engine import resolve_python

    resolved = []
    for side in cfg.sides:
        profile = side_profile(side)
        python = resolve_python(cfg.python, profile.python).path
        resolved.append({"settings": profile.settings, "env": profile.env, "python": str(python)})
    text = cfg.digest() + json.dumps(resolved, sort_keys=True, default=str)
    return hashlib.sha256(text.encode()).hexdigest()[:12]
