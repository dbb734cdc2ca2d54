"""The verdict on an exception a kernel raised (unsupported, unavailable, not-probed, or a real failure), from
real messages: the H200 probe captures and the SM12x serving-log corpus (tests/fixtures/README.md)."""

from __future__ import annotations

import json
import re

import pytest

from launcher.child.verdict import NotProbed, Unsupported, classify
from tests.helpers import FIXTURES


def corpus_line(entry: str, start: str) -> str:
    """The line of a corpus entry's log that starts (after any process prefix) with `start`, without its prefix."""
    for raw in (FIXTURES / "corpus" / "sm12x-serving-logs.jsonl").read_text().splitlines():
        doc = json.loads(raw)
        if doc["id"] == entry:
            for line in doc["log"].splitlines():
                at = line.find(start)
                if at >= 0:
                    return line[at:]
    raise AssertionError(f"{start!r} not in corpus entry {entry}")


def captured_error(fixture: str, kernel: str) -> str:
    doc = json.loads((FIXTURES / "probe" / fixture).read_text())
    return next(k["error"] for k in doc["kernels"] if k["kernel"] == kernel)


def rebuilt(message: str) -> BaseException:
    """The exception a message was printed from: 'Class: text' (builtins only)."""
    match = re.match(r"(\w+): (.*)", message, re.DOTALL)
    assert match, message
    cls = {c.__name__: c for c in (RuntimeError, NotImplementedError, ValueError, ModuleNotFoundError, ImportError)}
    return cls[match[1]](match[2])


@pytest.mark.parametrize(
    "message, status",
    [
        (captured_error("h200-torch-2026-11-30.json", "TorchNvFp4LinearKernel"), "unsupported"),
        (captured_error("h200-torch-2026-11-30.json", "CutlassFP8ScaledMMLinearKernel"), "unavailable"),
        (captured_error("h200-torch-2026-11-30.json", "FlashInferFP8ScaledMMLinearKernel"), "unavailable"),
        (corpus_line("torch-no-sm120-01", "RuntimeError: CUDA error: no kernel image"), "unsupported"),
        (corpus_line("nvfp4-moe-cutlass-no-sm120-v0102-01", "NotImplementedError: No compiled"), "unsupported"),
        (corpus_line("sglang-trtllm-attention-sm100-only-on-sm120-01", "RuntimeError: Error in"), "unsupported"),
        (corpus_line("vllm-build-undefined-symbol-sm100-moe-rtx5080-01", "ImportError: "), "unavailable"),
        (corpus_line("gb10-fp8-cutlass-missing-sm121-cubins-01", "RuntimeError: Invalid status"), None),
        (corpus_line("deepgemm-sm120-unknown-recipe-01", "RuntimeError: Assertion error"), None),
        ("RuntimeError: CUDA error: an illegal memory access was encountered", None),
    ],
    ids=[
        "h200-cublas-fp4-not-supported",
        "h200-no-vllm",
        "h200-no-flashinfer",
        "sm120-no-kernel-image",
        "sm120-no-cutlass-for-capability",
        "sm120-trtllm-unsupported-architecture",
        "broken-build-undefined-symbol",
        "gb10-cutlass-invalid-status-says-nothing-of-support",
        "deepgemm-assertion-is-a-failure",
        "illegal-memory-access-is-a-failure",
    ],
)
def test_a_real_message_gets_its_verdict(message: str, status: str | None) -> None:
    verdict = classify(rebuilt(message))
    assert (verdict or {}).get("status") == status
    if verdict:
        assert verdict["error"].startswith(message.splitlines()[0][:60])


def test_the_harness_own_verdicts() -> None:
    h200 = captured_error("h200-vllm026-harness-2026-11-30.json", "CutlassNvFp4LinearKernel")
    assert classify(Unsupported(h200)) == {"status": "unsupported", "error": h200}
    assert classify(NotProbed("no packer yet")) == {"status": "not-probed", "error": "no packer yet"}


@pytest.mark.parametrize(
    "error, status",
    [
        (TypeError("fused_marlin_moe() got an unexpected keyword argument 'global_scale1'"), "unavailable"),
        (AttributeError("module 'vllm._custom_ops' has no attribute 'cutlass_scaled_mm'"), "unavailable"),
        (TypeError("unsupported operand type(s) for +: 'int' and 'str'"), None),
        (ValueError("kernel said no"), None),
        (KeyError("not supported"), None),
    ],
    ids=["api-moved-argument", "api-moved-attribute", "plain-type-error", "plain-value-error", "key-error"],
)
def test_api_drift_is_unavailable_and_bugs_are_failures(error: BaseException, status: str | None) -> None:
    assert (classify(error) or {}).get("status") == status
