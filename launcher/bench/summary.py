"""The parts of summary.json a sweep composes: the workload as it was really sent, and the SLO verdict."""

from __future__ import annotations

import hashlib
from typing import Any

from launcher.bench.config import BenchConfig
from launcher.bench.stats import LevelResult, level_label
from launcher.bench.workload import Prompt


def digest(prompts: dict[int, list[Prompt]]) -> str:
    text = "\x00".join(f"{p.output_len}\x01{p.text}" for pool in prompts.values() for p in pool)
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def axis(cfg: BenchConfig) -> str:
    """What the levels vary: concurrency, request-rate or context-length (reports and plots put it on the x axis)."""
    return "request-rate" if cfg.request_rates else "context-length" if cfg.context_lens else "concurrency"


def workload_document(cfg: BenchConfig, model: str, prompts: dict[int, list[Prompt]]) -> dict[str, Any]:
    """The workload as sent: input_len is null where no one length was (a dataset's prompts, a context sweep's
    levels); `mean_prompt_tokens` (what the server counted) is added when the sweep ends."""
    return {
        "model": model,
        "endpoint": cfg.endpoint,
        "axis": axis(cfg),
        "input_len": None if cfg.dataset or cfg.context_lens else cfg.input_len,
        "output_len": cfg.output_len,
        "num_prompts": cfg.num_prompts,
        "duration_s": cfg.duration_s,
        "seed": cfg.seed,
        "warmup": cfg.warmup,
        "repeats": cfg.repeats,
        "prompts_sha": digest(prompts),
        "load": {
            "mode": "request-rate" if cfg.request_rates else "concurrency",
            "request_rates": list(cfg.request_rates),
            "arrival": cfg.arrival if cfg.request_rates else None,
            "burstiness": cfg.burstiness_value() if cfg.request_rates else None,
        },
        "dataset": str(cfg.dataset) if cfg.dataset else None,
        "shared_prefix_len": cfg.shared_prefix_len,
        "context_lens": list(cfg.context_lens),
        "slo_ms": dict(cfg.slo_ms) or None,
        "slo_share": cfg.slo_share if cfg.slo_ms else None,
        "client_processes": cfg.client_processes if cfg.client_processes is not None else "auto",
    }


def slo_verdict(levels_done: list[LevelResult]) -> dict[str, Any] | None:
    """The highest load (in the sweep's order) whose requests met the SLOs, and the first that did not."""
    judged = [lv for lv in levels_done if lv.goodput is not None]
    if not judged:
        return None
    meeting = [lv for lv in judged if lv.goodput and lv.goodput.met]
    failing = [lv for lv in judged if lv.goodput and not lv.goodput.met]
    return {
        "highest_meeting": level_label(meeting[-1]) if meeting else None,
        "first_failing": level_label(failing[0]) if failing else None,
    }


def mean_prompt_tokens(levels: list[dict[str, Any]]) -> float | None:
    """The prompts' mean length over the sweep as the server counted them, weighted by the requests completed."""
    counted = [(lv["mean_prompt_tokens"], lv["completed"]) for lv in levels if lv.get("mean_prompt_tokens")]
    total = sum(n for _, n in counted)
    return round(sum(m * n for m, n in counted) / total, 1) if total else None
