"""What every match of a regular expression must contain: its literal runs and its whole words.

A small parser of our own (no private `re` internals). The matcher finds candidate lines by these (bytes.find of
a literal, a set of words per block) before it runs any regex; the knowledge base is refused at load when a
pattern has none, because a pattern without one would cost a regex search on every line.
"""

from __future__ import annotations

import functools
import re

from launcher.paths import data_dir

_META = set(".^$*+?{}[]()|\\")
_QUANT = set("*?{")
_BOUNDARY_ESCAPES = set("bsWnd")  # \b, \s, \W, \n, \d: a word (letters and _) ends at them
WORD = re.compile(r"[A-Za-z_]+")
# Every byte that is not an ASCII letter or _ becomes a space: the words of a block are then one split (digits
# separate words too: numbers are most of a log's tokens, and leaving them out halves the split's work).
NON_WORD = bytes(c if chr(c).isascii() and (chr(c).isalpha() or c == 95) else 32 for c in range(256))


def _literal_runs(pattern: re.Pattern[str]) -> list[tuple[str, bool, bool]] | None:
    """The runs of literal characters every match must contain, each with whether a word boundary is certain
    just before and just after it (a \\b, \\s, \\W, \\n or \\d next to it); None if the pattern has a top-level
    alternation or ignores case.

    It reads the pattern left to right at the top level, keeps runs of plain characters and escaped punctuation,
    treats groups, classes and other escapes as breaks, drops a character a quantifier makes optional.
    Conservative: it may miss a literal, never invents one."""
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


def anchor_words(pattern: re.Pattern[str]) -> list[bytes]:
    """Words (runs of ASCII letters and _; digits separate words) every match must contain as a whole word: inside
    a literal run with a non-word character or a certain boundary on both sides. The matcher finds candidate
    lines by them."""
    words = []
    for run, left, right in _literal_runs(pattern) or []:
        for m in WORD.finditer(run):
            if (m.start() > 0 or left) and (m.end() < len(run) or right):
                words.append(m.group().encode())
    return words


@functools.cache
def ordinary_word_counts() -> dict[bytes, int]:
    """How often each word occurs in ordinary vLLM log lines (knowledge/ordinary-lines.log, real healthy logs):
    patterns and templates are anchored on their rarest word, so ordinary blocks need no search at all."""
    counts: dict[bytes, int] = {}
    for word in data_dir("knowledge").joinpath("ordinary-lines.log").read_bytes().translate(NON_WORD).split():
        counts[word] = counts.get(word, 0) + 1
    return counts


def rarest(words: list[bytes]) -> bytes:
    """The word to anchor on: 4+ letters if there is one, then the rarest in ordinary logs, then the longest."""
    counts = ordinary_word_counts()
    return min(words, key=lambda w: (len(w) < 4, counts.get(w, 0), -len(w)))
