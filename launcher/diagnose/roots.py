"""Where a failure's root stands in a log: the exception a traceback ends with (or the error a wrapper quotes), an
exception line outside any traceback, a line that advises a knob, and the stage a traceback's frames name.
"""

from __future__ import annotations

import re

from launcher.diagnose import lifecycle as life
from launcher.diagnose.advice import missing_packages, named_knobs
from launcher.diagnose.logtext import MAX_LINE_TEXT, continued, inner_messages, is_ordinary, level, message

MAX_ROOT_TEXT = 1000  # characters of a root error kept: its advice may come late (evidence shows 400)
# an exception named at the start of a message: "ValueError: ...", or its repr "AssertionError('...')"
LOOSE_EXCEPTION = re.compile(r"^(?:[A-Za-z_]\w*\.)*[A-Z]\w*(?:Error|Exception)(?::\s|:$|\(['\"])")
_EXCEPTION = re.compile(
    r"^(?:[A-Za-z_][\w]*\.)*(?:[A-Z]\w*(?:Error|Exception|Exit|Interrupt)|KeyError|AssertionError)\b(?::.*)?$"
)


def line_before(text: bytes, pos: int) -> bytes:
    """The line before the one `pos` is in."""
    start = text.rfind(b"\n", 0, pos)
    return text[text.rfind(b"\n", 0, max(start, 0)) + 1 : max(start, 0)]


def stage_in(frames: bytes) -> str | None:
    """The stage a traceback's frames (or a stretch of log) name: the last stage whose functions appear in it."""
    found = None
    for stage, markers in life.STAGE_MARKERS:
        if any(m in frames for m in markers if m.startswith(b"in ") or m.islower()):
            found = stage
    return found


def exception_after(text: bytes, start: int, max_lines: int) -> tuple[int, str] | None:
    """The first exception line from `start` on: where Python says what went wrong. A wrapper that quotes the
    error it wraps gives the quoted error."""
    for _ in range(max_lines):
        if start >= len(text):
            return None
        end = text.find(b"\n", start)
        end = len(text) if end < 0 else end
        said = message(text[start:end])
        if _EXCEPTION.match(said):
            quoted = any(q in said for q in life.QUOTING)
            inner = [m for m in inner_messages(said) if _EXCEPTION.match(m)] if quoted else []
            if inner:
                return start, inner[0][:400]
            if not said.startswith(life.WRAPPERS):
                return start, continued(said, text, end)[:MAX_ROOT_TEXT]
        start = end + 1
    return None


# words of a line that advises without an error word in it ("Not enough memory. Please try to increase
# --mem-fraction-static"), or pip's resolver naming the version it wants
ADVISING = (b"lease ", b"Try ", b"onsider", b"may help", b"ou should", b"but you have")
MAX_ADVICE_LINES = 200  # lines read for advice per block: past that, a block is one note repeated
# ... and says what is wrong: advice for the better (a deprecation, a faster setting) is no problem to report
_PROBLEM = re.compile(
    r"(?i)\b(?:not enough|insufficient|out of memory|(?:larger|greater|longer) than|exceeds?|too (?:small|large|big|"
    r"many|few|long|short|old|low|high)|cannot|can't|unable to|incompatible|is not installed|mismatch)\b"
)


def first_advice(text: bytes) -> int | None:
    """Where the first line of `text` starts that says what is wrong and advises a knob or a package by name, and
    is not an INFO/DEBUG line: a log that shows no error of its own may still say what to change."""
    first, read = None, 0
    for needle in ADVISING:
        pos = text.find(needle, 0, first)
        while pos >= 0 and read < MAX_ADVICE_LINES:
            read += 1
            # (looked for no further than a line's text either side: a log without newlines is one long "line")
            start = text.rfind(b"\n", max(0, pos - MAX_LINE_TEXT), pos) + 1 or max(0, pos - MAX_LINE_TEXT)
            end = text.find(b"\n", pos, pos + MAX_LINE_TEXT)
            end = min(len(text), pos + MAX_LINE_TEXT) if end < 0 else end
            raw = text[start : min(end, start + MAX_LINE_TEXT)]
            said = message(raw)
            quiet = is_ordinary(raw) or level(raw) in ("INFO", "DEBUG")
            named = not quiet and _PROBLEM.search(said) is not None
            if named and (named_knobs(said, advising_only=True) or missing_packages(said)):
                first = start
                break
            pos = text.find(needle, end, first)
    return first


_NUMBERS = re.compile(r"\d+")


def waiting_at_end(end: bytes) -> str | None:
    """The waiting line a log ends with, repeated (`end`: the last few KB of the log): a hang, or a death of
    what it waits for, that the log cannot explain."""
    lines = [message(line) for line in end.splitlines()[-life.WAITING_LINES - 1 :] if line.strip()]
    last = lines[-life.WAITING_LINES :]
    if len(last) < life.WAITING_LINES or not all(life.WAITING.search(line) for line in last):
        return None
    return last[-1][:200] if len({_NUMBERS.sub("N", line) for line in last}) <= 2 else None
