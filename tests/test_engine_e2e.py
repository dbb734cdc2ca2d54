"""End to end with the real vLLM CPU engine and the tiny model: a streamed completion over the OpenAI API."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import psutil
import pytest

from launcher.serve.process import Server
from tests.helpers import free_port

pytestmark = pytest.mark.engine


@pytest.fixture(scope="module")
def server(engine_python: Path, tiny_model: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    port = free_port()
    argv = [
        str(engine_python),
        "-m",
        "vllm.entrypoints.openai.api_server",
        "--model",
        str(tiny_model),
        "--host",
        "127.0.0.1",
        "--port",
        str(port),
        "--max-model-len",
        "2048",
    ]
    env = {**os.environ, "VLLM_CPU_KVCACHE_SPACE": "1"}
    srv = Server.start(argv, env, f"http://127.0.0.1:{port}", tmp_path_factory.mktemp("srv") / "vllm.log")
    try:
        srv.wait_ready(timeout_s=400)
        yield srv
    finally:
        srv.stop()


def test_streamed_completion(server: Server, tiny_model: Path) -> None:
    body = {
        "model": str(tiny_model),
        "prompt": "def main():",
        "max_tokens": 16,
        "stream": True,
        "ignore_eos": True,
        "stream_options": {"include_usage": True},
    }
    req = urllib.request.Request(
        f"{server.url}/v1/completions", data=json.dumps(body).encode(), headers={"Content-Type": "application/json"}
    )
    chunks, usage, done = [], None, False
    with urllib.request.urlopen(req, timeout=60) as resp:
        for raw in resp:
            line = raw.decode().strip()
            if not line.startswith("data: "):
                continue
            if line == "data: [DONE]":
                done = True
                break
            event = json.loads(line[6:])
            chunks += [c["text"] for c in event["choices"]]
            usage = event.get("usage") or usage
    assert done
    assert usage is not None and usage["completion_tokens"] == 16
    assert len([c for c in chunks if c]) >= 2  # streamed, not one blob


def test_bench_sends_exact_token_counts_to_the_real_engine(server: Server, tmp_path: Path) -> None:
    out = tmp_path / "bench"
    r = subprocess.run(
        [
            sys.executable,
            "-m",
            "launcher",
            "bench",
            "--url",
            server.url,
            "--concurrency",
            "1,2",
            "--input-len",
            "64",
            "--output-len",
            "16",
            "--num-prompts",
            "4",
            "--out",
            str(out),
        ],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert r.returncode == 0, r.stderr
    records = [json.loads(line) for line in (out / "requests.jsonl").read_text().splitlines()]
    assert len(records) == 8
    assert {(rec["prompt_tokens"], rec["completion_tokens"], rec["output_tokens"]) for rec in records} == {(64, 16, 16)}
    doc = json.loads((out / "summary.json").read_text())
    assert doc["provenance"]["server"]["version"] == "0.32.0"
    assert all(level["length_mismatched"] == 0 and level["failed"] == 0 for level in doc["levels"])


def serve_argv(engine_python: Path, tiny_model: Path, port: int) -> list[str]:
    return [
        sys.executable,
        "-m",
        "launcher",
        "serve",
        "--profile",
        "cpu",
        "--model",
        str(tiny_model),
        "--port",
        str(port),
        "--python",
        str(engine_python),
    ]


def test_serve_profile_cpu_then_sigterm_leaves_nothing_running(
    engine_python: Path, tiny_model: Path, tmp_path: Path
) -> None:
    """`nemolaunch serve --profile cpu` serves the real engine; SIGTERM stops vLLM and every child it
    started, and frees the port."""
    port = free_port()
    log = tmp_path / "serve.log"
    argv = [*serve_argv(engine_python, tiny_model, port), "--log-file", str(log), "--quiet"]
    err_path = tmp_path / "stderr.txt"
    with err_path.open("w") as err_file:
        proc = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=err_file, text=True)
    try:
        # wait until nemolaunch itself says it serves (not just until the port answers)
        deadline = time.monotonic() + 400
        while time.monotonic() < deadline and proc.poll() is None and "serving http" not in err_path.read_text():
            time.sleep(0.5)
        assert proc.poll() is None, err_path.read_text()
        family = psutil.Process(proc.pid).children(recursive=True)
        assert len(family) >= 2  # the API server and its engine core
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/v1/models", timeout=5):
            pass
        proc.send_signal(signal.SIGTERM)
        proc.wait(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
    err = err_path.read_text()
    assert proc.returncode == 130, err
    assert f"serving http://127.0.0.1:{port}" in err and "profile cpu" in err
    assert not [p for p in family if p.is_running() and p.status() != psutil.STATUS_ZOMBIE]
    listening = [c for c in psutil.net_connections("tcp") if c.laddr and c.laddr.port == port]
    assert not [c for c in listening if c.status == psutil.CONN_LISTEN]
    assert log.stat().st_size > 0


def test_serve_refuses_a_port_in_use(engine_python: Path, tiny_model: Path) -> None:
    with socket.socket() as held:
        held.bind(("127.0.0.1", 0))
        held.listen()
        port = held.getsockname()[1]
        r = subprocess.run(
            serve_argv(engine_python, tiny_model, port),
            capture_output=True,
            text=True,
            timeout=300,
        )
    assert r.returncode == 2
    assert r.stderr.splitlines()[-1] == (
        f"nemolaunch: cannot bind 127.0.0.1:{port}: Address already in use (held by pid {os.getpid()}); "
        "pick another --port or stop what holds it"
    )


def test_serve_refuses_a_missing_model(engine_python: Path, tmp_path: Path) -> None:
    missing = tmp_path / "no-model"
    r = subprocess.run(serve_argv(engine_python, missing, free_port()), capture_output=True, text=True, timeout=300)
    assert r.returncode == 2
    assert r.stderr == (
        f"nemolaunch: model path {missing} does not exist; give the folder with config.json and weights\n"
    )
