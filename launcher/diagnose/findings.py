"""Findings, and the report an operator would write from them: the specific error before the umbrella that
followed it, a stop asked for as a stop, a refused request as a refused request, and, where the log cannot
tell, what to collect next.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field, replace
from typing import Any

from launcher.diagnose.advice import SUPPORT_GAP, message_advice, missing_packages, named_knobs
from launcher.diagnose.lifecycle import (
    COLLECT_AFTER_CRASH,
    COLLECT_AFTER_CUT_TRACEBACK,
    COLLECT_AFTER_EARLY_END,
    COLLECT_AFTER_SILENT_DEATH,
    COLLECT_WHILE_WAITING,
    SILENT_DEATH,
    STAGE_FIX,
    UMBRELLAS,
)
from launcher.diagnose.logtext import level
from launcher.diagnose.rules import Rule, Severity
from launcher.diagnose.templates import Site

MAX_EVIDENCE = 5
# errors of the code itself, not of its input: a bug in the release installed
CODE_ERRORS = ("AttributeError", "NameError", "UnboundLocalError")
ARGUMENT_ERROR = re.compile(r"unexpected keyword argument|required positional argument|takes \d+ positional")
CODE_BUG_FIX = (
    "a programming error inside the serving stack (vLLM or a library it calls), not your configuration: try the "
    "previous or the next vLLM release (pip install -U vllm), and report it with the traceback"
)
NOT_YET_SUPPORTED = (
    "the installed release does not support this: a newer vLLM (pip install -U vllm) or library may; otherwise "
    "change the option or the model that needs it"
)
CURATED, INDEX, FALLBACK = "curated", "index", "fallback"  # where a finding's knowledge came from


@dataclass
class Finding:
    rule: Rule
    severity: Severity
    count: int = 0
    evidence: list[tuple[int, str]] = field(default_factory=list)
    groups: dict[str, str] = field(default_factory=dict)
    stage: str | None = None  # where in vLLM's life the failure happened
    site: Site | None = None  # where the message was raised, when the message index knows it
    origin: str = CURATED
    said: str | None = None  # what the logged message itself advises, when the rule's fix does not say it
    hint: str | None = None  # what the line means beside the rule's fix (the engine argument a misspelt one meant)
    named: tuple[str, ...] = ()  # the knobs the logged message names as the thing to change
    installs: tuple[str, ...] = ()  # what to install, where the message says a package is missing

    def fix(self) -> str:
        fix = self.rule.fix_in(self.stage)
        for name, value in {**dict(self.rule.defaults), **self.groups}.items():
            fix = fix.replace("{" + name + "}", value)
        if self.said and self.said not in fix:
            fix += f"; the message says: {self.said}"
        if named := [n for n in self.named if n not in fix]:
            fix += f"; it names {', '.join(named)}"
        for install in self.installs:
            fix += f"; {install}"
        return f"{fix}; {self.hint}" if self.hint else fix

    @property
    def first_line(self) -> int:
        return self.evidence[0][0] if self.evidence else 0

    def to_json(self) -> dict[str, Any]:
        return {
            "id": self.rule.id,
            "severity": str(self.severity),
            "title": self.rule.title,
            "cause": self.rule.cause,
            "fix": self.fix(),
            "avoid": self.rule.avoid,
            "source": self.rule.source,
            "origin": self.origin,
            "count": self.count,
            "stage": self.stage,
            "site": self.site.to_json() if self.site else None,
            "evidence": [{"line": n, "text": t} for n, t in self.evidence],
        }


def _rule(id: str, severity: Severity, title: str, cause: str, fix: str) -> Rule:
    # the module's own name: the source cannot go stale when the package moves again
    return Rule(id, severity, title, (), cause, fix, f"generic: {__name__.replace('.', '/')}.py", generic=True)


ROOT_CAUSE = _rule(
    "root-error",
    Severity.ERROR,
    "vLLM failed; no known rule matches: the root error and the stage",
    "the first exception of the first traceback (or the fatal line) is where the failure began; "
    "errors after it are consequences",
    "{next_step}",
)
NOT_ENOUGH_EVIDENCE = _rule(
    "not-enough-evidence",
    Severity.ERROR,
    "The log cannot say why: collect more",
    "the lines that would name the cause are not in this log",
    "{next_step}",
)
NOT_SUPPORTED = _rule(
    "not-supported-here",
    Severity.ERROR,
    "The installed release does not support what was asked",
    "the error says the software lacks support for this model, method or option in the installed version",
    "{next_step}",
)
CODE_BUG = _rule(
    "code-bug",
    Severity.ERROR,
    "A programming error inside the serving stack, not a configuration error",
    "the root error is one Python raises for broken code (a missing attribute or name, a wrong call), not for "
    "bad input",
    "{next_step}",
)
ADVISED = _rule(
    "message-advice",
    Severity.ERROR,
    "vLLM failed; the error's own message says what to do",
    "the first exception of the first traceback (or the fatal line) is where the failure began, and its message "
    "(or the lines after it) carries advice or names the knob it is about; no rule of the knowledge base names it",
    "{next_step}",
)
STOPPED = _rule(
    "stopped-on-request",
    Severity.INFO,
    "vLLM was stopped on request (a signal), not crashed",
    "the engine core received a stop signal or the API server began its shutdown; what vLLM logged after it "
    "(EngineDeadError, force-killed processes) is how it stops",
    "nothing to do",
)
REQUEST_REJECTED = "A request was refused; the server kept serving"
REFUSED = _rule(
    "request-refused",
    Severity.WARNING,
    REQUEST_REJECTED,
    "the server answered a request with an error status and went on serving; an access line does not say why",
    "{next_step}",
)


@dataclass
class Trace:
    """What the log says about vLLM's life, filled by the matcher as it reads."""

    stage: str | None = None  # the stage at the end of what was read
    roots: list[tuple[int, str, str | None]] = field(default_factory=list)  # (line, root error, stage)
    tracebacks: int = 0
    fatal: tuple[int, str, str | None] | None = None  # the first fatal line and its stage
    stop: tuple[int, str] | None = None  # the first stop someone asked for
    started: bool = False
    serving: int | None = None  # the line where vLLM said it serves
    loose: tuple[int, str, str | None] | None = None  # the first exception line outside any traceback, and its stage
    logged: tuple[int, str, str | None] | None = None  # the first line logged at an error level, and its stage
    advised: tuple[int, str, str | None] | None = None  # the first line that advises a knob, and its stage
    waiting: tuple[int, str] | None = None  # the waiting line the log ends with, repeated: a hang
    crashed: tuple[int, str] | None = None  # the first line saying the server's container crashed
    refused: tuple[int, str, str] | None = None  # the first request answered with an error status, what to read


def _root_finding(trace: Trace, before: int) -> Finding | None:
    """The generic finding for a failure no rule names: the first root error (before the stop) and its stage."""
    roots = [r for r in trace.roots if r[0] < before]
    fatal = trace.fatal if trace.fatal and trace.fatal[0] < before else None
    loose = trace.loose if trace.loose and trace.loose[0] < before else None
    # (vLLM logs a traceback's lines at ERROR: only a log without one is read for such a line)
    logged = trace.logged if trace.logged and trace.logged[0] < before and not trace.tracebacks else None
    # a line the software logged as an error, in a log that shows no failure of its own, is a warning to read
    # a line that only advises a knob, in a log that shows nothing else: a warning naming it (not the advice of a
    # server that went on to serve)
    advised = trace.advised if trace.advised and trace.advised[0] < before else None
    if advised and trace.serving is not None and advised[0] < trace.serving:
        advised = None
    candidates = [c for c in (roots[0] if roots else None, fatal, loose, logged, advised) if c]
    if not candidates:
        return None
    line, text, stage = umbrella = chosen = candidates[0]
    if any(u in text for u in UMBRELLAS):
        # an umbrella ("Engine core initialization failed. See root cause above") defers to a specific error before it
        earlier = [c for c in candidates if c[0] < line and not any(u in c[1] for u in UMBRELLAS)]
        line, text, stage = chosen = min(earlier) if earlier else umbrella
    silent = any(w in text for w in SILENT_DEATH)
    exception = text.split(":", 1)[0].split("(", 1)[0].rsplit(".", 1)[-1]
    code_bug = exception in CODE_ERRORS or (exception == "TypeError" and ARGUMENT_ERROR.search(text) is not None)
    gap = SUPPORT_GAP.search(text) is not None
    said = message_advice(text, knobs_only=False)
    # an error's message names what it is about; a line that only warns names a knob only in its advice
    only_advice = chosen is advised
    named, installs = tuple(named_knobs(text, advising_only=only_advice)), tuple(missing_packages(text))
    rule = NOT_ENOUGH_EVIDENCE if silent else NOT_SUPPORTED if gap else CODE_BUG if code_bug else ROOT_CAUSE
    rule = ADVISED if rule is ROOT_CAUSE and (said or named or installs) else rule
    failed = (fatal or trace.tracebacks or loose) and not only_advice
    finding = Finding(rule, Severity.ERROR if failed else Severity.WARNING, count=1)
    finding.said, finding.named, finding.installs = said, named, installs
    finding.evidence = [(line, text[:400])]
    finding.evidence += sorted({c[:2] for c in (fatal, umbrella) if c and c[0] != line})
    finding.stage, finding.origin = stage, FALLBACK
    if silent:
        next_step = COLLECT_AFTER_SILENT_DEATH
    elif gap:
        next_step = NOT_YET_SUPPORTED
    elif code_bug:
        next_step = CODE_BUG_FIX
    else:
        next_step = STAGE_FIX[stage]
    finding.groups = {"next_step": next_step}
    return finding


def _refused_request(finding: Finding, trace: Trace) -> Finding:
    """An error raised by the API server's request handling while it served, with no engine death after it, is
    one request refused: a warning with the limit it broke, not a failed server."""
    site = finding.site
    if (
        finding.severity != Severity.ERROR
        or site is None
        or not site.file.startswith("vllm/entrypoints/")
        or trace.serving is None
        or finding.first_line < trace.serving
        or (trace.fatal is not None and trace.fatal[0] >= finding.first_line)
    ):
        return finding
    rule = finding.rule
    title = f"{REQUEST_REJECTED}: {rule.title}"
    return Finding(
        Rule(rule.id, Severity.WARNING, title, rule.patterns, rule.cause, rule.fix, rule.source),
        Severity.WARNING,
        finding.count,
        finding.evidence,
        finding.groups,
        finding.stage,
        site,
        finding.origin,
    )


def _failed(trace: Trace) -> bool:
    """The log shows a failure: a traceback, a fatal line or an exception of its own."""
    return bool(trace.tracebacks or trace.roots or trace.fatal or trace.loose)


# Python's warnings module: "file.py:12: UserWarning: ..." (torch warns and goes on, e.g. on a host without a GPU)
_PY_WARNING = re.compile(r"(?:^|\s|:)(?:[A-Z]\w*)?Warning: ")


def _only_warned(finding: Finding) -> bool:
    """Every line the finding stands on was logged as a warning (vLLM's WARNING, NCCL's WARN, a Python warning)."""
    levels = {level(text.encode()) or ("WARNING" if _PY_WARNING.search(text) else None) for _, text in finding.evidence}
    return bool(levels) and levels <= {"WARNING", "WARN"}


def _names_failure(finding: Finding) -> bool:
    """A finding that already says what went wrong: an error, or a specific rule's warning."""
    specific = not finding.rule.generic and finding.origin != FALLBACK
    return finding.severity == Severity.ERROR or (finding.severity == Severity.WARNING and specific)


def compose(found: list[Finding], trace: Trace) -> list[Finding]:
    """The report: findings by severity, then line. Catch-alls give way to a specific error; what follows a stop
    someone asked for is the stop; when nothing names the failure, the root error and its stage (or what to
    collect) stand in."""
    stop = trace.stop[0] if trace.stop else None
    after_stop = [f for f in found if stop is not None and f.severity == Severity.ERROR and f.first_line > stop]
    found = [_refused_request(f, trace) for f in found if f not in after_stop]
    if not _failed(trace):
        # what the software itself logged as a warning, in a log that goes on without failing, is a warning: an
        # error rule's words in it (a port taken by a side service, an NCCL retry) did not stop anything
        found = [
            replace(f, severity=Severity.WARNING) if f.severity == Severity.ERROR and _only_warned(f) else f
            for f in found
        ]
    explained = any(
        not f.rule.generic
        and (f.severity == Severity.ERROR or (f.severity == Severity.WARNING and f.origin == CURATED))
        for f in found
    )
    if explained:
        found = [f for f in found if not f.rule.generic]
    else:
        root = _root_finding(trace, stop if stop is not None else 1 << 62)
        # a root line a specific finding already names (a refused request, a warning) needs no second word; nor
        # does a line a catch-all names, when nothing shows a failure beyond it (the root is only a warning), nor
        # a line the index matched, when the root says no more of it than "the root error"
        plain = root is not None and root.rule is ROOT_CAUSE
        named = {
            n
            for f in found
            if f.severity != Severity.INFO
            and not (f.rule.generic and root and root.severity == Severity.ERROR and not (plain and f.origin == INDEX))
            for n, _ in f.evidence
        }
        if root and root.first_line not in named:
            found.append(root)
    if trace.refused and trace.fatal is None and not trace.stop and not any(_names_failure(f) for f in found):
        refused = Finding(REFUSED, Severity.WARNING, 1, [trace.refused[:2]], origin=FALLBACK, stage=trace.stage)
        refused.groups = {"next_step": trace.refused[2]}
        found.append(refused)
    if trace.stop:
        stopped = Finding(STOPPED, Severity.INFO, 1, [trace.stop], origin=FALLBACK)
        later = [f.evidence[0] for f in after_stop] + [r[:2] for r in trace.roots if r[0] > trace.stop[0]]
        stopped.evidence += sorted(later)[:2]
        found.append(stopped)
    elif trace.crashed and not any(f.severity == Severity.ERROR for f in found):
        crashed = Finding(NOT_ENOUGH_EVIDENCE, Severity.WARNING, 1, [trace.crashed], origin=FALLBACK, stage=trace.stage)
        crashed.groups = {"next_step": COLLECT_AFTER_CRASH}
        found.append(crashed)
    elif trace.tracebacks and not trace.roots and not any(f.severity == Severity.ERROR for f in found):
        cut = Finding(NOT_ENOUGH_EVIDENCE, Severity.WARNING, 1, origin=FALLBACK, stage=trace.stage)
        cut.groups = {"next_step": COLLECT_AFTER_CUT_TRACEBACK}
        found.append(cut)
    elif trace.waiting and not any(f.severity == Severity.ERROR for f in found):
        hang = Finding(NOT_ENOUGH_EVIDENCE, Severity.WARNING, 1, [trace.waiting], origin=FALLBACK, stage=trace.stage)
        hang.groups = {"next_step": COLLECT_WHILE_WAITING.format(waiting=trace.waiting[1])}
        found.append(hang)
    elif trace.started and trace.serving is None and not any(f.severity == Severity.ERROR for f in found):
        early = Finding(NOT_ENOUGH_EVIDENCE, Severity.WARNING, 1, origin=FALLBACK, stage=trace.stage)
        early.groups = {"next_step": COLLECT_AFTER_EARLY_END.format(stage=trace.stage or "starting")}
        found.append(early)
    return sorted(found, key=lambda f: (f.severity.rank, f.first_line))
