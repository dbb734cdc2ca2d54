"""The engine `make engine` built is found without --python when this interpreter has no vLLM, and said in one line
(launcher/engine.py). A stand-in engine (tests/fake_engine.py) sits where the Makefile puts the real one."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import pytest

from launcher import engine
from launcher.cli.main import main
from launcher.paths import data_dir


def test_serve_and_doctor_without_python_use_the_engine_make_built_and_say_so(
    fake_engine_python: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    monkeypatch.delenv("NEMOLAUNCH_PYTHON", raising=False)
    digest = hashlib.sha256((data_dir("lockfiles") / "cpu.txt").read_bytes()).hexdigest()[:12]
    built = engine.ENGINE_HOME / f"engine-{digest}"
    built.symlink_to(fake_engine_python.parent.parent)  # the Makefile's ENGINE_DIR
    (built / ".complete").touch()
    model = tmp_path / "m"
    model.mkdir()
    (model / "config.json").write_text("{}")
    (model / "model.safetensors").write_bytes(b"")
    assert main(["serve", "--profile", "cpu", "--model", str(model), "--dry-run", "--json"]) == 0
    python = built / "bin" / "python"
    assert json.loads(capsys.readouterr().out)["argv"][0] == str(python)
    assert main(["doctor", "--only", "stack", "--model", str(model)]) in (0, 1)
    said = capsys.readouterr().out.splitlines()
    assert said[0] == (
        f"engine Python: {python} (from the engine `make engine` built; vLLM is not installed in nemolaunch's own "
        "Python)"
    )


def test_serve_without_python_names_the_engine_once(
    fake_engine_python: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """The newcomer's `serve --smoke` (benchmarks/newcomer.sh, 2026-12-03) said the built engine on three lines in a
    row: serve's own `engine:` line, the log's header (echoed with vLLM's log), then the starting line. Now the
    starting line says it, once."""
    from tests.helpers import free_port

    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    monkeypatch.delenv("NEMOLAUNCH_PYTHON", raising=False)
    digest = hashlib.sha256((data_dir("lockfiles") / "cpu.txt").read_bytes()).hexdigest()[:12]
    built = engine.ENGINE_HOME / f"engine-{digest}"
    built.symlink_to(fake_engine_python.parent.parent)
    (built / ".complete").touch()
    model = tmp_path / "m"
    model.mkdir()
    (model / "config.json").write_text("{}")
    (model / "model.safetensors").write_bytes(b"")
    log = tmp_path / "serve.log"
    argv = ["serve", "--profile", "cpu", "--model", str(model), "--port", str(free_port()), "--smoke"]
    assert main([*argv, "--log-file", str(log)]) == 0
    python = built / "bin" / "python"
    naming = [line for line in capsys.readouterr().err.splitlines() if str(python) in line]
    assert naming == [
        f"starting vLLM 0.32.0 with {python} (from the engine `make engine` built; vLLM is not installed in "
        f"nemolaunch's own Python), profile cpu (log {log})"
    ]


def test_without_a_built_engine_this_interpreter_is_the_default() -> None:
    interpreter = engine.resolve_python()
    assert interpreter.source == "this interpreter"
