"""Usage and environment errors are found before any server starts (bench/preflight.py), through the real CLI:
one line, exit 2 or 3, no server started, no result folder left."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from launcher import engine
from launcher.cli.main import main
from tests.fake_engine import engine_processes
from tests.helpers import free_port


@pytest.mark.parametrize(
    ("case", "code", "line"),
    [
        (
            "no-interpreter",
            2,
            "engine interpreter /nonexistent/python (from --python) does not exist or is not executable; point it at "
            "the bin/python of the venv where vLLM is installed (`make engine` builds one in ENGINE_HOME)",
        ),
        (
            "no-vllm",
            3,
            f"vLLM is not installed in {sys.executable} (from --python); name the engine's interpreter with --python "
            "(make engine builds the CPU one)",
        ),
        ("no-model", 2, "model path MODEL-gone does not exist; give the folder with config.json and weights"),
        (
            "beyond-context",
            2,
            "prompt 2000 + output 100 tokens is beyond the context of 2048 tokens that profile cpu serves model with; "
            "give --input-len up to 1948, or a larger max_model_len",
        ),
    ],
)
def test_bench_profile_refuses_before_a_server_starts(
    case: str,
    code: int,
    line: str,
    fake_engine_python: Path,
    model: Path,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    python = {"no-interpreter": "/nonexistent/python", "no-vllm": sys.executable}.get(case, str(fake_engine_python))
    given = f"{model}-gone" if case == "no-model" else str(model)
    lens = ["--input-len", "2000", "--output-len", "100"] if case == "beyond-context" else []
    out = tmp_path / "r"
    argv = ["bench", "--profile", "cpu", "--model", given, "--python", python, "--port", str(free_port())]
    rc = main([*argv, "--concurrency", "1", *lens, "--out", str(out)])
    assert rc == code
    assert capsys.readouterr().err.splitlines() == [
        f"nemolaunch: {line.replace('MODEL', str(model)).replace('ENGINE_HOME', str(engine.ENGINE_HOME))}"
    ]
    assert not out.exists()
    assert engine_processes(fake_engine_python) == []
