"""`nemolaunch fleet doctor`: doctor on every node of a running Ray cluster, and what differs between them.

One Ray task is pinned to each alive node (NodeAffinitySchedulingStrategy, hard); it gathers doctor's facts
there (checks.node.report) and connects to the head's address and port. The nodes are then compared on what
must be the same for vLLM to run one model across them. Ray is imported only here (the `ray` extra)."""

from __future__ import annotations

import hashlib
import json
import logging
import math
import socket
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import checks
from checks import run_checks
from checks.child.dists import vllm_version
from checks.facts import Facts
from checks.gpu_family import family_from_capability
from checks.node import report as node_report
from checks.result import CheckResult
from launcher.errors import BadInput, ExitCode, NemolaunchError, NotReady
from launcher.profiles.profile import load_profile

# what must be equal on every node (a difference fails) and what should be (a difference warns)
MUST_MATCH = ("python", "packages", "vllm", "torch", "flashinfer", "nccl", "cuda_torch", "gpus")
SHOULD_MATCH = ("driver", "cuda_driver", "shm_mib", "ray")
UNREACHABLE = ("timeout", "unreachable", "error")


@dataclass(frozen=True)
class NodeRow:
    node_id: str
    address: str
    hostname: str
    summary: dict[str, Any]  # the MUST_MATCH and SHOULD_MATCH values
    checks: list[CheckResult]
    reach: list[dict[str, Any]]

    def problems(self) -> int:
        return sum(c.status in ("fail", "crash") for c in self.checks)


@dataclass(frozen=True)
class FleetReport:
    address: str
    nodes: list[NodeRow]
    differences: dict[str, dict[str, Any]]  # field -> node address -> value
    findings: list[CheckResult] = field(default_factory=list)

    def serves_together(self) -> bool:
        return not any(f.status == "fail" for f in self.findings)

    def to_json(self) -> dict[str, Any]:
        return {
            "address": self.address,
            "nodes": [
                {
                    "node_id": n.node_id,
                    "address": n.address,
                    "hostname": n.hostname,
                    "summary": n.summary,
                    "problems": n.problems(),
                    "checks": [c.to_json() for c in n.checks],
                    "reach": n.reach,
                }
                for n in self.nodes
            ],
            "differences": self.differences,
            "findings": [f.to_json() for f in self.findings],
            "serves_together": self.serves_together(),
        }


def summarize(facts: Facts) -> dict[str, Any]:
    """The values compared across nodes, from one node's facts."""
    stack = facts.get("stack", {})
    packages: dict[str, str] = stack.get("packages", {}) or {}
    everything = stack.get("all_packages") or packages
    torch = facts.get("imports", {}).get("probes", {}).get("torch") or {}
    nvml = facts.get("nvml", {})
    gpus = (nvml.get("gpus") or []) if nvml.get("ok") else []
    families = sorted({family_from_capability(*g["capability"]) for g in gpus if g.get("capability")})
    nccl = torch.get("nccl") or next((v for k, v in sorted(packages.items()) if k.startswith("nvidia-nccl")), None)
    return {
        "python": stack.get("python_version"),
        "packages": hashlib.sha256(json.dumps(everything, sort_keys=True).encode()).hexdigest()[:12],
        "vllm": vllm_version(packages),
        "torch": packages.get("torch"),
        "flashinfer": packages.get("flashinfer-python"),
        "nccl": nccl,
        "cuda_torch": torch.get("cuda"),
        "gpus": f"{len(gpus)} x {'/'.join(families)}" if gpus else "none",
        "driver": nvml.get("driver"),
        "cuda_driver": nvml.get("cuda_driver"),
        "shm_mib": (facts.get("shm") or {}).get("total_mib"),
        "ray": packages.get("ray"),
    }


def compare(nodes: list[NodeRow]) -> tuple[dict[str, dict[str, Any]], list[CheckResult]]:
    """Fields whose values differ between nodes, and what that means; plus every node's own failures and
    unreachable targets."""
    differences: dict[str, dict[str, Any]] = {}
    findings: list[CheckResult] = []
    for key in (*MUST_MATCH, *SHOULD_MATCH):
        values = {n.address: n.summary.get(key) for n in nodes}
        if len(set(map(str, values.values()))) > 1:
            differences[key] = values
            seen = ", ".join(f"{addr}: {value}" for addr, value in values.items())
            findings.append(
                CheckResult(
                    f"fleet.{key}",
                    "fleet",
                    "fail" if key in MUST_MATCH else "warn",
                    f"{key} differs: {seen}",
                    "the same on every node",
                    "install the same lock on every node (nemolaunch lock capture on one, lock verify on the "
                    "others), or run every node from the same container image",
                )
            )
    for n in nodes:
        if n.problems():
            failed = ", ".join(c.id for c in n.checks if c.status in ("fail", "crash"))
            findings.append(
                CheckResult(
                    f"fleet.doctor.{n.address}",
                    "fleet",
                    "fail",
                    f"node {n.address}: doctor fails {failed}",
                    "doctor passes on every node",
                    f"run nemolaunch doctor on {n.address} for the fixes",
                )
            )
        for target in n.reach:
            if target["result"] in UNREACHABLE:
                findings.append(
                    CheckResult(
                        f"fleet.reach.{n.address}",
                        "fleet",
                        "fail",
                        f"node {n.address} cannot reach {target['address']}:{target['port']} ({target['result']})",
                        "every node reaches the head's address and port",
                        "open the port between the nodes (firewall, security group), and check that the address "
                        "is the head's address on the network the nodes share (VLLM_HOST_IP)",
                    )
                )
    return differences, findings


CONNECT_TIMEOUT_S = 5.0


def check_reachable(address: str) -> None:
    """A HOST:PORT cluster address answers a TCP connect within seconds: ray.init itself retries for minutes and
    prints Ray's own log meanwhile (821 s and 61 lines for 127.0.0.1:1). `auto` and other forms go to Ray as given."""
    host, sep, port = address.rpartition(":")
    if not sep or not port.isdigit() or "/" in address:
        return
    try:
        with socket.create_connection((host.strip("[]"), int(port)), timeout=CONNECT_TIMEOUT_S):
            pass
    except OSError as e:
        raise NotReady(
            f"cannot connect to the Ray cluster at {address}: {e.strerror or 'no answer'}"
            + (f" within {CONNECT_TIMEOUT_S:.0f} s" if isinstance(e, TimeoutError) else ""),
            "start it (ray start --head) or give its head's address and port",
        ) from None


def run(address: str, profile_ref: str | None, python: Path | None, timeout_s: float = 300.0) -> FleetReport:
    """Connect to the Ray cluster at `address`, run checks.node.report pinned to every alive node (with a
    profile: the nodes of its [placement], each of which must be in the cluster), and compare them."""
    if not (math.isfinite(timeout_s) and timeout_s > 0):
        raise BadInput(f"--timeout {timeout_s} is not a positive number of seconds", "give e.g. 300")
    try:
        import ray
        from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy
    except ImportError:
        raise NotReady("Ray is not installed here", "pip install 'nemolaunch[ray]'") from None
    check_reachable(address)
    placement = load_profile(profile_ref).placement if profile_ref else None
    if profile_ref and placement is None:
        raise BadInput(f"profile {profile_ref} has no [placement].nodes", "add the nodes of the multi-node launch")
    targets = [(placement.head, placement.port)] if placement else []
    try:
        ray.init(
            address=address,
            runtime_env={"py_modules": [str(Path(checks.__file__).parent)]},  # nemolaunch need not be installed there
            logging_level=logging.ERROR,
            log_to_driver=False,
        )
    except (ConnectionError, ValueError, RuntimeError) as e:
        raise NotReady(f"cannot connect to the Ray cluster at {address}: {e}", "start it (ray start --head)") from None
    try:
        alive = [n for n in ray.nodes() if n.get("Alive")]  # type: ignore[no-untyped-call]
        if placement is not None:
            by_address = {n["NodeManagerAddress"]: n for n in alive}
            missing = [a for a in placement.nodes if a not in by_address]
            if missing:
                raise BadInput(
                    f"node(s) {', '.join(missing)} of the profile are not in the Ray cluster at {address} "
                    f"(it has {', '.join(sorted(by_address))})",
                    "join them (ray start --address HEAD:PORT) or fix [placement].nodes",
                )
            alive = [by_address[a] for a in placement.nodes]
        # by reference to checks.node.report, which the shipped package provides on every node
        task = ray.remote(num_cpus=0, max_retries=0)(node_report)
        refs = [
            task.options(scheduling_strategy=NodeAffinitySchedulingStrategy(n["NodeID"], soft=False)).remote(
                str(python) if python else None, targets
            )
            for n in alive
        ]
        try:
            reports = ray.get(refs, timeout=timeout_s)
        except ray.exceptions.GetTimeoutError:
            raise NotReady(f"a node did not report within {timeout_s:.0f} s", "run nemolaunch doctor on it") from None
        except ray.exceptions.RayError as e:  # a node died (NodeDiedError), its worker crashed, ...
            first = (str(e).strip().splitlines() or [type(e).__name__])[0][:200]
            raise NemolaunchError(
                f"a node failed while reporting ({type(e).__name__}: {first})", "run nemolaunch doctor on it"
            ) from None
    finally:
        ray.shutdown()
    addresses = [n["NodeManagerAddress"] for n in alive]
    rows = [
        NodeRow(
            n["NodeID"][:12],
            # several nodes on one host (a test cluster) share an address: tell them apart by node id
            n["NodeManagerAddress"]
            if addresses.count(n["NodeManagerAddress"]) == 1
            else f"{n['NodeManagerAddress']}/{n['NodeID'][:6]}",
            r["hostname"],
            summarize(r["facts"]),
            run_checks(r["facts"]),
            r["reach"],
        )
        for n, r in zip(alive, reports, strict=True)
    ]
    differences, findings = compare(rows)
    return FleetReport(address, rows, differences, findings)


def exit_code(report: FleetReport) -> int:
    return ExitCode.OK if report.serves_together() else ExitCode.PROBLEM
