"""Where a failure's root stands in a log: the exception a traceback ends with (or the error a wrapper quotes), an
exception line outside any traceback, and the stage a traceback's frames name.
"""

from __future__ import annotations

import re

from launcher.diagnose import lifecycle as life
from launcher.diagnose.logtext import continued, inner_messages, message

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
