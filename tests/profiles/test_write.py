"""profile write (evidence to intent) and probe --recheck, on the real H200 captures."""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

import pytest

from launcher.cli.main import main
from launcher.profiles.profile import load_profile
from launcher.profiles.write import memory_setting, recheck
from tests.helpers import FIXTURES

FIX = FIXTURES
PROBE = FIX / "probe" / "h200-vllm026-2026-11-30.json"
DOCTOR = FIX / "doctor" / "h200-vllm026-2026-11-30.json"


def probe_doc() -> dict[str, Any]:
    return {**json.loads(PROBE.read_text()), "_path": str(PROBE)}


def test_write_from_the_h200_evidence(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "h200.toml"
    assert (
        main(
            [
                "profile",
                "write",
                "--name",
                "h200",
                "--from",
                str(PROBE),
                "--from",
                str(DOCTOR),
                "--base",
                "sm90",
                "--out",
                str(out),
            ]
        )
        == 0
    )
    prof = load_profile(str(out))
    assert prof.settings["cuda_graphs"] is True and prof.settings["gpu_memory_utilization"] == 0.9
    assert set(prof.settings) <= set(prof.why)
    # per-tensor torch beat vLLM's CUTLASS by 6.4% (geomean over 15 shapes): past the 5% margin, so vLLM is
    # steered away from CUTLASS; FlashInfer (faster still) is declared unsupported on SM90 and needs no disabling
    assert prof.settings["disabled_kernels"] == ["CutlassFP8ScaledMMLinearKernel"]
    assert "by 6.4% (geomean over 15 shapes)" in prof.why["disabled_kernels"]
    text = out.read_text()
    assert "attention: FLASH_ATTN, first in vLLM's order, also measured fastest: left to vLLM" in text
    assert "fp8_moe: only TRITON could be measured" in text and "moe_backend" not in prof.settings


def test_a_clear_winner_disables_the_kernels_ahead_of_it(tmp_path: Path) -> None:
    doc = probe_doc()
    for k in doc["kernels"]:
        if k["kernel"] == "PerTensorTorchFP8ScaledMMLinearKernel":
            for s in k["shapes"]:
                s["relative"] = 1.0
        elif k["chain"] == "fp8_dense":
            for s in k["shapes"]:
                s["relative"] = 1.3
    evidence = tmp_path / "probe.json"
    evidence.write_text(json.dumps(doc))
    out = tmp_path / "p.toml"
    assert main(["profile", "write", "--name", "p", "--from", str(evidence), "--out", str(out)]) == 0
    prof = load_profile(str(out))
    # FlashInfer is declared unsupported on SM90, so vLLM never picks it: only CUTLASS needs disabling
    assert prof.settings["disabled_kernels"] == ["CutlassFP8ScaledMMLinearKernel"]
    assert "vLLM would pick CutlassFP8ScaledMMLinearKernel" in prof.why["disabled_kernels"]
    rows = recheck(prof, doc)
    assert rows == [
        ("fp8_dense", "PerTensorTorchFP8ScaledMMLinearKernel", "PerTensorTorchFP8ScaledMMLinearKernel", True)
    ]


def test_recheck_says_when_the_ranking_changed() -> None:
    doc = probe_doc()
    # sm90 leaves the FP8 kernel to vLLM (CUTLASS); this capture measured per-tensor torch 6.4% faster
    ((chain, got, pick, ok),) = recheck(load_profile("sm90"), doc)
    assert (chain, got, pick) == (
        "fp8_dense",
        "CutlassFP8ScaledMMLinearKernel",
        "PerTensorTorchFP8ScaledMMLinearKernel",
    )
    assert not ok
    close = copy.deepcopy(doc)
    for k in close["kernels"]:
        if k["kernel"] == "CutlassFP8ScaledMMLinearKernel":
            for s in k["shapes"]:
                s["relative"] = 1.06  # within 5% of the winner's 1.041: not worth a change
    assert all(ok for *_, ok in recheck(load_profile("sm90"), close))


def test_memory_leaves_the_seeds_headroom() -> None:
    doctor = {**json.loads(DOCTOR.read_text()), "_path": "d"}
    doctor["facts"]["nvml"]["gpus"][0]["memory_total_mib"] = 97887  # an RTX PRO 6000 Blackwell's 96 GB
    util, why = memory_setting(doctor)  # type: ignore[misc]
    assert util == 0.85 and "0.9 ran out of memory" in why


def test_evidence_must_be_a_report(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    bogus = tmp_path / "x.json"
    bogus.write_text('{"schema": "nemolaunch.bench/1"}')
    assert main(["profile", "write", "--name", "x", "--from", str(bogus)]) == 2
    assert "not a doctor or probe report" in capsys.readouterr().err


HARNESS_PROBE = FIX / "probe" / "h200-vllm026-harness-2026-11-30.json"


def moe_doc(fastest_fp8_moe: str) -> dict[str, Any]:
    """The H200 capture with every chain, fp8_moe's recommendation set to one of its measured kernels."""
    doc = {**json.loads(HARNESS_PROBE.read_text()), "_path": str(HARNESS_PROBE)}
    doc["recommended"]["fp8_moe"] = fastest_fp8_moe
    return doc


@pytest.mark.parametrize(
    "fastest, setting, note",
    [
        ("TRITON", None, "'triton' is refused for nvfp4_moe; for a model whose MoE layers are all FP8"),
        ("MARLIN", "marlin", None),  # accepted for both quantizations
    ],
    ids=["triton-is-fp8-only", "marlin-suits-both"],
)
def test_moe_backend_is_set_only_to_a_value_every_moe_chain_accepts(
    tmp_path: Path, fastest: str, setting: str | None, note: str | None
) -> None:
    doc = moe_doc(fastest)
    evidence = tmp_path / "probe.json"
    evidence.write_text(json.dumps(doc))
    out = tmp_path / "p.toml"
    assert main(["profile", "write", "--name", "p", "--from", str(evidence), "--out", str(out)]) == 0
    prof = load_profile(str(out))
    assert prof.settings.get("moe_backend") == setting
    if note:
        assert note in out.read_text()
    if setting:
        assert recheck(prof, doc)[-1] == ("fp8_moe", "marlin", "MARLIN", True)
