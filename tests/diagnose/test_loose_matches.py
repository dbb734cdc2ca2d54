"""A loose message-index match (a short, generic template, or a line that reads as benign) is no error unless the
line itself shows a failure. The templates are the real raise lines of torch 2.9 (torch/distributed/run.py,
determine_local_world_size) and huggingface_hub 0.36 (cli/upload.py), copied into a real venv and read by the real
child; the log lines are the two benign excerpts of the third fresh set that were false alarms on 2026-12-03
(verl-project/verl#3096, allenai/open-instruct#1066)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from launcher.diagnose.index import load_index
from launcher.diagnose.templates import TemplateIndex
from tests.diagnose.texts import diagnose_text
from tests.helpers import FIXTURES, make_env

RUN = """
def determine_local_world_size(nproc_per_node):
    try:
        return int(nproc_per_node)
    except ValueError as e:
        raise ValueError(f"{nproc_per_node} is not available.") from e
"""
UPLOAD = """
import os


def run_upload(resolved_local_path):
    if not os.path.exists(resolved_local_path):
        raise FileNotFoundError(f"No such file or directory: '{resolved_local_path}'.")
"""


@pytest.fixture(scope="module")
def index(tmp_path_factory: pytest.TempPathFactory) -> TemplateIndex:
    files = {
        "torch/__init__.py": "",
        "torch/distributed/run.py": RUN,
        "huggingface_hub/__init__.py": "",
        "huggingface_hub/cli/upload.py": UPLOAD,
    }
    python = make_env(tmp_path_factory.mktemp("loose"), {"torch": "2.9.0", "huggingface_hub": "0.36.0"}, files)
    return load_index(python)[0]


def severities(text: str, index: TemplateIndex) -> dict[str, str]:
    return {str(f["id"]): str(f["severity"]) for f in diagnose_text(text, index=index) if f["origin"] == "index"}


@pytest.mark.parametrize(
    "line",
    [
        "FlashInfer is not available. Falling back to the PyTorch",
        "2025-10-09T15:06:07.144Z df: /root/.triton/autotune: No such file or directory",
    ],
    ids=["fallback", "shell-tool"],
)
def test_a_benign_line_matched_loosely_is_at_most_a_warning(index: TemplateIndex, line: str) -> None:
    found = severities(line + "\n", index)
    assert found and set(found.values()) <= {"warning", "info"}, found


@pytest.mark.parametrize(
    ("line", "function"),
    [
        ("ValueError: gpu is not available.", "determine_local_world_size"),
        ("ERROR 10-09 15:06:07 [upload.py:214] No such file or directory: '/data/ckpt'.", "run_upload"),
        ("FileNotFoundError: No such file or directory: '/data/ckpt'.", "run_upload"),
    ],
    ids=["exception", "logged-at-error", "exception-specific"],
)
def test_the_same_template_is_an_error_when_the_line_shows_a_failure(
    index: TemplateIndex, line: str, function: str
) -> None:
    found = severities(line + "\n", index)
    assert any(rule.endswith(function) and sev == "error" for rule, sev in found.items()), found


def test_the_older_benign_fixtures_raise_no_index_error(index: TemplateIndex) -> None:
    """The benign lines the fresh sets hold, against these templates: none is an error."""
    for name in ("fresh-2026-12-03.jsonl", "fresh-2026-12-03b.jsonl", "fresh-2026-12-03c.jsonl", "cases.jsonl"):
        for line in (FIXTURES / "diagnose" / name).read_text().splitlines():
            case = json.loads(line)
            if case["benign"]:
                assert "error" not in severities(case["excerpt"], index).values(), case["source"]


def test_a_specific_match_needs_no_exception_name(tmp_path: Path) -> None:
    """A line that is most of a long template (an excerpt cut to its message) stays an error without any
    exception name before it: vllm-project/vllm#4232, against vLLM's own raise line."""
    source = (
        "def verify_with_parallel_config(total_num_attention_heads, tensor_parallel_size):\n"
        "    if total_num_attention_heads % tensor_parallel_size != 0:\n"
        "        raise ValueError(\n"
        '            f"Total number of attention heads ({total_num_attention_heads})"\n'
        '            " must be divisible by tensor parallel size "\n'
        '            f"({tensor_parallel_size})."\n'
        "        )\n"
    )
    python = make_env(tmp_path, {"vllm": "0.99.0"}, {"vllm/__init__.py": "", "vllm/config.py": source})
    line = "Total number of attention heads (40) must be divisible by tensor parallel size (6).\n"
    assert "error" in severities(line, load_index(python)[0]).values()
