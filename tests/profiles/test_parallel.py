"""Parallelism as profile intent: sizes, executors and [placement], rendered per node and per vLLM version."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from launcher.cli.main import main
from launcher.profiles.flags import render
from launcher.profiles.profile import load_profile

TWO_NODE_TP_PP = """schema = 1
[vllm]
tensor_parallel_size = 8
pipeline_parallel_size = 2
[placement]
nodes = ["10.0.0.1", "10.0.0.2"]
port = 29501
"""
TWO_NODE_DP = """schema = 1
[vllm]
data_parallel_size = 4
data_parallel_size_local = 2
max_num_seqs = 128
[placement]
nodes = ["10.0.0.1", "10.0.0.2"]
port = 13345
"""
RAY = """schema = 1
[vllm]
tensor_parallel_size = 8
pipeline_parallel_size = 2
distributed_executor_backend = "ray"
[placement]
nodes = ["10.0.0.1", "10.0.0.2"]
"""


def write(tmp_path: Path, text: str, name: str = "p") -> Path:
    path = tmp_path / f"{name}.toml"
    path.write_text(text)
    return path


def test_tp_pp_across_two_nodes_renders_each_nodes_part(tmp_path: Path) -> None:
    profile = load_profile(str(write(tmp_path, TWO_NODE_TP_PP)))
    head, worker = render(profile, "0.26.0", 0), render(profile, "0.26.0", 1)
    common = ["--tensor-parallel-size", "8", "--pipeline-parallel-size", "2", "--nnodes", "2"]
    assert head.args == [*common, "--node-rank", "0", "--master-addr", "10.0.0.1", "--master-port", "29501"]
    assert worker.args == [
        *common,
        "--node-rank",
        "1",
        "--master-addr",
        "10.0.0.1",
        "--master-port",
        "29501",
        "--headless",
    ]
    assert (head.env["VLLM_HOST_IP"], worker.env["VLLM_HOST_IP"]) == ("10.0.0.1", "10.0.0.2")
    assert not head.headless and worker.headless


def test_data_parallel_across_nodes_starts_each_nodes_ranks(tmp_path: Path) -> None:
    profile = load_profile(str(write(tmp_path, TWO_NODE_DP)))
    head, worker = render(profile, "0.32.0", 0), render(profile, "0.32.0", 1)
    dp = ["--data-parallel-size", "4", "--data-parallel-size-local", "2"]
    rpc = ["--data-parallel-address", "10.0.0.1", "--data-parallel-rpc-port", "13345"]
    assert head.args == [*dp, "--max-num-seqs", "128", *rpc]
    assert worker.args == [*dp, "--max-num-seqs", "128", *rpc, "--data-parallel-start-rank", "2", "--headless"]
    assert "max_num_seqs = 128 is per data-parallel rank: 4 ranks admit up to 512 sequences" in head.notes


def test_ray_executor_runs_vllm_on_the_head_only(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = write(tmp_path, RAY)
    assert "--distributed-executor-backend" in render(load_profile(str(path)), "0.26.0", 0).args
    argv = ["serve", "--profile", str(path), "--model", str(tmp_path), "--vllm-version", "0.26.0", "--node-rank", "1"]
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert "only the head (node 0) runs vLLM" in err
    assert "VLLM_HOST_IP=10.0.0.2 ray start --address 10.0.0.1:6379 --block" in err


def test_headless_node_uses_vllm_serve_entry(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = write(tmp_path, TWO_NODE_TP_PP)
    common = ["serve", "--profile", str(path), "--model", "/models/m", "--vllm-version", "0.26.0", "--json"]
    assert main([*common, "--node-rank", "1"]) == 0
    worker = json.loads(capsys.readouterr().out)
    assert worker["argv"][1:4] == ["-m", "vllm.entrypoints.cli.main", "serve"]
    assert worker["env"]["VLLM_HOST_IP"] == "10.0.0.2"
    assert main([*common, "--node-rank", "0"]) == 0
    head = json.loads(capsys.readouterr().out)
    assert head["argv"][1:3] == ["-m", "vllm.entrypoints.openai.api_server"]


def test_before_mp_multinode_a_replica_across_nodes_needs_ray(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    argv = ["serve", "--profile", str(write(tmp_path, TWO_NODE_TP_PP)), "--model", "m", "--vllm-version", "0.10.0"]
    assert main(argv) == 2
    assert 'distributed_executor_backend = "ray"' in capsys.readouterr().err


@pytest.mark.parametrize(
    ("text", "needle"),
    [
        ("[vllm]\npipeline_parallel_size = 0\n", "p.toml:3: [vllm].pipeline_parallel_size must be 1 or more"),
        ('[vllm]\ndistributed_executor_backend = "slurm"\n', "must be one of mp, ray, not 'slurm'"),
        ("[vllm]\ndata_parallel_size = 4\ndata_parallel_size_local = 3\n", "(3) must divide data_parallel_size (4)"),
        ('[placement]\nnodes = ["10.0.0.1"]\n', "must list two or more node addresses"),
        ('[placement]\nnodes = ["a", "a"]\n', "names a node twice"),
        ('[placement]\nnodes = ["a", "b"]\nport = 70000\n', "[placement].port must be a port"),
        ('[placement]\nnodes = ["a", "b"]\nrack = 1\n', "unknown key [placement].rack"),
        ('[vllm]\ndata_parallel_size = 4\n[placement]\nnodes = ["a", "b"]\n', "needs [vllm].data_parallel_size_local"),
        (
            '[vllm]\ndata_parallel_size = 4\ndata_parallel_size_local = 1\n[placement]\nnodes = ["a", "b"]\n',
            "1 x 2 nodes is not data_parallel_size 4",
        ),
    ],
    ids=["pp-zero", "backend", "dp-local", "one-node", "twice", "port", "unknown-key", "dp-no-local", "dp-mismatch"],
)
def test_bad_parallel_profiles_are_one_line_exit_2(
    tmp_path: Path, text: str, needle: str, capsys: pytest.CaptureFixture[str]
) -> None:
    path = write(tmp_path, "schema = 1\n" + text)
    assert main(["serve", "--profile", str(path), "--model", "m", "--vllm-version", "0.26.0"]) == 2
    err = capsys.readouterr().err
    assert needle in err and len(err.strip().splitlines()) <= 2


@pytest.mark.parametrize("rank", [2, 5])
def test_node_rank_outside_the_placement(tmp_path: Path, rank: int, capsys: pytest.CaptureFixture[str]) -> None:
    argv = ["serve", "--profile", str(write(tmp_path, TWO_NODE_TP_PP)), "--model", "m", "--vllm-version", "0.26.0"]
    assert main([*argv, "--node-rank", str(rank)]) == 2
    assert f"--node-rank {rank} is not a node of this profile (2 nodes: 0..1)" in capsys.readouterr().err


def test_node_rank_without_placement(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["serve", "--profile", "cpu", "--model", "m", "--vllm-version", "0.32.0", "--node-rank", "1"]) == 2
    assert "--node-rank 1 needs a profile with [placement].nodes" in capsys.readouterr().err


@pytest.mark.parametrize("rank", [0, 1], ids=["head", "headless"])
def test_serve_passes_the_users_nccl_settings_to_vllm(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, rank: int
) -> None:
    """serve adds to the environment, never strips: NCCL_NVLS_ENABLE=0 and friends reach vLLM and its workers."""
    from launcher.serve import run as serve

    seen: dict[str, str] = {}

    class Stop(Exception):
        pass

    def fake_start(argv: list[str], env: dict[str, str], url: str, log: Path, *rest: object) -> None:
        seen.update(env)
        raise Stop

    monkeypatch.setattr(serve.Server, "start", staticmethod(fake_start))
    for key in ("NCCL_NVLS_ENABLE", "TORCH_SYMM_MEM_DISABLE_MULTICAST", "NVSHMEM_DISABLE_NVLS"):
        monkeypatch.setenv(key, "0" if key.startswith("NCCL") else "1")
    (tmp_path / "config.json").write_text("{}")  # serve checks the model folder before it starts anything
    (tmp_path / "model.safetensors").write_bytes(b"")
    plan = serve.make_plan(str(write(tmp_path, TWO_NODE_TP_PP)), str(tmp_path), None, "127.0.0.1", 0, "0.26.0", rank)
    with pytest.raises(Stop):
        serve.run(plan, str(tmp_path), tmp_path / "log", say=lambda m: None, echo_log=None)
    assert (seen["NCCL_NVLS_ENABLE"], seen["TORCH_SYMM_MEM_DISABLE_MULTICAST"], seen["NVSHMEM_DISABLE_NVLS"]) == (
        "0",
        "1",
        "1",
    )
    assert seen["VLLM_HOST_IP"] == f"10.0.0.{rank + 1}"
