"""`nemolaunch bench`: the throughput sweep against an OpenAI-compatible server, measured the way the README
defines it, written level by level so an interrupted sweep keeps what it measured.

One async client (aiohttp) per sweep; each concurrency level runs its prompts through that many workers.
Every request streams; each chunk's token count comes from vLLM's continuous usage stats when the server sends
them (else one token per non-empty chunk), so a chunk that carries k tokens counts as k inter-token gaps.
"""

from __future__ import annotations

import asyncio
import csv
import hashlib
import io
import json
import os
import platform
import random
import socket
import sys
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import aiohttp
import numpy as np

from launcher import __version__
from launcher.errors import BadInput, ExitCode, NemolaunchError, NotReady
from launcher.output import atomic_write_text

PERCENTILES = (50, 90, 99)
# a fixed word list for the base text that prompts are cut from: the same prompts on every run with one seed
_WORD_TEXT = (
    "serve model token kernel graph memory cache batch queue stream latency throughput request tensor "
    "layer expert router weight scale block tile warp thread device driver version profile chain backend "
    "decode prefill attention window context sample logits vocabulary embedding norm residual gate value "
    "key query"
)
WORDS = tuple(_WORD_TEXT.split())


@dataclass(frozen=True)
class BenchConfig:
    url: str
    concurrency: tuple[int, ...] = (1, 2, 4, 8, 16, 32, 64)
    input_len: int = 512
    output_len: int = 256
    num_prompts: int | None = None  # per level; default 4 x concurrency, at least 8
    duration_s: float | None = None
    warmup: int = 2
    repeats: int = 1
    label: str = "run"
    model: str | None = None
    endpoint: str = "completions"  # or "chat"
    seed: int = 0
    request_timeout_s: float = 600.0
    stall_timeout_s: float = 60.0

    def prompts_for(self, concurrency: int) -> int:
        return self.num_prompts or max(8, 4 * concurrency)


@dataclass
class RequestRecord:
    concurrency: int
    repeat: int
    index: int
    ok: bool = False
    error_class: str | None = None  # http-NNN, timeout, stalled, disconnected, connect, malformed
    error: str | None = None
    start_s: float = 0.0  # from the level's start
    ttft_s: float | None = None
    e2e_s: float | None = None
    itl_s: list[float] = field(default_factory=list)
    chunks: int = 0
    output_tokens: int = 0
    prompt_tokens: int | None = None  # as the server counted them (usage)
    completion_tokens: int | None = None
    length_ok: bool | None = None


class Failure(Exception):
    def __init__(self, error_class: str, message: str) -> None:
        super().__init__(message)
        self.error_class = error_class


async def _json(session: aiohttp.ClientSession, method: str, url: str, body: Any = None) -> Any:
    async with session.request(method, url, json=body, timeout=aiohttp.ClientTimeout(total=60)) as resp:
        if resp.status != 200:
            raise NemolaunchError(f"{method} {url} answered HTTP {resp.status}: {(await resp.text())[:200]}")
        return await resp.json(content_type=None)


async def server_info(session: aiohttp.ClientSession, url: str) -> dict[str, Any]:
    try:
        models = await _json(session, "GET", f"{url}/v1/models")
    except (TimeoutError, aiohttp.ClientError) as e:
        raise NotReady(
            f"no OpenAI-compatible server answers at {url}: {e}",
            "start one (nemolaunch serve) or give its address with --url",
        ) from None
    try:
        version = (await _json(session, "GET", f"{url}/version")).get("version")
    except (TimeoutError, NemolaunchError, aiohttp.ClientError):
        version = None
    return {"version": version, "models": models.get("data", [])}


async def make_prompts(session: aiohttp.ClientSession, cfg: BenchConfig, model: str, count: int) -> list[str]:
    """`count` prompts of exactly input_len tokens for the served model's tokenizer (vLLM's /tokenize and
    /detokenize): windows of a seeded base text, re-tokenized and trimmed until the count is exact."""
    rng = random.Random(cfg.seed)
    text = " ".join(rng.choice(WORDS) for _ in range(cfg.input_len * 4 + 64))
    try:
        base = (await _json(session, "POST", f"{cfg.url}/tokenize", {"model": model, "prompt": text}))["tokens"]
    except (NemolaunchError, KeyError) as e:
        raise NotReady(f"the server cannot tokenize ({e})", "bench needs vLLM's /tokenize endpoint") from None
    prompts = []
    for _ in range(count):
        start = rng.randrange(0, max(1, len(base) - cfg.input_len * 2))
        ids = base[start : start + cfg.input_len]
        for _attempt in range(4):
            prompt = (await _json(session, "POST", f"{cfg.url}/detokenize", {"model": model, "tokens": ids}))["prompt"]
            got = (await _json(session, "POST", f"{cfg.url}/tokenize", {"model": model, "prompt": prompt}))["tokens"]
            if len(got) == cfg.input_len:
                break
            # detokenize/retokenize is not always a round trip: adjust from what the server actually sees
            ids = got[: cfg.input_len] if len(got) > cfg.input_len else got + base[: cfg.input_len - len(got)]
        prompts.append(prompt)
    return prompts


def request_body(cfg: BenchConfig, model: str, prompt: str) -> tuple[str, dict[str, Any]]:
    common = {
        "model": model,
        "max_tokens": cfg.output_len,
        "min_tokens": cfg.output_len,
        "ignore_eos": True,
        "stream": True,
        "temperature": 0.0,
        "stream_options": {"include_usage": True, "continuous_usage_stats": True},
    }
    if cfg.endpoint == "chat":
        return "/v1/chat/completions", {**common, "messages": [{"role": "user", "content": prompt}]}
    return "/v1/completions", {**common, "prompt": prompt}


async def one_request(
    session: aiohttp.ClientSession, cfg: BenchConfig, model: str, prompt: str, record: RequestRecord, level_start: float
) -> None:
    path, body = request_body(cfg, model, prompt)
    start = time.perf_counter()
    record.start_s = start - level_start
    last = start
    try:
        async with asyncio.timeout(cfg.request_timeout_s), session.post(f"{cfg.url}{path}", json=body) as resp:
            if resp.status != 200:
                raise Failure(f"http-{resp.status}", (await resp.text())[:200])
            seen_tokens, done = 0, False
            loop = asyncio.get_running_loop()
            # one deadline per request, pushed back whenever bytes arrive (cheap), rather than a wait_for per line
            stall = asyncio.timeout(cfg.stall_timeout_s)
            try:
                async with stall:
                    pending = b""
                    async for block in resp.content.iter_any():
                        stall.reschedule(loop.time() + cfg.stall_timeout_s)
                        now = time.perf_counter()  # every event in this block arrived now
                        *lines, pending = (pending + block).split(b"\n")
                        for raw in lines:
                            if not raw.startswith(b"data:"):
                                continue
                            data = raw[5:].strip()
                            if data == b"[DONE]":
                                done = True
                                break
                            try:
                                event = json.loads(data)
                            except json.JSONDecodeError:
                                raise Failure("malformed", f"not JSON: {data[:80]!r}") from None
                            if "error" in event:
                                raise Failure("server-error", str(event["error"])[:200])
                            usage = event.get("usage") or {}
                            if usage.get("completion_tokens") is not None:
                                new = usage["completion_tokens"] - seen_tokens
                                record.prompt_tokens = usage.get("prompt_tokens")
                                record.completion_tokens = usage["completion_tokens"]
                            else:
                                choices = event.get("choices") or []
                                new = (
                                    1
                                    if any(c.get("text") or (c.get("delta") or {}).get("content") for c in choices)
                                    else 0
                                )
                            if new <= 0:
                                continue
                            seen_tokens += new
                            record.chunks += 1
                            if record.ttft_s is None:
                                record.ttft_s = now - start
                                record.itl_s += [0.0] * (new - 1)  # the rest of the first chunk came with it
                            else:
                                record.itl_s += [(now - last) / new] * new
                            last = now
                        if done:
                            break
            except TimeoutError:
                if stall.expired():
                    raise Failure("stalled", f"no data for {cfg.stall_timeout_s:.0f} s") from None
                raise
            if not done:
                raise Failure("disconnected", "the stream ended without [DONE]")
            record.output_tokens = seen_tokens
    except Failure as f:
        record.error_class, record.error = f.error_class, str(f)
        return
    except TimeoutError:
        record.error_class, record.error = "timeout", f"over {cfg.request_timeout_s:.0f} s"
        return
    except aiohttp.ClientConnectorError as e:
        record.error_class, record.error = "connect", str(e)[:200]
        return
    except (aiohttp.ClientPayloadError, aiohttp.ServerDisconnectedError, aiohttp.ClientOSError) as e:
        record.error_class, record.error = "disconnected", f"{type(e).__name__}: {e}"[:200]
        return
    record.ok = True
    record.e2e_s = last - start
    # chat prompts also carry the chat template's tokens, so only completions can check the prompt length
    prompt_ok = cfg.endpoint == "chat" or record.prompt_tokens in (None, cfg.input_len)
    record.length_ok = (
        prompt_ok and record.completion_tokens in (None, cfg.output_len) and (record.output_tokens == cfg.output_len)
    )


def stats_ms(values: list[float]) -> dict[str, float | None]:
    if not values:
        return {"mean": None, "p50": None, "p90": None, "p99": None}
    arr = np.asarray(values) * 1000
    out: dict[str, float | None] = {"mean": round(float(arr.mean()), 3)}
    for p, v in zip(PERCENTILES, np.percentile(arr, PERCENTILES), strict=True):
        out[f"p{p}"] = round(float(v), 3)
    return out


def summarize(concurrency: int, runs: list[tuple[list[RequestRecord], float]]) -> dict[str, Any]:
    """One level: latency statistics over the requests of every repeat; throughput as the mean of repeats."""
    records = [r for recs, _ in runs for r in recs]
    ok = [r for r in records if r.ok]
    per_run = []
    for recs, wall in runs:
        good = [r for r in recs if r.ok]
        per_run.append(
            {
                "wall_s": round(wall, 3),
                "output_throughput_tok_s": round(sum(r.output_tokens for r in good) / wall, 2) if wall else 0.0,
                "request_throughput_req_s": round(len(good) / wall, 3) if wall else 0.0,
                "achieved_concurrency": round(sum(r.e2e_s or 0 for r in good) / wall, 2) if wall else 0.0,
            }
        )
    tput = [p["output_throughput_tok_s"] for p in per_run]
    tpot = [
        (r.e2e_s - r.ttft_s) / (r.output_tokens - 1)
        for r in ok
        if r.e2e_s is not None and r.ttft_s is not None and r.output_tokens > 1
    ]
    return {
        "concurrency": concurrency,
        "repeats": len(runs),
        "completed": len(ok),
        "failed": len(records) - len(ok),
        "failures": dict(Counter(r.error_class for r in records if not r.ok)),
        "length_mismatched": sum(1 for r in ok if r.length_ok is False),
        "output_throughput_tok_s": round(float(np.mean(tput)), 2),
        "output_throughput_stdev": round(float(np.std(tput, ddof=1)), 2) if len(tput) > 1 else None,
        "request_throughput_req_s": round(float(np.mean([p["request_throughput_req_s"] for p in per_run])), 3),
        "achieved_concurrency": round(float(np.mean([p["achieved_concurrency"] for p in per_run])), 2),
        "per_user_tok_s": round(float(np.mean([r.output_tokens / r.e2e_s for r in ok if r.e2e_s])), 2) if ok else None,
        "ttft_ms": stats_ms([r.ttft_s for r in ok if r.ttft_s is not None]),
        "tpot_ms": stats_ms(tpot),
        "itl_ms": stats_ms([g for r in ok for g in r.itl_s]),
        "e2el_ms": stats_ms([r.e2e_s for r in ok if r.e2e_s is not None]),
        "runs": per_run,
    }


CSV_FIELDS = [
    "concurrency",
    "completed",
    "failed",
    "length_mismatched",
    "output_throughput_tok_s",
    "request_throughput_req_s",
    "achieved_concurrency",
    "per_user_tok_s",
]


def write_summary(out: Path, doc: dict[str, Any]) -> None:
    atomic_write_text(out / "summary.json", json.dumps({"schema": "nemolaunch.bench/1", **doc}, indent=2))
    buf = io.StringIO()
    metrics = ("ttft_ms", "tpot_ms", "itl_ms", "e2el_ms")
    writer = csv.writer(buf)
    writer.writerow(CSV_FIELDS + [f"{m}_{s}" for m in metrics for s in ("mean", "p50", "p90", "p99")])
    for level in doc["levels"]:
        writer.writerow(
            [level[f] for f in CSV_FIELDS] + [level[m][s] for m in metrics for s in ("mean", "p50", "p90", "p99")]
        )
    atomic_write_text(out / "summary.csv", buf.getvalue())


class Progress:
    """tqdm on a terminal, nothing otherwise."""

    def __init__(self, total: int, label: str) -> None:
        self.bar = None
        if sys.stderr.isatty():
            from tqdm import tqdm

            self.bar = tqdm(total=total, desc=label, unit="req", leave=False)

    def step(self) -> None:
        if self.bar is not None:
            self.bar.update(1)

    def close(self) -> None:
        if self.bar is not None:
            self.bar.close()


async def run_level(
    session: aiohttp.ClientSession,
    cfg: BenchConfig,
    model: str,
    prompts: list[str],
    concurrency: int,
    repeat: int,
    sink: Callable[[RequestRecord], None],
) -> tuple[list[RequestRecord], float]:
    """Warm-up requests (not recorded), then the level; every finished request goes to `sink` at once."""
    for i in range(cfg.warmup):
        await one_request(
            session, cfg, model, prompts[i % len(prompts)], RequestRecord(concurrency, repeat, -1), time.perf_counter()
        )
    count = cfg.prompts_for(concurrency)
    records: list[RequestRecord] = []
    progress = Progress(count if cfg.duration_s is None else 0, f"c={concurrency}")
    next_index = 0
    start = time.perf_counter()
    deadline = start + cfg.duration_s if cfg.duration_s else None

    async def worker() -> None:
        nonlocal next_index
        while True:
            if deadline is not None:
                if time.perf_counter() >= deadline:
                    return
            elif next_index >= count:
                return
            index = next_index
            next_index += 1
            record = RequestRecord(concurrency, repeat, index)
            await one_request(session, cfg, model, prompts[index % len(prompts)], record, start)
            records.append(record)
            sink(record)
            progress.step()

    try:
        await asyncio.gather(*(worker() for _ in range(concurrency)))
    finally:
        progress.close()
    ends = [r.start_s + (r.e2e_s or 0) for r in records if r.ok]
    wall = max(ends) if ends else time.perf_counter() - start
    return records, wall


@dataclass
class SweepOutcome:
    code: int
    message: str
    summary: dict[str, Any]


def misconfiguration(cfg: BenchConfig, served: dict[str, Any] | None) -> list[str]:
    """Before the run: settings of a server nemolaunch started that are known to distort the sweep."""
    warnings = []
    settings = (served or {}).get("settings") or {}
    argv = (served or {}).get("argv") or []
    if settings.get("cuda_graphs") is False or "--enforce-eager" in argv:
        warnings.append(
            "the server runs with --enforce-eager (no CUDA graphs): the seed measured 27 instead of 97 "
            "tok/s at concurrency 1; this sweep measures the flag, not the model"
        )
    max_seqs = settings.get("max_num_seqs")
    if max_seqs is not None and max(cfg.concurrency) > max_seqs:
        warnings.append(
            f"max_num_seqs {max_seqs} is below the highest concurrency {max(cfg.concurrency)}: "
            "requests above it queue, and that level measures the queue"
        )
    return warnings


def after_run_warnings(cfg: BenchConfig, levels: list[dict[str, Any]]) -> list[str]:
    warnings = []
    for level in levels:
        if level["length_mismatched"]:
            warnings.append(
                f"c={level['concurrency']}: {level['length_mismatched']} request(s) did not get "
                f"{cfg.input_len} prompt / {cfg.output_len} output tokens (output length not honoured "
                "or a tokenizer mismatch): see requests.jsonl"
            )
        if (
            level["completed"]
            and level["achieved_concurrency"] < 0.75 * level["concurrency"]
            and level["concurrency"] > 1
        ):
            warnings.append(
                f"c={level['concurrency']}: achieved concurrency {level['achieved_concurrency']} is well "
                "below the requested one (server-side cap such as max_num_seqs, or a client limit)"
            )
    return warnings


async def sweep(cfg: BenchConfig, out: Path, served: dict[str, Any] | None, say: Callable[[str], None]) -> SweepOutcome:
    out.mkdir(parents=True, exist_ok=True)
    connector = aiohttp.TCPConnector(limit=0, ttl_dns_cache=300)
    async with aiohttp.ClientSession(connector=connector, timeout=aiohttp.ClientTimeout(total=None)) as session:
        info = await server_info(session, cfg.url)
        if not info["models"]:
            raise NotReady(f"{cfg.url} serves no model", "start vLLM with a model")
        model = cfg.model or info["models"][0]["id"]
        if model not in [m["id"] for m in info["models"]]:
            raise BadInput(f"{cfg.url} does not serve {model!r}", f"it serves {[m['id'] for m in info['models']]}")
        prompts = await make_prompts(session, cfg, model, max(cfg.prompts_for(c) for c in cfg.concurrency))
        doc: dict[str, Any] = {
            "status": "running",
            "label": cfg.label,
            "workload": {
                "model": model,
                "endpoint": cfg.endpoint,
                "input_len": cfg.input_len,
                "output_len": cfg.output_len,
                "num_prompts": cfg.num_prompts,
                "duration_s": cfg.duration_s,
                "seed": cfg.seed,
                "warmup": cfg.warmup,
                "repeats": cfg.repeats,
                "prompts_sha": _digest(prompts),
            },
            "provenance": provenance(cfg, info, served),
            "warnings": misconfiguration(cfg, served),
            "levels": [],
        }
        for w in doc["warnings"]:
            say(f"warning: {w}")
        write_summary(out, doc)
        with (out / "requests.jsonl").open("a", encoding="utf-8") as jsonl:

            def sink(record: RequestRecord) -> None:
                jsonl.write(json.dumps(asdict(record)) + "\n")
                jsonl.flush()

            for concurrency in cfg.concurrency:
                runs: list[tuple[list[RequestRecord], float]] = []
                try:
                    for repeat in range(cfg.repeats):
                        runs.append(await run_level(session, cfg, model, prompts, concurrency, repeat, sink))
                except asyncio.CancelledError:
                    doc["status"], doc["stopped_at"] = "interrupted", {"concurrency": concurrency}
                    write_summary(out, doc)
                    raise
                level = summarize(concurrency, runs)
                doc["levels"].append(level)
                say(
                    f"c={concurrency}: {level['output_throughput_tok_s']} tok/s, {level['completed']} ok, "
                    f"{level['failed']} failed"
                )
                if level["failed"] and await _server_gone(session, cfg.url):
                    doc["status"], doc["stopped_at"] = "server-died", {"concurrency": concurrency}
                    write_summary(out, doc)
                    return SweepOutcome(
                        ExitCode.PROBLEM,
                        f"the server stopped answering during concurrency "
                        f"{concurrency}; the levels measured so far are in {out}",
                        doc,
                    )
                write_summary(out, doc)
        doc["warnings"] += after_run_warnings(cfg, doc["levels"])
        doc["status"] = "complete"
        write_summary(out, doc)
        failed = sum(level["failed"] for level in doc["levels"])
        code = ExitCode.PROBLEM if failed else ExitCode.OK
        return SweepOutcome(code, f"{failed} request(s) failed" if failed else "sweep complete", doc)


async def _server_gone(session: aiohttp.ClientSession, url: str) -> bool:
    try:
        async with session.get(f"{url}/health", timeout=aiohttp.ClientTimeout(total=5)) as resp:
            return resp.status >= 500
    except (TimeoutError, aiohttp.ClientError):
        return True


def _digest(prompts: list[str]) -> str:
    return hashlib.sha256("\x00".join(prompts).encode()).hexdigest()[:16]


def provenance(cfg: BenchConfig, info: dict[str, Any], served: dict[str, Any] | None) -> dict[str, Any]:
    """Who measured what: the server, how nemolaunch launched it, the GPU, driver and (when nemolaunch started the
    server) the engine's packages, the client and its exact arguments."""
    from checks.facts import nvml_facts, stack_facts

    nvml = nvml_facts()
    stack = stack_facts(Path(served["python"])) if served and served.get("python") else {}
    return {
        "server": {"url": cfg.url, "version": info["version"], "models": info["models"]},
        "launched_by_nemolaunch": served,
        "gpu": nvml.get("gpus") if nvml.get("ok") else None,
        "driver": nvml.get("driver"),
        "cuda_driver": nvml.get("cuda_driver"),
        "stack": stack.get("packages"),
        "client": {
            "nemolaunch": __version__,
            "python": platform.python_version(),
            "argv": sys.argv,
            "config": asdict(cfg),
        },
        "date": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
        "host": socket.gethostname(),
        "cpu_count": os.cpu_count(),
    }


def run(cfg: BenchConfig, out: Path, served: dict[str, Any] | None, say: Callable[[str], None]) -> SweepOutcome:
    """The sweep; on Ctrl-C the summary says where it stopped and every finished request is in requests.jsonl.
    report.md and the plots are written for whatever levels were measured."""
    if (out / "summary.json").exists():
        raise BadInput(f"{out} already holds a bench run", "give a new --out folder (runs are never overwritten)")
    try:
        outcome = asyncio.run(sweep(cfg, out, served, say))
    except KeyboardInterrupt:
        doc = json.loads((out / "summary.json").read_text()) if (out / "summary.json").exists() else {}
        where = (doc.get("stopped_at") or {}).get("concurrency")
        outcome = SweepOutcome(
            ExitCode.INTERRUPTED,
            f"interrupted at concurrency {where}; the levels measured so far and every finished request are in {out}",
            doc,
        )
    if outcome.summary.get("levels"):
        from launcher.compare import write_report

        write_report([{**outcome.summary, "_folder": str(out)}], out, [])
    return outcome


def run_served(
    profile_ref: str,
    model: str,
    python: Path | None,
    port: int,
    cfg_args: dict[str, Any],
    out: Path,
    say: Callable[[str], None],
) -> SweepOutcome:
    """Start vLLM with a profile (nemolaunch serve's machinery), sweep it, stop it; the server's log goes to
    OUT/server.log and the profile and argv into the provenance."""
    from launcher import serve

    plan = serve.make_plan(profile_ref, model, python, "127.0.0.1", port)
    for warning in serve.warnings(plan):
        say(f"warning: {warning}")
    served: dict[str, Any] = {
        "profile": plan.profile.name,
        "settings": plan.profile.settings,
        "argv": plan.argv,
        "env": plan.rendered.env,
        "vllm_version": plan.rendered.vllm_version,
        "python": str(plan.interpreter.path),
    }
    out.mkdir(parents=True, exist_ok=True)
    with serve.launched(plan, model, out / "server.log", say, echo_log=None) as running:
        served["startup_s"] = round(running.startup_s, 1)
        return run(BenchConfig(url=plan.url, model=running.models[0], **cfg_args), out, served, say)


def table_rows(levels: list[dict[str, Any]]) -> list[list[object]]:
    return [
        [
            lv["concurrency"],
            lv["completed"],
            lv["failed"],
            lv["output_throughput_tok_s"],
            lv["request_throughput_req_s"],
            lv["ttft_ms"]["mean"],
            lv["ttft_ms"]["p99"],
            lv["tpot_ms"]["mean"],
            lv["itl_ms"]["p99"],
            lv["e2el_ms"]["mean"],
            lv["achieved_concurrency"],
        ]
        for lv in levels
    ]


TABLE_HEADERS = [
    "conc",
    "ok",
    "failed",
    "out tok/s",
    "req/s",
    "TTFT ms",
    "TTFT p99",
    "TPOT ms",
    "ITL p99",
    "E2E ms",
    "achieved",
]
