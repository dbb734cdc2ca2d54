"""serve's safety classes through the real entry point: the address vLLM binds, flags nemolaunch owns, API keys
(never echoed), the model folder checked first, log files never written through a symlink."""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import pytest

from launcher.cli.main import main
from launcher.output import create_exclusive
from launcher.serve.run import default_log_path

DRY = ["--model", "/m", "--vllm-version", "0.32.0"]
OPEN = (
    "warning: --host {what}: the server is reachable from every network this host is on, and it has no API key: "
    "anyone who reaches it can use it (give --api-key-file FILE or set VLLM_API_KEY, or bind 127.0.0.1)"
)


def profile(tmp_path: Path, text: str, name: str = "p.toml") -> Path:
    path = tmp_path / name
    path.write_text("schema = 1\n" + text)
    return path


@pytest.fixture(autouse=True)
def no_key_in_env(monkeypatch: pytest.MonkeyPatch) -> None:
    for var in ("VLLM_API_KEY", "NEMOLAUNCH_API_KEY", "NEMOLAUNCH_PYTHON"):
        monkeypatch.delenv(var, raising=False)


@pytest.mark.parametrize(
    "arg, flag",
    [("--host", "--host"), ("--host=0.0.0.0", "--host"), ("--port", "--port"), ("--model=/x", "--model")],
)
@pytest.mark.parametrize("command", ["serve", "profile show"])
def test_extra_args_may_not_set_flags_nemolaunch_owns(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], arg: str, flag: str, command: str
) -> None:
    path = profile(tmp_path, f'[vllm]\nextra_args = ["{arg}", "0.0.0.0"]\n')
    argv = ["serve", "--profile", str(path), *DRY] if command == "serve" else ["profile", "show", str(path)]
    assert main(argv) == 2
    out, err = capsys.readouterr()
    assert out == ""
    assert err == (
        f"nemolaunch: {path}: [vllm].extra_args sets {flag}, which nemolaunch owns; "
        f"remove it from the profile; give it to nemolaunch serve as {flag}\n"
    )


@pytest.mark.parametrize("host, what", [("", "(empty) = every IPv4 interface of this host"), ("0.0.0.0", None)])
def test_every_interface_is_warned_about_and_the_missing_key_named(
    capsys: pytest.CaptureFixture[str], host: str, what: str | None
) -> None:
    assert main(["serve", "--profile", "cpu", *DRY, "--host", host]) == 0
    out, err = capsys.readouterr()
    assert err == OPEN.format(what=what or "0.0.0.0 = every IPv4 interface of this host") + "\n"
    assert f"--host {host or chr(39) * 2} --port 8000" in out


def test_a_non_loopback_address_is_warned_about_and_a_key_silences_only_the_key_part(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    key = tmp_path / "key"
    key.write_text("planted-key-8c1f\n")
    assert main(["serve", "--profile", "cpu", *DRY, "--host", "10.1.2.3", "--api-key-file", str(key)]) == 0
    out, err = capsys.readouterr()
    assert err == ("warning: --host 10.1.2.3 is not a loopback address: the server is reachable from that network\n")
    assert "planted-key-8c1f" not in out + err
    assert out.startswith("VLLM_API_KEY='<redacted>' VLLM_CPU_KVCACHE_SPACE=1 ")


def test_loopback_gets_no_warning(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["serve", "--profile", "cpu", *DRY, "--host", "::1"]) == 0
    assert capsys.readouterr().err == ""


def test_dry_run_json_masks_every_key_source(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = profile(
        tmp_path,
        '[vllm]\nextra_args = ["--api-key", "sk-planted-in-argv-0001"]\n'
        '[env]\nHF_TOKEN = "planted-hf-token"\nMIRROR = "https://bob:planted-pw@mirror.example/simple"\n',
    )
    assert main(["serve", "--profile", str(path), *DRY, "--json"]) == 0
    out, err = capsys.readouterr()
    doc = json.loads(out)
    for planted in ("sk-planted-in-argv-0001", "planted-hf-token", "planted-pw"):
        assert planted not in out + err
    assert doc["access_control"] == {"bearer_required": True, "source": "the profile's extra_args"}
    assert doc["argv"][-2:] == ["--api-key", "<redacted>"]
    assert doc["env"] == {"HF_TOKEN": "<redacted>", "MIRROR": "https://bob:<redacted>@mirror.example/simple"}
    assert doc["binds"] == "127.0.0.1"


def test_an_unreadable_key_file_is_one_line(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    empty = tmp_path / "empty"
    empty.write_text("\n")
    assert main(["serve", "--profile", "cpu", *DRY, "--api-key-file", str(empty)]) == 2
    assert capsys.readouterr().err == (
        f"nemolaunch: the API key file {empty} is empty; give a file whose first line is the key\n"
    )
    assert main(["serve", "--profile", "cpu", *DRY, "--api-key-file", str(tmp_path / "none")]) == 2
    assert capsys.readouterr().err == (
        f"nemolaunch: cannot read the API key file {tmp_path / 'none'}: No such file or directory; "
        "give a file whose first line is the key\n"
    )


def test_a_model_folder_without_config_json_is_refused_before_anything_starts(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    (tmp_path / "weights-only").mkdir()
    (tmp_path / "weights-only" / "model.safetensors").write_bytes(b"\0" * 8)
    assert main(["serve", "--profile", "cpu", "--model", "weights-only"]) == 2
    assert capsys.readouterr().err == (
        "nemolaunch: model folder weights-only has no config.json; "
        "give the folder that holds the model's config.json and weights\n"
    )
    assert sorted(p.name for p in tmp_path.iterdir()) == ["weights-only"]  # no log, nothing started


def test_default_log_paths_are_created_exclusively_never_through_a_link(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    victim = tmp_path / "victim"
    victim.write_text("precious\n")
    first = default_log_path(now=1_800_000_000)
    first.unlink()
    first.symlink_to(victim)  # someone sharing the folder plants a link where the next log would go
    second = default_log_path(now=1_800_000_000)
    assert second == first.with_name(first.stem + "-2.log")
    assert second.is_file() and not second.is_symlink() and second.read_text() == ""
    assert victim.read_text() == "precious\n"
    assert create_exclusive(first) == first.with_name(first.stem + "-3.log")
    mask = os.umask(0o022)
    os.umask(mask)
    assert second.stat().st_mode & 0o777 == 0o666 & ~mask


def test_a_log_file_that_is_a_symlink_is_refused(
    engine_python: Path, tiny_model: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Needs only the engine's parser (cached): the refusal comes before vLLM would start."""
    from tests.helpers import free_port

    victim = tmp_path / "victim"
    victim.write_text("precious\n")
    link = tmp_path / "serve.log"
    link.symlink_to(victim)
    argv = ["serve", "--profile", "cpu", "--model", str(tiny_model), "--python", str(engine_python)]
    assert main([*argv, "--port", str(free_port()), "--log-file", str(link)]) == 2
    err = capsys.readouterr().err.splitlines()
    assert err[-1] == (
        f"nemolaunch: cannot write the log {link}: Too many levels of symbolic links "
        "(it is a symlink: nemolaunch does not write through one); give another --log-file"
    )
    assert victim.read_text() == "precious\n"


def test_profile_show_names_the_interpreter_and_masks_secrets(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = profile(
        tmp_path,
        'python = "/opt/vllm/bin/python"\n[vllm]\nextra_args = ["--api-key", "sk-planted-0123456789abcdef0123"]\n'
        '[env]\nHF_TOKEN = "planted-hf"\n',
    )
    assert main(["profile", "show", str(path), "--vllm-version", "0.32.0"]) == 0
    out = capsys.readouterr().out
    lines = out.splitlines()
    assert lines[2] == (
        "python: /opt/vllm/bin/python (serve and --dry-run run this interpreter unless --python or $NEMOLAUNCH_PYTHON)"
    )
    assert "for vLLM 0.32.0: --api-key <redacted>" in lines
    assert "  HF_TOKEN=<redacted>" in lines
    assert "planted" not in out
    assert main(["profile", "show", str(path), "--json"]) == 0
    shown = capsys.readouterr().out
    doc = json.loads(shown)
    assert doc["python"] == "/opt/vllm/bin/python" and doc["env"] == {"HF_TOKEN": "<redacted>"}
    assert "planted" not in shown


def test_running_a_profile_named_interpreter_is_said_first(
    engine_python: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = profile(tmp_path, f'python = "{engine_python}"\n[vllm]\nmax_model_len = 2048\n')
    assert main(["serve", "--profile", str(path), "--model", "/m", "--dry-run"]) == 0
    err = capsys.readouterr().err
    assert err.splitlines()[0] == (
        f"note: running {engine_python}, the interpreter profile p names ({path}), not this one ({sys.executable})"
    )


@pytest.mark.parametrize(
    "setting, line",
    [
        ("max_num_seqs = -5", "[vllm].max_num_seqs must be a positive integer, not -5"),
        ("max_model_len = 0", "[vllm].max_model_len must be a positive integer, not 0"),
        ("tensor_parallel_size = 0", "[vllm].tensor_parallel_size must be 1 or more, not 0"),
        ("gpu_memory_utilization = nan", "[vllm].gpu_memory_utilization must be in (0, 1], not nan"),
        ("gpu_memory_utilization = -inf", "[vllm].gpu_memory_utilization must be in (0, 1], not -inf"),
    ],
)
@pytest.mark.parametrize("command", ["serve", "profile show"])
def test_absurd_settings_are_refused_with_file_and_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], setting: str, line: str, command: str
) -> None:
    path = profile(tmp_path, f"[vllm]\n{setting}\n")
    argv = ["serve", "--profile", str(path), *DRY] if command == "serve" else ["profile", "show", str(path)]
    assert main(argv) == 2
    assert capsys.readouterr().err == (
        f"nemolaunch: {path}:3: {line}; fix the profile (nemolaunch profile show cpu prints an example)\n"
    )


@pytest.mark.parametrize(
    "planted",
    [["--host", "0.0.0.0"], ["--api-key", "sk-shape-0123456789abcdefghij"], ["--trust-remote-code", "true"]],
    ids=["host", "api-key", "trust-remote-code"],
)
def test_a_shared_shape_folder_cannot_set_what_nemolaunch_owns(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], planted: list[str]
) -> None:
    """A shape folder is data meant to be shared: its serve_args may say how to load the model, nothing else (the
    trust pass's case 113: `--host 0.0.0.0` from a copied folder was appended with no warning)."""
    shape = tmp_path / "shape"
    shape.mkdir()
    (shape / "config.json").write_text("{}")
    marker = {"schema": "nemolaunch.shape/1", "serve_args": ["--load-format", "dummy", *planted]}
    (shape / "nemolaunch-shape.json").write_text(json.dumps(marker))
    rc = main(["serve", "--profile", "cpu", "--model", str(shape), "--vllm-version", "0.32.0"])
    out, err = capsys.readouterr()
    assert rc == 2 and out == ""
    assert err.splitlines() == [
        f"nemolaunch: {shape}/nemolaunch-shape.json: serve_args sets {planted[0]}, which a model shape may not set (it "
        "may set only --load-format, --quantization, --hf-overrides, --dtype, --kv-cache-dtype, --max-model-len); "
        "write the folder again with `nemolaunch model shape`; give serve's own options for the rest"
    ]


def test_a_busy_port_is_one_line_and_leaves_no_empty_log(
    fake_engine_python: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    import socket

    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    model = tmp_path / "m"
    model.mkdir()
    (model / "config.json").write_text("{}")
    (model / "model.safetensors").write_bytes(b"")
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        port = busy.getsockname()[1]
        argv = ["serve", "--profile", "cpu", "--model", str(model), "--python", str(fake_engine_python)]
        rc = main([*argv, "--port", str(port)])
    assert rc == 2
    assert capsys.readouterr().err.splitlines()[-1] == (
        f"nemolaunch: cannot bind 127.0.0.1:{port}: Address already in use (held by pid {os.getpid()}); pick another "
        "--port or stop what holds it"
    )
    assert not (tmp_path / "nemolaunch-logs").exists()


def test_a_corrupt_parser_cache_is_read_again_not_an_internal_error(
    fake_engine_python: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    (tmp_path / "m").mkdir()
    (tmp_path / "m" / "config.json").write_text("{}")
    (tmp_path / "m" / "model.safetensors").write_bytes(b"")
    argv = ["serve", "--profile", "cpu", "--model", str(tmp_path / "m"), "--python", str(fake_engine_python)]
    assert main([*argv, "--dry-run"]) == 0
    caches = list((tmp_path / "cache" / "nemolaunch" / "surface").glob("*.json"))
    assert len(caches) == 1
    for text in ("{not json", '{"version": "0.32.0", "options": 7}'):
        caches[0].write_text(text)
        assert main([*argv, "--dry-run"]) == 0
        assert json.loads(caches[0].read_text())["version"] == "0.32.0"
    assert "internal error" not in capsys.readouterr().err


def test_bench_profile_serves_on_a_free_port_when_8000_is_taken(
    fake_engine_python: Path,
    model: Path,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # bench --profile's server is private to the run: two runs side by side (or a server of the operator's on
    # 8000) must not make it a usage error (2026-12-03: two `make test` runs collided on 8000)
    import socket

    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    small = ["--concurrency", "1", "--num-prompts", "2", "--input-len", "8", "--output-len", "4"]
    with socket.socket() as held:
        try:  # 8000 is taken either way: held here, or by someone else already
            held.bind(("127.0.0.1", 8000))
            held.listen()
        except OSError:
            pass
        argv = ["bench", "--profile", "cpu", "--model", str(model), "--python", str(fake_engine_python), *small]
        rc = main([*argv, "--out", str(tmp_path / "run")])
    assert rc == 0, capsys.readouterr().err
    server = json.loads((tmp_path / "run" / "summary.json").read_text())["provenance"]["server"]
    assert server["url"].startswith("http://127.0.0.1:") and not server["url"].endswith(":8000")
