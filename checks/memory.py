"""Memory headroom for a named model: weights against GPU memory x utilization, and graph-capture room."""

from __future__ import annotations

from typing import Any

from checks.facts import Facts
from checks.result import CheckResult
from checks.seqmem import SequenceMemory

UTILIZATION = 0.9  # vLLM's default
# the seed (PT-TN-2026-006): the one measured fact behind every memory headroom nemolaunch suggests
SEED_CAPTURE = "the seed: 0.9 ran out of memory in graph capture on 96 GB, 0.85 fit"
CAPTURE_HEADROOM_GIB = 12.0  # seed: 9.6 GiB outside 0.9 of 96 GB ran out in graph capture; 14.4 at 0.85 fit


def check(facts: Facts) -> list[CheckResult]:
    model = facts.get("model")
    if model is None:
        return [CheckResult("memory", "memory", "skip", "no --model given")]
    if model.get("config_error"):
        return [
            CheckResult(
                "memory",
                "memory",
                "fail",
                model["config_error"],
                "the model's config.json as published",
                "give the model's folder with its config.json unedited",
            )
        ]
    if not model["config"] or not model["weight_files"]:
        return [
            CheckResult(
                "memory",
                "memory",
                "fail",
                f"{model['path']} has no config.json or no *.safetensors",
                "a model folder with config.json and safetensors weights",
                "give the model's folder",
            )
        ]
    weights = model["weight_bytes"] / 2**30
    gpus = facts["nvml"].get("gpus") if facts["nvml"].get("ok") else None
    if not gpus:
        return [CheckResult("memory", "memory", "skip", f"weights {weights:.1f} GiB; no GPU to compare with")]
    total = gpus[0]["memory_total_mib"] / 1024
    budget = total * UTILIZATION
    outside = total - budget
    observed = (
        f"weights {weights:.1f} GiB; GPU {total:.0f} GiB x {UTILIZATION} = {budget:.1f} GiB for weights and "
        f"KV cache, {budget - weights:.1f} GiB left for KV, {outside:.1f} GiB outside for graphs and workspace"
    )
    observed += _sequences(model.get("sequence_memory"), kv_budget_bytes(total, UTILIZATION, model["weight_bytes"]))
    if weights >= budget:
        return [
            CheckResult(
                "memory",
                "memory",
                "fail",
                observed,
                "weights well below the budget",
                "use more GPUs (--tensor-parallel-size), a smaller quantization, or another GPU",
            )
        ]
    if outside < CAPTURE_HEADROOM_GIB:
        util = round(max(0.5, 1 - CAPTURE_HEADROOM_GIB / total), 2)
        return [
            CheckResult(
                "memory",
                "memory",
                "warn",
                observed,
                f">= {CAPTURE_HEADROOM_GIB:.0f} GiB outside the budget for CUDA-graph capture",
                f"--gpu-memory-utilization {util} ({SEED_CAPTURE})",
            )
        ]
    return [CheckResult("memory", "memory", "pass", observed)]


def kv_budget_bytes(total_gib: float, utilization: float, weight_bytes: int) -> float:
    """What vLLM's budget leaves beside the weights for KV cache and (a hybrid's) Mamba state, in bytes: GPU memory
    x utilization - weights (activations and graphs, a few GiB, are not counted)."""
    return total_gib * utilization * 2**30 - weight_bytes


def _sequences(recorded: dict[str, Any] | None, free_bytes: float) -> str:
    """A hybrid model's concurrency bound: each sequence holds a fixed Mamba state beside its KV per token."""
    if not recorded or not recorded.get("mamba_layers") or free_bytes <= 0:
        return ""
    seq = SequenceMemory(**recorded)
    return (
        f"; each sequence holds {seq.state_bytes() / 1e6:.0f} MB of Mamba state + "
        f"{seq.kv_bytes_per_token() / 1024:g} KiB of BF16 KV per token ({seq.kv_bytes_per_token('fp8') / 1024:g} KiB "
        f"at FP8): the KV budget holds {seq.sequences_that_fit(free_bytes, 8192)} sequences of 8192 tokens, "
        f"{seq.sequences_that_fit(free_bytes, 1024)} of 1024"
    )
