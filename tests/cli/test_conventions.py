"""The CLI's shared conventions, through the real entry point."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import click
import pytest

from launcher import __version__, engine
from launcher.cli.main import cli, main
from launcher.errors import EXIT_CODES_HELP
from tests.helpers import ROOT


def run(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "launcher", *args], capture_output=True, text=True, timeout=60)


def command_paths(group: click.Group = cli, prefix: tuple[str, ...] = ()) -> list[tuple[str, ...]]:
    """Every command and sub-command, read from the click group itself (so a new command is covered)."""
    paths: list[tuple[str, ...]] = []
    for name, command in sorted(group.commands.items()):
        paths.append((*prefix, name))
        if isinstance(command, click.Group):
            paths += command_paths(command, (*prefix, name))
    return paths


def test_help_lists_every_command_and_the_exit_codes() -> None:
    r = run("--help")
    assert r.returncode == 0
    lines = r.stdout.splitlines()
    start = lines.index("Commands:") + 1
    commands = lines[start : lines.index("", start)]
    assert [line.split()[0] for line in commands] == sorted(cli.commands)
    for line in EXIT_CODES_HELP.splitlines()[1:]:  # the first is click's no-rewrap marker
        assert f"  {line}" in lines


@pytest.mark.parametrize("path", command_paths(), ids=" ".join)
def test_every_command_says_what_it_does(path: tuple[str, ...], capsys: pytest.CaptureFixture[str]) -> None:
    assert main([*path, "--help"]) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[0].startswith(f"Usage: nemolaunch {' '.join(path)} ")
    assert out[2].strip(), f"{' '.join(path)} has no description"


HEAVY = ("torch", "vllm", "flashinfer", "transformers")


@pytest.mark.parametrize(
    "argv",
    [["--help"], ["doctor", "--no-cache"], ["doctor", "--json", "--no-cache"]],
    ids=["help", "doctor", "doctor-json"],
)
def test_never_imports_heavy_modules_in_process(argv: list[str], tmp_path: Path) -> None:
    """Stand-ins for torch, vllm, flashinfer and transformers record every process that imports them; doctor's
    children may (that is their job), nemolaunch's own process must not."""
    marks = tmp_path / "imports.txt"
    for name in HEAVY:
        pkg = tmp_path / "fake" / name
        pkg.mkdir(parents=True)
        (pkg / "__init__.py").write_text(
            f"import os\nopen({str(marks)!r}, 'a').write(f'{{os.getpid()}} {name}\\n')\n__version__ = '0'\n"
        )
        info = tmp_path / "fake" / f"{name}-0.dist-info"
        info.mkdir()
        (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {name}\nVersion: 0\n")
    code = f"import os; print(os.getpid()); from launcher.cli.main import main; main({argv!r})"
    env = {**os.environ, "PYTHONPATH": str(tmp_path / "fake")}
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300, env=env, cwd=ROOT)
    parent = r.stdout.splitlines()[0]
    imported = marks.read_text().splitlines() if marks.exists() else []
    assert not [line for line in imported if line.split()[0] == parent], imported
    if argv[0] == "doctor":
        assert any(line.endswith("torch") for line in imported)  # the stand-ins work: the import probe saw torch


def test_probe_needs_no_toml_writer() -> None:
    """probe runs where nemolaunch is a checkout on a GPU host's own Python (the H200 procedure); only writing a
    profile needs tomli_w, so probe's report and table import without it (2026-12-02 they did not)."""
    code = "import sys; sys.modules['tomli_w'] = None; import launcher.cli.probe, launcher.probe.run; print('ok')"
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, cwd=ROOT)
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip() == "ok"


@pytest.mark.parametrize(
    "argv, line",
    [
        (["frobnicate"], "Error: No such command 'frobnicate'."),
        (["doctor", "--frob"], "Error: No such option '--frob'."),
        (
            ["diagnose", "/nonexistent/vllm.log"],
            "Error: Invalid value for 'LOGFILE': File '/nonexistent/vllm.log' does not exist.",
        ),
        (
            ["bench", "--url", "http://127.0.0.1:9", "--concurrency", "1,x"],
            "Error: Invalid value for '--concurrency': '1,x' is not a comma-separated list of integers",
        ),
        (
            ["ab", "--model", "m", "--a", "cpu", "--b", "cpu", "--concurrency", "0,8"],
            "Error: Invalid value for '--concurrency': give positive integers, e.g. 1,2,4,8",
        ),
    ],
    ids=["unknown-command", "unknown-option", "missing-file", "not-a-list", "not-positive"],
)
def test_bad_usage_exits_2_with_one_clear_message(argv: list[str], line: str) -> None:
    r = run(*argv)
    assert r.returncode == 2
    assert r.stderr.splitlines()[-1] == line
    assert "Traceback" not in r.stderr


def test_engine_interpreter_that_does_not_exist_is_bad_input(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    rc = main(["model", "tiny", str(tmp_path / "m"), "--python", str(tmp_path / "nope" / "python")])
    err = capsys.readouterr().err
    assert rc == 2
    assert err == (
        f"nemolaunch: engine interpreter {tmp_path / 'nope' / 'python'} (from --python) does not exist or is not "
        f"executable; point it at the bin/python of the venv where vLLM is installed (`make engine` builds one in "
        f"{engine.ENGINE_HOME})\n"
    )


def test_python_dash_m_launcher_works() -> None:
    r = run("--version")
    assert r.returncode == 0 and r.stdout == f"nemolaunch, version {__version__}\n"


@pytest.mark.parametrize("command", [["ab", "--a", "cpu", "--b", "cpu"], ["tune"]], ids=["ab", "tune"])
def test_json_prints_the_schema_the_document_names(
    command: list[str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """ab.json and tune.json name their own schema; `--json` prints it, not the generic /1. The stage is replaced:
    what is tested is how the CLI prints the document the stage hands it."""
    from launcher.ab import run as ab_run
    from launcher.ab import tune as ab_tune
    from launcher.ab.document import AB_SCHEMA, TUNE_SCHEMA

    schema = AB_SCHEMA if command[0] == "ab" else TUNE_SCHEMA
    doc = {"schema": schema, "runs": 1}
    monkeypatch.setattr(ab_run, "run_ab", lambda *args, **kwargs: ab_run.AbOutcome(0, "done", doc))  # type: ignore[arg-type]
    monkeypatch.setattr(ab_tune, "run_tune", lambda *args, **kwargs: ab_tune.TuneOutcome(0, "done", doc))  # type: ignore[arg-type]
    assert main([*command, "--model", str(tmp_path), "--out", str(tmp_path / "o"), "--json"]) == 0
    assert capsys.readouterr().out == f'{{\n  "schema": "{schema}",\n  "runs": 1\n}}\n'
