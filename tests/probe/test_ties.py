"""Probe ties: each kernel measured correctly is timed again in fresh processes (real forks of the harness's pool),
its starts combined; a gap between two kernels inside the spread of their starts is a tie, in the JSON and the
table. The real H200 runs of 2026-11-30 serve as the starts of one run (tests/helpers.py)."""

from __future__ import annotations

import copy
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

from launcher.child.isolate import Turn, run_isolated
from launcher.child.starts import Starts
from launcher.cli.probe import render
from launcher.engine import resolve_python
from launcher.probe.report import KernelResult, ProbeReport, ties
from launcher.ranking import start_speeds
from tests.helpers import ROOT, h200_three_starts

SHAPE = {"m": 16, "n": 256, "k": 256}


def result(status: str, us: float | None = None, **extra: Any) -> dict[str, Any]:
    shapes = [{**SHAPE, "us": us, "numerics_ok": status == "ok", "rel_err": 0.001}] if us is not None else []
    return {"status": status, "shapes": shapes, "noise": 1, "seconds": 2.0, "setup_s": 1.5, "timed_s": 0.5,
            "t": {"started": 10.0, "ended": 12.0}, **extra}  # fmt: skip


def test_a_correct_kernel_is_started_again_until_it_has_every_start() -> None:
    starts = Starts(3)
    job = {"chain": "fp8_dense", "kernel": "K", "shapes": [[16, 256, 256]]}
    again, done = starts.record(job, result("ok", 5.0))
    assert again == [{**job, "start": 2}] and done is None
    again, done = starts.record(again[0], result("ok", 7.0, t={"started": 20.0, "ended": 21.0}))
    assert again == [{**job, "start": 3}] and done is None
    again, done = starts.record(again[0], result("ok", 6.0, t={"started": 30.0, "ended": 33.0}))
    assert again == [] and done is not None
    assert done["status"] == "ok" and done["shapes"] == [
        {**SHAPE, "us": 6.0, "us_starts": [5.0, 7.0, 6.0], "numerics_ok": True, "rel_err": 0.001}
    ]
    assert (done["seconds"], done["timed_s"], done["setup_s"], done["noise"]) == (6.0, 1.5, 1.5, 3)
    assert done["t"] == {"started": 10.0, "ended": 33.0} and len(done["starts"]) == 3


def test_a_kernel_that_fails_or_goes_wrong_is_not_started_again() -> None:
    starts = Starts(3)
    job = {"chain": "fp8_dense", "kernel": "K"}
    assert starts.record(job, result("unsupported", error="cuBLAS says no")) == (
        [],
        {**result("unsupported", error="cuBLAS says no"), "starts": [
            {"status": "unsupported", "seconds": 2.0, "setup_s": 1.5, "timed_s": 0.5,
             "t": {"started": 10.0, "ended": 12.0}}]},
    )  # fmt: skip
    again, _ = starts.record(job, result("ok", 5.0))
    again, done = starts.record(again[0], result("wrong", 5.0))
    assert again == [] and done is not None
    assert (done["status"], done["error"]) == ("wrong", "start 2 of 3: its output failed the numerics check")
    assert done["shapes"][0]["numerics_ok"] is False and done["shapes"][0]["us_starts"] == [5.0, 5.0]


def test_one_start_answers_as_before() -> None:
    assert Starts(1).record({"chain": "c", "kernel": "k"}, result("ok", 5.0)) == ([], result("ok", 5.0))


def test_each_start_is_a_fresh_process() -> None:
    """Through the real pool: a correct kernel is timed in three forked children, each its own process, none of
    them the harness; a failing one in one; each kernel is answered once."""
    starts = Starts(3)
    answers: list[dict[str, Any]] = []

    def worker(job: dict[str, Any], turn: Turn) -> dict[str, Any]:
        turn.wait()
        if job["kernel"] == "fails":
            raise RuntimeError("no kernel image for this GPU")
        return {"status": "ok", "shapes": [{**SHAPE, "us": float(os.getpid())}]}

    def ended(job: dict[str, Any], res: dict[str, Any]) -> list[dict[str, Any]]:
        again, done = starts.record(job, res)
        if done is not None:
            answers.append({"kernel": job["kernel"], **done})
        return again

    jobs = [{"chain": "fp8_dense", "kernel": name} for name in ("ok", "fails")]
    run_isolated(jobs, worker, 30, 2, ended)
    by_name = {a["kernel"]: a for a in answers}
    assert sorted(by_name) == ["fails", "ok"] and len(answers) == 2
    pids = by_name["ok"]["shapes"][0]["us_starts"]
    assert len(set(pids)) == 3 and os.getpid() not in pids
    assert by_name["fails"]["status"] == "failed" and len(by_name["fails"]["starts"]) == 1


def kernels_of(doc: dict[str, Any]) -> list[KernelResult]:
    return [KernelResult(**k) for k in doc["kernels"]]


def speeds(kernels: list[KernelResult], name: str) -> list[float]:
    return start_speeds(next(k for k in kernels if k.kernel == name).shapes)


def test_the_h200_runs_as_starts_tie_nowhere() -> None:
    """On the H200, per-tensor torch's FP8 GEMM spread 3.6% over its three starts, and vLLM's CUTLASS was slower
    in each of its two than torch in its slowest: a difference, not a tie (so profile write may act on it)."""
    doc = h200_three_starts()
    assert doc["ties"] == {chain: [] for chain in ("fp8_dense", "nvfp4_dense", "nvfp4_moe", "fp8_moe", "attention")}
    kernels = kernels_of(doc)
    torch = speeds(kernels, "PerTensorTorchFP8ScaledMMLinearKernel")
    cutlass = speeds(kernels, "CutlassFP8ScaledMMLinearKernel")
    assert len(torch) == 3 and len(cutlass) == 2
    assert 0.03 < max(torch) / min(torch) - 1 < 0.04 and min(cutlass) > max(torch)
    assert doc["recommended"]["fp8_dense"] == "PerTensorTorchFP8ScaledMMLinearKernel"


def with_slow_start(kernels: list[KernelResult], name: str, factor: float) -> list[KernelResult]:
    """The kernels with `name`'s third start `factor` times slower at every shape (a constructed start)."""
    kernels = copy.deepcopy(kernels)
    for s in next(k for k in kernels if k.kernel == name).shapes:
        s["relative_starts"][2] = round(s["relative_starts"][2] * factor, 3)
    return kernels


def test_a_gap_inside_the_spread_of_the_starts_is_a_tie() -> None:
    """A constructed third start of per-tensor torch 10% slower than measured stretches its spread past CUTLASS's
    fastest start: the two tie; 3% slower does not reach it."""
    doc = h200_three_starts()
    recommended = doc["recommended"]
    tied = ties(with_slow_start(kernels_of(doc), "PerTensorTorchFP8ScaledMMLinearKernel", 1.10), recommended)
    assert tied["fp8_dense"] == ["CutlassFP8ScaledMMLinearKernel"]
    apart = ties(with_slow_start(kernels_of(doc), "PerTensorTorchFP8ScaledMMLinearKernel", 1.03), recommended)
    assert apart["fp8_dense"] == []


def test_the_table_says_which_kernels_tie() -> None:
    doc = h200_three_starts()
    kernels = with_slow_start(kernels_of(doc), "PerTensorTorchFP8ScaledMMLinearKernel", 1.10)
    report = ProbeReport(
        doc["gpu"], resolve_python(Path(sys.executable)), "0.26.0", doc["chain_sources"], kernels,
        doc["recommended"], doc["fastest_measured"], 60.0, starts=3, ties=ties(kernels, doc["recommended"]),
    )  # fmt: skip
    lines = render(report, None).splitlines()
    at = lines.index(
        "recommended: PerTensorTorchFP8ScaledMMLinearKernel (fastest measured: FlashInferFP8ScaledMMLinearKernel, "
        "which vLLM declares unsupported here)"
    )
    assert lines[at + 1] == (
        "  a tie with CutlassFP8ScaledMMLinearKernel: the gap lies inside the spread of 3 process starts "
        "(profile write keeps vLLM's choice on a tie)"
    )
    assert report.to_json()["ties"]["fp8_dense"] == ["CutlassFP8ScaledMMLinearKernel"]
    assert sum(line.startswith("  a tie with") for line in lines) == 1


def test_the_gpu_script_summary_shows_each_start(tmp_path: Path) -> None:
    """benchmarks/probe_starts_summary.py on the H200 runs as three starts: the run's line, then per kernel its
    speed in each start and their spread."""
    (tmp_path / "probe-dense-3.json").write_text(json.dumps(h200_three_starts()))
    (tmp_path / "times.txt").write_text("dense-3 exit 0 in 61.2 s (limit 120 s)\n")
    script = ROOT / "benchmarks/probe_starts_summary.py"
    r = subprocess.run([sys.executable, script, tmp_path], capture_output=True, text=True, check=True)
    lines = r.stdout.splitlines()
    assert lines[1].split()[:3] == ["dense-3", "61.2", "0"] and lines[1].split()[4] == "3"
    torch = next(line for line in lines if line.strip().startswith("PerTensorTorchFP8ScaledMMLinearKernel"))
    assert "starts 1.072 1.034 1.046  spread 3.6%" in torch
