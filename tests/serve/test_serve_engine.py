"""serve on the real vLLM CPU engine: an API key end to end, secrets kept out of everything nemolaunch writes
or prints, a second serve on the same port, and an engine core killed while serving."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path

import psutil
import pytest

from tests.helpers import free_port

pytestmark = pytest.mark.engine

KEY = "planted-key-4e9a77c1"
HF_TOKEN = "planted-hf-7d2e51b0"
URL_PW = "planted-url-pw-5b1c"
PWD = "planted-pwd-0a9f3e"
PLANTED = (KEY, HF_TOKEN, URL_PW, PWD)


def nemolaunch(*args: str) -> list[str]:
    return [sys.executable, "-m", "launcher", *args]


def planted_profile(folder: Path) -> Path:
    path = folder / "planted.toml"
    path.write_text(
        "schema = 1\n[vllm]\nmax_model_len = 2048\nmax_num_seqs = 8\n"
        f'[env]\nVLLM_CPU_KVCACHE_SPACE = "1"\nHF_TOKEN = "{HF_TOKEN}"\n'
        f'MIRROR_URL = "https://op:{URL_PW}@mirror.example/simple"\n'
    )
    return path


def everything_written(folder: Path) -> dict[Path, bytes]:
    return {p: p.read_bytes() for p in folder.rglob("*") if p.is_file() and not p.is_symlink()}


def test_planted_secrets_appear_in_nothing_nemolaunch_writes_or_prints(
    engine_python: Path, tiny_model: Path, tmp_path: Path
) -> None:
    """doctor, profile show, serve --dry-run and serve --smoke (with an API key the real engine demands)."""
    work = tmp_path / "work"
    work.mkdir()
    key_file = tmp_path / "key"
    key_file.write_text(KEY + "\n")
    prof = planted_profile(tmp_path)
    env = {
        **os.environ,
        "HF_ENDPOINT": f"https://op:{URL_PW}@hub.example",
        "NCCL_DB_PWD": PWD,
        "NEMOLAUNCH_PYTHON": str(engine_python),
    }
    env.pop("VLLM_API_KEY", None)
    serve = ["serve", "--profile", str(prof), "--model", str(tiny_model), "--api-key-file", str(key_file)]
    runs = [
        (nemolaunch("doctor"), None),
        (nemolaunch("doctor", "--json"), None),
        (nemolaunch("profile", "show", str(prof), "--vllm-version", "0.32.0"), 0),
        (nemolaunch("profile", "show", str(prof), "--json"), 0),
        (nemolaunch(*serve, "--dry-run"), 0),
        (nemolaunch(*serve, "--dry-run", "--json"), 0),
        (nemolaunch(*serve, "--port", str(free_port()), "--smoke"), 0),
    ]
    printed = []
    for argv, code in runs:
        r = subprocess.run(argv, cwd=work, env=env, capture_output=True, text=True, timeout=600)
        if code is not None:
            assert r.returncode == code, r.stderr
        printed.append((argv[3:], r.stdout + r.stderr))
    smoke = [line for line in printed[-1][1].splitlines() if line.startswith("smoke test:")]
    assert len(smoke) == 1 and re.fullmatch(
        r"smoke test: one streamed completion of 16 tokens in \d+\.\d\d s", smoke[0]
    )
    logs = list((work / "nemolaunch-logs").glob("serve-*.log"))
    assert len(logs) == 1 and logs[0].stat().st_size > 0
    for secret in PLANTED:
        leaks = [str(args) for args, text in printed if secret in text]
        leaks += [str(p) for p, data in everything_written(work).items() if secret.encode() in data]
        assert not leaks, f"{secret} leaked into {leaks}"


def test_bench_profile_writes_no_planted_secret(engine_python: Path, tiny_model: Path, tmp_path: Path) -> None:
    """bench's own redaction is bench's; this test greps what it wrote and printed for the planted values."""
    out = tmp_path / "run"
    argv = nemolaunch(
        "bench", "--profile", str(planted_profile(tmp_path)), "--model", str(tiny_model), "--python",
        str(engine_python), "--port", str(free_port()), "--concurrency", "1", "--num-prompts", "2",
        "--input-len", "16", "--output-len", "8", "--warmup", "0", "--out", str(out),
    )  # fmt: skip
    r = subprocess.run(argv, capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stderr
    leaks = [str(p) for p, data in everything_written(out).items() for s in PLANTED if s.encode() in data]
    assert not leaks and not [s for s in PLANTED if s in r.stdout + r.stderr], leaks


def wait_for(path: Path, needle: str, proc: subprocess.Popen[str], seconds: float) -> str:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline and proc.poll() is None:
        text = path.read_text()
        if needle in text:
            return text
        time.sleep(0.5)
    raise AssertionError(f"no {needle!r} within {seconds} s (exit {proc.poll()}): {path.read_text()}")


def test_key_demanded_port_taken_and_engine_core_killed(engine_python: Path, tiny_model: Path, tmp_path: Path) -> None:
    """One real server: without the key vLLM answers 401, with it 200; a second serve on the port is refused
    before it starts anything; SIGKILL of the engine core (the OOM killer's way) is reported as that death,
    exit 1, and nothing is left running."""
    port = free_port()
    key_file, log, err_path = tmp_path / "key", tmp_path / "serve.log", tmp_path / "stderr.txt"
    key_file.write_text(KEY + "\n")
    base = ["serve", "--profile", "cpu", "--model", str(tiny_model), "--python", str(engine_python)]
    env = {k: v for k, v in os.environ.items() if k != "VLLM_API_KEY"}
    argv = nemolaunch(*base, "--port", str(port), "--api-key-file", str(key_file), "--log-file", str(log), "--quiet")
    with err_path.open("w") as err_file:
        proc = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=err_file, text=True, env=env)
    family: list[psutil.Process] = []
    try:
        said = wait_for(err_path, "serving http", proc, 600).splitlines()
        family = psutil.Process(proc.pid).children(recursive=True)
        vllm = family[0]
        serving = next(line for line in said if line.startswith("serving"))
        assert re.fullmatch(
            rf"serving http://127\.0\.0\.1:{port} \(vLLM listens on 127\.0\.0\.1:{port}\) \(model \S+\) after \d+ s, "
            rf"profile cpu, log {re.escape(str(log))}",
            serving,
        ), serving
        url = f"http://127.0.0.1:{port}/v1/models"
        with pytest.raises(urllib.error.HTTPError) as refused:
            urllib.request.urlopen(url, timeout=10)
        assert refused.value.code == 401
        with urllib.request.urlopen(urllib.request.Request(url, headers={"Authorization": f"Bearer {KEY}"})) as ok:
            assert ok.status == 200

        second = subprocess.run(nemolaunch(*base, "--port", str(port)), capture_output=True, text=True, env=env)
        assert second.returncode == 2
        assert second.stderr.splitlines()[-1] == (
            f"nemolaunch: cannot bind 127.0.0.1:{port}: Address already in use (held by pid {vllm.pid}); "
            "pick another --port or stop what holds it"
        )
        assert len(psutil.Process(proc.pid).children(recursive=True)) == len(family)

        core = max(vllm.children(), key=lambda p: p.memory_info().rss)  # the engine core holds the model
        name = core.name()
        os.kill(core.pid, signal.SIGKILL)
        proc.wait(timeout=120)
    finally:
        if proc.poll() is None:
            proc.kill()
    err = err_path.read_text().splitlines()
    assert proc.returncode == 1, err
    assert err[-1].startswith(f"nemolaunch: vLLM's {name} (pid {core.pid}) died while serving"), err[-1]
    assert err[-1].endswith(
        "when the log says nothing, the kernel killed it: the OOM killer does this (check dmesg); "
        f"the whole log is in {log}"
    ), err[-1]
    assert not [p for p in family if p.is_running() and p.status() != psutil.STATUS_ZOMBIE]
    assert KEY not in "\n".join(err) and KEY.encode() not in log.read_bytes()
