"""Never cry wolf: a stop nemolaunch or the operator asked for is a stop, not a crash, in `diagnose` and in serve's
live follower. Real logs of the vLLM 0.32 CPU engine and of vLLM 0.26 on the H200, and (marked `engine`) the
logs the real engine leaves when started through nemolaunch in this test. Python's noise while it shuts down is no
failure either."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import threading
import time
import urllib.request
from pathlib import Path

import pytest

from launcher.cli.main import main
from launcher.diagnose.matcher import Matcher
from launcher.diagnose.rules import load_rules
from launcher.serve.watch import LogWatch
from tests.diagnose.texts import ROOT_LOG, diagnose_text
from tests.helpers import FIXTURES, diagnosed_errors, free_port

LOGS = FIXTURES / "diagnose" / "logs"
# vLLM's API server logs EngineDeadError after the engine core's "trigger received signal=SIGTERM"
MIDSTREAM = LOGS / "cpu-vllm032-sigterm-midstream-2026-12-03.log"
HEALTHY = [
    MIDSTREAM,
    LOGS / "cpu-vllm032-bench-2026-12-03.log",
    FIXTURES / "logs" / "h200-vllm026-serve-sm90-2026-11-30.log",
    FIXTURES / "logs" / "h200-vllm026-eager-1b-2026-11-30.log",
]


def test_the_midstream_log_is_the_false_alarm_case() -> None:
    """The fixture holds what made diagnose cry wolf: SIGTERM first, then EngineDeadError and force-killing."""
    text = MIDSTREAM.read_text()
    stop = text.index("[shutdown] EngineCore: trigger received signal=SIGTERM")
    assert stop < text.index("Process manager: force killing remaining processes")
    assert stop < text.index("vllm.v1.engine.exceptions.EngineDeadError: EngineCore encountered an issue.")


@pytest.mark.parametrize("log", HEALTHY, ids=lambda p: p.name)
def test_a_stopped_healthy_server_has_no_error(log: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["diagnose", str(log), "--json"]) == 0
    findings = json.loads(capsys.readouterr().out)["findings"]
    assert not [f["id"] for f in findings if f["severity"] == "error"]
    (stopped,) = [f for f in findings if f["id"] == "stopped-on-request"]
    assert "trigger received signal=SIGTERM" in stopped["evidence"][0]["text"]


def test_what_follows_the_stop_is_named_as_its_consequence() -> None:
    (stopped,) = [f for f in diagnose_text(MIDSTREAM.read_text()) if f["id"] == "stopped-on-request"]
    assert stopped["severity"] == "info"
    texts = [e["text"] for e in stopped["evidence"]]  # type: ignore[attr-defined]
    assert any("EngineDeadError" in t or "output_handler failed" in t for t in texts[1:]), texts


def test_a_crash_before_the_stop_is_still_a_crash() -> None:
    """A server that died, then was stopped: the error before the stop is kept."""
    tail = MIDSTREAM.read_text().splitlines()
    stop = next(i for i, line in enumerate(tail) if "trigger received signal=SIGTERM" in line)
    findings = diagnose_text(ROOT_LOG + "\n".join(tail[stop:]) + "\n")
    errors = [f for f in findings if f["severity"] == "error"]
    assert [f["id"] for f in errors] == ["engine-core-died", "root-error"]
    assert errors[1]["evidence"][0] == {"line": 5, "text": "OSError: weights truncated at byte 912"}  # type: ignore[index]


def test_the_live_follower_does_not_cry_wolf() -> None:
    """serve's LogWatch, fed the log line by line as serve does: nothing said, and no root cause after the stop."""
    said: list[str] = []
    watch = LogWatch(said.append, None, None)
    for number, line in enumerate(MIDSTREAM.read_text().splitlines(), 1):
        watch.line(number, line)
    assert said == []
    assert watch.root_cause() is None


def test_a_real_death_without_a_stop_is_still_reported_live() -> None:
    said: list[str] = []
    watch = LogWatch(said.append, None, None)
    log = FIXTURES / "logs" / "cpu-vllm032-engine-core-killed-2026-12-01.log"
    for number, line in enumerate(log.read_text().splitlines(), 1):
        watch.line(number, line)
    cause = watch.root_cause()
    assert cause is not None and "died without printing an error" in cause and "dmesg" in cause


def test_line_by_line_and_whole_file_agree() -> None:
    matcher = Matcher(load_rules())
    for line in MIDSTREAM.read_bytes().splitlines(keepends=True):
        matcher.feed(line)
    live = [(f.rule.id, f.severity, f.evidence) for f in matcher.report()]
    whole = Matcher(load_rules())
    whole.feed(MIDSTREAM.read_bytes())
    assert live == [(f.rule.id, f.severity, f.evidence) for f in whole.report()]


# The real engine, started through nemolaunch: the logs it leaves must diagnose clean.


def _nemolaunch(*args: str) -> list[str]:
    return [sys.executable, "-m", "launcher", *args]


@pytest.mark.engine
def test_serve_smoke_log_diagnoses_clean(engine_python: Path, tiny_model: Path, tmp_path: Path) -> None:
    log = tmp_path / "smoke.log"
    argv = _nemolaunch(
        "serve", "--profile", "cpu", "--model", str(tiny_model), "--port", str(free_port()),
        "--python", str(engine_python), "--smoke", "--log-file", str(log), "--quiet",
    )  # fmt: skip
    r = subprocess.run(argv, capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stderr
    assert diagnosed_errors(log, engine_python) == []


@pytest.mark.engine
def test_bench_server_log_diagnoses_clean(engine_python: Path, tiny_model: Path, tmp_path: Path) -> None:
    out = tmp_path / "bench"
    argv = _nemolaunch(
        "bench", "--profile", "cpu", "--model", str(tiny_model), "--python", str(engine_python),
        "--concurrency", "1,2", "--num-prompts", "4", "--input-len", "64", "--output-len", "16", "--out", str(out),
    )  # fmt: skip
    r = subprocess.run(argv, capture_output=True, text=True, timeout=900)
    assert r.returncode == 0, r.stderr
    assert diagnosed_errors(out / "server.log", engine_python) == []


@pytest.mark.engine
def test_sigterm_while_streaming_diagnoses_as_a_stop(engine_python: Path, tiny_model: Path, tmp_path: Path) -> None:
    """SIGTERM to nemolaunch serve while completions stream (how MIDSTREAM was captured)."""
    port, log, err = free_port(), tmp_path / "serve.log", tmp_path / "stderr.txt"
    argv = _nemolaunch(
        "serve", "--profile", "cpu", "--model", str(tiny_model), "--port", str(port),
        "--python", str(engine_python), "--log-file", str(log), "--quiet",
    )  # fmt: skip
    with err.open("w") as err_file:
        proc = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=err_file)
    try:
        deadline = time.monotonic() + 400
        while time.monotonic() < deadline and proc.poll() is None and "serving http" not in err.read_text():
            time.sleep(0.5)
        assert proc.poll() is None, err.read_text()
        body = {"model": str(tiny_model), "prompt": "def main():", "max_tokens": 1800, "ignore_eos": True}
        request = urllib.request.Request(
            f"http://127.0.0.1:{port}/v1/completions",
            data=json.dumps({**body, "stream": True}).encode(),
            headers={"Content-Type": "application/json"},
        )
        first_chunk = threading.Event()

        def stream() -> None:
            try:
                with urllib.request.urlopen(request, timeout=120) as resp:
                    for _ in resp:
                        first_chunk.set()
            except OSError:
                pass  # the server stops under it

        threads = [threading.Thread(target=stream, daemon=True) for _ in range(4)]
        for t in threads:
            t.start()
        assert first_chunk.wait(120)
        proc.send_signal(signal.SIGTERM)
        proc.wait(timeout=120)
        for t in threads:
            t.join(timeout=30)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert proc.returncode == 130, err.read_text()
    assert diagnosed_errors(log, engine_python) == []


def test_python_shutdown_noise_is_no_failure() -> None:
    """run-llama/llama_index#13019 (fresh-2026-12-03d.jsonl, benign): a __del__ that runs while Python exits."""
    log = (
        "Exception ignored in: <function Vllm.__del__ at 0x7f1723e82d30>\n"
        "Traceback (most recent call last):\n"
        '  File "/usr/local/miniconda3/lib/python3.8/site-packages/llama_index/llms/vllm/base.py", line 217, in '
        "__del__\n"
        "ImportError: sys.meta_path is None, Python is likely shutting down\n"
    )
    assert diagnose_text(log) == []


def test_a_failure_before_shutdown_noise_is_still_the_root() -> None:
    log = (
        "Traceback (most recent call last):\n"
        '  File "/x/serve.py", line 3, in main\n'
        "OSError: weights truncated at byte 912\n"
        "Exception ignored in: <function Vllm.__del__ at 0x7f1723e82d30>\n"
        "Traceback (most recent call last):\n"
        '  File "/x/base.py", line 217, in __del__\n'
        "ImportError: sys.meta_path is None, Python is likely shutting down\n"
    )
    findings = diagnose_text(log)
    assert [(f["id"], f["severity"]) for f in findings] == [("root-error", "error")]
    assert "OSError: weights truncated" in str(findings[0]["evidence"])
