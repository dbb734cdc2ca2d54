"""Nothing a command starts outlives it: `nemolaunch serve` through the real CLI with the stand-in engine
(tests/fake_engine.py: an API server and an engine-core grandchild), ended by SIGTERM, SIGHUP (a closed terminal)
or SIGKILL (the OOM killer's way, when no handler runs). The processes left are counted with psutil."""

from __future__ import annotations

import dataclasses
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import psutil
import pytest

from launcher.bench import BenchConfig, run
from launcher.serve import lifetime
from tests.fake_engine import engine_processes
from tests.fake_server import serving
from tests.helpers import ROOT, free_port


@pytest.fixture
def engine(fake_engine_python: Path) -> Path:
    return fake_engine_python


def nemolaunch(tmp_path: Path, *args: str) -> subprocess.Popen[str]:
    """The real CLI in a child, its stderr piped."""
    model = tmp_path / "model"
    model.mkdir(exist_ok=True)
    (model / "config.json").write_text("{}")
    (model / "model.safetensors").write_bytes(b"")
    env = {**os.environ, "PYTHONPATH": str(ROOT), "XDG_CACHE_HOME": str(tmp_path / "cache")}
    argv = [sys.executable, "-m", "launcher", *(a.replace("MODEL", str(model)) for a in args)]
    return subprocess.Popen(argv, cwd=tmp_path, env=env, stderr=subprocess.PIPE, text=True)


def start_serve(engine: Path, tmp_path: Path) -> tuple[subprocess.Popen[str], Path]:
    log = tmp_path / "serve.log"
    args = ["serve", "--profile", "cpu", "--model", "MODEL", "--python", str(engine), "--port", str(free_port())]
    return nemolaunch(tmp_path, *args, "--log-file", str(log), "--quiet"), log


def wait_line(proc: subprocess.Popen[str], prefix: str = "serving ") -> list[str]:
    """stderr's lines up to the first that starts with `prefix`: the command's own line is the signal waited on."""
    assert proc.stderr is not None
    lines = []
    for line in proc.stderr:
        lines.append(line.rstrip("\n"))
        if line.startswith(prefix):
            return lines
    raise AssertionError(f"the command ended before saying {prefix!r}: {lines}")


def wait_gone(engine: Path, seconds: float = 30.0) -> list[psutil.Process]:
    """The stand-in's processes still alive once they had `seconds` to go (the watchdog's grace is 10 s)."""
    deadline = time.monotonic() + seconds
    while (left := engine_processes(engine)) and time.monotonic() < deadline:
        time.sleep(0.1)
    return left


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGHUP], ids=["sigterm", "sighup"])
def test_serve_ended_by_a_signal_stops_its_server_and_says_so(engine: Path, tmp_path: Path, sig: int) -> None:
    proc, log = start_serve(engine, tmp_path)
    try:
        said = wait_line(proc)
        assert f"starting vLLM 0.32.0, profile cpu (log {log})" in said  # a line before the silent start
        assert len(engine_processes(engine)) == 2  # the API server and its engine core
        proc.send_signal(sig)
        _, err = proc.communicate(timeout=60)
    finally:
        proc.kill()
    assert proc.returncode == 130
    # click answers KeyboardInterrupt with an empty line before the boundary's "interrupted"
    said = [line for line in err.splitlines() if line]
    assert said[-2:] == [f"stopped vLLM (exit 0); log kept in {log}", "interrupted"]
    assert wait_gone(engine, 0) == []


def test_serve_killed_outright_leaves_no_server(engine: Path, tmp_path: Path) -> None:
    """SIGKILL runs no handler: the kernel (PR_SET_PDEATHSIG) stops the API server and the watchdog its group,
    where the engine-core grandchild lives."""
    proc, _ = start_serve(engine, tmp_path)
    try:
        wait_line(proc)
        core = [p for p in engine_processes(engine) if "fake-engine-core" in p.cmdline()]
        assert len(core) == 1
        proc.kill()
        proc.wait(timeout=10)
    finally:
        proc.kill()
    assert wait_gone(engine) == []


def test_a_server_stopped_cleanly_leaves_no_watchdog(engine: Path, tmp_path: Path) -> None:
    proc, _ = start_serve(engine, tmp_path)
    try:
        wait_line(proc)
        watchdogs = [p for p in psutil.process_iter(["cmdline"]) if "watchdog.py" in " ".join(p.info["cmdline"] or [])]
        mine = [w for w in watchdogs if w.ppid() == proc.pid]
        assert len(mine) == 1
        proc.send_signal(signal.SIGTERM)
        proc.communicate(timeout=60)
    finally:
        proc.kill()
    assert not mine[0].is_running() or mine[0].status() == psutil.STATUS_ZOMBIE


def test_ab_ended_between_passes_stops_both_servers(engine: Path, tmp_path: Path) -> None:
    """ab's SIGTERM after its first round (where bench's sweep used to leave SIG_DFL behind: exit 143, two servers
    left): exit 130, both servers stopped, ab.json says interrupted."""
    args = ["ab", "--model", "MODEL", "--a", "cpu", "--b", "cpu", "--set-b", "max_num_seqs=2", "--concurrency", "2"]
    args += [
        "--rounds",
        "20",
        "--input-len",
        "16",
        "--output-len",
        "8",
        "--num-prompts",
        "2",
        "--warmup-passes",
        "0",
        "--window",
        "1",
    ]
    proc = nemolaunch(tmp_path, *args, "--python", str(engine), "--out", str(tmp_path / "ab"))
    try:
        wait_line(proc, "round 1:")
        assert len(engine_processes(engine)) == 4  # two API servers, two engine cores
        proc.send_signal(signal.SIGTERM)
        _, err = proc.communicate(timeout=60)
    finally:
        proc.kill()
    assert proc.returncode == 130, err
    assert wait_gone(engine, 0) == []
    assert json.loads((tmp_path / "ab" / "ab.json").read_text())["status"] == "interrupted"


def test_a_sweep_puts_back_the_handlers_it_found(tmp_path: Path) -> None:
    """asyncio's remove_signal_handler leaves SIG_DFL: after a sweep inside ab's guard, a SIGTERM would kill the
    process outright instead of stopping its servers."""
    config = BenchConfig(url="", concurrency=(1,), input_len=8, output_len=4, num_prompts=2, warmup=0)
    with lifetime.interrupts(), serving(free_port()) as url:
        run(dataclasses.replace(config, url=url), tmp_path / "r", None, lambda _: None)
        found = {sig: signal.getsignal(sig) for sig in lifetime.SIGNALS}
    assert found == {signal.SIGTERM: lifetime._raise_once, signal.SIGHUP: lifetime._raise_once}


@pytest.mark.engine
def test_real_vllm_dies_with_a_killed_serve(engine_python: Path, tiny_model: Path, tmp_path: Path) -> None:
    """The real CPU engine: an API server and its engine core (a grandchild, in the server's process group). After
    SIGKILL of nemolaunch, none of its processes is left once the watchdog's grace has passed."""
    log = tmp_path / "serve.log"
    args = ["serve", "--profile", "cpu", "--model", str(tiny_model), "--python", str(engine_python)]
    proc = nemolaunch(tmp_path, *args, "--port", str(free_port()), "--log-file", str(log), "--quiet")
    try:
        wait_line(proc)
        family = [p for p in psutil.Process(proc.pid).children(recursive=True) if "watchdog.py" not in p.cmdline()]
        assert len(family) >= 2, family  # the API server and the engine core at least
        proc.kill()
        proc.wait(timeout=10)
    finally:
        proc.kill()
    _, alive = psutil.wait_procs(family, timeout=30)
    assert alive == []
