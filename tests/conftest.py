"""Shared fixtures. The real vLLM CPU engine and the tiny model come from `make engine model`, which
exports NEMOLAUNCH_TEST_ENGINE (its interpreter) and NEMOLAUNCH_TEST_MODEL (the model folder)."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest


def _engine_paths() -> tuple[Path, Path] | None:
    engine, model = os.environ.get("NEMOLAUNCH_TEST_ENGINE"), os.environ.get("NEMOLAUNCH_TEST_MODEL")
    if engine and model and Path(engine).is_file() and Path(model, "config.json").is_file():
        return Path(engine), Path(model)
    return None


@pytest.fixture(scope="session")
def engine_python() -> Path:
    paths = _engine_paths()
    if paths is None:
        if os.environ.get("CI"):
            pytest.fail("CI must run the real-engine tests: run through `make test`")
        pytest.skip("no engine: run through `make test` (it builds the vLLM CPU engine and the tiny model)")
    return paths[0]


@pytest.fixture(scope="session")
def tiny_model(engine_python: Path) -> Path:
    paths = _engine_paths()
    assert paths is not None
    return paths[1].resolve()  # absolute: tests run nemolaunch from other folders


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.fixture
def port() -> Iterator[int]:
    yield free_port()


def make_env(tmp_path: Path, dists: dict[str, str], files: dict[str, str] | None = None) -> Path:
    """A real venv (no pip) whose site-packages holds real dist-info folders and, optionally, package files."""
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True)
    site = next((venv / "lib").glob("python3*/site-packages"))
    for name, version in dists.items():
        info = site / f"{name.replace('-', '_')}-{version}.dist-info"
        info.mkdir()
        (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n")
    for rel, text in (files or {}).items():
        (site / rel).parent.mkdir(parents=True, exist_ok=True)
        (site / rel).write_text(text)
    return venv / "bin" / "python"


@pytest.fixture(autouse=True)
def _no_flashinfer_build(monkeypatch: pytest.MonkeyPatch) -> None:
    """probe.run starts FlashInfer's JIT build first on a GPU; tests that fake a GPU must not start a real one
    (tests/test_probe_build.py drives the build and the pool's waiting with fake builds)."""
    monkeypatch.setenv("NEMOLAUNCH_FLASHINFER_PREBUILD", "0")
