"""import torch / vllm / torchvision in child processes: what metadata cannot tell (a broken wheel, no CUDA)."""

from __future__ import annotations

from checks.facts import Facts
from checks.result import CheckResult

FIXES = {
    "torch": "reinstall the torch your vLLM pins (pip install --force-reinstall torch==<pin>) in the engine's venv",
    "vllm": "read the error; nemolaunch diagnose on the traceback often names it; reinstall vllm for your torch",
    "torchvision": "pip uninstall -y torchvision (text models do not need it), or install the torchvision made for "
    "your torch",
}


def check(facts: Facts) -> list[CheckResult]:
    imports = facts["imports"]
    probes = imports.get("probes", {})
    when = f" (cached {imports['at']})" if imports.get("cached") else ""
    gpu_host = facts["nvml"].get("ok", False)
    results = []
    for module, probe in probes.items():
        cid = f"import.{module}"
        if probe.get("ok"):
            detail = f"import {module} {probe.get('version')} works{when}"
            if module == "torch" and gpu_host:
                if not probe.get("cuda_available"):
                    results.append(
                        CheckResult(
                            cid,
                            "import",
                            "fail",
                            detail + ", but torch.cuda.is_available() is False",
                            "CUDA usable from torch",
                            "check the driver and CUDA_VISIBLE_DEVICES; a CPU build of torch cannot use the GPU",
                        )
                    )
                    continue
                detail += f", CUDA {probe.get('cuda')} works on the GPU (capability {probe.get('device_capability')})"
            results.append(CheckResult(cid, "import", "pass", detail))
            continue
        error = probe.get("error", "")
        hint = ""
        if "torchvision::nms does not exist" in error:
            hint = " (torchvision was built for another torch)"
        results.append(
            CheckResult(
                cid,
                "import",
                "fail",
                f"import {module} failed{when}: {error}{hint}",
                f"import {module} works",
                FIXES[module],
            )
        )
    if not probes:
        results.append(CheckResult("import", "import", "skip", "nothing to import (no torch or vLLM installed)"))
    return results
