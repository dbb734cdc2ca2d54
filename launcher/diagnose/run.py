"""`nemolaunch diagnose`: match a vLLM log against the knowledge base of serving failures.

Logs are read in blocks of a few MB (never whole), decoded leniently, stripped of ANSI colour. Each pattern
is anchored on one whole word it must contain (its rarest in ordinary vLLM logs); per sub-block of 256 KB the
set of words present (one translate and one split, at C speed) says which patterns can match there, and only
those are searched (bytes.find of their literal, then the regex on that line). The cost is one pass per block
whatever the number of rules. The same Matcher runs inside `serve` on the live log, one line at a time.
"""

from __future__ import annotations

import functools
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
_BOUNDARY_ESCAPES = set("bsWnd")  # \b, \s, \W, \n, \d: a word (letters and _) ends at them


def _literal_runs(pattern: re.Pattern[str]) -> list[tuple[str, bool, bool]] | None:
    """The runs of literal characters every match must contain, each with whether a word boundary is certain
    just before and just after it (a \\b, \\s, \\W, \\n or \\d next to it); None if the pattern has a top-level
    alternation or ignores case.

    A small parser of our own (no private `re` internals): it reads the pattern left to right at the top level,
    keeps runs of plain characters and escaped punctuation, treats groups, classes and other escapes as breaks,
    drops a character a quantifier makes optional. Conservative: it may miss a literal, never invents one."""
    if pattern.flags & re.IGNORECASE:
        return None
    text = pattern.pattern
    runs: list[tuple[str, bool, bool]] = []
    run, depth, i, left = "", 0, 0, False
    bound_before = False  # the last non-literal piece was a certain word boundary
    while i < len(text):
        c = text[i]
        nxt = text[i + 1] if i + 1 < len(text) else ""
        boundary = False
        if c == "\\":
            step = 2
            if depth == 0 and nxt and not nxt.isalnum():
                char: str | None = nxt
            else:
                char = None  # \d, \s, \b, ... : not a literal
                boundary = depth == 0 and nxt in _BOUNDARY_ESCAPES
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
            if not run:
                left = bound_before
            run += char
            bound_before = False
        else:
            # a quantified character is optional (or repeated): the run ends before it
            boundary = boundary and following not in _QUANT
            if run:
                runs.append((run, left, boundary))
            run, bound_before = "", boundary
        i += step
    if run:
        runs.append((run, left, False))
    return runs


def required_literal(pattern: re.Pattern[str]) -> bytes | None:
    """The longest run of literal characters every match must contain (3+ characters), or None."""
    runs = _literal_runs(pattern)
    best = max((r for r, _, _ in runs), key=len, default="") if runs else ""
    return best.encode() if len(best) >= 3 else None


_WORD = re.compile(r"[A-Za-z_]+")


def anchor_words(pattern: re.Pattern[str]) -> list[bytes]:
    """Words (runs of ASCII letters and _; digits separate words) every match must contain as a whole word: inside
    a literal run with a non-word character or a certain boundary on both sides. The matcher finds candidate
    lines by them."""
    words = []
    for run, left, right in _literal_runs(pattern) or []:
        for m in _WORD.finditer(run):
            if (m.start() > 0 or left) and (m.end() < len(run) or right):
                words.append(m.group().encode())
    return words


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
                if not anchor_words(pattern):
                    raise ValueError(
                        f"{where}: pattern {pattern.pattern!r} has no whole word to anchor on: put a space, "
                        "punctuation or \\b on both sides of one of its words"
                    )
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
    b"engine core exited unexpectedly",
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
# A root line that only says the engine process is gone: it died without a Python error of its own.
_SILENT_DEATH = ("EngineDeadError", "exited unexpectedly", "died unexpectedly")
_SILENT_DEATH_FIX = (
    "the engine core process died without a Python error of its own: killed (the host's OOM killer: "
    "dmesg | grep -i -e oom -e killed; a SIGKILL from outside) or a native crash (segfault); check host memory, "
    "dmesg and the exit code"
)
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


MAX_LINE_TEXT = 1024  # bytes of a line decoded for evidence or a root error (it is shown cut to 400 characters)


def _clean(raw: bytes) -> str:
    return _PREFIX.sub("", raw[:MAX_LINE_TEXT].decode("utf-8", "replace")).strip()[:400]


# Every byte that is not an ASCII letter or _ becomes a space: the words of a block are then one split (digits
# separate words too: numbers are most of a log's tokens, and leaving them out halves the split's work).
_NON_WORD = bytes(c if chr(c).isascii() and (chr(c).isalpha() or c == 95) else 32 for c in range(256))
SUB_BLOCK = 256 << 10  # the unit the word prefilter decides for: a failure's lines are searched in this much
LONG_LINE = 4096  # in a line longer than this, a pattern is matched within this many bytes of its literal


def _marker_pattern(marker: bytes) -> re.Pattern[str]:
    """A fixed marker as a pattern whose edge words are whole words (so the prefilter can anchor on them)."""
    text = marker.decode()
    left = r"\b" if _WORD.match(text[0]) else ""
    right = r"\b" if _WORD.match(text[-1]) else ""
    return re.compile(left + re.escape(text) + right)


@functools.cache
def _word_counts() -> dict[bytes, int]:
    """How often each word occurs in ordinary vLLM log lines (knowledge/ordinary-lines.log, real healthy logs):
    the matcher anchors each pattern on its rarest word, so ordinary blocks need no search at all."""
    counts: dict[bytes, int] = {}
    for word in data_dir("knowledge").joinpath("ordinary-lines.log").read_bytes().translate(_NON_WORD).split():
        counts[word] = counts.get(word, 0) + 1
    return counts


@dataclass(frozen=True)
class _Member:
    """One thing the scan looks for: a rule's pattern, or a marker of a stage, a fatal line or a traceback."""

    literal: bytes  # in every match: bytes.find locates candidate lines by it
    pattern: re.Pattern[bytes] | None  # None: the literal alone is the match
    rule: Rule | None = None
    stage: str | None = None
    kind: str = "rule"  # rule | stage | fatal | traceback


def _anchor(pattern: re.Pattern[str]) -> bytes:
    words = anchor_words(pattern)
    counts = _word_counts()
    return min(words, key=lambda w: (len(w) < 4, counts.get(w, 0), -len(w)))


class Matcher:
    """Accumulates findings over text fed in order (blocks of a file, or live lines).

    The scan, per sub-block of SUB_BLOCK bytes: the set of its words (one translate and one split at C speed),
    intersected with the anchor words of the patterns and markers; only patterns whose anchor word is there are
    searched for (bytes.find of their literal, then the regex on that line). An ordinary block costs one pass,
    whatever the number of rules."""

    def __init__(self, rules: list[Rule], gpu_family: str | None = None) -> None:
        self.rules = rules
        self.gpu_family = gpu_family
        self.findings: dict[str, Finding] = {}
        self.lines_seen = 0
        self._open_line = False  # the text fed so far ends inside a line
        self._by_word: dict[bytes, list[_Member]] = {}
        for rule in rules:
            for p in rule.patterns:
                literal = required_literal(p)
                assert literal is not None  # load_rules refuses patterns without one
                member = _Member(literal, re.compile(p.pattern.encode(), p.flags & ~re.UNICODE), rule)
                self._by_word.setdefault(_anchor(p), []).append(member)
        markers: list[tuple[bytes, str | None, str]] = [(_TRACEBACK, None, "traceback")]
        markers += [(m, None, "fatal") for m in _FATAL]
        markers += [(m, stage, "stage") for stage, ms in _STAGES for m in ms]
        for marker, stage, kind in markers:
            self._by_word.setdefault(_anchor(_marker_pattern(marker)), []).append(
                _Member(marker, None, stage=stage, kind=kind)
            )
        self._words = frozenset(self._by_word)
        self.stage: str | None = None  # the stage at the end of what was fed
        self.roots: list[tuple[int, str, str | None]] = []  # (line, root error, stage)
        self.fatal: tuple[int, str] | None = None
        self._tracebacks = 0
        self._awaiting: tuple[str | None, int] | None = None  # a traceback whose exception is still to come
        self._fatal_stage: str | None = None

    def _scan(self, text: bytes) -> tuple[dict[str, tuple[Rule, set[int], dict[str, str]]], list[tuple[int, _Member]]]:
        """Rule hits (rule id -> rule, line starts, named groups) and marker hits (position, marker) in `text`."""
        hits: dict[str, tuple[Rule, set[int], dict[str, str]]] = {}
        markers: dict[int, _Member] = {}
        start = 0
        while start < len(text):
            cut = text.find(b"\n", start + SUB_BLOCK, start + 2 * SUB_BLOCK)
            # no newline near: a line longer than a sub-block is cut, the pieces overlapping by LONG_LINE bytes
            end, over = (cut + 1, cut + 1) if cut >= 0 else (min(len(text), start + SUB_BLOCK), LONG_LINE)
            stop = min(len(text), end + over) if cut < 0 else end
            present = self._words.intersection(text[start:stop].translate(_NON_WORD).split())
            for word in present:
                for member in self._by_word[word]:
                    pos = text.find(member.literal, start, stop)
                    while pos >= 0:
                        # the line around the hit, looked for no further than LONG_LINE either side: in a log
                        # without newlines a "line" is the window around each hit
                        lo, hi = max(start, pos - LONG_LINE), min(stop, pos + LONG_LINE)
                        nl = text.rfind(b"\n", lo, pos)
                        line_start = nl + 1 if nl >= 0 else lo
                        nl = text.find(b"\n", pos, hi)
                        line_end = nl if nl >= 0 else hi
                        if member.pattern is None:
                            markers[pos] = member
                        else:
                            m = member.pattern.search(text, line_start, line_end)
                            if m and member.rule is not None:
                                _, lines, groups = hits.setdefault(member.rule.id, (member.rule, set(), {}))
                                lines.add(line_start)
                                for k, v in m.groupdict().items():
                                    if v and k not in groups:
                                        groups[k] = v.decode(errors="replace")
                        pos = text.find(member.literal, line_end, stop)
            start = end
        return hits, sorted(markers.items())

    def feed(self, text: bytes) -> list[Finding]:
        """Scan whole lines of a log (bytes: searching them is several times faster than searching decoded
        text); returns the findings that appeared for the first time."""
        if b"\x1b" in text:
            text = _ANSI.sub(b"", text)
        first_line = self.lines_seen + 1 - (1 if self._open_line else 0)
        new: list[Finding] = []
        hits, markers = self._scan(text)
        wanted: list[tuple[int, Finding]] = []
        for rule in self.rules:  # in knowledge-base order, so "new" findings come out in a stable order
            if rule.id not in hits:
                continue
            _, starts, groups = hits[rule.id]
            finding = self._finding(rule, new)
            finding.count += len(starts)
            finding.groups = {**groups, **finding.groups}
            room = max(0, MAX_EVIDENCE - len(finding.evidence))
            wanted += [(start, finding) for start in sorted(starts)[:room]]
        # line numbers counted once through the block, not from its start for every piece of evidence
        line, counted = first_line, 0
        for start, finding in sorted(wanted, key=lambda x: x[0]):
            line += text.count(b"\n", counted, start)
            counted = start
            end = text.find(b"\n", start)
            finding.evidence.append((line, _clean(text[start : end if end >= 0 else len(text)])))
        self._track_failure(text, first_line, markers)
        self.lines_seen = first_line - 1 + text.count(b"\n") + (0 if text.endswith(b"\n") or not text else 1)
        self._open_line = bool(text) and not text.endswith(b"\n")
        return new

    def _stage_at(self, stages: list[tuple[int, str]], pos: int) -> str | None:
        """The stage of the last stage marker before `pos` (stages: this feed's, in order), else the stage the
        earlier feeds ended in."""
        best = self.stage
        for at, stage in stages:
            if at >= pos:
                break
            best = stage
        return best

    def _track_failure(self, text: bytes, first_line: int, markers: list[tuple[int, _Member]]) -> None:
        """Root errors: the exception each traceback ends with, and the stage the log was in there. A traceback
        may end in a later feed (live, line by line): then the next feeds finish it."""
        stages = [(at, m.stage) for at, m in markers if m.kind == "stage" and m.stage]
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
        for pos, member in markers:
            if member.kind != "traceback" or self._tracebacks >= MAX_ROOTS:
                continue
            self._tracebacks += 1
            after = text.find(b"\n", pos)
            root = self._exception_after(text, after + 1, 400) if after >= 0 else None
            stage_here = self._stage_at(stages, pos)
            if root:
                at, line = root
                # a traceback names the stage through its frames; else the last marker the log printed
                stage = self._stage_in(text[pos:at]) or stage_here
                self.roots.append((first_line + text.count(b"\n", 0, at), line, stage))
            else:
                self._awaiting = (self._stage_in(text[pos:]) or stage_here, 400)
        if self.fatal is None:
            for at, member in markers:
                if member.kind == "fatal":
                    start = text.rfind(b"\n", 0, at) + 1
                    end = text.find(b"\n", at)
                    line = _clean(text[start : end if end >= 0 else len(text)])
                    self.fatal = (first_line + text.count(b"\n", 0, start), line)
                    self._fatal_stage = self._stage_at(stages, start)
                    break
        self.stage = self._stage_at(stages, len(text) + 1)

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
            raw = text[start : min(end, start + MAX_LINE_TEXT)].decode("utf-8", "replace")
            message = _LOG_PREFIX.sub("", _PREFIX.sub("", raw)).strip()
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
        silent = any(w in text for w in _SILENT_DEATH)
        finding.groups = {"next_step": _SILENT_DEATH_FIX if silent else _STAGE_FIX[stage]}
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
