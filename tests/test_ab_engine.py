"""`nemolaunch ab` and `tune` on the real vLLM CPU engine with the tiny model: short passes, few rounds, servers
shared per run (about 4 minutes each here). Three runs: slow vs fast with a calibration, an A/A with an infeasible
side stopped by SIGINT, and a tune with a tiny budget."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
import tomllib
from pathlib import Path
from typing import Any

import psutil
import pytest

from launcher.cli import main

pytestmark = pytest.mark.engine
WORKLOAD = ["--concurrency", "8", "--num-prompts", "16", "--input-len", "32", "--output-len", "16", "--warmup", "1"]


@pytest.fixture(scope="module")
def slow_vs_fast(
    engine_python: Path, tiny_model: Path, tmp_path_factory: pytest.TempPathFactory
) -> tuple[int, dict[str, Any], Path]:
    out = tmp_path_factory.mktemp("ab") / "run"
    code = main(
        [
            "ab",
            "--model",
            str(tiny_model),
            "--python",
            str(engine_python),
            "--config",
            "slow=cpu,max_num_seqs=1",
            "--config",
            "fast=cpu",
            "--calibrate",
            "--rounds",
            "4",
            *WORKLOAD,
            "--out",
            str(out),
        ]
    )
    return code, json.loads((out / "ab.json").read_text()), out


def test_max_num_seqs_1_at_concurrency_8_is_slower_outside_the_noise(
    slow_vs_fast: tuple[int, dict[str, Any], Path],
) -> None:
    code, doc, _ = slow_vs_fast
    assert code == 0
    assert doc["mode"] == "co-resident" and doc["status"] == "complete" and len(doc["rounds"]) == 4
    verdict = doc["verdicts"]["fast"]["8"]["output_tok_s"]
    assert verdict["kind"] == "better", verdict["text"]
    assert verdict["text"].startswith("fast faster by")
    floor = doc["noise_floor"]["levels"]["8"]["output_tok_s"]
    assert doc["noise_floor"]["source"].startswith("calibrated") and floor is not None
    assert verdict["lo"] > 1 + max(floor, 0.01)  # the whole interval clears the A/A floor


def test_calibration_side_is_the_baseline_again(slow_vs_fast: tuple[int, dict[str, Any], Path]) -> None:
    _, doc, _ = slow_vs_fast
    assert doc["calibration_side"] == "slow-again"
    assert doc["verdicts"]["slow-again"]["8"]["output_tok_s"]["kind"] not in ("better", "worse")


def test_same_answers_with_real_weights(slow_vs_fast: tuple[int, dict[str, Any], Path]) -> None:
    _, doc, _ = slow_vs_fast
    answers = doc["answers"]
    assert answers["applies"] is True
    fast = answers["sides"]["fast"]
    assert fast["prompts"] == 8 and fast["token_agreement"] is not None
    assert fast["text"].startswith(("same answers", "different answers"))


def test_every_pass_is_a_bench_result_and_the_report_is_written(
    slow_vs_fast: tuple[int, dict[str, Any], Path],
) -> None:
    _, doc, out = slow_vs_fast
    folders = [out / p["folder"] for r in doc["rounds"] for p in r["passes"]]
    assert len(folders) == 4 * 6  # four rounds of slow fast slow-again slow-again fast slow
    for folder in folders:
        assert json.loads((folder / "summary.json").read_text())["schema"] == "nemolaunch.bench/1"
    report = (out / "report.md").read_text()
    assert "fast vs slow" in report and "Student t" in report and (out / "ratios.png").stat().st_size > 1000


def _wait_for(path: Path, test: Any, timeout_s: float) -> dict[str, Any]:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        try:
            doc = json.loads(path.read_text())
            if test(doc):
                return doc  # type: ignore[no-any-return]
        except (OSError, json.JSONDecodeError):
            pass
        time.sleep(1)
    raise AssertionError(f"{path} never got there")


def test_aa_with_an_infeasible_side_interrupted_keeps_its_rounds(
    engine_python: Path, tiny_model: Path, tmp_path: Path
) -> None:
    out = tmp_path / "aa"
    argv = [sys.executable, "-m", "launcher", "ab", "--model", str(tiny_model), "--python", str(engine_python)]
    argv += ["--a", "cpu", "--b", "cpu", "--config", "bad=cpu,max_model_len=100000", "--rounds", "4"]
    argv += [*WORKLOAD, "--out", str(out)]
    proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=os.environ.copy())
    try:
        _wait_for(out / "ab.json", lambda d: len(d["rounds"]) >= 2, timeout_s=900)
        proc.send_signal(signal.SIGINT)
        stdout, stderr = proc.communicate(timeout=120)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 130, stderr[-2000:]
    doc = json.loads((out / "ab.json").read_text())
    assert doc["status"] == "interrupted" and len(doc["rounds"]) >= 2
    bad = next(s for s in doc["sides"] if s["name"] == "bad")
    assert bad["status"] == "infeasible" and "max_model_len" in bad["diagnosis"].lower().replace("-", "_")
    aa = doc["verdicts"]["B"]["8"]["output_tok_s"]
    assert aa["kind"] not in ("better", "worse"), aa["text"]  # an A/A never says faster
    assert "B vs A" in stdout and "kept (interrupted)" in stderr
    assert not [p for p in psutil.Process().children(recursive=True) if "api_server" in " ".join(p.cmdline())]


def test_tune_with_a_tiny_budget_writes_a_profile_citing_its_verdicts(
    engine_python: Path, tiny_model: Path, tmp_path: Path
) -> None:
    base = tmp_path / "narrow.toml"
    base.write_text('schema = 1\n[vllm]\nmax_model_len = 2048\nmax_num_seqs = 2\n[env]\nVLLM_CPU_KVCACHE_SPACE = "1"\n')
    out = tmp_path / "tune"
    argv = ["tune", "--model", str(tiny_model), "--python", str(engine_python), "--base", str(base)]
    argv += ["--knobs", "max_num_seqs,cuda_graphs", "--budget", "12", "--rounds", "2", *WORKLOAD, "--out", str(out)]
    assert main(argv) == 0
    profile = tomllib.loads((out / "narrow-tuned.toml").read_text())
    assert profile["vllm"]["max_num_seqs"] == 8
    assert profile["why"]["max_num_seqs"].startswith("chosen: tune, 32 in / 16 out tokens at concurrency [8]")
    assert (
        "max_num_seqs=8 faster by" in profile["why"]["max_num_seqs"]
        and "final/ab-1/ab.json" in profile["why"]["max_num_seqs"]
    )
    assert profile["tuned"]["stack"]["vllm"].startswith("0.")
    assert "nemolaunch ab" in profile["tuned"]["revalidate"]
    doc = json.loads((out / "tune.json").read_text())
    assert any(line.startswith("cuda_graphs: already on") for line in doc["considered_not_tried"])
    # rerun: resumes from the state file, starts nothing, same winner
    assert main(argv) == 0
    assert json.loads((out / "tune.json").read_text())["winner"] == "max_num_seqs=8"
