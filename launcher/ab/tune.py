"""`nemolaunch tune`: search serving settings end to end and write the profile that won, with its evidence.

Candidates come from probe evidence (close calls, or a fastest kernel that is not vLLM's choice) and from
serving knobs. Effort goes where it decides: every candidate first gets one short ABBA round against the base
(screening: infeasible or clearly worse ones stop there), then the finalists run interleaved together with the
base for the full rounds (`ab`). A candidate whose server cannot start is infeasible, with nemolaunch's log
diagnosis, and is not retried. The budget is checked before each trial; what did not fit is reported. A state file
in OUT makes a rerun of the same command continue where the last one stopped.
"""

from __future__ import annotations

import hashlib
import json
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from launcher import defaults
from launcher.ab import run as abmod
from launcher.errors import BadInput, ExitCode
from launcher.output import atomic_write_text
from launcher.profiles.profile import SETTINGS, ServingProfile, load_profile

Say = Callable[[str], None]
KNOBS = (
    "probe",
    "cuda_graphs",
    "gpu_memory_utilization",
    "max_num_seqs",
    "max_num_batched_tokens",
    "async_scheduling",
    "kv_cache_dtype",
)
DROP_BELOW = 0.90  # screening: a candidate at least 10% slower at every level is clearly worse
FINALISTS = 2
# before anything is measured: a GPU server start is 60-150 s (gpu/README.md), a short pass tens of seconds
FIRST_GUESS_START_S = 120.0
FIRST_GUESS_PASS_S = 30.0


@dataclass(frozen=True)
class Candidate:
    name: str
    overrides: dict[str, Any]
    why: str


@dataclass(frozen=True)
class TuneConfig:
    model: str
    base: str = "cpu"
    budget_min: float = 30.0
    concurrency: tuple[int, ...] = defaults.COMPARE_LEVELS
    input_len: int = defaults.INPUT_LEN
    output_len: int = defaults.OUTPUT_LEN
    num_prompts: int | None = None
    rounds: int = 3
    knobs: tuple[str, ...] = KNOBS
    probe: Path | None = None
    python: Path | None = None
    name: str | None = None
    # a stored A/A floor (ab --noise-floor) for the final's verdicts: tune runs no A/A of its own
    noise_floor: dict[int, dict[str, float]] | None = None
    noise_floor_source: str | None = None

    def digest(self) -> str:
        doc = {k: str(v) for k, v in asdict(self).items() if k != "budget_min"}
        return hashlib.sha256(json.dumps(doc, sort_keys=True).encode()).hexdigest()[:12]


def ahead_of(members: list[dict[str, Any]], default: str | None, index: int) -> bool:
    """True when the kernel at `index` comes after vLLM's own choice in the chain."""
    first = next((i for i, m in enumerate(members) if m["kernel"] == default), None)
    return first is not None and index > first


def probe_candidates(probe: dict[str, Any]) -> tuple[list[Candidate], list[str]]:
    """Linear chains and attention: every correct kernel that is faster than vLLM's choice, or within the margin
    of it (a close call a microbenchmark cannot settle), becomes a candidate steered with disabled_kernels or
    attention_backend. MoE backends are one flag for every MoE layer: left to `profile write`."""
    from launcher.profiles import write as evidence

    found: list[Candidate] = []
    notes: list[str] = []
    for chain in evidence.LINEAR_CHAINS:
        members = evidence._members(probe, chain)
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
    attention = evidence._members(probe, "attention")
    usable = [k["kernel"] for k in attention if k["status"] == "ok"]
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
    notes.append(f"probe ({probe.get('_path')}): {len(found)} candidate(s) from close calls or faster kernels")
    return found, notes


def candidates(cfg: TuneConfig, base: ServingProfile) -> tuple[list[Candidate], list[str]]:
    """The candidates, and one line for each knob considered but not tried (and why)."""
    s = base.settings
    cpu = abmod.is_cpu_engine(base)
    top = max(cfg.concurrency)
    out: list[Candidate] = []
    skipped: list[str] = []
    for knob in cfg.knobs:
        if knob == "probe":
            if cfg.probe is None:
                skipped.append("probe evidence: none given (--from probe.json adds kernel candidates)")
                continue
            from launcher.profiles.write import load_evidence

            probe = load_evidence([cfg.probe]).get("probe")
            if probe is None:
                raise BadInput(f"{cfg.probe} is not a probe report", "give the output of nemolaunch probe --json")
            found, notes = probe_candidates(probe)
            out += found
            skipped += notes
        elif knob == "cuda_graphs":
            if s.get("cuda_graphs") is False:
                out.append(Candidate("cuda_graphs=true", {"cuda_graphs": True}, "the base runs eager (no graphs)"))
            else:
                skipped.append("cuda_graphs: already on; eager measured 2.7-5.3x slower on the H200 (not tried)")
        elif knob == "gpu_memory_utilization":
            if cpu:
                skipped.append("gpu_memory_utilization: the CPU engine sizes its KV cache with VLLM_CPU_KVCACHE_SPACE")
                continue
            current = float(s.get("gpu_memory_utilization", 0.9))
            for value in (0.85, 0.92):
                if abs(value - current) > 0.005:
                    out.append(
                        Candidate(
                            f"gpu_memory_utilization={value}",
                            {"gpu_memory_utilization": value},
                            "more KV cache against graph-capture headroom (the seed: 0.9 OOMed in capture on 96 GB)",
                        )
                    )
        elif knob == "max_num_seqs":
            seqs = s.get("max_num_seqs")
            if seqs is not None and seqs < top:
                out.append(
                    Candidate(
                        f"max_num_seqs={top}",
                        {"max_num_seqs": top},
                        f"the base caps batches at {seqs}, below the highest concurrency {top}",
                    )
                )
            else:
                skipped.append(f"max_num_seqs: {seqs or 'vLLM default'} already covers concurrency {top}")
        elif knob == "max_num_batched_tokens":
            budget = cfg.input_len * top
            if budget > 2048 and "max_num_batched_tokens" not in s:
                value = min(16384, budget)
                out.append(
                    Candidate(
                        f"max_num_batched_tokens={value}",
                        {"max_num_batched_tokens": value},
                        f"prefills of {cfg.input_len} x {top} tokens exceed a 2048-token step",
                    )
                )
            else:
                skipped.append("max_num_batched_tokens: the workload's prefills fit the default step")
        elif knob == "async_scheduling":
            if not s.get("async_scheduling"):
                out.append(
                    Candidate("async_scheduling=true", {"async_scheduling": True}, "overlaps scheduling with execution")
                )
            else:
                skipped.append("async_scheduling: already on")
        elif knob == "kv_cache_dtype":
            if s.get("kv_cache_dtype", "auto") == "auto":
                out.append(
                    Candidate(
                        "kv_cache_dtype=fp8",
                        {"kv_cache_dtype": "fp8"},
                        "halves KV cache memory (more sequences fit); may cost accuracy: see same answers",
                    )
                )
            else:
                skipped.append(f"kv_cache_dtype: already {s['kv_cache_dtype']}")
        else:
            raise BadInput(f"unknown knob {knob!r}", f"pick from {', '.join(KNOBS)}")
    return out, skipped


@dataclass
class TuneOutcome:
    code: int
    message: str
    doc: dict[str, Any]


class TuneState:
    """OUT/tune-state.json: the trials finished so far; a rerun of the same command continues from it."""

    def __init__(self, out: Path, digest: str) -> None:
        self.path = out / "tune-state.json"
        self.data: dict[str, Any] = {"digest": digest, "trials": {}, "final": None}
        if self.path.is_file():
            data = json.loads(self.path.read_text())
            if data.get("digest") != digest:
                raise BadInput(
                    f"{out} holds a tune run with other settings", "give a new --out, or the same options to resume"
                )
            self.data = data

    def save(self) -> None:
        atomic_write_text(self.path, json.dumps(self.data, indent=2, default=str))

    def fresh_dir(self, out: Path, stem: str) -> Path:
        """A new folder for a trial: an interrupted attempt's folder is kept, never overwritten."""
        k = 1
        while (out / f"{stem}-{k}").exists():
            k += 1
        return out / f"{stem}-{k}"


def _slug(name: str) -> str:
    return "".join(ch if ch.isalnum() or ch in "-." else "_" for ch in name)


def _ab_config(cfg: TuneConfig, sides: tuple[abmod.Side, ...], rounds: int) -> abmod.AbConfig:
    return abmod.AbConfig(
        model=cfg.model,
        sides=sides,
        concurrency=cfg.concurrency,
        rounds=rounds,
        input_len=cfg.input_len,
        output_len=cfg.output_len,
        num_prompts=cfg.num_prompts,
        python=cfg.python,
        same_answers=True,
        noise_floor=cfg.noise_floor,
        noise_floor_source=cfg.noise_floor_source,
    )


def _headline(doc: dict[str, Any], name: str) -> dict[str, Any]:
    """A screening round's ratio to the base per level (one round: no interval yet)."""
    ratios = doc["ratios"].get(name, {})
    return {c: (v["output_tok_s"][0] if v["output_tok_s"] else None) for c, v in ratios.items()}


def _cost(starts: int, passes: int, seen: dict[str, float]) -> float:
    return starts * seen.get("start_s", FIRST_GUESS_START_S) + passes * seen.get("pass_s", FIRST_GUESS_PASS_S)


def _learn(seen: dict[str, float], doc: dict[str, Any], seconds: float, passes: int) -> None:
    starts = [s for side in doc["sides"] for s in side["startups_s"]]
    if starts:
        seen["start_s"] = max(starts)
    bench_time = max(0.0, seconds - sum(starts))
    if passes:
        seen["pass_s"] = max(1.0, bench_time / passes)


def run_tune(cfg: TuneConfig, out: Path, say: Say) -> TuneOutcome:
    from launcher.serve.lifetime import interrupts

    base = load_profile(cfg.base)
    cands, skipped = candidates(cfg, base)
    out.mkdir(parents=True, exist_ok=True)
    state = TuneState(out, cfg.digest())
    deadline = time.monotonic() + cfg.budget_min * 60
    seen: dict[str, float] = dict(state.data.get("seen") or {})
    not_tested: list[str] = []
    base_side = abmod.Side("base", cfg.base)
    say(f"tune: {len(cands)} candidate(s): {', '.join(c.name for c in cands) or 'none'}")
    for line in skipped:
        say(f"tune: considered, not tried: {line}")
    interrupted = False
    # one co-resident pool for the whole search: the base starts once, a finalist stays up for the final rounds
    pool = abmod.ServerPool(cfg.model, cfg.python, "co-resident", out / "logs", say, shares=1 + FINALISTS)
    try:
        with interrupts():
            # screening: one ABBA round each against the base, co-resident (base kept up across trials when it can be)
            for cand in cands:
                trial = state.data["trials"].get(cand.name)
                if trial:
                    continue
                passes = 4 + 2  # one block, and one warm-up pass per server
                # before any pass is timed, its length is unknown (a guess would be off by 10x between workloads):
                # the first trial runs when its server starts fit, and teaches the estimate for the rest
                if time.monotonic() + _cost(2, passes if "pass_s" in seen else 0, seen) > deadline:
                    not_tested.append(f"{cand.name}: screening did not fit the budget")
                    continue
                folder = state.fresh_dir(out / "screen", _slug(cand.name))
                side = abmod.Side(_slug(cand.name), cfg.base, cand.overrides)
                say(f"tune: screening {cand.name} ({cand.why})")
                started = time.monotonic()
                # a memory candidate needs the device alone: its own run, restarted (auto mode)
                alone = "gpu_memory_utilization" in cand.overrides
                result = abmod.run_ab(_ab_config(cfg, (base_side, side), 1), folder, say, None if alone else pool)
                _learn(seen, result.doc, time.monotonic() - started, passes)
                state.data["seen"] = seen
                if result.code == ExitCode.INTERRUPTED:
                    raise KeyboardInterrupt
                sides = {s["name"]: s for s in result.doc["sides"]}
                if sides["base"]["status"] != "ok":
                    raise BadInput(
                        f"the base profile {cfg.base} cannot serve: {sides['base']['diagnosis']}",
                        "fix the base profile first (nemolaunch serve --smoke)",
                    )
                mine = sides[side.name]
                ratios = _headline(result.doc, side.name)
                if mine["status"] != "ok":
                    status, headline = "infeasible", f"cannot start: {mine['diagnosis']}"
                elif ratios and all(r is not None and r < DROP_BELOW for r in ratios.values()):
                    status = "dropped"
                    headline = "clearly worse: " + ", ".join(f"c={c} x{r:.2f}" for c, r in ratios.items() if r)
                elif alone:
                    status = "screened-alone"
                    headline = ", ".join(f"c={c} x{r:.2f}" for c, r in ratios.items() if r is not None)
                    not_tested.append(
                        f"{cand.name}: screened alone (memory needs the device), not in the co-resident final; "
                        "confirm with nemolaunch ab --mode restart"
                    )
                else:
                    status = "finalist"
                    headline = ", ".join(f"c={c} x{r:.2f}" for c, r in ratios.items() if r is not None)
                if status != "finalist":
                    pool.release(side.name)
                state.data["trials"][cand.name] = {
                    "name": cand.name,
                    "stage": "screen",
                    "status": status,
                    "headline": headline,
                    "folder": str(folder),
                    "ratios": ratios,
                    "overrides": cand.overrides,
                    "why": cand.why,
                }
                state.save()
                say(f"tune: {cand.name}: {status}: {headline}")
            _final(cfg, out, state, seen, deadline, base_side, not_tested, say, pool)
    except KeyboardInterrupt:
        interrupted = True
    finally:
        pool.close()
    state.save()
    doc = _summary(cfg, out, state, base, cands, skipped, not_tested, interrupted)
    atomic_write_text(out / "tune.json", json.dumps(doc, indent=2, default=str))
    if interrupted:
        return TuneOutcome(
            ExitCode.INTERRUPTED, "interrupted: finished trials kept; run the same command to resume", doc
        )
    return TuneOutcome(ExitCode.OK, f"winner {doc['winner']}; profile {doc['profile']}", doc)


def _final(
    cfg: TuneConfig,
    out: Path,
    state: TuneState,
    seen: dict[str, float],
    deadline: float,
    base_side: abmod.Side,
    not_tested: list[str],
    say: Say,
    pool: abmod.ServerPool,
) -> None:
    """The finalists, interleaved together with the base for the full rounds, on the servers screening left up."""
    if state.data.get("final"):
        return
    trials = [t for t in state.data["trials"].values() if t["status"] == "finalist"]
    trials.sort(key=lambda t: -max((r or 0) for r in t["ratios"].values()) if t["ratios"] else 0)
    finalists = trials[:FINALISTS]
    not_tested += [f"{t['name']}: not among the {FINALISTS} best finalists" for t in trials[FINALISTS:]]
    for t in trials[FINALISTS:]:
        pool.release(_slug(t["name"]))
    if not finalists:
        return
    rounds = cfg.rounds
    while rounds >= 2:
        passes = 2 * (len(finalists) + 1) * rounds
        if time.monotonic() + _cost(0, passes, seen) <= deadline:
            break
        rounds -= 1
    if rounds < 2:
        not_tested.append("final interleaved rounds: two rounds did not fit the budget (screening verdicts only)")
        return
    if rounds < cfg.rounds:
        not_tested.append(f"final rounds: {rounds} of {cfg.rounds} fit the budget")
    sides = (base_side, *(abmod.Side(_slug(t["name"]), cfg.base, t["overrides"]) for t in finalists))
    folder = state.fresh_dir(out / "final", "ab")
    say(f"tune: final: {', '.join(t['name'] for t in finalists)} against the base, {rounds} interleaved rounds")
    result = abmod.run_ab(_ab_config(cfg, sides, rounds), folder, say, pool)
    if result.code == ExitCode.INTERRUPTED:
        raise KeyboardInterrupt
    state.data["final"] = {"folder": str(folder), "finalists": [t["name"] for t in finalists]}
    state.save()


def _winners(final_doc: dict[str, Any], names: dict[str, str]) -> dict[str, tuple[str, dict[str, Any] | None]]:
    """Per level: the finalist that is faster than the base outside the noise by the most, else the base."""
    out: dict[str, tuple[str, dict[str, Any] | None]] = {}
    for c in (str(c) for c in final_doc["workload"]["concurrency"]):
        best: tuple[str, dict[str, Any] | None] = ("base", None)
        for slug, per_level in final_doc["verdicts"].items():
            if slug not in names:
                continue
            v = per_level[c]["output_tok_s"]
            if v["kind"] == "better" and (best[1] is None or v["mean"] > best[1]["mean"]):
                best = (names[slug], v)
        out[c] = best
    return out


def _summary(
    cfg: TuneConfig,
    out: Path,
    state: TuneState,
    base: ServingProfile,
    cands: list[Candidate],
    skipped: list[str],
    not_tested: list[str],
    interrupted: bool,
) -> dict[str, Any]:
    trials = list(state.data["trials"].values())
    final = state.data.get("final")
    final_doc = json.loads((Path(final["folder"]) / "ab.json").read_text()) if final else None
    by_slug = {_slug(t["name"]): t["name"] for t in trials}
    winners = _winners(final_doc, by_slug) if final_doc else {}
    counts: dict[str, int] = {}
    for name, _ in winners.values():
        counts[name] = counts.get(name, 0) + 1
    winner = max(counts, key=lambda n: (counts[n], n != "base")) if counts else "base"
    load_notes: list[str] = []
    if len(set(counts)) > 1:
        at = {c: name for c, (name, _) in winners.items()}
        load_notes.append("the winner changes with load: " + ", ".join(f"c={c}: {name}" for c, name in at.items()))
    tested = {t["name"] for t in trials}
    not_tested = not_tested + [f"{c.name}: not reached" for c in cands if c.name not in tested and interrupted]
    profile_path = None
    if not interrupted:
        profile_path = write_tuned_profile(cfg, out, base, trials, final, final_doc, winner, winners, skipped)
    return {
        "schema": "nemolaunch.tune/1",
        "status": "interrupted" if interrupted else "complete",
        "base": cfg.base,
        "candidates": [asdict(c) for c in cands],
        "considered_not_tried": skipped,
        "trials": trials
        + ([{"name": "final", "stage": "final", "status": "done", "headline": final["folder"]}] if final else []),
        "final": final,
        "winner": winner,
        "winners_by_level": {c: name for c, (name, _) in winners.items()},
        "load_notes": load_notes,
        "not_tested": not_tested,
        "profile": str(profile_path) if profile_path else None,
    }


def write_tuned_profile(
    cfg: TuneConfig,
    out: Path,
    base: ServingProfile,
    trials: list[dict[str, Any]],
    final: dict[str, Any] | None,
    final_doc: dict[str, Any] | None,
    winner: str,
    winners: dict[str, tuple[str, dict[str, Any] | None]],
    skipped: list[str],
) -> Path:
    """The base's settings plus the winner's, each changed or tried setting with its ab evidence in [why], and the
    workload and stack it was tuned on in [tuned]."""
    import tomli_w

    from launcher.engine import resolve_python
    from launcher.profiles.profile import parse_profile
    from launcher.profiles.stack import current_stack

    name = cfg.name or f"{base.name}-tuned"
    path = out / f"{name}.toml"
    winning = next((t for t in trials if t["name"] == winner), None)
    settings = {**base.settings, **(winning["overrides"] if winning else {})}
    workload = f"{cfg.input_len} in / {cfg.output_len} out tokens at concurrency {list(cfg.concurrency)}"
    why: dict[str, str] = {k: v for k, v in base.why.items()}
    evidence: list[str] = []
    for t in trials:
        slug = _slug(t["name"])
        verdicts = (final_doc or {}).get("verdicts", {}).get(slug)
        if verdicts:
            # the ab side is the candidate's folder-safe slug: cite the candidate by its name
            cited = "; ".join(
                f"c={c}: {v['output_tok_s']['text'].replace(slug, t['name'], 1)}" for c, v in verdicts.items()
            )
            source = f"ab {final['folder']}/ab.json" if final else ""
        else:
            cited = f"screening round {t['status']}: {t['headline']}"
            source = f"ab {t['folder']}/ab.json"
        line = f"tune, {workload}: {t['name']} vs base {cfg.base}: {cited} ({source})"
        evidence.append(line)
        for key in t["overrides"]:
            if key in SETTINGS:
                prefix = "chosen" if t["name"] == winner else "not chosen"
                why[key] = f"{prefix}: {line}" if key not in why or t["name"] == winner else why[key]
    for key, v in list(why.items()):
        if key not in settings and not v.startswith("not chosen"):
            del why[key]
    python = resolve_python(cfg.python, base.python).path
    stack = current_stack(python)
    revalidate = (
        f"nemolaunch ab --model {cfg.model} --a {base.path} --b {path} --concurrency "
        f"{','.join(map(str, cfg.concurrency))} --input-len {cfg.input_len} --output-len {cfg.output_len} --calibrate"
    )
    doc: dict[str, Any] = {
        "schema": 1,
        "description": f"tuned by nemolaunch tune from {base.name} for {workload}: winner {winner}",
        "vllm": settings,
        "env": dict(base.env),
        "why": why,
        "tuned": {
            "date": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
            "base": str(base.path),
            "winner": winner,
            "workload": {
                "model": cfg.model,
                "input_len": cfg.input_len,
                "output_len": cfg.output_len,
                "concurrency": list(cfg.concurrency),
            },
            "winners_by_level": {c: n for c, (n, _) in winners.items()},
            "stack": stack,
            "evidence": evidence,
            "considered_not_tried": skipped,
            "revalidate": revalidate,
        },
    }
    if base.python:
        doc["python"] = base.python
    text = tomli_w.dumps(doc)
    parse_profile(text, path)  # what tune writes, serve must read
    atomic_write_text(path, text)
    return path
