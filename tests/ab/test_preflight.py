"""ab and tune run bench's preflight for every configuration before any server starts (launcher/ab/servers.py
ServerPool.preflight): a prompt plus output beyond a side's context, a missing engine or model is one line on stderr
and exit 2 or 3 through the real CLI, no server is started and nothing is written into --out (a new folder is not
created; an existing one is left as it was, without even the run lock). The engine is the stand-in
(tests/fake_engine.py): nothing here starts one, so any of its processes left would be a server started."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import psutil
import pytest

from launcher.cli.main import main
from tests.fake_engine import engine_processes

BEYOND = (
    "prompt 4000 + output 256 tokens is beyond the context of 2048 tokens that profile cpu serves model with; "
    "give --input-len up to 1792, or a larger max_model_len"
)
SIDE_B = (
    "configuration B (cpu + max_model_len=1024): prompt 1000 + output 100 tokens is beyond the context of 1024 "
    "tokens that profile cpu serves model with; give --input-len up to 924, or a larger max_model_len"
)


@pytest.fixture
def nemolaunch(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capfd: pytest.CaptureFixture[str]
) -> Callable[..., subprocess.CompletedProcess[str]]:
    """The CLI's entry point (launcher.cli.main, what `python -m launcher` runs) in this process, from tmp_path: its
    exit code and what it and its children wrote to stdout and stderr (captured at the file descriptors)."""
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    monkeypatch.delenv("NEMOLAUNCH_PYTHON", raising=False)
    monkeypatch.chdir(tmp_path)

    def run(*args: str) -> subprocess.CompletedProcess[str]:
        capfd.readouterr()
        code = main(list(args))
        out, err = capfd.readouterr()
        return subprocess.CompletedProcess(["nemolaunch", *args], code, out, err)

    return run


def left_behind(tmp_path: Path, engine: Path) -> list[str]:
    """Every process still alive that this test's run could have started: the stand-in engine's, or any whose
    command line names this test's folder."""
    mine = [p for p in psutil.process_iter(["cmdline"]) if str(tmp_path) in " ".join(p.info["cmdline"] or [])]
    return [" ".join(p.cmdline()) for p in {*engine_processes(engine), *mine} if p.is_running()]


ARGS = {
    "ab-beyond-context": (["ab", "--a", "cpu", "--b", "cpu", "--input-len", "4000", "--output-len", "256"], 2, BEYOND),
    "tune-beyond-context": (["tune", "--base", "cpu", "--input-len", "4000", "--output-len", "256"], 2, BEYOND),
    "ab-one-side-beyond-its-context": (
        ["ab", "--a", "cpu", "--b", "cpu", "--set-b", "max_model_len=1024", "--input-len", "1000", "--output-len=100"],
        2,
        SIDE_B,
    ),
    "ab-no-vllm": (
        ["ab", "--a", "cpu", "--b", "cpu", "--python", sys.executable],
        3,
        f"vLLM is not installed in {sys.executable} (from --python); name the engine's interpreter with --python "
        "(make engine builds the CPU one)",
    ),
    "tune-no-model": (
        ["tune", "--model", "MODEL-gone"],
        2,
        "model path MODEL-gone does not exist; give the folder with config.json and weights",
    ),
}


@pytest.mark.parametrize("existing_out", [False, True], ids=["new-out", "existing-out"])
@pytest.mark.parametrize("case", list(ARGS))
def test_usage_errors_stop_ab_and_tune_before_any_server(
    case: str,
    existing_out: bool,
    fake_engine_python: Path,
    model: Path,
    tmp_path: Path,
    nemolaunch: Callable[..., subprocess.CompletedProcess[str]],
) -> None:
    args, code, line = ARGS[case]
    out = tmp_path / "out"
    if existing_out:
        out.mkdir()
        (out / "notes.txt").write_text("mine")
    given = ["--python", str(fake_engine_python)] if "--python" not in args else []
    if "--model" not in args:
        given += ["--model", str(model)]
    argv = [a.replace("MODEL", str(model)) for a in args]
    done = nemolaunch(*argv, *given, "--concurrency", "1", "--out", str(out))
    assert done.returncode == code, done.stderr
    assert done.stderr.splitlines() == [f"nemolaunch: {line.replace('MODEL', str(model))}"]
    assert done.stdout == ""
    if existing_out:
        assert sorted(p.name for p in out.iterdir()) == ["notes.txt"]
    else:
        assert not out.exists()
    assert left_behind(tmp_path, fake_engine_python) == []
