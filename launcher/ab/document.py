"""ab.json, tune.json and tune-state.json: one typed shape each, shared by the writer and every reader, and one
reader each that validates and names the field that is wrong (a hand-edited or truncated file is one line, never a
KeyError).

Level keys are strings ("8"), as JSON keeps them; a level's concurrency is an int everywhere else.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Literal, TypedDict

from launcher.documents import Reader, read_json

AB_SCHEMA = "nemolaunch.ab/3"
TUNE_SCHEMA = "nemolaunch.tune/3"
SideStatus = Literal["pending", "ok", "infeasible", "died"]
RunStatus = Literal["running", "complete", "interrupted", "failed"]
Kind = Literal["better", "worse", "equivalent", "inconclusive", "insufficient", "noise"]
SIDE_STATUSES = ("pending", "ok", "infeasible", "died")
RUN_STATUSES = ("running", "complete", "interrupted", "failed")
KINDS = ("better", "worse", "equivalent", "inconclusive", "insufficient", "noise")


class WorkloadDoc(TypedDict):
    concurrency: list[int]
    input_len: int
    output_len: int
    num_prompts: int | None  # distinct prompts per pass (cycled through the window); None: bench's 4 x concurrency
    window_s: float  # the steady window each pass aims for
    warmup_passes: int  # the most unmeasured passes per server start and level
    rounds_asked: int  # the most rounds
    budget_min: float | None
    seed: int


class SideDoc(TypedDict):
    name: str
    profile: str
    overrides: dict[str, Any]
    status: SideStatus
    diagnosis: str | None
    startups_s: list[float]
    served: dict[str, Any] | None  # bench's `served` provenance of the side's last server
    answer_tokens: list[list[int]] | None
    answers_error: str | None


class WindowDoc(TypedDict):
    start_s: float
    end_s: float
    ramp_s: float
    drain_s: float
    in_flight: float
    requests: int
    tok_s: float | None
    ttft_ms: float | None
    tpot_ms: float | None
    latency_s: float
    short: str | None


class PassDoc(TypedDict):
    side: str
    level: int
    folder: str  # relative to the run's folder
    status: str  # bench's status: complete, interrupted, server-died
    invalid: str | None  # why it is not averaged in
    window: WindowDoc | None
    gpu: dict[str, Any]  # NVML during the pass (launcher.ab.guard)
    prefix_reset: str  # "reset", or why not
    seconds: float


class WarmupDoc(TypedDict):
    side: str
    start: int  # the side's n-th server start
    level: int
    passes: int
    settled: bool  # throughput stopped drifting (CoV of the last bins under the limit) within the passes allowed
    cov: float | None


class RoundDoc(TypedDict):
    index: int
    order: list[str]
    passes: list[PassDoc]
    means: dict[str, dict[str, dict[str, float] | None]]  # side -> level -> metric -> the block's mean


class VerdictDoc(TypedDict):
    """One side against the baseline, one level, one metric: the numbers a sentence is rendered from."""

    metric: str
    kind: Kind
    n: int  # rounds
    mean: float | None  # ratio B/A (1.05 = +5%)
    lo: float | None  # the interval at `level`
    hi: float | None
    level: float  # the two-sided level of the interval (Pocock's for the planned looks, split over the comparisons)
    threshold: float
    noise: float | None  # the measured per-round log-ratio spread it was pooled with; None: not measured
    noise_source: str | None
    sd: float | None  # the spread the interval used
    more_rounds: int | None
    ratios: list[float]  # the raw per-round ratios
    headline: bool  # the one judged comparison per side; the rest are exploratory
    dropped: list[str]  # passes left out of this level, with the reason


class LevelNoise(TypedDict):
    sd: float
    df: int
    bias: float


class NoiseDoc(TypedDict):
    source: str
    measured: bool
    levels: dict[str, dict[str, LevelNoise | None]]


class AgreementDoc(TypedDict):
    prompts: int
    identical: int
    agreement: float | None  # the share of token positions where both answers agree
    first_divergence: list[int | None]
    error: str | None  # why the answers were not compared


class AnswersDoc(TypedDict):
    applies: bool
    note: str | None  # why not compared, when it does not apply
    prompts: list[str]
    max_tokens: int
    sides: dict[str, AgreementDoc]


class AbDocument(TypedDict):
    schema: str
    status: RunStatus
    config_digest: str
    started: str
    mode: str
    mode_reason: str
    method: str
    model: str
    baseline: str
    calibration_side: str | None
    workload: WorkloadDoc
    threshold: float
    headline_level: int
    planned_rounds: int | None  # fixed at the first look (the budget and the pass times decide it)
    windows: dict[str, float]  # level -> seconds each measured pass holds the load
    stopped_by: str | None
    sides: list[SideDoc]
    warmups: list[WarmupDoc]
    rounds: list[RoundDoc]
    noise: NoiseDoc
    verdicts: dict[str, dict[str, dict[str, VerdictDoc]]]  # side -> level -> metric
    answers: AnswersDoc


class TrialDoc(TypedDict):
    name: str
    stage: str  # screen
    status: str  # finalist, dropped, infeasible, screened-alone
    folder: str
    ratios: dict[str, float | None]  # level -> the screening round's output tok/s ratio to the base
    overrides: dict[str, Any]
    why: str
    diagnosis: str | None


class FinalDoc(TypedDict):
    folder: str
    finalists: list[str]


class TuneStateDoc(TypedDict):
    digest: str
    trials: dict[str, TrialDoc]
    final: FinalDoc | None
    seen: dict[str, float]  # what a server start and a pass took here (seconds)


class TuneDocument(TypedDict):
    schema: str
    status: RunStatus
    base: str
    candidates: list[dict[str, Any]]
    considered_not_tried: list[str]
    trials: list[TrialDoc]
    final: FinalDoc | None
    winner: str | None  # None: no final measured a choice
    decision: str  # why the winner, or why no profile
    not_tested: list[str]
    profile: str | None


def _choice(r: Reader, value: Any, field: str, allowed: tuple[str, ...]) -> None:
    if value not in allowed:
        raise r.fail(field, " or ".join(allowed), value)


def _text_list(r: Reader, value: Any, field: str) -> None:
    for i, item in enumerate(r.array(value, field)):
        r.text(item, f"{field}[{i}]")


def _verdict(r: Reader, v: Any, at: str) -> None:
    r.table(v, at)
    _choice(r, r.get(v, "kind", f"{at}."), f"{at}.kind", KINDS)
    r.integer(r.get(v, "n", f"{at}."), f"{at}.n", least=0)
    for key in ("mean", "hi"):
        r.number(r.get(v, key, f"{at}."), f"{at}.{key}", positive=True)
    r.number(r.get(v, "lo", f"{at}."), f"{at}.lo")  # a wide interval's lower bound rounds to 0
    r.number(r.get(v, "level", f"{at}."), f"{at}.level", positive=True, optional=False)
    r.number(r.get(v, "threshold", f"{at}."), f"{at}.threshold", optional=False)
    r.number(r.get(v, "noise", f"{at}."), f"{at}.noise")
    r.integer(r.get(v, "more_rounds", f"{at}."), f"{at}.more_rounds", least=1, optional=True)
    for i, ratio in enumerate(r.array(r.get(v, "ratios", f"{at}."), f"{at}.ratios")):
        r.number(ratio, f"{at}.ratios[{i}]", positive=True, optional=False)


def validate_ab(doc: dict[str, Any], path: Path) -> AbDocument:
    r = Reader(path, "give the ab.json an ab run wrote, unedited")
    if doc.get("schema") != AB_SCHEMA:
        raise r.fail("schema", repr(AB_SCHEMA), doc.get("schema"))
    _choice(r, r.get(doc, "status", ""), "status", RUN_STATUSES)
    for key in ("config_digest", "started", "mode", "model", "baseline"):
        r.text(r.get(doc, key, ""), key)
    r.text(r.get(doc, "calibration_side", ""), "calibration_side", optional=True)
    workload = r.table(r.get(doc, "workload", ""), "workload")
    for i, c in enumerate(r.array(r.get(workload, "concurrency", "workload."), "workload.concurrency")):
        r.integer(c, f"workload.concurrency[{i}]", least=1)
    r.integer(r.get(workload, "rounds_asked", "workload."), "workload.rounds_asked", least=1)
    for i, side in enumerate(r.array(r.get(doc, "sides", ""), "sides")):
        at = f"sides[{i}]"
        r.table(side, at)
        r.text(r.get(side, "name", f"{at}."), f"{at}.name")
        _choice(r, r.get(side, "status", f"{at}."), f"{at}.status", SIDE_STATUSES)
        r.text(r.get(side, "diagnosis", f"{at}."), f"{at}.diagnosis", optional=True)
        for j, s in enumerate(r.array(r.get(side, "startups_s", f"{at}."), f"{at}.startups_s")):
            r.number(s, f"{at}.startups_s[{j}]", optional=False)
    for i, rnd in enumerate(r.array(r.get(doc, "rounds", ""), "rounds")):
        at = f"rounds[{i}]"
        r.table(rnd, at)
        r.integer(r.get(rnd, "index", f"{at}."), f"{at}.index", least=1)
        _text_list(r, r.get(rnd, "order", f"{at}."), f"{at}.order")
        for name, levels in r.table(r.get(rnd, "means", f"{at}."), f"{at}.means").items():
            for c, metrics in r.table(levels, f"{at}.means.{name}").items():
                if metrics is not None:
                    for m, value in r.table(metrics, f"{at}.means.{name}.{c}").items():
                        r.number(value, f"{at}.means.{name}.{c}.{m}", positive=True, optional=False)
        for j, p in enumerate(r.array(r.get(rnd, "passes", f"{at}."), f"{at}.passes")):
            r.table(p, f"{at}.passes[{j}]")
            r.integer(r.get(p, "level", f"{at}.passes[{j}]."), f"{at}.passes[{j}].level", least=1)
            r.text(r.get(p, "invalid", f"{at}.passes[{j}]."), f"{at}.passes[{j}].invalid", optional=True)
    r.number(r.get(doc, "threshold", ""), "threshold", optional=False)
    r.integer(r.get(doc, "planned_rounds", ""), "planned_rounds", least=1, optional=True)
    r.array(r.get(doc, "warmups", ""), "warmups")
    for c, seconds in r.table(r.get(doc, "windows", ""), "windows").items():
        r.number(seconds, f"windows.{c}", positive=True, optional=False)
    noise = r.table(r.get(doc, "noise", ""), "noise")
    r.text(r.get(noise, "source", "noise."), "noise.source")
    for c, metrics in r.table(r.get(noise, "levels", "noise."), "noise.levels").items():
        for m, value in r.table(metrics, f"noise.levels.{c}").items():
            if value is not None:
                r.table(value, f"noise.levels.{c}.{m}")
                r.number(r.get(value, "sd", f"noise.levels.{c}.{m}."), f"noise.levels.{c}.{m}.sd", optional=False)
                r.integer(r.get(value, "df", f"noise.levels.{c}.{m}."), f"noise.levels.{c}.{m}.df", least=1)
    for name, levels in r.table(r.get(doc, "verdicts", ""), "verdicts").items():
        for c, metrics in r.table(levels, f"verdicts.{name}").items():
            for m, v in r.table(metrics, f"verdicts.{name}.{c}").items():
                _verdict(r, v, f"verdicts.{name}.{c}.{m}")
    r.table(r.get(doc, "answers", ""), "answers")
    return doc  # type: ignore[return-value]


def read_ab(path: Path) -> AbDocument:
    """An ab.json, validated: the one reader (resume, a stored noise floor, tune)."""
    return validate_ab(read_json(path, "give the ab.json an ab run wrote"), path)


def _trial(r: Reader, t: Any, at: str) -> None:
    r.table(t, at)
    for key in ("name", "status", "folder"):
        r.text(r.get(t, key, f"{at}."), f"{at}.{key}")
    for c, ratio in r.table(r.get(t, "ratios", f"{at}."), f"{at}.ratios").items():
        r.number(ratio, f"{at}.ratios.{c}", positive=True)
    r.table(r.get(t, "overrides", f"{at}."), f"{at}.overrides")


def read_tune_state(path: Path) -> TuneStateDoc:
    """OUT/tune-state.json, validated: what a resumed tune continues from."""
    r = Reader(path, "give a new --out, or remove the damaged tune-state.json to start over")
    doc = read_json(path, r.fix)
    r.text(r.get(doc, "digest", ""), "digest")
    for name, t in r.table(r.get(doc, "trials", ""), "trials").items():
        _trial(r, t, f"trials.{name}")
    final = r.get(doc, "final", "")
    if final is not None:
        r.text(r.get(r.table(final, "final"), "folder", "final."), "final.folder")
        _text_list(r, r.get(final, "finalists", "final."), "final.finalists")
    for key, value in r.table(doc.get("seen", {}), "seen").items():
        r.number(value, f"seen.{key}", optional=False)
    doc.setdefault("seen", {})
    return doc  # type: ignore[return-value]


def read_tune(path: Path) -> TuneDocument:
    """A tune.json, validated."""
    r = Reader(path, "give the tune.json a tune run wrote, unedited")
    doc = read_json(path, r.fix)
    if doc.get("schema") != TUNE_SCHEMA:
        raise r.fail("schema", repr(TUNE_SCHEMA), doc.get("schema"))
    _choice(r, r.get(doc, "status", ""), "status", RUN_STATUSES)
    r.text(r.get(doc, "winner", ""), "winner", optional=True)
    r.text(r.get(doc, "profile", ""), "profile", optional=True)
    for i, t in enumerate(r.array(r.get(doc, "trials", ""), "trials")):
        _trial(r, t, f"trials[{i}]")
    r.text(r.get(doc, "decision", ""), "decision")
    for key in ("considered_not_tried", "not_tested"):
        _text_list(r, r.get(doc, key, ""), key)
    return doc  # type: ignore[return-value]
