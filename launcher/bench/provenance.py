"""Who measured what, and what distorts it: the server, how nemolaunch launched it, the GPU, driver and engine
packages, the client and its arguments (secrets masked: results are made to be shared), and the warnings about
settings known to distort a sweep."""

from __future__ import annotations

import os
import platform
import socket
import sys
import time
from dataclasses import asdict
from pathlib import Path
from typing import Any

from checks.secrets import redact_obj
from launcher import __version__
from launcher.bench.client import ServerInfo
from launcher.bench.config import BenchConfig
from launcher.profiles.profile import EAGER_COST


def provenance(cfg: BenchConfig, info: ServerInfo, served: dict[str, Any] | None) -> dict[str, Any]:
    from checks.facts import nvml_facts, stack_facts

    nvml = nvml_facts()
    stack = stack_facts(Path(served["python"])) if served and served.get("python") else {}
    config = {k: (str(v) if isinstance(v, Path) else v) for k, v in asdict(cfg).items() if k != "api_key"}
    doc: dict[str, Any] = redact_obj(
        {
            "server": {"url": cfg.url, "version": info.version, "models": info.models},
            "launched_by_nemolaunch": served,
            "gpu": nvml.get("gpus") if nvml.get("ok") else None,
            "driver": nvml.get("driver"),
            "cuda_driver": nvml.get("cuda_driver"),
            "stack": stack.get("packages"),
            "client": {
                "nemolaunch": __version__,
                "python": platform.python_version(),
                "argv": sys.argv,
                "config": config,
                "api_key_sent": cfg.api_key is not None,
            },
            "date": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
            "host": socket.gethostname(),
            "cpu_count": os.cpu_count(),
        }
    )
    return doc


def misconfiguration(cfg: BenchConfig, served: dict[str, Any] | None) -> list[str]:
    """Before the run: settings of a server nemolaunch started that are known to distort the sweep."""
    warnings = []
    settings = (served or {}).get("settings") or {}
    argv = (served or {}).get("argv") or []
    if settings.get("cuda_graphs") is False or "--enforce-eager" in argv:
        warnings.append(
            f"the server runs with --enforce-eager: {EAGER_COST}; this sweep measures the flag, not the model"
        )
    max_seqs = settings.get("max_num_seqs")
    if max_seqs is not None and cfg.concurrency and max(cfg.concurrency) > max_seqs:
        warnings.append(
            f"max_num_seqs {max_seqs} is below the highest concurrency {max(cfg.concurrency)}: "
            "requests above it queue, and that level measures the queue"
        )
    return warnings


def after_run_warnings(cfg: BenchConfig, levels: list[dict[str, Any]]) -> list[str]:
    from launcher.bench.stats import level_label

    warnings = []
    for level in levels:
        name = level_label(level, with_input=bool(cfg.context_lens))
        if level["length_mismatched"]:
            warnings.append(
                f"{name}: {level['length_mismatched']} request(s) did not get the prompt / output token counts "
                "asked for (output length not honoured or a tokenizer mismatch): see requests.jsonl"
            )
        if not level["completed"]:
            failures = ", ".join(f"{k} x{v}" for k, v in level["failures"].items()) or "none sent"
            warnings.append(f"{name}: no request completed ({failures}): see requests.jsonl for the errors")
        elif (
            level["request_rate"] is None
            and level["concurrency"]
            and level["concurrency"] > 1
            and level["achieved_concurrency"] < 0.75 * level["concurrency"]
        ):
            warnings.append(
                f"{name}: achieved concurrency {level['achieved_concurrency']} is well below the requested one "
                "(server-side cap such as max_num_seqs, or a client limit)"
            )
    return warnings
