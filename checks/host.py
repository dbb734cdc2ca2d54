"""The host: OS, CPU, memory, free disk for weights and caches."""

from __future__ import annotations

from checks.facts import Facts
from checks.result import CheckResult

MIN_FREE_DISK_GIB = 50.0  # a 70-120B quantized model is 40-80 GB on disk, plus compile and JIT caches


def check(facts: Facts) -> list[CheckResult]:
    h = facts["host"]
    observed = (
        f"{h['distribution'] or h['os']} ({h['machine']}), {h['cpu_count']} CPUs, {h['memory_gib']} GiB RAM, "
        f"{h['disk_free_gib']} GiB free at {h['disk_path']}"
    )
    if h["disk_free_gib"] < MIN_FREE_DISK_GIB:
        return [
            CheckResult(
                "host",
                "host",
                "warn",
                observed,
                f">= {MIN_FREE_DISK_GIB:.0f} GiB free for weights and caches",
                "free disk space or point HF_HOME and the caches at a larger disk",
            )
        ]
    return [CheckResult("host", "host", "pass", observed)]
