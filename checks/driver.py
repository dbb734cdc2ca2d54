"""The NVIDIA driver: NVML first, then the kernel module and nvidia-smi; NVML's failures named with fixes."""

from __future__ import annotations

from checks.facts import Facts
from checks.result import CheckResult

NVML_FAILURES = {
    "library-not-found": (
        "the NVML library (libnvidia-ml.so) is not installed: no NVIDIA driver user space",
        "install the NVIDIA driver (e.g. apt install nvidia-driver-580), or in a container run "
        "with --gpus all and the NVIDIA container toolkit",
    ),
    "driver-not-loaded": (
        "the NVIDIA kernel module is not loaded",
        "sudo modprobe nvidia (check dmesg for why it failed; Secure Boot may block it)",
    ),
    "no-permission": (
        "no permission to open the GPU device files (/dev/nvidia*)",
        "add the user to the video group, or run the container with the device files",
    ),
    "version-mismatch": (
        "driver/library version mismatch: the driver was upgraded but the old kernel module is still loaded",
        "reboot (or unload and reload the nvidia modules)",
    ),
    "bindings-missing": ("the nvidia-ml-py bindings are missing", "pip install nvidia-ml-py"),
    "gpu-lost": (
        "NVML started, then lost a GPU (it has fallen off the bus)",
        "check dmesg for Xid 79; reset the GPU (nvidia-smi -r) or reboot, and check its power and seating",
    ),
    "after-init": ("NVML started, then a call to it failed", "run nvidia-smi to see why; check dmesg for Xid errors"),
}


def check(facts: Facts) -> list[CheckResult]:
    nvml = facts["nvml"]
    if nvml.get("ok"):
        return [
            CheckResult(
                "driver",
                "driver",
                "pass",
                f"driver {nvml['driver']}, supports CUDA {nvml['cuda_driver']} (NVML)",
                "a loaded NVIDIA driver",
            )
        ]
    kind = nvml.get("error_kind", "other")
    meaning, fix = NVML_FAILURES.get(kind, (f"NVML failed: {nvml.get('error')}", "run nvidia-smi to see why"))
    fallback = nvml.get("fallback") or {}
    if kind == "library-not-found" and not fallback.get("driver"):
        return [
            CheckResult(
                "driver",
                "driver",
                "warn",
                "no NVIDIA driver on this host (no NVML library, no nvidia kernel module, no nvidia-smi): "
                "only the CPU engine can serve here (profile cpu); GPU checks are skipped",
                "an NVIDIA driver, to serve on a GPU",
                fix,
            )
        ]
    seen = (
        f"; the driver {fallback['driver']} is visible through {fallback['source']}" if fallback.get("driver") else ""
    )
    return [
        CheckResult("driver", "driver", "fail", f"{meaning} (NVML: {nvml.get('error')}){seen}", "NVML answers", fix)
    ]
