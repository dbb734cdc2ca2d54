"""Tensor parallelism 2 on the real vLLM CPU engine: two worker processes (one per core), the tiny model
(2 attention heads split one per rank, its one KV head replicated), a streamed completion through
`nemolaunch serve --smoke`, then nothing left running."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import psutil
import pytest

from tests.helpers import free_port

pytestmark = pytest.mark.engine

# The CPU backend binds each rank's OpenMP threads to its own cores. "auto" takes one NUMA node per rank and
# this machine has one, so the profile names the cores: rank 0 on CPU 0, rank 1 on CPU 1 (vLLM 0.32's
# vllm/utils/ompmultiprocessing.py).
TP2_PROFILE = """schema = 1
description = "the CPU engine at tensor parallel size 2"
[vllm]
tensor_parallel_size = 2
max_model_len = 1024
max_num_seqs = 4
[env]
VLLM_CPU_KVCACHE_SPACE = "1"
VLLM_CPU_OMP_THREADS_BIND = "0|1"
"""


def test_tp2_serves_a_streamed_completion_and_leaves_nothing(
    engine_python: Path, tiny_model: Path, tmp_path: Path
) -> None:
    config = json.loads((tiny_model / "config.json").read_text())
    assert config["num_attention_heads"] % 2 == 0 and 2 % config["num_key_value_heads"] == 0
    profile = tmp_path / "cpu-tp2.toml"
    profile.write_text(TP2_PROFILE)
    log = tmp_path / "vllm.log"
    mark = (
        f"tp2-{os.getpid()}-{free_port()}"  # every process of this run inherits it; a test run beside this one does not
    )
    argv = [sys.executable, "-m", "launcher", "serve", "--profile", str(profile), "--model", str(tiny_model)]
    argv += ["--python", str(engine_python), "--port", str(free_port()), "--smoke", "--quiet", "--log-file", str(log)]
    env = {**os.environ, "NEMOLAUNCH_TEST_MARK": mark}
    done = subprocess.run(argv, capture_output=True, text=True, timeout=600, env=env)
    assert done.returncode == 0, done.stderr[-2000:]
    assert "smoke test: one streamed completion of 16 tokens" in done.stderr
    text = log.read_text()
    assert "--tensor-parallel-size" in text or "tensor_parallel_size=2" in text
    assert "local_rank=0, core ids=[0]" in text and "local_rank=1, core ids=[1]" in text
    assert "Worker_TP1" in text or "rank=1 local_rank=1" in text
    left = [p for p in psutil.process_iter(["cmdline"]) if _marked(p, mark)]
    assert not left, f"processes left: {[(p.pid, p.info['cmdline']) for p in left]}"


@pytest.mark.parametrize("node_rank", [0, 1], ids=["head", "headless"])
@pytest.mark.parametrize(
    "vllm",
    [
        'tensor_parallel_size = 2\npipeline_parallel_size = 2\ndistributed_executor_backend = "mp"\n'
        "enable_expert_parallel = true\n",
        'data_parallel_size = 4\ndata_parallel_size_local = 2\ndata_parallel_backend = "mp"\nmax_num_seqs = 8\n',
    ],
    ids=["tp-pp", "dp"],
)
def test_multi_node_flags_are_known_to_the_installed_vllm(
    engine_python: Path, tmp_path: Path, vllm: str, node_rank: int
) -> None:
    """Every parallel and placement flag, per node, checked against the installed vLLM's own parser."""
    from launcher.serve.run import make_plan

    profile = tmp_path / "p.toml"
    profile.write_text(f'schema = 1\n[vllm]\n{vllm}[placement]\nnodes = ["10.0.0.1", "10.0.0.2"]\n')
    plan = make_plan(str(profile), "/m", engine_python, "127.0.0.1", 8000, None, node_rank)
    assert plan.verified and plan.rendered.env["VLLM_HOST_IP"] == f"10.0.0.{node_rank + 1}"
    assert ("--headless" in plan.argv) == bool(node_rank)


def _marked(p: psutil.Process, mark: str) -> bool:
    try:
        return p.environ().get("NEMOLAUNCH_TEST_MARK") == mark
    except (psutil.NoSuchProcess, psutil.AccessDenied, psutil.ZombieProcess):
        return False
