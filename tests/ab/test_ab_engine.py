"""`nemolaunch ab` and `tune` on the real vLLM CPU engine with the tiny model. Every assertion here holds on a
loaded 2-core machine: what the code guarantees (an A/A is never judged, a usage error starts nothing, a tiny
budget writes nothing, an interrupted run keeps its rounds and no server outlives it), and one difference so large
that no noise of this machine hides it (max_num_seqs=1 against 64 at concurrency 8: 2-5x here).

The shared run has four configurations, co-resident: slow (max_num_seqs=1), fast (the cpu profile), bad (a
context the tiny model cannot hold: cannot start) and slow-again (the A/A). It is stopped with SIGINT once its
first round is complete (no verdict is possible before the second), then continued by the same command."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import psutil
import pytest

from launcher.ab.report import agreement_text, sentence
from launcher.cli.main import main
from tests.helpers import diagnosed_errors

pytestmark = pytest.mark.engine
WORKLOAD = ["--concurrency", "8", "--input-len", "32", "--output-len", "32", "--window", "3", "--warmup-passes", "1"]


@dataclass(frozen=True)
class Run:
    first_code: int
    first_stderr: str
    first: dict[str, Any]
    code: int
    stdout: str
    stderr: str
    doc: dict[str, Any]
    out: Path
    leftover: list[str]
    env: dict[str, str]


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


def _ours(doc: dict[str, Any]) -> list[str]:
    ports = {s["served"]["argv"][s["served"]["argv"].index("--port") + 1] for s in doc["sides"] if s["served"]}
    return [
        " ".join(c) for c in map(_cmdline, psutil.process_iter()) if "--port" in c and c[c.index("--port") + 1] in ports
    ]


def _cmdline(p: psutil.Process) -> list[str]:
    try:
        return p.cmdline()
    except (psutil.Error, OSError):
        return []


@pytest.fixture(scope="module")
def resumed(engine_python: Path, tiny_model: Path, tmp_path_factory: pytest.TempPathFactory) -> Run:
    out = tmp_path_factory.mktemp("ab") / "run"
    # the A/A's noise is stored for this machine under the cache folder: keep the test's out of the user's
    env = {**os.environ, "XDG_CACHE_HOME": str(tmp_path_factory.mktemp("cache"))}
    argv = [sys.executable, "-m", "launcher", "ab", "--model", str(tiny_model), "--python", str(engine_python)]
    argv += ["--config", "slow=cpu,max_num_seqs=1", "--config", "fast=cpu", "--config", "bad=cpu,max_model_len=100000"]
    argv += ["--calibrate", "--rounds", "6", *WORKLOAD, "--out", str(out)]
    proc = subprocess.Popen(
        argv,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
        # a job started in the background of a script inherits SIGINT ignored: give the child Ctrl-C back
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),
    )
    try:
        _wait_for(out / "ab.json", lambda d: len(d["rounds"]) >= 1, proc, timeout_s=900)
        proc.send_signal(signal.SIGINT)
        _, first_stderr = proc.communicate(timeout=120)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()
    first = json.loads((out / "ab.json").read_text())
    again = subprocess.run(argv, capture_output=True, text=True, env=env, timeout=1500)
    doc = json.loads((out / "ab.json").read_text())
    return Run(proc.returncode, first_stderr, first, again.returncode, again.stdout, again.stderr, doc, out,
               _ours(doc), env)  # fmt: skip


def test_an_interrupted_run_keeps_its_round_and_stops_every_server(resumed: Run) -> None:
    assert resumed.first_code == 130, resumed.first_stderr[-2000:]
    assert resumed.first["status"] == "interrupted" and len(resumed.first["rounds"]) >= 1
    assert "kept (interrupted)" in resumed.first_stderr


def test_the_continued_run_keeps_the_first_rounds_and_ends_with_its_stopping_rule(resumed: Run) -> None:
    doc = resumed.doc
    assert doc["status"] == "complete" and resumed.code == 1, resumed.stderr[-2000:]  # 1: "bad" cannot serve
    assert doc["rounds"][0] == resumed.first["rounds"][0] and len(doc["rounds"]) >= 2
    assert doc["stopped_by"].startswith(("decided after round", "the 6 planned rounds"))
    assert "continuing the run" in resumed.stderr and not resumed.leftover  # every server stopped


def test_max_num_seqs_1_at_concurrency_8_is_decided(resumed: Run) -> None:
    verdict = resumed.doc["verdicts"]["fast"]["8"]["output_tok_s"]
    text = sentence(verdict, "fast")
    assert verdict["kind"] == "better" and verdict["headline"], text
    assert text.startswith("fast faster by") and "beyond the 2.0% threshold" in text
    assert verdict["lo"] > 1.02 and len(verdict["ratios"]) == verdict["n"] >= 2


def test_an_aa_is_never_judged_faster(resumed: Run) -> None:
    aa = resumed.doc["verdicts"]["slow-again"]["8"]
    assert all(aa[m]["kind"] in ("noise", "insufficient") and not aa[m]["headline"] for m in aa), aa


def test_the_aa_noise_is_stored_for_this_machine(resumed: Run) -> None:
    assert resumed.doc["noise"]["source"] == "A/A this run" and resumed.doc["noise"]["measured"]
    stored = list(Path(resumed.env["XDG_CACHE_HOME"], "nemolaunch", "noise").glob("*.json"))
    assert len(stored) == 1 and json.loads(stored[0].read_text())["key"]["concurrency"] == 8


def test_a_side_that_cannot_start_is_infeasible_with_its_diagnosis(resumed: Run) -> None:
    bad = next(s for s in resumed.doc["sides"] if s["name"] == "bad")
    assert bad["status"] == "infeasible" and "max_model_len" in bad["diagnosis"].lower().replace("-", "_")
    assert "bad" not in resumed.doc["verdicts"]
    assert all(p["side"] != "bad" for r in resumed.doc["rounds"] for p in r["passes"])


def test_every_pass_has_its_window_and_the_servers_warmed_up(resumed: Run) -> None:
    doc, out = resumed.doc, resumed.out
    passes = [p for r in doc["rounds"] for p in r["passes"]]
    assert len(passes) == 6 * len(doc["rounds"])  # slow fast slow-again slow-again fast slow
    for p in passes:
        assert json.loads((out / p["folder"] / "summary.json").read_text())["schema"] == "nemolaunch.bench/1"
        assert p["window"] is not None and p["window"]["in_flight"] > 6  # 8 streams held, ramp and drain outside
        assert p["prefix_reset"] == "reset"  # ab starts vLLM with its dev endpoints
        assert p["gpu"]["gpu"].startswith("no GPU")  # this machine has none, and the record says so
    assert {(w["side"], w["level"]) for w in doc["warmups"]} >= {("slow", 8), ("fast", 8), ("slow-again", 8)}
    report = (out / "report.md").read_text()
    assert "fast vs slow" in report and "Pocock" in report and (out / "ratios.png").stat().st_size > 1000


def test_same_answers_with_real_weights(resumed: Run) -> None:
    answers = resumed.doc["answers"]
    assert answers["applies"] is True
    for name in ("fast", "slow-again"):
        assert agreement_text(answers["sides"][name]).startswith(("same answers", "different answers"))
    assert answers["sides"]["slow-again"]["identical"] == 8  # the same configuration, greedy: the same tokens


def test_the_healthy_servers_logs_diagnose_clean(resumed: Run, engine_python: Path) -> None:
    """Issue 28: no error finding on a server log of a side that served (stopped by SIGINT, then by the run's end);
    the side that could not start has one."""
    logs = {log.name: diagnosed_errors(log, engine_python, resumed.env) for log in (resumed.out / "logs").glob("*.log")}
    healthy = {name: errors for name, errors in logs.items() if not name.startswith("bad-")}
    assert len(healthy) >= 3 and not any(healthy.values()), healthy
    assert all(errors for name, errors in logs.items() if name.startswith("bad-")) and len(logs) > len(healthy), logs


def test_tune_with_a_tiny_budget_writes_nothing_and_says_why(
    engine_python: Path, tiny_model: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Issue 26: `tune --budget 4` once printed "winner: base" and wrote a "tuned" profile nothing measured."""
    base = tmp_path / "narrow.toml"
    base.write_text('schema = 1\n[vllm]\nmax_model_len = 2048\nmax_num_seqs = 1\n[env]\nVLLM_CPU_KVCACHE_SPACE = "1"\n')
    out = tmp_path / "tune"
    argv = ["tune", "--model", str(tiny_model), "--python", str(engine_python), "--base", str(base)]
    assert main([*argv, "--knobs", "max_num_seqs", "--budget", "0.5", *WORKLOAD[:-2], "--out", str(out)]) == 1
    err = capsys.readouterr().err
    assert "nothing measured enough to choose: max_num_seqs=8: screening did not fit the budget" in err, err
    assert "no profile written" in err and not list(out.glob("*.toml")) and not (out / "logs").exists()
