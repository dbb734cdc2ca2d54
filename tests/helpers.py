"""Helpers the tests share: where the checkout and its fixtures are, a free loopback port, a real venv with
chosen dist-info folders, and the engine the Makefile built. Fixtures (pytest's) live in conftest.py."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
FIXTURES = ROOT / "tests" / "fixtures"


def engine_paths() -> tuple[Path, Path] | None:
    """The engine's interpreter and the tiny model from `make engine model` (NEMOLAUNCH_TEST_ENGINE/_MODEL)."""
    engine, model = os.environ.get("NEMOLAUNCH_TEST_ENGINE"), os.environ.get("NEMOLAUNCH_TEST_MODEL")
    if engine and model and Path(engine).is_file() and Path(model, "config.json").is_file():
        return Path(engine), Path(model)
    return None


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


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
