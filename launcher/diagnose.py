"""`nemolaunch diagnose`: match a vLLM log against the knowledge base of serving failures.

Logs are read in blocks of a few MB (never whole), decoded leniently, stripped of ANSI colour; each rule's
patterns are searched over the whole block at C speed, and only matches are turned into line numbers.
The same Matcher runs inside `serve` on the live log, one line at a time.
"""

from __future__ import annotations

import re
import tomllib
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any

from launcher.errors import BadInput
from launcher.paths import data_dir

SEVERITIES = ("error", "warning", "info")
MAX_EVIDENCE = 5
BLOCK_BYTES = 8 << 20
_ANSI = re.compile(rb"\x1b\[[0-9;?]*[ -/]*[@-~]")
# prefixes that say which container or process wrote a line; dropped from evidence for readability
_PREFIX = re.compile(
    r"^(?:[\w.-]+\s+\|\s)?(?:\((?:EngineCore|APIServer|Worker|VllmWorker|StageEngineCore)\w*"
    r"\s+pid=\d+\)\s*)?(?:\[rank\d+\]:\s*)?"
)


def required_literal(pattern: re.Pattern[str]) -> bytes | None:
    """The longest run of literal characters every match must contain, or None (then the whole text is
    searched). Lets the matcher find candidate lines with str.find, at memory speed, before running a regex."""
    if pattern.flags & re.IGNORECASE:
        return None
    try:
        from re import _parser  # type: ignore[attr-defined]  # the stdlib's own regex parser

        parsed = _parser.parse(pattern.pattern, pattern.flags)
    except Exception:  # a Python without it: fall back to plain searching
        return None
    best, run = "", ""
    for op, arg in parsed:
        if op is _parser.LITERAL:
            run += chr(arg)
            best = max(best, run, key=len)
        else:
            run = ""
    return best.encode() if len(best) >= 3 else None


@dataclass(frozen=True)
class Rule:
    id: str
    severity: str
    title: str
    patterns: tuple[re.Pattern[str], ...]
    cause: str
    fix: str
    source: str
    avoid: str | None = None
    generic: bool = False
    gpu_severity: tuple[tuple[str, str], ...] = ()

    def severity_on(self, gpu_family: str | None) -> str:
        return dict(self.gpu_severity).get(gpu_family or "", self.severity)


@dataclass
class Finding:
    rule: Rule
    severity: str
    count: int = 0
    evidence: list[tuple[int, str]] = field(default_factory=list)
    groups: dict[str, str] = field(default_factory=dict)

    def fix(self) -> str:
        fix = self.rule.fix
        for name, value in self.groups.items():
            fix = fix.replace("{" + name + "}", value)
        return fix

    def to_json(self) -> dict[str, Any]:
        return {
            "id": self.rule.id,
            "severity": self.severity,
            "title": self.rule.title,
            "cause": self.rule.cause,
            "fix": self.fix(),
            "avoid": self.rule.avoid,
            "source": self.rule.source,
            "count": self.count,
            "evidence": [{"line": n, "text": t} for n, t in self.evidence],
        }


def load_rules(path: Path | None = None) -> list[Rule]:
    path = path or data_dir("knowledge") / "serving-failures.toml"
    data = tomllib.loads(path.read_text(encoding="utf-8"))
    rules = []
    for entry in data["rule"]:
        if entry["severity"] not in SEVERITIES:
            raise ValueError(f"{path}: rule {entry['id']}: unknown severity {entry['severity']!r}")
        rules.append(
            Rule(
                id=entry["id"],
                severity=entry["severity"],
                title=entry["title"],
                patterns=tuple(re.compile(p) for p in entry["patterns"]),
                cause=entry["cause"],
                fix=entry["fix"],
                source=entry["source"],
                avoid=entry.get("avoid"),
                generic=entry.get("generic", False),
                gpu_severity=tuple(entry.get("gpu_severity", {}).items()),
            )
        )
    return rules


class Matcher:
    """Accumulates findings over text fed in order (blocks of a file, or live lines)."""

    def __init__(self, rules: list[Rule], gpu_family: str | None = None) -> None:
        self.rules = rules
        self.gpu_family = gpu_family
        self.findings: dict[str, Finding] = {}
        self.lines_seen = 0
        self._compiled = {
            r.id: [(re.compile(p.pattern.encode(), p.flags & ~re.UNICODE), required_literal(p)) for p in r.patterns]
            for r in rules
        }

    def feed(self, text: bytes) -> list[Finding]:
        """Scan whole lines of a log (bytes: searching them is several times faster than searching decoded
        text); returns the findings that appeared for the first time."""
        if b"\x1b" in text:
            text = _ANSI.sub(b"", text)
        first_line = self.lines_seen + 1
        self.lines_seen += text.count(b"\n") + (0 if text.endswith(b"\n") or not text else 1)
        new: list[Finding] = []
        for rule in self.rules:
            hits: set[int] = set()  # offsets of the matching lines' starts
            groups: dict[str, str] = {}
            for pattern, needle in self._compiled[rule.id]:
                for start, m in _search(pattern, needle, text):
                    hits.add(start)
                    groups.update(
                        {k: v.decode(errors="replace") for k, v in m.groupdict().items() if v and k not in groups}
                    )
            if not hits:
                continue
            finding = self._finding(rule, new)
            finding.count += len(hits)
            finding.groups = {**groups, **finding.groups}
            for start in sorted(hits)[: max(0, MAX_EVIDENCE - len(finding.evidence))]:
                end = text.find(b"\n", start)
                raw = text[start : end if end >= 0 else len(text)].decode("utf-8", "replace")
                finding.evidence.append((first_line + text.count(b"\n", 0, start), _PREFIX.sub("", raw).strip()[:400]))
        return new

    def _finding(self, rule: Rule, new: list[Finding]) -> Finding:
        if rule.id not in self.findings:
            self.findings[rule.id] = Finding(rule, rule.severity_on(self.gpu_family))
            new.append(self.findings[rule.id])
        return self.findings[rule.id]

    def report(self) -> list[Finding]:
        """Findings by severity; catch-all errors are dropped when a specific error explains the log."""
        found = list(self.findings.values())
        specific_error = any(f.severity == "error" and not f.rule.generic for f in found)
        found = [f for f in found if f.count and not (f.rule.generic and specific_error)]
        return sorted(found, key=lambda f: (SEVERITIES.index(f.severity), f.evidence[0][0] if f.evidence else 0))


def _search(pattern: re.Pattern[bytes], needle: bytes | None, text: bytes) -> Iterator[tuple[int, re.Match[bytes]]]:
    """(line start, match) for each line of text that the pattern matches."""
    if needle is None:
        for m in pattern.finditer(text):
            yield text.rfind(b"\n", 0, m.start()) + 1, m
        return
    pos = text.find(needle)
    while pos >= 0:
        start = text.rfind(b"\n", 0, pos) + 1
        end = text.find(b"\n", pos)
        end = len(text) if end < 0 else end
        found = pattern.search(text, start, end)
        if found:
            yield start, found
        pos = text.find(needle, end)


def read_blocks(stream: IO[bytes], name: str) -> Iterator[bytes]:
    """Blocks of whole lines, a few MB each; a binary file is bad input."""
    head = stream.read(BLOCK_BYTES)
    if b"\x00" in head[:65536]:
        raise BadInput(f"{name} is a binary file, not a log", "give the text log vLLM wrote (or - for stdin)")
    pending = b""
    block = head
    while block:
        data = pending + block
        cut = data.rfind(b"\n") + 1
        if cut:
            yield data[:cut]
            pending = data[cut:]
        else:
            pending = data
        block = stream.read(BLOCK_BYTES)
    if pending:
        yield pending


def diagnose_blocks(
    blocks: Iterable[bytes], gpu_family: str | None = None, rules: list[Rule] | None = None
) -> tuple[list[Finding], int]:
    matcher = Matcher(rules if rules is not None else load_rules(), gpu_family)
    for block in blocks:
        matcher.feed(block)
    return matcher.report(), matcher.lines_seen


def diagnose_file(path: str, stdin: IO[bytes], gpu_family: str | None = None) -> tuple[list[Finding], int]:
    if path == "-":
        return diagnose_blocks(read_blocks(stdin, "stdin"), gpu_family)
    try:
        with open(path, "rb") as f:
            return diagnose_blocks(read_blocks(f, path), gpu_family)
    except (IsADirectoryError, PermissionError, FileNotFoundError) as e:
        raise BadInput(f"cannot read {path}: {e.strerror}", "give a readable log file") from None


def exit_code(findings: list[Finding]) -> int:
    return 1 if any(f.severity == "error" for f in findings) else 0


def render_text(findings: list[Finding], lines: int, name: str) -> str:
    if not findings:
        return f"{name}: {lines} lines, no known failure found"
    out = [f"{name}: {lines} lines, {len(findings)} finding(s)"]
    for f in findings:
        out.append(f"\n[{f.severity}] {f.rule.title}  ({f.rule.id}, {f.count} line(s))")
        out += [f"  line {n}: {t}" for n, t in f.evidence]
        out.append(f"  cause: {f.rule.cause}")
        out.append(f"  fix:   {f.fix()}")
        if f.rule.avoid:
            out.append(f"  profile: {f.rule.avoid}")
    return "\n".join(out)
