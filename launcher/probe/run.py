"""`nemolaunch probe`: run the kernels of vLLM's priority chains on this GPU, isolated, and rank them by speed.

One harness process (launcher/child/kernel_probe.py) imports torch and vLLM once, then forks one child per
kernel with a timeout, so an illegal memory access, a hang or an autotuner storm takes down only that probe.
Up to PARALLEL children set up and check their kernels at once (JIT compiles overlap), the slowest first; only
one at a time is timed, and nothing else touches the GPU heavily meanwhile (launcher/child/isolate.py). The
harness starts while the chains are being read, so the two imports of vLLM overlap too.

A kernel is recommended only if it ran every shape, passed the numerics check and never failed; among those,
the one with the lowest geometric mean of its time relative to the fastest kernel at each shape (decode-like and
prefill-like shapes weigh the same), because the winner at M=256 is not the winner at M=2048 (H200, 2026-11-30).

FlashInfer's JIT compiles are the long pole of a fresh run (its attention modules took 114-145 s on a fresh H200,
its FP8 bmm 48-54 s), so before anything else the probe starts their build in a process of its own
(launcher/child/flashinfer_build.py) that writes into FlashInfer's cache and outlives the probe; the kernels that
need a module are handed to the set-up pool only once it is built. The report keeps a run-relative timeline:
harness ready, chains read, each build's start and end (with ninja's per-unit times), each kernel's start,
set-up done, let through and end.
"""

from __future__ import annotations

import contextlib
import json
import math
import os
import subprocess
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any

from checks.facts import nvml_facts
from checks.files import cache_dir
from checks.proc import Conversation, run_python
from launcher.engine import Interpreter, resolve_python
from launcher.errors import BadInput, NotReady
from launcher.paths import CHILD_DIR
from launcher.probe import chains as chain_table
from launcher.profiles.profile import ServingProfile
from launcher.ranking import relative_speed

CHILD = CHILD_DIR
DECODE_M, PREFILL_M = (1, 16, 64, 256), (2048,)
# (N, K) of Llama-3-8B's o_proj, gate (or up) and down projections: the shapes of the H200 captures
DEFAULT_NK = ((4096, 4096), (14336, 4096), (4096, 14336))
# kernels set up side by side: most of a set-up is CPU work (each child's first call into vLLM's CUDA library
# took ~8 s on the H200, JIT compiles longer), so half the cores, at most 6 (each child holds a CUDA context)
PARALLEL = max(1, min(6, (os.cpu_count() or 2) // 2))
HARNESS_START_S = 180.0  # importing torch + vLLM + FlashInfer on a cold disk
# how long (from the start of the run) kernels waiting for a FlashInfer JIT build are waited for once nothing else
# is left. Built first and outside the set-up pool (at nice 10), FlashInfer's attention build took 93 s (dense) and
# 100 s (MoE) on a fresh H200 when the harness was ready at 49-55 s, and 109.7 s and 110.0 s once it was ready at
# 28 s (2026-12-02, two sessions: the set-ups at normal priority now overlap more of the build); its slowest compile
# unit 85-103 s. The MoE run missed a 110 s wait by 0.0 s. At 115 s the kernel's 2-3 s still end a fresh run under
# 2 minutes; otherwise the build goes on and the next run finds it done. With this wait (third session that day)
# the build took 94.5-106 s and every fresh run ended at 97-108 s with every kernel measured
BUILD_WAIT_S = 115.0
# the FlashInfer JIT modules a kernel loads (launcher/child/flashinfer_build.py builds them)
NEEDS_BUILD = {("attention", "FLASHINFER"): "attention", ("fp8_dense", "FlashInferFP8ScaledMMLinearKernel"): "gemm"}
BUILD_LABEL = {"attention": "FlashInfer's attention JIT modules", "gemm": "FlashInfer's FP8 bmm JIT module"}


@dataclass(frozen=True)
class Layer:
    """The layer whose shapes the probes time: a model's (from its config.json), or by default a Llama-8B-like
    layer and an 8-expert top-2 MoE with 2048-wide experts."""

    # (N, K) of the dense GEMMs; from a model: qkv, gate_up (fused, as vLLM runs them) and down
    dense: tuple[tuple[int, int], ...] = DEFAULT_NK
    hidden: int = 4096
    moe_intermediate: int = 2048
    experts: int = 8
    topk: int = 2
    heads: int = 32
    kv_heads: int = 8
    head_dim: int = 128
    # the model's FP8 activation scales come from its checkpoint (None: no model; a kernel may assume either)
    static_activations: bool | None = None

    def for_child(self) -> dict[str, int | bool | None]:
        """What kernel_probe.py needs besides the shapes."""
        keys = ("experts", "topk", "heads", "kv_heads", "head_dim", "static_activations")
        return {k: getattr(self, k) for k in keys}


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

    def to_json(self) -> dict[str, Any]:
        return {
            "gpu": self.gpu,
            "python": str(self.interpreter.path),
            "vllm_version": self.vllm_version,
            "chain_sources": self.sources,
            "recommended": self.recommended,
            "fastest_measured": self.fastest,
            "seconds": round(self.seconds, 1),
            "interrupted": self.interrupted,
            "layer": asdict(self.layer),
            "chains_probed": self.selection.chains,
            "chains_left_out": self.selection.left_out,
            "timeline": self.timeline,
            "kernels": [k.__dict__ for k in self.kernels],
        }


def read_config(model: Path) -> dict[str, Any]:
    """A model's config.json (its text_config for multimodal models)."""
    try:
        cfg = json.loads((model / "config.json").read_text())
    except (OSError, json.JSONDecodeError) as e:
        raise BadInput(f"cannot read layer shapes from {model}/config.json: {e}", "give a model folder") from None
    if not isinstance(cfg, dict):
        raise BadInput(f"{model}/config.json is not a JSON object", "give a model folder")
    text = cfg.get("text_config")
    if isinstance(text, dict):  # the quantization of a multimodal model is kept at the top level
        return {**text, **{k: cfg[k] for k in ("quantization_config",) if k in cfg and k not in text}}
    return cfg


def model_layer(model: Path) -> Layer:
    """A model's layer from its config.json (text_config for multimodal models); MoE sizes only if it has experts."""
    cfg = read_config(model)
    try:
        h, heads = int(cfg["hidden_size"]), int(cfg["num_attention_heads"])
        kv = int(cfg.get("num_key_value_heads") or heads)
        head_dim = int(cfg.get("head_dim") or h // heads)
        inter = int(cfg.get("intermediate_size") or cfg["moe_intermediate_size"])
        experts = next((cfg[k] for k in chain_table.EXPERT_KEYS if cfg.get(k)), None)
        moe: dict[str, Any] = {}
        if experts:
            moe = {
                "experts": int(experts),
                "topk": int(cfg.get("num_experts_per_tok") or cfg.get("moe_topk") or cfg["top_k"]),
                "moe_intermediate": int(cfg.get("moe_intermediate_size") or inter),
            }
    except (KeyError, ValueError, TypeError) as e:
        raise BadInput(f"cannot read layer shapes from {model}/config.json: {e!r}", "give a model folder") from None
    dense = ((heads * head_dim + 2 * kv * head_dim, h), (2 * inter, h), (h, inter))
    return Layer(dense=dense, hidden=h, heads=heads, kv_heads=kv, head_dim=head_dim, **moe)


def model_quantization(model: Path, online: str | None) -> chain_table.Quantization:
    """The checkpoint's quantization, or vLLM's online quantization of an unquantized one (--quantization, or a
    profile's). A checkpoint quantized one way cannot be served quantized another: that is bad input."""
    hf_quant: dict[str, Any] | None = None
    with contextlib.suppress(OSError, json.JSONDecodeError):
        hf_quant = json.loads((model / "hf_quant_config.json").read_text())
    found = chain_table.checkpoint_quantization(read_config(model), hf_quant if isinstance(hf_quant, dict) else None)
    if online is None:
        return found
    asked = chain_table.online_quantization(online, f"--quantization {online}")
    if found.kind is not None and found.kind != asked.kind:
        raise BadInput(
            f"{model} is quantized as {found.kind} ({found.where}); --quantization {online} does not apply to it",
            "leave --quantization out for a quantized checkpoint",
        )
    return found if found.kind is not None else asked


def profile_quantization(profile: ServingProfile) -> str | None:
    """The online quantization a profile asks vLLM for: a `quantization` setting, or --quantization/-q in its
    extra_args."""
    if profile.settings.get("quantization"):
        return str(profile.settings["quantization"])
    args = [str(a) for a in profile.settings.get("extra_args", [])]
    for i, arg in enumerate(args):
        if arg.startswith("--quantization="):
            return arg.split("=", 1)[1]
        if arg in ("--quantization", "-q") and i + 1 < len(args):
            return args[i + 1]
    return None


def chains_for(model: Path | None, quantization: str | None, every: bool) -> chain_table.ChainSelection:
    """What to probe: with a model (and not --all), the chains it can use; otherwise every chain."""
    if model is None or every:
        return chain_table.all_chains()
    return chain_table.select_chains(read_config(model), model_quantization(model, quantization))


def shapes_for(chain: str, layer: Layer) -> list[list[int]]:
    """[M, N, K] per probe. GEMMs: M tokens x (N, K) weights. MoE: M tokens, expert intermediate N, hidden K.
    Attention: M sequences, N new query tokens each, K tokens of context (decode: N=1; prefill: N=K)."""
    if chain.endswith("_moe"):
        return [[m, layer.moe_intermediate, layer.hidden] for m in (16, 256, 2048)]
    if chain == "attention":
        return [[m, 1, 4096] for m in (1, 16, 64)] + [[1, 2048, 2048]]
    return [[m, n, k] for n, k in layer.dense for m in DECODE_M + PREFILL_M]


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


def run(
    python: Path | None,
    model: Path | None,
    timeout_s: float,
    only: list[str] | None,
    progress: Callable[[str], None],
    quantization: str | None = None,
    every: bool = False,
    build_wait_s: float = BUILD_WAIT_S,
) -> ProbeReport:
    """Probe the chains `model` can use (every chain without a model or with `every`), `only` of them if given.
    Kernels waiting for a FlashInfer JIT build are waited for until `build_wait_s` after the start, then
    reported not-built (the build goes on)."""
    layer = model_layer(model) if model else Layer()  # a bad config.json is said before anything runs
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
        Conversation([interpreter.path, CHILD / "kernel_probe.py", "--serve", "--chains", ",".join(selection.chains)])
        if gpu
        else None
    )
    timeline: dict[str, Any] = {}
    try:
        chains, sources, vllm_version = read_chains(interpreter.path, capability)
        timeline["chains_read"] = round(time.monotonic() - start, 1)
        kernels: list[KernelResult] = []
        for chain, members in chains.items():
            if chain not in selection.chains:
                continue
            entries: list[tuple[int | None, str, bool | None, str | None]] = [
                (i, m["name"], m.get("declared"), m.get("reason")) for i, m in enumerate(members)
            ]
            entries += [(None, b, None, "baseline, not in vLLM's chain") for b in chain_table.BASELINES.get(chain, [])]
            for position, name, declared, reason in entries:
                kernels.append(KernelResult(chain, name, position, declared, reason, status="not-probed"))
        sources = {c: where for c, where in sources.items() if c in selection.chains}
        report = ProbeReport(gpu, interpreter, vllm_version, sources, kernels, {}, {}, 0.0, layer, selection=selection)
        report.timeline = timeline
        if harness is not None:
            report.interrupted = _probe_all(harness, kernels, layer, timeout_s, progress, builds, start, timeline)
    finally:
        if harness is not None:
            harness.close()
    if builds:
        timeline["builds"] = {name: build_timeline(b, start) for name, b in builds.items()}
    if gpu is not None:
        report.recommended, report.fastest = rank(kernels)
    report.seconds = time.monotonic() - start
    return report


def start_builds(
    python: Path, selection: chain_table.ChainSelection, layer: Layer, wait_until: float
) -> dict[str, dict[str, Any]]:
    """Start the FlashInfer JIT builds the selected chains' FlashInfer kernels need, in a session of their own
    (they outlive the probe); returns what the harness needs to wait for them (isolate.Build's fields)."""
    if os.environ.get("NEMOLAUNCH_FLASHINFER_PREBUILD") == "0":
        return {}
    modules = [m for (chain, _), m in NEEDS_BUILD.items() if chain in selection.chains]
    if not modules:
        return {}
    out = cache_dir("flashinfer-build", f"{time.strftime('%Y%m%dT%H%M%S')}-{os.getpid()}")
    out.mkdir(parents=True, exist_ok=True)
    with (out / "build.log").open("w") as log:
        subprocess.Popen(
            [str(python), str(CHILD / "flashinfer_build.py"), str(out), str(layer.head_dim), *modules],
            stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT, start_new_session=True,
        )  # fmt: skip
    return {
        m: {"status": str(out / f"{m}.json"), "wait_until": wait_until, "log": str(out / f"{m}.log"),
            "label": BUILD_LABEL[m]}
        for m in modules
    }  # fmt: skip


def build_timeline(build: dict[str, Any], start: float) -> dict[str, Any]:
    """A build's status at the end of the run, its times run-relative (ended None: still running)."""
    found: dict[str, Any] = {}
    with contextlib.suppress(OSError, json.JSONDecodeError):
        found = json.loads(Path(build["status"]).read_text())
    rel = {
        k: round(found[k] - start, 1) if isinstance(found.get(k), (int, float)) else None for k in ("started", "ended")
    }
    status = "running" if not found else ("done" if found.get("ok") else "failed")
    if found.get("not_prebuilt"):
        status = "not prebuilt"
    error = found.get("error") or found.get("not_prebuilt")
    return {"status": status, **rel, "error": error, "log": build["log"], "units": found.get("units", [])}


def slow_first(k: KernelResult) -> int:
    """Longest set-ups first, so they overlap everything else: FlashInfer's kernels (dispatched as soon as their
    JIT build is done; without the build, NEMOLAUNCH_FLASHINFER_PREBUILD=0, they compile in their slot: 114-145 s
    for its attention on a fresh H200, 48-54 s for its FP8 GEMM), FLEX_ATTENTION (torch.compile, 37-41 s), then
    the MoE set-ups (25-30 s each on the H200 when they quantized every expert)."""
    if "flashinfer" in k.kernel.lower() or k.kernel == "FLEX_ATTENTION":
        return 0
    return 1 if k.chain.endswith("_moe") else 2


def _probe_all(
    harness: Conversation,
    kernels: list[KernelResult],
    layer: Layer,
    timeout_s: float,
    progress: Callable[[str], None],
    builds: dict[str, dict[str, Any]] | None = None,
    start: float | None = None,
    timeline: dict[str, Any] | None = None,
) -> bool:
    """Hand every kernel the harness can drive to it and record its answers as they come; returns whether the
    run was interrupted (Ctrl-C). Kernels it never answered for say why. A kernel that needs one of `builds`
    waits for it in the harness; times are made relative to `start` (monotonic) and go into `timeline`."""
    builds = builds or {}
    start = time.monotonic() if start is None else start
    timeline = {} if timeline is None else timeline
    try:
        hello = harness.receive(HARNESS_START_S)
    except TimeoutError:
        hello = None
    if not hello or "kernels" not in hello:
        raise NotReady(
            f"the probe harness does not start: {harness.last_error()}", "the engine's Python needs torch with CUDA"
        )
    if isinstance(hello.get("t_ready"), (int, float)):
        timeline["harness_ready"] = round(hello["t_ready"] - start, 1)
    timeline["harness_preload_s"] = hello.get("preload_s")
    timeline["harness_preload_skipped"] = hello.get("cuda_initialized_by")  # they initialized CUDA
    probed = {tuple(pair) for pair in hello["kernels"]}
    waiting: dict[tuple[str, str], KernelResult] = {}
    for k in kernels:
        if (k.chain, k.kernel) in probed:
            waiting[(k.chain, k.kernel)] = k
        else:
            k.error = chain_table.NOT_PROBED.get(k.kernel, "nemolaunch has no probe for this kernel yet")
    jobs: list[dict[str, Any]] = []
    for k in sorted(waiting.values(), key=slow_first):
        job = {"chain": k.chain, "kernel": k.kernel, "shapes": shapes_for(k.chain, layer), "layer": layer.for_child()}
        need = NEEDS_BUILD.get((k.chain, k.kernel))
        jobs.append({**job, "needs": need} if need in builds else job)
    harness.send({"jobs": jobs, "timeout_s": timeout_s, "parallel": PARALLEL, "builds": builds})
    progress(f"{len(jobs)} kernels, {PARALLEL} set up at a time, one timed at a time")
    why_unanswered = "the probe harness ended without an answer"
    # a kernel waiting for a build may be answered only when its wait ends
    wait_ends = max((b["wait_until"] - time.monotonic() for b in builds.values()), default=0.0)
    silence = max(2 * timeout_s, wait_ends) + 60
    try:
        while waiting:
            # each kernel phase is bounded by timeout_s in the harness: silence past two phases means it hangs
            answer = harness.receive(silence)
            if answer is None:
                why_unanswered = f"the probe harness died: {harness.last_error()}"
                break
            key = (answer.get("chain"), answer.get("kernel"))
            if key not in waiting:
                continue
            k = waiting.pop(key)
            k.status, k.error = answer["status"], answer.get("error")
            k.shapes, k.noise_lines = answer.get("shapes", []), answer.get("noise", 0)
            k.seconds, k.setup_s, k.timed_s = answer.get("seconds", 0.0), answer.get("setup_s"), answer.get("timed_s")
            k.timeline = {
                what: round(t - start, 1) if isinstance(t, (int, float)) else None
                for what, t in (answer.get("t") or {}).items()
            }
            progress(f"{k.chain}: {k.kernel}: {k.status} ({k.seconds:.0f} s)")
    except TimeoutError:
        why_unanswered = f"the probe harness stopped answering for {silence:.0f} s (killed)"
    except KeyboardInterrupt:
        for k in waiting.values():
            k.status, k.error = "interrupted", "Ctrl-C before it finished"
        return True
    for k in waiting.values():
        k.status, k.error = "crashed", why_unanswered
    return False
