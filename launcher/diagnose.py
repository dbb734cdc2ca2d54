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


_META = set(".^$*+?{}[]()|\\")
_QUANT = set("*?{")


def required_literal(pattern: re.Pattern[str]) -> bytes | None:
    """The longest run of literal characters every match must contain, or None.

    A small parser of our own (no private `re` internals): it reads the pattern left to right at the top level,
    keeps runs of plain characters and escaped punctuation, treats groups, classes and other escapes as breaks,
    drops a character a quantifier makes optional, and gives up on a top-level alternation. Conservative: it may
    miss a literal, never invents one. Lets the matcher find candidate lines with bytes.find at memory speed."""
    if pattern.flags & re.IGNORECASE:
        return None
    text, runs, run, depth, i = pattern.pattern, [], "", 0, 0
    while i < len(text):
        c = text[i]
        nxt = text[i + 1] if i + 1 < len(text) else ""
        if c == "\\":
            if depth == 0 and nxt and not nxt.isalnum():
                step, char = 2, nxt
            else:
                step, char = 2, None  # \d, \s, \b, ... : not a literal
        elif c == "[":
            j = i + 1 + (text[i + 1 : i + 2] == "^")
            j = text.index("]", j + 1) if "]" in text[j + 1 :] else len(text)
            step, char = j + 1 - i, None
        elif c == "(":
            depth += 1
            step, char = 1, None
        elif c == ")":
            depth -= 1
            step, char = 1, None
        elif c == "|" and depth == 0:
            return None
        elif c in _META or depth:
            step, char = 1, None
        else:
            step, char = 1, c
        following = text[i + step : i + step + 1]
        if char is not None and depth == 0 and following not in _QUANT:
            run += char
        else:
            if char is not None and following in _QUANT:
                pass  # the quantified character is optional: the run ends before it
            runs.append(run)
            run = ""
        i += step
    runs.append(run)
    best = max(runs, key=len)
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
    stage: str | None = None  # root-cause findings: where in vLLM's life the failure happened

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
            "stage": self.stage,
            "evidence": [{"line": n, "text": t} for n, t in self.evidence],
        }


def knowledge_files() -> list[Path]:
    return sorted(data_dir("knowledge").glob("*.toml"))


def load_rules(paths: list[Path] | None = None) -> list[Rule]:
    """Every rule of the knowledge base (knowledge/*.toml). A malformed rule is a ValueError naming it: the
    base is code, and a pattern the matcher cannot search fast (no literal of 4+ characters) is refused."""
    rules: list[Rule] = []
    for path in paths if paths is not None else knowledge_files():
        data = tomllib.loads(path.read_text(encoding="utf-8"))
        for entry in data.get("rule", []):
            where = f"{path.name}: rule {entry.get('id')}"
            if entry["severity"] not in SEVERITIES:
                raise ValueError(f"{where}: unknown severity {entry['severity']!r}")
            try:
                patterns = tuple(re.compile(p) for p in entry["patterns"])
            except re.error as e:
                raise ValueError(f"{where}: bad pattern {e.pattern!r}: {e}") from None
            for pattern in patterns:
                needle = required_literal(pattern)
                if needle is None or len(needle) < 4:
                    raise ValueError(f"{where}: pattern {pattern.pattern!r} has no literal of 4+ characters")
            rules.append(
                Rule(
                    id=entry["id"],
                    severity=entry["severity"],
                    title=entry["title"],
                    patterns=patterns,
                    cause=entry["cause"],
                    fix=entry["fix"],
                    source=entry["source"],
                    avoid=entry.get("avoid"),
                    generic=entry.get("generic", False),
                    gpu_severity=tuple(entry.get("gpu_severity", {}).items()),
                )
            )
    ids = [r.id for r in rules]
    if len(set(ids)) != len(ids):
        raise ValueError(f"duplicate rule ids: {sorted({i for i in ids if ids.count(i) > 1})}")
    return rules


# What a log shows when vLLM failed in a way no rule names: a traceback's last exception, or a fatal line.
_TRACEBACK = b"Traceback (most recent call last)"
_FATAL = (
    b"EngineCore failed to start",
    b"EngineCore encountered a fatal error",
    b"Engine core initialization failed",
    b"EngineDeadError",
    b"died unexpectedly",
    b"Engine loop has died",
    b"terminating server process",
    b"Segmentation fault",
    b"core dumped",
)
# vLLM's and uvicorn's line prefixes before the message: "(EngineCore pid=1) ERROR 10-25 13:08:43 [core.py:708] "
_LOG_PREFIX = re.compile(
    r"^(?:[\w.-]+\s+\|\s)?(?:\[[\dTZ:.-]+\]\s*)?(?:\([^)]*\)\s*)*(?:\[rank\d+\]:\s*)?"
    r"(?:(?:ERROR|WARNING|INFO|CRITICAL|DEBUG)\s+(?:\d\d-\d\d\s[\d:]+\s+)?\[?[\w./-]+:\d+\]\s?)?"
)
_EXCEPTION = re.compile(
    r"^(?:[A-Za-z_][\w]*\.)*(?:[A-Z]\w*(?:Error|Exception|Exit|Interrupt)|KeyError|AssertionError)\b(?::.*)?$"
)
_WRAPPERS = ("EngineDeadError", "Engine core initialization failed", "EngineCore failed to start")
# Where in vLLM's life a line is: markers it prints as it enters a stage, and functions in a traceback.
_STAGES = (
    (
        "loading weights",
        (b"Starting to load model", b"Loading safetensors checkpoint", b"load_weights", b"in load_model"),
    ),
    (
        "memory profiling",
        (b"Loading weights took", b"Model loading took", b"determine_available_memory", b"in profile_run"),
    ),
    ("CUDA graph capture", (b"Capturing CUDA graph", b"Capturing cudagraphs", b"in capture_model")),
    ("serving requests", (b"Application startup complete", b"in execute_model", b"in step_with_batch_queue")),
)
_STAGE_FIX = {
    None: "read the root error; run nemolaunch doctor to check the stack, and the arguments vLLM printed at start",
    "loading weights": "check the model folder (config.json, every safetensors shard complete and readable), "
    "free disk and host memory; run nemolaunch doctor",
    "memory profiling": "lower --max-model-len or --max-num-seqs, or raise --gpu-memory-utilization; "
    "--enforce-eager tells whether torch.compile is involved",
    "CUDA graph capture": "lower --gpu-memory-utilization or --cudagraph-capture-sizes; --enforce-eager confirms "
    "capture is the cause (it costs throughput, do not keep it)",
    "serving requests": "a request crashed the engine: CUDA_LAUNCH_BLOCKING=1 names the failing kernel; "
    "keep the request that triggered it, and check nemolaunch probe for the kernels in use",
}
ROOT_CAUSE = Rule(
    id="root-error",
    severity="error",
    title="vLLM failed; no known rule matches: the root error and the stage",
    patterns=(),
    cause="the first exception of the first traceback (or the fatal line) is where the failure began; "
    "errors after it are consequences",
    fix="{next_step}",
    source="generic: traceback and fatal-line analysis (launcher/diagnose.py)",
    generic=True,
)
MAX_ROOTS = 20  # tracebacks examined per log: the first one is the root; a log of a million is not read twice


def _clean(raw: bytes) -> str:
    return _PREFIX.sub("", raw.decode("utf-8", "replace")).strip()[:400]


class Matcher:
    """Accumulates findings over text fed in order (blocks of a file, or live lines)."""

    def __init__(self, rules: list[Rule], gpu_family: str | None = None) -> None:
        self.rules = rules
        self.gpu_family = gpu_family
        self.findings: dict[str, Finding] = {}
        self.lines_seen = 0
        self._open_line = False  # the text fed so far ends inside a line
        # patterns grouped by their literal: one bytes.find scan serves every pattern that needs it
        self._by_needle: dict[bytes, list[tuple[Rule, re.Pattern[bytes]]]] = {}
        for rule in rules:
            for p in rule.patterns:
                needle = required_literal(p)
                assert needle is not None  # load_rules refuses patterns without one
                self._by_needle.setdefault(needle, []).append(
                    (rule, re.compile(p.pattern.encode(), p.flags & ~re.UNICODE))
                )
        self.stage: str | None = None  # the stage at the end of what was fed
        self.roots: list[tuple[int, str, str | None]] = []  # (line, root error, stage)
        self.fatal: tuple[int, str] | None = None
        self._tracebacks = 0
        self._awaiting: tuple[str | None, int] | None = None  # a traceback whose exception is still to come
        self._fatal_stage: str | None = None

    def feed(self, text: bytes) -> list[Finding]:
        """Scan whole lines of a log (bytes: searching them is several times faster than searching decoded
        text); returns the findings that appeared for the first time."""
        if b"\x1b" in text:
            text = _ANSI.sub(b"", text)
        first_line = self.lines_seen + 1 - (1 if self._open_line else 0)
        new: list[Finding] = []
        hits: dict[str, tuple[Rule, set[int], dict[str, str]]] = {}
        for needle, members in self._by_needle.items():
            pos = text.find(needle)
            while pos >= 0:
                start = text.rfind(b"\n", 0, pos) + 1
                end = text.find(b"\n", pos)
                end = len(text) if end < 0 else end
                for rule, pattern in members:
                    m = pattern.search(text, start, end)
                    if m:
                        _, lines, groups = hits.setdefault(rule.id, (rule, set(), {}))
                        lines.add(start)
                        for k, v in m.groupdict().items():
                            if v and k not in groups:
                                groups[k] = v.decode(errors="replace")
                pos = text.find(needle, end)
        for rule in self.rules:  # in knowledge-base order, so "new" findings come out in a stable order
            if rule.id not in hits:
                continue
            _, starts, groups = hits[rule.id]
            finding = self._finding(rule, new)
            finding.count += len(starts)
            finding.groups = {**groups, **finding.groups}
            for start in sorted(starts)[: max(0, MAX_EVIDENCE - len(finding.evidence))]:
                end = text.find(b"\n", start)
                raw = text[start : end if end >= 0 else len(text)]
                finding.evidence.append((first_line + text.count(b"\n", 0, start), _clean(raw)))
        self._track_failure(text, first_line)
        self.lines_seen = first_line - 1 + text.count(b"\n") + (0 if text.endswith(b"\n") or not text else 1)
        self._open_line = bool(text) and not text.endswith(b"\n")
        return new

    def _stage_at(self, text: bytes, pos: int) -> str | None:
        best, where = self.stage, -1
        for stage, markers in _STAGES:
            for marker in markers:
                at = text.rfind(marker, 0, pos)
                if at > where:
                    best, where = stage, at
        return best

    def _track_failure(self, text: bytes, first_line: int) -> None:
        """Root errors: the exception each traceback ends with, and the stage the log was in there. A traceback
        may end in a later feed (live, line by line): then the next feeds finish it."""
        if self._awaiting is not None:
            stage, lines_left = self._awaiting
            root = self._exception_after(text, 0, lines_left)
            if root:
                at, line = root
                self.roots.append((first_line + text.count(b"\n", 0, at), line, self._stage_in(text[:at]) or stage))
                self._awaiting = None
            else:
                left = lines_left - text.count(b"\n") - 1
                self._awaiting = (self._stage_in(text) or stage, left) if left > 0 else None
        pos = text.find(_TRACEBACK)
        while pos >= 0 and self._tracebacks < MAX_ROOTS:
            self._tracebacks += 1
            after = text.find(b"\n", pos)
            root = self._exception_after(text, after + 1, 400) if after >= 0 else None
            stage_here = self._stage_at(text, pos)
            if root:
                at, line = root
                # a traceback names the stage through its frames; else the last marker the log printed
                stage = self._stage_in(text[pos:at]) or stage_here
                self.roots.append((first_line + text.count(b"\n", 0, at), line, stage))
            else:
                self._awaiting = (self._stage_in(text[pos:]) or stage_here, 400)
            pos = text.find(_TRACEBACK, pos + len(_TRACEBACK))
        if self.fatal is None:
            for marker in _FATAL:
                at = text.find(marker)
                if at >= 0:
                    start = text.rfind(b"\n", 0, at) + 1
                    end = text.find(b"\n", at)
                    line = _clean(text[start : end if end >= 0 else len(text)])
                    self.fatal = (first_line + text.count(b"\n", 0, start), line)
                    self._fatal_stage = self._stage_at(text, start)
                    break
        self.stage = self._stage_at(text, len(text))

    @staticmethod
    def _stage_in(frames: bytes) -> str | None:
        found = None
        for stage, markers in _STAGES:
            if any(m in frames for m in markers if m.startswith(b"in ") or m.islower()):
                found = stage
        return found

    @staticmethod
    def _exception_after(text: bytes, start: int, max_lines: int) -> tuple[int, str] | None:
        """The first exception line from `start` on: where Python says what went wrong."""
        for _ in range(max_lines):
            if start >= len(text):
                return None
            end = text.find(b"\n", start)
            end = len(text) if end < 0 else end
            message = _LOG_PREFIX.sub("", _PREFIX.sub("", text[start:end].decode("utf-8", "replace"))).strip()
            if _EXCEPTION.match(message) and not message.startswith(_WRAPPERS):
                return start, message[:400]
            start = end + 1
        return None

    def _finding(self, rule: Rule, new: list[Finding]) -> Finding:
        if rule.id not in self.findings:
            self.findings[rule.id] = Finding(rule, rule.severity_on(self.gpu_family))
            new.append(self.findings[rule.id])
        return self.findings[rule.id]

    def root_cause(self) -> Finding | None:
        """The generic finding for a failure no rule names: the first root error and its stage."""
        if self.roots:
            line, text, stage = self.roots[0]
        elif self.fatal:
            (line, text), stage = self.fatal, self._fatal_stage
        else:
            return None
        finding = Finding(ROOT_CAUSE, "error" if self.fatal or self._tracebacks else "warning", count=1)
        finding.evidence = [(line, text)]
        if self.fatal and self.fatal[0] != line:
            finding.evidence.append(self.fatal)
        finding.stage = stage
        finding.groups = {"next_step": _STAGE_FIX[stage]}
        return finding

    def report(self) -> list[Finding]:
        """Findings by severity. Catch-alls are dropped when a specific error or warning explains the log; when
        none does and vLLM failed, the root error and its stage are added to them."""
        found = [f for f in self.findings.values() if f.count]
        explained = any(f.severity in ("error", "warning") and not f.rule.generic for f in found)
        if explained:
            found = [f for f in found if not f.rule.generic]
        else:
            root = self.root_cause()
            if root:
                found.append(root)
        return sorted(found, key=lambda f: (SEVERITIES.index(f.severity), f.evidence[0][0] if f.evidence else 0))


def read_blocks(stream: IO[bytes], name: str) -> Iterator[bytes]:
    """Blocks of whole lines, a few MB each; a binary file is bad input. A line longer than a block is cut at
    block boundaries (kept parts are never re-joined, so a log without newlines costs one pass and one block
    of memory)."""
    head = stream.read(BLOCK_BYTES)
    if b"\x00" in head[:65536]:
        raise BadInput(f"{name} is a binary file, not a log", "give the text log vLLM wrote (or - for stdin)")
    pending = b""
    block = head
    while block:
        data = pending + block if pending else block
        cut = data.rfind(b"\n") + 1
        if cut:
            yield data[:cut]
            pending = data[cut:]
        elif len(data) >= BLOCK_BYTES:
            yield data  # no newline in a whole block: hand it on as part of one long line
            pending = b""
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
