"""Result files: summary.json (schema nemolaunch.bench/1) and summary.csv rewritten after every level,
requests.jsonl appended as requests finish, and per level a JSON with the keys `vllm bench serve --save-result`
writes, so plots and dashboards made for vLLM's files read ours. Every file gets the umask's mode (0644 under
022). A write that fails (a full disk, a read-only folder) is one clear error, and requests.jsonl never keeps
half a line."""

from __future__ import annotations

import contextlib
import csv
import io
import json
import math
import os
import time
from dataclasses import asdict, fields
from pathlib import Path
from typing import Any

import numpy as np

from checks.secrets import redact_obj, redact_text
from launcher.bench.client import RequestRecord
from launcher.bench.config import BenchConfig, LevelSpec
from launcher.bench.stats import LevelResult, tpot_s
from launcher.documents import BENCH_SCHEMA
from launcher.output import Unwritable, atomic_write_text

METRICS = ("ttft_ms", "tpot_ms", "itl_ms", "e2el_ms")
CSV_FIELDS = [
    "concurrency",
    "request_rate",
    "input_len",
    "mean_prompt_tokens",
    "completed",
    "failed",
    "length_mismatched",
    "output_throughput_tok_s",
    "request_throughput_req_s",
    "achieved_concurrency",
    "per_user_tok_s",
]


def _guarded_write(path: Path, text: str) -> None:
    try:
        atomic_write_text(path, text)
    except OSError as e:
        raise Unwritable(path, e) from None


def level_document(level: LevelResult) -> dict[str, Any]:
    """A level as summary.json holds it; input_len is null for a dataset's level (its prompts' lengths vary: the
    server's count is mean_prompt_tokens)."""
    return {**asdict(level), "input_len": level.input_len or None}


def write_summary(out: Path, doc: dict[str, Any]) -> None:
    """summary.json and summary.csv from the summary document (levels already as dicts), secrets masked."""
    doc = redact_obj({"schema": BENCH_SCHEMA, **{k: v for k, v in doc.items() if k != "schema"}})
    _guarded_write(out / "summary.json", json.dumps(doc, indent=2))
    buf = io.StringIO()
    writer = csv.writer(buf)
    writer.writerow(CSV_FIELDS + [f"{m}_{s}" for m in METRICS for s in ("mean", "p50", "p90", "p99")])
    for level in doc["levels"]:
        writer.writerow(
            [level.get(f) for f in CSV_FIELDS] + [level[m][s] for m in METRICS for s in ("mean", "p50", "p90", "p99")]
        )
    _guarded_write(out / "summary.csv", buf.getvalue())


_RECORD_FIELDS = tuple(f.name for f in fields(RequestRecord))


def record_row(record: RequestRecord) -> dict[str, Any]:
    """A record as its requests.jsonl object: asdict's keys without asdict's deep copy (per request, during the
    level: a fifth of the client's CPU at c=256 against a fast server)."""
    return {name: getattr(record, name) for name in _RECORD_FIELDS}


class RequestLog:
    """requests.jsonl, one line per finished request, appended with one write each; a failed write is cut back
    to the last whole line before it is reported."""

    def __init__(self, path: Path) -> None:
        self.path = path
        try:
            self.fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND | os.O_NOFOLLOW, 0o666)
        except OSError as e:
            raise Unwritable(path, e) from None
        self.size = os.fstat(self.fd).st_size
        self.error: Unwritable | None = None

    def write(self, record: RequestRecord) -> None:
        if self.error is not None:
            return
        line = (json.dumps(record_row(record)) + "\n").encode()
        try:
            written = os.write(self.fd, line)
            if written != len(line):
                raise OSError(28, "No space left on device (short write)")
            self.size += written
        except OSError as e:
            with contextlib.suppress(OSError):
                os.ftruncate(self.fd, self.size)
            self.error = Unwritable(self.path, e)

    def check(self) -> None:
        """Raise the first write error, after the level that met it."""
        if self.error is not None:
            raise self.error

    def close(self) -> None:
        os.close(self.fd)


def _stats_ms(name: str, seconds: list[float], percentiles: tuple[float, ...]) -> dict[str, float]:
    arr = np.asarray(seconds or [0.0]) * 1000
    out = {
        f"mean_{name}_ms": float(arr.mean()),
        f"median_{name}_ms": float(np.median(arr)),
        f"std_{name}_ms": float(arr.std()),
    }
    for p in percentiles:
        word = str(int(p)) if int(p) == p else str(p)
        out[f"p{word}_{name}_ms"] = float(np.percentile(arr, p))
    return out


def vllm_result(
    cfg: BenchConfig,
    spec: LevelSpec,
    model: str,
    records: list[RequestRecord],
    wall_s: float,
    level: LevelResult,
    date: str,
) -> dict[str, Any]:
    """The document `vllm bench serve --save-result` writes, for one level (its first repeat's requests when the
    level was repeated, since vLLM's file is one run). Per request: vLLM's lists (ttfts, itls, ...), with
    generated_texts empty (bench does not keep the text) and itls as bench measures them (README)."""
    ok = [r for r in records if r.ok]
    total_in = sum(r.prompt_tokens or r.input_len or 0 for r in ok)
    total_out = sum(r.output_tokens for r in ok)
    duration = wall_s or math.nan
    # per-second buckets of output tokens and of requests in flight, as vLLM computes its peak values
    seconds = max(1, math.ceil(wall_s))
    tokens_at = np.zeros(seconds + 1)
    in_flight = np.zeros(seconds + 1)
    for r in ok:
        t = r.start_s + (r.ttft_s or 0.0)
        tokens_at[min(seconds, int(t))] += 1
        for gap in r.itl_s:
            t += gap
            tokens_at[min(seconds, int(t))] += 1
        in_flight[int(r.start_s) : int(r.start_s + (r.e2e_s or 0)) + 1] += 1
    rate = "inf" if spec.request_rate is None else spec.request_rate
    doc: dict[str, Any] = {
        "date": date,
        "endpoint_type": "openai-chat" if cfg.endpoint == "chat" else "vllm",
        "backend": "openai-chat" if cfg.endpoint == "chat" else "vllm",
        "label": cfg.label,
        "model_id": model,
        "tokenizer_id": model,
        "num_prompts": len(records),
        "request_rate": rate,
        "burstiness": cfg.burstiness_value() if spec.request_rate is not None else 1.0,
        "max_concurrency": spec.concurrency,
        "duration": duration,
        "completed": len(ok),
        "failed": len(records) - len(ok),
        "total_input_tokens": total_in,
        "total_output_tokens": total_out,
        "request_throughput": len(ok) / duration if ok else 0.0,
        "request_goodput": level.goodput.request_goodput_req_s if level.goodput else None,
        "output_throughput": total_out / duration if ok else 0.0,
        "total_token_throughput": (total_in + total_out) / duration if ok else 0.0,
        "input_lens": [r.prompt_tokens or r.input_len or 0 for r in records],
        "output_lens": [r.output_tokens for r in records],
        "ttfts": [r.ttft_s or 0.0 for r in records],
        "itls": [r.itl_s for r in records],
        "latencies": [r.e2e_s or 0.0 for r in records],
        "start_times": [r.start_s for r in records],
        "queue_times": [r.queue_s for r in records],
        "generated_texts": ["" for _ in records],
        "errors": [r.error or "" for r in records],
        "max_output_tokens_per_s": float(tokens_at.max()),
        "max_concurrent_requests": int(in_flight.max()),
        "rtfx": 0.0,
    }
    percentiles = (50.0, 90.0, 99.0)
    doc |= _stats_ms("ttft", [r.ttft_s for r in ok if r.ttft_s is not None], percentiles)
    doc |= _stats_ms("tpot", [t for t in (tpot_s(r) for r in ok) if t is not None], percentiles)
    doc |= _stats_ms("itl", [g for r in ok for g in r.itl_s], percentiles)
    doc |= _stats_ms("e2el", [r.e2e_s for r in ok if r.e2e_s is not None], percentiles)
    return doc


def write_vllm_result(out: Path, spec: LevelSpec, doc: dict[str, Any]) -> Path:
    path = out / f"vllm-{spec.tag}.json"
    # only its strings can hold a secret; redact_obj would also mask counts under names like total_input_tokens
    doc = {k: redact_text(v) if isinstance(v, str) else v for k, v in doc.items()}
    doc["errors"] = [redact_text(e) for e in doc["errors"]]
    _guarded_write(path, json.dumps(doc))
    return path


def now_stamp() -> str:
    return time.strftime("%Y%m%d-%H%M%S")
