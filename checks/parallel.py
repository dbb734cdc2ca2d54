"""A profile's parallel layout against the model and the GPUs: tensor parallelism splits attention heads and
KV heads, pipeline parallelism splits layers, and one node's ranks need that many visible GPUs."""

from __future__ import annotations

import math
from typing import Any

from checks.facts import Facts
from checks.result import CheckResult


def check(facts: Facts) -> list[CheckResult]:
    layout = facts.get("parallel")
    if layout is None:
        return [CheckResult("parallel", "parallel", "skip", "no --profile given")]
    results = []
    model = facts.get("model")
    if model is not None and model.get("config_error"):
        results.append(
            CheckResult(
                "parallel.model",
                "parallel",
                "fail",
                model["config_error"],
                "the model's config.json as published",
                "give the model's folder with its config.json unedited",
            )
        )
    elif model is None or model.get("num_attention_heads") is None:
        results.append(CheckResult("parallel.model", "parallel", "skip", "no --model with a config.json to split"))
    else:
        results += _split(layout, model)
    results.append(_gpus(facts, layout))
    return results


def _split(layout: dict[str, Any], model: dict[str, Any]) -> list[CheckResult]:
    tp, pp = layout["tensor_parallel_size"], layout["pipeline_parallel_size"]
    heads, layers = model["num_attention_heads"], model.get("num_hidden_layers")
    kv = model.get("num_key_value_heads") or heads
    out = []
    observed = f"tensor_parallel_size {tp}: {heads} attention heads, {kv} KV heads"
    if heads % tp:
        out.append(
            CheckResult(
                "parallel.tp",
                "parallel",
                "fail",
                observed,
                "attention heads divisible by tensor_parallel_size",
                f"tensor_parallel_size must divide {heads}: one of {_divisors(heads)}",
            )
        )
    elif kv % tp and tp % kv:
        out.append(
            CheckResult(
                "parallel.tp",
                "parallel",
                "fail",
                observed,
                "KV heads divisible by tensor_parallel_size, or tensor_parallel_size a multiple of them",
                f"tensor_parallel_size one of {[d for d in _divisors(heads) if kv % d == 0 or d % kv == 0]}",
            )
        )
    else:
        note = f" (each KV head replicated {tp // kv}x)" if tp > kv else ""
        out.append(CheckResult("parallel.tp", "parallel", "pass", observed + note))
    if layers is not None:
        observed = f"pipeline_parallel_size {pp}: {layers} layers"
        if pp > layers:
            out.append(
                CheckResult(
                    "parallel.pp",
                    "parallel",
                    "fail",
                    observed,
                    "at least one layer per pipeline stage",
                    f"pipeline_parallel_size at most {layers}",
                )
            )
        else:
            out.append(CheckResult("parallel.pp", "parallel", "pass", observed))
    return out


def _gpus(facts: Facts, layout: dict[str, Any]) -> CheckResult:
    nodes = layout["nodes"]
    world = layout["tensor_parallel_size"] * layout["pipeline_parallel_size"] * layout["data_parallel_size"]
    per_node = world // nodes if world % nodes == 0 else None
    nvml = facts["nvml"]
    gpus = (nvml.get("gpus") or []) if nvml.get("ok") else []
    visible = facts["env"].get("CUDA_VISIBLE_DEVICES")
    count = len([v for v in visible.split(",") if v.strip()]) if visible is not None else len(gpus)
    shape = (
        f"tensor {layout['tensor_parallel_size']} x pipeline {layout['pipeline_parallel_size']} x data "
        f"{layout['data_parallel_size']} = {world} rank(s) on {nodes} node(s)"
    )
    if per_node is None:
        return CheckResult(
            "parallel.gpus",
            "parallel",
            "fail",
            shape,
            "the same number of ranks on every node",
            f"make tensor x pipeline x data parallel a multiple of the {nodes} nodes",
        )
    if not gpus:
        return CheckResult("parallel.gpus", "parallel", "skip", f"{shape}; no GPU here to compare with")
    observed = f"{shape}: {per_node} GPU(s) per node, {count} visible here"
    if per_node > count:
        return CheckResult(
            "parallel.gpus",
            "parallel",
            "fail",
            observed,
            f">= {per_node} visible GPU(s)",
            "use a smaller layout, more nodes, or make more GPUs visible (CUDA_VISIBLE_DEVICES)",
        )
    if per_node < count:
        observed += f" ({count - per_node} left idle: raise data_parallel_size to use them)"
    return CheckResult("parallel.gpus", "parallel", "pass", observed)


def _divisors(n: int) -> list[int]:
    """n's divisors in order, found in O(sqrt n) (a head count is read from a config.json anyone can write)."""
    small = [d for d in range(1, math.isqrt(n) + 1) if n % d == 0]
    return sorted({*small, *(n // d for d in small)})
