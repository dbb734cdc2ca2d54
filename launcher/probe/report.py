"""What a probe found: each kernel's result, the report, and the ranking that turns them into a recommendation
per chain.

A kernel is recommended only if it ran every shape, passed the numerics check and never failed; among those,
the one with the lowest geometric mean of its time relative to the fastest kernel at each shape (decode-like and
prefill-like shapes weigh the same), because the winner at M=256 is not the winner at M=2048 (H200, 2026-11-30).
A kernel whose gap to the recommended one lies inside the spread of their process starts is reported tied with it.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, field
from typing import Any

from launcher.engine import Interpreter
from launcher.probe import chains as chain_table
from launcher.probe.selection import Layer
from launcher.ranking import relative_speed, start_speeds, tied


@dataclass
class KernelResult:
    chain: str
    kernel: str
    position: int | None  # place in vLLM's chain (None for a baseline)
    declared: bool | None
    declared_reason: str | None
    status: str  # ok, wrong, unchecked, unsupported, unavailable, failed, timed-out, crashed, not-probed, interrupted
    error: str | None = None
    shapes: list[dict[str, Any]] = field(default_factory=list)
    noise_lines: int = 0
    seconds: float = 0.0  # from its fork to its result, including the wait for its turn to be timed
    setup_s: float | None = None  # set-up and first call of every shape: JIT compiles land here
    timed_s: float | None = None  # from being let through to its result: the timed section alone
    # seconds from the start of the run: started (forked), set_up (ready to be timed), let_through, ended
    timeline: dict[str, float | None] = field(default_factory=dict)
    # each process start's status, seconds, set-up, timed section and timeline (monotonic), in order
    starts: list[dict[str, Any]] = field(default_factory=list)

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
    layer: Layer = field(default_factory=Layer)
    interrupted: bool = False
    selection: chain_table.ChainSelection = field(default_factory=chain_table.all_chains)
    # seconds from the start of the run: harness_ready, chains_read; builds: per module its status and times
    timeline: dict[str, Any] = field(default_factory=dict)
    starts: int = 1  # process starts each correct kernel was timed in
    # per chain with a recommendation: the kernels of vLLM's chain tied with it (their gap inside the repeat spread)
    ties: dict[str, list[str]] = field(default_factory=dict)

    def to_json(self) -> dict[str, Any]:
        return {
            "gpu": self.gpu,
            "python": str(self.interpreter.path),
            "vllm_version": self.vllm_version,
            "chain_sources": self.sources,
            "recommended": self.recommended,
            "fastest_measured": self.fastest,
            "starts": self.starts,
            "ties": self.ties,
            "seconds": round(self.seconds, 1),
            "interrupted": self.interrupted,
            "layer": asdict(self.layer),
            "chains_probed": self.selection.chains,
            "chains_left_out": self.selection.left_out,
            "timeline": self.timeline,
            "kernels": [k.__dict__ for k in self.kernels],
        }


def rank(kernels: list[KernelResult]) -> tuple[dict[str, str | None], dict[str, str | None]]:
    """Per chain: each shape's time relative to the fastest usable kernel there; then (recommended, fastest).

    fastest: lowest geometric-mean relative time among kernels that ran every shape correctly.
    recommended: the same among those vLLM can be steered to (in its chain, not declared unsupported here),
    since a kernel vLLM refuses on this GPU cannot be chosen with a profile, however fast it measured.
    Neither is given for a chain where a kernel was interrupted (or its JIT build not done) before it was measured.
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
                if fastest_here and s.get("us_starts"):
                    s["relative_starts"] = [round(us / fastest_here, 3) for us in s["us_starts"]]
        if any(k.status in ("interrupted", "not-built") for k in members):  # one never measured might have won
            recommended[chain] = fastest[chain] = None
            continue
        scored = sorted(
            (speed, k.kernel, k)
            for k in usable
            if k.position is not None and (speed := relative_speed(k.shapes)) is not None
        )
        fastest[chain] = scored[0][1] if scored else None
        selectable = [name for _, name, k in scored if k.declared is not False]
        recommended[chain] = selectable[0] if selectable else None
    return recommended, fastest


def ties(kernels: list[KernelResult], recommended: dict[str, str | None]) -> dict[str, list[str]]:
    """Per chain with a recommendation (after rank): the kernels of vLLM's chain that ran every shape correctly
    and tie with it, their gap inside the spread of their process starts (launcher.ranking.tied)."""
    found: dict[str, list[str]] = {}
    for chain, pick in recommended.items():
        if pick is None:
            continue
        members = [k for k in kernels if k.chain == chain and k.usable() and k.position is not None]
        ours = next((start_speeds(k.shapes) for k in members if k.kernel == pick), [])
        found[chain] = [k.kernel for k in members if k.kernel != pick and tied(ours, start_speeds(k.shapes))]
    return found
