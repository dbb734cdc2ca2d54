"""The sweep: level after level against one server, each finished request logged at once and the summary
rewritten after every level, so Ctrl-C, SIGTERM or a dying server keep what was measured."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

import aiohttp

from checks.model_config import ConfigError, read_hf_quant_config, read_model_config
from launcher.bench import procs, results
from launcher.bench import provenance as prov
from launcher.bench.client import RequestRecord, ServerInfo, Target, server_info
from launcher.bench.config import BenchConfig, LevelSpec, levels, prompt_len, validate
from launcher.bench.level import build_prompts, run_level
from launcher.bench.stats import LevelResult, level_label, summarize
from launcher.bench.summary import mean_prompt_tokens, slo_verdict, workload_document
from launcher.documents import read_json
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
            "workload": workload_document(cfg, target.model, prompts),
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
                pool = prompts[spec.input_len]
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
                        "client_processes": cfg.processes_for(spec.concurrency or 1)
                        if spec.request_rate is None
                        else 1,
                    }
                )
                doc["workload"]["mean_prompt_tokens"] = mean_prompt_tokens(doc["levels"])
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

    plotted = [lv for lv in summary.get("levels", []) if lv["completed"]]
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
            summary = out / "summary.json"  # what the sweep wrote as it stopped
            doc = read_json(summary, "the sweep's own summary") if summary.exists() else {}
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
        spec = LevelSpec(spec, None, prompt_len(cfg))

    async def go() -> LevelResult:
        connector = aiohttp.TCPConnector(limit=0)
        async with aiohttp.ClientSession(connector=connector, timeout=aiohttp.ClientTimeout(total=None)) as session:
            info = await server_info(session, cfg.url, cfg.api_key)
            target = Target(cfg.url, _model(cfg, info), cfg.endpoint, cfg.api_key)
            pool = (await build_prompts(session, target, cfg, [spec], info))[spec.input_len]
            runs = [await run_level(session, target, cfg, spec, pool, r, lambda _: None) for r in range(cfg.repeats)]
            return summarize(spec, runs, dict(cfg.slo_ms), cfg.slo_share)

    return procs.run_async(go())


def run_served(
    profile_ref: str,
    model: str,
    python: Path | None,
    port: int | None,
    cfg: BenchConfig,
    out: Path,
    say: Say,
) -> SweepOutcome:
    """Start vLLM with a profile (nemolaunch serve's machinery), sweep it, stop it; the server's log goes to
    OUT/server.log and the profile and argv into the provenance."""
    from launcher.bench.preflight import preflight
    from launcher.serve import run as serve
    from launcher.serve.process import free_port

    _refuse_used(out)  # before a server starts
    plan = preflight(profile_ref, model, python, cfg, port or free_port())  # a private server: any free port
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
        config = read_model_config(model)
    except ConfigError:
        return
    outcome.summary["roofline"] = roofline.annotate(
        outcome.summary, config, hf_quant=read_hf_quant_config(model)
    ).to_json()
    results.write_summary(out, outcome.summary)
