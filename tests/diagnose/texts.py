"""Diagnosing a text in a test: the findings as the JSON document carries them."""

from __future__ import annotations

from checks.gpu_family import family_from_text
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


def diagnose_text(text: str, gpu: str | None = None, index: TemplateIndex | None = None) -> list[dict[str, object]]:
    findings, _ = diagnose_blocks([text.encode()], family_from_text(gpu) if gpu else None, index=index)
    return [f.to_json() for f in findings]
