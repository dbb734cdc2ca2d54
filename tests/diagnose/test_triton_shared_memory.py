"""Triton's "out of resource: shared memory": an error where Triton raised it, a warning where it is only the
message (an autotuner reports each configuration it skips and goes on). The lines are the public threads' own:
sglang#2040 is the seventh fresh set's one false alarm, read after that set's single measurement."""

from __future__ import annotations

import json

from tests.diagnose.texts import assert_named, diagnose_text
from tests.helpers import FIXTURES


def _excerpt(name: str, source: str) -> str:
    lines = (FIXTURES / "diagnose" / name).read_text().splitlines()
    return next(c["excerpt"] for c in map(json.loads, lines) if c["source"] == source)


def test_inductor_autotuning_that_skips_a_configuration_is_no_error() -> None:
    """torch Inductor's select_algorithm logs the skipped configuration at W level; the server runs."""
    text = _excerpt("fresh-2026-12-03g.jsonl", "https://github.com/sgl-project/sglang/issues/2040")
    assert not [f["id"] for f in diagnose_text(text) if f["severity"] == "error"]
    assert_named(text, "triton-shared-memory-config", "nothing to do", severity="warning")


def test_triton_raising_out_of_resources_is_an_error() -> None:
    text = _excerpt("fresh-2026-12-03c.jsonl", "https://github.com/Yuliang-Liu/MonkeyOCR/issues/25")
    assert_named(text, "triton-shared-memory", "num_stages")
    assert "triton-shared-memory-config" not in {f["id"] for f in diagnose_text(text)}


def test_the_message_alone_names_the_knob_as_a_warning() -> None:
    """triton#8182's title: the message without its exception."""
    text = _excerpt("cases.jsonl", "https://github.com/triton-lang/triton/issues/8182")
    assert_named(text, "triton-shared-memory-config", "num_stages", severity="warning")
