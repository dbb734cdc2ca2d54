"""`nemolaunch ab`: is configuration B faster than A on this machine? Interleaved, order-balanced passes of the
same workload, one judged headline per side against the measured noise and a threshold, and whether both give the
same answers.

A round is, at each level, one balanced block: A B B A (A B C C B A for more sides; the next round starts from
the other end), so linear drift cancels inside the block and each round gives one paired ratio per side, level
and metric. Every pass is a bench run at one level (compare reads it) that holds the concurrency for a steady
window; ramp-up and drain are recorded, not averaged in. Before each pass the server's prefix cache is emptied,
and NVML and the server's log say whether the machine measured something else meanwhile (launcher.ab.guard).
Each server start is warmed up with prompts the passes never send, until its throughput stops drifting.

After every round from the second, the headline (output tok/s at the headline level) is judged at Pocock's level
for the planned rounds; the run stops as soon as every side's headline is decided, when the planned rounds are
done, or when the budget cannot hold another round, and says which.

Servers are co-resident by default (each its own share of memory, started together, the idle one doing no work),
or restarted per block. A side whose server cannot start is a result: infeasible, with the diagnosis of its log.
"""

from __future__ import annotations

import contextlib
import math
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from launcher.ab import calibration
from launcher.ab.answers import greedy_answers
from launcher.ab.config import AbConfig
from launcher.ab.document import AbDocument, RoundDoc, read_ab
from launcher.ab.measure import ServerDied, Values, measure
from launcher.ab.passes import METRICS
from launcher.ab.report import sentence, write_report
from launcher.ab.servers import ServerPool, StartFailed, Up
from launcher.ab.sides import choose_mode, dummy_weights, run_digest
from launcher.ab.state import AbRun
from launcher.ab.warmup import lengthen_short, round_estimate, size_windows, warm_up
from launcher.errors import BadInput, ExitCode, NemolaunchError
from launcher.output import hold

if TYPE_CHECKING:
    from launcher.bench.config import BenchConfig

Say = Callable[[str], None]


@dataclass
class AbOutcome:
    code: int
    message: str
    doc: AbDocument


def block_order(names: list[str], round_index: int) -> list[str]:
    """A B B A in even rounds, B A A B in odd ones (for three: A B C C B A, then C B A A B C)."""
    forward = names if round_index % 2 == 0 else names[::-1]
    return forward + forward[::-1]


def _infeasible(run: AbRun, name: str, e: NemolaunchError, say: Say) -> None:
    st = run.states[name]
    st.status, st.diagnosis = "infeasible", e.message
    say(f"{name}: cannot start: {e.message}")
    run.write()


def _died(run: AbRun, pool: ServerPool, name: str, why: str, say: Say) -> None:
    st = run.states[name]
    st.status, st.diagnosis = "died", why
    say(f"{name}: {why}: out of the run")
    pool.release(name)


def _start_all(run: AbRun, pool: ServerPool, say: Say) -> None:
    """Co-resident: every live side's server started together (in parallel), before the round's first pass."""
    if pool.mode != "co-resident":
        return
    for name, got in pool.start([run.states[n].side for n in run.live_names()]).items():
        if isinstance(got, StartFailed):
            _infeasible(run, name, got, say)
        else:
            run.fresh.add(name)  # started now: _start records it and warms it up


def _start(run: AbRun, pool: ServerPool, name: str, say: Say) -> Up | None:
    """The side's server (started if needed, then warmed up); None when it cannot start: that side is infeasible."""
    st = run.states[name]
    try:
        up, fresh = pool.ensure(st.side)
    except StartFailed as e:
        _infeasible(run, name, e, say)
        return None
    st.status, st.served = "ok", up.info
    if fresh or name in run.fresh:
        run.fresh.discard(name)
        st.startups_s.append(round(up.startup_s, 1))
        warm_up(run, pool, up, name, say, run.cfg.warmup_passes)
    elif not any(side == name for side, _ in run.paces):  # warm from another run (tune's pool): one pass to pace it
        warm_up(run, pool, up, name, say, min(1, run.cfg.warmup_passes))
    if st.answers is None and st.answers_error is None and run.cfg.same_answers and not dummy_weights(up.info["argv"]):
        try:
            st.answers = greedy_answers(up.url, up.served_model, up.api_key)
        except (OSError, ValueError, KeyError) as e:
            st.answers_error = f"{type(e).__name__}: {e}"
    run.write()
    return up


class BudgetSpent(Exception):
    """The server starts and warm-ups left too little of the budget for the rounds a verdict needs."""

    def __init__(self, needed_s: float) -> None:
        super().__init__(needed_s)
        self.needed_s = needed_s  # what the rounds a first look needs would take at the sized windows


def _one_round(run: AbRun, pool: ServerPool, r: int, say: Say, deadline: float | None) -> float:
    """One order-balanced block at each level; a side that dies leaves the run, the others go on."""
    _start_all(run, pool, say)
    if pool.mode == "co-resident":  # every server up and warm before the first pass: the windows can be sized
        for name in run.live_names():
            _start(run, pool, name, say)
        size_windows(run, say)
    if deadline is not None and not run.rounds:  # a first look needs 2 rounds (a screening 1): both must fit
        needed = min(2, run.cfg.rounds) * round_estimate(run)
        if time.monotonic() + needed > deadline:
            raise BudgetSpent(needed)
    measured_from = time.monotonic()
    rnd: RoundDoc = {"index": r + 1, "order": block_order(run.live_names(), r), "passes": [], "means": {}}
    values: dict[str, dict[int, list[Values]]] = {}  # side -> level -> its passes' values
    for c in run.cfg.workload.concurrency:
        for i, name in enumerate(block_order(run.live_names(), r)):
            if run.states[name].status in ("infeasible", "died"):
                continue
            up = _start(run, pool, name, say)
            if up is None:
                continue
            stem = f"r{r + 1}-c{c}-{i + 1}-{name}"
            try:
                doc, got = measure(run, pool, up, name, c, stem)
            except ServerDied as e:
                _died(run, pool, name, e.message, say)
                continue
            rnd["passes"].append(doc)
            values.setdefault(name, {}).setdefault(c, []).append(got)
            if doc["status"] == "server-died":
                _died(run, pool, name, f"the server stopped answering in {doc['folder']}", say)
    for name, levels in values.items():
        rnd["means"][name] = {str(c): _block_mean(levels.get(c, [])) for c in run.cfg.workload.concurrency}
    run.rounds.append(rnd)
    run.write()
    judged = run.verdicts()
    for name in run.compared():
        v = judged.get(name, {}).get(str(run.cfg.headline), {}).get("output_tok_s")
        if v is not None:
            say(f"round {r + 1}: {name} vs {run.base} at c={run.cfg.headline}: {sentence(v, name)}")
    return time.monotonic() - measured_from


def _block_mean(got: list[Values]) -> dict[str, float] | None:
    """A side's value in one round: the mean of its passes in the block. Both must be valid, or the round is not
    balanced for that level (and is left out)."""
    if len(got) < 2 or any(g is None for g in got):
        return None
    valid = [g for g in got if g is not None]
    return {m: sum(float(g[m] or 0) for g in valid) / len(valid) for m in METRICS if all(g.get(m) for g in valid)}


def _plan(run: AbRun, deadline: float | None, round_s: float) -> None:
    """The rounds planned, fixed before the first look (its boundary depends on them): the most asked, or what
    the budget holds at the pace of the first round."""
    if run.planned_rounds is not None:
        return
    rounds = run.cfg.rounds
    if deadline is not None:
        left = deadline - time.monotonic()
        rounds = min(rounds, len(run.rounds) + max(0, math.floor(left / max(round_s, 1e-3))))
    run.planned_rounds = max(min(2, run.cfg.rounds), rounds)  # a look needs 2 rounds; a screening asks for 1


def _rounds(run: AbRun, pool: ServerPool, say: Say, began: float) -> None:
    """Rounds until the rule stops them; the budget counts from the command's start (server starts included)."""
    deadline = began + run.cfg.budget_min * 60 if run.cfg.budget_min is not None else None
    while len(run.rounds) < (run.planned_rounds or run.cfg.rounds):
        try:
            round_s = _one_round(run, pool, len(run.rounds), say, deadline)
        except BudgetSpent as e:
            spent = time.monotonic() - began
            left = max(0.0, (deadline or 0.0) - time.monotonic())
            run.stopped_by = (
                f"budget: server starts and warm-ups took {spent:.0f} s of it, before any measured "
                f"round; the rounds a first verdict needs take about {e.needed_s:.0f} s, "
                f"{left:.0f} s were left"
            )
            return
        lengthen_short(run, run.rounds[-1]["passes"], say)
        _plan(run, deadline, round_s)
        if run.states[run.base].status != "ok" or len(run.live_names()) < 2:
            run.stopped_by = "too few sides left to compare"
            return
        n = len(run.rounds)
        if n >= 2 and run.decided():
            run.stopped_by = f"decided after round {n}: every headline cleared the threshold or fell within it"
            return
        if deadline is not None and n < (run.planned_rounds or 0):
            left = deadline - time.monotonic()
            round_s = max(round_s, round_estimate(run))  # the windows may have grown
            if left < round_s:
                run.stopped_by = f"budget: another round takes about {round_s:.0f} s, {max(0, left):.0f} s left"
                return
    run.stopped_by = f"the {len(run.rounds)} planned rounds are done"


def run_ab(cfg: AbConfig, out: Path, say: Say, pool: ServerPool | None = None) -> AbOutcome:
    """The whole ab run. Ctrl-C, SIGTERM or SIGHUP: the round under way is dropped, the completed ones are kept and
    judged, servers are stopped; exit 130."""
    from launcher.serve.lifetime import interrupts

    began = time.monotonic()
    check_workload(cfg)
    digest = run_digest(cfg)
    mode, reason = choose_mode(cfg.mode, cfg.sides)
    reason = cfg.mode_reason or reason
    own_pool = pool is None
    run = AbRun(cfg, out, mode, reason, digest)
    pool = pool or ServerPool(cfg.model, cfg.python, mode, out / "logs", say, shares=len(run.states))
    vllm = pool.preflight(cfg.sides, pass_workload(cfg))  # usage and environment errors: no server, nothing written
    with hold(out, "ab"):
        previous = _previous_run(cfg, out, digest)
        w = cfg.workload
        key = calibration.machine(cfg.model, vllm, mode, cfg.window_s, w.input_len, w.output_len)
        if cfg.noise is None and not cfg.calibrate:
            found = calibration.stored(key, cfg.workload.concurrency)
            if found:
                run.given, run.given_source = found
        if previous is not None:
            run.resume(previous)
            say(f"ab: continuing the run in {out}: {len(run.rounds)} round(s) kept")
        say(f"ab: {len(run.states)} configurations, mode {mode} ({reason}); results in {out}")
        run.write()
        try:
            with interrupts():
                _rounds(run, pool, say, began)
            run.status = "complete"
        except KeyboardInterrupt:
            run.status, run.stopped_by = "interrupted", "interrupted"
        except BaseException:
            run.status = "failed"  # the run cannot go on: ab.json and the report say so, then the error is raised
            raise
        finally:
            if own_pool:
                pool.close()
            with contextlib.suppress(OSError):  # a full disk: the error being raised says more than a second one
                run.write()
                write_report(run.doc(), out)
        doc = run.doc()
        if run.calibration and doc["noise"]["source"] == "A/A this run":
            noise, _ = run.noise()
            calibration.store(key, noise, str(out))
    return AbOutcome(_exit_code(run), _summary_line(run), doc)


def check_workload(cfg: AbConfig) -> None:
    """ab's own options, refused before anything else (the workload is bench's preflight's: `pass_workload`)."""
    if len({s.name for s in cfg.sides}) != len(cfg.sides):
        raise BadInput("two configurations have the same name", "name each --config differently")
    if len(cfg.sides) < 2:
        raise BadInput("ab needs at least two configurations", "give --a and --b, or two --config")
    if cfg.headline not in cfg.workload.concurrency:
        raise BadInput(f"--headline-level {cfg.headline} is not one of the levels", "give one of --concurrency")
    if not 0 < cfg.threshold < 0.5:
        raise BadInput(f"--threshold {cfg.threshold} is not a fraction in (0, 0.5)", "e.g. --threshold 0.02 for 2%")
    if not (math.isfinite(cfg.window_s) and 1 <= cfg.window_s <= 3600):
        raise BadInput(f"--window {cfg.window_s} is not between 1 and 3600 seconds", "e.g. --window 10")
    if cfg.budget_min is not None and not (math.isfinite(cfg.budget_min) and cfg.budget_min > 0):
        raise BadInput(f"--budget {cfg.budget_min} is not a positive number of minutes", "e.g. --budget 15")


def pass_workload(cfg: AbConfig) -> BenchConfig:
    """The load a pass sends, as bench's preflight checks it (its values, and prompt plus output against each
    side's context) before any server starts."""
    from launcher.bench.config import BenchConfig

    w = cfg.workload
    return BenchConfig(url="http://127.0.0.1", concurrency=w.concurrency, input_len=w.input_len,
                       output_len=w.output_len, num_prompts=w.num_prompts, duration_s=cfg.window_s,
                       seed=w.seed)  # fmt: skip


def _previous_run(cfg: AbConfig, out: Path, digest: str) -> AbDocument | None:
    """The ab.json an earlier run of the same command left in OUT, to continue; None for a new folder."""
    path = out / "ab.json"
    if not path.exists():
        return None
    doc = read_ab(path)
    if doc["config_digest"] != digest:
        raise BadInput(
            f"{out} holds an ab run with other settings (options, a profile's contents or the engine differ)",
            "give a new --out folder, or the same options, profiles and engine to continue that run",
        )
    if (
        doc["status"] == "complete"
        and doc["planned_rounds"]
        and len(doc["rounds"]) >= min(cfg.rounds, doc["planned_rounds"])
    ):
        raise BadInput(f"{out} holds a complete ab run ({doc['stopped_by']})", "give a new --out folder")
    return doc


def _exit_code(run: AbRun) -> int:
    if run.status == "interrupted":
        return ExitCode.INTERRUPTED
    if any(st.status in ("infeasible", "died") for st in run.states.values()):
        return ExitCode.PROBLEM
    if not run.rounds:  # the budget went to starts and warm-ups: nothing was measured, nothing can be used
        return ExitCode.PROBLEM
    return ExitCode.OK


def _summary_line(run: AbRun) -> str:
    done = len(run.rounds)
    bad = [n for n, st in run.states.items() if st.status in ("infeasible", "died")]
    parts = [f"{done} round(s) {'kept (interrupted)' if run.status == 'interrupted' else 'measured'}"]
    if run.stopped_by and run.status != "interrupted":
        parts.append(f"stopped: {run.stopped_by}")
    if bad:
        parts.append(f"could not serve: {', '.join(bad)}")
    return "; ".join(parts)
