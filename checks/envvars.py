"""VLLM_* and FLASHINFER_* variables that the installed vLLM / FlashInfer do not know (stale blog-post advice)."""

from __future__ import annotations

from checks.facts import Facts
from checks.result import CheckResult

# variables from earlier releases, with what replaced them
REPLACED = {
    "VLLM_USE_FLASHINFER_MOE_FP4": "--moe-backend (e.g. --moe-backend marlin)",
    "VLLM_USE_FLASHINFER_MOE_FP8": "--moe-backend",
    "VLLM_FLASHINFER_MOE_BACKEND": "--moe-backend flashinfer_cutlass / flashinfer_trtllm",
    "VLLM_ATTENTION_BACKEND": "--attention-backend",
    "VLLM_SLEEP_WHEN_IDLE": "nothing (removed)",
}


def check(facts: Facts) -> list[CheckResult]:
    env, surface = facts["env"], facts["vllm_surface"]
    known_vllm = set(surface.get("env_vars") or [])
    known_fi = set(facts["stack"].get("flashinfer_env_vars") or [])
    version = surface.get("version")
    set_vars = [k for k in env if k.startswith(("VLLM_", "FLASHINFER_"))]
    if not set_vars:
        return [CheckResult("env", "env", "pass", "no VLLM_* or FLASHINFER_* variables set")]
    if not known_vllm:
        return [
            CheckResult(
                "env",
                "env",
                "skip",
                f"{len(set_vars)} variable(s) set, but vLLM's envs.py registry "
                f"could not be read ({surface.get('error', 'vLLM not installed')})",
            )
        ]
    unknown = [
        k
        for k in set_vars
        if (k.startswith("VLLM_") and k not in known_vllm) or (k.startswith("FLASHINFER_") and k not in known_fi)
    ]
    if not unknown:
        return [
            CheckResult(
                "env", "env", "pass", f"{len(set_vars)} variable(s) set, all known to vLLM {version} or FlashInfer"
            )
        ]
    results = []
    for name in unknown:
        owner = f"vLLM {version}'s envs.py" if name.startswith("VLLM_") else "the installed FlashInfer"
        instead = f"; use {REPLACED[name]}" if name in REPLACED else ""
        results.append(
            CheckResult(
                f"env.{name}",
                "env",
                "warn",
                f"{name}={env[name]} is set, but {owner} does not read it: it has no effect",
                "only variables the installed stack reads",
                f"unset {name}{instead}",
            )
        )
    return results
