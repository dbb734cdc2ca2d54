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

IMPLAUSIBLE_TPOT_MS = 0.05  # 50 us per token: below every engine measured (the CPU engine's tiny model: ~4 ms)
CLIENT_BOUND_SHARE = 0.9  # of each client process's time spent on the CPU
RATE_SHORTFALL = 0.75  # completed / offered requests per second


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
            "load_average_1m": round(os.getloadavg()[0], 2),  # how busy the machine was as the sweep began
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
        if level["completed"]:
            warnings += implausible(name, level)
    return warnings


def implausible(name: str, level: dict[str, Any]) -> list[str]:
    """What says a level measured the client or the machine rather than the server: tokens that arrived all at once
    (no engine emits a token every 50 us: they were read late), a client that was busy all the time, an offered rate
    the level fell well short of."""
    out = []
    tpot = (level.get("tpot_ms") or {}).get("mean")
    if tpot is not None and tpot < IMPLAUSIBLE_TPOT_MS:
        out.append(
            f"{name}: TPOT {tpot:.3f} ms is below what any engine produces: the tokens arrived together, read late "
            "by a busy client or machine, so the latencies do not measure the server"
        )
    per_wall, processes = level.get("client_cpu_per_wall_s"), level.get("client_processes") or 1
    if per_wall is not None and per_wall >= CLIENT_BOUND_SHARE * processes:
        out.append(
            f"{name}: the client was busy {per_wall / processes:.0%} of the level on {processes} process(es): it may "
            "have set the pace (give --client-processes, or run the client on a less loaded machine)"
        )
    rate, done = level.get("request_rate"), level.get("request_throughput_req_s")
    if rate and done is not None and done < RATE_SHORTFALL * rate:
        out.append(
            f"{name}: {done:g} requests/s completed of the {rate:g}/s offered: the server (or the client) did not "
            "keep up, so the latencies include the queue"
        )
    return out
