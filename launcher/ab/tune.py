"""`nemolaunch tune`: search serving settings end to end and write the profile that won, with its evidence.

Candidates come from probe evidence (close calls, or a fastest kernel that is not vLLM's choice) and from
serving knobs (launcher.ab.candidates). Effort goes where it decides: every candidate first gets one short ABBA
round against the base (screening: infeasible or clearly worse ones stop there), then the finalists run
interleaved together with the base for the full rounds (`ab`). A candidate whose server cannot start is
infeasible, with nemolaunch's log diagnosis, and is not retried. The budget is checked before each trial; what
did not fit is reported. A state file in OUT makes a rerun of the same command continue where the last one stopped.
"""

from __future__ import annotations

import hashlib
import json
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path

from launcher.ab.candidates import KNOBS, Candidate, Context, candidates, slug
from launcher.ab.config import ROUNDS, WORKLOAD, AbConfig, Workload
from launcher.ab.document import (
    TUNE_SCHEMA,
    AbDocument,
    FinalDoc,
    TrialDoc,
    TuneDocument,
    TuneStateDoc,
    read_ab,
    read_tune_state,
)
from launcher.ab.report import trial_result
from launcher.ab.run import check_workload, run_ab
from launcher.ab.servers import ServerPool
from launcher.ab.sides import Side
from launcher.errors import BadInput, ExitCode, NotReady
from launcher.output import atomic_write_text
from launcher.profiles.profile import load_profile

Say = Callable[[str], None]
DROP_BELOW = 0.90  # screening: a candidate at least 10% slower at every level is clearly worse
FINALISTS = 2
# before anything is measured: a GPU server start is 60-170 s (H200, vLLM 0.26), a short pass tens of seconds
FIRST_GUESS_START_S = 120.0
FIRST_GUESS_PASS_S = 30.0
SCREEN_PASSES = 4 + 2  # one A B B A block, and one warm-up pass per server start


@dataclass(frozen=True)
class TuneConfig:
    model: str
    base: str = "cpu"
    budget_min: float = 30.0
    workload: Workload = WORKLOAD
    rounds: int = ROUNDS
    knobs: tuple[str, ...] = tuple(KNOBS)
    probe: Path | None = None
    python: Path | None = None
    name: str | None = None
    # a stored A/A floor (ab --noise-floor) for the final's verdicts: tune runs no A/A of its own
    noise_floor: dict[int, dict[str, float]] | None = None
    noise_floor_source: str | None = None

    def digest(self) -> str:
        """What makes two tune runs the same run: the options (but the budget), the base profile's contents and the
        engine's interpreter (an edited base or another engine is a new run)."""
        from launcher.engine import resolve_python

        doc = {k: str(v) for k, v in asdict(self).items() if k != "budget_min"}
        base = load_profile(self.base)
        python = resolve_python(self.python, base.python).path
        doc["resolved"] = json.dumps([base.settings, base.env, str(python)], sort_keys=True, default=str)
        return hashlib.sha256(json.dumps(doc, sort_keys=True).encode()).hexdigest()[:12]


@dataclass
class TuneOutcome:
    code: int
    message: str
    doc: TuneDocument


class TuneState:
    """OUT/tune-state.json: the trials finished so far; a rerun of the same command continues from it."""

    def __init__(self, out: Path, digest: str) -> None:
        self.path = out / "tune-state.json"
        self.data: TuneStateDoc = {"digest": digest, "trials": {}, "final": None, "seen": {}}
        if self.path.is_file():
            data = read_tune_state(self.path)
            if data["digest"] != digest:
                raise BadInput(
                    f"{out} holds a tune run with other settings", "give a new --out, or the same options to resume"
                )
            self.data = data

    def save(self) -> None:
        atomic_write_text(self.path, json.dumps(self.data, indent=2))


def fresh_dir(parent: Path, stem: str) -> Path:
    """A new folder for a trial: an interrupted attempt's folder is kept, never overwritten."""
    k = 1
    while (parent / f"{stem}-{k}").exists():
        k += 1
    return parent / f"{stem}-{k}"


def _ab_config(cfg: TuneConfig, sides: tuple[Side, ...], rounds: int) -> AbConfig:
    return AbConfig(
        model=cfg.model,
        sides=sides,
        workload=cfg.workload,
        rounds=rounds,
        python=cfg.python,
        same_answers=True,
        noise_floor=cfg.noise_floor,
        noise_floor_source=cfg.noise_floor_source,
    )


def _screening_ratios(doc: AbDocument, name: str) -> dict[str, float | None]:
    """A screening round's output tok/s ratio to the base per level (one round: no interval yet)."""
    per_level = doc["verdicts"].get(name, {})
    return {c: next(iter(v["output_tok_s"]["ratios"]), None) for c, v in per_level.items()}


def _cost(starts: int, passes: int, seen: dict[str, float]) -> float:
    return starts * seen.get("start_s", FIRST_GUESS_START_S) + passes * seen.get("pass_s", FIRST_GUESS_PASS_S)


def _learn(seen: dict[str, float], doc: AbDocument, seconds: float, passes: int) -> None:
    starts = [s for side in doc["sides"] for s in side["startups_s"]]
    if starts:
        seen["start_s"] = max(starts)
    bench_time = max(0.0, seconds - sum(starts))
    if passes:
        seen["pass_s"] = max(1.0, bench_time / passes)


def run_tune(cfg: TuneConfig, out: Path, say: Say) -> TuneOutcome:
    from launcher.ab.tuned import write_tuned_profile
    from launcher.serve.lifetime import interrupts

    base = load_profile(cfg.base)
    cands, skipped = candidates(cfg.knobs, Context(base, cfg.workload, cfg.probe))
    check_workload(_ab_config(cfg, (Side("base", cfg.base), Side("candidate", cfg.base)), 1))
    # one co-resident pool for the whole search: the base starts once, a finalist stays up for the final rounds
    pool = ServerPool(cfg.model, cfg.python, "co-resident", out / "logs", say, shares=1 + FINALISTS)
    pool.preflight([Side("base", cfg.base)])  # usage and environment errors, before any server
    out.mkdir(parents=True, exist_ok=True)
    state = TuneState(out, cfg.digest())
    deadline = time.monotonic() + cfg.budget_min * 60
    not_tested: list[str] = []
    say(f"tune: {len(cands)} candidate(s): {', '.join(c.name for c in cands) or 'none'}")
    for line in skipped:
        say(f"tune: considered, not tried: {line}")
    interrupted = False
    try:
        with interrupts():
            for cand in cands:
                if cand.name not in state.data["trials"]:
                    _screen(cfg, out, state, cand, deadline, not_tested, say, pool)
            _final(cfg, out, state, deadline, not_tested, say, pool)
    except KeyboardInterrupt:
        interrupted = True
    finally:
        pool.close()
    state.save()
    doc = _summary(cfg, out, state, cands, skipped, not_tested, interrupted)
    final = _final_doc(out, state.data["final"])
    if final is not None and not interrupted:
        doc["profile"] = str(write_tuned_profile(cfg, out, base, state.data, final, doc, skipped))
    atomic_write_text(out / "tune.json", json.dumps(doc, indent=2))
    code, message = _ending(doc, final is not None, interrupted)
    return TuneOutcome(code, message, doc)


def _ending(doc: TuneDocument, measured: bool, interrupted: bool) -> tuple[int, str]:
    """The exit code and the last line: a profile only from a final that measured its candidates; without one,
    nothing is written and the line says why."""
    if interrupted:
        return ExitCode.INTERRUPTED, "interrupted: finished trials kept; run the same command to resume"
    if measured:
        return ExitCode.OK, f"winner {doc['winner']}; profile {doc['profile']}"
    if not doc["candidates"]:
        return ExitCode.PROBLEM, "nothing to try: no knob suggested a candidate; no profile written"
    decided = [t for t in doc["trials"] if t["status"] in ("dropped", "infeasible")]
    if len(decided) == len(doc["candidates"]):
        return ExitCode.OK, "the base stays: every candidate was infeasible or clearly worse; no profile written"
    why = "; ".join(doc["not_tested"]) or "no finalist reached the interleaved final"
    return ExitCode.PROBLEM, f"nothing measured enough to choose: {why}; no profile written"


def _screen(
    cfg: TuneConfig,
    out: Path,
    state: TuneState,
    cand: Candidate,
    deadline: float,
    not_tested: list[str],
    say: Say,
    pool: ServerPool,
) -> None:
    """One ABBA round of a candidate against the base, co-resident (the base kept up across trials)."""
    seen = state.data["seen"]
    # before any pass is timed, its length is unknown (a guess would be off by 10x between workloads): the first
    # trial runs when its server starts fit, and teaches the estimate for the rest
    if time.monotonic() + _cost(2, SCREEN_PASSES if "pass_s" in seen else 0, seen) > deadline:
        not_tested.append(f"{cand.name}: screening did not fit the budget")
        return
    folder = fresh_dir(out / "screen", slug(cand.name))
    side = Side(slug(cand.name), cfg.base, cand.overrides)
    say(f"tune: screening {cand.name} ({cand.why})")
    started = time.monotonic()
    # a memory candidate needs the device alone: its own run, restarted (auto mode)
    alone = "gpu_memory_utilization" in cand.overrides
    trial: TrialDoc = {"name": cand.name, "stage": "screen", "status": "infeasible",
                       "folder": str(folder.relative_to(out)), "ratios": {}, "overrides": cand.overrides,
                       "why": cand.why, "diagnosis": None}  # fmt: skip
    try:
        result = run_ab(_ab_config(cfg, (Side("base", cfg.base), side), 1), folder, say, None if alone else pool)
    except (BadInput, NotReady) as e:  # the base passed the same checks: this vLLM refuses the candidate's flags
        trial["diagnosis"] = e.message
        _record(state, trial, say)
        return
    _learn(seen, result.doc, time.monotonic() - started, SCREEN_PASSES)
    if result.code == ExitCode.INTERRUPTED:
        raise KeyboardInterrupt
    sides = {s["name"]: s for s in result.doc["sides"]}
    if sides["base"]["status"] != "ok":
        raise BadInput(
            f"the base profile {cfg.base} cannot serve: {sides['base']['diagnosis']}",
            "fix the base profile first (nemolaunch serve --smoke)",
        )
    mine = sides[side.name]
    ratios = _screening_ratios(result.doc, side.name)
    if mine["status"] != "ok":
        status = "infeasible"
    elif ratios and all(r is not None and r < DROP_BELOW for r in ratios.values()):
        status = "dropped"
    elif alone:
        status = "screened-alone"
        not_tested.append(
            f"{cand.name}: screened alone (memory needs the device), not in the co-resident final; "
            "confirm with nemolaunch ab --mode restart"
        )
    else:
        status = "finalist"
    if status != "finalist":
        pool.release(side.name)
    trial["status"], trial["ratios"], trial["diagnosis"] = status, ratios, mine["diagnosis"]
    _record(state, trial, say)


def _record(state: TuneState, trial: TrialDoc, say: Say) -> None:
    state.data["trials"][trial["name"]] = trial
    state.save()
    say(f"tune: {trial['name']}: {trial['status']}: {trial_result(trial)}")


def _final(
    cfg: TuneConfig, out: Path, state: TuneState, deadline: float, not_tested: list[str], say: Say, pool: ServerPool
) -> None:
    """The finalists, interleaved together with the base for the full rounds, on the servers screening left up."""
    if state.data["final"]:
        return
    trials = [t for t in state.data["trials"].values() if t["status"] == "finalist"]
    trials.sort(key=lambda t: -max((r or 0) for r in t["ratios"].values()) if t["ratios"] else 0)
    finalists = trials[:FINALISTS]
    not_tested += [f"{t['name']}: not among the {FINALISTS} best finalists" for t in trials[FINALISTS:]]
    for t in trials[FINALISTS:]:
        pool.release(slug(t["name"]))
    if not finalists:
        return
    rounds = cfg.rounds
    while rounds >= 2:
        passes = 2 * (len(finalists) + 1) * rounds
        if time.monotonic() + _cost(0, passes, state.data["seen"]) <= deadline:
            break
        rounds -= 1
    if rounds < 2:
        not_tested.append("final interleaved rounds: two rounds did not fit the budget (screening verdicts only)")
        return
    if rounds < cfg.rounds:
        not_tested.append(f"final rounds: {rounds} of {cfg.rounds} fit the budget")
    sides = (Side("base", cfg.base), *(Side(slug(t["name"]), cfg.base, t["overrides"]) for t in finalists))
    folder = fresh_dir(out / "final", "ab")
    say(f"tune: final: {', '.join(t['name'] for t in finalists)} against the base, {rounds} interleaved rounds")
    result = run_ab(_ab_config(cfg, sides, rounds), folder, say, pool)
    if result.code == ExitCode.INTERRUPTED:
        raise KeyboardInterrupt
    state.data["final"] = {"folder": str(folder.relative_to(out)), "finalists": [t["name"] for t in finalists]}
    state.save()


def _final_doc(out: Path, final: FinalDoc | None) -> AbDocument | None:
    """The final's ab.json (its folder is kept relative to OUT: a tune folder can be resumed from anywhere)."""
    return read_ab(out / final["folder"] / "ab.json") if final else None


def winners(final_doc: AbDocument, names: dict[str, str]) -> dict[str, str]:
    """Per level: the finalist that is faster than the base outside the noise by the most, else the base."""
    out: dict[str, str] = {}
    for c in (str(c) for c in final_doc["workload"]["concurrency"]):
        best, best_mean = "base", 0.0
        for side, per_level in final_doc["verdicts"].items():
            v = per_level[c]["output_tok_s"]
            if side in names and v["kind"] == "better" and (v["mean"] or 0) > best_mean:
                best, best_mean = names[side], v["mean"] or 0
        out[c] = best
    return out


def _summary(
    cfg: TuneConfig,
    out: Path,
    state: TuneState,
    cands: list[Candidate],
    skipped: list[str],
    not_tested: list[str],
    interrupted: bool,
) -> TuneDocument:
    trials = list(state.data["trials"].values())
    final = state.data["final"]
    final_doc = _final_doc(out, final)
    by_level = winners(final_doc, {slug(t["name"]): t["name"] for t in trials}) if final_doc else {}
    counts: dict[str, int] = {}
    for name in by_level.values():
        counts[name] = counts.get(name, 0) + 1
    winner = max(counts, key=lambda n: (counts[n], n != "base")) if counts else None
    load_notes: list[str] = []
    if len(set(counts)) > 1:
        load_notes.append("the winner changes with load: " + ", ".join(f"c={c}: {n}" for c, n in by_level.items()))
    tested = {t["name"] for t in trials}
    not_tested = not_tested + [f"{c.name}: not reached" for c in cands if c.name not in tested and interrupted]
    return {
        "schema": TUNE_SCHEMA,
        "status": "interrupted" if interrupted else "complete",
        "base": cfg.base,
        "candidates": [asdict(c) for c in cands],
        "considered_not_tried": skipped,
        "trials": trials,
        "final": final,
        "winner": winner,
        "winners_by_level": by_level,
        "load_notes": load_notes,
        "not_tested": not_tested,
        "profile": None,
    }
