"""Facts about this host and the engine's Python, gathered once; checks only judge them.

Gathering touches the system (NVML, /proc, child processes); judging is pure, so a facts document
recorded on a real machine (doctor --json keeps it under "facts") can be judged again in tests.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import platform
import re
import shutil
import time
from collections.abc import Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict
from pathlib import Path
from typing import Any

import psutil

from checks import child
from checks.child.dists import VLLM_DISTRIBUTIONS
from checks.files import atomic_write_text, cache_dir
from checks.model_config import ConfigError, read_model_config, size
from checks.proc import run_child, run_python
from checks.secrets import redact_env
from checks.seqmem import sequence_memory

CHILD_DIR = Path(child.__file__).resolve().parent
IMPORT_TIMEOUT_S = 120.0
ENV_PREFIXES = ("VLLM_", "FLASHINFER_", "CUDA_", "NCCL_", "TORCH_CUDA_ARCH_LIST", "TRITON_", "HF_", "NVIDIA_")

Facts = dict[str, Any]


def redact(environ: Mapping[str, str]) -> dict[str, str]:
    """The environment variables that matter to serving, with secrets hidden: by name (*_TOKEN, *_PASS, *_PWD,
    *_AUTH, ...) and by value (URL passwords, token shapes): checks.secrets decides."""
    return redact_env({k: v for k, v in sorted(environ.items()) if k.startswith(ENV_PREFIXES)})


def host_facts() -> dict[str, Any]:
    disk = shutil.disk_usage(Path.home())
    return {
        "hostname": platform.node(),
        "os": f"{platform.system()} {platform.release()}",
        "distribution": _os_release(),
        "machine": platform.machine(),
        "cpu_count": os.cpu_count(),
        "memory_gib": round(psutil.virtual_memory().total / 2**30, 1),
        "disk_free_gib": round(disk.free / 2**30, 1),
        "disk_path": str(Path.home()),
    }


def _os_release() -> str | None:
    try:
        text = Path("/etc/os-release").read_text()
    except OSError:
        return None
    m = re.search(r'^PRETTY_NAME="?([^"\n]*)', text, re.MULTILINE)
    return m.group(1) if m else None


def nvml_facts() -> dict[str, Any]:
    """Driver and GPUs through NVML; on failure, the kind of failure, then the non-NVML driver ladder."""
    out: dict[str, Any] = {"ok": False}
    try:
        import pynvml
    except ImportError as e:
        out.update(error_kind="bindings-missing", error=str(e))
        return {**out, "fallback": driver_fallback()}
    try:
        pynvml.nvmlInit()
    except pynvml.NVMLError as e:
        kind = {
            "NVMLError_LibraryNotFound": "library-not-found",
            "NVMLError_DriverNotLoaded": "driver-not-loaded",
            "NVMLError_NoPermission": "no-permission",
            "NVMLError_LibRmVersionMismatch": "version-mismatch",
        }.get(type(e).__name__, "other")
        out.update(error_kind=kind, error=str(e))
        return {**out, "fallback": driver_fallback()}
    try:
        cuda = pynvml.nvmlSystemGetCudaDriverVersion_v2()
        out.update(
            ok=True,
            driver=_text(pynvml.nvmlSystemGetDriverVersion()),
            cuda_driver=f"{cuda // 1000}.{cuda % 1000 // 10}",
        )
        out["gpus"] = [_gpu(pynvml, i) for i in range(pynvml.nvmlDeviceGetCount())]
        out["links"] = _links(pynvml, len(out["gpus"]))
    except pynvml.NVMLError as e:  # after a good init: a GPU fallen off the bus, a driver being unloaded
        kind = "gpu-lost" if type(e).__name__ == "NVMLError_GpuIsLost" else "after-init"
        out = {"ok": False, "error_kind": kind, "error": f"{type(e).__name__}: {e}", "fallback": driver_fallback()}
    finally:
        with contextlib.suppress(pynvml.NVMLError):
            pynvml.nvmlShutdown()
    return out


def _text(value: str | bytes) -> str:
    return value.decode() if isinstance(value, bytes) else value


def _gpu(pynvml: Any, index: int) -> dict[str, Any]:
    handle = pynvml.nvmlDeviceGetHandleByIndex(index)

    def field(fn: str, *args: Any) -> Any:
        try:
            return getattr(pynvml, fn)(handle, *args)
        except pynvml.NVMLError:
            return None  # not supported on this GPU

    cc = field("nvmlDeviceGetCudaComputeCapability")
    ecc, mig = field("nvmlDeviceGetEccMode"), field("nvmlDeviceGetMigMode")
    mem = field("nvmlDeviceGetMemoryInfo")
    pci = field("nvmlDeviceGetPciInfo")
    return {
        "index": index,
        "name": _text(pynvml.nvmlDeviceGetName(handle)),
        "uuid": _text(field("nvmlDeviceGetUUID") or ""),
        "pci_bus_id": _text(pci.busId) if pci is not None else None,
        "capability": list(cc) if cc else None,
        "memory_total_mib": mem.total // 2**20 if mem else None,
        "memory_used_mib": mem.used // 2**20 if mem else None,
        # the memory bandwidth's factors (launcher/roofline.py): clock x bus width / 8 x 2
        "memory_bus_width_bits": field("nvmlDeviceGetMemoryBusWidth"),
        "memory_clock_max_mhz": field("nvmlDeviceGetMaxClockInfo", pynvml.NVML_CLOCK_MEM),
        "persistence": field("nvmlDeviceGetPersistenceMode"),
        "ecc_current": ecc[0] if ecc else None,
        "mig_current": mig[0] if mig else None,
    }


# NVML's names for the closest common ancestor of two GPUs (nvidia-smi topo -m's abbreviations)
TOPOLOGY_LEVELS = {0: "internal", 10: "PIX", 20: "PXB", 30: "PHB", 40: "NODE", 50: "SYS"}
P2P_STATUS = {
    0: "ok",
    1: "chipset-not-supported",
    2: "gpu-not-supported",
    3: "iohub-topology",
    4: "disabled",
    5: "unknown",
}


def _links(pynvml: Any, count: int) -> list[dict[str, Any]]:
    """Every pair of GPUs: their common PCIe ancestor, P2P read/write status and active NVLinks between them."""
    handles = [pynvml.nvmlDeviceGetHandleByIndex(i) for i in range(count)]

    def call(fn: str, *args: Any) -> Any:
        try:
            return getattr(pynvml, fn)(*args)
        except (pynvml.NVMLError, AttributeError):
            return None

    peers: list[list[str]] = []  # per GPU: the remote PCI bus id of each active NVLink
    for handle in handles:
        remote = []
        for link in range(getattr(pynvml, "NVML_NVLINK_MAX_LINKS", 18)):
            if call("nvmlDeviceGetNvLinkState", handle, link) == 1:
                pci = call("nvmlDeviceGetNvLinkRemotePciInfo_v2", handle, link)
                remote.append(_text(pci.busId) if pci is not None else "?")
        peers.append(remote)
    bus = [_text(b.busId) if (b := call("nvmlDeviceGetPciInfo", h)) is not None else None for h in handles]
    pairs = []
    for a in range(count):
        for b in range(a + 1, count):
            level = call("nvmlDeviceGetTopologyCommonAncestor", handles[a], handles[b])
            p2p = {
                kind: P2P_STATUS.get(status, str(status)) if status is not None else None
                for kind, index in (("read", 0), ("write", 1))
                for status in [call("nvmlDeviceGetP2PStatus", handles[a], handles[b], index)]
            }
            nvlinks = sum(1 for remote in peers[a] if bus[b] and remote.lower() == str(bus[b]).lower())
            pairs.append(
                {
                    "a": a,
                    "b": b,
                    "ancestor": TOPOLOGY_LEVELS.get(level, str(level)) if level is not None else None,
                    "p2p_read": p2p["read"],
                    "p2p_write": p2p["write"],
                    "nvlinks": nvlinks,
                }
            )
    return pairs


def shm_facts(path: Path = Path("/dev/shm")) -> dict[str, Any]:
    """The size of /dev/shm: NCCL's intra-node transport and vLLM's message queues live there."""
    try:
        usage = shutil.disk_usage(path)
    except OSError as e:
        return {"path": str(path), "error": str(e)}
    return {"path": str(path), "total_mib": usage.total // 2**20, "free_mib": usage.free // 2**20}


def infiniband_facts(root: Path = Path("/sys/class/infiniband")) -> dict[str, Any]:
    """InfiniBand / RoCE devices and the state of each port (what NCCL's IB transport would use)."""
    if not root.is_dir():
        return {"present": False, "devices": []}
    devices = []
    for dev in sorted(root.iterdir()):
        ports = []
        for port in sorted((dev / "ports").glob("*")):
            state = _read(port / "state")
            ports.append({"port": port.name, "state": state.split(":")[-1].strip() if state else None})
        devices.append({"name": dev.name, "ports": ports})
    return {"present": True, "devices": devices}


def _read(path: Path) -> str | None:
    try:
        return path.read_text().strip()
    except OSError:
        return None


def driver_fallback() -> dict[str, Any]:
    """uv's ladder: /sys/module/nvidia/version, /proc/driver/nvidia/version, then nvidia-smi."""
    for path in ("/sys/module/nvidia/version", "/proc/driver/nvidia/version"):
        try:
            text = Path(path).read_text()
        except OSError:
            continue
        m = re.search(r"(\d{3}\.\d+(?:\.\d+)?)", text)
        if m:
            return {"driver": m.group(1), "source": path}
    if shutil.which("nvidia-smi"):
        r = run_child(["nvidia-smi", "--query-gpu=driver_version", "--format=csv,noheader"], timeout=15)
        if r.ok and r.stdout.strip():
            return {"driver": r.stdout.split()[0], "source": "nvidia-smi"}
        return {"driver": None, "source": "nvidia-smi", "error": (r.stderr or r.stdout).strip()[:300]}
    return {"driver": None, "source": None}


def nvcc_facts(environ: Mapping[str, str]) -> dict[str, Any]:
    """The nvcc FlashInfer's JIT would use: $CUDA_HOME, then PATH, then /usr/local/cuda."""
    candidates = []
    if environ.get("CUDA_HOME"):
        candidates.append((Path(environ["CUDA_HOME"]) / "bin" / "nvcc", "$CUDA_HOME"))
    on_path = shutil.which("nvcc", path=environ.get("PATH"))
    if on_path:
        candidates.append((Path(on_path), "PATH"))
    candidates.append((Path("/usr/local/cuda/bin/nvcc"), "/usr/local/cuda"))
    for path, source in candidates:
        if path.is_file():
            r = run_child([path, "--version"], timeout=15)
            m = re.search(r"release (\d+\.\d+)", r.stdout)
            return {"path": str(path), "source": source, "version": m.group(1) if m else None}
    return {"path": None, "source": None, "version": None}


def stack_facts(python: Path) -> dict[str, Any]:
    r = run_python(python, CHILD_DIR / "stack.py", timeout=30)
    data = r.json()
    if data is None:
        return {"ok": False, "error": "timed out" if r.timed_out else r.last_error()}
    return {"ok": True, **data}


def surface_facts(python: Path) -> dict[str, Any]:
    r = run_python(python, CHILD_DIR / "vllm_surface.py", timeout=30)
    data: dict[str, Any] | None = r.json()
    return data if data is not None else {"error": r.last_error()}


def import_facts(python: Path, stack: dict[str, Any], use_cache: bool) -> dict[str, Any]:
    """import torch / vllm / torchvision, each in a child with a timeout, in parallel. Importing vLLM takes
    seconds, so results are cached until the installed packages (or the GPU variables) change."""
    fingerprint = hashlib.sha256(
        json.dumps(
            [
                str(python),
                stack.get("all_packages", stack.get("packages")),
                {k: os.environ.get(k) for k in ("CUDA_VISIBLE_DEVICES", "LD_LIBRARY_PATH")},
            ],
            sort_keys=True,
        ).encode()
    ).hexdigest()[:16]
    cache = cache_dir("doctor") / f"{fingerprint}.json"
    if use_cache and cache.is_file():
        return {**json.loads(cache.read_text()), "cached": True}
    packages = stack.get("packages", {})
    wanted = [m for m in ("torch", "torchvision") if m in packages]
    wanted += ["vllm"] if any(d in packages for d in VLLM_DISTRIBUTIONS) else []

    def probe(module: str) -> tuple[str, dict[str, Any]]:
        r = run_python(python, CHILD_DIR / "imports.py", [module], timeout=IMPORT_TIMEOUT_S)
        if r.timed_out:
            return module, {"ok": False, "error": f"import took over {IMPORT_TIMEOUT_S:.0f} s (killed)"}
        answer = r.json()
        return module, answer if answer is not None else {"ok": False, "error": f"crashed: {r.last_error()}"}

    with ThreadPoolExecutor(max_workers=3) as pool:
        results = dict(pool.map(probe, wanted))
    doc = {"probes": results, "at": time.strftime("%Y-%m-%dT%H:%M:%S%z")}
    atomic_write_text(cache, json.dumps(doc))
    return {**doc, "cached": False}


def model_facts(model: Path | None) -> dict[str, Any] | None:
    if model is None:
        return None
    config = model / "config.json"
    weights = sorted(model.glob("*.safetensors"))
    facts: dict[str, Any] = {
        "path": str(model),
        "config": config.is_file(),
        "weight_files": len(weights),
        "weight_bytes": sum(w.stat().st_size for w in weights),
    }
    if config.is_file():
        try:
            cfg = read_model_config(config)
            facts["architectures"] = cfg.get("architectures")
            for key in ("num_attention_heads", "num_key_value_heads", "num_hidden_layers"):
                facts[key] = size(cfg, key, config, limit=1 << 20)
            quantization = cfg.get("quantization_config")
            facts["quantization"] = quantization.get("quant_method") if isinstance(quantization, dict) else None
            seq = sequence_memory(cfg)
            facts["sequence_memory"] = asdict(seq) if seq else None
        except ConfigError as e:
            facts["config_error"] = str(e)
    return facts


def gather(python: Path, environ: Mapping[str, str], model: Path | None, use_cache: bool = True) -> Facts:
    with ThreadPoolExecutor(max_workers=4) as pool:
        nvml = pool.submit(nvml_facts)
        stack = pool.submit(stack_facts, python)
        surface = pool.submit(surface_facts, python)
        nvcc = pool.submit(nvcc_facts, environ)
        stack_result = stack.result()
        facts: Facts = {
            "host": host_facts(),
            "nvml": nvml.result(),
            "stack": stack_result,
            "vllm_surface": surface.result(),
            "nvcc": nvcc.result(),
            "env": redact(environ),
            "model": model_facts(model),
            "shm": shm_facts(),
            "infiniband": infiniband_facts(),
        }
    facts["imports"] = import_facts(python, stack_result, use_cache) if stack_result.get("ok") else {"probes": {}}
    return facts
