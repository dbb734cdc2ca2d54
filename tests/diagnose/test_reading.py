"""Reading a log as an operator does: on the fresh public excerpts the rules were tuned on (the held-out quarter is
left to benchmarks/diagnose_recall.py), and on small logs that isolate one behaviour each."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from launcher.diagnose.index import load_index
from launcher.diagnose.run import diagnose_blocks
from tests.diagnose.texts import ROOT_LOG, diagnose_text, knowledge_base
from tests.helpers import FIXTURES

FRESH = [json.loads(line) for line in (FIXTURES / "diagnose" / "fresh-2026-12-03.jsonl").read_text().splitlines()]
HELD_OUT = set(json.loads((FIXTURES / "diagnose" / "fresh-holdout-2026-12-03.json").read_text())["holdout_threads"])
DEV = [c for c in FRESH if c["source"] not in HELD_OUT]
# what the log does not say: the fix in the thread is not in the lines (a transformers regression whose message
# advises the opposite; an LMCache limit the assertion does not name)
NOT_IN_THE_LOG = {
    "https://github.com/huggingface/transformers/issues/42886",
    "https://github.com/LMCache/LMCache/issues/412",
}
CATCH_ALLS = {"root-error", "engine-core-died"}


def _id(case: dict[str, str]) -> str:
    return case["source"].removeprefix("https://github.com/").replace("/issues/", "#").replace("/pull/", "!")


# named only by the message index (the text of the raise site's condition), so only with the engine installed
NEEDS_THE_INDEX = {"https://github.com/vllm-project/vllm/pull/20375"}


@pytest.mark.parametrize("case", [c for c in DEV if not c["benign"]], ids=_id)
def test_a_fresh_failure_gets_a_finding_naming_its_fix(case: dict[str, str], request: pytest.FixtureRequest) -> None:
    if case["source"] in NOT_IN_THE_LOG:
        pytest.xfail("the log does not carry the fix")
    index = None
    if case["source"] in NEEDS_THE_INDEX:
        index = load_index(request.getfixturevalue("engine_python"))[0]
    findings = diagnose_text(case["excerpt"], index=index)
    named = [f for f in findings if f["severity"] != "info" and f["id"] not in CATCH_ALLS]
    assert any(case["fix_key"].lower() in str(f["fix"]).lower() for f in named), [(f["id"], f["fix"]) for f in findings]


@pytest.mark.parametrize("case", [c for c in DEV if c["benign"]], ids=_id)
def test_a_fresh_benign_excerpt_gets_no_error(case: dict[str, str]) -> None:
    assert not [f["id"] for f in diagnose_text(case["excerpt"]) if f["severity"] == "error"]


def _by_id(log: str) -> dict[str, dict[str, object]]:
    return {str(f["id"]): f for f in diagnose_text(log)}


OOM = "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB. GPU 0 has a total capacity of 79 GiB"


@pytest.mark.parametrize(
    ("before", "stage", "names"),
    [
        ("Starting to load model /models/x...", "loading weights", "--tensor-parallel-size"),
        ("Model loading took 61.2 GiB and 20.1 seconds", "memory profiling", "--max-num-batched-tokens"),
        ("Capturing CUDA graphs (mixed prefill-decode, PIECEWISE): 10%", "CUDA graph capture", "--cudagraph-capture"),
    ],
    ids=["loading", "profiling", "capture"],
)
def test_the_remedy_follows_the_stage(before: str, stage: str, names: str) -> None:
    finding = _by_id(f"(Worker pid=3) INFO 12-03 10:00:00 [x.py:1] {before}\n{OOM}\n")["gpu-out-of-memory"]
    assert finding["stage"] == stage and names in str(finding["fix"])


def test_the_error_a_wrapper_quotes_is_the_root() -> None:
    log = (
        "ERROR 12-03 10:00:00 [core.py:1] Traceback (most recent call last):\n"
        '  File "/x/vllm/v1/executor/multiproc_executor.py", line 445, in get_response\n'
        "ERROR 12-03 10:00:00 [core.py:1] RuntimeError: Worker failed with error 'ValueError: tokenizer_config.json "
        "names an unknown special token <|im_sep|>', please check the stack trace above for the root cause\n"
    )
    root = _by_id(log)["root-error"]
    assert root["evidence"][0]["text"].startswith("ValueError: tokenizer_config.json names")  # type: ignore[index]


def test_a_curated_rule_keyed_on_a_component_explains_any_wording() -> None:
    """A traceback through FlashInfer's sampler ending in an error no pattern knows."""
    log = (
        "Traceback (most recent call last):\n"
        '  File "/usr/lib/python3/site-packages/vllm/v1/sample/ops/topk_topp_sampler.py", line 308, in '
        "flashinfer_sample\n"
        "RuntimeError: kernel returned status 7\n"
    )
    assert "VLLM_USE_FLASHINFER_SAMPLER=0" in str(_by_id(log)["flashinfer-sampler"]["fix"])


def test_a_log_that_ends_while_starting_says_what_to_collect() -> None:
    log = (
        "(APIServer pid=1) INFO 12-03 10:00:00 [api_utils.py:1] non-default args: {'model': '/m'}\n"
        "(Worker pid=3) INFO 12-03 10:00:05 [runner.py:1] Starting to load model /m...\n"
    )
    (finding,) = diagnose_text(log)
    assert (finding["id"], finding["severity"], finding["stage"]) == (
        "not-enough-evidence",
        "warning",
        "loading weights",
    )
    assert "py-spy dump" in str(finding["fix"]) and "dmesg" in str(finding["fix"])


@pytest.mark.parametrize(
    ("line", "finding"),
    [
        ("AttributeError: 'EagleProposer' object has no attribute 'positions'", "code-bug"),
        # a call with an option the callee does not take has a rule of its own (knowledge/packages.toml)
        (
            "TypeError: Worker.__init__() got an unexpected keyword argument 'num_speculative_tokens'",
            "unexpected-keyword-argument",
        ),
        ("NotImplementedError: Model Foo does not support BitsAndBytes quantization yet.", "not-supported-here"),
        ("ValueError: weights truncated at byte 912", "root-error"),
    ],
    ids=["attribute", "keyword", "not-yet", "other"],
)
def test_a_last_line_alone_still_names_its_kind(line: str, finding: str) -> None:
    assert list(_by_id(line + "\n")) == [finding]


# NCCL's RAS monitor could not bind its port (vllm#19204, as posted): NCCL logs it as a warning and goes on
NCCL_RAS_BIND = (
    "[2025-06-05 10:45:19] paula09:2528103:2528103 [0] ras/client_support.cc:160 NCCL WARN Call to bind failed: "
    "Address already in use\n"
    "paula09:2528103:2528103 [0] NCCL INFO RAS failed to establish a client listening socket at localhost:28028\n"
)


def test_a_warning_in_a_log_that_goes_on_is_a_warning() -> None:
    severity = {f["id"]: f["severity"] for f in diagnose_text(NCCL_RAS_BIND)}
    assert severity == {"port-in-use": "warning", "nccl-failure": "warning", "nccl-info": "info"}, severity


def test_the_same_warning_before_a_failure_stays_an_error() -> None:
    errors = [f["id"] for f in diagnose_text(NCCL_RAS_BIND + ROOT_LOG) if f["severity"] == "error"]
    assert "port-in-use" in errors, errors


def test_an_exception_message_that_goes_on_below_is_read_whole() -> None:
    """pydantic prints the message under "1 validation error for X" (vllm#1711, as posted)."""
    log = (
        "ValidationError: 1 validation error for VLLM\n__root__\n  Quantization is not supported for <class "
        "'vllm.model_executor.models.bloom.BloomForCausalLM'>. (type=value_error)\n"
    )
    (finding,) = diagnose_text(log)
    assert finding["id"] == "not-supported-here" and "pip install -U vllm" in str(finding["fix"]), finding
    assert "Quantization is not supported" in finding["evidence"][0]["text"]  # type: ignore[index]


@pytest.mark.engine
def test_a_bare_last_line_is_read_with_the_index(engine_python: Path) -> None:
    """A message without an error-like word, pasted alone (QwenLM/Qwen3#698): the index knows it, and the engine
    argument it names in words is its flag."""
    line = (
        "The input size is not aligned with the quantized weight shape. This can be caused by too large tensor "
        "parallel size.\n"
    )
    (finding,) = diagnose_text(line, index=load_index(engine_python)[0])
    assert finding["origin"] == "index" and finding["severity"] == "error", finding
    assert "--tensor-parallel-size" in str(finding["fix"]) and "caused by" in str(finding["fix"]), finding


def test_a_line_in_the_middle_without_an_error_word_is_not_read_as_the_tail() -> None:
    findings = diagnose_text("The input size is not aligned with the quantized weight shape.\nINFO 12-03 [x.py:1] ok\n")
    assert findings == []


# the second fresh set's development part (its hold-out quarter is left to benchmarks/diagnose_recall.py)
FRESH_B = [json.loads(line) for line in (FIXTURES / "diagnose" / "fresh-2026-12-03b.jsonl").read_text().splitlines()]
HELD_OUT_B = set(json.loads((FIXTURES / "diagnose" / "fresh-2026-12-03b-holdout.json").read_text())["holdout_threads"])
DEV_B = {c["source"]: c["excerpt"] for c in FRESH_B if c["source"].split("#")[0] not in HELD_OUT_B}


def test_a_curated_finding_adds_the_advice_its_message_carries() -> None:
    """PyTorch's OOM text suggests expandable_segments; the curated OOM rule does not (kaito-project/kaito#976)."""
    fix = str(_by_id(DEV_B["https://github.com/kaito-project/kaito/issues/976"])["gpu-out-of-memory"]["fix"])
    assert "the message says:" in fix and "PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True" in fix, fix


def test_an_error_whose_message_continues_below_and_advises_gets_that_advice() -> None:
    """ "ImportError:" with the whole message on the lines below (vllm-project/vllm#34041). The curated rule for
    NumPy's message names it now; without that rule, the fallback still reads the advice below the line."""
    log = DEV_B["https://github.com/vllm-project/vllm/issues/34041"]
    assert "numpy<2" in str(_by_id(log)["numpy-abi-mismatch"]["fix"])
    rules = [r for r in knowledge_base() if r.id != "numpy-abi-mismatch"]
    findings = {f.rule.id: f for f in diagnose_blocks([log.encode()], None, rules)[0]}
    finding = findings["message-advice"]
    assert finding.origin == "fallback" and "numpy<2" in finding.fix(), finding


def test_a_log_cut_inside_a_traceback_says_what_to_collect() -> None:
    log = "ERROR 12-03 10:00:00 [core.py:1] EngineCore hit an exception: Traceback (most recent call last):\n"
    log += 'ERROR 12-03 10:00:00 [core.py:1]   File "/x/vllm/v1/engine/core.py", line 287, in run_engine_core\n'
    (finding,) = diagnose_text(log)
    assert (finding["id"], finding["severity"]) == ("not-enough-evidence", "warning")
    assert "complete log" in str(finding["fix"])
