"""Import probes, each in this child (which the parent kills on timeout): python -I imports.py MODULE
Prints one JSON object: ok, error, and what the module reports about itself."""

import json
import sys
import traceback


def probe_torch() -> dict[str, object]:
    import torch

    out: dict[str, object] = {
        "version": torch.__version__,
        "cuda": torch.version.cuda,
        "arch_list": torch.cuda.get_arch_list() if torch.version.cuda else [],
    }
    if torch.version.cuda:  # the NCCL torch was built with: the one vLLM's workers all-reduce through
        try:
            out["nccl"] = ".".join(str(v) for v in torch.cuda.nccl.version())
        except Exception as e:  # a build without NCCL
            out["nccl_error"] = f"{type(e).__name__}: {e}"
    out["cuda_available"] = torch.cuda.is_available()
    if out["cuda_available"]:
        out["device_capability"] = list(torch.cuda.get_device_capability(0))
        torch.zeros(1, device="cuda")  # the first kernel launch: fails when no arch matches
    return out


def probe_vllm() -> dict[str, object]:
    import vllm

    return {"version": getattr(vllm, "__version__", None)}


def probe_torchvision() -> dict[str, object]:
    import torchvision
    import torchvision.ops  # registers torchvision::nms; fails when built for another torch

    return {"version": torchvision.__version__}


PROBES = {"torch": probe_torch, "vllm": probe_vllm, "torchvision": probe_torchvision}

if __name__ == "__main__":
    module = sys.argv[1]
    try:
        result = {"ok": True, **PROBES[module]()}
    except ModuleNotFoundError as e:
        result = {"ok": False, "missing": True, "error": f"{type(e).__name__}: {e}"}
    except BaseException as e:  # any failure is the finding
        last = traceback.format_exception_only(type(e), e)[-1].strip()
        result = {"ok": False, "error": last[:500]}
    print(json.dumps(result))
