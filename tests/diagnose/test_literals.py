"""The literal analyser: what every match of a pattern must contain, and the patterns it refuses."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from launcher.diagnose.literals import anchor_words, required_literal
from launcher.diagnose.rules import load_rules


@pytest.mark.parametrize(
    ("pattern", "literal"),
    [
        (r"Tried to allocate [\d.]+ [KMG]iB", b"Tried to allocate "),
        (r"LoRA rank (?P<rank>\d+) is greater than", b" is greater than"),
        (r"colou?r scheme", b"r scheme"),
        (r"\[DEPRECATED\] x", b"[DEPRECATED] x"),
        (r"abc|defgh", None),
    ],
)
def test_required_literal(pattern: str, literal: bytes | None) -> None:
    assert required_literal(re.compile(pattern)) == literal


def test_a_pattern_without_a_literal_is_refused(tmp_path: Path) -> None:
    kb = tmp_path / "bad.toml"
    kb.write_text(
        "[[rule]]\nid = 'x'\nseverity = 'error'\ntitle = 't'\npatterns = ['\\\\d+|\\\\w+']\n"
        "cause = 'c'\nfix = 'f'\nsource = 's'\n"
    )
    with pytest.raises(ValueError, match=r"bad.toml: rule x: pattern .* has no literal of 4\+ characters"):
        load_rules([kb])


@pytest.mark.parametrize(
    ("pattern", "words"),
    [
        (r"sm_\d+a? is not compatible", [b"is", b"not"]),  # the edge words may be parts of longer ones
        (r"\bPTXASError\b", [b"PTXASError"]),
        (r"Tried to allocate [\d.]+ [KMG]iB", [b"to", b"allocate"]),
        (r"NCCL\s*error", []),  # \s* may be empty: "NCCLerror" matches, so neither is a whole word
        (r"colou?r scheme", []),
    ],
)
def test_anchor_words(pattern: str, words: list[bytes]) -> None:
    assert anchor_words(re.compile(pattern)) == words


def test_a_pattern_without_a_whole_word_is_refused(tmp_path: Path) -> None:
    kb = tmp_path / "bad.toml"
    kb.write_text(
        "[[rule]]\nid = 'x'\nseverity = 'error'\ntitle = 't'\npatterns = ['ncclSystemError']\n"
        "cause = 'c'\nfix = 'f'\nsource = 's'\n"
    )
    with pytest.raises(ValueError, match=r"bad.toml: rule x: pattern 'ncclSystemError' has no whole word"):
        load_rules([kb])
