"""What tune tries: one function per knob, each giving the candidates it suggests for the base profile and the
workload, or the line that says why it suggests none. The table `KNOBS` is the list and the code in one."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from launcher.ab.config import Workload
from launcher.ab.sides import is_cpu_engine
from launcher.errors import BadInput
from launcher.profiles.profile import ServingProfile


@dataclass(frozen=True)
class Candidate:
    name: str
    overrides: dict[str, Any]
    why: str


@dataclass(frozen=True)
class Context:
    """What a knob looks at: the base profile, the workload, and the probe report given with --from."""

    base: ServingProfile
    workload: Workload
    probe: Path | None


def slug(name: str) -> str:
    """A candidate's name as an ab side name and folder name."""
    return "".join(ch if ch.isalnum() or ch in "-." else "_" for ch in name)


Found = tuple[list[Candidate], list[str]]  # candidates, and lines for what was considered but not tried


def ahead_of(members: list[dict[str, Any]], default: str | None, index: int) -> bool:
    """True when the kernel at `index` comes after vLLM's own choice in the chain."""
    first = next((i for i, m in enumerate(members) if m["kernel"] == default), None)
    return first is not None and index > first


def probe_candidates(probe: dict[str, Any], path: Path) -> Found:
    """Linear chains and attention: every correct kernel that is faster than vLLM's choice, or within the margin
    of it (a close call a microbenchmark cannot settle), becomes a candidate steered with disabled_kernels or
    attention_backend. MoE backends are one flag for every MoE layer: left to `profile write`."""
    from launcher.profiles import write as evidence

    found: list[Candidate] = []
    for chain in evidence.LINEAR_CHAINS:
        members = evidence.chain_members(probe, chain)
        default = evidence.effective_choice(members, [])
        base_speed = evidence.speed(probe, chain, default) if default else None
        for i, k in enumerate(members):
            kernel = k["kernel"]
            # vLLM can be steered only to a kernel it declares supported, after its own choice (disable those ahead)
            if kernel == default or k["status"] != "ok" or k["declared"] is False or not ahead_of(members, default, i):
                continue
            mine = evidence.speed(probe, chain, kernel)
            if mine is None or base_speed is None or mine > base_speed * evidence.MARGIN:
                continue
            ahead = [m["kernel"] for m in members[:i] if m["declared"] is not False]
            gain = (base_speed / mine - 1) * 100
            found.append(
                Candidate(
                    f"{chain}:{kernel}",
                    {"disabled_kernels": ahead},
                    f"probe: {kernel} {gain:+.1f}% against vLLM's choice {default} (geomean over shapes): "
                    + ("faster" if gain > (evidence.MARGIN - 1) * 100 else "a close call"),
                )
            )
    usable = [k["kernel"] for k in evidence.chain_members(probe, "attention") if k["status"] == "ok"]
    if len(usable) >= 2:
        first = evidence.speed(probe, "attention", usable[0])
        for kernel in usable[1:]:
            mine = evidence.speed(probe, "attention", kernel)
            if mine is not None and first is not None and mine <= first * evidence.MARGIN:
                found.append(
                    Candidate(
                        f"attention:{kernel}",
                        {"attention_backend": kernel},
                        f"probe: {kernel} within the margin of or faster than {usable[0]}, vLLM's first choice",
                    )
                )
    return found, [f"probe ({path}): {len(found)} candidate(s) from close calls or faster kernels"]


def _probe(ctx: Context) -> Found:
    if ctx.probe is None:
        return [], ["probe evidence: none given (--from probe.json adds kernel candidates)"]
    from launcher.profiles.write import load_evidence

    probe = load_evidence([ctx.probe]).get("probe")
    if probe is None:
        raise BadInput(f"{ctx.probe} is not a probe report", "give the output of nemolaunch probe --json")
    return probe_candidates(probe, ctx.probe)


def _cuda_graphs(ctx: Context) -> Found:
    if ctx.base.settings.get("cuda_graphs") is False:
        return [Candidate("cuda_graphs=true", {"cuda_graphs": True}, "the base runs eager (no graphs)")], []
    from launcher.profiles.profile import EAGER_COST

    return [], [f"cuda_graphs: already on (not tried): {EAGER_COST}"]


def _gpu_memory_utilization(ctx: Context) -> Found:
    if is_cpu_engine(ctx.base):
        return [], ["gpu_memory_utilization: the CPU engine sizes its KV cache with VLLM_CPU_KVCACHE_SPACE"]
    current = float(ctx.base.settings.get("gpu_memory_utilization", 0.9))
    why = "more KV cache against graph-capture headroom (the seed: 0.9 OOMed in capture on 96 GB)"
    return [
        Candidate(f"gpu_memory_utilization={value}", {"gpu_memory_utilization": value}, why)
        for value in (0.85, 0.92)
        if abs(value - current) > 0.005
    ], []


def _max_num_seqs(ctx: Context) -> Found:
    seqs, top = ctx.base.settings.get("max_num_seqs"), max(ctx.workload.concurrency)
    if seqs is not None and seqs < top:
        why = f"the base caps batches at {seqs}, below the highest concurrency {top}"
        return [Candidate(f"max_num_seqs={top}", {"max_num_seqs": top}, why)], []
    return [], [f"max_num_seqs: {seqs or 'vLLM default'} already covers concurrency {top}"]


def _max_num_batched_tokens(ctx: Context) -> Found:
    top = max(ctx.workload.concurrency)
    budget = ctx.workload.input_len * top
    if budget > 2048 and "max_num_batched_tokens" not in ctx.base.settings:
        value = min(16384, budget)
        why = f"prefills of {ctx.workload.input_len} x {top} tokens exceed a 2048-token step"
        return [Candidate(f"max_num_batched_tokens={value}", {"max_num_batched_tokens": value}, why)], []
    return [], ["max_num_batched_tokens: the workload's prefills fit the default step"]


def _async_scheduling(ctx: Context) -> Found:
    if not ctx.base.settings.get("async_scheduling"):
        why = "overlaps scheduling with execution"
        return [Candidate("async_scheduling=true", {"async_scheduling": True}, why)], []
    return [], ["async_scheduling: already on"]


def _kv_cache_dtype(ctx: Context) -> Found:
    current = ctx.base.settings.get("kv_cache_dtype", "auto")
    if current == "auto":
        why = "halves KV cache memory (more sequences fit); may cost accuracy: see same answers"
        return [Candidate("kv_cache_dtype=fp8", {"kv_cache_dtype": "fp8"}, why)], []
    return [], [f"kv_cache_dtype: already {current}"]


KNOBS: dict[str, Callable[[Context], Found]] = {
    "probe": _probe,
    "cuda_graphs": _cuda_graphs,
    "gpu_memory_utilization": _gpu_memory_utilization,
    "max_num_seqs": _max_num_seqs,
    "max_num_batched_tokens": _max_num_batched_tokens,
    "async_scheduling": _async_scheduling,
    "kv_cache_dtype": _kv_cache_dtype,
}


def check_knobs(knobs: tuple[str, ...]) -> None:
    for knob in knobs:
        if knob not in KNOBS:
            raise BadInput(f"unknown knob {knob!r}", f"pick from {', '.join(KNOBS)}")


def candidates(knobs: tuple[str, ...], ctx: Context) -> Found:
    """The candidates, and one line for each knob considered but not tried (and why)."""
    check_knobs(knobs)
    out: list[Candidate] = []
    skipped: list[str] = []
    for knob in knobs:
        found, notes = KNOBS[knob](ctx)
        out += found
        skipped += notes
    return out, skipped
