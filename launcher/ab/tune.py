"""`nemolaunch tune`: search serving settings end to end and write the profile that won, with its evidence.

Candidates come from probe evidence (close calls, or a fastest kernel that is not vLLM's choice) and from serving
knobs (launcher.ab.candidates). Every candidate first gets one ABBA round against the base (screening: one that
cannot start, or is clearly worse, stops there). The finalists, and the winning ones combined, then run one ab
together with the base: its stopping rule, its noise (--calibrate, --noise or the machine's stored one) and its
threshold decide. A setting is written only when its headline cleared the threshold; a win inside it is a tie,
and a tie keeps the base (fewer overrides, vLLM's own defaults). Nothing measured, nothing written: tune says why
and exits 1. A state file in OUT makes a rerun of the same command continue where the last one stopped.
"""

from __future__ import annotations

import hashlib
import json
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, replace
from pathlib import Path

from launcher import noise as noise_rule
from launcher.ab.calibration import Levels
from launcher.ab.candidates import KNOBS, Candidate, Context, candidates, slug
from launcher.ab.config import ROUNDS, WINDOW_S, WORKLOAD, AbConfig, Workload
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
from launcher.ab.run import check_workload, pass_workload, run_ab
from launcher.ab.servers import ServerPool
from launcher.ab.sides import Side
from launcher.errors import BadInput, ExitCode, NotReady
from launcher.output import hold, write_json
from launcher.profiles.profile import load_profile

Say = Callable[[str], None]
DROP_BELOW = 0.90  # screening: a candidate at least 10% slower at the headline is clearly worse
FINALISTS = 2
# before anything is measured: a GPU server start is 60-170 s (H200, vLLM 0.26); a pass is its window and ~5 s
FIRST_GUESS_START_S = 120.0
PASS_OVERHEAD_S = 5.0


@dataclass(frozen=True)
class TuneConfig:
    model: str
    base: str = "cpu"
    budget_min: float = 30.0
    workload: Workload = WORKLOAD
    rounds: int = ROUNDS
    window_s: float = WINDOW_S
    threshold: float = noise_rule.THRESHOLD
    headline_level: int | None = None
    calibrate: bool = False
    knobs: tuple[str, ...] = tuple(KNOBS)
    probe: Path | None = None
    python: Path | None = None
    name: str | None = None
    noise: Levels | None = None
    noise_source: str | None = None

    def digest(self) -> str:
        """What makes two tune runs the same run: the options (but the budget), the base profile's contents and the
        engine's interpreter (an edited base or another engine is a new run)."""
        from launcher.engine import resolve_python

        doc = {k: str(v) for k, v in asdict(self).items() if k != "budget_min"}
        base = load_profile(self.base)
        python = resolve_python(self.python, base.python).path
        doc["resolved"] = json.dumps([base.settings, base.env, str(python)], sort_keys=True, default=str)
        return hashlib.sha256(json.dumps(doc, sort_keys=True).encode()).hexdigest()[:12]

    def ab(self, sides: tuple[Side, ...], rounds: int, budget_min: float | None, calibrate: bool) -> AbConfig:
        return AbConfig(model=self.model, sides=sides, workload=self.workload, rounds=rounds, window_s=self.window_s,
                        threshold=self.threshold, budget_min=budget_min, headline_level=self.headline_level,
                        calibrate=calibrate, noise=self.noise, noise_source=self.noise_source, python=self.python,
                        mode="co-resident")  # fmt: skip


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
        write_json(self.path, self.data)


def fresh_dir(parent: Path, stem: str) -> Path:
    """A new folder for a trial: an interrupted attempt's folder is kept, never overwritten."""
    k = 1
    while (parent / f"{stem}-{k}").exists():
        k += 1
    return parent / f"{stem}-{k}"


def _cost(cfg: TuneConfig, starts: int, passes: int, seen: dict[str, float]) -> float:
    """Seconds for `starts` server starts and `passes` passes at each level, at the pace seen so far."""
    pass_s = seen.get("measure_s", cfg.window_s + PASS_OVERHEAD_S)
    return starts * seen.get("start_s", FIRST_GUESS_START_S) + passes * len(cfg.workload.concurrency) * pass_s


def _learn(seen: dict[str, float], doc: AbDocument) -> None:
    starts = [s for side in doc["sides"] for s in side["startups_s"]]
    if starts:
        seen["start_s"] = max(starts)
    times = [p["seconds"] for r in doc["rounds"] for p in r["passes"]]
    if times:
        seen["measure_s"] = max(times)


def run_tune(cfg: TuneConfig, out: Path, say: Say) -> TuneOutcome:
    from launcher.ab.tuned import write_tuned_profile
    from launcher.serve.lifetime import interrupts

    base = load_profile(cfg.base)
    cands, skipped = candidates(cfg.knobs, Context(base, cfg.workload, cfg.probe))
    screening = cfg.ab((Side("base", cfg.base), Side("candidate", cfg.base)), 2, None, False)
    check_workload(screening)
    pool = ServerPool(cfg.model, cfg.python, "co-resident", out / "logs", say, shares=2 + FINALISTS)
    pool.preflight([Side("base", cfg.base)], pass_workload(screening))  # usage and environment errors: no server
    with hold(out, "tune"):
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
        final = _final_doc(out, state.data["final"])
        doc = _summary(cfg, state, final, cands, skipped, not_tested, interrupted)
        if final is not None and doc["winner"] and doc["winner"] != "base" and not interrupted:
            doc["profile"] = str(write_tuned_profile(cfg, out, base, state.data, final, doc, skipped))
        write_json(out / "tune.json", doc)
    return TuneOutcome(*_ending(doc, doc["winner"] is not None, interrupted), doc)


def _ending(doc: TuneDocument, measured: bool, interrupted: bool) -> tuple[int, str]:
    """The exit code and the last line: a profile only from a final whose verdict chose it; without a final, nothing
    is written and the line says why."""
    if interrupted:
        return ExitCode.INTERRUPTED, "interrupted: finished trials kept; run the same command to resume"
    if doc["profile"]:
        return ExitCode.OK, f"winner {doc['winner']}; profile {doc['profile']}"
    if measured or (doc["candidates"] and all(t["status"] in ("dropped", "infeasible") for t in doc["trials"])
                    and len(doc["trials"]) == len(doc["candidates"])):  # fmt: skip
        return ExitCode.OK, f"{doc['decision']}; no profile written"
    return ExitCode.PROBLEM, f"{doc['decision']}; no profile written"


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
    # the first trial runs when its server starts fit (nothing is timed yet), and teaches the estimate for the rest
    if time.monotonic() + _cost(cfg, 2, 4 if "measure_s" in seen else 0, seen) > deadline:
        not_tested.append(f"{cand.name}: screening did not fit the budget")
        return
    folder = fresh_dir(out / "screen", slug(cand.name))
    side = Side(slug(cand.name), cfg.base, cand.overrides)
    say(f"tune: screening {cand.name} ({cand.why})")
    alone = "gpu_memory_utilization" in cand.overrides  # memory needs the device alone: its own restarted run
    trial: TrialDoc = {"name": cand.name, "stage": "screen", "status": "infeasible",
                       "folder": str(folder.relative_to(out)), "ratios": {}, "overrides": cand.overrides,
                       "why": cand.why, "diagnosis": None}  # fmt: skip
    screening = cfg.ab((Side("base", cfg.base), side), 1, None, False)
    try:
        result = run_ab(replace(screening, mode="auto") if alone else screening, folder, say, None if alone else pool)
    except (BadInput, NotReady) as e:  # the base passed the same checks: this vLLM refuses the candidate's flags
        trial["diagnosis"] = e.message
        _record(state, trial, say)
        return
    _learn(seen, result.doc)
    if result.code == ExitCode.INTERRUPTED:
        raise KeyboardInterrupt
    sides = {s["name"]: s for s in result.doc["sides"]}
    if sides["base"]["status"] != "ok":
        raise BadInput(
            f"the base profile {cfg.base} cannot serve: {sides['base']['diagnosis']}",
            "fix the base profile first (nemolaunch serve --smoke)",
        )
    mine = sides[side.name]
    per_level = result.doc["verdicts"].get(side.name, {})
    ratios = {c: next(iter(v["output_tok_s"]["ratios"]), None) for c, v in per_level.items()}
    headline = ratios.get(str(result.doc["headline_level"]))
    if mine["status"] != "ok":
        status = "infeasible"
    elif headline is not None and headline < DROP_BELOW:
        status = "dropped"
    elif alone:
        status = "screened-alone"
        not_tested.append(f"{cand.name}: memory needs the device alone; confirm with nemolaunch ab --mode restart")
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


def _combined(finalists: list[TrialDoc], threshold: float) -> tuple[str, dict[str, object]] | None:
    """The finalists that each won their screening round beyond the threshold, tried together: their overrides
    merged (None when fewer than two won, or two set the same key differently)."""
    winning = [t for t in finalists if any((r or 0) > 1 + threshold for r in t["ratios"].values())]
    if len(winning) < 2:
        return None
    merged: dict[str, object] = {}
    for t in winning:
        for k, v in t["overrides"].items():
            if k in merged and merged[k] != v:
                return None
            merged[k] = v
    return "+".join(t["name"] for t in winning), merged


def _final(
    cfg: TuneConfig, out: Path, state: TuneState, deadline: float, not_tested: list[str], say: Say, pool: ServerPool
) -> None:
    """The finalists and their combination, interleaved with the base in one ab, until its rule stops it."""
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
    sides = [Side("base", cfg.base), *(Side(slug(t["name"]), cfg.base, t["overrides"]) for t in finalists)]
    combined = _combined(finalists, cfg.threshold)
    if combined:
        sides.append(Side(slug(combined[0]), cfg.base, combined[1]))
    left_min = (deadline - time.monotonic()) / 60
    two_rounds = _cost(cfg, len(sides), 2 * 2 * len(sides), state.data["seen"]) / 60
    if left_min < two_rounds:
        not_tested.append(f"the final: two rounds take about {two_rounds:.0f} min, {max(0, left_min):.0f} min left")
        return
    folder = fresh_dir(out / "final", "ab")
    say(f"tune: final: {', '.join(s.name for s in sides[1:])} against the base, up to {cfg.rounds} rounds")
    result = run_ab(cfg.ab(tuple(sides), cfg.rounds, left_min, cfg.calibrate), folder, say, pool)
    if result.code == ExitCode.INTERRUPTED:
        raise KeyboardInterrupt
    names = [t["name"] for t in finalists] + ([combined[0]] if combined else [])
    state.data["final"] = {"folder": str(folder.relative_to(out)), "finalists": names}
    state.save()


def _final_doc(out: Path, final: FinalDoc | None) -> AbDocument | None:
    """The final's ab.json (its folder is kept relative to OUT: a tune folder can be resumed from anywhere)."""
    return read_ab(out / final["folder"] / "ab.json") if final else None


def decide(final_doc: AbDocument, names: dict[str, str], overrides: dict[str, int]) -> tuple[str | None, str]:
    """The winner and why: among the sides whose headline is "better", the fastest; one within the threshold of it
    with fewer overrides wins instead (a tie); none better: the base stays; none judged at all: no winner."""
    c = str(final_doc["headline_level"])
    judged = {names[s]: v[c]["output_tok_s"] for s, v in final_doc["verdicts"].items() if s in names}
    if not any(v["kind"] != "insufficient" for v in judged.values()):
        dropped = sorted({d for v in judged.values() for d in v["dropped"]})
        why = f": {dropped[0]}" + (f" (and {len(dropped) - 1} more)" if len(dropped) > 1 else "") if dropped else ""
        return None, f"nothing measured enough to choose: the final judged no headline (c={c}){why}"
    better = [(n, v) for n, v in judged.items() if v["kind"] == "better"]
    if not better:
        threshold = f"{final_doc['threshold']:.1%}"
        return "base", f"the base stays: no candidate's headline (c={c}) cleared the {threshold} threshold"
    best_mean = max(v["mean"] or 0 for _, v in better)
    close = [(n, v) for n, v in better if (v["mean"] or 0) * (1 + final_doc["threshold"]) >= best_mean]
    name, v = min(close, key=lambda nv: (overrides.get(nv[0], 0), -(nv[1]["mean"] or 0)))
    return name, f"{name}: {((v['mean'] or 1) - 1) * 100:+.1f}% at c={c}, beyond the threshold"


def _summary(
    cfg: TuneConfig,
    state: TuneState,
    final_doc: AbDocument | None,
    cands: list[Candidate],
    skipped: list[str],
    not_tested: list[str],
    interrupted: bool,
) -> TuneDocument:
    trials = list(state.data["trials"].values())
    names = {slug(t["name"]): t["name"] for t in trials}
    overrides = {t["name"]: len(t["overrides"]) for t in trials}
    for name in state.data["final"]["finalists"] if state.data["final"] else []:
        names.setdefault(slug(name), name)
        overrides.setdefault(name, name.count("+") + 1)
    winner: str | None = None
    if final_doc is not None:
        winner, decision = decide(final_doc, names, overrides)
    elif not cands:
        decision = "nothing to try: no knob suggested a candidate"
    elif trials and len(trials) == len(cands) and all(t["status"] in ("dropped", "infeasible") for t in trials):
        decision = "the base stays: every candidate was infeasible or clearly worse in screening"
    else:
        decision = "nothing measured enough to choose: " + ("; ".join(not_tested) or "no final ran")
    tested = {t["name"] for t in trials}
    not_tested = not_tested + [f"{c.name}: not reached" for c in cands if c.name not in tested and interrupted]
    return {
        "schema": TUNE_SCHEMA,
        "status": "interrupted" if interrupted else "complete",
        "base": cfg.base,
        "candidates": [asdict(c) for c in cands],
        "considered_not_tried": skipped,
        "trials": trials,
        "final": state.data["final"],
        "winner": winner,
        "decision": decision,
        "not_tested": not_tested,
        "profile": None,
    }
