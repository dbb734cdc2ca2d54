"""The stack a tuned profile was tuned on, and whether the installed one still matches it.

`tune` writes [tuned].stack into the profile (GPU, driver, CUDA, vLLM, FlashInfer, torch); `serve` and `doctor`
compare it with what is installed now and name the command that re-validates the profile.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from checks.child.dists import vllm_version
from launcher.profiles.profile import ServingProfile

STACK_KEYS = ("gpu", "driver", "cuda", "vllm", "flashinfer", "torch")


def current_stack(python: Path) -> dict[str, str]:
    """What serves here: the GPU and driver (NVML), and the engine's packages (read from metadata, no import)."""
    from checks.facts import nvml_facts, stack_facts

    nvml = nvml_facts()
    stack = stack_facts(python)
    packages: dict[str, str] = stack.get("packages") or {} if stack.get("ok") else {}
    gpus = nvml.get("gpus") or [] if nvml.get("ok") else []
    flashinfer = packages.get("flashinfer-python") or packages.get("flashinfer")
    found = {
        "gpu": str(gpus[0].get("name")) if gpus else "none (CPU engine)",
        "driver": str(nvml.get("driver") or "none"),
        "cuda": str(nvml.get("cuda_driver") or "none"),
        "vllm": vllm_version(packages) or "not installed",
        "flashinfer": flashinfer or "not installed",
        "torch": packages.get("torch") or "not installed",
    }
    return found


def stale(profile: ServingProfile, now: dict[str, str]) -> str | None:
    """One warning when the profile was tuned on another stack than `now`; None when it matches (or is untuned)."""
    was: dict[str, Any] = profile.tuned.get("stack") or {}
    if not was:
        return None
    changed = [f"{k} {was[k]} -> {now.get(k)}" for k in STACK_KEYS if k in was and str(was[k]) != str(now.get(k))]
    if not changed:
        return None
    again = profile.tuned.get("revalidate") or f"nemolaunch tune --base {profile.path} --model MODEL"
    return (
        f"profile {profile.name} was tuned on another stack ({'; '.join(changed)}): its measured choices may no "
        f"longer hold; re-validate with: {again}"
    )
