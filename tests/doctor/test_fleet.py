"""fleet doctor on a real Ray cluster of two nodes on this machine (ray.cluster_utils.Cluster: a head and a
worker, each its own raylet), the worker made to differ by a package on its PYTHONPATH."""

from __future__ import annotations

import json
import socket
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psutil
import pytest

from checks.node import reach
from launcher.cli.main import main

ray = pytest.importorskip("ray")
from ray.cluster_utils import Cluster  # noqa: E402

WORKER = "127.0.0.2"  # Linux routes all of 127/8 to loopback: the worker gets an address of its own


def closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])  # free once the socket closes: nothing listens there


def ray_processes() -> list[psutil.Process]:
    names = ("raylet", "gcs_server", "default_worker", "dashboard", "log_monitor", "runtime_env")
    out = []
    for p in psutil.Process().children(recursive=True):
        try:
            if any(n in " ".join(p.cmdline()) for n in names):
                out.append(p)
        except psutil.Error:
            continue
    return out


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Cluster, Path]]:
    extra = tmp_path_factory.mktemp("extra-site")
    info = extra / "flashinfer_python-0.6.14.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: flashinfer-python\nVersion: 0.6.14\n")
    args: dict[str, Any] = {"num_cpus": 1, "include_dashboard": False, "object_store_memory": 80 * 2**20}
    c = Cluster(initialize_head=True, head_node_args=args)
    try:
        c.add_node(**args, node_ip_address=WORKER, env_vars={"PYTHONPATH": str(extra)})
        c.wait_for_nodes()
        assert ray_processes(), "the process count below must see Ray's processes"
        yield c, extra
    finally:
        c.shutdown()
        _, alive = psutil.wait_procs(ray_processes(), timeout=20)
        assert not alive, f"Ray processes left: {[p.pid for p in alive]}"


def test_fleet_doctor_finds_the_node_that_differs(
    cluster: tuple[Cluster, Path], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    c, _ = cluster
    head_ip = c.head_node.node_ip_address
    port = closed_port()
    profile = tmp_path / "two.toml"
    profile.write_text(
        f'schema = 1\n[vllm]\ntensor_parallel_size = 1\n[placement]\nnodes = ["{head_ip}", "{WORKER}"]\nport = {port}\n'
    )
    rc = main(["fleet", "doctor", "--ray", c.address, "--profile", str(profile), "--json"])
    doc = json.loads(capsys.readouterr().out)
    assert rc == 1 and doc["serves_together"] is False
    assert [n["address"] for n in doc["nodes"]] == [head_ip, WORKER]
    head, worker = (n["summary"] for n in doc["nodes"])
    assert (head["flashinfer"], worker["flashinfer"]) == (None, "0.6.14")
    assert head["packages"] != worker["packages"]
    assert list(doc["differences"]) == ["packages", "flashinfer"]
    assert {f["id"]: f["status"] for f in doc["findings"]}["fleet.flashinfer"] == "fail"
    # nothing listens on the head's port yet: refused means reachable, so no reach finding
    assert [r["result"] for n in doc["nodes"] for r in n["reach"]] == ["refused", "refused"]
    assert not [f for f in doc["findings"] if f["id"].startswith("fleet.reach")]


def test_fleet_doctor_text_has_a_row_per_node(
    cluster: tuple[Cluster, Path], capsys: pytest.CaptureFixture[str]
) -> None:
    c, _ = cluster
    assert main(["fleet", "doctor", "--ray", c.address]) == 1
    out = capsys.readouterr().out
    assert out.startswith(f"Ray cluster {c.address}: 2 node(s)")
    assert f"\n{c.head_node.node_ip_address} " in out and f"\n{WORKER} " in out
    assert "differs: packages, flashinfer" in out and out.rstrip().endswith("the nodes would not serve together")


def test_profile_node_missing_from_the_cluster(
    cluster: tuple[Cluster, Path], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    c, _ = cluster
    profile = tmp_path / "p.toml"
    profile.write_text(f'schema = 1\n[placement]\nnodes = ["{c.head_node.node_ip_address}", "127.0.0.9"]\n')
    assert main(["fleet", "doctor", "--ray", c.address, "--profile", str(profile)]) == 2
    assert "node(s) 127.0.0.9 of the profile are not in the Ray cluster" in capsys.readouterr().err


def test_reach_tells_refused_from_unreachable() -> None:
    assert reach("127.0.0.1", closed_port())["result"] == "refused"
    with socket.socket() as server:
        server.bind(("127.0.0.1", 0))
        server.listen()
        assert reach("127.0.0.1", server.getsockname()[1])["result"] == "connected"
    # TEST-NET-1 (RFC 5737) is never routed: a timeout, or no route at all
    assert reach("192.0.2.123", 9, timeout_s=0.5)["result"] in ("timeout", "unreachable", "error")


@pytest.mark.parametrize(
    ("args", "code", "line"),
    [
        (
            ["--ray", "127.0.0.1:1"],
            3,
            "cannot connect to the Ray cluster at 127.0.0.1:1: Connection refused; start it (ray start --head) or "
            "give its head's address and port",
        ),
        (
            ["--ray", "127.0.0.1:1", "--timeout", "nan"],
            2,
            "--timeout nan is not a positive number of seconds; give e.g. 300",
        ),
    ],
    ids=["refused", "timeout-nan"],
)
def test_an_unreachable_cluster_is_one_line_at_once(
    args: list[str], code: int, line: str, capsys: pytest.CaptureFixture[str]
) -> None:
    """Before, ray.init retried for 821 s and printed 61 lines of Ray's own log."""
    from launcher.cli.main import main

    assert main(["fleet", "doctor", *args]) == code
    assert capsys.readouterr().err.splitlines() == [f"nemolaunch: {line}"]
