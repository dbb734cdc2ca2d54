"""From evidence to intent: `profile write` turns doctor and probe reports into a serving profile, and
`probe --recheck` says whether a profile's kernel choices still hold on this GPU.

Only what was measured becomes a setting, and every setting says why.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from checks.memory import SEED_CAPTURE, UTILIZATION, kv_budget_bytes
from checks.seqmem import SequenceMemory
from launcher.documents import read_json, validate_doctor, validate_probe
from launcher.errors import BadInput
from launcher.profiles.profile import EAGER_COST, ServingProfile, parse_profile
from launcher.ranking import relative_speed, start_speeds, tied

MIN_HEADROOM_GIB = 4.0
MAX_HEADROOM_GIB = 14.0  # the seed: 0.85 of a 96 GB card (14 GiB outside) fit graph capture, 0.9 (9.6) did not
# a kernel must beat vLLM's own choice by more than this (geometric mean over the probed shapes) before a
# profile overrides vLLM: smaller differences do not survive end to end (run order alone swung an H200 A/B 6-23%)
MARGIN = 1.05
# chain -> the profile setting that steers it
MOE_CHAINS = ("nvfp4_moe", "fp8_moe")
LINEAR_CHAINS = ("fp8_dense", "nvfp4_dense")
# --moe-backend values each MoE chain accepts, by the oracle's backend name: vLLM 0.26.0's map_fp8_backend and
# map_nvfp4_backend (model_executor/layers/fused_moe/oracle). The flag is one value for every MoE layer, and a
# value one quantization does not accept stops the server ("moe_backend='triton' is not supported for NvFP4 MoE")
MOE_FLAG: dict[str, dict[str, str]] = {
    "fp8_moe": {
        "TRITON": "triton",
        "DEEPGEMM": "deep_gemm",
        "VLLM_CUTLASS": "cutlass",
        "FLASHINFER_TRTLLM": "flashinfer_trtllm",
        "FLASHINFER_CUTLASS": "flashinfer_cutlass",
        "MARLIN": "marlin",
        "HUMMING": "humming",
        "AITER": "aiter",
        "HPC": "hpc",
    },
    "nvfp4_moe": {
        "VLLM_CUTLASS": "cutlass",
        "FLASHINFER_TRTLLM": "flashinfer_trtllm",
        "FLASHINFER_CUTLASS": "flashinfer_cutlass",
        "FLASHINFER_CUTEDSL": "flashinfer_cutedsl",
        "FLASHINFER_B12X": "flashinfer_b12x",
        "MARLIN": "marlin",
        "HUMMING": "humming",
        "EMULATION": "emulation",
    },
}


def load_evidence(paths: list[Path]) -> dict[str, dict[str, Any]]:
    """{"doctor": doc, "probe": doc} from --from files, recognised by their schema and validated (launcher.documents):
    a malformed report is one line naming the file and the field."""
    found: dict[str, dict[str, Any]] = {}
    for path in paths:
        doc = read_json(path, "give the --json output of doctor or probe")
        kind = str(doc.get("schema", "")).removeprefix("nemolaunch.").split("/")[0]
        if kind == "doctor":
            validate_doctor(doc, path)
        elif kind == "probe":
            validate_probe(doc, path)
        else:
            raise BadInput(
                f"{path} is not a doctor or probe report (schema {doc.get('schema')!r})",
                "give the --json output of nemolaunch doctor or probe",
            )
        doc["_path"] = str(path)
        found[kind] = doc
    return found


def effective_choice(chain: list[dict[str, Any]], disabled: list[str]) -> str | None:
    """What vLLM picks from a linear chain: the first kernel it declares supported and is not disabled."""
    for k in chain:
        if k["position"] is not None and k["declared"] is not False and k["kernel"] not in disabled:
            return str(k["kernel"])
    return None


def chain_members(probe: dict[str, Any], chain: str) -> list[dict[str, Any]]:
    """The kernels of one chain that vLLM lists, in vLLM's order."""
    return sorted(
        (k for k in probe["kernels"] if k["chain"] == chain and k["position"] is not None), key=lambda k: k["position"]
    )


def speed(probe: dict[str, Any], chain: str, kernel: str) -> float | None:
    """A kernel's geometric-mean time relative to the fastest at each shape (1.0 = fastest everywhere)."""
    for k in probe["kernels"]:
        if k["chain"] == chain and k["kernel"] == kernel and k["status"] == "ok" and k["shapes"]:
            return relative_speed(k["shapes"])
    return None


def _tie(probe: dict[str, Any], chain: str, a: str, b: str) -> bool:
    """Whether two kernels measured correctly are a tie: their gap inside the spread of their process starts."""
    starts = {
        k["kernel"]: start_speeds(k["shapes"])
        for k in probe["kernels"]
        if k["chain"] == chain and k["kernel"] in (a, b) and k["status"] == "ok"
    }
    return tied(starts.get(a, []), starts.get(b, []))


def _tie_note(chain: str, pick: str, default: str) -> str:
    return (
        f"{chain}: {pick} and vLLM's choice {default} are a tie (the gap between them lies inside the spread of "
        "their process starts): vLLM's choice kept"
    )


def _shape_count(probe: dict[str, Any], chain: str, kernel: str) -> int:
    return next((len(k["shapes"]) for k in probe["kernels"] if k["chain"] == chain and k["kernel"] == kernel), 0)


def _where(probe: dict[str, Any]) -> str:
    gpu = probe.get("gpu") or {}
    return f"probe on {gpu.get('name', 'this GPU')} with vLLM {probe.get('vllm_version')} ({probe['_path']})"


def probe_settings(probe: dict[str, Any], notes: list[str]) -> tuple[dict[str, Any], dict[str, str]]:
    settings: dict[str, Any] = {}
    why: dict[str, str] = {}
    disabled: list[str] = []
    reasons = []
    for chain in LINEAR_CHAINS:
        pick = probe["recommended"].get(chain)
        members = chain_members(probe, chain)
        default = effective_choice(members, [])
        if not pick or pick == default:
            continue
        if default and _tie(probe, chain, pick, default):
            notes.append(_tie_note(chain, pick, default))
            continue
        ours, theirs = speed(probe, chain, pick), speed(probe, chain, default) if default else None
        if ours and theirs and theirs / ours <= MARGIN:
            notes.append(
                f"{chain}: {pick} measured {(theirs / ours - 1) * 100:.1f}% faster than vLLM's choice "
                f"{default}, within the {(MARGIN - 1) * 100:.0f}% margin: vLLM's choice kept"
            )
            continue
        ahead = [
            k["kernel"]
            for k in members[: next(i for i, k in enumerate(members) if k["kernel"] == pick)]
            if k["declared"] is not False
        ]
        disabled += ahead
        gain = (
            f" by {(theirs / ours - 1) * 100:.1f}% (geomean over {_shape_count(probe, chain, pick)} shapes)"
            if (ours and theirs)
            else ""
        )
        reasons.append(f"{chain}: {pick} measured fastest and correct{gain}; vLLM would pick {default}")
    if disabled:
        settings["disabled_kernels"] = disabled
        why["disabled_kernels"] = "; ".join(reasons) + f" ({_where(probe)})"
    for chain in (*MOE_CHAINS, "attention"):
        pick = probe["recommended"].get(chain)
        usable = [k["kernel"] for k in chain_members(probe, chain) if k["status"] == "ok"]
        if not pick or len(usable) < 2:  # one measured candidate is no comparison
            if pick:
                notes.append(f"{chain}: only {pick} could be measured among vLLM's candidates: nothing to choose")
            continue
        if pick == usable[0]:  # the first working kernel in vLLM's own order: vLLM's choice, confirmed
            notes.append(f"{chain}: {pick}, first in vLLM's order, also measured fastest: left to vLLM")
            continue
        if _tie(probe, chain, pick, usable[0]):
            notes.append(_tie_note(chain, pick, usable[0]))
            continue
        measured = f"{chain}: {pick} measured fastest and correct of {', '.join(usable)} ({_where(probe)})"
        if chain == "attention":
            settings["attention_backend"], why["attention_backend"] = pick, measured
            continue
        flag = MOE_FLAG[chain].get(pick)
        refused_by = [other for other in MOE_CHAINS if other != chain and flag not in MOE_FLAG[other].values()]
        if flag is None or refused_by:
            why_not = (
                f"{pick} has no --moe-backend value" if flag is None else f"{flag!r} is refused for {refused_by[0]}"
            )
            hint = (
                f"; for a model whose MoE layers are all {chain[:-4].upper()}, set moe_backend = {flag!r}"
                if flag
                else ""
            )
            notes.append(f"{measured}; not set: --moe-backend is one value for every MoE layer and {why_not}{hint}")
            continue
        if settings.get("moe_backend", flag) != flag:
            notes.append(f"{measured}; not set: the MoE chains disagree ({settings['moe_backend']!r} vs {flag!r})")
            del settings["moe_backend"], why["moe_backend"]
            continue
        settings["moe_backend"], why["moe_backend"] = flag, measured
    return settings, why


def memory_setting(doctor: dict[str, Any]) -> tuple[float, str] | None:
    gpus = (doctor.get("facts", {}).get("nvml") or {}).get("gpus") or []
    if not gpus:
        return None
    total = gpus[0]["memory_total_mib"] / 1024
    headroom = max(MIN_HEADROOM_GIB, min(MAX_HEADROOM_GIB, 0.15 * total))
    util = min(UTILIZATION, int((1 - headroom / total) * 100) / 100)
    return util, (
        f"{gpus[0]['name']} has {total:.0f} GiB; {util} leaves {total * (1 - util):.1f} GiB outside vLLM's "
        f"budget for CUDA-graph capture and workspace ({SEED_CAPTURE}) ({doctor['_path']})"
    )


def vllm_default_max_num_seqs(gpu_name: str, total_gib: float) -> int:
    """vLLM's own max_num_seqs for its API server (engine/arg_utils.py, read in the 0.26 and 0.32 wheels): 1024 on
    a GPU of 70 GiB or more that is not an A100, else 256."""
    return 1024 if total_gib >= 70 and "a100" not in gpu_name.lower() else 256


SIZING_TOKENS = 8192  # the length doctor sizes a hybrid's sequences at, when the profile sets no max_model_len


def sequence_setting(doctor: dict[str, Any], settings: dict[str, Any], notes: list[str]) -> tuple[int, str] | None:
    """A hybrid (Mamba) model's max_num_seqs: the sequences whose Mamba state and KV fit vLLM's budget beside the
    weights (checks.seqmem, as doctor --model counts them), at the profile's max_model_len or 8192 tokens, never
    above vLLM's default. None, with a note saying why, where it is left as it is."""
    model = (doctor.get("facts") or {}).get("model") or {}
    recorded = model.get("sequence_memory")
    gpus = (doctor.get("facts", {}).get("nvml") or {}).get("gpus") or []
    if not recorded or not recorded.get("mamba_layers") or not gpus:
        return None
    if not model.get("weight_bytes"):
        notes.append("max_num_seqs: a hybrid model, but the doctor report counts no weights: not sized")
        return None
    seq = SequenceMemory(**recorded)
    total = gpus[0]["memory_total_mib"] / 1024
    util = float(settings.get("gpu_memory_utilization") or UTILIZATION)
    tokens = int(settings.get("max_model_len") or SIZING_TOKENS)
    kv = "fp8" if str(settings.get("kv_cache_dtype", "")).startswith("fp8") else "bf16"
    fits = seq.sequences_that_fit(kv_budget_bytes(total, util, model["weight_bytes"]), tokens, kv)
    default = vllm_default_max_num_seqs(gpus[0]["name"], total)
    per = f"{seq.state_bytes() / 1e6:.0f} MB of Mamba state + {seq.kv_bytes_per_token(kv) / 1024:g} KiB of {kv} KV"
    length = f"max_model_len {tokens}" if settings.get("max_model_len") else f"{tokens} tokens (no max_model_len set)"
    found = (
        f"a hybrid model: each sequence holds {per} per token; {gpus[0]['name']} {total:.0f} GiB x {util} less "
        f"{model['weight_bytes'] / 2**30:.1f} GiB of weights holds {fits} sequences of {length}; vLLM's default "
        f"here is {default} ({doctor['_path']})"
    )
    current = settings.get("max_num_seqs")
    if fits < 1:
        notes.append(f"max_num_seqs: {found}: not even one fits, so none is set (lower max_model_len)")
        return None
    if current is not None and current <= min(fits, default):
        notes.append(f"max_num_seqs: {found}: the base's {current} fits, kept")
        return None
    if current is None and fits >= default:
        notes.append(f"max_num_seqs: {found}: left to vLLM")
        return None
    return min(fits, default), found


def write_profile(name: str, evidence: dict[str, dict[str, Any]], base: ServingProfile | None, out: Path) -> str:
    settings: dict[str, Any] = dict(base.settings) if base else {}
    why: dict[str, str] = {k: v for k, v in (base.why if base else {}).items() if k in settings}
    settings["cuda_graphs"] = True
    why["cuda_graphs"] = f"CUDA graphs on: {EAGER_COST}; no evidence here demands eager mode"
    notes: list[str] = []
    if "probe" in evidence:
        found, reasons = probe_settings(evidence["probe"], notes)
        settings.update(found)
        why.update(reasons)
    if "doctor" in evidence and (mem := memory_setting(evidence["doctor"])):
        settings["gpu_memory_utilization"], why["gpu_memory_utilization"] = mem
    if "doctor" in evidence and (seqs := sequence_setting(evidence["doctor"], settings, notes)):
        settings["max_num_seqs"], why["max_num_seqs"] = seqs
    for key in settings:
        why.setdefault(key, f"from the base profile {base.name}" if base else "set by hand")
    sources = ", ".join(doc["_path"] for doc in evidence.values())
    header = [
        f"# written by nemolaunch profile write from {sources}" + (f" on top of {base.name}" if base else ""),
        *[f"# {note}" for note in notes],
    ]
    doc: dict[str, Any] = {"schema": 1, "description": f"{name}: written from measured evidence"}
    if base and base.python:
        doc["python"] = base.python
    doc["vllm"] = settings
    if base and base.env:
        doc["env"] = dict(base.env)
    doc["why"] = why
    import tomli_w  # here, not at the top: probe's table imports this module for MARGIN alone

    text = "\n".join(line.replace("\n", " ") for line in header) + "\n" + tomli_w.dumps(doc)
    parse_profile(text, out, name)  # what we write must load
    return text


def rechecked_chains(profile: ServingProfile) -> list[str]:
    """The chains whose kernel choice the profile decides (the dense ones always: vLLM picks there unless
    the profile disables kernels)."""
    chains = list(LINEAR_CHAINS)
    if profile.settings.get("moe_backend"):
        chains += MOE_CHAINS
    if profile.settings.get("attention_backend"):
        chains.append("attention")
    return chains


def recheck(profile: ServingProfile, probe: dict[str, Any]) -> list[tuple[str, str, str | None, bool]]:
    """Per chain the profile steers: (chain, what the profile gets, what the probe now recommends, still best
    within MARGIN or tied with it)."""
    rows = []
    disabled = list(profile.settings.get("disabled_kernels", []))
    for chain in LINEAR_CHAINS:
        got = effective_choice(chain_members(probe, chain), disabled)
        pick = probe["recommended"].get(chain)
        if got and pick:
            ours, theirs = speed(probe, chain, pick), speed(probe, chain, got)
            close = bool(ours and theirs and theirs / ours <= MARGIN) or _tie(probe, chain, got, pick)
            rows.append((chain, got, pick, got == pick or close))
    backend = profile.settings.get("moe_backend")
    for chain in MOE_CHAINS:
        pick = probe["recommended"].get(chain)
        if backend and pick:
            got = next((name for name, flag in MOE_FLAG[chain].items() if flag == backend), backend)
            rows.append((chain, backend, pick, got == pick or _tie(probe, chain, got, pick)))
    attention = profile.settings.get("attention_backend")
    if attention and probe["recommended"].get("attention"):
        pick = probe["recommended"]["attention"]
        rows.append(("attention", attention, pick, attention == pick or _tie(probe, "attention", attention, pick)))
    return rows
