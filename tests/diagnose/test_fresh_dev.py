"""The general rules written from the development part of the third fresh set (fresh-2026-12-03c.jsonl): the lines
as the public threads show them reach their rule, and its fix names what the thread's fix needs. Only threads
outside the set's hold-out quarter are used here; the test checks that too."""

from __future__ import annotations

import json

import pytest

from tests.diagnose.texts import assert_named, diagnose_text
from tests.helpers import FIXTURES

FRESH_C = FIXTURES / "diagnose" / "fresh-2026-12-03c.jsonl"
HELD_OUT = set(json.loads((FIXTURES / "diagnose" / "fresh-2026-12-03c-holdout.json").read_text())["holdout_threads"])
EXCERPTS = {json.loads(line)["source"]: json.loads(line)["excerpt"] for line in FRESH_C.read_text().splitlines()}


def _excerpt(source: str) -> str:
    assert source.split("#")[0] not in HELD_OUT, "a hold-out thread must not train or test a rule"
    return EXCERPTS[source]


@pytest.mark.parametrize(
    ("source", "rule", "severity", "names"),
    [
        ("https://github.com/onlybooks/llm/issues/45", "package-missing", "error", "pip install vllm"),
        ("https://github.com/hiyouga/LlamaFactory/issues/7458", "package-version-mismatch", "error", "sglang version"),
        ("https://github.com/vllm-project/vllm/issues/19131", "package-version-mismatch", "error", "vllm version"),
        ("https://github.com/sgl-project/sglang/issues/6160", "package-too-old", "error", "flashinfer_python>=0.2.5"),
        ("https://github.com/gpustack/gpustack/issues/1739", "options-conflict", "error", "--tensor-parallel-size"),
        ("https://github.com/NVlabs/DiffusionNFT/issues/21", "loopback-through-proxy", "error", "no_proxy=127.0.0.1"),
        ("https://github.com/xorbitsai/inference/issues/1396", "connection-refused", "warning", "listens"),
        ("https://github.com/TheAtticusProject/cuad/issues/9", "nccl-unhandled-cuda", "error", "driver"),
        ("https://github.com/NVIDIA/nccl/issues/1410", "nccl-unhandled-cuda", "error", "NCCL_DEBUG=INFO"),
        ("https://github.com/NVIDIA/TensorRT-LLM/issues/1839", "cuda-unknown-error", "error", "nvidia-smi"),
        ("https://github.com/guoqingbao/xinfer/pull/217", "kernel-shared-memory-attribute", "error", "flashinfer"),
        ("https://github.com/Yuliang-Liu/MonkeyOCR/issues/25", "triton-shared-memory", "error", "num_stages"),
        ("https://github.com/woct0rdho/triton-windows/issues/178", "triton-launcher-compile-failed", "error", "MSVC"),
        ("https://github.com/NVIDIA/Model-Optimizer/issues/98", "extension-not-built", "warning", "CUDA_HOME"),
        ("https://github.com/lufficc/SSD/pull/125", "extension-torch-abi", "error", "import torch first"),
        ("https://github.com/openvinotoolkit/nncf/issues/204", "gpu-memory-held-elsewhere", "error", "nvidia-smi"),
        ("https://github.com/ritzz-ai/GUI-R1/issues/32", "prompt-longer-than-context", "warning", "above 4834"),
        ("https://github.com/vllm-project/tpu-inference/pull/223", "kv-cache-too-small", "error", "at most 5632"),
        (
            "https://github.com/hiyouga/LlamaFactory/issues/6599",
            "generation-length-not-above-input",
            "error",
            "max_new",
        ),
        ("https://github.com/pytorch/pytorch/issues/46899", "cuda-error-out-of-memory", "error", "map_location='cpu'"),
    ],
    ids=[
        "no-module",
        "cannot-import-name",
        "no-submodule",
        "minimum-version",
        "options-conflict",
        "proxy-403",
        "connection-refused",
        "nccl-error-1",
        "nccl-unhandled",
        "cpp-terminate-unknown",
        "smem-attribute",
        "triton-smem-no-hint",
        "triton-launcher",
        "extension-not-built",
        "bare-undefined-symbol",
        "oom-held-elsewhere",
        "prompt-length-of",
        "kv-estimate",
        "generate-max-length",
        "oom-torch-load",
    ],
)
def test_a_dev_line_reaches_its_general_rule(source: str, rule: str, severity: str, names: str) -> None:
    assert_named(_excerpt(source), rule, names, severity)


def test_torchs_no_driver_warning_on_a_cpu_host_is_not_an_error() -> None:
    """torch warns (UserWarning) and goes on on the CPU: in a log that does not fail, a warning."""
    findings = diagnose_text(_excerpt("https://github.com/facebook/Ax/issues/417"))
    assert [f["severity"] for f in findings if f["id"] == "no-nvidia-driver"] == ["warning"], findings


def test_the_same_words_raised_are_still_an_error() -> None:
    # the title of AdelaiDet#348, as raised in a traceback
    findings = diagnose_text(
        "Traceback (most recent call last):\n"
        '  File "demo.py", line 3, in <module>\n'
        "RuntimeError: Found no NVIDIA driver on your system\n"
    )
    assert "error" in [f["severity"] for f in findings if f["id"] == "no-nvidia-driver"], findings


def test_an_import_failure_a_warning_quotes_is_not_a_missing_package() -> None:
    """vLLM 0.6.3 warns that it cannot read its commit hash (verl#393) and runs on."""
    findings = diagnose_text(_excerpt("https://github.com/verl-project/verl/issues/393"))
    assert not [f for f in findings if f["severity"] == "error"], findings


def test_an_uncaught_cpp_exception_is_a_failure_of_its_own() -> None:
    """`terminate called ... what(): <message>`: the what() line is the root when no rule names it."""
    findings = diagnose_text(_excerpt("https://github.com/linjieli222/VQA_ReGAT/issues/41"))
    assert any(f["severity"] == "error" for f in findings), findings
    log = "terminate called after throwing an instance of 'std::runtime_error'\n  what():  bad frobnication of 7\n"
    root = [f for f in diagnose_text(log) if f["id"] == "root-error"]
    assert root and "what():  bad frobnication" in str(root[0]["evidence"]), root


FRESH_B = FIXTURES / "diagnose" / "fresh-2026-12-03b.jsonl"
OLDER = {json.loads(line)["source"]: json.loads(line)["excerpt"] for line in FRESH_B.read_text().splitlines()}


@pytest.mark.parametrize(
    ("source", "rule", "names"),
    [
        ("https://github.com/sgl-project/sglang/issues/322", "failure-advises-flag", "increase --mem-fraction-static"),
        ("https://github.com/vllm-project/vllm/issues/3568", "ray-temp-disk-nearly-full", "free space on the disk"),
        ("https://github.com/vllm-project/vllm/issues/7526", "kv-cache-too-small", "at most 3984"),
        ("https://github.com/vllm-project/vllm/issues/7526", "kv-cache-too-small", "--enable-chunked-prefill"),
        ("https://github.com/SemiAnalysisAI/InferenceX/issues/2128", "kv-cache-no-blocks", "--mem-fraction-static"),
    ],
    ids=["not-enough-please-increase", "ray-session-name-cut", "kv-wrapped", "kv-chunked", "sglang-no-kv-room"],
)
def test_older_lines_the_same_changes_reach(source: str, rule: str, names: str) -> None:
    """Lines of the second fresh set (measured before these changes, so older material) the same rules read."""
    finding = {f["id"]: f for f in diagnose_text(OLDER[source])}[rule]
    assert names in str(finding["fix"]), finding


def test_a_deprecation_that_advises_a_flag_is_not_a_failure() -> None:
    # a message of vLLM 0.32 (vllm/entrypoints/launchers/run_batch.py), as its logger prints it: advice, no failure
    line = (
        "WARNING 12-03 10:00:00 [run_batch.py:302] Using --url for metrics is deprecated. Please use --host instead.\n"
    )
    assert not [f for f in diagnose_text(line) if f["id"] == "failure-advises-flag"]
