"""The sweep: level after level against one server, each finished request logged at once and the summary
rewritten after every level, so Ctrl-C, SIGTERM or a dying server keep what was measured."""

from __future__ import annotations

import asyncio
import hashlib
import json
import resource
import time
from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

import aiohttp

from launcher.bench import procs, results
from launcher.bench import provenance as prov
from launcher.bench.client import RequestRecord, ServerInfo, Target, length_ok, one_request, server_info
from launcher.bench.config import BenchConfig, LevelSpec, levels, validate
from launcher.bench.stats import LevelResult, level_label, summarize
from launcher.bench.workload import Prompt, Tokenizer, arrival_offsets, exact_prompts, read_dataset
from launcher.errors import BadInput, ExitCode, NotReady
from launcher.output import Unwritable, hold
from launcher.serve.lifetime import async_interrupts

if TYPE_CHECKING:
    from launcher.profiles.profile import ServingProfile

Say = Callable[[str], None]


@dataclass
class SweepOutcome:
    code: int
    message: str
    summary: dict[str, Any]  # the summary.json document


class Progress:
    """tqdm on a terminal, nothing otherwise."""

    def __init__(self, total: int, label: str) -> None:
        import sys

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
    target: Target,
    cfg: BenchConfig,
    spec: LevelSpec,
    prompts: list[Prompt],
    repeat: int,
    sink: Callable[[RequestRecord], None],
    cpu: list[float] | None = None,
) -> tuple[list[RequestRecord], float]:
    """Warm-up requests (not recorded), then the level: `concurrency` workers taking prompts in turn, or, with a
    request rate, requests sent at their arrival times with at most `concurrency` in flight. Returns the records and
    the level's wall time (first request sent to last token received). `cpu` gets the client's CPU seconds over
    the level (this process and its workers' streams), warm-up excluded."""
    tag = spec.tag

    async def send(index: int, start: float, queued: float = 0.0) -> RequestRecord:
        p = prompts[index % len(prompts)]
        record = RequestRecord(tag, repeat, index, p.input_len, p.output_len, queue_s=queued)
        await one_request(session, target, p.text, record, start, cfg.request_timeout_s, cfg.stall_timeout_s)
        if record.ok:
            record.length_ok = length_ok(cfg.endpoint, record)
        return record

    for i in range(cfg.warmup):
        await send(i, time.perf_counter())
    count = cfg.prompts_for(spec.concurrency, spec.request_rate)
    cpu0, worker_cpu = _client_cpu(), 0.0
    records: list[RequestRecord] = []
    timed = cfg.duration_s is not None and spec.request_rate is None
    progress = Progress(0 if timed else count, level_label(spec.__dict__))
    start = time.perf_counter()
    deadline = start + cfg.duration_s if timed and cfg.duration_s else None

    def done(record: RequestRecord) -> None:
        records.append(record)
        sink(record)
        progress.step()

    try:
        if spec.request_rate is None and cfg.processes_for(spec.concurrency or 1) > 1:
            start, worker_cpu = await procs.run_level_split(cfg, target, spec, prompts, repeat, count, done)
        elif spec.request_rate is None:
            assert spec.concurrency is not None
            next_index = 0

            async def worker() -> None:
                nonlocal next_index
                while (time.perf_counter() < deadline) if deadline is not None else next_index < count:
                    index = next_index
                    next_index += 1
                    done(await send(index, start))

            await asyncio.gather(*(worker() for _ in range(spec.concurrency)))
        else:
            cap = asyncio.Semaphore(spec.concurrency) if spec.concurrency else None

            async def arrive(index: int) -> None:
                if cap is None:
                    done(await send(index, start))
                    return
                arrived = time.perf_counter()
                async with cap:
                    done(await send(index, start, time.perf_counter() - arrived))

            tasks = []
            for index, offset in enumerate(
                arrival_offsets(count, spec.request_rate, cfg.burstiness_value(), cfg.seed + repeat)
            ):
                delay = start + offset - time.perf_counter()
                if delay > 0:
                    await asyncio.sleep(delay)
                tasks.append(asyncio.create_task(arrive(index)))
            await asyncio.gather(*tasks)
    finally:
        progress.close()
    if cpu is not None:
        cpu.append(_client_cpu() - cpu0 + worker_cpu)
    ends = [r.start_s + (r.e2e_s or 0) for r in records if r.ok]
    wall = max(ends) if ends else time.perf_counter() - start
    return records, wall


def _client_cpu() -> float:
    """CPU seconds of this process (worker processes report their own, start-up excluded)."""
    own = resource.getrusage(resource.RUSAGE_SELF)
    return own.ru_utime + own.ru_stime


async def build_prompts(
    session: aiohttp.ClientSession, target: Target, cfg: BenchConfig, specs: list[LevelSpec], info: ServerInfo
) -> dict[int, list[Prompt]]:
    """The prompt pool per prompt length (one pool without a context sweep), checked against the model's limit."""
    if cfg.dataset is not None:
        return {cfg.input_len: read_dataset(cfg.dataset, cfg.output_len)}
    limit = info.max_model_len(target.model)
    longest = max(s.input_len for s in specs)
    if limit is not None and longest + cfg.output_len > limit:
        raise BadInput(
            f"prompt {longest} + output {cfg.output_len} tokens is beyond the model's context of {limit} tokens",
            f"give --input-len / --context-lens up to {limit - cfg.output_len}",
        )
    tok = Tokenizer(session, target.url, target.model, target.headers)
    pools = {}
    for length in sorted({s.input_len for s in specs}):
        count = max(cfg.prompts_for(s.concurrency, s.request_rate) for s in specs if s.input_len == length)
        pools[length] = await exact_prompts(tok, length, cfg.output_len, count, cfg.seed, cfg.shared_prefix_len)
    return pools


def _digest(prompts: dict[int, list[Prompt]]) -> str:
    text = "\x00".join(f"{p.output_len}\x01{p.text}" for pool in prompts.values() for p in pool)
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def _workload(cfg: BenchConfig, model: str, prompts: dict[int, list[Prompt]]) -> dict[str, Any]:
    return {
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


async def sweep(cfg: BenchConfig, out: Path, served: dict[str, Any] | None, say: Say) -> SweepOutcome:
    main = asyncio.current_task()
    assert main is not None
    # SIGTERM and SIGHUP stop the sweep as Ctrl-C does: the summary says interrupted, everything measured is kept
    with async_interrupts(main.cancel):
        return await _sweep(cfg, out, served, say)


async def _sweep(cfg: BenchConfig, out: Path, served: dict[str, Any] | None, say: Say) -> SweepOutcome:
    specs = levels(cfg)
    connector = aiohttp.TCPConnector(limit=0, ttl_dns_cache=300)
    async with aiohttp.ClientSession(connector=connector, timeout=aiohttp.ClientTimeout(total=None)) as session:
        info = await server_info(session, cfg.url, cfg.api_key)
        target = Target(cfg.url, _model(cfg, info), cfg.endpoint, cfg.api_key)
        prompts = await build_prompts(session, target, cfg, specs, info)
        doc: dict[str, Any] = {
            "status": "running",
            "label": cfg.label,
            "workload": _workload(cfg, target.model, prompts),
            "provenance": prov.provenance(cfg, info, served),
            "warnings": prov.misconfiguration(cfg, served),
            "levels": [],
        }
        for w in doc["warnings"]:
            say(f"warning: {w}")
        results.write_summary(out, doc)
        log = results.RequestLog(out / "requests.jsonl")
        done: list[LevelResult] = []
        try:
            for spec in specs:
                pool = prompts[spec.input_len] if cfg.dataset is None else prompts[cfg.input_len]
                runs: list[tuple[list[RequestRecord], float]] = []
                cpu: list[float] = []
                try:
                    for repeat in range(cfg.repeats):
                        runs.append(await run_level(session, target, cfg, spec, pool, repeat, log.write, cpu))
                except asyncio.CancelledError:
                    doc["status"], doc["stopped_at"] = "interrupted", spec.__dict__.copy()
                    results.write_summary(out, doc)
                    raise
                level = summarize(spec, runs, dict(cfg.slo_ms), cfg.slo_share)
                done.append(level)
                wall = sum(w for _, w in runs)
                doc["levels"].append(
                    {  # the client's own CPU over the level: near 1 per process, the client was the bottleneck
                        **results.level_document(level),
                        "client_cpu_s": round(sum(cpu), 3),
                        "client_cpu_per_wall_s": round(sum(cpu) / wall, 3) if wall > 0 else None,
                    }
                )
                name = level_label(level, with_input=bool(cfg.context_lens))
                good = (
                    f", {level.goodput.share:.0%} within SLO"
                    if level.goodput and level.goodput.share is not None
                    else ""
                )
                say(f"{name}: {level.output_throughput_tok_s} tok/s, {level.completed} ok, {level.failed} failed{good}")
                first_records, first_wall = runs[0]
                results.write_vllm_result(
                    out,
                    spec,
                    results.vllm_result(cfg, spec, target.model, first_records, first_wall, level, results.now_stamp()),
                )
                log.check()
                doc["slo"] = slo_verdict(done)
                if level.failed and await _server_gone(session, target):
                    doc["status"], doc["stopped_at"] = "server-died", spec.__dict__.copy()
                    results.write_summary(out, doc)
                    return SweepOutcome(
                        ExitCode.PROBLEM,
                        f"the server stopped answering during {name}; the levels measured so far are in {out}",
                        doc,
                    )
                results.write_summary(out, doc)
        finally:
            log.close()
        doc["warnings"] += prov.after_run_warnings(cfg, doc["levels"])
        doc["status"] = "complete"
        results.write_summary(out, doc)
        failed = sum(level["failed"] for level in doc["levels"])
        code = ExitCode.PROBLEM if failed else ExitCode.OK
        return SweepOutcome(code, f"{failed} request(s) failed" if failed else "sweep complete", doc)


def _model(cfg: BenchConfig, info: ServerInfo) -> str:
    if not info.models:
        raise NotReady(f"{cfg.url} serves no model", "start vLLM with a model")
    served = [m["id"] for m in info.models]
    model = cfg.model or served[0]
    if model not in served:
        raise BadInput(f"{cfg.url} does not serve {model!r}", f"it serves {served}")
    return model


async def _server_gone(session: aiohttp.ClientSession, target: Target) -> bool:
    try:
        async with session.get(
            f"{target.url}/health", headers=target.headers, timeout=aiohttp.ClientTimeout(total=5)
        ) as resp:
            return resp.status >= 500
    except (TimeoutError, aiohttp.ClientError):
        return True


def _report(summary: dict[str, Any], out: Path) -> None:
    """report.md and the plots, over the levels that completed something (a level of nothing has no point to plot;
    the table and summary.json still show it)."""
    from launcher.bench.compare import write_report

    plotted = [lv for lv in summary.get("levels", []) if lv["completed"] and lv["concurrency"] is not None]
    write_report([{**summary, "levels": plotted, "_folder": str(out)}], out, [])


def run(cfg: BenchConfig, out: Path, served: dict[str, Any] | None, say: Say) -> SweepOutcome:
    """The sweep; on Ctrl-C or SIGTERM the summary says where it stopped and every finished request is in
    requests.jsonl. report.md and the plots are written for whatever levels were measured."""
    validate(cfg)
    with hold(out, "bench run"):
        _refuse_used(out)
        try:
            outcome = procs.run_async(sweep(cfg, out, served, say))
        except (KeyboardInterrupt, asyncio.CancelledError):
            doc = json.loads((out / "summary.json").read_text()) if (out / "summary.json").exists() else {}
            where = doc.get("stopped_at")
            at = f" at {level_label(where)}" if where else " before the first level"
            outcome = SweepOutcome(
                ExitCode.INTERRUPTED,
                f"interrupted{at}; the levels measured so far and every finished request are in {out}",
                doc,
            )
        if outcome.summary.get("levels"):
            try:
                _report(outcome.summary, out)
            except OSError as e:
                raise Unwritable(out / "report.md", e) from None
        return outcome


def _refuse_used(out: Path) -> None:
    if (out / "summary.json").exists():
        raise BadInput(f"{out} already holds a bench run", "give a new --out folder (runs are never overwritten)")


def measure_level(cfg: BenchConfig, spec: LevelSpec | int) -> LevelResult:
    """ONE level against cfg.url, nothing written: warm-up, the level (all repeats), its typed result. A bare
    int is a concurrency at cfg.input_len."""
    validate(cfg)
    if isinstance(spec, int):
        spec = LevelSpec(spec, None, cfg.input_len)

    async def go() -> LevelResult:
        connector = aiohttp.TCPConnector(limit=0)
        async with aiohttp.ClientSession(connector=connector, timeout=aiohttp.ClientTimeout(total=None)) as session:
            info = await server_info(session, cfg.url, cfg.api_key)
            target = Target(cfg.url, _model(cfg, info), cfg.endpoint, cfg.api_key)
            pool = (await build_prompts(session, target, cfg, [spec], info))[
                spec.input_len if cfg.dataset is None else cfg.input_len
            ]
            runs = [await run_level(session, target, cfg, spec, pool, r, lambda _: None) for r in range(cfg.repeats)]
            return summarize(spec, runs, dict(cfg.slo_ms), cfg.slo_share)

    return procs.run_async(go())


def run_served(
    profile_ref: str,
    model: str,
    python: Path | None,
    port: int,
    cfg: BenchConfig,
    out: Path,
    say: Say,
) -> SweepOutcome:
    """Start vLLM with a profile (nemolaunch serve's machinery), sweep it, stop it; the server's log goes to
    OUT/server.log and the profile and argv into the provenance."""
    from launcher.bench.preflight import preflight
    from launcher.serve import run as serve

    _refuse_used(out)  # before a server starts
    plan = preflight(profile_ref, model, python, cfg, port)
    for warning in serve.warnings(plan):
        say(f"warning: {warning}")
    served: dict[str, Any] = plan.provenance()
    with hold(out, "bench run"), serve.launched(plan, model, out / "server.log", say, echo_log=None) as running:
        served["startup_s"] = round(running.startup_s, 1)
        outcome = run(replace(cfg, url=plan.url, model=running.models[0]), out, served, say)
    _add_roofline(outcome, Path(model), out)
    _add_fallbacks(outcome, out / "server.log", plan.profile, out)
    return outcome


def _add_fallbacks(outcome: SweepOutcome, log: Path, profile: ServingProfile, out: Path) -> None:
    """Every fallback vLLM took at start (serve said each when it was serving) goes into summary.json too."""
    from launcher.serve import fallbacks

    outcome.summary["fallbacks"] = [f.to_json() for f in fallbacks.in_log(log, profile)]
    results.write_summary(out, outcome.summary)


def _add_roofline(outcome: SweepOutcome, model: Path, out: Path) -> None:
    """When bench started the server it knows the model folder: each level's share of the GPU's memory-bandwidth
    limit goes into summary.json (`roofline`; it says why when it does not apply, as on the CPU engine)."""
    from launcher.bench import roofline as roofline

    if not outcome.summary.get("levels"):
        return
    try:
        config = json.loads((model / "config.json").read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return
    outcome.summary["roofline"] = roofline.annotate(
        outcome.summary, config, hf_quant=roofline.hf_quant_of(model)
    ).to_json()
    results.write_summary(out, outcome.summary)
