"""probe: ranking and the numerics gate on the real H200 capture, containment of hangs and crashes, and chains
read from the real installed vLLM."""

from __future__ import annotations

import copy
import itertools
import json
import os
import re
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from checks.proc import Conversation
from launcher.child.isolate import Turn, run_isolated
from launcher.cli.main import main
from launcher.paths import CHILD_DIR as CHILD
from launcher.probe.harness import probe_all
from launcher.probe.report import KernelResult, rank
from launcher.probe.run import read_chains
from launcher.probe.selection import Layer, model_layer
from launcher.ranking import relative_speed
from tests.helpers import FIXTURES

NOISE = re.compile(r"Skipping tactic")

CAPTURE = FIXTURES / "probe" / "h200-vllm026-harness-2026-11-30.json"


def captured_kernels() -> list[KernelResult]:
    return [KernelResult(**k) for k in json.loads(CAPTURE.read_text())["kernels"]]


def test_recommendation_is_the_fastest_correct_selectable_kernel() -> None:
    kernels = captured_kernels()
    recommended, fastest = rank(kernels)
    fp8 = [k for k in kernels if k.chain == "fp8_dense" and k.usable() and k.position is not None]
    pick = next(k for k in fp8 if k.kernel == recommended["fp8_dense"])
    assert pick.declared is not False
    assert all(relative_speed(pick.shapes) <= relative_speed(k.shapes) for k in fp8 if k.declared is not False)  # type: ignore[operator]
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


def test_moe_recommendation_weighs_every_shape() -> None:
    """On the H200, vLLM's CUTLASS FP8 MoE wins at 256 tokens, Triton at 16 and 2048: Triton is recommended."""
    kernels = captured_kernels()
    recommended, _ = rank(kernels)
    assert recommended["fp8_moe"] == "TRITON"
    cutlass = next(k for k in kernels if k.chain == "fp8_moe" and k.kernel == "VLLM_CUTLASS")
    assert [s["relative"] == 1.0 for s in cutlass.shapes] == [False, True, False]
    # the only NVFP4 kernels that run on SM90 are Marlin's: measured, correct, recommended
    assert recommended["nvfp4_dense"] == "MarlinNvFp4LinearKernel" and recommended["nvfp4_moe"] == "MARLIN"


def test_an_interrupted_chain_recommends_nothing() -> None:
    kernels = captured_kernels()
    flashinfer = next(k for k in kernels if k.kernel == "FlashInferFP8ScaledMMLinearKernel")
    flashinfer.status, flashinfer.shapes = "interrupted", []
    recommended, fastest = rank(kernels)
    assert recommended["fp8_dense"] is None and fastest["fp8_dense"] is None
    assert recommended["attention"] == "FLASH_ATTN"  # the other chains keep theirs


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


# runs under the engine's Python: the harness's own probe() in forked children (isolate.run_isolated), with the
# NVFP4 torch kernel's first call raising what it raised on the H200; a second job runs after it
CONTAINED_SCRIPT = """
import json, sys
sys.path.insert(0, sys.argv[1])
import builtins, kernel_probe
from isolate import run_isolated
kind, message = sys.argv[2].split(": ", 1)

def fails_on_its_first_call(m, n, k, layer):
    def run():
        raise getattr(builtins, kind)(message)
    return run, None

kernel_probe.KERNELS[("nvfp4_dense", "TorchNvFp4LinearKernel")] = fails_on_its_first_call
jobs = [{"chain": "nvfp4_dense", "kernel": k, "shapes": [[16, 256, 256]]} for k in ("TorchNvFp4LinearKernel", "later")]
results = {}
run_isolated(jobs, kernel_probe.probe, 60, 1, lambda job, result: results.__setitem__(job["kernel"], result))
print(json.dumps(results))
"""


@pytest.mark.engine
def test_unsupported_fp4_on_sm90_is_contained(engine_python: Path) -> None:
    """The error torch's NVFP4 GEMM raised on the H200 (cuBLAS has no FP4 on SM90), raised again in a real forked
    child of the harness: the kernel is unsupported with the error line the H200 run recorded, and the run goes
    on to the next kernel."""
    torch_only = json.loads((CAPTURE.parent / "h200-torch-2026-11-30.json").read_text())
    fp4 = next(k for k in torch_only["kernels"] if k["kernel"] == "TorchNvFp4LinearKernel")
    r = subprocess.run(
        [engine_python, "-c", CONTAINED_SCRIPT, str(CHILD), fp4["error"]], capture_output=True, text=True, timeout=300
    )
    assert r.returncode == 0, r.stderr[-2000:]
    results = json.loads(r.stdout.strip().splitlines()[-1])
    contained = results["TorchNvFp4LinearKernel"]
    assert (contained["status"], contained["error"]) == ("unsupported", fp4["error"])
    assert results["later"]["status"] == "not-probed"


def hang(job: dict[str, Any], turn: Turn) -> dict[str, Any]:
    if job["when"] == "timed":
        turn.wait()
    time.sleep(60)
    return {"status": "ok"}


def segfault(job: dict[str, Any], turn: Turn) -> dict[str, Any]:
    os.kill(os.getpid(), signal.SIGSEGV)
    return {"status": "ok"}


def dies_with_message(job: dict[str, Any], turn: Turn) -> dict[str, Any]:
    print("RuntimeError: CUDA error: an illegal memory access was encountered", flush=True)
    os._exit(1)


def raises(job: dict[str, Any], turn: Turn) -> dict[str, Any]:
    raise ValueError("kernel said no")


def noisy(job: dict[str, Any], turn: Turn) -> dict[str, Any]:
    print("[Autotuner]: Skipping tactic 3\n[Autotuner]: Skipping tactic 4\nall good", flush=True)
    turn.wait()
    return {"status": "ok"}


@pytest.mark.parametrize(
    "worker, when, status, needle",
    [
        (hang, "setup", "timed-out", "no result within 1 s while setting up"),
        (hang, "timed", "timed-out", "no result within 1 s while being timed"),
        (segfault, None, "crashed", "killed by signal 11"),
        (dies_with_message, None, "crashed", "exit code 1 while setting up: RuntimeError: CUDA error: an illegal"),
        (raises, None, "failed", "ValueError: kernel said no"),
        (noisy, None, "ok", None),
    ],
    ids=["hang-in-setup", "hang-while-timed", "segfault", "dies-with-message", "raises", "autotuner-noise"],
)
def test_a_probe_that_hangs_or_dies_takes_down_only_itself(
    worker: Callable[..., dict[str, Any]], when: str | None, status: str, needle: str | None
) -> None:
    results: dict[str, dict[str, Any]] = {}
    jobs = [{"name": "bad", "when": when}, {"name": "good", "when": None}]

    def run(job: dict[str, Any], turn: Turn) -> dict[str, Any]:
        if job["name"] == "good":
            turn.wait()
            return {"status": "ok", "pid": os.getpid()}
        return worker(job, turn)

    run_isolated(jobs, run, 1, 2, lambda job, result: results.__setitem__(job["name"], result), NOISE)
    assert results["good"]["status"] == "ok" and results["good"]["pid"] != os.getpid()
    assert results["bad"]["status"] == status
    if needle:
        assert needle in results["bad"]["error"]
    else:
        assert results["bad"]["noise"] == 2


def test_kernels_are_set_up_side_by_side_and_timed_one_at_a_time(tmp_path: Path) -> None:
    """Set-ups overlap; timed sections never overlap each other nor a set-up's quiet (GPU-heavy) section."""

    def run(job: dict[str, Any], turn: Turn) -> dict[str, Any]:
        setup = (time.monotonic(), time.sleep(0.3), time.monotonic())
        quiet = []
        for _ in range(3):
            with turn.quiet():
                quiet.append((time.monotonic(), time.sleep(0.05), time.monotonic()))
        turn.wait()
        timed = (time.monotonic(), time.sleep(0.1), time.monotonic())
        return {
            "status": "ok",
            "setup": [setup[0], setup[2]],
            "quiet": [[q[0], q[2]] for q in quiet],
            "timed": [timed[0], timed[2]],
        }

    results: list[dict[str, Any]] = []
    run_isolated([{"n": i} for i in range(6)], run, 30, 3, lambda job, result: results.append(result))
    assert len(results) == 6
    exclusive = sorted([r["timed"] for r in results] + [q for r in results for q in r["quiet"]])
    assert all(a[1] <= b[0] for a, b in itertools.pairwise(exclusive))  # nothing overlaps a timed section
    setups = sorted(r["setup"] for r in results)
    assert any(b[0] < a[1] for a, b in itertools.pairwise(setups))  # set-ups did overlap


def test_children_die_with_the_harness(tmp_path: Path) -> None:
    """nemolaunch kills the harness on Ctrl-C or a timeout; its children must not keep the GPU busy."""
    pidfile = tmp_path / "pid"
    script = tmp_path / "harness.py"
    script.write_text(
        "import os, sys, time\n"
        f"sys.path.insert(0, {str(Path(run_isolated.__code__.co_filename).parent)!r})\n"
        "from isolate import run_isolated\n"
        "def work(job, turn):\n"
        f"    open({str(pidfile)!r}, 'w').write(str(os.getpid()))\n"
        "    time.sleep(600)\n"
        "run_isolated([{}], work, 600, 1, lambda job, result: None)\n"
    )
    harness = subprocess.Popen([sys.executable, str(script)])
    try:
        deadline = time.monotonic() + 30
        while not (pidfile.exists() and pidfile.read_text()) and time.monotonic() < deadline:
            time.sleep(0.05)
        child = int(pidfile.read_text())
        os.kill(child, 0)  # alive while the harness is
    finally:
        harness.kill()
        harness.wait()
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        try:
            os.kill(child, 0)
        except ProcessLookupError:
            break
        time.sleep(0.05)
    else:
        os.kill(child, signal.SIGKILL)
        pytest.fail("the harness's child outlived it")


@pytest.mark.engine
def test_chains_are_read_from_the_installed_vllm(engine_python: Path) -> None:
    chains, sources, version = read_chains(engine_python, (12, 0))
    assert version == "0.32.0"
    assert sources["fp8_dense"] == "installed vLLM 0.32.0"
    assert chains["fp8_dense"][0]["name"] == "FlashInferFP8ScaledMMLinearKernel"
    assert "MARLIN" in [k["name"] for k in chains["nvfp4_moe"]]
    assert sources["attention"].startswith("nemolaunch's table")  # the CPU build cannot import the CUDA platform


@pytest.mark.engine
@pytest.mark.parametrize(
    "extra, listed, absent",
    [([], ["nvfp4_moe", "attention"], []), (["--recheck", "sm90"], ["fp8_dense", "nvfp4_dense"], ["attention"])],
    ids=["all-chains", "recheck-reads-only-the-chains-the-profile-steers"],
)
def test_cpu_machine_lists_chains_then_exits_3(
    engine_python: Path, extra: list[str], listed: list[str], absent: list[str]
) -> None:
    r = subprocess.run(
        [sys.executable, "-m", "launcher", "probe", "--python", str(engine_python), *extra],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert r.returncode == 3
    assert "FlashInferFP8ScaledMMLinearKernel" in r.stdout and "installed vLLM 0.32.0" in r.stdout
    assert all(f"\n{chain} (" in r.stdout for chain in listed)
    assert not any(f"\n{chain} (" in r.stdout for chain in absent)
    assert r.stderr.strip().splitlines()[-1].startswith("nemolaunch: probes need an NVIDIA GPU")


@pytest.mark.engine
def test_the_harness_answers_for_every_kernel_it_is_given(engine_python: Path, tmp_path: Path) -> None:
    """The real harness under the CPU engine: it imports torch and vLLM, forks a child per kernel and answers
    for each (here: CUDA is missing, which each child reports as its own failure); kernels it has no probe for
    say why without running. The FlashInfer kernels wait for their builds: a failed one fails its kernel with its
    last error line, one still running at its limit leaves its kernel not-built; every answer has its
    run-relative timeline."""
    kernels = [
        KernelResult("fp8_dense", "PerTensorTorchFP8ScaledMMLinearKernel", 3, True, None, "not-probed"),
        KernelResult("fp8_moe", "MARLIN", 6, None, None, "not-probed"),
        KernelResult("fp8_moe", "DEEPGEMM", 3, None, None, "not-probed"),
        KernelResult("attention", "FLASHINFER", 2, None, None, "not-probed"),
        KernelResult("fp8_dense", "FlashInferFP8ScaledMMLinearKernel", 1, None, None, "not-probed"),
    ]
    (tmp_path / "attention.json").write_text(json.dumps({"ok": False, "error": "nvcc fatal: Unsupported gpu"}))
    start = time.monotonic()
    builds = {
        m: {"status": str(tmp_path / f"{m}.json"), "wait_until": start + 1, "log": str(tmp_path / f"{m}.log"),
            "label": m}
        for m in ("attention", "gemm")
    }  # fmt: skip
    seen: list[str] = []
    timeline: dict[str, Any] = {}
    chains = "fp8_dense,attention"  # no MoE chain: its modules are not preloaded
    with Conversation([engine_python, CHILD / "kernel_probe.py", "--serve", "--chains", chains]) as harness:
        interrupted = probe_all(harness, kernels, Layer(dense=((64, 64),)), 60, seen.append, builds, start, timeline)
    assert not interrupted
    for k in kernels[:2]:
        assert k.status == "failed" and "CUDA" in (k.error or ""), k
        assert 0 <= (k.timeline["started"] or -1) <= (k.timeline["ended"] or -1), k.timeline
    assert kernels[2].status == "not-probed" and "block-scaled" in (kernels[2].error or "")
    assert kernels[3].status == "failed" and kernels[3].error == "attention build failed: nvcc fatal: Unsupported gpu"
    assert kernels[4].status == "not-built" and str(tmp_path / "gemm.log") in (kernels[4].error or "")
    assert len([line for line in seen if ": failed (" in line]) == 3
    assert timeline["harness_ready"] > 0 and "vllm._custom_ops" in timeline["harness_preload_s"]
    preloaded = set(timeline["harness_preload_s"])
    assert "vllm.v1.attention.ops.triton_unified_attention" in preloaded
    # MoE modules only for MoE chains; flashinfer never (importing it initializes CUDA: the harness would start again)
    assert not any("fused_moe" in m for m in preloaded) and "flashinfer" not in preloaded


class InterruptedHarness:
    """Stands in for the harness (a real one needs a GPU): it answers for one kernel, then the user presses
    Ctrl-C while nemolaunch waits for the next answer."""

    def __init__(self, answers: list[dict[str, Any]]) -> None:
        self.answers = answers

    def send(self, message: Any) -> None:
        self.request = message

    def receive(self, timeout: float) -> Any:
        if self.answers:
            return self.answers.pop(0)
        raise KeyboardInterrupt

    def last_error(self) -> str:
        return ""


def test_ctrl_c_keeps_what_was_measured() -> None:
    kernels = [k for k in captured_kernels() if k.chain == "fp8_dense"]
    measured = {k.kernel: copy.deepcopy(k) for k in kernels}
    for k in kernels:
        k.status, k.shapes = "not-probed", []
    done = measured["PerTensorTorchFP8ScaledMMLinearKernel"]
    hello = {"kernels": [[k.chain, k.kernel] for k in kernels]}
    answer = {"chain": "fp8_dense", "kernel": done.kernel, "status": "ok", "shapes": done.shapes, "seconds": 1.0}
    harness = InterruptedHarness([hello, answer])
    assert probe_all(harness, kernels, Layer(), 60, lambda line: None) is True  # type: ignore[arg-type]
    by_name = {k.kernel: k for k in kernels}
    assert by_name[done.kernel].status == "ok" and by_name[done.kernel].shapes
    assert all(k.status == "interrupted" for k in kernels if k.kernel != done.kernel)
    assert rank(kernels) == ({"fp8_dense": None}, {"fp8_dense": None})


LLAMA_3_8B = {"hidden_size": 4096, "num_attention_heads": 32, "num_key_value_heads": 8, "intermediate_size": 14336}
QWEN3_MOE = {  # Qwen3-30B-A3B's published sizes
    "hidden_size": 2048,
    "num_attention_heads": 32,
    "num_key_value_heads": 4,
    "head_dim": 128,
    "intermediate_size": 6144,
    "moe_intermediate_size": 768,
    "num_experts": 128,
    "num_experts_per_tok": 8,
}


@pytest.mark.parametrize(
    "config, dense, moe, heads",
    [
        (LLAMA_3_8B, ((6144, 4096), (28672, 4096), (4096, 14336)), (2048, 4096, 8, 2), (32, 8, 128)),
        ({"text_config": QWEN3_MOE}, ((5120, 2048), (12288, 2048), (2048, 6144)), (768, 2048, 128, 8), (32, 4, 128)),
    ],
    ids=["dense-llama", "moe-in-text-config"],
)
def test_model_shapes_come_from_its_config(
    tmp_path: Path, config: dict[str, Any], dense: Any, moe: Any, heads: Any
) -> None:
    (tmp_path / "config.json").write_text(json.dumps(config))
    layer = model_layer(tmp_path)
    assert layer.dense == dense
    assert (layer.moe_intermediate, layer.hidden, layer.experts, layer.topk) == moe
    assert (layer.heads, layer.kv_heads, layer.head_dim) == heads


def test_a_model_without_a_config_is_one_line_and_exit_2(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["probe", "--model", str(tmp_path)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err == [f"nemolaunch: cannot read {tmp_path}/config.json: No such file or directory; give a model folder"]
