"""The GPUs: name, compute capability and family, memory, persistence, ECC, MIG, CUDA_VISIBLE_DEVICES."""

from __future__ import annotations

from checks.facts import Facts
from checks.gpu_family import FAMILIES, family_from_capability
from checks.result import CheckResult, Status


def check(facts: Facts) -> list[CheckResult]:
    nvml = facts["nvml"]
    if not nvml.get("ok"):
        return [CheckResult("gpu", "gpu", "skip", "no GPU visible through NVML", "", "")]
    gpus = nvml.get("gpus", [])
    if not gpus:
        return [
            CheckResult(
                "gpu",
                "gpu",
                "fail",
                "the driver is loaded but reports no GPU",
                "at least one GPU",
                "check nvidia-smi and dmesg (Xid errors), and that the GPU is not bound to vfio",
            )
        ]
    results = []
    for gpu in gpus:
        major, minor = gpu["capability"] or (0, 0)
        family = family_from_capability(major, minor)
        chips = FAMILIES.get((major, minor), ("", "unknown family"))[1]
        observed = (
            f"GPU {gpu['index']}: {gpu['name']}, compute capability {major}.{minor} = {family} ({chips}), "
            f"{gpu['memory_total_mib'] / 1024:.0f} GiB, persistence {'on' if gpu['persistence'] else 'off'}, "
            f"ECC {_on_off(gpu['ecc_current'])}, MIG {_on_off(gpu['mig_current'])}"
        )
        status: Status = "pass"
        fix = ""
        if gpu["mig_current"]:
            status, fix = "warn", "MIG slices the GPU: vLLM sees one slice; disable with sudo nvidia-smi -i N -mig 0"
        elif not gpu["persistence"]:
            status, fix = "warn", "sudo nvidia-smi -pm 1 (without persistence the driver reinitialises on each start)"
        results.append(CheckResult(f"gpu.{gpu['index']}", "gpu", status, observed, "persistence on, MIG off", fix))
    results.append(_visible_devices(facts, len(gpus)))
    return results


def _on_off(value: int | None) -> str:
    return "n/a" if value is None else ("on" if value else "off")


def _visible_devices(facts: Facts, count: int) -> CheckResult:
    env = facts["env"]
    visible = env.get("CUDA_VISIBLE_DEVICES")
    if visible is None:
        return CheckResult("gpu.visible", "gpu", "pass", f"CUDA_VISIBLE_DEVICES unset: all {count} GPU(s) visible")
    indices = [v.strip() for v in visible.split(",") if v.strip()]
    if not indices:
        return CheckResult(
            "gpu.visible",
            "gpu",
            "fail",
            "CUDA_VISIBLE_DEVICES is empty: no GPU is visible to CUDA",
            "the GPUs to serve on",
            "unset CUDA_VISIBLE_DEVICES or list GPU indices",
        )
    numeric = all(i.isdigit() for i in indices)
    out_of_range = [i for i in indices if numeric and int(i) >= count]
    if out_of_range:
        return CheckResult(
            "gpu.visible",
            "gpu",
            "fail",
            f"CUDA_VISIBLE_DEVICES={visible} names GPU(s) {','.join(out_of_range)}, but NVML sees {count}",
            f"indices below {count}",
            "fix CUDA_VISIBLE_DEVICES (nvidia-smi -L lists the GPUs)",
        )
    if numeric and count > 1 and env.get("CUDA_DEVICE_ORDER") != "PCI_BUS_ID":
        return CheckResult(
            "gpu.visible",
            "gpu",
            "warn",
            f"CUDA_VISIBLE_DEVICES={visible} uses indices, but CUDA "
            "orders GPUs fastest-first while nvidia-smi/NVML order them by PCI bus",
            "the same numbering in CUDA and nvidia-smi",
            "export CUDA_DEVICE_ORDER=PCI_BUS_ID (or use GPU UUIDs in CUDA_VISIBLE_DEVICES)",
        )
    return CheckResult("gpu.visible", "gpu", "pass", f"CUDA_VISIBLE_DEVICES={visible}")
