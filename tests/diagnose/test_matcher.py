"""The scan: prefixes, colour, line numbers across blocks and sub-blocks, root errors and their stage."""

from __future__ import annotations

import io

import pytest

from launcher.diagnose.logtext import BLOCK_BYTES, read_blocks
from launcher.diagnose.matcher import SUB_BLOCK, Matcher
from launcher.diagnose.rules import load_rules
from launcher.diagnose.run import diagnose_blocks
from tests.diagnose.texts import ROOT_LOG, diagnose_text


def test_the_root_error_hides_the_generic_one() -> None:
    log = (
        "ERROR [core.py:843] EngineCore failed to start.\n"
        "ERROR [core.py:843] RuntimeError: bmm_fp8_internal_cublaslt failed: the library was not initialized\n"
    )
    assert [f["id"] for f in diagnose_text(log)] == ["flashinfer-fp8-gemm"]
    alone = diagnose_text(log.splitlines()[0])  # no root cause in the log: the fatal line is the root error
    assert [f["id"] for f in alone] == ["engine-core-died", "root-error"]
    assert alone[1]["evidence"] == [{"line": 1, "text": "ERROR [core.py:843] EngineCore failed to start."}]


def test_prefixes_colour_and_line_numbers() -> None:
    log = (
        "vllm-1  | INFO starting\n"
        "vllm-1  | \x1b[31m(EngineCore pid=97) ERROR max_num_seqs (1024) exceeds available Mamba cache blocks "
        "(600).\x1b[0m\n"
    )
    (finding,) = diagnose_text(log)
    assert finding["evidence"] == [
        {"line": 2, "text": "ERROR max_num_seqs (1024) exceeds available Mamba cache blocks (600)."}
    ]
    assert "--max-num-seqs 600" in str(finding["fix"])


def test_line_numbers_across_blocks() -> None:
    blocks = read_blocks(
        io.BytesIO(b"ok\n" * 10 + b"RuntimeError: CUDA error: an illegal memory access was encountered\n"), "log"
    )
    matcher = Matcher(load_rules())
    for block in blocks:
        matcher.feed(block)
    assert matcher.report()[0].evidence[0][0] == 11


@pytest.mark.parametrize("live", [False, True], ids=["file", "line-by-line"])
def test_unknown_death_names_root_line_and_stage(live: bool) -> None:
    matcher = Matcher(load_rules())
    for chunk in ROOT_LOG.splitlines(keepends=True) if live else [ROOT_LOG]:
        matcher.feed(chunk.encode())
    findings = {f.rule.id: f for f in matcher.report()}
    assert set(findings) == {"engine-core-died", "root-error"}
    finding = findings["root-error"]
    assert (finding.rule.id, finding.severity, finding.stage) == ("root-error", "error", "loading weights")
    assert finding.evidence[0] == (5, "OSError: weights truncated at byte 912")
    assert "safetensors shard" in finding.fix()


def test_a_log_without_newlines_is_read_in_bounded_blocks() -> None:
    blocks = list(read_blocks(io.BytesIO(b"x" * (3 * BLOCK_BYTES + 5)), "log"))
    assert [len(b) for b in blocks] == [BLOCK_BYTES] * 3 + [5]


NO_KERNEL = b"RuntimeError: CUDA error: no kernel image is available for execution on the device"


@pytest.mark.parametrize("at", [0, SUB_BLOCK - 40, SUB_BLOCK + 7, 3 * SUB_BLOCK - 40])
def test_a_failure_anywhere_in_a_long_log_is_found(at: int) -> None:
    """Across sub-blocks of the word prefilter, with newlines and in one line without any."""
    ordinary = b"(APIServer pid=1) INFO 12-01 10:00:00 [loggers.py:123] Engine 000: Running: 1 reqs\n"
    text = (ordinary * (4 * SUB_BLOCK // len(ordinary)))[:at]
    flat = text.replace(b"\n", b" ")
    for log in (text + b"\n" + NO_KERNEL + b"\n" + text, flat + NO_KERNEL + flat):
        findings, _ = diagnose_blocks(read_blocks(io.BytesIO(log), "log"))
        assert "arch-missing-in-binary" in {f.rule.id for f in findings}, (at, len(log))
