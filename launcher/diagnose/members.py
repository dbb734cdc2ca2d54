"""What the scan looks for, by anchor word: the rules' patterns and the markers of vLLM's life (a traceback, a
fatal line, a stop, a start, a stage). A block's words select the members worth searching for."""

from __future__ import annotations

import re
from collections.abc import Iterator
from dataclasses import dataclass, replace

from launcher.diagnose import lifecycle as life
from launcher.diagnose.literals import NON_WORD, WORD, anchor_words, rarest, required_literal
from launcher.diagnose.rules import Rule


def marker_pattern(marker: bytes) -> re.Pattern[str]:
    """A fixed marker as a pattern the prefilter can anchor on: it starts a word, and it ends one only when it is a
    single word (the last word of "Capturing CUDA graph" goes on as "graphs")."""
    text = marker.decode()
    left = r"\b" if WORD.match(text[0]) else ""
    right = r"\b" if WORD.match(text[-1]) and WORD.fullmatch(text) else ""
    return re.compile(left + re.escape(text) + right)


@dataclass(frozen=True)
class Member:
    """One thing the scan looks for: a rule's pattern, or a marker of a stage, a fatal line, a stop, a start
    or a traceback."""

    literal: bytes  # in every match: bytes.find locates candidate lines by it
    pattern: re.Pattern[bytes] | None  # None: the literal alone is the match
    rule: Rule | None = None
    stage: str | None = None
    kind: str = "rule"  # rule | stage | fatal | stop | start | crashed | traceback


def members(rules: list[Rule]) -> dict[bytes, list[Member]]:
    by_word: dict[bytes, list[Member]] = {}
    for rule in rules:
        for p in rule.patterns:
            literal = required_literal(p)
            assert literal is not None  # load_rules refuses patterns without one
            member = Member(literal, re.compile(p.pattern.encode(), p.flags & ~re.UNICODE), rule)
            by_word.setdefault(rarest(anchor_words(p)), []).append(member)
    markers: list[tuple[bytes, str | None, str]] = [(life.TRACEBACK, None, "traceback")]
    markers += [(m, None, "fatal") for m in life.FATAL] + [(m, None, "stop") for m in life.STOP]
    markers += [(m, None, "start") for m in life.STARTED] + [(m, None, "crashed") for m in life.CRASHED]
    markers += [(m, stage, "stage") for stage, ms in life.STAGE_MARKERS for m in ms]
    for marker, stage, kind in markers:
        by_word.setdefault(rarest(anchor_words(marker_pattern(marker))), []).append(
            Member(marker, None, stage=stage, kind=kind)
        )
    return by_word


def caseless(by_word: dict[bytes, list[Member]]) -> dict[bytes, list[Member]]:
    """The rules' members for a line written in lower case (a thread's title, a user retyping an error): anchored
    on the lower-cased word, matched without case."""
    lowered: dict[bytes, list[Member]] = {}
    for word, found in by_word.items():
        for member in found:
            if member.pattern is not None and member.rule is not None:
                pattern = re.compile(member.pattern.pattern, member.pattern.flags | re.IGNORECASE)
                lowered.setdefault(word.lower(), []).append(
                    replace(member, literal=member.literal.lower(), pattern=pattern)
                )
    return lowered


def caseless_matches(line: bytes, lowered: dict[bytes, list[Member]]) -> Iterator[tuple[Rule, re.Match[bytes]]]:
    """The rules whose patterns match a lower-case line when case is ignored."""
    for word in lowered.keys() & set(line.translate(NON_WORD).split()):
        for member in lowered[word]:
            m = member.pattern.search(line) if member.literal in line and member.pattern is not None else None
            if m and member.rule is not None:
                yield member.rule, m
