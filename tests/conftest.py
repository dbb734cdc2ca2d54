"""Shared fixtures. The real vLLM CPU engine and the tiny model come from `make engine model`, which
exports NEMOLAUNCH_TEST_ENGINE (its interpreter) and NEMOLAUNCH_TEST_MODEL (the model folder). Plain helpers
live in tests/helpers.py."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.helpers import engine_paths, free_port


def pytest_xdist_auto_num_workers(config: pytest.Config) -> int:
    """Workers for pyproject's `-n auto`: three for the fast part (`-m "not engine"`), one more than CI's 2 cores as
    it mostly waits (ab's timed passes, server starts, real subprocesses: docs/explanation/dependencies.md); none
    for a run that may start the real vLLM CPU engine (two servers at once would share the 2 cores)."""
    return 3 if "not engine" in (config.option.markexpr or "") else 0


@pytest.fixture(scope="session")
def engine_python() -> Path:
    paths = engine_paths()
    if paths is None:
        if os.environ.get("CI"):
            pytest.fail("CI must run the real-engine tests: run through `make test`")
        pytest.skip("no engine: run through `make test` (it builds the vLLM CPU engine and the tiny model)")
    return paths[0]


@pytest.fixture(scope="session")
def tiny_model(engine_python: Path) -> Path:
    paths = engine_paths()
    assert paths is not None
    return paths[1].resolve()  # absolute: tests run nemolaunch from other folders


@pytest.fixture(scope="session")
def fake_engine_python(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """The stand-in engine (tests/fake_engine.py); whatever a failed test left of it is killed at the end."""
    from tests.fake_engine import engine_processes, fake_engine

    python = fake_engine(tmp_path_factory.mktemp("fake-engine"))
    yield python
    for p in engine_processes(python):
        p.kill()


@pytest.fixture
def model(tmp_path: Path) -> Path:
    """A model folder with a config (4096 tokens of context) and an empty weights file: enough for preflight and
    the stand-in engine."""
    folder = tmp_path / "model"
    folder.mkdir()
    (folder / "config.json").write_text('{"max_position_embeddings": 4096}')
    (folder / "model.safetensors").write_bytes(b"")
    return folder


@pytest.fixture
def port() -> Iterator[int]:
    yield free_port()


@pytest.fixture(autouse=True)
def _no_built_engine(monkeypatch: pytest.MonkeyPatch, tmp_path_factory: pytest.TempPathFactory) -> None:
    """Without --python, nemolaunch falls back to the engine `make engine` built (launcher/engine.py); tests must not
    depend on whether this machine has one: they see an empty engine folder (tests/test_engine.py fills one)."""
    from launcher import engine

    monkeypatch.setattr(engine, "ENGINE_HOME", tmp_path_factory.mktemp("no-engine"))


@pytest.fixture(autouse=True)
def _no_flashinfer_build(monkeypatch: pytest.MonkeyPatch) -> None:
    """probe.run starts FlashInfer's JIT build first on a GPU; tests that fake a GPU must not start a real one
    (tests/probe/test_flashinfer_build.py drives the build and the pool's waiting with fake builds)."""
    monkeypatch.setenv("NEMOLAUNCH_FLASHINFER_PREBUILD", "0")
