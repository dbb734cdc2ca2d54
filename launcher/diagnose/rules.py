"""The curated knowledge base (knowledge/*.toml): what the code does not say. Each rule is keyed on the lines it
matches (patterns) and on the raise sites and components whose messages it explains (sites), so a reworded
message raised in the same place still reaches it.
"""

from __future__ import annotations

import enum
import fnmatch
import re
import tomllib
from dataclasses import dataclass
from pathlib import Path

from launcher.diagnose.lifecycle import Stage
from launcher.diagnose.literals import anchor_words, required_literal
from launcher.paths import data_dir


class Severity(enum.StrEnum):
    ERROR = "error"  # the server cannot work, or works wrong
    WARNING = "warning"  # works, but slower or at risk; or one request was refused
    INFO = "info"  # alarming-looking but normal

    @property
    def rank(self) -> int:
        return list(Severity).index(self)


STAGES = tuple(str(stage) for stage in Stage)


@dataclass(frozen=True)
class Rule:
    id: str
    severity: Severity
    title: str
    patterns: tuple[re.Pattern[str], ...]
    cause: str
    fix: str
    source: str
    avoid: str | None = None
    generic: bool = False  # a catch-all ("engine core died", "NCCL error"): it defers to a more specific finding
    gpu_severity: tuple[tuple[str, Severity], ...] = ()
    stage_fix: tuple[tuple[str, str], ...] = ()  # the fix where the failure happened in that stage
    sites: tuple[str, ...] = ()  # "path/glob.py:function-glob" of the raise sites whose messages this rule explains
    defaults: tuple[tuple[str, str], ...] = ()  # {name} in the fix where the line matched had no such group

    def severity_on(self, gpu_family: str | None) -> Severity:
        return dict(self.gpu_severity).get(gpu_family or "", self.severity)

    def fix_in(self, stage: str | None) -> str:
        return dict(self.stage_fix).get(stage or "", self.fix)

    def explains(self, file: str, function: str | None) -> bool:
        where = f"{file}:{function or ''}"
        return any(fnmatch.fnmatchcase(where, site) for site in self.sites)


def knowledge_files() -> list[Path]:
    return sorted(data_dir("knowledge").glob("*.toml"))


def _severity(value: object, where: str) -> Severity:
    try:
        return Severity(str(value))
    except ValueError:
        raise ValueError(f"{where}: unknown severity {value!r}") from None


def _patterns(entry: dict[str, object], where: str) -> tuple[re.Pattern[str], ...]:
    try:
        patterns = tuple(re.compile(p) for p in entry.get("patterns", []))  # type: ignore[attr-defined]
    except re.error as e:
        raise ValueError(f"{where}: bad pattern {e.pattern!r}: {e}") from None
    for pattern in patterns:
        needle = required_literal(pattern)
        if needle is None or len(needle) < 4:
            raise ValueError(f"{where}: pattern {pattern.pattern!r} has no literal of 4+ characters")
        if not anchor_words(pattern):
            raise ValueError(
                f"{where}: pattern {pattern.pattern!r} has no whole word to anchor on: put a space, "
                "punctuation or \\b on both sides of one of its words"
            )
    return patterns


def load_rules(paths: list[Path] | None = None) -> list[Rule]:
    """Every rule of the knowledge base. A malformed rule is a ValueError naming it: the base is code, and a
    pattern the matcher cannot search fast (no literal of 4+ characters) is refused."""
    rules: list[Rule] = []
    for path in paths if paths is not None else knowledge_files():
        data = tomllib.loads(path.read_text(encoding="utf-8"))
        for entry in data.get("rule", []):
            where = f"{path.name}: rule {entry.get('id')}"
            patterns = _patterns(entry, where)
            sites = tuple(entry.get("sites", []))
            if not patterns and not sites:
                raise ValueError(f"{where}: a rule needs patterns or sites")
            stage_fix = entry.get("stage_fix", {})
            if unknown := set(stage_fix) - set(STAGES):
                raise ValueError(f"{where}: unknown stage {sorted(unknown)} in stage_fix (stages: {STAGES})")
            rules.append(
                Rule(
                    id=entry["id"],
                    severity=_severity(entry["severity"], where),
                    title=entry["title"],
                    patterns=patterns,
                    cause=entry["cause"],
                    fix=entry["fix"],
                    source=entry["source"],
                    avoid=entry.get("avoid"),
                    generic=entry.get("generic", False),
                    gpu_severity=tuple((k, _severity(v, where)) for k, v in entry.get("gpu_severity", {}).items()),
                    stage_fix=tuple(stage_fix.items()),
                    sites=sites,
                    defaults=tuple((str(k), str(v)) for k, v in entry.get("defaults", {}).items()),
                )
            )
    ids = [r.id for r in rules]
    if len(set(ids)) != len(ids):
        raise ValueError(f"duplicate rule ids: {sorted({i for i in ids if ids.count(i) > 1})}")
    return rules
