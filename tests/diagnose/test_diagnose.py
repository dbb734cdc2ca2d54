"""The knowledge base against real users' logs (tests/fixtures/corpus), and the diagnose command's contract."""

from __future__ import annotations

import io
import json
from pathlib import Path

import pytest

from checks.gpu_family import family_from_text
from launcher.cli.main import main
from launcher.diagnose.run import (
    SUB_BLOCK,
    Matcher,
    anchor_words,
    diagnose_blocks,
    load_rules,
    read_blocks,
    required_literal,
)
from tests.helpers import FIXTURES

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


def diagnose_text(text: str, gpu: str | None = None) -> list[dict[str, object]]:
    findings, _ = diagnose_blocks([text.encode()], family_from_text(gpu) if gpu else None)
    return [f.to_json() for f in findings]


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


def test_every_rule_has_what_a_finding_needs() -> None:
    rules = load_rules()
    assert len({r.id for r in rules}) == len(rules)
    for rule in rules:
        assert rule.patterns and rule.cause and rule.fix and rule.source, rule.id


def test_cli_json_contract_and_exit_codes(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    bad = tmp_path / "bad.log"
    bad.write_text("RuntimeError: CUDA error: no kernel image is available for execution on the device\n")
    assert main(["diagnose", str(bad), "--json"]) == 1
    doc = json.loads(capsys.readouterr().out)
    assert doc["schema"] == "nemolaunch.diagnose/1"
    (finding,) = doc["findings"]
    assert set(finding) >= {"id", "severity", "title", "cause", "fix", "evidence"}
    assert finding["evidence"] == [{"line": 1, "text": bad.read_text().strip()}]
    good = tmp_path / "good.log"
    good.write_text("INFO Using TRITON_ATTN attention backend out of potential backends: ['TRITON_ATTN'].\n")
    assert main(["diagnose", str(good)]) == 0


def test_binary_file_is_a_clear_error(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    blob = tmp_path / "model.safetensors"
    blob.write_bytes(b"\x00\x01binary" * 100)
    assert main(["diagnose", str(blob)]) == 2
    assert "is a binary file" in capsys.readouterr().err


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
    thread = lambda c: c["source"].split("#")[0]  # noqa: E731
    assert not {thread(c) for c in CASES} & {thread(c) for c in HOLDOUT}
    listed = set(json.loads((CASES_DIR / "holdout-threads.json").read_text())["holdout_threads"])
    assert {thread(c) for c in HOLDOUT} == listed


def test_every_pattern_has_a_literal_to_search_for() -> None:
    for rule in load_rules():
        for pattern in rule.patterns:
            needle = required_literal(pattern)
            assert needle and len(needle) >= 4 and needle.decode() in pattern.pattern.replace("\\", ""), rule.id


@pytest.mark.parametrize(
    ("pattern", "literal"),
    [
        (r"Tried to allocate [\d.]+ [KMG]iB", b"Tried to allocate "),
        (r"LoRA rank (?P<rank>\d+) is greater than", b" is greater than"),
        (r"colou?r scheme", b"r scheme"),
        (r"\[DEPRECATED\] x", b"[DEPRECATED] x"),
        (r"abc|defgh", None),
    ],
)
def test_required_literal(pattern: str, literal: bytes | None) -> None:
    import re

    assert required_literal(re.compile(pattern)) == literal


def test_a_pattern_without_a_literal_is_refused(tmp_path: Path) -> None:
    kb = tmp_path / "bad.toml"
    kb.write_text(
        "[[rule]]\nid = 'x'\nseverity = 'error'\ntitle = 't'\npatterns = ['\\\\d+|\\\\w+']\n"
        "cause = 'c'\nfix = 'f'\nsource = 's'\n"
    )
    with pytest.raises(ValueError, match=r"bad.toml: rule x: pattern .* has no literal of 4\+ characters"):
        load_rules([kb])


ROOT_LOG = (
    "(EngineCore pid=9) INFO 12-01 10:00:00 [loader.py:1] Starting to load model /m\n"
    "(EngineCore pid=9) ERROR 12-01 10:00:02 [core.py:708] EngineCore failed to start.\n"
    "(EngineCore pid=9) ERROR 12-01 10:00:02 [core.py:708] Traceback (most recent call last):\n"
    '(EngineCore pid=9) ERROR 12-01 10:00:02 [core.py:708]   File "/x/runner.py", line 3, in load_model\n'
    "(EngineCore pid=9) ERROR 12-01 10:00:02 [core.py:708] OSError: weights truncated at byte 912\n"
)


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


def test_cli_prints_root_line_and_stage(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    log = tmp_path / "died.log"
    log.write_text(ROOT_LOG)
    assert main(["diagnose", str(log)]) == 1
    out = capsys.readouterr().out
    assert "  line 5: OSError: weights truncated at byte 912\n" in out
    assert "  stage: loading weights\n" in out


def test_a_log_without_newlines_is_read_in_bounded_blocks() -> None:
    from launcher.diagnose.run import BLOCK_BYTES

    blocks = list(read_blocks(io.BytesIO(b"x" * (3 * BLOCK_BYTES + 5)), "log"))
    assert [len(b) for b in blocks] == [BLOCK_BYTES] * 3 + [5]


@pytest.mark.parametrize(
    ("pattern", "words"),
    [
        (r"sm_\d+a? is not compatible", [b"is", b"not"]),  # the edge words may be parts of longer ones
        (r"\bPTXASError\b", [b"PTXASError"]),
        (r"Tried to allocate [\d.]+ [KMG]iB", [b"to", b"allocate"]),
        (r"NCCL\s*error", []),  # \s* may be empty: "NCCLerror" matches, so neither is a whole word
        (r"colou?r scheme", []),
    ],
)
def test_anchor_words(pattern: str, words: list[bytes]) -> None:
    import re

    assert anchor_words(re.compile(pattern)) == words


def test_a_pattern_without_a_whole_word_is_refused(tmp_path: Path) -> None:
    kb = tmp_path / "bad.toml"
    kb.write_text(
        "[[rule]]\nid = 'x'\nseverity = 'error'\ntitle = 't'\npatterns = ['ncclSystemError']\n"
        "cause = 'c'\nfix = 'f'\nsource = 's'\n"
    )
    with pytest.raises(ValueError, match=r"bad.toml: rule x: pattern 'ncclSystemError' has no whole word"):
        load_rules([kb])


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


LOGS = FIXTURES / "logs"


@pytest.mark.parametrize(
    ("log", "root", "stage", "fix_names"),
    [
        (  # a model folder whose only shard was cut in half (real vLLM 0.32 CPU engine, 2026-12-01)
            "cpu-vllm032-broken-weights-2026-12-01.log",
            "  line 106: safetensors._safetensors_rust.SafetensorError: Error while deserializing header: "
            "incomplete metadata, file not fully covered\n",
            "loading weights",
            "safetensors shard",
        ),
        (  # the engine core process killed with SIGKILL two seconds after the server came up (same engine)
            "cpu-vllm032-engine-core-killed-2026-12-01.log",
            "  line 120: vllm.v1.engine.exceptions.EngineDeadError: EngineCore encountered an issue.",
            "serving requests",
            "dmesg",
        ),
    ],
    ids=["broken-weights", "engine-core-killed"],
)
def test_a_real_dead_server_gets_its_root_line_and_stage(
    log: str, root: str, stage: str, fix_names: str, capsys: pytest.CaptureFixture[str]
) -> None:
    """Real logs of the CPU engine dying of something no rule names: diagnose must not say "no known failure"."""
    assert main(["diagnose", str(LOGS / log)]) == 1
    out = capsys.readouterr().out
    assert root in out
    assert f"  stage: {stage}\n" in out
    block = out.split("\n\n")[1]  # the root-error finding comes first
    assert block.startswith("[error] vLLM failed; no known rule matches") and fix_names in block
