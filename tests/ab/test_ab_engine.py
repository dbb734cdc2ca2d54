"""`nemolaunch ab` and `tune` on the real vLLM CPU engine with the tiny model: short passes, few rounds, one ab run
shared by most tests (about 4 minutes here) and one tune (about 3 minutes).

The shared run has four configurations, co-resident: slow (max_num_seqs=1), fast (the cpu profile, 64), bad (a
context the tiny model cannot hold: cannot start) and slow-again (the A/A calibration). It is stopped with SIGINT
once four rounds are complete, so the same run also checks that an interrupted ab keeps its rounds."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
import tomllib
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import psutil
import pytest

from launcher.ab.report import agreement_text, sentence
from launcher.cli.main import main

pytestmark = pytest.mark.engine
# passes of 3-4 s: on this shared 2-core machine 1-second passes gave an A/A floor of 28% over 5
# rounds (other jobs come and go within a round), and a 3-round tune of them was inconclusive once
AB_WORKLOAD = ["--concurrency", "8", "--num-prompts", "24", "--input-len", "32", "--output-len", "32", "--warmup", "1"]
assert AB_WORKLOAD[-2] == "--warmup"  # tune has no --warmup (it uses ab's default); the tune test drops it
KEPT = 4  # rounds completed before the SIGINT (a t interval on 2 rounds is 12.7 standard errors wide, on 4 3.2)


@dataclass(frozen=True)
class Run:
    code: int
    stdout: str
    stderr: str
    doc: dict[str, Any]
    out: Path
    leftover: list[str]


def _wait_for(path: Path, test: Any, proc: subprocess.Popen[str], timeout_s: float) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline and proc.poll() is None:
        try:
            if test(json.loads(path.read_text())):
                return
        except (OSError, json.JSONDecodeError):
            pass
        time.sleep(0.5)
    raise AssertionError(f"{path} never got there (exit {proc.poll()})")


@pytest.fixture(scope="module")
def interrupted(engine_python: Path, tiny_model: Path, tmp_path_factory: pytest.TempPathFactory) -> Run:
    out = tmp_path_factory.mktemp("ab") / "run"
    argv = [sys.executable, "-m", "launcher", "ab", "--model", str(tiny_model), "--python", str(engine_python)]
    argv += ["--config", "slow=cpu,max_num_seqs=1", "--config", "fast=cpu", "--config", "bad=cpu,max_model_len=100000"]
    argv += ["--calibrate", "--rounds", str(KEPT + 2), *AB_WORKLOAD, "--out", str(out)]
    proc = subprocess.Popen(
        argv,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=os.environ.copy(),
        # a job started in the background of a script inherits SIGINT ignored: give the child Ctrl-C back
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),
    )
    try:
        _wait_for(out / "ab.json", lambda d: len(d["rounds"]) >= KEPT, proc, timeout_s=900)
        proc.send_signal(signal.SIGINT)
        stdout, stderr = proc.communicate(timeout=120)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()
    doc = json.loads((out / "ab.json").read_text())
    ports = {s["served"]["argv"][s["served"]["argv"].index("--port") + 1] for s in doc["sides"] if s["served"]}
    leftover = [
        " ".join(c) for c in map(_cmdline, psutil.process_iter()) if "--port" in c and c[c.index("--port") + 1] in ports
    ]
    return Run(proc.returncode, stdout, stderr, doc, out, leftover)


def _cmdline(p: psutil.Process) -> list[str]:
    try:
        return p.cmdline()
    except (psutil.Error, OSError):
        return []


def test_max_num_seqs_1_at_concurrency_8_is_slower_outside_the_noise(interrupted: Run) -> None:
    doc = interrupted.doc
    assert doc["mode"] == "co-resident"
    verdict = doc["verdicts"]["fast"]["8"]["output_tok_s"]
    assert verdict["kind"] == "better", sentence(verdict, "fast")
    assert sentence(verdict, "fast").startswith("fast faster by")
    floor = doc["noise_floor"]["levels"]["8"]["output_tok_s"]
    assert doc["noise_floor"]["source"].startswith("calibrated") and floor is not None
    assert verdict["lo"] > 1 + max(floor, 0.01)  # the whole interval clears the A/A floor
    assert doc["verdicts"]["fast"]["8"]["tpot_ms"]["kind"] != "worse"


def test_an_aa_never_says_faster(interrupted: Run) -> None:
    doc = interrupted.doc
    assert doc["calibration_side"] == "slow-again"
    aa = doc["verdicts"]["slow-again"]["8"]
    assert all(aa[m]["kind"] not in ("better", "worse") for m in aa), [sentence(aa[m], "slow-again") for m in aa]


def test_interrupted_run_keeps_its_completed_rounds(interrupted: Run) -> None:
    assert interrupted.code == 130, interrupted.stderr[-2000:]
    doc = interrupted.doc
    assert doc["status"] == "interrupted" and len(doc["rounds"]) == KEPT
    assert "kept (interrupted)" in interrupted.stderr
    assert "fast vs slow" in interrupted.stdout  # the verdict so far is printed
    assert not interrupted.leftover  # every server stopped


def test_a_side_that_cannot_start_is_infeasible_with_its_diagnosis(interrupted: Run) -> None:
    bad = next(s for s in interrupted.doc["sides"] if s["name"] == "bad")
    assert bad["status"] == "infeasible" and "max_model_len" in bad["diagnosis"].lower().replace("-", "_")
    assert "bad" not in interrupted.doc["verdicts"]
    assert all(p["side"] != "bad" for r in interrupted.doc["rounds"] for p in r["passes"])


def test_same_answers_with_real_weights(interrupted: Run) -> None:
    answers = interrupted.doc["answers"]
    assert answers["applies"] is True
    for name in ("fast", "slow-again"):
        side = answers["sides"][name]
        assert side["prompts"] == 8 and side["token_agreement"] is not None
        assert agreement_text(side).startswith(("same answers", "different answers"))
    # the same configuration, greedy: the same tokens
    assert answers["sides"]["slow-again"]["identical"] == 8


def test_every_pass_is_a_bench_result_and_the_report_is_written(interrupted: Run) -> None:
    doc, out = interrupted.doc, interrupted.out
    folders = [out / p["folder"] for r in doc["rounds"] for p in r["passes"]]
    assert len(folders) == KEPT * 6  # slow fast slow-again slow-again fast slow (bad never started)
    for folder in folders:
        assert json.loads((folder / "summary.json").read_text())["schema"] == "nemolaunch.bench/1"
    report = (out / "report.md").read_text()
    assert "fast vs slow" in report and "Student t" in report and (out / "ratios.png").stat().st_size > 1000


def test_tune_with_a_tiny_budget_writes_a_profile_citing_its_verdicts(
    engine_python: Path, tiny_model: Path, tmp_path: Path
) -> None:
    base = tmp_path / "narrow.toml"
    base.write_text('schema = 1\n[vllm]\nmax_model_len = 2048\nmax_num_seqs = 1\n[env]\nVLLM_CPU_KVCACHE_SPACE = "1"\n')
    out = tmp_path / "tune"
    argv = ["tune", "--model", str(tiny_model), "--python", str(engine_python), "--base", str(base)]
    argv += [
        "--knobs",
        "max_num_seqs,cuda_graphs",
        "--budget",
        "12",
        "--rounds",
        str(KEPT),
        *AB_WORKLOAD[:-2],
        "--out",
        str(out),
    ]
    assert main(argv) == 0
    profile = tomllib.loads((out / "narrow-tuned.toml").read_text())
    assert profile["vllm"]["max_num_seqs"] == 8
    assert profile["why"]["max_num_seqs"].startswith("chosen: tune, 32 in / 32 out tokens at concurrency [8]")
    assert (
        "max_num_seqs=8 faster by" in profile["why"]["max_num_seqs"]
        and "final/ab-1/ab.json" in profile["why"]["max_num_seqs"]
    )
    assert profile["tuned"]["stack"]["vllm"].startswith("0.")
    assert "nemolaunch ab" in profile["tuned"]["revalidate"]
    doc = json.loads((out / "tune.json").read_text())
    assert any(line.startswith("cuda_graphs: already on") for line in doc["considered_not_tried"])
    # rerun: resumes from the state file, starts nothing, same winner
    logs = {p.name: p.stat().st_mtime_ns for p in (out / "logs").iterdir()}
    assert main(argv) == 0
    assert json.loads((out / "tune.json").read_text())["winner"] == "max_num_seqs=8"
    assert {p.name: p.stat().st_mtime_ns for p in (out / "logs").iterdir()} == logs
    assert len(list((out / "final").iterdir())) == 1
