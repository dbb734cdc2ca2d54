"""probe: which chains a model can use (from real model cards' configs), the JSON contract on the GPU path and
the no-GPU path, and the table showing every weight shape measured."""

from __future__ import annotations

import json
import shutil
import sys
from pathlib import Path
from typing import Any, ClassVar

import pytest

from launcher.cli.main import main
from launcher.cli.probe import render
from launcher.engine import resolve_python
from launcher.probe import chains as chain_table
from launcher.probe import run as stage
from launcher.probe import selection as pick
from launcher.probe.report import KernelResult, ProbeReport, rank
from launcher.profiles.profile import ServingProfile
from tests.helpers import FIXTURES

MODELS = FIXTURES / "models"
CAPTURE = FIXTURES / "probe" / "h200-vllm026-harness-2026-11-30.json"
H200 = json.loads(CAPTURE.read_text())["gpu"]


@pytest.fixture
def no_gpu(monkeypatch: pytest.MonkeyPatch) -> None:
    """The no-GPU path, also on a GPU host."""
    monkeypatch.setattr(stage, "nvml_facts", lambda: {"ok": False, "error": "no NVIDIA driver (test)"})


@pytest.mark.parametrize(
    "model, quantization, probed, left_out",
    [
        ("llama-3.1-8b-instruct", None, {"attention"}, {"fp8_dense": "not quantized", "fp8_moe": "no experts"}),
        ("llama-3.1-8b-instruct", "fp8", {"attention", "fp8_dense"}, {"nvfp4_dense": "fp8, not NVFP4"}),
        ("qwen3-30b-a3b", None, {"attention"}, {"fp8_moe": "--quantization fp8"}),
        ("qwen3-30b-a3b", "fp8", {"attention", "fp8_dense", "fp8_moe"}, {"nvfp4_moe": "fp8, not NVFP4"}),
        ("mixtral-8x7b-instruct", "fp8", {"attention", "fp8_dense", "fp8_moe"}, {"nvfp4_dense": "fp8, not NVFP4"}),
        ("qwen3-30b-a3b-fp8", None, {"attention", "fp8_dense", "fp8_moe"}, {"nvfp4_moe": "quant_method fp8"}),
        ("llama-3.1-8b-instruct-fp8", None, {"attention", "fp8_dense"}, {"fp8_moe": "no experts"}),
        ("llama-3.1-8b-instruct-nvfp4", None, {"attention", "nvfp4_dense"}, {"fp8_dense": "hf_quant_config.json"}),
        ("qwen3-30b-a3b-nvfp4", None, {"attention", "nvfp4_dense", "nvfp4_moe"}, {"fp8_moe": "quant_method modelopt"}),
    ],
    ids=[
        "dense-bf16",
        "dense-online-fp8",
        "moe-bf16",
        "moe-online-fp8",
        "mixtral-online-fp8",
        "moe-fp8-block-checkpoint",
        "dense-fp8-compressed-tensors",
        "dense-nvfp4-modelopt-hf-quant-config",
        "moe-nvfp4-modelopt",
    ],
)
def test_a_model_gets_the_chains_it_can_use(
    model: str, quantization: str | None, probed: set[str], left_out: dict[str, str]
) -> None:
    selection = pick.chains_for(MODELS / model, quantization, every=False)
    assert set(selection.chains) == probed
    assert set(selection.chains) | set(selection.left_out) == set(chain_table.CHAINS)
    for chain, why in left_out.items():
        assert why in selection.left_out[chain], selection.left_out[chain]


def test_block_scaled_fp8_says_its_kernels_are_not_the_probed_ones() -> None:
    selection = pick.chains_for(MODELS / "qwen3-30b-a3b-fp8", None, every=False)
    assert "block-FP8 kernels, which nemolaunch does not probe yet" in selection.chains["fp8_dense"]
    assert "128 experts" in selection.chains["fp8_moe"]


@pytest.mark.parametrize(
    ("model", "quantization", "static"),
    [
        ("llama-3.1-8b-instruct-fp8", None, True),  # compressed-tensors, input_activations dynamic false
        ("qwen3-30b-a3b-fp8", None, False),  # activation_scheme dynamic
        ("qwen3-30b-a3b-nvfp4", None, True),  # modelopt: input scales in the checkpoint
        ("qwen3-30b-a3b", "fp8", False),  # online FP8 computes its scales per batch
    ],
)
def test_the_child_is_told_whether_fp8_activation_scales_are_static(
    model: str, quantization: str | None, static: bool
) -> None:
    """vLLM runs FlashInfer's CUTLASS per-tensor FP8 MoE only with static activation scales: the probe's MoE gate
    asks vLLM with the model's scheme."""
    assert pick.model_quantization(MODELS / model, quantization).static_activations is static


def test_all_and_no_model_probe_every_chain() -> None:
    for selection in (
        pick.chains_for(MODELS / "llama-3.1-8b-instruct", None, every=True),
        pick.chains_for(None, None, every=False),
    ):
        assert set(selection.chains) == set(chain_table.CHAINS) and not selection.left_out


@pytest.mark.parametrize(
    "settings, expected",
    [
        ({"extra_args": ["--max-num-batched-tokens", "8192", "--quantization", "fp8"]}, "fp8"),
        ({"extra_args": ["--quantization=fp8"]}, "fp8"),
        ({"extra_args": ["-q", "modelopt_fp4"]}, "modelopt_fp4"),
        ({"quantization": "fp8"}, "fp8"),
        ({"cuda_graphs": True}, None),
    ],
    ids=["extra-args", "extra-args-equals", "short-flag", "setting", "none"],
)
def test_a_profiles_online_quantization(settings: dict[str, Any], expected: str | None) -> None:
    assert pick.profile_quantization(ServingProfile("p", Path("p.toml"), settings=settings)) == expected


def probe_json(capsys: pytest.CaptureFixture[str], *args: str, code: int) -> dict[str, Any]:
    assert main(["probe", "--json", "--python", sys.executable, *args]) == code
    return json.loads(capsys.readouterr().out)


@pytest.mark.usefixtures("no_gpu")
def test_the_report_says_what_it_left_out_and_why(capsys: pytest.CaptureFixture[str]) -> None:
    doc = probe_json(capsys, "--model", str(MODELS / "qwen3-30b-a3b"), "--quantization", "fp8", code=3)
    assert set(doc["chains_probed"]) == {"attention", "fp8_dense", "fp8_moe"}
    assert {k["chain"] for k in doc["kernels"]} == {"attention", "fp8_dense", "fp8_moe"}
    assert set(doc["chain_sources"]) == {"attention", "fp8_dense", "fp8_moe"}
    assert doc["chains_left_out"] == {
        "nvfp4_dense": "the weights are fp8, not NVFP4 (--quantization fp8)",
        "nvfp4_moe": "the weights are fp8, not NVFP4 (--quantization fp8)",
        "mamba": "the model has no Mamba layers",
    }
    assert doc["layer"]["experts"] == 128 and doc["layer"]["topk"] == 8
    every = probe_json(capsys, "--model", str(MODELS / "qwen3-30b-a3b"), "--all", code=3)
    assert {k["chain"] for k in every["kernels"]} == set(chain_table.CHAINS) and not every["chains_left_out"]


@pytest.mark.usefixtures("no_gpu")
def test_the_table_lists_the_chains_left_out(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["probe", "--python", sys.executable, "--model", str(MODELS / "llama-3.1-8b-instruct")]) == 3
    out = capsys.readouterr().out
    assert "\nattention (" in out and "\nfp8_dense (" not in out
    left = out[out.index("left out (--all probes every chain):") :].splitlines()[1:5]
    assert left[0] == (
        "  fp8_dense: the weights are not quantized (config.json (no quantization_config)); --quantization fp8 "
        "probes what vLLM's online quantization would run"
    )
    assert [line.split(":")[0] for line in left] == ["  fp8_dense", "  nvfp4_dense", "  nvfp4_moe", "  fp8_moe"]


@pytest.mark.parametrize(
    "args, message",
    [
        (
            ["--model", str(MODELS / "qwen3-30b-a3b-fp8"), "--quantization", "modelopt_fp4"],
            f"nemolaunch: {MODELS / 'qwen3-30b-a3b-fp8'} is quantized as fp8 (config.json quantization_config "
            "(quant_method fp8)); --quantization modelopt_fp4 does not apply to it; "
            "leave --quantization out for a quantized checkpoint",
        ),
        (
            ["--only", "fp4_dense"],
            "nemolaunch: unknown chain fp4_dense; pick from fp8_dense, nvfp4_dense, nvfp4_moe, fp8_moe, attention, "
            "mamba",
        ),
    ],
    ids=["quantization-conflicts-with-the-checkpoint", "unknown-chain"],
)
@pytest.mark.usefixtures("no_gpu")
def test_bad_chain_choices_are_one_line_and_exit_2(
    args: list[str], message: str, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["probe", "--python", sys.executable, *args]) == 2
    assert capsys.readouterr().err.strip().splitlines() == [message]


class RecordedHarness:
    """The harness's side of the conversation, answered from the H200 capture (a real harness needs a GPU)."""

    def __init__(self, argv: Any, env: Any = None) -> None:
        self.recorded = {(k["chain"], k["kernel"]): k for k in json.loads(CAPTURE.read_text())["kernels"]}
        self.answers: list[dict[str, Any]] = [{"kernels": [list(key) for key in self.recorded]}]

    sent: ClassVar[list[dict[str, Any]]] = []
    starts: ClassVar[int | None] = None

    def send(self, message: dict[str, Any]) -> None:
        RecordedHarness.sent, RecordedHarness.starts = message["jobs"], message.get("starts")
        for job in message["jobs"]:
            k = self.recorded[(job["chain"], job["kernel"])]
            self.answers.append({**k, "noise": k["noise_lines"]})

    def receive(self, timeout: float) -> Any:
        return self.answers.pop(0) if self.answers else None

    def last_error(self) -> str:
        return ""

    def close(self) -> None:
        pass


KERNEL_KEYS = {
    "chain", "kernel", "position", "declared", "declared_reason", "status", "error", "shapes", "noise_lines",
    "seconds", "setup_s", "timed_s", "timeline", "starts",
}  # fmt: skip
REPORT_KEYS = {
    "schema", "gpu", "python", "vllm_version", "chain_sources", "recommended", "fastest_measured", "seconds",
    "interrupted", "layer", "chains_probed", "chains_left_out", "timeline", "kernels", "starts", "ties",
}  # fmt: skip


@pytest.mark.usefixtures("no_gpu")
def test_probe_json_contract_without_a_gpu(capsys: pytest.CaptureFixture[str]) -> None:
    """This interpreter has no vLLM: the chains come from nemolaunch's table, the JSON still has every key."""
    doc = probe_json(capsys, code=3)
    assert doc["schema"] == "nemolaunch.probe/1" and set(doc) == REPORT_KEYS
    assert all(source.startswith("nemolaunch's table (vLLM 0.32.0)") for source in doc["chain_sources"].values())
    assert all(set(k) == KERNEL_KEYS for k in doc["kernels"])
    assert doc["layer"]["experts"] == 8 and doc["gpu"] is None and doc["recommended"] == {}


def test_probe_json_contract_with_a_gpu(monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    """The GPU path, through the CLI, with the harness's answers from the H200 capture: every key, every kernel
    answered, the ranking filled in."""
    monkeypatch.setattr(stage, "nvml_facts", lambda: {"ok": True, "gpus": [H200]})
    monkeypatch.setattr(stage, "Conversation", RecordedHarness)
    doc = probe_json(capsys, "--only", "fp8_dense,attention", code=0)
    assert set(doc) == REPORT_KEYS and doc["gpu"]["name"] == "NVIDIA H200"
    assert all(set(k) == KERNEL_KEYS for k in doc["kernels"])
    ok = [k for k in doc["kernels"] if k["status"] == "ok"]
    assert len(ok) == 9 and all("relative" in s for k in ok for s in k["shapes"])
    # this interpreter has no vLLM to declare FlashInfer's FP8 GEMM unsupported on SM90, so the fastest is picked
    assert doc["recommended"] == {"fp8_dense": "FlashInferFP8ScaledMMLinearKernel", "attention": "FLASH_ATTN"}
    # the capture timed each kernel in one start: nothing can be told a tie, and the harness was asked for three
    assert doc["starts"] == 3 and RecordedHarness.starts == 3
    assert doc["ties"] == {"fp8_dense": [], "attention": []}
    assert doc["chains_left_out"] == dict.fromkeys(("nvfp4_dense", "nvfp4_moe", "fp8_moe", "mamba"), "not in --only")


def test_starts_says_how_often_the_harness_times_each_kernel(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setattr(stage, "nvml_facts", lambda: {"ok": True, "gpus": [H200]})
    monkeypatch.setattr(stage, "Conversation", RecordedHarness)
    doc = probe_json(capsys, "--only", "attention", "--starts", "1", code=0)
    assert doc["starts"] == 1 and RecordedHarness.starts == 1
    assert main(["probe", "--python", sys.executable, "--starts", "0"]) == 2
    assert "--starts" in capsys.readouterr().err


@pytest.mark.parametrize(
    ("model", "args", "static"),
    [
        ("qwen3-30b-a3b", ["--quantization", "fp8", "--only", "fp8_moe"], False),
        ("llama-3.1-8b-instruct-fp8", ["--only", "fp8_dense"], True),
    ],
)
def test_each_kernel_job_carries_the_models_activation_scheme(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], model: str, args: list[str], static: bool
) -> None:
    """Every job the harness gets says whether the FP8 activation scales are static (a checkpoint's) or dynamic
    (online FP8), so the MoE gate asks vLLM about the scheme vLLM would run; the report's layer says so too."""
    monkeypatch.setattr(stage, "nvml_facts", lambda: {"ok": True, "gpus": [H200]})
    monkeypatch.setattr(stage, "Conversation", RecordedHarness)
    doc = probe_json(capsys, "--model", str(MODELS / model), *args, code=0)
    assert doc["layer"]["static_activations"] is static
    assert RecordedHarness.sent and all(job["layer"]["static_activations"] is static for job in RecordedHarness.sent)


def captured_report() -> ProbeReport:
    doc = json.loads(CAPTURE.read_text())
    kernels = [KernelResult(**k) for k in doc["kernels"]]
    recommended, fastest = rank(kernels)
    return ProbeReport(
        H200, resolve_python(Path(sys.executable)), "0.26.0", doc["chain_sources"], kernels, recommended, fastest, 142.9
    )


def test_the_table_shows_every_weight_shape_measured() -> None:
    text = render(captured_report(), None)
    fp8 = text[text.index("\nfp8_dense (") : text.index("\nnvfp4_dense (")]
    titles = [line for line in fp8.splitlines() if line.startswith("  N=")]
    assert [t.split(" (")[0] for t in titles] == ["  N=4096 K=4096", "  N=14336 K=4096", "  N=4096 K=14336"]
    header = next(line for line in fp8.splitlines() if line.startswith("kernel ") and "M=" in line)
    assert header.split()[1:] == ["M=1", "M=16", "M=64", "M=256", "M=2048"]
    row = next(line for line in fp8.splitlines() if line.startswith("PerTensorTorchFP8ScaledMMLinearKernel "))
    assert len(row.split()) == 1 + 2 * 5  # a time and its ratio at each of the five token counts
    attention = text[text.index("\nattention (") :]
    assert "  N=1 K=4096" in attention and "  N=2048 K=2048" in attention


def test_a_table_with_more_token_counts_says_how_many_it_left_out() -> None:
    report = captured_report()
    cutlass = next(k for k in report.kernels if k.kernel == "CutlassFP8ScaledMMLinearKernel")
    cutlass.shapes += [{**cutlass.shapes[0], "m": m} for m in (3, 5, 7)]
    text = render(report, None)
    assert "  N=4096 K=4096 (weights N x K), us and x the fastest; 2 more token counts measured (in --json)" in text
    assert "  N=14336 K=4096 (weights N x K), us and x the fastest\n" in text


def test_a_copied_model_folder_reads_the_same(tmp_path: Path) -> None:
    """What is read is the folder's files, not the fixture's path."""
    shutil.copytree(MODELS / "qwen3-30b-a3b-nvfp4", tmp_path / "m")
    assert set(pick.chains_for(tmp_path / "m", None, every=False).chains) == {"attention", "nvfp4_dense", "nvfp4_moe"}
