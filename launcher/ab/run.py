"""`nemolaunch ab`: is configuration B faster than A on this machine? Interleaved, order-balanced bench passes on
the same model and prompts, a verdict per level against the measured noise, and whether both give the same answers.

A round is one balanced block: A B B A (A B C C B A for more sides; the next round starts from the other end),
so linear drift cancels inside every round and each round gives one paired ratio per side, level and metric.
Every pass is a normal bench run in its own folder (compare reads it). Servers are co-resident by default (each
its own share of memory, started once, the idle one doing no work), or restarted per block. A side whose server
cannot start is a result: infeasible, with nemolaunch's diagnosis of its log.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from launcher.ab.answers import greedy_answers
from launcher.ab.config import AbConfig
from launcher.ab.document import AbDocument, RoundDoc, read_ab
from launcher.ab.passes import METRICS, PassResult, pass_result
from launcher.ab.report import sentence, write_report
from launcher.ab.servers import ServerPool, StartFailed, Up
from launcher.ab.sides import choose_mode, dummy_weights, is_cpu_engine, run_digest
from launcher.ab.state import AbRun
from launcher.errors import BadInput, ExitCode, NemolaunchError

Say = Callable[[str], None]
# vLLM's CPU engine always runs its worker in a separate process fed through a shared-memory queue whose reader
# spins (sched_yield) for 1 s after its last read before it sleeps on a socket (vLLM 0.32 shm_broadcast
# SpinCondition, busy_loop_s=1); idle after that, a co-resident CPU server measured 1.4% CPU. So before a pass on
# another side than the last one, wait out the idle server's spin: it would otherwise share the 2 cores with the
# first second of the measured pass. A single-GPU server (vLLM 0.26 'uni' executor) has no such queue: no wait.
CPU_SETTLE_S = 1.2


@dataclass
class AbOutcome:
    code: int
    message: str
    doc: AbDocument


def block_order(names: list[str], round_index: int) -> list[str]:
    """A B B A in even rounds, B A A B in odd ones (for three: A B C C B A, then C B A A B C)."""
    forward = names if round_index % 2 == 0 else names[::-1]
    return forward + forward[::-1]


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
    try:
        outcome = bench.run(cfg, folder, up.info, lambda m: None)
    except NemolaunchError as e:
        if up.alive():
            raise
        raise ServerDied(f"the server stopped answering in {folder.relative_to(run.out)} ({e.message})") from None
    if outcome.code == ExitCode.INTERRUPTED:
        raise KeyboardInterrupt
    if not up.alive():
        raise ServerDied(f"the server died during {folder.relative_to(run.out)}")
    return pass_result(outcome.summary, folder)


class ServerDied(NemolaunchError):
    """A side's server stopped between or during passes: that side is out of the run (the others go on)."""


def _start_all(run: AbRun, pool: ServerPool, names: list[str], say: Say) -> None:
    """Co-resident: every live side's server started together (in parallel), before the round's first pass."""
    if pool.mode != "co-resident":
        return
    for name, got in pool.start([run.states[n].side for n in names]).items():
        if isinstance(got, StartFailed):
            _infeasible(run, name, got, say)


def _infeasible(run: AbRun, name: str, e: NemolaunchError, say: Say) -> None:
    st = run.states[name]
    st.status, st.diagnosis = "infeasible", e.message
    say(f"{name}: cannot start: {e.message}")
    run.write()


def _start(run: AbRun, pool: ServerPool, name: str, say: Say) -> Up | None:
    """The side's server (started if needed, then warmed up); None when it cannot start: that side is infeasible."""
    st = run.states[name]
    try:
        up, fresh = pool.ensure(st.side)
    except StartFailed as e:
        _infeasible(run, name, e, say)
        return None
    st.status, st.served = "ok", up.info
    if fresh or name not in run.warmed:  # a server another run started (tune's pool) is warm already
        if fresh:
            st.startups_s.append(round(up.startup_s, 1))
        run.warmed.add(name)
        start = len(st.startups_s)
        for k in range(run.cfg.warmup_passes if fresh else 0):
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

    check_workload(cfg)
    digest = run_digest(cfg)
    previous = _previous_run(cfg, out, digest)
    mode, reason = choose_mode(cfg.mode, cfg.sides)
    run = AbRun(cfg, out, mode, reason, digest)
    own_pool = pool is None
    pool = pool or ServerPool(cfg.model, cfg.python, mode, out / "logs", say, shares=len(run.states))
    pool.preflight(st.side for st in run.states.values())  # usage and environment errors, before any server
    out.mkdir(parents=True, exist_ok=True)
    if previous is not None:
        run.resume(previous)
        say(f"ab: continuing the run in {out}: {len(run.rounds)} round(s) kept, {cfg.rounds} asked")
    say(f"ab: {len(run.states)} configurations, mode {mode} ({reason}); results in {out}")
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
    except BaseException:
        run.status = "failed"  # an error the run cannot go on from: ab.json and the report say so, then it is raised
        raise
    finally:
        if own_pool:
            pool.close()
        with contextlib.suppress(OSError):  # a full disk: the error being raised says more than a second one
            run.write()
            write_report(run.doc(), out)
    doc = run.doc()
    return AbOutcome(_exit_code(run), _summary_line(run), doc)


def check_workload(cfg: AbConfig) -> None:
    """The configurations and the workload, refused before any server starts."""
    from launcher import bench

    if len({s.name for s in cfg.sides}) != len(cfg.sides):
        raise BadInput("two configurations have the same name", "name each --config differently")
    if len(cfg.sides) < 2:
        raise BadInput("ab needs at least two configurations", "give --a and --b, or two --config")
    w = cfg.workload
    bench.validate(bench.BenchConfig(url="http://127.0.0.1", concurrency=w.concurrency, input_len=w.input_len,
                                     output_len=w.output_len, num_prompts=w.num_prompts, warmup=w.warmup_requests,
                                     seed=w.seed))  # fmt: skip


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
    _start_all(run, pool, run.live_names(), say)
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
        where = str(folder.relative_to(run.out))
        try:
            result = _bench_pass(run, up, folder, name)
        except ServerDied as e:
            _died(run, pool, name, e.message, say)
            rnd["passes"].append({"side": name, "folder": where, "status": "server-died"})
            continue
        if result.status == "server-died":
            _died(run, pool, name, f"the server stopped answering in {where}", say)
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


def _died(run: AbRun, pool: ServerPool, name: str, why: str, say: Say) -> None:
    st = run.states[name]
    st.status, st.diagnosis = "died", why
    say(f"{name}: {why}: out of the run")
    pool.release(name)


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
