"""lock capture writes TOML with a library (round-trip, a name with a quote), a malformed lock is one line,
doctor --lock --json keeps a lock that can be judged again, SIGTERM to lock bundle stops pip."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
import tomllib
from pathlib import Path

import psutil
import pytest

from checks import run_checks
from checks.lockfile import load
from launcher.cli.main import main
from launcher.lock import run as lock_stage
from tests.helpers import make_env


@pytest.mark.parametrize("name", ['we"ird \\ name', "plain", "tab\there"])
def test_capture_writes_toml_that_reads_back_whatever_the_name(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], name: str
) -> None:
    python = make_env(tmp_path, {"vllm": "0.26.0"})
    monkeypatch.setattr(lock_stage, "_uv", lambda: None)
    validated = 'runs/"quoted"/summary.json'
    out = tmp_path / "worked.toml"
    argv = ["lock", "capture", "--out", str(out), "--name", name, "--validated", validated, "--python", str(python)]
    assert main(argv) == 0
    manifest = tomllib.loads(out.read_text())
    assert manifest["name"] == name and manifest["validated"]["bench"] == validated
    assert manifest["requirements"] == "worked.txt" and manifest["host"]["gpu"] is False
    assert main(["lock", "verify", str(out), "--python", str(python)]) == 0
    assert capsys.readouterr().out.splitlines()[-1] == "matches the lock"
    mask = os.umask(0o022)
    os.umask(mask)
    assert {p.stat().st_mode & 0o777 for p in tmp_path.glob("worked.*")} == {0o666 & ~mask}


@pytest.mark.parametrize(
    "text, line",
    [
        (
            "torch>=2.10\n",
            "{p}:1: 'torch>=2.10' is not pinned exactly (name==version); regenerate the lock with make lock",
        ),
        ("a==1\na==2\n", "{p}:2: a is pinned twice (first on line 1); keep one pin per package"),
    ],
)
def test_a_malformed_lock_is_one_line_not_a_tuple(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], text: str, line: str
) -> None:
    path = tmp_path / "bad.txt"
    path.write_text(text)
    assert main(["lock", "verify", str(path)]) == 2
    assert capsys.readouterr().err == "nemolaunch: " + line.format(p=path) + "\n"
    assert main(["doctor", "--only", "lock", "--lock", str(path)]) == 2
    assert capsys.readouterr().err == "nemolaunch: " + line.format(p=path) + "\n"


def test_doctor_lock_json_keeps_a_lock_that_is_judged_again_the_same(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    python = make_env(tmp_path, {"torch": "2.10.0+cu130"})
    lock = tmp_path / "stack.txt"
    lock.write_text("torch==2.10.0+cu128 --hash=sha256:bbbb\nnumpy==2.0 --hash=sha256:cccc\n")
    assert main(["doctor", "--json", "--only", "lock", "--python", str(python), "--lock", str(lock)]) == 1
    doc = json.loads(capsys.readouterr().out)
    kept = doc["facts"]["lock"]
    assert kept["pins"]["torch"] == {"version": "2.10.0+cu128", "line": 1, "hashes": ["sha256:bbbb"]}
    again = [r.to_json() for r in run_checks(doc["facts"], ["lock"])]
    assert again == doc["checks"]
    assert load(lock).pins["numpy"].version == "2.0"


def test_sigterm_to_lock_bundle_stops_pip_and_exits_130(tmp_path: Path) -> None:
    """pip talks to an index that accepts and never answers; SIGTERM to nemolaunch must take pip with it."""
    lock = tmp_path / "stack.txt"
    lock.write_text("nemolaunch-test-absent==1.0 --hash=sha256:" + "a" * 64 + "\n")
    with socket.socket() as index:
        index.bind(("127.0.0.1", 0))
        index.listen(16)
        env = {
            **os.environ,
            "PIP_INDEX_URL": f"http://127.0.0.1:{index.getsockname()[1]}/simple",
            "PIP_FIND_LINKS": "",
            "PIP_NO_INDEX": "0",
            "PIP_RETRIES": "0",
            "PIP_TIMEOUT": "120",
        }
        argv = [sys.executable, "-m", "launcher", "lock", "bundle", str(lock), "--out", str(tmp_path / "wheels")]
        proc = subprocess.Popen(argv, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        try:
            deadline, pips = time.monotonic() + 60, []
            while time.monotonic() < deadline and not pips:
                pips = [p for p in psutil.Process(proc.pid).children(recursive=True) if "pip" in " ".join(p.cmdline())]
                time.sleep(0.2)
            assert pips, "pip never started"
            time.sleep(1.0)
            proc.send_signal(signal.SIGTERM)
            out, err = proc.communicate(timeout=30)
        finally:
            if proc.poll() is None:
                proc.kill()
    assert proc.returncode == 130, err
    assert err.splitlines() == ["", "interrupted"] and out == ""  # click ends the interrupted line first
    assert not [p for p in pips if p.is_running() and p.status() != psutil.STATUS_ZOMBIE]
    assert not (tmp_path / "wheels" / "INSTALL.txt").exists()
