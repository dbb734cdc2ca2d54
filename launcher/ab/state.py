"""The state of one ab run and ab.json made from it at any moment (an interrupted run writes what it has): the
sides and what each showed, the warm-ups, the rounds' passes and block means, the noise, and the verdicts."""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from checks.model_config import ConfigError, read_model_config
from launcher.ab import calibration, stats
from launcher.ab.answers import compare_answers
from launcher.ab.config import AbConfig
from launcher.ab.document import (
    AB_SCHEMA,
    AbDocument,
    AnswersDoc,
    RoundDoc,
    RunStatus,
    SideStatus,
    VerdictDoc,
    WarmupDoc,
)
from launcher.ab.passes import METRICS
from launcher.ab.sides import Side, side_profile
from launcher.model.nemotron import biased_router
from launcher.output import write_json

DECIDED = ("better", "worse", "equivalent")


@dataclass
class SideState:
    side: Side
    status: SideStatus = "pending"
    diagnosis: str | None = None
    served: dict[str, Any] | None = None
    answers: list[list[int]] | None = None
    answers_error: str | None = None
    startups_s: list[float] = field(default_factory=list)


def _biased_router(model: str) -> bool:
    """The model folder's router picks experts on a correction bias (launcher.model.nemotron.biased_router)."""
    if not Path(model).is_dir():  # a hub name: no folder to read
        return False
    try:
        return biased_router(read_model_config(Path(model)))
    except ConfigError:
        return False


class AbRun:
    """State of one ab run; `doc()` is ab.json at any moment."""

    def __init__(self, cfg: AbConfig, out: Path, mode: str, mode_reason: str, digest: str = "") -> None:
        self.cfg, self.out, self.mode, self.mode_reason = cfg, out, mode, mode_reason
        self.digest = digest or cfg.digest()
        sides = list(cfg.sides)
        if cfg.calibrate:
            base = cfg.sides[0]
            sides.append(Side(f"{base.name}-again", base.profile_ref, dict(base.overrides)))
        self.calibration = sides[-1].name if cfg.calibrate else None
        self.states = {s.name: SideState(s) for s in sides}
        self.profiles = {s.name: side_profile(s) for s in sides}
        self.last_side: str | None = None  # the side of the last pass (co-resident CPU servers settle on a switch)
        self.fresh: set[str] = set()  # the sides whose server this run just started and has not warmed up yet
        self.rounds: list[RoundDoc] = []
        self.warmups: list[WarmupDoc] = []
        self.planned_rounds: int | None = None
        self.windows: dict[int, float] = {}  # level -> the seconds each pass holds the load (sized at warm-up)
        self.fixed_routing = _biased_router(cfg.model)  # on dummy weights every token goes to the same experts
        self.paces: dict[tuple[str, int], tuple[float, float]] = {}  # (side, level) -> requests/s, request latency
        self.stopped_by: str | None = None
        self.status: RunStatus = "running"
        self.started = time.strftime("%Y-%m-%dT%H:%M:%S%z")
        self.given: calibration.Levels = cfg.noise or {}  # --noise, or this machine's stored noise
        self.given_source = cfg.noise_source

    def resume(self, doc: AbDocument) -> None:
        """Continue a run from its ab.json: its rounds, warm-ups and what each side showed stay; a side that could
        not start is not retried (its diagnosis stands), one that died is. The planned rounds stay as planned."""
        self.rounds, self.warmups, self.started = list(doc["rounds"]), list(doc["warmups"]), doc["started"]
        self.planned_rounds = doc["planned_rounds"]
        self.windows = {int(c): s for c, s in doc["windows"].items()}
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

    def compared(self) -> list[str]:
        """The sides judged against the baseline (not the A/A, not one that could not start)."""
        return [
            n for n, st in self.states.items() if n not in (self.base, self.calibration) and st.status != "infeasible"
        ]

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

    def dropped(self, name: str, c: int) -> list[str]:
        """The passes of `name` or the baseline at level c left out, each with its reason."""
        return [
            f"round {rnd['index']} {p['side']}: {p['invalid']}"
            for rnd in self.rounds
            for p in rnd["passes"]
            if p["level"] == c and p["side"] in (name, self.base) and p["invalid"]
        ]

    def noise(self) -> tuple[dict[int, dict[str, stats.Noise | None]], str]:
        """The noise per level and metric: this run's A/A once it has 3 rounds, else the given or stored one."""
        levels = self.cfg.workload.concurrency
        if self.calibration:
            aa = self.ratios(self.calibration)
            got = {c: {m: stats.measure_noise(aa[c][m], "A/A this run") for m in METRICS} for c in levels}
            if any(v is not None for lv in got.values() for v in lv.values()):
                return got, "A/A this run"
        if self.given:
            return {c: {m: calibration.for_level(self.given, c, m) for m in METRICS} for c in levels}, str(
                self.given_source
            )
        why = (
            "the A/A has fewer than 3 valid rounds yet" if self.calibration else "no A/A (--calibrate) and none stored"
        )
        return {c: dict.fromkeys(METRICS) for c in levels}, f"not measured: {why}"

    def level(self) -> float:
        """The interval's two-sided level: Pocock's for the planned looks (rounds 2, 3, ... planned), split over
        the sides judged (Bonferroni)."""
        looks = max(1, (self.planned_rounds or self.cfg.rounds) - 1)
        return stats.pocock_level(looks) / max(1, len(self.compared()))

    def verdicts(self) -> dict[str, dict[str, dict[str, VerdictDoc]]]:
        noise, _ = self.noise()
        level = self.level()
        out: dict[str, dict[str, dict[str, VerdictDoc]]] = {}
        for name, st in self.states.items():
            if name == self.base or st.status == "infeasible":
                continue
            ratios = self.ratios(name)
            out[name] = {}
            for c in self.cfg.workload.concurrency:
                out[name][str(c)] = {}
                for m in METRICS:
                    measured = None if name == self.calibration else noise[c][m]
                    v = stats.verdict(m, ratios[c][m], self.cfg.threshold, measured, level)
                    v["headline"] = c == self.cfg.headline and m == "output_tok_s" and name != self.calibration
                    v["dropped"] = self.dropped(name, c)
                    if name == self.calibration:
                        v["kind"], v["more_rounds"], v["noise"] = "noise", None, v["sd"]
                        v["noise_source"] = "A/A this run"
                    out[name][str(c)][m] = v
        return out

    def decided(self) -> bool:
        """Every judged side's headline verdict is decided (better, worse or equivalent), and, with --calibrate,
        the A/A asked for has measured the noise (3 rounds): a difference found in 2 rounds does not end the run
        before the noise its verdict is to be judged against, and stored for this machine, exists."""
        if self.calibration and self.noise()[1] != "A/A this run":
            return False
        judged = self.verdicts()
        names = self.compared()
        return bool(names) and all(
            judged[n][str(self.cfg.headline)]["output_tok_s"]["kind"] in DECIDED for n in names if n in judged
        )

    def answers(self) -> AnswersDoc:
        base = self.states[self.base]
        got = {n: (st.answers, st.answers_error) for n, st in self.states.items() if n != self.base}
        argv = list((base.served or {}).get("argv") or [])
        return compare_answers(argv, self.cfg.same_answers, (base.answers, base.answers_error), got, self.fixed_routing)

    def doc(self) -> AbDocument:
        noise, source = self.noise()
        w = self.cfg.workload
        return {
            "schema": AB_SCHEMA,
            "status": self.status,
            "config_digest": self.digest,
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
                "window_s": self.cfg.window_s,
                "warmup_passes": self.cfg.warmup_passes,
                "rounds_asked": self.cfg.rounds,
                "budget_min": self.cfg.budget_min,
                "seed": w.seed,
            },
            "threshold": self.cfg.threshold,
            "headline_level": self.cfg.headline,
            "planned_rounds": self.planned_rounds,
            "windows": {str(c): s for c, s in self.windows.items()},
            "stopped_by": self.stopped_by,
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
            "warmups": self.warmups,
            "rounds": self.rounds,
            "noise": calibration.as_doc(noise, source),
            "verdicts": self.verdicts(),
            "answers": self.answers(),
        }

    def write(self) -> None:
        write_json(self.out / "ab.json", self.doc())
