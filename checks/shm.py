"""/dev/shm: NCCL's intra-node buffers and vLLM's inter-process message queues live there; a container's
default 64 MB breaks both (ncclSystemError, or a Bus error)."""

from __future__ import annotations

from checks.facts import Facts
from checks.result import CheckResult

MIN_SHM_MIB = 1024


def check(facts: Facts) -> list[CheckResult]:
    shm = facts.get("shm")
    if shm is None:
        return [CheckResult("shm", "shm", "skip", "/dev/shm not recorded (a facts document from an older doctor)")]
    if "error" in shm:
        return [
            CheckResult(
                "shm",
                "shm",
                "fail",
                f"{shm['path']} cannot be read: {shm['error']}",
                f"a writable {shm['path']} of >= {MIN_SHM_MIB} MiB",
                "mount a tmpfs at /dev/shm (docker run --ipc=host, or --shm-size=16g)",
            )
        ]
    observed = f"{shm['path']}: {shm['total_mib']} MiB, {shm['free_mib']} MiB free"
    if shm["free_mib"] >= MIN_SHM_MIB:
        return [CheckResult("shm", "shm", "pass", observed)]
    gpus = (facts["nvml"].get("gpus") or []) if facts["nvml"].get("ok") else []
    return [
        CheckResult(
            "shm",
            "shm",
            "fail" if len(gpus) > 1 else "warn",
            observed,
            f">= {MIN_SHM_MIB} MiB free (tensor parallelism and NCCL need it; a container's default is 64 MB)",
            "docker run --ipc=host (or --shm-size=16g); Kubernetes: an emptyDir with medium: Memory at /dev/shm",
        )
    ]
