"""`nemolaunch doctor`: gather facts about the host and the engine's Python, judge them, give each problem its fix."""

from __future__ import annotations

import os
import time
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from checks import ALIASES, REGISTRY, run_checks
from checks.facts import Facts, gather
from checks.result import STATUSES, CheckResult
from launcher.documents import DoctorDocument
from launcher.engine import Interpreter, resolve_python
from launcher.errors import BadInput, ExitCode
from launcher.profiles.profile import PARALLEL_SIZES, ServingProfile, load_profile


@dataclass(frozen=True)
class DoctorReport:
    interpreter: Interpreter
    facts: Facts
    results: list[CheckResult]
    seconds: float

    def counts(self) -> dict[str, int]:
        c = Counter(r.status for r in self.results)
        return {s: c.get(s, 0) for s in STATUSES}

    def verdict(self) -> str:
        c = self.counts()
        if c["fail"] or c["crash"]:
            return f"{c['fail'] + c['crash']} problem(s) to fix before serving"
        if not self.facts["nvml"].get("ok"):
            return "no NVIDIA GPU here: this host can serve the CPU engine only (profile cpu)"
        return "ready to serve" + (f", with {c['warn']} warning(s)" if c["warn"] else "")

    def to_json(self) -> DoctorDocument:
        """The document `doctor --json` prints and `profile write` reads (launcher.documents.DoctorDocument)."""
        return {
            "schema": "nemolaunch.doctor/1",
            "host": self.facts["host"],
            "python": {"path": str(self.interpreter.path), "source": self.interpreter.source},
            "checks": [r.to_json() for r in self.results],
            "summary": {**self.counts(), "verdict": self.verdict(), "seconds": round(self.seconds, 2)},
            "facts": self.facts,
        }


def known_checks() -> list[tuple[str, str]]:
    return [(check_id, doc) for check_id, (doc, _) in REGISTRY.items()]


def parallel_layout(profile: ServingProfile) -> dict[str, Any]:
    """The facts the parallel check judges: the profile's sizes (1 when unset) and its node count."""
    layout: dict[str, Any] = {k: profile.parallel(k) for k in PARALLEL_SIZES}
    layout["profile"] = profile.name
    layout["nodes"] = len(profile.placement.nodes) if profile.placement else 1
    return layout


def run(
    python: Path | None,
    model: Path | None,
    lock: Path | None,
    only: list[str] | None,
    use_cache: bool = True,
    profile: str | None = None,
) -> DoctorReport:
    only = [ALIASES.get(c, c) for c in only] if only else None
    unknown = [c for c in only or [] if c not in REGISTRY]
    if unknown:
        raise BadInput(f"unknown check {', '.join(unknown)}", f"pick from {', '.join(REGISTRY)} (--list-checks)")
    if model is not None and not model.is_dir():
        raise BadInput(f"model folder {model} does not exist", "give the folder with config.json and weights")
    serving = load_profile(profile) if profile else None
    interpreter = resolve_python(python, serving.python if serving else None)
    start = time.monotonic()
    facts = gather(interpreter.path, os.environ, model, use_cache)
    if serving is not None:
        facts["parallel"] = parallel_layout(serving)
    if lock is not None:
        from launcher.lock.run import load_or_bad_input

        facts["lock"] = load_or_bad_input(lock).to_json()
    results = run_checks(facts, only)
    if profile:
        results.append(tuned_stack_check(profile, interpreter.path))
    return DoctorReport(interpreter, facts, results, time.monotonic() - start)


def tuned_stack_check(profile_ref: str, python: Path) -> CheckResult:
    """A tuned profile against the installed stack (the stack it was tuned on is in its [tuned] table)."""
    from launcher.profiles.profile import load_profile
    from launcher.profiles.stack import current_stack, stale

    profile = load_profile(profile_ref)
    if not profile.tuned.get("stack"):
        return CheckResult("profile-stack", "profile", "skip", f"profile {profile.name} was not tuned here")
    drift = stale(profile, current_stack(python))
    if drift:
        return CheckResult(
            "profile-stack", "profile", "warn", drift, "the stack it was tuned on", str(profile.tuned.get("revalidate"))
        )
    return CheckResult("profile-stack", "profile", "pass", f"profile {profile.name} was tuned on this stack")


def exit_code(report: DoctorReport, strict: bool) -> int:
    c = report.counts()
    if c["fail"] or c["crash"] or (strict and c["warn"]):
        return ExitCode.PROBLEM
    return ExitCode.OK
