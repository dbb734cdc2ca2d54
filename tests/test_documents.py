"""The JSON documents between stages (launcher.documents): real output of every writer validates, and corrupt
input to profile write and compare is one line naming the file and the field, exit 2, nothing written."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from launcher.cli.main import main
from launcher.documents import validate_bench, validate_doctor, validate_probe
from tests.fake_server import serving
from tests.helpers import FIXTURES, free_port, make_env

FIX = FIXTURES
PROBE = FIX / "probe" / "h200-vllm026-2026-11-30.json"
DOCTOR = FIX / "doctor" / "h200-vllm026-2026-11-30.json"
BENCH = FIX / "bench" / "h200-graphs"


@pytest.mark.parametrize("path", sorted((FIX / "probe").glob("*.json")), ids=lambda p: p.name)
def test_real_probe_captures_validate(path: Path) -> None:
    validate_probe(json.loads(path.read_text()), path)


@pytest.mark.parametrize("path", sorted((FIX / "doctor").glob("*.json")), ids=lambda p: p.name)
def test_real_doctor_captures_validate(path: Path) -> None:
    validate_doctor(json.loads(path.read_text()), path)


def test_doctor_json_written_here_validates(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    python = make_env(tmp_path, {"vllm": "0.32.0"})
    main(["doctor", "--json", "--python", str(python)])
    validate_doctor(json.loads(capsys.readouterr().out), tmp_path / "doctor.json")


def test_probe_json_written_here_validates(engine_python: Path, tmp_path: Path) -> None:
    r = subprocess.run(
        [sys.executable, "-m", "launcher", "probe", "--json", "--python", str(engine_python)],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert r.returncode in (0, 3), r.stderr
    doc = validate_probe(json.loads(r.stdout), tmp_path / "probe.json")
    assert doc["kernels"]


def test_bench_summary_written_by_bench_validates(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    validate_bench(json.loads((BENCH / "summary.json").read_text()), BENCH / "summary.json")
    out = tmp_path / "run"
    with serving(free_port()) as url:
        args = ["--concurrency", "1", "--input-len", "8", "--output-len", "4", "--num-prompts", "2", "--warmup", "0"]
        assert main(["bench", "--url", url, *args, "--out", str(out), "--json"]) == 0
    capsys.readouterr()
    validate_bench(json.loads((out / "summary.json").read_text()), out / "summary.json")


def planted(tmp_path: Path, source: Path, edit: Any, name: str = "evidence.json") -> Path:
    doc = json.loads(source.read_text())
    edit(doc)
    path = tmp_path / name
    path.write_text(json.dumps(doc))  # json writes NaN and Infinity, as a buggy writer would
    return path


def first_ok(doc: dict[str, Any]) -> dict[str, Any]:
    return next(k for k in doc["kernels"] if k["status"] == "ok")


def _set_us(value: float) -> Any:
    return lambda d: first_ok(d)["shapes"][0].__setitem__("us", value)


CORRUPT_PROBE = [
    (_set_us(float("nan")), "kernels[1].shapes[0].us must be a finite number >= 0, not nan"),
    (_set_us(float("inf")), "kernels[1].shapes[0].us must be a finite number >= 0, not inf"),
    (_set_us(-3.0), "kernels[1].shapes[0].us must be a finite number >= 0, not -3.0"),
    (
        lambda d: first_ok(d)["shapes"][0].__setitem__("relative", 0),
        "kernels[1].shapes[0].relative must be a finite number > 0, not 0",
    ),
    (lambda d: first_ok(d)["shapes"][0].pop("m"), "kernels[1].shapes[0].m is missing"),
    (lambda d: d.__setitem__("kernels", {"a": 1}), 'kernels must be a list, not {"a": 1}'),
    (
        lambda d: first_ok(d).__setitem__("position", "first"),
        'kernels[1].position must be an integer >= 0, not "first"',
    ),
    (lambda d: d["recommended"].__setitem__("fp8_dense", 7), "recommended.fp8_dense must be a string or null, not 7"),
]


@pytest.mark.parametrize("edit, field", CORRUPT_PROBE, ids=[f for _, f in CORRUPT_PROBE])
def test_profile_write_refuses_corrupt_probe_evidence_in_one_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], edit: Any, field: str
) -> None:
    path = planted(tmp_path, PROBE, edit)
    out = tmp_path / "x.toml"
    assert main(["profile", "write", "--name", "x", "--from", str(path), "--out", str(out)]) == 2
    assert capsys.readouterr().err == (
        f"nemolaunch: {path}: {field}; give the --json output of nemolaunch probe, unedited\n"
    )
    assert not out.exists()


def test_profile_write_refuses_corrupt_doctor_evidence_and_non_json(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = planted(tmp_path, DOCTOR, lambda d: d["facts"]["nvml"]["gpus"][0].__setitem__("memory_total_mib", -1))
    assert main(["profile", "write", "--name", "x", "--from", str(path), "--out", str(tmp_path / "x.toml")]) == 2
    assert capsys.readouterr().err == (
        f"nemolaunch: {path}: facts.nvml.gpus[0].memory_total_mib must be an integer >= 1, not -1; "
        "give the --json output of nemolaunch doctor, unedited\n"
    )
    broken = tmp_path / "cut.json"
    broken.write_text(PROBE.read_text()[:300])
    assert main(["profile", "write", "--name", "x", "--from", str(broken), "--out", str(tmp_path / "x.toml")]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"nemolaunch: {broken}: not JSON (") and err.count("\n") == 1
    assert sorted(p.name for p in tmp_path.iterdir()) == ["cut.json", "evidence.json"]


def test_profile_write_keeps_an_existing_profile_unless_forced(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "mine.toml"
    out.write_text("# hand-tuned\n")
    argv = ["profile", "write", "--name", "mine", "--from", str(PROBE), "--from", str(DOCTOR), "--out", str(out)]
    assert main(argv) == 2
    assert capsys.readouterr().err == (
        f"nemolaunch: {out} already exists; pass --force to overwrite it, or give another --out\n"
    )
    assert out.read_text() == "# hand-tuned\n"
    assert main([*argv, "--force"]) == 0
    capsys.readouterr()
    assert "[why]" in out.read_text()
    mask = os.umask(0o022)
    os.umask(mask)
    assert out.stat().st_mode & 0o777 == 0o666 & ~mask


@pytest.mark.parametrize("name", ["../escape", "a/b", "..", ".hidden", "x..y", ""])
def test_profile_write_names_that_would_leave_their_folder_are_refused(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch, name: str
) -> None:
    monkeypatch.chdir(tmp_path)
    assert main(["profile", "write", "--name", name, "--from", str(PROBE)]) == 2
    assert capsys.readouterr().err == (
        f"nemolaunch: profile name {name!r} is not a plain name; use letters, digits, '.', '_' and '-' "
        "(no '/' or '..'); give --out for another folder\n"
    )
    assert list(tmp_path.iterdir()) == [] and not (tmp_path.parent / "escape.toml").exists()


def test_a_written_profile_with_quotes_and_a_base_env_round_trips(tmp_path: Path) -> None:
    base = tmp_path / "base.toml"
    base.write_text('schema = 1\npython = "/opt/v \\"x\\"/bin/python"\n[env]\nA = "say \\"hi\\"\\n"\n')
    out = tmp_path / "w.toml"
    assert main(["profile", "write", "--name", "w", "--from", str(PROBE), "--base", str(base), "--out", str(out)]) == 0
    from launcher.profiles.profile import load_profile

    prof = load_profile(str(out))
    assert prof.python == '/opt/v "x"/bin/python' and prof.env == {"A": 'say "hi"\n'}


def summary_run(tmp_path: Path, edit: Any, name: str) -> Path:
    folder = tmp_path / name
    folder.mkdir()
    planted(folder, BENCH / "summary.json", edit, "summary.json")
    return folder


CORRUPT_SUMMARY = [
    (
        lambda d: d["levels"][0].__setitem__("output_throughput_tok_s", None),
        "levels[0].output_throughput_tok_s must be a finite number >= 0, not null",
    ),
    (
        lambda d: d["levels"][1]["ttft_ms"].__setitem__("mean", float("nan")),
        "levels[1].ttft_ms.mean must be a finite number >= 0, not nan",
    ),
    (lambda d: d["levels"][0].__setitem__("concurrency", 0), "levels[0].concurrency must be an integer >= 1, not 0"),
    (lambda d: d.pop("workload"), "workload is missing"),
    (lambda d: d["levels"][2].pop("tpot_ms"), "levels[2].tpot_ms is missing"),
]


@pytest.mark.parametrize("edit, field", CORRUPT_SUMMARY, ids=[f for _, f in CORRUPT_SUMMARY])
def test_compare_refuses_a_corrupt_summary_in_one_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], edit: Any, field: str
) -> None:
    bad = summary_run(tmp_path, edit, "bad")
    report = tmp_path / "report"
    assert main(["compare", str(BENCH), str(bad), "--out", str(report)]) == 2
    assert capsys.readouterr().err == (
        f"nemolaunch: {bad / 'summary.json'}: {field}; give a folder written by nemolaunch bench (its summary.json "
        "unedited)\n"
    )
    assert not report.exists()
