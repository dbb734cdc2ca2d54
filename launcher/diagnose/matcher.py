"""The scan: a log (blocks of a file, or live lines) against the curated rules, the message index and the
markers of vLLM's life.

Per sub-block of SUB_BLOCK bytes: the set of its words (one translate and one split, at C speed) intersected
with the anchor words of the rules' patterns and the markers; only those whose anchor word is there are searched
for (bytes.find of their literal, then the regex on that line). Lines that hold an error-like word and are not
INFO/DEBUG lines are then compared with the message index. An ordinary block costs one pass, whatever the
number of rules and templates.
"""

from __future__ import annotations

import re

from launcher.diagnose import lifecycle as life
from launcher.diagnose.access import refused_at
from launcher.diagnose.advice import message_advice, misspelt
from launcher.diagnose.findings import CURATED, INDEX, MAX_EVIDENCE, Finding, Trace, compose
from launcher.diagnose.literals import NON_WORD
from launcher.diagnose.logtext import (
    MAX_LINE_TEXT,
    LogEngine,
    advice_after,
    continued,
    evidence,
    frames,
    is_ordinary,
    level,
    looks_benign,
    message,
    plain,
    says_failed,
    shows_failure,
)
from launcher.diagnose.members import Member, caseless, caseless_matches, members
from launcher.diagnose.roots import (
    LOOSE_EXCEPTION,
    MAX_ROOT_TEXT,
    exception_after,
    first_advice,
    line_before,
    stage_in,
    waiting_at_end,
)
from launcher.diagnose.rules import Rule, Severity
from launcher.diagnose.sites import SiteRules
from launcher.diagnose.templates import TemplateIndex

SUB_BLOCK = 256 << 10  # the unit the word prefilter decides for: a failure's lines are searched in this much
LONG_LINE = 4096  # in a line longer than this, a pattern is matched within this many bytes of its literal
MAX_ROOTS = 20  # tracebacks examined per log: the first one is the root; a log of a million is not read twice
# the levels a logger marks an error with: a line logged so is a root when nothing else names the failure (at a
# fatal level, a failure of its own)
ERROR_LEVELS, FATAL_LEVELS = ("ERROR", "CRITICAL", "FATAL"), ("CRITICAL", "FATAL")
MAX_INDEX_LINES = 20000  # lines compared with the index per log: past that, a log is one failure repeated
# a line that may carry an error or warning message holds one of these (case as printed)
ERRORISH = (b"rror", b"ERROR", b"WARN", b"arning", b"xception", b"ailed", b"FAIL", b"atal", b"ssert", b"not supported")
# a line that ends before its message does: a list goes on (",") or a label waits for its value (":")
_WRAPPED = re.compile(rb"[,:(-]\s*$")


class Matcher:
    """Accumulates findings over text fed in order (blocks of a file, or live lines)."""

    def __init__(self, rules: list[Rule], gpu_family: str | None = None, index: TemplateIndex | None = None) -> None:
        self.rules = rules
        self.gpu_family = gpu_family
        self.index = index
        self.findings: dict[str, Finding] = {}
        self.trace = Trace()
        self.lines_seen = 0
        self._open_line = False  # the text fed so far ends inside a line
        self._by_word = members(rules)
        self._words = frozenset(self._by_word)
        self._caseless = caseless(self._by_word)
        self._sites = SiteRules(rules, index)
        self._awaiting: tuple[str | None, int] | None = None  # a traceback whose exception is still to come
        self._index_lines = 0
        self._frame_hits: list[tuple[Rule, int, str, str | None]] = []  # (rule, line, root error, stage)
        self._loose: int | None = None  # where this feed's first exception line outside a traceback starts
        self._logged: int | None = None  # where this feed's first line logged at an error level starts
        self._tail: tuple[int, bytes] | None = None  # the log's last line, when no error-like word had it compared
        self._end = b""  # the log's last few KB: how it ends
        self._engine = LogEngine()

    def _line_at(self, text: bytes, pos: int, lo: int, hi: int) -> tuple[int, int]:
        """The line around pos, looked for no further than LONG_LINE either side: in a log without newlines a
        "line" is the window around each hit."""
        lo, hi = max(lo, pos - LONG_LINE), min(hi, pos + LONG_LINE)
        nl = text.rfind(b"\n", lo, pos)
        start = nl + 1 if nl >= 0 else lo
        nl = text.find(b"\n", pos, hi)
        return start, nl if nl >= 0 else hi

    def _scan(self, text: bytes) -> tuple[dict[str, tuple[Rule, set[int], dict[str, str]]], list[tuple[int, Member]]]:
        """Rule hits (rule id -> rule, line starts, named groups) and marker hits (position, marker) in `text`."""
        hits: dict[str, tuple[Rule, set[int], dict[str, str]]] = {}
        markers: dict[int, Member] = {}
        start = 0
        while start < len(text):
            cut = text.find(b"\n", start + SUB_BLOCK, start + 2 * SUB_BLOCK)
            # no newline near: a line longer than a sub-block is cut, the pieces overlapping by LONG_LINE bytes
            end, over = (cut + 1, cut + 1) if cut >= 0 else (min(len(text), start + SUB_BLOCK), LONG_LINE)
            stop = min(len(text), end + over) if cut < 0 else end
            present = self._words.intersection(text[start:stop].translate(NON_WORD).split())
            for word in present:
                for member in self._by_word[word]:
                    pos = text.find(member.literal, start, stop)
                    while pos >= 0:
                        line_start, line_end = self._line_at(text, pos, start, stop)
                        if member.pattern is None:
                            markers[pos] = member
                        else:
                            m = member.pattern.search(text, line_start, line_end)
                            if m is None and _WRAPPED.search(text, max(line_start, line_end - 2), line_end):
                                # the message goes on in the next line (a terminal or a container wrapped it)
                                following = self._line_at(text, line_end + 1, start, stop)[1]
                                m = member.pattern.search(
                                    text[line_start:line_end] + b" " + text[line_end + 1 : following]
                                )
                            if m and member.rule is not None:
                                _, lines, groups = hits.setdefault(member.rule.id, (member.rule, set(), {}))
                                lines.add(line_start)
                                for k, v in m.groupdict().items():
                                    if v and k not in groups:
                                        groups[k] = v.decode(errors="replace")
                        pos = text.find(member.literal, line_end, stop)
            self._scan_errorish(text, start, stop, hits)
            start = end
        return hits, sorted(markers.items())

    def _scan_errorish(
        self, text: bytes, start: int, stop: int, hits: dict[str, tuple[Rule, set[int], dict[str, str]]]
    ) -> None:
        """Lines of text[start:stop] that may carry an error or warning: the first one that is an exception of its
        own (a log cut down to its last line still names the failure), and each compared with the message index. A
        line a rule's pattern matched gets the raise site; a line no pattern matched gets the rule keyed on its
        site, or a finding of its own made from the template."""
        starts: set[int] = set()
        for needle in ERRORISH:
            pos = text.find(needle, start, stop)
            while pos >= 0:
                line_start, line_end = self._line_at(text, pos, start, stop)
                starts.add(line_start)
                pos = text.find(needle, line_end, stop)
        by_line = {s: rid for rid, (_, lines, _) in hits.items() for s in lines}
        for line_start in sorted(starts):
            if self._index_lines >= MAX_INDEX_LINES:
                return
            line_end = self._line_at(text, line_start, start, stop)[1]
            raw = text[line_start : min(line_end, line_start + MAX_LINE_TEXT)]
            if is_ordinary(raw):
                continue
            if raw.islower():  # written in lower case: the rules' words in any case
                for rule, m in caseless_matches(raw, self._caseless):
                    _, lines, groups = hits.setdefault(rule.id, (rule, set(), {}))
                    lines.add(line_start)
                    by_line[line_start] = rule.id
                    groups.update({k: v.decode(errors="replace") for k, v in m.groupdict().items() if v})
            said = message(raw)
            if (
                self._loose is None
                and (LOOSE_EXCEPTION.match(said) or level(raw) in FATAL_LEVELS)
                and not any(w in said for w in life.SHUTTING_DOWN)
            ):
                self._loose = line_start
            if self._logged is None and (level(raw) in ERROR_LEVELS or says_failed(said, level(raw))):
                self._logged = line_start
            if self.index is None:
                continue
            self._index_lines += 1
            nxt = text[line_end + 1 : self._line_at(text, line_end + 1, start, stop)[1]] if line_end < stop else None
            found = self.index.find(raw, nxt or None, self._engine.name)
            if found is None:
                continue
            rule_id = by_line.get(line_start)
            if rule_id is not None:
                self._sites.attach(rule_id, found[0])
                continue
            rule = self._index_rule(raw, *found, after=advice_after(text, line_end + 1, stop))
            hits.setdefault(rule.id, (rule, set(), {}))[1].add(line_start)

    def _index_rule(self, raw: bytes, template: int, specific: bool, after: list[str] | None = None) -> Rule:
        """The rule for a line the index matched and no curated pattern did: a loose match (a short or generic
        template, or a line that reads as benign) is an error only when the line itself shows a failure. The
        advice printed under the line (`after`) is the message's too."""
        assert self.index is not None
        said, logged = message(raw), level(raw)
        loose = not shows_failure(said, logged) and (not specific or looks_benign(said, logged))
        foreign = self.index.foreign(template, self._engine.name)
        # a short template, or an umbrella ("Engine core initialization failed"), gives way to the root error
        vague = not specific or any(u in said for u in life.UMBRELLAS)
        return self._sites.rule_for(template, " ".join([said, *(after or [])]), logged, foreign, loose, vague)

    def feed(self, text: bytes) -> list[Finding]:
        """Scan whole lines of a log (bytes: searching them is several times faster than searching decoded
        text); returns the findings that appeared for the first time."""
        text = plain(text)
        first_line = self.lines_seen + 1 - (1 if self._open_line else 0)
        self._engine.read(text)
        new: list[Finding] = []
        hits, markers = self._scan(text)
        stages = [(at, m.stage) for at, m in markers if m.kind == "stage" and m.stage]
        tracebacks = [at for at, m in markers if m.kind == "traceback"]
        wanted: list[tuple[int, Finding]] = []
        order = {r.id: i for i, r in enumerate(self.rules)}
        # in knowledge-base order (index findings after), so "new" findings come out in a stable order
        for rule_id in sorted(hits, key=lambda r: (order.get(r, len(order)), r)):
            rule, starts, groups = hits[rule_id]
            finding = self._finding(rule, new)
            if finding.stage is None and starts:
                finding.stage = self._stage_of(text, min(starts), stages, tracebacks)
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
            raw = text[start : end if end >= 0 else len(text)]
            finding.evidence.append((line, evidence(raw)))
            if finding.said is None and finding.origin == CURATED and finding.severity != Severity.INFO:
                finding.said = message_advice(message(raw), knobs_only=True)
        self._track_life(text, first_line, markers, stages)
        for rule, at_line, root, stage in self._frame_hits:
            finding = self._finding(rule, new)
            finding.count += 1
            finding.stage = finding.stage or stage
            if len(finding.evidence) < MAX_EVIDENCE and all(n != at_line for n, _ in finding.evidence):
                finding.evidence.append((at_line, root))
                finding.evidence.sort()
        self._frame_hits = []
        for at, kept in ((self._loose, "loose"), (self._logged, "logged")):
            if at is not None and getattr(self.trace, kept) is None:
                end = text.find(b"\n", at)
                end = end if end >= 0 else len(text)
                said = continued(message(text[at:end]), text, end)[:MAX_ROOT_TEXT]
                setattr(self.trace, kept, (first_line + text.count(b"\n", 0, at), said, self.trace.stage))
        self._loose = self._logged = None
        # (a line that only advises stands in for a root error only where the log shows none: not read once it has)
        shown = self.trace.roots or self.trace.fatal or self.trace.loose or self.trace.logged or self.trace.advised
        if not shown and (at := first_advice(text)) is not None:
            end = text.find(b"\n", at)
            said = message(text[at : end if end >= 0 else len(text)])
            self.trace.advised = (first_line + text.count(b"\n", 0, at), said, self.trace.stage)
        if self.trace.refused is None and (refused := refused_at(text)) is not None:
            at, next_step = refused
            end = text.find(b"\n", at)
            access = evidence(text[at : end if end >= 0 else len(text)])
            self.trace.refused = (first_line + text.count(b"\n", 0, at), access, next_step)
        self._keep_tail(text, first_line)
        self._end = (self._end + text[-4096:])[-4096:]
        self.lines_seen = first_line - 1 + text.count(b"\n") + (0 if text.endswith(b"\n") or not text else 1)
        self._open_line = bool(text) and not text.endswith(b"\n")
        return new

    def _keep_tail(self, text: bytes, first_line: int) -> None:
        """A log ends with its failure: its last line is compared with the index even without an error-like word
        (an excerpt cut to the message, a message printed bare). Kept here, compared when the report is made."""
        end = len(text.rstrip())
        if not end:
            return
        start = text.rfind(b"\n", 0, end) + 1
        raw = text[start : min(end, start + MAX_LINE_TEXT)]
        plain = self.index is not None and not is_ordinary(raw) and not any(w in raw for w in ERRORISH)
        self._tail = (first_line + text.count(b"\n", 0, start), raw) if plain else None

    def _read_tail(self) -> None:
        if self._tail is None or self.index is None:
            return
        line, raw = self._tail
        self._tail = None
        found = self.index.find(raw, engine=self._engine.name)
        if found is not None:
            finding = self._finding(self._index_rule(raw, *found), [])
            if all(n != line for n, _ in finding.evidence):
                finding.count += 1
                finding.evidence.append((line, evidence(raw)))

    def _stage_of(self, text: bytes, pos: int, stages: list[tuple[int, str]], tracebacks: list[int]) -> str | None:
        """The stage a hit at pos happened in: named by the frames of the traceback it ends, else by the last
        stage marker before it."""
        tb = max((at for at in tracebacks if pos - 65536 < at < pos), default=None)
        return (stage_in(text[tb:pos]) if tb is not None else None) or self._stage_at(stages, pos)

    def _stage_at(self, stages: list[tuple[int, str]], pos: int) -> str | None:
        """The stage of the last stage marker before `pos` (stages: this feed's, in order), else the stage the
        earlier feeds ended in."""
        best = self.trace.stage
        for at, stage in stages:
            if at >= pos:
                break
            best = stage
        return best

    def _track_life(
        self, text: bytes, first_line: int, markers: list[tuple[int, Member]], stages: list[tuple[int, str]]
    ) -> None:
        """Root errors (the exception each traceback ends with, and its stage), the first fatal line, the first
        stop asked for, start and serving. A traceback may end in a later feed (live, line by line): then the
        next feeds finish it."""
        trace = self.trace

        def line_of(at: int) -> int:
            return first_line + text.count(b"\n", 0, at)

        def whole_line(at: int) -> tuple[int, str]:
            start = text.rfind(b"\n", 0, at) + 1
            end = text.find(b"\n", at)
            return line_of(start), evidence(text[start : end if end >= 0 else len(text)])

        if self._awaiting is not None:
            stage, lines_left = self._awaiting
            root = exception_after(text, 0, lines_left)
            if root:
                at, line = root
                trace.roots.append((line_of(at), line, stage_in(text[:at]) or stage))
                self._awaiting = None
            else:
                left = lines_left - text.count(b"\n") - 1
                self._awaiting = (stage_in(text) or stage, left) if left > 0 else None
        for pos, member in markers:
            if member.kind == "traceback" and life.UNRAISABLE in line_before(text, pos):
                continue  # an exception Python ignored: its traceback is no failure
            if member.kind == "traceback" and trace.tracebacks < MAX_ROOTS:
                trace.tracebacks += 1
                after = text.find(b"\n", pos)
                root = exception_after(text, after + 1, 400) if after >= 0 else None
                stage_here = self._stage_at(stages, pos)
                if root:
                    at, line = root
                    # a traceback names the stage through its frames; else the last marker the log printed
                    stage = stage_in(text[pos:at]) or stage_here
                    trace.roots.append((line_of(at), line, stage))
                    # a curated rule keyed on a component the traceback ran through explains it, any wording
                    keyed = self._sites.keyed_on(frames(text[pos:at]))
                    if keyed is not None and not keyed.generic:
                        self._frame_hits.append((keyed, line_of(at), line, stage))
                else:
                    self._awaiting = (stage_in(text[pos:]) or stage_here, 400)
            elif member.kind == "fatal" and trace.fatal is None:
                trace.fatal = (*whole_line(pos), self._stage_at(stages, pos))
            elif member.kind == "stop" and trace.stop is None:
                trace.stop = whole_line(pos)
            elif member.kind == "crashed" and trace.crashed is None:
                trace.crashed = whole_line(pos)
            elif member.kind == "start":
                trace.started = True
            elif member.kind == "stage" and member.literal == life.SERVING and trace.serving is None:
                trace.serving = line_of(pos)
        trace.stage = self._stage_at(stages, len(text) + 1)

    def _finding(self, rule: Rule, new: list[Finding]) -> Finding:
        if rule.id not in self.findings:
            site = self._sites.site_of(rule.id)
            finding = Finding(rule, rule.severity_on(self.gpu_family), site=site)
            finding.origin = INDEX if rule.id.startswith("raised:") else CURATED
            self.findings[rule.id] = finding
            new.append(finding)
        return self.findings[rule.id]

    def report(self) -> list[Finding]:
        """Findings by severity, read as an operator would (findings.compose)."""
        self._read_tail()
        waiting = waiting_at_end(self._end)
        self.trace.waiting = (self.lines_seen, waiting) if waiting else None
        found = [f for f in self.findings.values() if f.count]
        for f in found:
            if f.site is None:
                f.site = self._sites.site_of(f.rule.id)
            if self.index is not None:
                f.hint = misspelt(f.groups, self.index.engine_args)
        return compose(found, self.trace)

    def root_cause(self) -> Finding | None:
        """The first error of the report, if the log shows a failure."""
        errors = [f for f in self.report() if f.severity == Severity.ERROR]
        return errors[0] if errors else None
