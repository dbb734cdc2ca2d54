"""The engine's Python packages from their metadata: vLLM present, its pins met, FlashInfer consistent."""

from __future__ import annotations

from packaging.markers import InvalidMarker, UndefinedEnvironmentName
from packaging.requirements import InvalidRequirement, Requirement
from packaging.utils import canonicalize_name
from packaging.version import InvalidVersion, Version

from checks.child.dists import VLLM_DISTRIBUTIONS
from checks.facts import Facts
from checks.result import CheckResult

# vLLM declares these, but only multimodal models use them; the CPU engine leaves them out on purpose because
# the index's builds are CUDA builds that break `import transformers` next to torch+cpu.
MULTIMODAL_ONLY = {"torchvision", "torchaudio", "torchcodec"}
SHOWN = (
    "torch",
    *VLLM_DISTRIBUTIONS,
    "flashinfer-python",
    "flashinfer-cubin",
    "flashinfer-jit-cache",
    "triton",
    "transformers",
)


def check(facts: Facts) -> list[CheckResult]:
    stack = facts["stack"]
    if not stack.get("ok"):
        return [
            CheckResult(
                "stack",
                "stack",
                "crash",
                f"cannot read the engine's packages: {stack.get('error')}",
                "",
                "check the interpreter given with --python",
            )
        ]
    packages: dict[str, str] = stack["packages"]
    shown = ", ".join(f"{n} {packages[n]}" for n in SHOWN if n in packages) or "none of torch/vLLM/FlashInfer"
    results = [CheckResult("stack", "stack", "pass", f"Python {stack['python_version']} at {stack['python']}: {shown}")]
    for bad in stack.get("unreadable_metadata") or []:
        results.append(
            CheckResult(
                "stack.metadata",
                "stack",
                "warn",
                f"unreadable package metadata in {bad['path']} ({bad['error']}): that package is not judged",
                "every *.dist-info/METADATA readable",
                f"reinstall the package it belongs to, or delete {bad['path']} if nothing uses it",
            )
        )
    results.append(_vllm_present(packages))
    results += _vllm_pins(stack)
    results += _flashinfer(packages, (stack.get("torch_build") or {}).get("cuda"), facts["env"])
    return results


def _vllm_present(packages: dict[str, str]) -> CheckResult:
    for dist in VLLM_DISTRIBUTIONS:
        if dist in packages:
            return CheckResult("stack.vllm", "stack", "pass", f"{dist} {packages[dist]}")
    return CheckResult(
        "stack.vllm",
        "stack",
        "fail",
        "vLLM is not installed in this interpreter",
        " or ".join(VLLM_DISTRIBUTIONS),
        "pip install vllm in the engine's venv, or point --python at it (make engine builds the CPU one)",
    )


def _vllm_pins(stack: dict[str, object]) -> list[CheckResult]:
    requires: dict[str, list[str]] = stack.get("vllm_requires") or {}  # type: ignore[assignment]
    installed: dict[str, str] = stack.get("all_packages") or {}  # type: ignore[assignment]
    markers: dict[str, str] = stack.get("markers") or {}  # type: ignore[assignment]
    results = []
    for dist, lines in requires.items():
        unmet = []
        for line in lines:
            try:
                req = Requirement(line)
                if req.marker and not req.marker.evaluate({**markers, "extra": ""}):
                    continue
            except (InvalidRequirement, InvalidMarker, UndefinedEnvironmentName):
                continue
            name = canonicalize_name(req.name)
            have = installed.get(name)
            if have is None and name in MULTIMODAL_ONLY:
                continue
            if have is None:
                unmet.append((f"{req.name}{req.specifier}", "missing"))
            elif req.specifier and not req.specifier.contains(_version(have), prereleases=True):
                unmet.append((f"{req.name}{req.specifier}", have))
        if unmet:
            listed = "; ".join(f"{r} (installed: {h})" for r, h in unmet[:8])
            fix = "pip install " + " ".join(f'"{r}"' for r, _ in unmet[:8])
            results.append(
                CheckResult(
                    "stack.vllm-pins",
                    "stack",
                    "fail",
                    f"{dist} requires {listed}",
                    f"every Requires-Dist of {dist} met",
                    fix,
                )
            )
        else:
            results.append(
                CheckResult(
                    "stack.vllm-pins",
                    "stack",
                    "pass",
                    f"the requirements of {dist} are met (multimodal-only "
                    f"{'/'.join(sorted(MULTIMODAL_ONLY))} may be absent)",
                )
            )
    return results


def _version(text: str) -> Version | str:
    try:
        return Version(text)
    except InvalidVersion:
        return text


def _flashinfer(packages: dict[str, str], torch_cuda: str | None, env: dict[str, str]) -> list[CheckResult]:
    """FlashInfer's own import-time guard (flashinfer/jit/env.py), checked without importing it."""
    python, cubin, jit = (packages.get(n) for n in ("flashinfer-python", "flashinfer-cubin", "flashinfer-jit-cache"))
    results = []
    if python is None:
        if cubin or jit:
            stray = " and ".join(
                f"{n} {v}" for n, v in (("flashinfer-cubin", cubin), ("flashinfer-jit-cache", jit)) if v
            )
            results.append(
                CheckResult(
                    "stack.flashinfer",
                    "stack",
                    "warn",
                    f"{stray} installed without flashinfer-python",
                    "",
                    "pip uninstall -y flashinfer-cubin flashinfer-jit-cache",
                )
            )
        return results
    skip = python == "0.0.0+unknown"  # editable/source builds are exempt from the guard
    problems, fixes = [], []
    if cubin and not skip and cubin != python:
        problems.append(f"flashinfer-cubin {cubin} != flashinfer-python {python}")
        fixes.append(
            f"pip install flashinfer-cubin=={python} (FlashInfer's own wheel index since 0.6.14), "
            "or pip uninstall -y flashinfer-cubin"
        )
    if jit and not skip:
        public, _, label = jit.partition("+")
        if not jit.startswith(python):
            problems.append(f"flashinfer-jit-cache {jit} does not match flashinfer-python {python}")
            fixes.append(f"pip install flashinfer-jit-cache=={python}+{label or 'cuXYZ'}")
        cu = "cu" + torch_cuda.replace(".", "") if torch_cuda else None
        if label and cu and label != cu:
            problems.append(f"flashinfer-jit-cache is built for {label}, torch for {cu}")
            fixes.append(f"pip install flashinfer-jit-cache=={public}+{cu}")
    if problems:
        results.append(
            CheckResult(
                "stack.flashinfer",
                "stack",
                "fail",
                "; ".join(problems) + " (FlashInfer refuses to import)",
                "the same version of every FlashInfer package",
                "; ".join(fixes),
            )
        )
    else:
        have = ", ".join(f"{n} {v}" for n, v in (("cubin", cubin), ("jit-cache", jit)) if v)
        results.append(
            CheckResult(
                "stack.flashinfer", "stack", "pass", f"flashinfer-python {python}" + (f" with {have}" if have else "")
            )
        )
    if "FLASHINFER_DISABLE_VERSION_CHECK" in env:
        results.append(
            CheckResult(
                "stack.flashinfer-check-disabled",
                "stack",
                "warn",
                f"FLASHINFER_DISABLE_VERSION_CHECK={env['FLASHINFER_DISABLE_VERSION_CHECK']} turns FlashInfer's "
                "version guard off (any value does, even 0); mismatched kernels then fail later, often as "
                "illegal memory accesses",
                "the variable unset",
                "unset FLASHINFER_DISABLE_VERSION_CHECK and make the FlashInfer packages match",
            )
        )
    return results
