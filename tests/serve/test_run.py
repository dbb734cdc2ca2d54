"""serve's launch loop with a stand-in process that fails the way vLLM does: the live log is diagnosed and
the one-line reason names the root error, the log is kept, nothing is left running."""

from __future__ import annotations

from pathlib import Path

import pytest

from launcher.errors import NemolaunchError
from launcher.serve.run import run
from tests.helpers import FIXTURES, free_port, serve_plan, stand_in_vllm

DYING_ENGINE = """
import sys, time
print("INFO 03-11 19:02:11 [gpu_worker.py:359] Available KV cache memory: 61.2 GiB", flush=True)
time.sleep(0.5)
print("(EngineCore_DP0 pid=97) ERROR [core.py:843] EngineCore failed to start.", flush=True)
print("(EngineCore_DP0 pid=97) ERROR [core.py:843] RuntimeError: bmm_fp8_internal_cublaslt failed: "
      "the library was not initialized", flush=True)
sys.exit(1)
"""


def test_dying_engine_is_diagnosed_live_and_the_log_kept(tmp_path: Path) -> None:
    said: list[str] = []
    log = tmp_path / "vllm.log"
    (tmp_path / "config.json").write_text("{}")
    with pytest.raises(NemolaunchError) as e:
        run(serve_plan(DYING_ENGINE, free_port()), str(tmp_path), log, said.append, None, ready_timeout_s=30)
    assert "exited with code 1" in e.value.message
    assert "FlashInfer's FP8 GEMM" in e.value.message
    assert "VLLM_DISABLED_KERNELS=FlashInferFP8ScaledMMLinearKernel" in e.value.message
    live = [m for m in said if m.startswith("nemolaunch: [error]")]
    assert live and "log line 4" in live[0] and 'disabled_kernels = ["FlashInferFP8ScaledMMLinearKernel"]' in live[0]
    assert "bmm_fp8_internal_cublaslt" in log.read_text()
    assert not _running("EngineCore failed to start")


def _running(marker: str) -> list[int]:
    """pids of this test's descendants whose command line holds `marker` (zombies excluded)."""
    import psutil

    found = []
    for p in psutil.Process().children(recursive=True):
        try:
            if p.status() != psutil.STATUS_ZOMBIE and marker in " ".join(p.cmdline()):
                found.append(p.pid)
        except psutil.Error:
            continue
    return found


def test_missing_model_path_is_bad_input(tmp_path: Path) -> None:
    from launcher.errors import BadInput

    with pytest.raises(BadInput, match="does not exist"):
        run(serve_plan("pass", free_port()), str(tmp_path / "no-model"), tmp_path / "l.log", print, None)


def test_a_dying_log_follower_says_so_in_one_line(tmp_path: Path) -> None:
    """The follower runs in a daemon thread: an exception there would end live diagnosis silently. Here the
    terminal echo breaks (a closed pipe) on the second line; the follower must stop with one line naming it."""
    import threading

    from launcher.serve.watch import LogWatch, follow

    log = tmp_path / "vllm.log"
    log.write_text("INFO starting\nINFO loading\nINFO more\n")
    said: list[str] = []
    echoed: list[str] = []

    def echo(text: str) -> None:
        if echoed:
            raise BrokenPipeError(32, "Broken pipe")
        echoed.append(text)

    watch = LogWatch(said.append, echo, None)
    stop = threading.Event()  # never set: only the failure can end the follower
    follower = threading.Thread(target=follow, args=(log, stop, watch.line, said.append), daemon=True)
    follower.start()
    follower.join(timeout=10)
    assert not follower.is_alive()
    assert said == ["nemolaunch: live log diagnosis stopped at log line 2: BrokenPipeError: [Errno 32] Broken pipe"]


def test_a_vanished_log_stops_the_follower_with_a_line(tmp_path: Path) -> None:
    import threading

    from launcher.serve.watch import follow

    said: list[str] = []
    follow(tmp_path / "gone.log", threading.Event(), lambda n, t: None, said.append)
    (line,) = said
    assert line.startswith("nemolaunch: live log diagnosis stopped at log line 0: FileNotFoundError")


def test_the_follower_numbers_lines_as_the_log_file_does(tmp_path: Path) -> None:
    """Progress bars end their updates with a carriage return; a line is still only what ends in a newline, so
    live findings name the same line numbers as `nemolaunch diagnose` and grep -n."""
    import threading

    from launcher.serve.watch import follow

    log = tmp_path / "vllm.log"
    log.write_bytes(b"Loading shards:   0%\rLoading shards: 100%\nRuntimeError: boom\n")
    seen: list[tuple[int, str]] = []
    stop = threading.Event()
    stop.set()  # drain the file, then return
    follow(log, stop, lambda n, t: seen.append((n, t)))
    assert seen == [(1, "Loading shards:   0%\rLoading shards: 100%"), (2, "RuntimeError: boom")]


def test_live_diagnosis_of_a_real_dead_server_names_the_root_line_and_stage() -> None:
    """The real CPU-engine log of a truncated checkpoint (tests/fixtures/logs), replayed through the follower."""
    import threading

    from launcher.serve.watch import LogWatch, follow

    watch = LogWatch(lambda text: None, None, None)
    stop = threading.Event()
    stop.set()
    follow(FIXTURES / "logs" / "cpu-vllm032-broken-weights-2026-12-01.log", stop, watch.line)
    reason = watch.root_cause()
    assert reason is not None
    assert reason.startswith("safetensors._safetensors_rust.SafetensorError: Error while deserializing header")
    assert "(log line 106, while loading weights)" in reason


def test_a_child_killed_while_serving_is_reported_as_its_death(tmp_path: Path) -> None:
    """The engine core's death (SIGKILL, the OOM killer's way) is the error, not the API server's later noise;
    afterwards nothing of the family is left running."""
    import os
    import signal
    import threading

    import psutil

    port = free_port()
    (tmp_path / "config.json").write_text("{}")
    log = tmp_path / "vllm.log"
    family: list[psutil.Process] = []
    names: list[str] = []

    def said(message: str) -> None:
        if message.startswith("serving"):

            def kill() -> None:
                leader = next(p for p in psutil.Process().children() if str(port) in " ".join(p.cmdline()))
                family.extend([leader, *leader.children(recursive=True)])
                names.append(family[1].name())
                os.kill(family[1].pid, signal.SIGKILL)

            threading.Thread(target=kill).start()

    with pytest.raises(NemolaunchError) as e:
        run(
            serve_plan(stand_in_vllm(port, engine_core=True), port),
            str(tmp_path),
            log,
            said,
            None,
            ready_timeout_s=60,
        )
    core = family[1]
    assert e.value.line() == (
        f"vLLM's {names[0]} (pid {core.pid}) died while serving; when the log says nothing, the kernel killed it: "
        f"the OOM killer does this (check dmesg); the whole log is in {log}"
    )
    assert e.value.code == 1
    assert not [p for p in family if p.is_running() and p.status() != psutil.STATUS_ZOMBIE]


def test_another_server_answering_the_port_is_never_reported_as_serving(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The race the port check cannot close (someone binds between the check and vLLM's start): the answers
    come from another process, so serve refuses instead of saying "serving"."""
    import os

    import psutil

    from launcher.serve import run as serve
    from tests.fake_server import serving

    port = free_port()
    (tmp_path / "config.json").write_text("{}")
    monkeypatch.setattr(serve, "check_can_launch", lambda plan, model: None)
    said: list[str] = []
    with serving(port), pytest.raises(NemolaunchError) as e:
        run(serve_plan("import time; time.sleep(600)", port), str(tmp_path), tmp_path / "l.log", said.append, None)
    assert e.value.line() == (
        f"port {port} is answered by another process (pid {os.getpid()}, {psutil.Process().name()}), not the vLLM "
        "nemolaunch started; stop that server or pick another --port"
    )
    assert not [m for m in said if m.startswith("serving")]
    assert not _running("time.sleep(600)")
