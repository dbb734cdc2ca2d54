"""From a matched template to a finding's rule: the curated rule keyed on its raise site when there is one (any
wording of the message reaches it), else a rule made from the template itself: where it was raised, under which
condition, the advice its message carries and the knobs its function reads.
"""

from __future__ import annotations

from launcher.diagnose.advice import SUPPORT_GAP
from launcher.diagnose.lifecycle import STAGE_FIX
from launcher.diagnose.rules import Rule, Severity
from launcher.diagnose.templates import Site, TemplateIndex

MAX_TITLE = 110


def _short(text: str, limit: int) -> str:
    return text if len(text) <= limit else text[: limit - 1].rstrip() + "…"


def _stage_fixes(names: str | None) -> tuple[tuple[str, str], ...]:
    """The fix in each stage, with what the message names after it."""
    return tuple((k, f"{v}; {names}" if names else v) for k, v in STAGE_FIX.items() if k is not None)


class SiteRules:
    def __init__(self, rules: list[Rule], index: TemplateIndex | None) -> None:
        self.keyed = [r for r in rules if r.sites]
        self.index = index
        self._site_by_rule: dict[str, Site] = {}
        self._made: dict[tuple[int, bool, bool, bool, bool], Rule] = {}

    def attach(self, rule_id: str, template: int) -> None:
        """The raise site of a line a curated rule's pattern matched: the rule keeps its fix, the finding gains
        where the message came from."""
        assert self.index is not None
        self._site_by_rule.setdefault(rule_id, self.index.site(template))

    def site_of(self, rule_id: str) -> Site | None:
        return self._site_by_rule.get(rule_id)

    def keyed_on(self, frames: list[tuple[str, str]]) -> Rule | None:
        """The curated rule keyed on one of a traceback's frames (file, function), innermost first."""
        for file, function in reversed(frames):
            for rule in self.keyed:
                if rule.explains(file, function):
                    return rule
        return None

    def rule_for(
        self, template: int, said: str, logged: str | None, lead: bool = False, loose: bool = False, vague: bool = False
    ) -> Rule:
        """The rule for a line that matched template but no curated pattern. `said` is the message as logged:
        its values make the advice concrete; `logged` is the level the line was logged at (a message an error
        template describes, logged as a warning, was not fatal there). A lead (another engine's message, in a log
        that does not name its engine) defers to the log's own root error. A loose match (a short or generic
        template, or a line that reads as benign, and no failure shown by the line itself) is at most a warning."""
        assert self.index is not None
        site = self.index.site(template)
        for rule in self.keyed:
            if rule.explains(site.file, site.function):
                self.attach(rule.id, template)
                return rule
        demoted = logged in ("WARNING", "WARN") and site.level == "error"
        key = (template, demoted, lead, loose, vague)
        if key not in self._made:
            self._made[key] = self._make(site, said, demoted, lead, loose, vague)
            self._site_by_rule[self._made[key].id] = site
        return self._made[key]

    def _make(self, site: Site, said: str, demoted: bool, lead: bool, loose: bool, vague: bool) -> Rule:
        assert self.index is not None
        clauses, named = self.index.advice(said, site.guard)
        knobs = [self.index.flag_of(k) for k in site.knobs]
        verb = "raised" if site.level == "error" and not site.exception.startswith("logger.") else "logged"
        when = f" when {site.guard}" if site.guard else ""
        cause = f"{verb} by {site.where()}{when}"
        if knobs:
            cause += f"; that code reads {', '.join(knobs)}"
        if lead:
            cause += f" ({site.package} prints this message; the log does not say it comes from {site.package})"
        fix_parts = []
        if clauses:
            fix_parts.append("the message says: " + " ".join(clauses))
        if named:
            fix_parts.append("it names " + ", ".join(named))
        if SUPPORT_GAP.search(said):
            fix_parts.append(f"a newer {site.package} release may support it (pip install -U {site.package})")
        if not fix_parts and knobs:
            fix_parts.append("the knobs of the code that raised it: " + ", ".join(knobs))
        fix = "; ".join(fix_parts) or STAGE_FIX[None]
        # without advice of its own (names of code, "initialize_cache", are none), the stage says what to try
        settable = clauses or any(n.startswith("--") or n.isupper() for n in named) or SUPPORT_GAP.search(said)
        stage_fix = () if settable or (knobs and not named) else _stage_fixes(fix if fix_parts else None)
        kind = site.exception if verb == "raised" else f"{site.package} {site.level}"
        version = self.index.packages.get(site.package, "")
        severity = Severity.INFO if site.level != "error" or demoted else Severity.WARNING if loose else Severity.ERROR
        return Rule(
            id=f"raised:{site.file}:{site.function or site.line}",
            severity=severity,
            title=_short(f"{kind}: {site.text}", MAX_TITLE),
            patterns=(),
            cause=cause,
            fix=fix,
            source=f"message index: {site.package} {version}".strip(),
            stage_fix=stage_fix,
            # logger.exception logs while an exception is handled: the traceback under it names the cause
            # a vague match (a short template: "… has no attribute `…`", "No such file or directory: '…'") may
            # be another code's message: it gives way to the log's own root error, as a catch-all does
            generic=site.exception == "logger.exception" or lead or vague,
        )
