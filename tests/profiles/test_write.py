"""profile write (evidence to intent) and probe --recheck, on the real H200 captures."""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

import pytest

from launcher.cli.main import main
from launcher.profiles.profile import ServingProfile, load_profile
from launcher.profiles.write import MARGIN, memory_setting, recheck, speed
from tests.helpers import FIXTURES, h200_three_starts

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


TORCH_FP8, CUTLASS_FP8 = "PerTensorTorchFP8ScaledMMLinearKernel", "CutlassFP8ScaledMMLinearKernel"


def write(tmp_path: Path, doc: dict[str, Any]) -> tuple[ServingProfile, str]:
    evidence, out = tmp_path / "probe.json", tmp_path / "p.toml"
    evidence.write_text(json.dumps(doc))
    assert main(["profile", "write", "--name", "p", "--from", str(evidence), "--out", str(out)]) == 0
    return load_profile(str(out)), out.read_text()


def slower_start(doc: dict[str, Any], kernel: str, factor: float) -> dict[str, Any]:
    """The report with `kernel`'s third process start `factor` times slower at every shape (a constructed start)."""
    doc = copy.deepcopy(doc)
    for s in next(k for k in doc["kernels"] if k["kernel"] == kernel)["shapes"]:
        s["relative_starts"][2] = round(s["relative_starts"][2] * factor, 3)
    return doc


def test_the_h200_runs_as_three_starts_write_what_they_measured(tmp_path: Path) -> None:
    """The three H200 runs as the starts of one probe: per-tensor torch's FP8 GEMM ahead of CUTLASS in every
    start, 6.2% apart in the median, past the margin and outside the spread: CUTLASS is disabled, no tie said."""
    prof, text = write(tmp_path, h200_three_starts())
    assert prof.settings["disabled_kernels"] == [CUTLASS_FP8]
    assert f"{TORCH_FP8} measured fastest and correct by 6.2% (geomean over 15 shapes)" in prof.why["disabled_kernels"]
    assert "a tie" not in text


def test_profile_write_changes_no_flag_on_a_tie(tmp_path: Path) -> None:
    """A constructed third start of per-tensor torch 10% slower widens its spread past CUTLASS's fastest start:
    the 6% gap is a tie, vLLM's choice stays (the 5% margin alone would have disabled CUTLASS), and a profile
    that leaves CUTLASS to vLLM still rechecks as best."""
    doc = {**slower_start(h200_three_starts(), TORCH_FP8, 1.10), "_path": "probe.json"}
    assert speed(doc, "fp8_dense", CUTLASS_FP8) / speed(doc, "fp8_dense", TORCH_FP8) > MARGIN  # type: ignore[operator]
    prof, text = write(tmp_path, doc)
    assert "disabled_kernels" not in prof.settings
    assert (
        f"# fp8_dense: {TORCH_FP8} and vLLM's choice {CUTLASS_FP8} are a tie (the gap between them lies inside the "
        "spread of their process starts): vLLM's choice kept"
    ) in text.splitlines()
    assert recheck(load_profile("sm90"), doc)[0] == ("fp8_dense", CUTLASS_FP8, TORCH_FP8, True)


def test_a_moe_backend_is_not_set_on_a_tie(tmp_path: Path) -> None:
    """Constructed: Marlin recommended for FP8 MoE, its three starts overlapping those of vLLM's first working
    backend (its CUTLASS): no --moe-backend."""
    doc = moe_doc("MARLIN")
    for name, starts in (("MARLIN", [1.0, 1.02, 1.04]), ("VLLM_CUTLASS", [1.03, 1.05, 1.07])):
        for s in next(k for k in doc["kernels"] if k["chain"] == "fp8_moe" and k["kernel"] == name)["shapes"]:
            s["relative_starts"] = starts
    prof, text = write(tmp_path, doc)
    assert "moe_backend" not in prof.settings
    assert "# fp8_moe: MARLIN and vLLM's choice VLLM_CUTLASS are a tie" in text


def hybrid_doctor(tmp_path: Path, config: dict[str, Any], weight_gib: float) -> Path:
    """The H200 doctor capture (143,771 MiB) with --model facts as doctor records them for a hybrid (checks.facts:
    the sequence memory of the config, the weights' bytes on disk)."""
    from dataclasses import asdict

    from checks.seqmem import sequence_memory

    doc = json.loads(DOCTOR.read_text())
    seq = sequence_memory(config)
    assert seq is not None
    doc["facts"]["model"] = {"path": "/m", "config": True, "weight_files": 17, "weight_bytes": int(weight_gib * 2**30),
                             "sequence_memory": asdict(seq)}  # fmt: skip
    path = tmp_path / "doctor.json"
    path.write_text(json.dumps(doc))
    return path


@pytest.mark.parametrize(
    ("base", "kv_bytes", "expected"),
    [(None, 8192, 232), ("sm120", 4096, 256)],
    ids=["bf16-kv-sized", "fp8-kv-base-fits"],
)
def test_a_hybrids_max_num_seqs_is_what_its_state_and_kv_fit(
    tmp_path: Path, base: str | None, kv_bytes: int, expected: int
) -> None:
    """Nemotron 3 Super, 75 GiB of weights, on the H200: doctor's memory setting gives 0.9 of 140.4 GiB, so
    (143771/1024 x 0.9 - 75) GiB = 55,147,462,082 B are left. A sequence of 8192 tokens holds 170,229,760 B of Mamba
    state + 8192 x 8 KiB of BF16 KV = 237,338,624 B: 232 fit (under vLLM's 1024 on a 140 GiB GPU), set. With sm120's
    FP8 KV (4 KiB a token) 270 fit: the base's 256 fits, and is kept."""
    from launcher.model import nemotron

    free = (143771 / 1024 * 0.9 - 75) * 2**30
    assert int(free // (170_229_760 + 8192 * kv_bytes)) == {8192: 232, 4096: 270}[kv_bytes]
    out = tmp_path / "p.toml"
    args = ["--base", base] if base else []
    doctor = hybrid_doctor(tmp_path, nemotron.SUPER_CONFIG, 75)
    assert main(["profile", "write", "--name", "p", "--from", str(doctor), "--out", str(out), *args]) == 0
    prof = load_profile(str(out))
    assert prof.settings["max_num_seqs"] == expected
    if base is None:
        assert prof.why["max_num_seqs"] == (
            "a hybrid model: each sequence holds 170 MB of Mamba state + 8 KiB of bf16 KV per token; NVIDIA H200 140 "
            "GiB x 0.9 less 75.0 GiB of weights holds 232 sequences of 8192 tokens (no max_model_len set); vLLM's "
            f"default here is 1024 ({doctor})"
        )
    else:
        assert (
            "holds 270 sequences of 8192 tokens (no max_model_len set); vLLM's default here is 1024"
            in (out.read_text())
            and "the base's 256 fits, kept" in out.read_text()
        )


def test_a_hybrid_that_fits_more_than_vllms_default_is_left_to_vllm(tmp_path: Path) -> None:
    """Nano, 18 GiB of weights: a sequence holds 23 x 64 x 64 x 128 x 4 B of SSM state + 23 x 6,144 x 3 x 2 B of
    conv state = 49,082,368 B, and 6 attention layers x 2 heads x 128 x (K, V) x 2 B = 6 KiB of KV a token. In
    (143771/1024 x 0.9 - 18) GiB = 116,351,985,254 B, 1170 sequences of 8192 tokens fit: more than vLLM's 1024, so
    max_num_seqs is left to vLLM (the profile says why). A base with max_model_len 262,144 (1,659,695,104 B a
    sequence) fits 70: set."""
    from launcher.model import nemotron

    free = int((143771 / 1024 * 0.9 - 18) * 2**30)
    assert (free // (49_082_368 + 8192 * 6144), free // (49_082_368 + 262_144 * 6144)) == (1170, 70)
    doctor = hybrid_doctor(tmp_path, nemotron.NANO_CONFIG, 18)
    out = tmp_path / "p.toml"
    assert main(["profile", "write", "--name", "p", "--from", str(doctor), "--out", str(out)]) == 0
    assert "max_num_seqs" not in load_profile(str(out)).settings
    assert "holds 1170 sequences of 8192 tokens (no max_model_len set); vLLM's default here is 1024" in out.read_text()
    assert ": left to vLLM" in out.read_text()
    long = tmp_path / "long.toml"
    long.write_text('schema = 1\ndescription = "long context"\n[vllm]\nmax_model_len = 262144\n')
    assert main(["profile", "write", "--name", "p", "--from", str(doctor), "--base", str(long), "--out", str(out),
                 "--force"]) == 0  # fmt: skip
    prof = load_profile(str(out))
    assert prof.settings["max_num_seqs"] == 70 and "70 sequences of max_model_len 262144" in prof.why["max_num_seqs"]
