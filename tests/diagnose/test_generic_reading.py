"""The generic reading of a failure no rule was written for: prefixes of other loggers and of a thread's quoting
stripped, an umbrella line deferring to the specific error before it, a process killed by SIGKILL read as a death
the log cannot explain. Excerpts are quoted from the fresh sets (tests/fixtures/diagnose), by their thread."""

from __future__ import annotations

import json

import pytest

from launcher.diagnose.logtext import message, plain
from launcher.diagnose.run import diagnose_blocks
from tests.diagnose.texts import diagnose_text
from tests.helpers import FIXTURES


def excerpt(source: str) -> str:
    """The excerpt a fresh set quotes from the thread `source`."""
    for path in sorted((FIXTURES / "diagnose").glob("*.jsonl")):
        for line in path.read_text().splitlines():
            case = json.loads(line)
            if case["source"] == source:
                return str(case["excerpt"])
    raise LookupError(source)


@pytest.mark.parametrize(
    ("line", "said"),
    [
        # https://github.com/OpenRLHF/OpenRLHF/issues/336: vLLM before 0.6 wrote its source file without a bracket
        (
            "2024-06-28T06:11:52.685302801Z (LLMRayActor pid=20770) ERROR 06-28 06:11:45 worker_base.py:145] Error "
            "executing method initialize_cache. This might cause deadlock in distributed execution.",
            "Error executing method initialize_cache. This might cause deadlock in distributed execution.",
        ),
        # https://github.com/QwenLM/Qwen2.5-Omni/issues/340: a worker's rank before its pid
        (
            "(VllmWorker rank=0 pid=430) ERROR 07-18 03:07:00 [multiproc_executor.py:380] AttributeError: 'tuple' "
            "object has no attribute 'ndim'",
            "AttributeError: 'tuple' object has no attribute 'ndim'",
        ),
        # https://github.com/NVIDIA/gpu-operator/issues/349: syslog's date, host and unit, then glog's prefix
        (
            "May 05 18:42:19 hawkeye kubelet[1311]: E0505 18:42:19.812950    1311 remote_runtime.go:209] "
            '"RunPodSandbox from runtime service failed"',
            '"RunPodSandbox from runtime service failed"',
        ),
        # https://github.com/triton-inference-server/server/issues/4200: Triton's glog prefix
        (
            "I0411 03:30:43.480405 163 model_repository_manager.cc:1132] successfully unloaded 'efficientdet-onnx'",
            "successfully unloaded 'efficientdet-onnx'",
        ),
        # constructed: a progress bar redrawn with carriage returns, then the error printed over it
        ("Loading: 10%\rLoading: 20%\rOSError: disk full\r", "OSError: disk full"),
    ],
    ids=["vllm-before-0.6", "worker-rank", "syslog-glog", "glog", "carriage-return"],
)
def test_a_message_is_read_without_its_writers_prefix(line: str, said: str) -> None:
    assert message(line) == said


def test_a_log_pasted_as_a_markdown_quote_reads_as_the_log() -> None:
    # https://github.com/Dao-AILab/flash-attention/issues/854: the thread quoted the line ("> ") and its editor
    # turned the library's path into a link
    log = excerpt("https://github.com/Dao-AILab/flash-attention/issues/854")
    assert message(plain(log.encode())).startswith(
        "ImportError: /opt/conda/envs/pytorch/lib/python3.10/site-packages/flash_attn_2_cuda"
    )
    fixes = [str(f["fix"]) for f in diagnose_text(log) if f["severity"] == "error"]
    assert any("flash_attn build" in fix for fix in fixes), fixes


def test_a_process_killed_by_sigkill_says_what_to_collect() -> None:
    # https://github.com/NVIDIA/TensorRT-LLM/issues/1700: mpirun's only word on a rank the kernel killed; read
    # without the curated rules (one names mpirun's words now), as a launcher no rule knows would print it
    found, _ = diagnose_blocks([excerpt("https://github.com/NVIDIA/TensorRT-LLM/issues/1700").encode()], rules=[])
    assert [(f.rule.id, str(f.severity)) for f in found] == [("not-enough-evidence", "error")]
    assert "dmesg" in found[0].fix() and "signal 9" in found[0].evidence[0][1]


def test_an_umbrella_defers_to_the_specific_error_before_it() -> None:
    # https://github.com/QwenLM/Qwen2.5-Omni/issues/340: a worker's AttributeError, then the engine's "Engine core
    # initialization failed. See root cause above." traceback
    found = {f["id"]: f for f in diagnose_text(excerpt("https://github.com/QwenLM/Qwen2.5-Omni/issues/340"))}
    assert "root-error" not in found
    bug = found["code-bug"]
    assert "'tuple' object has no attribute 'ndim'" in str(bug["evidence"][0]), bug  # type: ignore[index]


def test_a_log_that_ends_waiting_says_it_hangs_and_what_to_collect() -> None:
    # https://github.com/huggingface/text-generation-inference/issues/1838: TGI's shards never become ready
    found = diagnose_text(excerpt("https://github.com/huggingface/text-generation-inference/issues/1838"))
    assert [(f["id"], f["severity"]) for f in found] == [("not-enough-evidence", "warning")]
    assert "py-spy dump" in str(found[0]["fix"]) and "Waiting for shard to be ready" in str(found[0]["fix"])


@pytest.mark.parametrize(
    "source",
    [
        "https://github.com/vllm-project/llm-compressor/pull/1560",  # "Waiting for init message from front-end." once
        "https://github.com/vllm-project/vllm/issues/8803",  # an idle engine: "Waiting for new requests in engine loop"
        "https://github.com/lemonade-sdk/vllm-rocm/issues/5",  # "Still waiting for vllm-server...", then it serves
    ],
    ids=["once", "idle", "then-serves"],
)
def test_a_benign_wait_is_no_hang(source: str) -> None:
    assert "not-enough-evidence" not in [f["id"] for f in diagnose_text(excerpt(source))]
