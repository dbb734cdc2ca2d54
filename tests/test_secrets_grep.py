"""No planted secret reaches anything bench, serve or model shape write or print, through the real CLI: a profile's
[env] key and an --api-key in its extra_args, a URL password, an --api-key-file, and a token in the environment.
Every file under the run's folder and everything on stdout and stderr is searched (ab and tune write through the
same path: launcher/output.py)."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest

from launcher.cli.main import main
from tests.fake_server import serving
from tests.helpers import free_port

PLANTED = {
    "env": "sk-planted-profile-env-0123456789",
    "argv": "sk-planted-extra-args-0123456789",
    "url": "planted-url-pass-77",
    "file": "planted-key-file-0001",
    "environ": "hf_plantedEnvironToken0123456789ab",
}


@pytest.fixture
def nemolaunch(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capfd: pytest.CaptureFixture[str]
) -> Callable[..., str]:
    """The CLI's entry point (launcher.cli.main, what `python -m launcher` runs) in this process, from tmp_path/work,
    with a token in the environment: what it and its children wrote to stdout and stderr (captured at the file
    descriptors), once it exited 0."""
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    monkeypatch.setenv("HF_TOKEN", PLANTED["environ"])
    (tmp_path / "work").mkdir(exist_ok=True)
    monkeypatch.chdir(tmp_path / "work")

    def run(*args: str) -> str:
        capfd.readouterr()
        code = main(list(args))
        out, err = capfd.readouterr()
        assert code == 0, err
        return out + err

    return run


def leaks(folder: Path, printed: str) -> list[str]:
    found = [f"printed: {name}" for name, value in PLANTED.items() if value in printed]
    for path in folder.rglob("*"):
        if path.is_file() and path.parent.name != "inputs":
            data = path.read_bytes()
            found += [f"{path}: {name}" for name, value in PLANTED.items() if value.encode() in data]
    return found


@pytest.fixture
def inputs(tmp_path: Path) -> dict[str, Path]:
    folder = tmp_path / "inputs"
    folder.mkdir()
    profile = folder / "keyed.toml"
    profile.write_text(
        'schema = 1\n[vllm]\nmax_model_len = 2048\nextra_args = ["--api-key", "' + PLANTED["argv"] + '"]\n'
        '[env]\nVLLM_CPU_KVCACHE_SPACE = "1"\nVLLM_API_KEY = "' + PLANTED["env"] + '"\n'
    )
    (folder / "key").write_text(PLANTED["file"] + "\n")
    model = folder / "model"
    model.mkdir()
    (model / "config.json").write_text('{"max_position_embeddings": 4096}')
    (model / "model.safetensors").write_bytes(b"")
    return {"profile": profile, "key": folder / "key", "model": model}


def test_bench_and_serve_write_and_print_no_secret(
    tmp_path: Path, inputs: dict[str, Path], fake_engine_python: Path, nemolaunch: Callable[..., str]
) -> None:
    small = ["--concurrency", "1", "--num-prompts", "2", "--input-len", "8", "--output-len", "4", "--json"]
    printed = ""
    with serving(free_port()) as url:
        credentials = url.replace("http://", f"http://user:{PLANTED['url']}@")
        printed += nemolaunch("bench", "--url", credentials, *small, "--out", "../url")
        printed += nemolaunch("bench", "--url", url, "--api-key-file", str(inputs["key"]), *small, "--out", "../key")
    served = ["--profile", str(inputs["profile"]), "--model", str(inputs["model"]), "--python", str(fake_engine_python)]
    printed += nemolaunch("bench", *served, *small, "--out", "../profile")
    printed += nemolaunch("serve", *served, "--port", str(free_port()), "--smoke", "--log-file", "../s.log")
    printed += nemolaunch("serve", *served, "--dry-run", "--json")
    assert (tmp_path / "profile" / "server.log").is_file() and (tmp_path / "url" / "summary.json").is_file()
    assert leaks(tmp_path, printed) == []


@pytest.mark.engine
def test_model_shape_writes_and_prints_no_secret(
    tmp_path: Path, inputs: dict[str, Path], engine_python: Path, nemolaunch: Callable[..., str]
) -> None:
    printed = nemolaunch("model", "shape", "llama-3-8b", "../shape", "--python", str(engine_python))
    assert (tmp_path / "shape" / "config.json").is_file()
    assert leaks(tmp_path, printed) == []
