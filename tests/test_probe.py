"""probe: ranking and the numerics gate on the real H200 capture, containment of hangs and crashes, and chains
read from the real installed vLLM."""

from __future__ import annotations

import copy
import json
import subprocess
import sys
from pathlib import Path

import pytest

from launcher.probe import KernelResult, geomean_relative, rank, read_chains, run_kernel

CAPTURE = Path(__file__).parent / "fixtures" / "probe" / "h200-vllm026-2026-11-30.json"


def captured_kernels() -> list[KernelResult]:
    return [KernelResult(**k) for k in json.loads(CAPTURE.read_text())["kernels"]]


def test_recommendation_is_the_fastest_correct_selectable_kernel() -> None:
    kernels = captured_kernels()
    recommended, fastest = rank(kernels)
    fp8 = [k for k in kernels if k.chain == "fp8_dense" and k.usable() and k.position is not None]
    pick = next(k for k in fp8 if k.kernel == recommended["fp8_dense"])
    assert pick.declared is not False
    assert all(geomean_relative(pick) <= geomean_relative(k) for k in fp8 if k.declared is not False)
    # on the H200, vLLM's chain picks CUTLASS (its first supported kernel); the measurement does not
    assert recommended["fp8_dense"] != "CutlassFP8ScaledMMLinearKernel"
    # FlashInfer's FP8 GEMM ran correctly and fastest, but vLLM 0.26 declares it unsupported on SM90
    assert fastest["fp8_dense"] == "FlashInferFP8ScaledMMLinearKernel"


def test_ranking_is_per_shape() -> None:
    kernels = captured_kernels()
    rank(kernels)
    winners = {}
    for k in kernels:
        if k.chain == "fp8_dense" and k.usable():
            for s in k.shapes:
                if s["relative"] == 1.0:
                    winners[(s["m"], s["n"], s["k"])] = k.kernel
    assert len(set(winners.values())) > 1  # no single kernel wins every shape


def test_numerics_gate_drops_a_fast_wrong_kernel() -> None:
    kernels = captured_kernels()
    cutlass = next(k for k in kernels if k.kernel == "CutlassFP8ScaledMMLinearKernel")
    wrong = copy.deepcopy(cutlass)
    wrong.kernel, wrong.status = "FastButWrong", "wrong"
    for s in wrong.shapes:
        s["us"] /= 10
    kernels.append(wrong)
    recommended, fastest = rank(kernels)
    assert "FastButWrong" not in (recommended["fp8_dense"], fastest["fp8_dense"])
    assert all(s["relative"] < 1 for s in wrong.shapes)  # still reported, relative to the fastest correct one


def test_unsupported_fp4_on_sm90_is_contained() -> None:
    torch_only = json.loads((CAPTURE.parent / "h200-torch-2026-11-30.json").read_text())
    fp4 = next(k for k in torch_only["kernels"] if k["kernel"] == "TorchNvFp4LinearKernel")
    assert fp4["status"] == "unsupported" and "CUBLAS_STATUS_NOT_SUPPORTED" in fp4["error"]


@pytest.mark.parametrize(
    "body, status, needle",
    [
        ("import time; time.sleep(60)", "timed-out", "no result within 2 s"),
        ("import os, signal; os.kill(os.getpid(), signal.SIGSEGV)", "crashed", "killed by signal 11"),
        ("raise SystemExit('CUDA error: an illegal memory access was encountered')", "crashed", "illegal memory"),
        ('print(\'[Autotuner]: Skipping tactic 3\'); print(\'{"status": "ok", "shapes": []}\')', "ok", None),
    ],
    ids=["hang", "segfault", "dies-with-message", "autotuner-noise"],
)
def test_a_probe_that_hangs_or_dies_takes_down_only_itself(
    tmp_path: Path, body: str, status: str, needle: str | None
) -> None:
    script = tmp_path / "probe.py"
    script.write_text(body + "\n")
    result = run_kernel(Path(sys.executable), {"chain": "c", "kernel": "k", "shapes": []}, 2, script=script)
    assert result["status"] == status
    if needle:
        assert needle in result["error"]
    else:
        assert result["noise"] == 1


@pytest.mark.engine
def test_chains_are_read_from_the_installed_vllm(engine_python: Path) -> None:
    chains, sources, version = read_chains(engine_python, (12, 0))
    assert version == "0.32.0"
    assert sources["fp8_dense"] == "installed vLLM 0.32.0"
    assert chains["fp8_dense"][0]["name"] == "FlashInferFP8ScaledMMLinearKernel"
    assert "MARLIN" in [k["name"] for k in chains["nvfp4_moe"]]
    assert sources["attention"].startswith("nemolaunch's table")  # the CPU build cannot import the CUDA platform


@pytest.mark.engine
def test_cpu_machine_lists_chains_then_exits_3(engine_python: Path) -> None:
    r = subprocess.run(
        [sys.executable, "-m", "launcher", "probe", "--python", str(engine_python)],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert r.returncode == 3
    assert "FlashInferFP8ScaledMMLinearKernel" in r.stdout and "installed vLLM 0.32.0" in r.stdout
    assert r.stderr.strip().splitlines()[-1].startswith("nemolaunch: probes need an NVIDIA GPU")
