"""`nemolaunch diagnose` through its entry point: the JSON contract, exit codes, bad input, real dead servers."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from launcher.cli.main import main
from tests.diagnose.texts import ROOT_LOG
from tests.helpers import FIXTURES


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


def test_cli_prints_root_line_and_stage(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    log = tmp_path / "died.log"
    log.write_text(ROOT_LOG)
    assert main(["diagnose", str(log)]) == 1
    out = capsys.readouterr().out
    assert "  line 5: OSError: weights truncated at byte 912\n" in out
    assert "  stage: loading weights\n" in out


LOGS = FIXTURES / "logs"


@pytest.mark.parametrize(
    ("log", "root", "stage", "title", "fix_names"),
    [
        (  # a model folder whose only shard was cut in half (real vLLM 0.32 CPU engine, 2026-12-01)
            "cpu-vllm032-broken-weights-2026-12-01.log",
            "  line 106: safetensors._safetensors_rust.SafetensorError: Error while deserializing header: "
            "incomplete metadata, file not fully covered\n",
            "loading weights",
            "[error] vLLM failed; no known rule matches",
            "safetensors shard",
        ),
        (  # the engine core process killed with SIGKILL two seconds after the server came up (same engine)
            "cpu-vllm032-engine-core-killed-2026-12-01.log",
            "  line 120: vllm.v1.engine.exceptions.EngineDeadError: EngineCore encountered an issue.",
            "serving requests",
            "[error] The log cannot say why: collect more",
            "dmesg",
        ),
    ],
    ids=["broken-weights", "engine-core-killed"],
)
def test_a_real_dead_server_gets_its_root_line_and_stage(
    log: str, root: str, stage: str, title: str, fix_names: str, capsys: pytest.CaptureFixture[str]
) -> None:
    """Real logs of the CPU engine dying of something no rule names: diagnose must not say "no known failure"."""
    assert main(["diagnose", str(LOGS / log)]) == 1
    out = capsys.readouterr().out
    assert root in out
    assert f"  stage: {stage}\n" in out
    block = out.split("\n\n")[1]  # the root-error finding comes first
    assert block.startswith(title) and fix_names in block
