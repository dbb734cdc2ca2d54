"""`nemolaunch probe`: run the kernels of vLLM's priority chains on this GPU, isolated, and rank them by speed.

Each kernel runs in its own child process with a timeout (launcher/child/kernel_probe.py), so an illegal
memory access, a hang or an autotuner storm takes down only that probe. A kernel is recommended only if it
ran every shape, passed the numerics check and never failed; among those, the one with the lowest geometric
mean of its time relative to the fastest kernel at each shape (decode-like and prefill-like shapes weigh the
same), because the winner at M=256 is not the winner at M=2048 (H200, 2026-11-30).
"""

from __future__ import annotations

import json
import math
import re
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from checks.facts import nvml_facts
from checks.proc import run_python
from launcher import chains as chain_table
from launcher.engine import Interpreter, resolve_python
from launcher.errors import BadInput, NotReady

CHILD = Path(__file__).resolve().parent / "child"
DECODE_M, PREFILL_M = (1, 16, 64, 256), (2048,)
DEFAULT_NK = ((4096, 4096), (14336, 4096), (4096, 14336))  # a Llama-8B-like layer: qkv/o, gate_up, down
NOISE = re.compile(r"Skipping tactic|\[Autotuner\]|Error Internal|UserWarning|falling back", re.IGNORECASE)


@dataclass
class KernelResult:
    chain: str
    kernel: str
    position: int | None  # place in vLLM's chain (None for a baseline)
    declared: bool | None
    declared_reason: str | None
    status: str  # ok, wrong, unchecked, unsupported, unavailable, failed, timed-out, crashed, not-probed
    error: str | None = None
    shapes: list[dict[str, Any]] = field(default_factory=list)
    noise_lines: int = 0
    seconds: float = 0.0

    def usable(self) -> bool:
        return self.status == "ok" and bool(self.shapes)


@dataclass
class ProbeReport:
    gpu: dict[str, Any] | None
    interpreter: Interpreter
    vllm_version: str | None
    sources: dict[str, str]
    kernels: list[KernelResult]
    recommended: dict[str, str | None]
    fastest: dict[str, str | None]
    seconds: float

    def to_json(self) -> dict[str, Any]:
        return {
            "gpu": self.gpu,
            "python": str(self.interpreter.path),
            "vllm_version": self.vllm_version,
            "chain_sources": self.sources,
            "recommended": self.recommended,
            "fastest_measured": self.fastest,
            "seconds": round(self.seconds, 1),
            "kernels": [k.__dict__ for k in self.kernels],
        }


def model_shapes(model: Path) -> list[tuple[int, int]]:
    """(N, K) of the dense GEMMs of a model's layer, from its config.json."""
    try:
        cfg = json.loads((model / "config.json").read_text())
        cfg = cfg.get("text_config", cfg)
        h, inter = int(cfg["hidden_size"]), int(cfg.get("moe_intermediate_size") or cfg["intermediate_size"])
        heads, kv = int(cfg["num_attention_heads"]), int(cfg.get("num_key_value_heads", cfg["num_attention_heads"]))
    except (OSError, KeyError, ValueError, json.JSONDecodeError) as e:
        raise BadInput(f"cannot read GEMM shapes from {model}/config.json: {e}", "give a model folder") from None
    head_dim = h // heads
    return [(h + 2 * kv * head_dim, h), (2 * inter, h), (h, inter)]


def shapes_for(chain: str, nk: list[tuple[int, int]]) -> list[list[int]]:
    """[M, N, K] per probe. GEMMs: M tokens x (N, K) weights. MoE: M tokens, expert intermediate N, hidden K.
    Attention: M sequences, N new query tokens each, K tokens of context (decode: N=1; prefill: N=K)."""
    if chain.endswith("_moe"):
        return [[m, 2048, 4096] for m in (16, 256, 2048)]
    if chain == "attention":
        return [[m, 1, 4096] for m in (1, 16, 64)] + [[1, 2048, 2048]]
    return [[m, n, k] for n, k in nk for m in DECODE_M + PREFILL_M]


def read_chains(
    python: Path, capability: tuple[int, int]
) -> tuple[dict[str, list[dict[str, Any]]], dict[str, str], str | None]:
    r = run_python(python, CHILD / "vllm_chains.py", [str(capability[0]), str(capability[1])], timeout=180)
    found = r.json() or {"vllm": None, "chains": {}, "errors": {}}
    chains, sources = {}, {}
    for name, fallback in chain_table.FALLBACK.items():
        if name in found["chains"]:
            chains[name], sources[name] = found["chains"][name], f"installed vLLM {found['vllm']}"
        else:
            why = found["errors"].get(name) or ("vLLM not importable" if not found["vllm"] else "not read")
            chains[name] = [{"name": k, "declared": None, "reason": None} for k in fallback]
            sources[name] = f"nemolaunch's table (vLLM {chain_table.FALLBACK_VERSION}); {why}"
    return chains, sources, found["vllm"]


def run_kernel(
    python: Path, spec: dict[str, Any], timeout_s: float, script: Path = CHILD / "kernel_probe.py"
) -> dict[str, Any]:
    """One kernel in one child; a hang is killed at timeout_s, a crash is classified by its exit."""
    r = run_python(python, script, [json.dumps(spec)], timeout=timeout_s)
    noise = sum(1 for line in (r.stdout + r.stderr).splitlines() if NOISE.search(line))
    if r.timed_out:
        return {
            "status": "timed-out",
            "error": f"no result within {timeout_s:.0f} s (killed)",
            "noise": noise,
            "seconds": r.elapsed_s,
        }
    result: dict[str, Any] | None = r.json()
    if result is None:
        code = r.returncode or 0
        how = f"killed by signal {-code}" if code < 0 else f"exit code {code}"
        result = {"status": "crashed", "error": f"{how}: {r.last_error()}"}
    return {**result, "noise": noise, "seconds": r.elapsed_s}


def geomean_relative(k: KernelResult) -> float:
    return math.exp(sum(math.log(s["relative"]) for s in k.shapes) / len(k.shapes))


def rank(kernels: list[KernelResult]) -> tuple[dict[str, str | None], dict[str, str | None]]:
    """Per chain: each shape's time relative to the fastest usable kernel there; then (recommended, fastest).

    fastest: lowest geometric-mean relative time among kernels that ran every shape correctly.
    recommended: the same among those vLLM can be steered to (in its chain, not declared unsupported here),
    since a kernel vLLM refuses on this GPU cannot be chosen with a profile, however fast it measured.
    """
    recommended: dict[str, str | None] = {}
    fastest: dict[str, str | None] = {}
    for chain in dict.fromkeys(k.chain for k in kernels):
        members = [k for k in kernels if k.chain == chain]
        usable = [k for k in members if k.usable()]
        best: dict[tuple[int, int, int], float] = {}
        for k in usable:
            for s in k.shapes:
                key = (s["m"], s["n"], s["k"])
                best[key] = min(best.get(key, math.inf), s["us"])
        for k in members:
            for s in k.shapes:
                fastest_here = best.get((s["m"], s["n"], s["k"]))
                s["relative"] = round(s["us"] / fastest_here, 3) if fastest_here else None
        scored = sorted((geomean_relative(k), k.kernel, k) for k in usable if k.position is not None)
        fastest[chain] = scored[0][1] if scored else None
        selectable = [name for _, name, k in scored if k.declared is not False]
        recommended[chain] = selectable[0] if selectable else None
    return recommended, fastest


def run(
    python: Path | None, model: Path | None, timeout_s: float, only: list[str] | None, progress: Callable[[str], None]
) -> ProbeReport:
    interpreter = resolve_python(python)
    start = time.monotonic()
    nvml = nvml_facts()
    gpu = nvml["gpus"][0] if nvml.get("ok") and nvml.get("gpus") else None
    capability = (gpu["capability"][0], gpu["capability"][1]) if gpu else (9, 0)
    chains, sources, vllm_version = read_chains(interpreter.path, capability)
    unknown = [c for c in only or [] if c not in chains]
    if unknown:
        raise BadInput(f"unknown chain {', '.join(unknown)}", f"pick from {', '.join(chains)}")
    kernels: list[KernelResult] = []
    for chain, members in chains.items():
        if only and chain not in only:
            continue
        entries: list[tuple[int | None, str, bool | None, str | None]] = [
            (i, m["name"], m.get("declared"), m.get("reason")) for i, m in enumerate(members)
        ]
        entries += [(None, b, None, "baseline, not in vLLM's chain") for b in chain_table.BASELINES.get(chain, [])]
        for position, name, declared, reason in entries:
            kernels.append(KernelResult(chain, name, position, declared, reason, status="not-probed"))
    if gpu is None:
        return ProbeReport(None, interpreter, vllm_version, sources, kernels, {}, {}, time.monotonic() - start)
    nk = model_shapes(model) if model else list(DEFAULT_NK)
    listed = run_python(interpreter.path, CHILD / "kernel_probe.py", ["--list"], timeout=120)
    if listed.json() is None:
        raise NotReady(
            f"the probe harness does not start in {interpreter.describe()}: {listed.last_error()}",
            "the engine's Python needs torch with CUDA",
        )
    probed = {tuple(pair) for pair in listed.json()}
    for k in kernels:
        if (k.chain, k.kernel) not in probed:
            k.error = "nemolaunch has no probe for this kernel yet"
            continue
        shapes = shapes_for(k.chain, nk)
        progress(f"{k.chain}: {k.kernel}")
        result = run_kernel(interpreter.path, {"chain": k.chain, "kernel": k.kernel, "shapes": shapes}, timeout_s)
        k.status, k.error = result["status"], result.get("error")
        k.shapes, k.noise_lines, k.seconds = result.get("shapes", []), result["noise"], round(result["seconds"], 1)
    recommended, fastest = rank(kernels)
    return ProbeReport(gpu, interpreter, vllm_version, sources, kernels, recommended, fastest, time.monotonic() - start)
