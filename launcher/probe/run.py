"""`nemolaunch probe`: run the kernels of vLLM's priority chains on this GPU, isolated, and rank them by speed.

The run: pick the chains and the layer (selection.py), start FlashInfer's JIT builds first (builds.py), then the
harness (harness.py), whose imports overlap with reading vLLM's chains here; hand it the kernels, rank what it
measured (report.py). The report keeps a run-relative timeline: harness ready, chains read, each build's start and
end (with ninja's per-unit times), each kernel's start, set-up done, let through and end.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path
from typing import Any

from checks.facts import nvml_facts
from checks.proc import Conversation, run_python
from launcher.engine import resolve_python
from launcher.errors import BadInput
from launcher.paths import CHILD_DIR
from launcher.probe import chains as chain_table
from launcher.probe.builds import BUILD_WAIT_S, build_timeline, start_builds
from launcher.probe.harness import STARTS, probe_all
from launcher.probe.report import KernelResult, ProbeReport, rank, ties
from launcher.probe.selection import Layer, chains_for, model_layer, model_quantization, profile_quantization

# what the CLI takes from here (the stage's entry point, its defaults, a profile's quantization)
__all__ = ["BUILD_WAIT_S", "STARTS", "KernelResult", "ProbeReport", "profile_quantization", "read_chains", "run"]


def read_chains(
    python: Path, capability: tuple[int, int]
) -> tuple[dict[str, list[dict[str, Any]]], dict[str, str], str | None]:
    """vLLM's chains as the installed vLLM orders them for this capability (child/vllm_chains.py); a chain it
    cannot read comes from nemolaunch's table, saying why."""
    r = run_python(python, CHILD_DIR / "vllm_chains.py", [str(capability[0]), str(capability[1])], timeout=180)
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


def chain_members(chains: dict[str, list[dict[str, Any]]], selected: dict[str, str]) -> list[KernelResult]:
    """Every kernel of the selected chains in vLLM's order, then the chain's baselines; none measured yet."""
    kernels: list[KernelResult] = []
    for chain, members in chains.items():
        if chain not in selected:
            continue
        entries: list[tuple[int | None, str, bool | None, str | None]] = [
            (i, m["name"], m.get("declared"), m.get("reason")) for i, m in enumerate(members)
        ]
        entries += [(None, b, None, "baseline, not in vLLM's chain") for b in chain_table.BASELINES.get(chain, [])]
        for position, name, declared, reason in entries:
            kernels.append(KernelResult(chain, name, position, declared, reason, status="not-probed"))
    return kernels


def run(
    python: Path | None,
    model: Path | None,
    timeout_s: float,
    only: list[str] | None,
    progress: Callable[[str], None],
    quantization: str | None = None,
    every: bool = False,
    build_wait_s: float = BUILD_WAIT_S,
    starts: int = STARTS,
) -> ProbeReport:
    """Probe the chains `model` can use (every chain without a model or with `every`), `only` of them if given.
    Kernels waiting for a FlashInfer JIT build are waited for until `build_wait_s` after the start, then
    reported not-built (the build goes on). A kernel measured correctly is timed in `starts` process starts."""
    layer = model_layer(model, quantization) if model else Layer()  # a bad config.json is said before anything runs
    if model is not None:
        layer = replace(layer, static_activations=model_quantization(model, quantization).static_activations)
    selection = chains_for(model, quantization, every)
    unknown = [c for c in only or [] if c not in chain_table.CHAINS]
    if unknown:
        raise BadInput(f"unknown chain {', '.join(unknown)}", f"pick from {', '.join(chain_table.CHAINS)}")
    if only:
        for chain in list(selection.chains):
            if chain not in only:
                selection.left_out[chain] = "not in --only"
                del selection.chains[chain]
    interpreter = resolve_python(python)
    start = time.monotonic()
    nvml = nvml_facts()
    gpu = nvml["gpus"][0] if nvml.get("ok") and nvml.get("gpus") else None
    capability = (gpu["capability"][0], gpu["capability"][1]) if gpu else (9, 0)
    # first of all: FlashInfer's JIT builds (the long pole of a fresh run), then the harness, whose imports
    # overlap with the chain reader's
    builds = start_builds(interpreter.path, selection, layer, start + build_wait_s) if gpu else {}
    harness = (
        Conversation(
            [interpreter.path, CHILD_DIR / "kernel_probe.py", "--serve", "--chains", ",".join(selection.chains)]
        )
        if gpu
        else None
    )
    timeline: dict[str, Any] = {}
    try:
        chains, sources, vllm_version = read_chains(interpreter.path, capability)
        timeline["chains_read"] = round(time.monotonic() - start, 1)
        kernels = chain_members(chains, selection.chains)
        sources = {c: where for c, where in sources.items() if c in selection.chains}
        report = ProbeReport(gpu, interpreter, vllm_version, sources, kernels, {}, {}, 0.0, layer, selection=selection)
        report.timeline, report.starts = timeline, starts
        if harness is not None:
            report.interrupted = probe_all(
                harness, kernels, layer, timeout_s, progress, builds, start, timeline, starts
            )
    finally:
        if harness is not None:
            harness.close()
    if builds:
        timeline["builds"] = {name: build_timeline(b, start) for name, b in builds.items()}
    if gpu is not None:
        report.recommended, report.fastest = rank(kernels)
        report.ties = ties(kernels, report.recommended)
    report.seconds = time.monotonic() - start
    return report
