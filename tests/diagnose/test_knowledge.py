"""The curated knowledge base against real users' logs: the SM12x corpus (tests/fixtures/corpus), the public
threads the rules were written from (tests/fixtures/diagnose/cases.jsonl) and real healthy logs."""

from __future__ import annotations

import json
import re

import pytest

from launcher.diagnose.findings import ROOT_CAUSE
from launcher.diagnose.literals import required_literal
from launcher.diagnose.rules import load_rules
from tests.diagnose.texts import assert_named, diagnose_text
from tests.helpers import FIXTURES, ROOT

CORPUS = FIXTURES / "corpus" / "sm12x-serving-logs.jsonl"
ENTRIES = [json.loads(line) for line in CORPUS.read_text().splitlines()]


# For each real failure: the key of its workaround (env var, flag or package) that the fix must name.
WORKAROUND_KEY = {
    "torch-no-sm120-01": "torch.cuda.get_arch_list",
    "triton-ptxas-sm121a-01": "TRITON_PTXAS_PATH",
    "fp8-bmm-cublaslt-gb10-01": "VLLM_DISABLED_KERNELS=FlashInferFP8ScaledMMLinearKernel",
    "cudagraph-capture-oom-01": "--gpu-memory-utilization",
    "flashinfer-jit-cuda-toolkit-lt-12.9-01": "CUDA_HOME",
    "attn-flashinfer-sinks-unsupported-gptoss-01": "--attention-backend TRITON_ATTN",
    "deepgemm-sm120-unknown-recipe-01": "VLLM_USE_DEEP_GEMM=0",
    "gb10-fp8-cutlass-missing-sm121-cubins-01": "TORCH_CUDA_ARCH_LIST=12.1",
    "nvfp4-moe-no-backend-activation-gb10-01": "--moe-backend",
    "gb10-nvfp4-flashinfer-cutlass-fallback-perf-01": "--moe-backend marlin",
    "hybrid-mamba-max-num-seqs-exceeds-cache-01": "--max-num-seqs 600",
    "nvfp4-moe-cutlass-no-sm120-v0102-01": "--moe-backend marlin",
    "vllm-build-undefined-symbol-sm100-moe-rtx5080-01": "TORCH_CUDA_ARCH_LIST",
    "fp8-flashinfer-bmm-cudagraph-ima-01": "VLLM_DISABLED_KERNELS=FlashInferFP8ScaledMMLinearKernel",
    "kv-cache-too-small-for-max-model-len-rtx5090-01": "--max-model-len",
    "sglang-trtllm-attention-sm100-only-on-sm120-01": "--attention-backend",
}


def test_every_corpus_failure_is_covered() -> None:
    failures = {e["id"] for e in ENTRIES if not e["benign"]}
    assert failures == set(WORKAROUND_KEY)


@pytest.mark.parametrize("entry", [e for e in ENTRIES if not e["benign"]], ids=lambda e: e["id"])
def test_failure_gets_an_error_naming_the_workaround(entry: dict[str, str]) -> None:
    findings = diagnose_text(entry["log"], entry["gpu"])
    errors = [f for f in findings if f["severity"] == "error"]
    assert errors, findings
    assert any(WORKAROUND_KEY[entry["id"]] in str(f["fix"]) for f in errors), [f["fix"] for f in errors]


@pytest.mark.parametrize("entry", [e for e in ENTRIES if e["benign"]], ids=lambda e: e["id"])
def test_benign_lines_stay_benign(entry: dict[str, str]) -> None:
    assert not [f for f in diagnose_text(entry["log"], entry["gpu"]) if f["severity"] == "error"]


def test_autotuner_noise_depends_on_the_gpu() -> None:
    line = "flashinfer.jit: [Autotuner]: Skipping tactic 15, due to failure while profiling: Error Internal\n"
    assert diagnose_text(line * 50, "RTX PRO 6000 Blackwell")[0]["severity"] == "info"
    assert diagnose_text(line * 50, "GB10")[0]["severity"] == "error"


def test_every_rule_has_what_a_finding_needs() -> None:
    rules = load_rules()
    assert len({r.id for r in rules}) == len(rules)
    for rule in rules:
        assert (rule.patterns or rule.sites) and rule.cause and rule.fix and rule.source, rule.id


def test_a_generic_finding_names_the_module_that_makes_it() -> None:
    source = ROOT_CAUSE.source.removeprefix("generic: ")
    assert source != ROOT_CAUSE.source and (ROOT / source).is_file(), ROOT_CAUSE.source


def test_every_pattern_has_a_literal_to_search_for() -> None:
    for rule in load_rules():
        for pattern in rule.patterns:
            needle = required_literal(pattern)
            assert needle and len(needle) >= 4 and needle.decode() in pattern.pattern.replace("\\", ""), rule.id


def test_a_healthy_real_startup_has_no_error() -> None:
    """vLLM 0.26 serving on the H200 through nemolaunch serve (tests/fixtures/logs, 2026-11-30)."""
    log = FIXTURES / "logs" / "h200-vllm026-serve-sm90-2026-11-30.log"
    findings = diagnose_text(log.read_text(), "H200")
    assert findings and all(f["severity"] == "info" for f in findings)


def test_eager_mode_is_a_warning_in_a_real_log() -> None:
    """vLLM 0.26 with --enforce-eager on the H200 (tests/fixtures/logs, 2026-11-30)."""
    log = FIXTURES / "logs" / "h200-vllm026-eager-1b-2026-11-30.log"
    findings = {f["id"]: f for f in diagnose_text(log.read_text(), "H200")}
    assert findings["enforce-eager"]["severity"] == "warning"
    assert not [f for f in findings.values() if f["severity"] == "error"]


CASES_DIR = FIXTURES / "diagnose"
CASES = [json.loads(line) for line in (CASES_DIR / "cases.jsonl").read_text().splitlines()]
HOLDOUT = [json.loads(line) for line in (CASES_DIR / "holdout.jsonl").read_text().splitlines()]


def _case_id(case: dict[str, str]) -> str:
    return case["source"].removeprefix("https://github.com/").replace("/issues/", "#").replace("/pull/", "!")


@pytest.mark.parametrize("case", [c for c in CASES if not c["benign"] and c["fix_key"]], ids=_case_id)
def test_public_failure_gets_a_specific_finding_naming_its_fix(case: dict[str, str]) -> None:
    findings = diagnose_text(case["excerpt"])
    specific = [f for f in findings if f["severity"] in ("error", "warning") and f["id"] != "root-error"]
    assert any(case["fix_key"] in str(f["fix"]) for f in specific), [(f["id"], f["fix"]) for f in findings]


@pytest.mark.parametrize("case", [c for c in CASES if c["benign"]], ids=_case_id)
def test_public_benign_lines_get_no_error(case: dict[str, str]) -> None:
    assert not [f["id"] for f in diagnose_text(case["excerpt"]) if f["severity"] == "error"]


@pytest.mark.parametrize("case", [c for c in CASES if not c["benign"] and not c["fix_key"]], ids=_case_id)
def test_a_death_without_a_known_cause_is_still_an_error(case: dict[str, str]) -> None:
    findings = diagnose_text(case["excerpt"])
    assert any(f["severity"] == "error" for f in findings), findings


def test_holdout_threads_are_apart_from_the_rules_cases() -> None:
    def thread(case: dict[str, str]) -> str:
        return case["source"].split("#")[0]

    assert not {thread(c) for c in CASES} & {thread(c) for c in HOLDOUT}
    listed = set(json.loads((CASES_DIR / "holdout-threads.json").read_text())["holdout_threads"])
    assert {thread(c) for c in HOLDOUT} == listed


def test_every_cuda_error_name_is_found_in_torchs_wording() -> None:
    """torch ends every CUDA error with "Search for `<name>' in <the runtime's page>": each cudaError name a rule
    keys on reaches that rule in that wording."""
    named = {
        m.group(1): rule.id
        for rule in load_rules()
        for p in rule.patterns
        if (m := re.fullmatch(r"\\b(cudaError\w+)\\b", p.pattern))
    }
    assert len(named) >= 20
    for name, rule_id in named.items():
        line = f"Search for `{name}' in https://docs.nvidia.com/cuda/cuda-runtime-api/group__CUDART__TYPES.html "
        assert rule_id in {f["id"] for f in diagnose_text(line + "for more information.\n")}, name


@pytest.mark.parametrize(
    ("line", "rule", "names"),
    [
        (  # vllm#759, as posted: a shard mapped whole did not fit the host's memory
            "ERROR 06-02 09:39:03 [core.py:396] RuntimeError: unable to mmap 16933256392 bytes from file "
            "</root/.cache/huggingface/hub/x/model.safetensors>: Cannot allocate memory (12)",
            "host-memory-enomem",
            "host memory",
        ),
        (  # noonghunna/club-3090#106, as posted
            "(Worker_TP1 pid=15193) ERROR 05-08 19:06:38 [multiproc_executor.py:962] Search for "
            "`cudaErrorStreamCaptureUnsupported' in https://docs.nvidia.com/cuda/cuda-runtime-api/"
            "group__CUDART__TYPES.html for more information.",
            "cuda-stream-capture",
            "--enforce-eager",
        ),
    ],
    ids=["enomem", "stream-capture"],
)
def test_os_and_cuda_error_codes_name_their_fix(line: str, rule: str, names: str) -> None:
    assert_named(line + "\n", rule, names)


FRESH_B = {
    json.loads(line)["source"]: json.loads(line)["excerpt"]
    for line in (FIXTURES / "diagnose" / "fresh-2026-12-03b.jsonl").read_text().splitlines()
}


@pytest.mark.parametrize(
    ("source", "rule", "names"),
    [
        ("https://github.com/vllm-project/vllm/issues/2669", "host-oom-killed", "host memory"),
        ("https://github.com/pytorch/pytorch/issues/111469", "nvjitlink-mismatch", "LD_LIBRARY_PATH"),
        ("https://github.com/triton-lang/triton/pull/1981", "triton-libcuda-missing", "libcuda.so"),
        ("https://github.com/vllm-project/vllm/pull/31309", "weight-name-mismatch", "pip install -U vllm"),
        ("https://github.com/microsoft/OmniParser/issues/34", "safetensors-truncated", "git lfs"),
    ],
    ids=["ray-memory-monitor", "nvjitlink", "lcuda", "weight-names", "lfs-pointer"],
)
def test_the_second_fresh_sets_dev_lines_reach_their_rule(source: str, rule: str, names: str) -> None:
    """Development cases of fresh-2026-12-03b.jsonl (none of its hold-out quarter)."""
    assert_named(FRESH_B[source], rule, names)
