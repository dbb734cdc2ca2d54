"""doctor's multi-GPU checks (topology, shm, nccl, ib, parallel): each verdict once on constructed facts, and
on the real single-H200 capture (tests/fixtures/doctor/h200-vllm026-2026-11-30.json)."""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

import pytest

from checks import infiniband, nccl, parallel, run_checks, shm, topology
from checks.facts import infiniband_facts, shm_facts
from launcher.cli.main import main
from tests.helpers import FIXTURES

H200 = json.loads((FIXTURES / "doctor" / "h200-vllm026-2026-11-30.json").read_text())


def gpu(index: int, name: str = "NVIDIA H200", bus: str | None = None) -> dict[str, Any]:
    return {
        "index": index,
        "name": name,
        "pci_bus_id": bus or f"00000000:{index + 1:02X}:00.0",
        "capability": [9, 0],
        "memory_total_mib": 143771,
    }


def link(a: int, b: int, ancestor: str = "SYS", p2p: str = "ok", nvlinks: int = 0) -> dict[str, Any]:
    return {"a": a, "b": b, "ancestor": ancestor, "p2p_read": p2p, "p2p_write": p2p, "nvlinks": nvlinks}


def facts(gpus: list[dict[str, Any]], links: list[dict[str, Any]] | None = None, **extra: Any) -> dict[str, Any]:
    nvml = {"ok": True, "driver": "580.159.04", "cuda_driver": "13.0", "gpus": gpus}
    if links is not None:
        nvml["links"] = links
    return {"nvml": nvml, "env": {}, **extra}


def statuses(results: list[Any]) -> dict[str, str]:
    return {r.id: r.status for r in results}


def test_h200_capture() -> None:
    """One real H200, recorded before these checks existed: what it can say, it says; the rest is skipped."""
    results = {r.id: r for r in run_checks(H200["facts"])}
    assert results["topology"].status == "skip" and "one GPU" in results["topology"].observed
    assert results["shm"].status == "skip" and results["ib"].status == "skip"
    assert results["nccl"].status == "pass" and "nvidia-nccl-cu13 2.28.9" in results["nccl"].observed
    assert results["parallel"].status == "skip"


def test_h200_capture_with_a_tp2_profile_has_too_few_gpus() -> None:
    doc = copy.deepcopy(H200["facts"])
    doc["parallel"] = {"tensor_parallel_size": 2, "pipeline_parallel_size": 1, "data_parallel_size": 1, "nodes": 1}
    doc["model"] = {"num_attention_heads": 32, "num_key_value_heads": 8, "num_hidden_layers": 32}
    results = statuses(parallel.check(doc))
    assert results == {"parallel.tp": "pass", "parallel.pp": "pass", "parallel.gpus": "fail"}


@pytest.mark.parametrize(
    ("gpus", "links", "expected"),
    [
        ([gpu(0), gpu(1)], [link(0, 1, nvlinks=18)], {"topology.models": "pass", "topology.0-1": "pass"}),
        ([gpu(0), gpu(1)], [link(0, 1, "PIX")], {"topology.models": "pass", "topology.0-1": "pass"}),
        ([gpu(0), gpu(1)], [link(0, 1, "SYS")], {"topology.models": "pass", "topology.0-1": "warn"}),
        ([gpu(0), gpu(1)], [link(0, 1, "PHB", "disabled")], {"topology.models": "pass", "topology.0-1": "warn"}),
        ([gpu(0), gpu(1, "NVIDIA H100")], [link(0, 1, nvlinks=4)], {"topology.models": "warn", "topology.0-1": "pass"}),
        ([gpu(0), gpu(1)], None, {"topology.models": "pass", "topology.links": "skip"}),
    ],
    ids=["nvlink", "pcie-switch", "cross-socket", "p2p-disabled", "mixed-models", "not-recorded"],
)
def test_topology(gpus: list[dict[str, Any]], links: list[dict[str, Any]] | None, expected: dict[str, str]) -> None:
    assert statuses(topology.check(facts(gpus, links))) == expected


def test_topology_p2p_disabled_names_the_pair_and_the_fix() -> None:
    [_, pair] = topology.check(facts([gpu(0), gpu(1)], [link(0, 1, "PHB", "disabled")]))
    assert pair.observed == "GPU 0 <-> GPU 1: PCIe (PHB), P2P disabled/disabled"
    assert "NCCL copies through host memory between GPU 0 and 1" in pair.fix and "iommu=pt" in pair.fix


@pytest.mark.parametrize(
    ("visible", "expected"), [("1,0", "warn"), ("0,1", "pass")], ids=["out-of-bus-order", "bus-order"]
)
def test_visible_devices_order(visible: str, expected: str) -> None:
    doc = facts([gpu(0), gpu(1)], [link(0, 1, nvlinks=18)])
    doc["env"] = {"CUDA_VISIBLE_DEVICES": visible}
    order = {r.id: r for r in topology.check(doc)}["topology.order"]
    assert order.status == expected
    if expected == "warn":
        assert "CUDA_VISIBLE_DEVICES=0,1" in order.fix


@pytest.mark.parametrize(
    ("free_mib", "gpus", "expected"),
    [(65536, 2, "pass"), (64, 2, "fail"), (64, 1, "warn")],
    ids=["large", "container-default-multi-gpu", "container-default-one-gpu"],
)
def test_shm(free_mib: int, gpus: int, expected: str) -> None:
    doc = facts([gpu(i) for i in range(gpus)], shm={"path": "/dev/shm", "total_mib": free_mib, "free_mib": free_mib})
    [result] = shm.check(doc)
    assert result.status == expected
    if expected != "pass":
        assert "--ipc=host" in result.fix and "--shm-size" in result.fix


def test_shm_unreadable_fails() -> None:
    [result] = shm.check(facts([gpu(0)], shm={"path": "/dev/shm", "error": "No such file or directory"}))
    assert result.status == "fail"


def test_shm_and_ib_facts_from_this_machine(tmp_path: Path) -> None:
    """The gatherers on real paths: this host's /dev/shm, and a constructed sysfs tree for IB."""
    here = shm_facts()
    assert here["total_mib"] > 0 and here["free_mib"] <= here["total_mib"]
    assert infiniband_facts(tmp_path / "absent") == {"present": False, "devices": []}
    (tmp_path / "mlx5_0" / "ports" / "1").mkdir(parents=True)
    (tmp_path / "mlx5_0" / "ports" / "1" / "state").write_text("4: ACTIVE\n")
    assert infiniband_facts(tmp_path) == {
        "present": True,
        "devices": [{"name": "mlx5_0", "ports": [{"port": "1", "state": "ACTIVE"}]}],
    }


@pytest.mark.parametrize(
    ("ib", "expected"),
    [
        ({"present": False, "devices": []}, "pass"),
        ({"present": True, "devices": [{"name": "mlx5_0", "ports": [{"port": "1", "state": "DOWN"}]}]}, "warn"),
        ({"present": True, "devices": [{"name": "mlx5_0", "ports": [{"port": "1", "state": "ACTIVE"}]}]}, "pass"),
    ],
    ids=["none", "down", "active"],
)
def test_infiniband(ib: dict[str, Any], expected: str) -> None:
    [result] = infiniband.check(facts([gpu(0)], infiniband=ib))
    assert result.status == expected


@pytest.mark.parametrize(
    ("torch", "env", "expected"),
    [
        ({"ok": True, "version": "2.11.0", "cuda": "13.0", "nccl": "2.28.9"}, {}, {"nccl": "pass"}),
        ({"ok": True, "version": "2.13.0+cpu", "cuda": None}, {}, {"nccl": "skip"}),
        (
            {"ok": True, "version": "2.11.0", "cuda": "13.0", "nccl_error": "RuntimeError: no NCCL"},
            {},
            {"nccl": "fail"},
        ),
        (
            {"ok": True, "version": "2.11.0", "cuda": "13.0", "nccl": "2.28.9"},
            {"NCCL_P2P_DISABLE": "1"},
            {"nccl": "pass", "nccl.NCCL_P2P_DISABLE": "warn"},
        ),
    ],
    ids=["cuda-torch", "cpu-torch", "no-nccl", "p2p-disabled"],
)
def test_nccl(torch: dict[str, Any], env: dict[str, str], expected: dict[str, str]) -> None:
    doc = facts([gpu(0)], imports={"probes": {"torch": torch}}, stack={"packages": {}})
    doc["env"] = env
    assert statuses(nccl.check(doc)) == expected


def layout(tp: int = 1, pp: int = 1, dp: int = 1, nodes: int = 1) -> dict[str, Any]:
    return {"tensor_parallel_size": tp, "pipeline_parallel_size": pp, "data_parallel_size": dp, "nodes": nodes}


LLAMA_8B = {"num_attention_heads": 32, "num_key_value_heads": 8, "num_hidden_layers": 32}


@pytest.mark.parametrize(
    ("plan", "model", "gpus", "expected"),
    [
        (layout(tp=8), LLAMA_8B, 8, {"parallel.tp": "pass", "parallel.pp": "pass", "parallel.gpus": "pass"}),
        (layout(tp=3), LLAMA_8B, 4, {"parallel.tp": "fail", "parallel.pp": "pass", "parallel.gpus": "pass"}),
        (
            layout(tp=2),
            {"num_attention_heads": 6, "num_key_value_heads": 3, "num_hidden_layers": 2},
            2,
            {"parallel.tp": "fail", "parallel.pp": "pass", "parallel.gpus": "pass"},
        ),
        (
            layout(tp=2, pp=4),
            {**LLAMA_8B, "num_hidden_layers": 2},
            8,
            {"parallel.tp": "pass", "parallel.pp": "fail", "parallel.gpus": "pass"},
        ),
        (
            layout(tp=8, pp=2, nodes=2),
            LLAMA_8B,
            4,
            {"parallel.tp": "pass", "parallel.pp": "pass", "parallel.gpus": "fail"},
        ),
        (
            layout(tp=3, nodes=2),
            {"num_attention_heads": 3, "num_key_value_heads": 3, "num_hidden_layers": 2},
            8,
            {"parallel.tp": "pass", "parallel.pp": "pass", "parallel.gpus": "fail"},
        ),
        (layout(tp=2), None, 2, {"parallel.model": "skip", "parallel.gpus": "pass"}),
    ],
    ids=["fits", "heads-not-divisible", "kv-heads", "too-many-stages", "too-few-gpus", "uneven-nodes", "no-model"],
)
def test_parallel(plan: dict[str, Any], model: dict[str, Any] | None, gpus: int, expected: dict[str, str]) -> None:
    doc = facts([gpu(i) for i in range(gpus)], parallel=plan, model=model)
    assert statuses(parallel.check(doc)) == expected


def test_tp_beyond_kv_heads_replicates_them() -> None:
    """The tiny model (2 heads, 1 KV head) at TP=2: allowed, the KV head is replicated."""
    doc = facts([gpu(0), gpu(1)], parallel=layout(tp=2), model={"num_attention_heads": 2, "num_key_value_heads": 1})
    tp = {r.id: r for r in parallel.check(doc)}["parallel.tp"]
    assert tp.status == "pass" and tp.observed.endswith("(each KV head replicated 2x)")


def test_doctor_profile_and_model_through_the_cli(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    model = tmp_path / "m"
    model.mkdir()
    (model / "config.json").write_text(
        json.dumps({"num_attention_heads": 6, "num_key_value_heads": 6, "num_hidden_layers": 4})
    )
    profile = tmp_path / "tp4.toml"
    profile.write_text("schema = 1\n[vllm]\ntensor_parallel_size = 4\n")
    rc = main(["doctor", "--json", "--only", "parallel", "--model", str(model), "--profile", str(profile)])
    doc = json.loads(capsys.readouterr().out)
    tp = next(c for c in doc["checks"] if c["id"] == "parallel.tp")
    assert rc == 1 and tp["status"] == "fail" and "one of [1, 2, 3, 6]" in tp["fix"]
    assert doc["facts"]["parallel"]["tensor_parallel_size"] == 4
