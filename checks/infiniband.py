"""InfiniBand / RoCE devices: without an active port, NCCL between nodes falls back to TCP sockets."""

from __future__ import annotations

from checks.facts import Facts
from checks.result import CheckResult


def check(facts: Facts) -> list[CheckResult]:
    ib = facts.get("infiniband")
    if ib is None:
        return [CheckResult("ib", "ib", "skip", "InfiniBand not recorded (a facts document from an older doctor)")]
    if not ib["present"] or not ib["devices"]:
        return [
            CheckResult(
                "ib",
                "ib",
                "pass",
                "no InfiniBand/RoCE device (/sys/class/infiniband): fine on one node; between nodes NCCL would use "
                "TCP sockets",
            )
        ]
    active = [f"{d['name']}/{p['port']}" for d in ib["devices"] for p in d["ports"] if p["state"] == "ACTIVE"]
    names = ", ".join(d["name"] for d in ib["devices"])
    if not active:
        return [
            CheckResult(
                "ib",
                "ib",
                "warn",
                f"InfiniBand/RoCE device(s) {names}, no port ACTIVE",
                "an ACTIVE port for NCCL between nodes",
                "check the cable and the subnet manager (ibstat; opensm), or the RoCE interface (ip link); in a "
                "container pass /dev/infiniband and IPC_LOCK (docker run --device=/dev/infiniband --cap-add=IPC_LOCK)",
            )
        ]
    return [CheckResult("ib", "ib", "pass", f"InfiniBand/RoCE ports ACTIVE: {', '.join(active)}")]
