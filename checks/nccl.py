"""NCCL: the version the engine's torch loads (vLLM's all-reduce across GPUs and nodes goes through it) and
NCCL_* variables that switch its transports off."""

from __future__ import annotations

from checks.facts import Facts
from checks.result import CheckResult

# variable -> what setting it to 1 costs
DISABLING = {
    "NCCL_P2P_DISABLE": "GPU-to-GPU copies go through host memory",
    "NCCL_SHM_DISABLE": "intra-node traffic without P2P falls back to sockets",
    "NCCL_IB_DISABLE": "traffic between nodes goes over TCP sockets instead of InfiniBand/RoCE",
}


def check(facts: Facts) -> list[CheckResult]:
    torch = facts.get("imports", {}).get("probes", {}).get("torch") or {}
    packages = facts.get("stack", {}).get("packages", {})
    wheel = next((f"{name} {v}" for name, v in sorted(packages.items()) if name.startswith("nvidia-nccl")), None)
    if torch.get("ok") and not torch.get("cuda"):
        return [CheckResult("nccl", "nccl", "skip", f"torch {torch.get('version')} is a CPU build: no NCCL")]
    results = []
    if torch.get("nccl"):
        observed = f"torch {torch.get('version')} loads NCCL {torch['nccl']}" + (f" (wheel {wheel})" if wheel else "")
        results.append(CheckResult("nccl", "nccl", "pass", observed))
    elif torch.get("nccl_error"):
        results.append(
            CheckResult(
                "nccl",
                "nccl",
                "fail",
                f"torch {torch.get('version')} cannot report NCCL: {torch['nccl_error']}",
                "a CUDA torch with NCCL (every rank of a multi-GPU replica needs it)",
                "reinstall torch from the CUDA index that matches the lock (nemolaunch lock verify)",
            )
        )
    elif wheel:
        results.append(CheckResult("nccl", "nccl", "pass", f"NCCL wheel {wheel} (torch's own report not recorded)"))
    else:
        results.append(CheckResult("nccl", "nccl", "skip", "no NCCL seen: torch not importable or not recorded"))
    env = facts["env"]
    for name, cost in DISABLING.items():
        if env.get(name, "0") not in ("", "0"):
            results.append(
                CheckResult(
                    f"nccl.{name}",
                    "nccl",
                    "warn",
                    f"{name}={env[name]}: {cost}",
                    f"{name} unset unless a known fault needs it",
                    f"unset {name} (and check nemolaunch doctor's topology and infiniband rows for the real fault)",
                )
            )
    return results
