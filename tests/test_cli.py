"""The CLI's shared conventions, through the real entry point."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from launcher.cli import main

SUBCOMMANDS = ["doctor", "probe", "profile", "serve", "bench", "compare", "diagnose", "lock"]


def run(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "launcher", *args], capture_output=True, text=True, timeout=60)


def test_help_lists_every_subcommand_and_the_exit_codes() -> None:
    r = run("--help")
    assert r.returncode == 0
    for name in SUBCOMMANDS:
        assert f"\n  {name} " in r.stdout, name
    for code in ("0 ", "1 ", "2 ", "3 ", "130"):
        assert f"  {code}" in r.stdout


@pytest.mark.parametrize("argv", [["--help"], ["doctor"], ["doctor", "--json"]], ids=["help", "doctor", "doctor-json"])
def test_never_imports_heavy_modules(argv: list[str]) -> None:
    code = (
        f"import sys; from launcher.cli import main; rc = main({argv!r}); "
        "heavy = sorted(m for m in ('torch', 'vllm', 'flashinfer', 'transformers', 'numpy') if m in sys.modules); "
        "print('HEAVY', heavy, file=sys.stderr)"
    )
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert "HEAVY []" in r.stderr, r.stderr


@pytest.mark.parametrize(
    "argv, needle",
    [
        (["frobnicate"], "No such command 'frobnicate'"),
        (["doctor", "--frob"], "No such option '--frob'"),
        (["diagnose", "/nonexistent/vllm.log"], "/nonexistent/vllm.log"),
    ],
    ids=["unknown-command", "unknown-option", "missing-file"],
)
def test_bad_usage_exits_2_with_one_clear_message(argv: list[str], needle: str) -> None:
    r = run(*argv)
    assert r.returncode == 2
    assert needle in r.stderr
    assert "Traceback" not in r.stderr


def test_engine_interpreter_that_does_not_exist_is_bad_input(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    rc = main(["model", "tiny", str(tmp_path / "m"), "--python", str(tmp_path / "nope" / "python")])
    err = capsys.readouterr().err
    assert rc == 2
    assert "nope/python" in err and "does not exist" in err
    assert len(err.strip().splitlines()) == 1


def test_python_dash_m_launcher_works() -> None:
    r = run("--version")
    assert r.returncode == 0 and "nemolaunch" in r.stdout
