"""The CUDA chain: driver >= torch's CUDA, torch's arch list covers this GPU, FlashInfer's nvcc >= 12.9 on SM12x."""

from __future__ import annotations

from typing import Any

from packaging.version import Version

from checks.facts import Facts
from checks.result import CheckResult

# minimum Linux driver for each CUDA toolkit (CUDA release notes, "CUDA Toolkit and Minimum Required Driver")
DRIVER_FLOORS = {
    "12.0": "525.60.13",
    "12.1": "530.30.02",
    "12.2": "535.54.03",
    "12.3": "545.23.06",
    "12.4": "550.54.14",
    "12.5": "555.42.02",
    "12.6": "560.28.03",
    "12.8": "570.26",
    "12.9": "575.51.03",
    "13.0": "580.65.06",
}


def check(facts: Facts) -> list[CheckResult]:
    nvml, stack = facts["nvml"], facts["stack"]
    torch_cuda = (stack.get("torch_build") or {}).get("cuda")
    torch_version = stack.get("packages", {}).get("torch")
    if not nvml.get("ok"):
        return [
            CheckResult(
                "cuda",
                "cuda",
                "skip",
                f"no GPU driver; torch {torch_version or 'absent'} "
                f"({'CUDA ' + torch_cuda if torch_cuda else 'CPU build'})",
            )
        ]
    results = [_driver_vs_torch(nvml, torch_version, torch_cuda)]
    results += [_arch_coverage(facts, gpu) for gpu in nvml.get("gpus", [])[:1]]
    results.append(_jit_nvcc(facts))
    return results


def _driver_vs_torch(nvml: dict[str, str], torch_version: str | None, torch_cuda: str | None) -> CheckResult:
    driver, driver_cuda = nvml["driver"], nvml["cuda_driver"]
    if not torch_version:
        return CheckResult("cuda.driver", "cuda", "skip", "torch is not installed in the engine's Python")
    if not torch_cuda:
        return CheckResult(
            "cuda.driver",
            "cuda",
            "fail",
            f"torch {torch_version} is a CPU build on a GPU host",
            "a CUDA build of torch",
            "install the CUDA build vLLM pins (e.g. pip install torch "
            "--index-url <the PyTorch CUDA index for cu128 or cu130>)",
        )
    floor = DRIVER_FLOORS.get(torch_cuda)
    observed = f"driver {driver} supports CUDA {driver_cuda}; torch {torch_version} is built with CUDA {torch_cuda}"
    expected = f"driver CUDA >= {torch_cuda}" + (f" (driver >= {floor})" if floor else "")
    if Version(driver_cuda) < Version(torch_cuda) or (floor and Version(driver) < Version(floor)):
        return CheckResult(
            "cuda.driver",
            "cuda",
            "fail",
            observed,
            expected,
            f"upgrade the driver to >= {floor or 'the release for CUDA ' + torch_cuda}, or install "
            f"a torch built for CUDA <= {driver_cuda}",
        )
    return CheckResult("cuda.driver", "cuda", "pass", observed, expected)


def _arch_coverage(facts: Facts, gpu: dict[str, Any]) -> CheckResult:
    major: int = gpu["capability"][0]
    minor: int = gpu["capability"][1]
    torch_probe = facts["imports"].get("probes", {}).get("torch") or {}
    archs: list[str] = torch_probe.get("arch_list") or []
    if not archs:
        return CheckResult("cuda.arch", "cuda", "skip", "torch's arch list is unknown (torch did not import)")
    sass = [a for a in archs if a.startswith("sm_")]
    ptx = [a for a in archs if a.startswith("compute_")]
    # a cubin for X.y runs on X.z with z >= y (arch-specific 'a' variants excepted); PTX for <= cc JIT-compiles
    native = [a for a in sass if _cc(a)[0] == major and _cc(a)[1] <= minor and not a.endswith("a")]
    jit = [a for a in ptx if _cc(a) <= (major, minor)]
    observed = f"torch arch list {' '.join(archs)}; GPU is sm_{major}{minor}"
    if native or jit:
        how = f"runs {native[-1]} code" if native else f"JIT-compiles {jit[-1]} PTX at first use (slow start)"
        return CheckResult(
            "cuda.arch",
            "cuda",
            "pass" if native else "warn",
            f"{observed}: {how}",
            f"sm_{major}{minor} (or sm_{major}x) in torch's arch list",
            "" if native else "install a torch built with this GPU's arch (CUDA 12.8+ wheels for SM120)",
        )
    return CheckResult(
        "cuda.arch",
        "cuda",
        "fail",
        observed,
        f"sm_{major}{minor} in torch's arch list",
        "install a torch whose arch list includes this GPU (CUDA 12.8+ for sm_120, cu130 for sm_121); "
        "otherwise every kernel fails with 'no kernel image is available'",
    )


def _cc(arch: str) -> tuple[int, int]:
    digits = "".join(ch for ch in arch.split("_")[1] if ch.isdigit())
    return int(digits[:-1]), int(digits[-1])


def _jit_nvcc(facts: Facts) -> CheckResult:
    nvcc = facts["nvcc"]
    packages = facts["stack"].get("packages", {})
    gpus = facts["nvml"].get("gpus", [])
    sm12 = any((g["capability"] or [0])[0] == 12 for g in gpus)
    where = f"nvcc {nvcc['version']} at {nvcc['path']} (via {nvcc['source']})" if nvcc["path"] else "no nvcc found"
    if "flashinfer-python" not in packages:
        return CheckResult("cuda.nvcc", "cuda", "pass", f"{where}; FlashInfer not installed, so no JIT")
    if not sm12:
        return CheckResult("cuda.nvcc", "cuda", "pass", f"{where} for FlashInfer's JIT")
    ok = nvcc["version"] and Version(nvcc["version"]) >= Version("12.9")
    if ok:
        return CheckResult("cuda.nvcc", "cuda", "pass", f"{where} for FlashInfer's JIT", ">= 12.9 on SM12x")
    has_cache = "flashinfer-jit-cache" in packages
    return CheckResult(
        "cuda.nvcc",
        "cuda",
        "warn" if has_cache else "fail",
        f"{where}; FlashInfer JIT needs CUDA >= 12.9 to build SM 12.x kernels"
        + (" (flashinfer-jit-cache covers the prebuilt ones)" if has_cache else ""),
        ">= 12.9 on SM12x",
        "install a CUDA 12.9+ or 13 toolkit and export CUDA_HOME=/usr/local/cuda-13.0 (or pip install "
        "the flashinfer-jit-cache for your CUDA)",
    )
