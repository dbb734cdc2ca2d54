"""`nemolaunch ab`: is configuration B faster than A on this machine? Interleaved, order-balanced bench passes on
the same model and prompts, a verdict per level against the measured noise, and whether both give the same answers.

A round is one balanced block: A B B A (A B C C B A for more sides; the next round starts from the other end),
so linear drift cancels inside every round and each round gives one paired ratio per side, level and metric.
Every pass is a normal bench run in its own folder (compare reads it). Servers are co-resident by default (each
its own share of memory, started once, the idle one doing no work), or restarted per block. A side whose server
cannot start is a result: infeasible, with nemolaunch's diagnosis of its log.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from launcher.ab import floor, stats
from launcher.ab.answers import compare_answers, greedy_answers
from launcher.ab.config import AbConfig
from launcher.ab.document import (
    AB_SCHEMA,
    AbDocument,
    AnswersDoc,
    InvalidPassDoc,
    RoundDoc,
    RunStatus,
    SideStatus,
    VerdictDoc,
    read_ab,
)
from launcher.ab.passes import METRICS, PassResult, pass_result
from launcher.ab.report import sentence, write_report
from launcher.ab.servers import ServerPool, Up
from launcher.ab.sides import Side, choose_mode, dummy_weights, is_cpu_engine, side_profile
from launcher.errors import BadInput, ExitCode, NemolaunchError
from launcher.output import atomic_write_text

Say = Callable[[str], None]
# vLLM's CPU engine always runs its worker in a separate process fed through a shared-memory queue whose reader
# spins (sched_yield) for 1 s after its last read before it sleeps on a socket (vLLM 0.32 shm_broadcast
# SpinCondition, busy_loop_s=1); idle after that, a co-resident CPU server measured 1.4% CPU. So before a pass on
# another side than the last one, wait out the idle server's spin: it would otherwise share the 2 cores with the
# first second of the measured pass. A single-GPU server (vLLM 0.26 'uni' executor) has no such queue: no wait.
CPU_SETTLE_S = 1.2


@dataclass
class SideState:
    side: Side
    status: SideStatus = "pending"
    diagnosis: str | None = None
    served: dict[str, Any] | None = None
    answers: list[list[int]] | None = None
    answers_error: str | None = None
    startups_s: list[float] = field(default_factory=list)


@dataclass
class AbOutcome:
    code: int
    message: str
    doc: AbDocument


def block_order(names: list[str], round_index: int) -> list[str]:
    """A B B A in even rounds, B A A B in odd ones (for three: A B C C B A, then C B A A B C)."""
    forward = names if round_index % 2 == 0 else names[::-1]
    return forward + forward[::-1]


class AbRun:
    """State of one ab run; `doc()` is ab.json at any moment (so an interrupted run writes what it has)."""

    def __init__(self, cfg: AbConfig, out: Path, mode: str, mode_reason: str) -> None:
        self.cfg, self.out, self.mode, self.mode_reason = cfg, out, mode, mode_reason
        sides = list(cfg.sides)
        if cfg.calibrate:
            base = cfg.sides[0]
            sides.append(Side(f"{base.name}-again", base.profile_ref, dict(base.overrides)))
        self.calibration = sides[-1].name if cfg.calibrate else None
        self.states = {s.name: SideState(s) for s in sides}
        self.profiles = {s.name: side_profile(s) for s in sides}
        self.last_side: str | None = None  # the side of the last pass (co-resident CPU servers settle on a switch)
        self.rounds: list[RoundDoc] = []
        self.invalid: list[InvalidPassDoc] = []
        self.status: RunStatus = "running"
        self.started = time.strftime("%Y-%m-%dT%H:%M:%S%z")

    def resume(self, doc: AbDocument) -> None:
        """Continue a run from its ab.json: its rounds, invalid passes and what each side showed stay; a side that
        could not start is not retried (its diagnosis stands), one that died is."""
        self.rounds, self.invalid, self.started = list(doc["rounds"]), list(doc["invalid_passes"]), doc["started"]
        for s in doc["sides"]:
            st = self.states.get(s["name"])
            if st is None:
                continue
            if s["status"] == "infeasible":
                st.status, st.diagnosis = "infeasible", s["diagnosis"]
            st.startups_s = list(s["startups_s"])
            st.answers, st.answers_error = s["answer_tokens"], s["answers_error"]

    @property
    def base(self) -> str:
        return self.cfg.sides[0].name

    def live_names(self) -> list[str]:
        return [n for n, st in self.states.items() if st.status not in ("infeasible", "died")]

    def ratios(self, name: str) -> dict[int, dict[str, list[float]]]:
        """Per level and metric, the valid per-round ratios of `name` to the baseline."""
        out: dict[int, dict[str, list[float]]] = {c: {m: [] for m in METRICS} for c in self.cfg.workload.concurrency}
        for rnd in self.rounds:
            for c in self.cfg.workload.concurrency:
                mine, base = rnd["means"].get(name, {}).get(str(c)), rnd["means"].get(self.base, {}).get(str(c))
                if not mine or not base:
                    continue
                for m in METRICS:
                    if mine.get(m) and base.get(m):
                        out[c][m].append(mine[m] / base[m])
        return out

    def floor(self) -> tuple[floor.Floors, str]:
        levels = self.cfg.workload.concurrency
        if self.calibration:
            return floor.measured(self.ratios(self.calibration))
        if self.cfg.noise_floor:
            return floor.stored(levels, self.cfg.noise_floor, self.cfg.noise_floor_source)
        return floor.unmeasured(levels)

    def verdicts(self) -> dict[str, dict[str, dict[str, VerdictDoc]]]:
        floors, _ = self.floor()
        out: dict[str, dict[str, dict[str, VerdictDoc]]] = {}
        for name, st in self.states.items():
            if name == self.base or st.status == "infeasible":
                continue
            ratios = self.ratios(name)
            per_level: dict[str, dict[str, VerdictDoc]] = {}
            for c in self.cfg.workload.concurrency:
                per_metric: dict[str, VerdictDoc] = {}
                for m in METRICS:
                    v = stats.verdict(m, ratios[c][m], stats.margin_for(floors[c][m]))
                    per_metric[m] = stats.noise_side(v) if name == self.calibration and floors[c][m] else v
                per_level[str(c)] = per_metric
            out[name] = per_level
        return out

    def answers(self) -> AnswersDoc:
        base = self.states[self.base]
        got = {n: (st.answers, st.answers_error) for n, st in self.states.items() if n != self.base}
        argv = list((base.served or {}).get("argv") or [])
        return compare_answers(argv, self.cfg.same_answers, (base.answers, base.answers_error), got)

    def doc(self) -> AbDocument:
        floors, source = self.floor()
        w = self.cfg.workload
        return {
            "schema": AB_SCHEMA,
            "status": self.status,
            "config_digest": self.cfg.digest(),
            "started": self.started,
            "mode": self.mode,
            "mode_reason": self.mode_reason,
            "method": stats.METHOD,
            "model": self.cfg.model,
            "baseline": self.base,
            "calibration_side": self.calibration,
            "workload": {
                "concurrency": list(w.concurrency),
                "input_len": w.input_len,
                "output_len": w.output_len,
                "num_prompts": w.num_prompts,
                "warmup_requests": w.warmup_requests,
                "warmup_passes": self.cfg.warmup_passes,
                "rounds_asked": self.cfg.rounds,
                "seed": w.seed,
            },
            "sides": [
                {
                    "name": name,
                    "profile": st.side.profile_ref,
                    "overrides": st.side.overrides,
                    "status": st.status,
                    "diagnosis": st.diagnosis,
                    "startups_s": st.startups_s,
                    "served": st.served,
                    "answer_tokens": st.answers,
                    "answers_error": st.answers_error,
                }
                for name, st in self.states.items()
            ],
            "rounds": self.rounds,
            "invalid_passes": self.invalid,
            "noise_floor": floor.as_doc(floors, source),
            "verdicts": self.verdicts(),
            "answers": self.answers(),
        }

    def write(self) -> None:
        atomic_write_text(self.out / "ab.json", json.dumps(self.doc(), indent=2))


def _bench_pass(run: AbRun, up: Up, folder: Path, side: str) -> PassResult:
    from launcher import bench

    if run.mode == "co-resident" and run.last_side not in (None, side) and is_cpu_engine(run.profiles[side]):
        time.sleep(CPU_SETTLE_S)
    run.last_side = side
    w = run.cfg.workload
    cfg = bench.BenchConfig(
        url=up.url,
        model=up.served_model,
        concurrency=w.concurrency,
        input_len=w.input_len,
        output_len=w.output_len,
        num_prompts=w.num_prompts,
        warmup=w.warmup_requests,
        label=side,
        seed=w.seed,
        api_key=up.api_key,
    )
    outcome = bench.run(cfg, folder, up.info, lambda m: None)
    if outcome.code == ExitCode.INTERRUPTED:
        raise KeyboardInterrupt
    return pass_result(outcome.summary, folder)


def _start(run: AbRun, pool: ServerPool, name: str, say: Say) -> Up | None:
    """The side's server (started if needed, then warmed up); None when it cannot start: that side is infeasible."""
    st = run.states[name]
    try:
        up, fresh = pool.ensure(st.side)
    except NemolaunchError as e:
        st.status, st.diagnosis = "infeasible", e.message
        say(f"{name}: cannot start: {e.message}")
        run.write()
        return None
    st.status, st.served = "ok", up.info
    if fresh:  # a server another run started (tune's pool) is warm already
        st.startups_s.append(round(up.startup_s, 1))
        start = len(st.startups_s)
        for k in range(run.cfg.warmup_passes):
            _bench_pass(run, up, _pass_folder(run, f"warmup-{name}-{start}-{k + 1}"), name)
    if st.answers is None and st.answers_error is None and run.cfg.same_answers and not dummy_weights(up.info["argv"]):
        try:
            st.answers = greedy_answers(up.url, up.served_model, up.api_key)
        except (OSError, ValueError, KeyError) as e:
            st.answers_error = f"{type(e).__name__}: {e}"
    run.write()
    return up


def run_ab(cfg: AbConfig, out: Path, say: Say, pool: ServerPool | None = None) -> AbOutcome:
    """The whole ab run. Ctrl-C or SIGTERM: the round under way is dropped, the completed ones are kept and
    judged, servers are stopped; exit 130."""
    from launcher.serve.lifetime import interrupts

    if len({s.name for s in cfg.sides}) != len(cfg.sides):
        raise BadInput("two configurations have the same name", "name each --config differently")
    if len(cfg.sides) < 2:
        raise BadInput("ab needs at least two configurations", "give --a and --b, or two --config")
    previous = _previous_run(cfg, out)
    for side in cfg.sides:
        side_profile(side)  # refuse a bad profile or override before any server starts
    mode, reason = choose_mode(cfg.mode, cfg.sides)
    run = AbRun(cfg, out, mode, reason)
    out.mkdir(parents=True, exist_ok=True)
    if previous is not None:
        run.resume(previous)
        say(f"ab: continuing the run in {out}: {len(run.rounds)} round(s) kept, {cfg.rounds} asked")
    say(f"ab: {len(run.states)} configurations, mode {mode} ({reason}); results in {out}")
    own_pool = pool is None
    pool = pool or ServerPool(cfg.model, cfg.python, mode, out / "logs", say, shares=len(run.states))
    run.write()
    try:
        with interrupts():
            for r in range(len(run.rounds), cfg.rounds):
                _one_round(run, pool, r, say)
                if run.states[run.base].status != "ok" or len(run.live_names()) < 2:
                    break
        run.status = "complete"
    except KeyboardInterrupt:
        run.status = "interrupted"
    finally:
        if own_pool:
            pool.close()
        run.write()
    doc = run.doc()
    write_report(doc, out)
    return AbOutcome(_exit_code(run), _summary_line(run), doc)


def _previous_run(cfg: AbConfig, out: Path) -> AbDocument | None:
    """The ab.json an earlier run of the same command left in OUT, to continue; None for a new folder."""
    path = out / "ab.json"
    if not path.exists():
        return None
    doc = read_ab(path)
    if doc["config_digest"] != cfg.digest():
        raise BadInput(
            f"{out} holds an ab run with other settings",
            "give a new --out folder, or the same options to continue that run",
        )
    if doc["status"] == "complete" and len(doc["rounds"]) >= cfg.rounds:
        raise BadInput(f"{out} holds a complete ab run of {cfg.rounds} round(s)", "ask for more --rounds to extend it")
    return doc


def _pass_folder(run: AbRun, stem: str) -> Path:
    """passes/STEM, or STEM-2, -3 ... when an interrupted attempt left that folder (never overwritten)."""
    folder, k = run.out / "passes" / stem, 1
    while folder.exists():
        k += 1
        folder = run.out / "passes" / f"{stem}-{k}"
    return folder


def _one_round(run: AbRun, pool: ServerPool, r: int, say: Say) -> None:
    order = block_order(run.live_names(), r)
    rnd: RoundDoc = {"index": r + 1, "order": order, "passes": [], "means": {}}
    values: dict[str, list[dict[int, dict[str, float | None] | None]]] = {}  # side -> its passes' levels
    for i, name in enumerate(order):
        if run.states[name].status in ("infeasible", "died"):
            continue
        up = _start(run, pool, name, say)
        if up is None:
            continue
        folder = _pass_folder(run, f"r{r + 1}-{i + 1}-{name}")
        result = _bench_pass(run, up, folder, name)
        where = str(folder.relative_to(run.out))
        if result.status == "server-died":
            run.states[name].status, run.states[name].diagnosis = "died", f"the server stopped answering in {folder}"
        rnd["passes"].append({"side": name, "folder": where, "status": result.status})
        per_level: dict[int, dict[str, float | None] | None] = {}
        for c in run.cfg.workload.concurrency:
            lv = result.levels.get(c)
            per_level[c] = dict(lv.values) if lv is not None and lv.valid else None
            if per_level[c] is None:
                reason = f"{lv.failed} failed request(s)" if lv else "level not measured"
                run.invalid.append({"round": r + 1, "side": name, "folder": where, "concurrency": c, "reason": reason})
        values.setdefault(name, []).append(per_level)
    for name, per_pass in values.items():
        rnd["means"][name] = {str(c): _block_mean([p[c] for p in per_pass]) for c in run.cfg.workload.concurrency}
    run.rounds.append(rnd)
    run.write()
    for name, judged in run.verdicts().items():
        for level, metric in judged.items():
            say(f"round {r + 1}: {name} vs {run.base} at c={level}: {sentence(metric['output_tok_s'], name)}")


def _block_mean(got: list[dict[str, float | None] | None]) -> dict[str, float] | None:
    """A side's value in one round: the mean of its passes in the block. Both must be valid, or the round is not
    balanced for that level (and is left out)."""
    if len(got) < 2 or any(g is None for g in got):
        return None
    valid = [g for g in got if g is not None]
    return {m: sum(float(g[m] or 0) for g in valid) / len(valid) for m in METRICS if all(g.get(m) for g in valid)}


def _exit_code(run: AbRun) -> int:
    if run.status == "interrupted":
        return ExitCode.INTERRUPTED
    if any(st.status in ("infeasible", "died") for st in run.states.values()):
        return ExitCode.PROBLEM
    return ExitCode.OK


def _summary_line(run: AbRun) -> str:
    done = len(run.rounds)
    bad = [n for n, st in run.states.items() if st.status in ("infeasible", "died")]
    parts = [f"{done} round(s) {'kept (interrupted)' if run.status == 'interrupted' else 'measured'}"]
    if bad:
        parts.append(f"could not serve: {', '.join(bad)}")
    return "; ".join(parts)
