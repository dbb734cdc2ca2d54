"""Diagnosing a text in a test: the findings as the JSON document carries them."""

from __future__ import annotations

from functools import cache

from checks.gpu_family import family_from_text
from launcher.diagnose.rules import Rule, load_rules
from launcher.diagnose.run import diagnose_blocks
from launcher.diagnose.templates import TemplateIndex

# a death no rule names: the root error is on line 5, while loading weights
ROOT_LOG = (
    "(EngineCore pid=9) INFO 12-01 10:00:00 [loader.py:1] Starting to load model /m\n"
    "(EngineCore pid=9) ERROR 12-01 10:00:02 [core.py:708] EngineCore failed to start.\n"
    "(EngineCore pid=9) ERROR 12-01 10:00:02 [core.py:708] Traceback (most recent call last):\n"
    '(EngineCore pid=9) ERROR 12-01 10:00:02 [core.py:708]   File "/x/runner.py", line 3, in load_model\n'
    "(EngineCore pid=9) ERROR 12-01 10:00:02 [core.py:708] OSError: weights truncated at byte 912\n"
)


@cache
def knowledge_base() -> list[Rule]:
    """The curated rules, read once per session: reading and compiling them is most of a short log's diagnosis
    (Rule is frozen, and the matcher only reads the list)."""
    return load_rules()


def diagnose_text(text: str, gpu: str | None = None, index: TemplateIndex | None = None) -> list[dict[str, object]]:
    findings, _ = diagnose_blocks([text.encode()], family_from_text(gpu) if gpu else None, knowledge_base(), index)
    return [f.to_json() for f in findings]


def assert_named(text: str, rule: str, names: str, severity: str = "error") -> None:
    """`rule` reads `text` at `severity`, and its fix names `names`."""
    finding = {f["id"]: f for f in diagnose_text(text)}[rule]
    assert finding["severity"] == severity and names in str(finding["fix"]), finding
