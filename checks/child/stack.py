"""The Python stack of the interpreter that runs this script, read from package metadata without importing
anything heavy. Prints one JSON object. Run by the engine's interpreter: python -I stack.py"""

import importlib.metadata
import importlib.util
import json
import os
import platform
import re
import sys
from pathlib import Path

from dists import VLLM_DISTRIBUTIONS

INTERESTING = re.compile(
    r"^(torch|torchvision|torchaudio|torchcodec|flashinfer-.*|triton|"
    r"nvidia-.*|transformers|tokenizers|xformers|sgl-kernel|deep-gemm|cuda-python)$"
)


def interesting(name: str) -> bool:
    return name in VLLM_DISTRIBUTIONS or bool(INTERESTING.match(name))


def normalize(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def torch_build() -> dict[str, object]:
    """torch's version.py holds the CUDA it was built with; reading it does not import torch."""
    spec = importlib.util.find_spec("torch")
    if spec is None or not spec.origin:
        return {}
    try:
        text = (Path(spec.origin).parent / "version.py").read_text(encoding="utf-8", errors="replace")
    except OSError:  # a broken or unusual torch install: report what metadata says, not a crash
        return {}
    found = dict(re.findall(r"^(\w+)\s*(?::\s*[^=]+)?=\s*'([^']*)'", text, re.MULTILINE))
    return {"cuda": found.get("cuda"), "git_version": found.get("git_version")}


def flashinfer_env_vars() -> list[str]:
    """Every FLASHINFER_* name FlashInfer's own source mentions (it has no registry like vLLM's envs.py)."""
    spec = importlib.util.find_spec("flashinfer")
    if spec is None or not spec.submodule_search_locations:
        return []
    found: set[str] = set()
    for path in Path(next(iter(spec.submodule_search_locations))).rglob("*.py"):
        found.update(re.findall(r"FLASHINFER_[A-Z0-9_]+", path.read_text(encoding="utf-8", errors="replace")))
    return sorted(found)


def marker_environment() -> dict[str, str]:
    """What packaging's markers evaluate against (PEP 508), for this interpreter."""
    impl = sys.implementation
    return {
        "implementation_name": impl.name,
        "implementation_version": f"{impl.version.major}.{impl.version.minor}.{impl.version.micro}",
        "os_name": os.name,
        "platform_machine": platform.machine(),
        "platform_release": platform.release(),
        "platform_system": platform.system(),
        "platform_version": platform.version(),
        "python_full_version": platform.python_version(),
        "platform_python_implementation": platform.python_implementation(),
        "python_version": ".".join(platform.python_version_tuple()[:2]),
        "sys_platform": sys.platform,
    }


def main() -> None:
    everything = {}
    requires: dict[str, list[str]] = {}
    unreadable = []  # one corrupt METADATA must not hide every other package
    for dist in importlib.metadata.distributions():
        try:
            name = normalize(dist.metadata["Name"] or "")
            version = dist.version
            reqs = dist.requires if name in VLLM_DISTRIBUTIONS else None
        except Exception as e:
            name, version, reqs = "", None, None
            error = f"{type(e).__name__}: {e}"[:200]
        else:
            error = "no Name or Version"
        if not name or not version:
            unreadable.append({"path": str(getattr(dist, "_path", "?")), "error": error})
            continue
        everything[name] = version
        if reqs is not None or name in VLLM_DISTRIBUTIONS:
            requires[name] = reqs or []
    print(
        json.dumps(
            {
                "python": sys.executable,
                "python_version": platform.python_version(),
                "packages": {k: v for k, v in sorted(everything.items()) if interesting(k)},
                "all_packages": dict(sorted(everything.items())),
                "unreadable_metadata": unreadable,
                "flashinfer_env_vars": flashinfer_env_vars(),
                "vllm_requires": requires,
                "torch_build": torch_build(),
                "markers": marker_environment(),
            }
        )
    )


if __name__ == "__main__":
    main()
