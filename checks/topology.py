"""Several GPUs: their models (mixed models flagged), the link between every pair (NVLink, PCIe level, P2P),
and the order CUDA_VISIBLE_DEVICES puts them in."""

from __future__ import annotations

from collections import Counter

from checks.facts import Facts
from checks.result import CheckResult

# PCIe levels at which P2P traffic crosses the CPU's interconnect (nvidia-smi topo -m: NODE, SYS)
FAR_LEVELS = ("NODE", "SYS")


def check(facts: Facts) -> list[CheckResult]:
    nvml = facts["nvml"]
    gpus = (nvml.get("gpus") or []) if nvml.get("ok") else []
    if len(gpus) < 2:
        what = "no GPU" if not gpus else "one GPU"
        return [CheckResult("topology", "topology", "skip", f"{what}: no GPU-to-GPU links to check")]
    results = [_models(gpus)]
    links = nvml.get("links")
    if links is None:
        results.append(
            CheckResult(
                "topology.links", "topology", "skip", "GPU links not recorded (a facts document from an older doctor)"
            )
        )
    else:
        results += [_pair(link) for link in links]
    order = _order(facts, gpus)
    if order is not None:
        results.append(order)
    return results


def _models(gpus: list[dict[str, object]]) -> CheckResult:
    names = Counter(str(g["name"]) for g in gpus)
    observed = f"{len(gpus)} GPUs: " + ", ".join(f"{n} x {name}" for name, n in names.items())
    if len(names) > 1:
        return CheckResult(
            "topology.models",
            "topology",
            "warn",
            observed,
            "one GPU model for every rank of a replica",
            "serve each replica on GPUs of one model (CUDA_VISIBLE_DEVICES=<those indices>, with "
            "CUDA_DEVICE_ORDER=PCI_BUS_ID): tensor parallelism runs at the slowest GPU's speed and memory",
        )
    return CheckResult("topology.models", "topology", "pass", observed)


def _pair(link: dict[str, object]) -> CheckResult:
    a, b = link["a"], link["b"]
    p2p = "ok" if link["p2p_read"] == "ok" and link["p2p_write"] == "ok" else f"{link['p2p_read']}/{link['p2p_write']}"
    via = f"{link['nvlinks']} NVLink(s)" if link["nvlinks"] else f"PCIe ({link['ancestor']})"
    observed = f"GPU {a} <-> GPU {b}: {via}, P2P {p2p}"
    check_id = f"topology.{a}-{b}"
    if p2p != "ok":
        return CheckResult(
            check_id,
            "topology",
            "warn",
            observed,
            "P2P read and write between GPUs of one replica",
            f"NCCL copies through host memory between GPU {a} and {b}: put a replica's tensor-parallel ranks on "
            "GPUs with P2P (nvidia-smi topo -m / -p2p r), or enable it (disable PCIe ACS in the BIOS, "
            "iommu=pt on the kernel command line; in a VM, pass the GPUs through with their NVLink bridge)",
        )
    if not link["nvlinks"] and link["ancestor"] in FAR_LEVELS:
        return CheckResult(
            check_id,
            "topology",
            "warn",
            observed,
            "NVLink, or PCIe below one CPU socket",
            "traffic between these GPUs crosses the CPU interconnect: keep a tensor-parallel group on one "
            "socket's GPUs and use pipeline parallelism (pipeline_parallel_size) across sockets",
        )
    return CheckResult(check_id, "topology", "pass", observed)


def _order(facts: Facts, gpus: list[dict[str, object]]) -> CheckResult | None:
    """vLLM gives rank r the r-th visible GPU; a list out of PCI order is legal but often an accident."""
    visible = facts["env"].get("CUDA_VISIBLE_DEVICES")
    if not visible:
        return None
    indices = [v.strip() for v in visible.split(",") if v.strip()]
    if not all(i.isdigit() and int(i) < len(gpus) for i in indices) or len(indices) < 2:
        return None  # UUIDs, MIG slices or out-of-range indices (the gpu check says so)
    buses = [str(gpus[int(i)].get("pci_bus_id")) for i in indices]
    observed = f"CUDA_VISIBLE_DEVICES={visible}: ranks 0..{len(indices) - 1} on PCI " + ", ".join(buses)
    if buses != sorted(buses):
        in_order = ",".join(i for _, i in sorted(zip(buses, indices, strict=True)))
        return CheckResult(
            "topology.order",
            "topology",
            "warn",
            observed,
            "ranks in PCI bus order",
            f"list the GPUs in bus order (CUDA_VISIBLE_DEVICES={in_order}) "
            "unless the order is deliberate: adjacent ranks form the tensor-parallel groups",
        )
    return CheckResult("topology.order", "topology", "pass", observed)
