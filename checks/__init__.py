"""Environment checks: one small module per check, each judging the facts gathered by checks.facts.

REGISTRY is the order doctor runs and prints them in. A check returns CheckResults; it never prints. A result's
id is its check's id, or that id and a dot and what it looked at (`import.torch`), and its category is its check's
id: the names `--only` and `--list-checks` use.
"""

from __future__ import annotations

from collections.abc import Callable

from checks import (
    cuda,
    driver,
    envvars,
    gpu,
    host,
    import_probes,
    infiniband,
    lockfile,
    memory,
    nccl,
    parallel,
    python_stack,
    shm,
    topology,
)
from checks.facts import Facts
from checks.result import CheckResult

Check = Callable[[Facts], list[CheckResult]]

REGISTRY: dict[str, tuple[str, Check]] = {
    "driver": ("NVIDIA driver through NVML (or the kernel module, or nvidia-smi)", driver.check),
    "gpu": ("GPUs: family, memory, persistence, ECC, MIG, CUDA_VISIBLE_DEVICES", gpu.check),
    "cuda": ("driver CUDA >= torch CUDA, torch arch list, FlashInfer JIT nvcc", cuda.check),
    "stack": ("Python packages: vLLM, its pins, FlashInfer consistency", python_stack.check),
    "import": ("import torch / vllm / torchvision in child processes", import_probes.check),
    "env": ("VLLM_* / FLASHINFER_* variables the installed stack does not read", envvars.check),
    "memory": ("weights vs GPU memory and graph-capture headroom (--model)", memory.check),
    "topology": (
        "several GPUs: models, NVLink/PCIe and P2P between every pair, CUDA_VISIBLE_DEVICES order",
        topology.check,
    ),
    "shm": ("/dev/shm size (NCCL and vLLM's message queues; a container's 64 MB breaks them)", shm.check),
    "nccl": ("NCCL version in the engine's torch, NCCL_* variables that disable transports", nccl.check),
    "ib": ("InfiniBand/RoCE devices and port state (NCCL between nodes)", infiniband.check),
    "parallel": (
        "a profile's TP/PP/DP vs the model's heads and layers and the visible GPUs (--profile)",
        parallel.check,
    ),
    "lock": ("installed versions vs a lock (--lock)", lockfile.check),
    "host": ("OS, CPU, memory, free disk", host.check),
}

ALIASES = {"imports": "import"}  # earlier spellings `--only` still accepts


def run_checks(facts: Facts, only: list[str] | None = None) -> list[CheckResult]:
    """Every registered check in order; a check that raises is reported as crash and the rest still run."""
    results: list[CheckResult] = []
    for check_id, (_, check) in REGISTRY.items():
        if only and check_id not in only:
            continue
        try:
            results += check(facts)
        except Exception as e:  # a bug in one check must not hide the others
            results.append(
                CheckResult(
                    check_id,
                    check_id,
                    "crash",
                    f"the check raised {type(e).__name__}: {e}",
                    "",
                    "report this to nemolaunch with nemolaunch -v doctor",
                )
            )
    return results
