"""Profiles as data, their validation, and their rendering per vLLM version."""

from __future__ import annotations

from pathlib import Path

import pytest

from launcher.cli.main import main
from launcher.errors import BadInput
from launcher.profiles.flags import EngineSurface, render, verify
from launcher.profiles.profile import list_profiles, load_profile, parse_profile, profiles_dir


def test_shipped_profiles_load() -> None:
    names = {p.name for p in list_profiles()}
    assert {"cpu", "sm90", "sm120"} <= names


def test_every_shipped_setting_has_its_why() -> None:
    for prof in list_profiles():
        assert set(prof.settings) <= set(prof.why), prof.name


SEED_FLAGS_0_16 = [
    "--gpu-memory-utilization",
    "0.85",
    "--kv-cache-dtype",
    "fp8",
    "--attention-backend",
    "TRITON_ATTN",
    "--max-num-seqs",
    "256",
    "--async-scheduling",
    "--enable-chunked-prefill",
    "--trust-remote-code",
]


def test_sm120_renders_the_seed_stack_for_0_16() -> None:
    r = render(load_profile("sm120"), "0.16.1rc1.dev206+g097eb544e")
    assert r.args == SEED_FLAGS_0_16
    assert r.env == {
        "VLLM_USE_FLASHINFER_MOE_FP4": "0",
        "VLLM_DISABLED_KERNELS": "FlashInferFP8ScaledMMLinearKernel",
        "VLLM_SLEEP_WHEN_IDLE": "1",
    }
    assert "--enforce-eager" not in r.args


def test_sm120_renders_0_33_syntax() -> None:
    r = render(load_profile("sm120"), "0.33.0")
    assert r.args[r.args.index("--moe-backend") + 1] == "marlin"
    assert "VLLM_USE_FLASHINFER_MOE_FP4" not in r.env and "VLLM_SLEEP_WHEN_IDLE" not in r.env
    assert r.env["VLLM_DISABLED_KERNELS"] == "FlashInferFP8ScaledMMLinearKernel"
    assert any("VLLM_SLEEP_WHEN_IDLE" in n for n in r.notes)


def test_graphs_off_renders_enforce_eager(tmp_path: Path) -> None:
    prof = parse_profile("schema = 1\n[vllm]\ncuda_graphs = false\n", tmp_path / "p.toml")
    assert render(prof, "0.33.0").args == ["--enforce-eager"]


def test_verify_refuses_what_the_installed_vllm_does_not_know() -> None:
    r = render(load_profile("sm120"), "0.16.1")
    surface = EngineSurface(
        "0.33.0", frozenset([*SEED_FLAGS_0_16[::2], "--moe-backend"]), frozenset({"VLLM_DISABLED_KERNELS"})
    )
    with pytest.raises(BadInput, match="VLLM_USE_FLASHINFER_MOE_FP4"):
        verify(r, surface)


@pytest.mark.parametrize(
    "text, needle",
    [
        ("schema = 1\n[vllm]\nmax_num_seqs = 256\ngpu_memory_utilisation = 0.85\n", "p.toml:4: unknown setting"),
        ('schema = 1\n[vllm]\nmax_num_seqs = "many"\n', "p.toml:3: [vllm].max_num_seqs must be an integer"),
        ("schema = 1\n[vllm]\ncuda_graphs = 1\n", "p.toml:3: [vllm].cuda_graphs must be true/false"),
        ("schema = 1\n[vllm]\ngpu_memory_utilization = 1.5\n", "must be in (0, 1]"),
        ("schema = 2\n", "p.toml:1: schema must be 1"),
        ("schema = 1\nflags = []\n", "p.toml:2: unknown key 'flags'"),
        ("schema = 1\n[vllm\n", "not valid TOML"),
    ],
    ids=["unknown-setting", "wrong-type", "bool-not-int", "out-of-range", "schema", "unknown-top", "syntax"],
)
def test_malformed_profiles_name_file_key_and_line(tmp_path: Path, text: str, needle: str) -> None:
    path = tmp_path / "p.toml"
    path.write_text(text)
    with pytest.raises(BadInput) as e:
        load_profile(str(path))
    assert needle in e.value.message


@pytest.mark.parametrize(
    "argv, needle",
    [
        (
            ["serve", "--profile", "sm999", "--model", "m", "--dry-run", "--vllm-version", "0.33.0"],
            f"no profile named 'sm999'; pick one of: {', '.join(p.stem for p in sorted(profiles_dir().glob('*.toml')))}"
            ", or give a path",
        ),
        (
            ["serve", "--profile", "sm120", "--model", "m", "--vllm-version", "zero"],
            "'zero' is not a vLLM version; write it like 0.33.0 or 0.16.1",
        ),
        (
            ["profile", "show", "/nonexistent/p.toml"],
            "profile file /nonexistent/p.toml does not exist; give the path of a .toml profile",
        ),
    ],
    ids=["unknown-profile", "bad-version", "missing-file"],
)
def test_serve_bad_input_is_one_line_exit_2(argv: list[str], needle: str, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(argv) == 2
    assert capsys.readouterr().err == f"nemolaunch: {needle}\n"


def test_dry_run_json_contract(capsys: pytest.CaptureFixture[str]) -> None:
    import json

    assert main(["serve", "--profile", "sm120", "--model", "/m", "--vllm-version", "0.33.0", "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["schema"] == "nemolaunch.serve/1"
    assert {"argv", "env", "vllm_version"} <= set(doc)
    assert doc["argv"][1:3] == ["-m", "vllm.entrypoints.launchers.api_server.entry"]  # 0.32 moved it there


def test_serve_warns_about_eager_mode_and_open_binding(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "eager.toml"
    path.write_text("schema = 1\n[vllm]\ncuda_graphs = false\n")
    assert (
        main(["serve", "--profile", str(path), "--model", "/m", "--vllm-version", "0.33.0", "--host", "0.0.0.0"]) == 0
    )
    err = capsys.readouterr().err
    assert "--enforce-eager" in err and "3.6x" in err
    assert err.splitlines()[1] == (
        "warning: --host 0.0.0.0 = every IPv4 interface of this host: the server is reachable from every network "
        "this host is on, and it has no API key: anyone who reaches it can use it (give --api-key-file FILE or set "
        "VLLM_API_KEY, or bind 127.0.0.1)"
    )


def test_verify_reads_flag_equals_value(tmp_path: Path) -> None:
    prof = parse_profile(
        'schema = 1\n[vllm]\nextra_args = ["--load-format=dummy", "--frobnicate=1"]\n', tmp_path / "p.toml"
    )
    surface = EngineSurface("0.33.0", frozenset({"--load-format"}), frozenset())
    with pytest.raises(BadInput, match="does not know --frobnicate=1"):
        verify(render(prof, "0.33.0"), surface)
