"""The state of one ab run and ab.json made from it at any moment (an interrupted run writes what it has): the
sides and what each showed, the rounds' block means, the per-round ratios to the baseline and their verdicts."""

from __future__ import annotations

import json
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from launcher.ab import floor, stats
from launcher.ab.answers import compare_answers
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
)
from launcher.ab.passes import METRICS
from launcher.ab.sides import Side, side_profile
from launcher.output import atomic_write_text


@dataclass
class SideState:
    side: Side
    status: SideStatus = "pending"
    diagnosis: str | None = None
    served: dict[str, Any] | None = None
    answers: list[list[int]] | None = None
    answers_error: str | None = None
    startups_s: list[float] = field(default_factory=list)


class AbRun:
    """State of one ab run; `doc()` is ab.json at any moment (so an interrupted run writes what it has)."""

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
        self.warmed: set[str] = set()  # the sides whose server this run has seen up (and warmed if it started it)
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
