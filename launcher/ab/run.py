"""`nemolaunch ab`: is configuration B faster than A on this machine? Interleaved, order-balanced bench passes on
the same model and prompts, a verdict per level against the measured noise, and whether both give the same answers.

A round is one balanced block: A B B A (A B C C B A for more sides; the next round starts from the other end),
so linear drift cancels inside every round and each round gives one paired ratio per side, level and metric.
Every pass is a normal bench run in its own folder (compare reads it). Servers are co-resident by default (each
its own share of memory, started once, the idle one doing no work), or restarted per block. A side whose server
cannot start is a result: infeasible, with nemolaunch's diagnosis of its log.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import socket
import time
import tomllib
import urllib.request
from collections.abc import Callable
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any, Literal

from checks.secrets import bearer
from launcher import defaults
from launcher.ab import stats as abstats
from launcher.ab.passes import METRICS, PassResult, read_pass
from launcher.errors import BadInput, ExitCode, NemolaunchError
from launcher.output import atomic_write_text
from launcher.profiles.profile import ServingProfile, load_profile, parse_profile

Say = Callable[[str], None]
Mode = Literal["auto", "co-resident", "restart"]
SCHEMA = "nemolaunch.ab/1"
# two servers at 0.42 each fit on one H200 (NOTES.md, 2026-12-01): the total kept for co-resident servers
CO_RESIDENT_MEMORY = 0.84
# the H200 warms up 20-30% over a fresh server's first passes (9.4k, 11.4k, then 11.3-12.7k tok/s at c=64): the
# second pass is already inside the steady range, so one whole unmeasured pass per server start is discarded, and
# the ABBA order cancels the linear part of what drift remains
WARMUP_PASSES = 1
# fixed prompts for the same-answers check (greedy, temperature 0)
ANSWER_PROMPTS = (
    "def fibonacci(n):",
    "The capital of France is",
    "import json\n\ndef load(path):",
    "Once upon a time",
    "SELECT name FROM users WHERE",
    "class Stack:\n    def __init__(self):",
    "1, 2, 3, 5, 8,",
    "The GPU kernel launched",
)
ANSWER_TOKENS = 32
# vLLM's CPU engine always runs its worker in a separate process fed through a shared-memory queue whose reader
# spins (sched_yield) for 1 s after its last read before it sleeps on a socket (vLLM 0.32 shm_broadcast
# SpinCondition, busy_loop_s=1); idle after that, a co-resident CPU server measured 1.4% CPU. So before a pass on
# another side than the last one, wait out the idle server's spin: it would otherwise share the 2 cores with the
# first second of the measured pass. A single-GPU server (vLLM 0.26 'uni' executor) has no such queue: no wait.
CPU_SETTLE_S = 1.2


@dataclass(frozen=True)
class Side:
    """One configuration: a profile plus per-side overrides of its [vllm] settings."""

    name: str
    profile_ref: str
    overrides: dict[str, Any] = field(default_factory=dict)

    def label(self) -> str:
        sets = ",".join(f"{k}={v}" for k, v in self.overrides.items())
        return f"{self.profile_ref}" + (f" + {sets}" if sets else "")


@dataclass(frozen=True)
class AbConfig:
    model: str
    sides: tuple[Side, ...]  # the first is the baseline every other side is judged against
    concurrency: tuple[int, ...] = defaults.COMPARE_LEVELS
    rounds: int = 3
    input_len: int = defaults.INPUT_LEN
    output_len: int = defaults.OUTPUT_LEN
    num_prompts: int | None = None
    warmup_requests: int = 2
    warmup_passes: int = WARMUP_PASSES
    mode: Mode = "auto"
    calibrate: bool = False
    noise_floor: dict[int, dict[str, float]] | None = None  # stored floor per level and metric
    noise_floor_source: str | None = None
    python: Path | None = None
    same_answers: bool = True
    seed: int = 0

    def digest(self) -> str:
        """What makes two runs the same run (a rerun with the same --out continues it); rounds may grow."""
        doc = {k: v for k, v in asdict(self).items() if k != "rounds"}
        return hashlib.sha256(json.dumps(doc, sort_keys=True, default=str).encode()).hexdigest()[:12]


def parse_value(text: str) -> Any:
    """A --set value as TOML reads it (8, 0.5, true, "fp8", ["A", "B"]); a bare word is a string."""
    try:
        return tomllib.loads(f"v = {text}")["v"]
    except tomllib.TOMLDecodeError:
        return text


def parse_sets(items: tuple[str, ...] | list[str], option: str) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for item in items:
        key, sep, value = item.partition("=")
        if not sep or not key.strip():
            raise BadInput(f"{option} {item!r} is not KEY=VALUE", f"e.g. {option} max_num_seqs=8")
        out[key.strip()] = parse_value(value.strip())
    return out


def parse_config(text: str) -> Side:
    """--config NAME=PROFILE[,KEY=VALUE...]"""
    name, sep, rest = text.partition("=")
    if not sep or not name or not rest:
        raise BadInput(f"--config {text!r} is not NAME=PROFILE[,KEY=VALUE...]", "e.g. --config slow=cpu,max_num_seqs=1")
    profile, *sets = rest.split(",")
    return Side(name.strip(), profile.strip(), parse_sets(sets, "--config"))


def sides_from_options(
    a_ref: str | None,
    b_ref: str | None,
    set_a: tuple[str, ...],
    set_b: tuple[str, ...],
    configs: tuple[str, ...],
) -> tuple[Side, ...]:
    """--a/--b (with --set-a/--set-b) and --config, in that order; the first is the baseline."""
    if bool(a_ref) != bool(b_ref):
        raise BadInput("give both --a and --b (or only --config)", "e.g. --a cpu --b cpu --set-b max_num_seqs=1")
    if (set_a or set_b) and not a_ref:
        raise BadInput("--set-a/--set-b need --a and --b", "or put the settings in --config NAME=PROFILE,KEY=VALUE")
    sides: list[Side] = []
    if a_ref and b_ref:
        sides += [Side("A", a_ref, parse_sets(set_a, "--set-a")), Side("B", b_ref, parse_sets(set_b, "--set-b"))]
    sides += [parse_config(c) for c in configs]
    return tuple(sides)


def side_profile(side: Side, extra: dict[str, Any] | None = None) -> ServingProfile:
    """The side's profile with its overrides, validated as a profile file would be (unknown or mistyped keys are
    refused with the profile's own message)."""
    import tomli_w

    base = load_profile(side.profile_ref)
    settings = {**base.settings, **side.overrides, **(extra or {})}
    doc: dict[str, Any] = {"schema": 1, "description": base.description, "vllm": settings, "env": base.env}
    if base.python:
        doc["python"] = base.python
    doc["why"] = {k: v for k, v in base.why.items() if k in settings}
    if base.tuned:
        doc["tuned"] = base.tuned
    return parse_profile(tomli_w.dumps(doc), base.path, base.name)


def is_cpu_engine(profile: ServingProfile) -> bool:
    """The CPU engine sizes its KV cache with VLLM_CPU_KVCACHE_SPACE, per process: nothing to share."""
    return "VLLM_CPU_KVCACHE_SPACE" in profile.env


def choose_mode(cfg: AbConfig) -> tuple[Literal["co-resident", "restart"], str]:
    if cfg.mode != "auto":
        return cfg.mode, "asked for"
    sets_memory = [s.name for s in cfg.sides if "gpu_memory_utilization" in s.overrides]
    if sets_memory:
        return "restart", (
            f"{', '.join(sets_memory)} set gpu_memory_utilization: memory is what is compared, so each server gets "
            "the device alone"
        )
    return "co-resident", (
        "default: servers started once and benched alternately (on one H200 two servers at 0.42 of memory each fit "
        "and an A/A agreed within 0.1-3% after the first round)"
    )


def dummy_weights(argv: list[str]) -> bool:
    joined = " ".join(argv)
    return "--load-format dummy" in joined or "--load-format=dummy" in joined


# ---- servers --------------------------------------------------------------------------------------------------


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@dataclass
class Up:
    url: str
    served_model: str
    startup_s: float
    info: dict[str, Any]  # bench's `served` provenance
    stack: contextlib.ExitStack
    api_key: str | None = None  # the key vLLM was given (serve resolved it): bench's passes send it


class ServerPool:
    """The servers of an ab run. Co-resident: each started once and kept up until close(); restart: one at a time
    (starting one stops the others). A start that fails raises NemolaunchError carrying the log's diagnosis."""

    def __init__(
        self,
        model: str,
        python: Path | None,
        mode: Literal["co-resident", "restart"],
        logs: Path,
        say: Say,
        shares: int,
        ready_timeout_s: float = 900.0,
    ) -> None:
        self.model, self.python, self.mode, self.logs, self.say = model, python, mode, logs, say
        self.shares = max(1, shares)
        self.ready_timeout_s = ready_timeout_s
        self.up: dict[str, Up] = {}
        self.starts: dict[str, int] = {}

    def profile_for(self, side: Side) -> ServingProfile:
        profile = side_profile(side)
        if self.mode == "co-resident" and not is_cpu_engine(profile) and "gpu_memory_utilization" not in side.overrides:
            share = round(CO_RESIDENT_MEMORY / self.shares, 3)
            profile = side_profile(side, {"gpu_memory_utilization": share})
        return profile

    def ensure(self, side: Side) -> tuple[Up, bool]:
        """The side's server, started if it is not up; True when it was started now."""
        if side.name in self.up:
            return self.up[side.name], False
        if self.mode == "restart":
            for name in list(self.up):
                self.release(name)
        from launcher.serve import run as serve

        plan = serve.make_plan(self.profile_for(side), self.model, self.python, "127.0.0.1", free_port())
        self.starts[side.name] = self.starts.get(side.name, 0) + 1
        log = self.logs / f"{side.name}-{self.starts[side.name]}.log"
        stack = contextlib.ExitStack()
        try:
            running = stack.enter_context(
                serve.launched(plan, self.model, log, self.say, echo_log=None, ready_timeout_s=self.ready_timeout_s)
            )
        except BaseException:
            stack.close()
            raise
        info = {
            **plan.provenance(),
            "startup_s": round(running.startup_s, 1),
            "log": str(log),
        }
        up = Up(plan.url, running.models[0], running.startup_s, info, stack, plan.key.value if plan.key else None)
        self.up[side.name] = up
        return up, True

    def release(self, name: str) -> None:
        up = self.up.pop(name, None)
        if up is not None:
            up.stack.close()

    def close(self) -> None:
        for name in list(self.up):
            self.release(name)


# ---- same answers ---------------------------------------------------------------------------------------------


def greedy_answers(url: str, model: str, key: str | None = None) -> list[list[int]]:
    """The token ids of a greedy completion of each fixed prompt (one at a time: batch composition stays fixed)."""
    headers = {"Content-Type": "application/json", **bearer(key)}
    out = []
    for prompt in ANSWER_PROMPTS:
        body = {
            "model": model,
            "prompt": prompt,
            "max_tokens": ANSWER_TOKENS,
            "temperature": 0.0,
            "return_token_ids": True,
        }
        req = urllib.request.Request(f"{url}/v1/completions", data=json.dumps(body).encode(), headers=headers)
        with urllib.request.urlopen(req, timeout=120) as resp:
            choice = json.loads(resp.read())["choices"][0]
        out.append([int(t) for t in choice.get("token_ids") or []])
    return out


def agreement(base: list[list[int]], other: list[list[int]]) -> dict[str, Any]:
    """Token agreement: positions where both completions hold the same token, and where each first diverges."""
    same = total = 0
    first: list[int | None] = []
    for a, b in zip(base, other, strict=True):
        length = max(len(a), len(b))
        total += length
        same += sum(1 for x, y in zip(a, b, strict=False) if x == y)
        diverge = next((i for i, (x, y) in enumerate(zip(a, b, strict=False)) if x != y), None)
        if diverge is None and len(a) != len(b):
            diverge = min(len(a), len(b))
        first.append(diverge)
    identical = sum(1 for d in first if d is None)
    return {
        "prompts": len(first),
        "identical": identical,
        "token_agreement": round(same / total, 4) if total else None,
        "first_divergence": first,
        "text": (
            f"same answers: {identical}/{len(first)} greedy completions identical"
            if identical == len(first)
            else f"different answers: {identical}/{len(first)} identical, token agreement {same / total:.0%}, "
            f"first divergence at tokens {[d for d in first if d is not None]}"
        ),
    }


# ---- the run --------------------------------------------------------------------------------------------------


@dataclass
class SideState:
    side: Side
    status: str = "pending"  # ok, infeasible, died
    diagnosis: str | None = None
    served: dict[str, Any] | None = None
    answers: list[list[int]] | None = None
    answers_error: str | None = None
    startups_s: list[float] = field(default_factory=list)


@dataclass
class AbOutcome:
    code: int
    message: str
    doc: dict[str, Any]


def block_order(names: list[str], round_index: int) -> list[str]:
    """A B B A in even rounds, B A A B in odd ones (for three: A B C C B A, then C B A A B C)."""
    forward = names if round_index % 2 == 0 else names[::-1]
    return forward + forward[::-1]


def _pass_values(result: PassResult, concurrency: int) -> dict[str, float | None] | None:
    level = result.levels.get(concurrency)
    return dict(level.values) if level is not None and level.valid else None


class AbRun:
    """State of one ab run; `doc()` is ab.json at any moment (so an interrupted run writes what it has)."""

    def __init__(self, cfg: AbConfig, out: Path, mode: str, mode_reason: str) -> None:
        self.cfg, self.out, self.mode, self.mode_reason = cfg, out, mode, mode_reason
        sides = list(cfg.sides)
        if cfg.calibrate:
            base = cfg.sides[0]
            sides.append(Side(f"{base.name}-again", base.profile_ref, dict(base.overrides)))
        self.calibration = sides[-1].name if cfg.calibrate else None
        self.states = {s.name: SideState(s) for s in sides}
        self.profiles = {s.name: side_profile(s) for s in sides}
        self.last_side: str | None = None  # the side of the last pass (co-resident CPU servers settle on a switch)
        self.rounds: list[dict[str, Any]] = []
        self.invalid: list[dict[str, Any]] = []
        self.status = "running"
        self.started = time.strftime("%Y-%m-%dT%H:%M:%S%z")

    def resume(self, doc: dict[str, Any]) -> None:
        """Continue a run from its ab.json: its rounds, invalid passes and what each side showed stay; a side that
        could not start is not retried (its diagnosis stands), one that died is."""
        self.rounds, self.invalid, self.started = list(doc["rounds"]), list(doc["invalid_passes"]), doc["started"]
        for s in doc["sides"]:
            st = self.states.get(s["name"])
            if st is None:
                continue
            if s["status"] == "infeasible":
                st.status, st.diagnosis = "infeasible", s["diagnosis"]
            st.startups_s = list(s["startups_s"])
            st.answers, st.answers_error = s.get("answer_tokens"), s.get("answers_error")

    @property
    def base(self) -> str:
        return self.cfg.sides[0].name

    def live_names(self) -> list[str]:
        return [n for n, st in self.states.items() if st.status != "infeasible" and st.status != "died"]

    def ratios(self, name: str) -> dict[int, dict[str, list[float]]]:
        """Per level and metric, the valid per-round ratios of `name` to the baseline."""
        out: dict[int, dict[str, list[float]]] = {c: {m: [] for m in METRICS} for c in self.cfg.concurrency}
        for rnd in self.rounds:
            for c in self.cfg.concurrency:
                mine, base = rnd["means"].get(name, {}).get(str(c)), rnd["means"].get(self.base, {}).get(str(c))
                if not mine or not base:
                    continue
                for m in METRICS:
                    if mine.get(m) and base.get(m):
                        out[c][m].append(mine[m] / base[m])
        return out

    def floor(self) -> tuple[dict[int, dict[str, float | None]], str]:
        if self.calibration:
            aa = self.ratios(self.calibration)
            floors = {c: {m: abstats.noise_floor(aa[c][m]) for m in METRICS} for c in aa}
            if not any(v is not None for lv in floors.values() for v in lv.values()):
                return floors, (
                    f"calibrated (A/A this run) but not measured yet: fewer than 2 valid A/A rounds, default margin "
                    f"{abstats.DEFAULT_MARGIN:.0%}"
                )
            return floors, "calibrated (A/A this run)"
        if self.cfg.noise_floor:
            stored = self.cfg.noise_floor
            # a metric no level measured has no floor (the default margin), never a floor of 0
            widest = {
                m: max((v for lv in stored.values() if (v := lv.get(m)) is not None), default=None) for m in METRICS
            }
            return (
                {c: {m: (stored.get(c) or {}).get(m, widest[m]) for m in METRICS} for c in self.cfg.concurrency},
                f"stored ({self.cfg.noise_floor_source})",
            )
        return (
            {c: {m: None for m in METRICS} for c in self.cfg.concurrency},
            f"not measured: default margin {abstats.DEFAULT_MARGIN:.0%} (run with --calibrate to measure it)",
        )

    def verdicts(self) -> dict[str, dict[str, dict[str, Any]]]:
        floors, _ = self.floor()
        out: dict[str, dict[str, dict[str, Any]]] = {}
        for name, st in self.states.items():
            if name == self.base or st.status in ("infeasible",):
                continue
            ratios = self.ratios(name)
            per_level: dict[str, dict[str, Any]] = {}
            for c in self.cfg.concurrency:
                per_metric = {}
                for m in METRICS:
                    margin = abstats.margin_for(floors[c][m])
                    v = abstats.verdict(m, ratios[c][m], margin, b=name, a=self.base)
                    iv = v.interval
                    if name == self.calibration and iv is not None and floors[c][m] is not None:
                        v = replace(v, text=abstats.floor_text(iv, margin), more_rounds=None)
                    per_metric[m] = {
                        "kind": v.kind,
                        "text": v.text,
                        "n": iv.n if iv else len(ratios[c][m]),
                        "mean": round(iv.mean, 5) if iv else None,
                        "lo": round(iv.lo, 5) if iv else None,
                        "hi": round(iv.hi, 5) if iv else None,
                        "margin": round(margin, 5),
                        "more_rounds": v.more_rounds,
                    }
                per_level[str(c)] = per_metric
            out[name] = per_level
        return out

    def answers(self) -> dict[str, Any]:
        base = self.states[self.base]
        argv = (base.served or {}).get("argv") or []
        if dummy_weights(argv):
            return {
                "applies": False,
                "note": "the model is served with --load-format dummy (random weights): greedy answers carry no "
                "meaning, so they are not compared",
            }
        if not self.cfg.same_answers:
            return {"applies": False, "note": "not asked for (--no-same-answers)"}
        sides: dict[str, Any] = {}
        for name, st in self.states.items():
            if name == self.base:
                continue
            if st.answers_error or base.answers_error:
                sides[name] = {"text": f"not compared: {st.answers_error or base.answers_error}"}
            elif st.answers is not None and base.answers is not None:
                sides[name] = agreement(base.answers, st.answers)
        return {
            "applies": True,
            "prompts": list(ANSWER_PROMPTS),
            "max_tokens": ANSWER_TOKENS,
            "sides": sides,
        }

    def doc(self) -> dict[str, Any]:
        floors, source = self.floor()
        return {
            "schema": SCHEMA,
            "status": self.status,
            "config_digest": self.cfg.digest(),
            "started": self.started,
            "mode": self.mode,
            "mode_reason": self.mode_reason,
            "method": abstats.METHOD,
            "model": self.cfg.model,
            "baseline": self.base,
            "calibration_side": self.calibration,
            "workload": {
                "concurrency": list(self.cfg.concurrency),
                "input_len": self.cfg.input_len,
                "output_len": self.cfg.output_len,
                "num_prompts": self.cfg.num_prompts,
                "warmup_requests": self.cfg.warmup_requests,
                "warmup_passes": self.cfg.warmup_passes,
                "rounds_asked": self.cfg.rounds,
                "seed": self.cfg.seed,
            },
            "sides": [
                {
                    "name": name,
                    "profile": st.side.profile_ref,
                    "overrides": st.side.overrides,
                    "status": st.status,
                    "diagnosis": st.diagnosis,
                    "startups_s": st.startups_s,
                    "served": st.served,
                    "answer_tokens": st.answers,
                    "answers_error": st.answers_error,
                }
                for name, st in self.states.items()
            ],
            "rounds": self.rounds,
            "invalid_passes": self.invalid,
            "ratios": {
                name: {str(c): v for c, v in self.ratios(name).items()} for name in self.states if name != self.base
            },
            "noise_floor": {
                "source": source,
                "levels": {str(c): v for c, v in floors.items()},
            },
            "verdicts": self.verdicts(),
            "answers": self.answers(),
        }

    def write(self) -> None:
        atomic_write_text(self.out / "ab.json", json.dumps(self.doc(), indent=2, default=str))


def _bench_pass(run: AbRun, up: Up, folder: Path, label: str, say: Say, side: str) -> PassResult:
    from launcher import bench

    if run.mode == "co-resident" and run.last_side not in (None, side) and is_cpu_engine(run.profiles[side]):
        time.sleep(CPU_SETTLE_S)
    run.last_side = side

    cfg = bench.BenchConfig(
        url=up.url,
        model=up.served_model,
        concurrency=run.cfg.concurrency,
        input_len=run.cfg.input_len,
        output_len=run.cfg.output_len,
        num_prompts=run.cfg.num_prompts,
        warmup=run.cfg.warmup_requests,
        label=label,
        seed=run.cfg.seed,
        api_key=up.api_key,
    )
    outcome = bench.run(cfg, folder, up.info, lambda m: None)
    if outcome.code == ExitCode.INTERRUPTED:
        raise KeyboardInterrupt
    return read_pass(folder)


def _start(run: AbRun, pool: ServerPool, name: str, say: Say) -> Up | None:
    """The side's server (started if needed, then warmed up); None when it cannot start: that side is infeasible."""
    st = run.states[name]
    try:
        up, fresh = pool.ensure(st.side)
    except NemolaunchError as e:
        st.status, st.diagnosis = "infeasible", e.message
        say(f"{name}: cannot start: {e.message}")
        run.write()
        return None
    st.status, st.served = "ok", up.info
    if fresh:  # a server another run started (tune's pool) is warm already
        st.startups_s.append(round(up.startup_s, 1))
        start = len(st.startups_s)
        for k in range(run.cfg.warmup_passes):
            _bench_pass(run, up, _pass_folder(run, f"warmup-{name}-{start}-{k + 1}"), f"{name}-warmup", say, name)
    if st.answers is None and st.answers_error is None and run.cfg.same_answers and not dummy_weights(up.info["argv"]):
        try:
            st.answers = greedy_answers(up.url, up.served_model, up.api_key)
        except (OSError, ValueError, KeyError) as e:
            st.answers_error = f"{type(e).__name__}: {e}"
    run.write()
    return up


def run_ab(cfg: AbConfig, out: Path, say: Say, pool: ServerPool | None = None) -> AbOutcome:
    """The whole ab run. Ctrl-C or SIGTERM: the round under way is dropped, the completed ones are kept and
    judged, servers are stopped; exit 130."""
    from launcher.serve.lifetime import interrupts

    if len({s.name for s in cfg.sides}) != len(cfg.sides):
        raise BadInput("two configurations have the same name", "name each --config differently")
    if len(cfg.sides) < 2:
        raise BadInput("ab needs at least two configurations", "give --a and --b, or two --config")
    previous = _previous_run(cfg, out)
    for side in cfg.sides:
        side_profile(side)  # refuse a bad profile or override before any server starts
    mode, reason = choose_mode(cfg)
    run = AbRun(cfg, out, mode, reason)
    out.mkdir(parents=True, exist_ok=True)
    if previous is not None:
        run.resume(previous)
        say(f"ab: continuing the run in {out}: {len(run.rounds)} round(s) kept, {cfg.rounds} asked")
    say(f"ab: {len(run.states)} configurations, mode {mode} ({reason}); results in {out}")
    own_pool = pool is None
    pool = pool or ServerPool(cfg.model, cfg.python, mode, out / "logs", say, shares=len(run.states))
    run.write()
    try:
        with interrupts():
            for r in range(len(run.rounds), cfg.rounds):
                _one_round(run, pool, r, say)
                if run.states[run.base].status != "ok" or len(run.live_names()) < 2:
                    break
        run.status = "complete"
    except KeyboardInterrupt:
        run.status = "interrupted"
    finally:
        if own_pool:
            pool.close()
        run.write()
    doc = run.doc()
    write_report(doc, out)
    return AbOutcome(_exit_code(run), _summary_line(run), doc)


def _previous_run(cfg: AbConfig, out: Path) -> dict[str, Any] | None:
    """The ab.json an earlier run of the same command left in OUT, to continue; None for a new folder."""
    path = out / "ab.json"
    if not path.exists():
        return None
    try:
        doc = json.loads(path.read_text())
    except (OSError, json.JSONDecodeError) as e:
        raise BadInput(f"cannot read {path}: {e}", "give a new --out folder") from None
    if not isinstance(doc, dict) or doc.get("schema") != SCHEMA or doc.get("config_digest") != cfg.digest():
        raise BadInput(
            f"{out} holds an ab run with other settings",
            "give a new --out folder, or the same options to continue that run",
        )
    if doc.get("status") == "complete" and len(doc.get("rounds", [])) >= cfg.rounds:
        raise BadInput(f"{out} holds a complete ab run of {cfg.rounds} round(s)", "ask for more --rounds to extend it")
    return doc


def _pass_folder(run: AbRun, stem: str) -> Path:
    """passes/STEM, or STEM-2, -3 ... when an interrupted attempt left that folder (never overwritten)."""
    folder, k = run.out / "passes" / stem, 1
    while folder.exists():
        k += 1
        folder = run.out / "passes" / f"{stem}-{k}"
    return folder


def _one_round(run: AbRun, pool: ServerPool, r: int, say: Say) -> None:
    order = block_order(run.live_names(), r)
    passes: list[dict[str, Any]] = []
    values: dict[str, list[dict[str, dict[str, float | None] | None]]] = {}  # side -> its passes' levels
    for i, name in enumerate(order):
        if run.states[name].status in ("infeasible", "died"):
            continue
        up = _start(run, pool, name, say)
        if up is None:
            continue
        folder = _pass_folder(run, f"r{r + 1}-{i + 1}-{name}")
        result = _bench_pass(run, up, folder, name, say, name)
        if result.status == "server-died":
            run.states[name].status, run.states[name].diagnosis = "died", f"the server stopped answering in {folder}"
        passes.append({"side": name, "folder": str(folder.relative_to(run.out)), "status": result.status})
        per_level: dict[str, dict[str, float | None] | None] = {}
        for c in run.cfg.concurrency:
            v = _pass_values(result, c)
            if v is None:
                lv = result.levels.get(c)
                run.invalid.append(
                    {
                        "round": r + 1,
                        "side": name,
                        "folder": str(folder.relative_to(run.out)),
                        "concurrency": c,
                        "reason": f"{lv.failed} failed request(s)" if lv else "level not measured",
                    }
                )
            per_level[str(c)] = v
        values.setdefault(name, []).append(per_level)
    means: dict[str, dict[str, dict[str, float] | None]] = {}
    for name, per_pass in values.items():
        means[name] = {str(c): _block_mean([p[str(c)] for p in per_pass]) for c in run.cfg.concurrency}
    run.rounds.append({"index": r + 1, "order": order, "passes": passes, "means": means})
    run.write()
    for name, judged in run.verdicts().items():
        for level, metric in judged.items():
            say(f"round {r + 1}: {name} vs {run.base} at c={level}: {metric['output_tok_s']['text']}")


def _block_mean(got: list[dict[str, float | None] | None]) -> dict[str, float] | None:
    """A side's value in one round: the mean of its passes in the block. Both must be valid, or the round is not
    balanced for that level (and is left out)."""
    if len(got) < 2 or any(g is None for g in got):
        return None
    valid = [g for g in got if g is not None]
    return {m: sum(float(g[m] or 0) for g in valid) / len(valid) for m in METRICS if all(g.get(m) for g in valid)}


def _exit_code(run: AbRun) -> int:
    if run.status == "interrupted":
        return ExitCode.INTERRUPTED
    if any(st.status in ("infeasible", "died") for st in run.states.values()):
        return ExitCode.PROBLEM
    return ExitCode.OK


def _summary_line(run: AbRun) -> str:
    done = len(run.rounds)
    bad = [n for n, st in run.states.items() if st.status in ("infeasible", "died")]
    parts = [f"{done} round(s) {'kept (interrupted)' if run.status == 'interrupted' else 'measured'}"]
    if bad:
        parts.append(f"could not serve: {', '.join(bad)}")
    return "; ".join(parts)


# ---- stored floor ---------------------------------------------------------------------------------------------


def load_noise_floor(text: str) -> tuple[dict[int, dict[str, float]], str]:
    """--noise-floor: a fraction (0.03 = 3% at every level and metric) or an ab.json whose run calibrated."""
    try:
        value = float(text)
    except ValueError:
        pass
    else:
        if not 0 <= value < 1:
            raise BadInput(f"--noise-floor {text} is not a fraction in [0, 1)", "e.g. --noise-floor 0.03")
        return {0: {m: value for m in METRICS}}, f"--noise-floor {value}"
    path = Path(text)
    try:
        doc = json.loads(path.read_text())
    except (OSError, json.JSONDecodeError) as e:
        raise BadInput(f"cannot read the noise floor {path}: {e}", "give a fraction or an ab.json") from None
    if doc.get("schema") != SCHEMA or not str(doc.get("noise_floor", {}).get("source", "")).startswith("calibrated"):
        raise BadInput(f"{path} is not an ab.json of a calibrated run", "run nemolaunch ab --calibrate first")
    floors = {
        int(c): {m: float(v) for m, v in lv.items() if v is not None} for c, lv in doc["noise_floor"]["levels"].items()
    }
    if not any(floors.values()):
        raise BadInput(
            f"{path} measured no noise floor: its A/A side has fewer than 2 valid rounds",
            "continue that ab with the same command and --out (more --rounds), or give a fraction",
        )
    return floors, str(path)


# ---- report ---------------------------------------------------------------------------------------------------


def verdict_rows(doc: dict[str, Any]) -> list[list[object]]:
    rows: list[list[object]] = []
    for name, per_level in doc["verdicts"].items():
        for c, metrics in per_level.items():
            rows.append(
                [
                    f"{name} vs {doc['baseline']}",
                    c,
                    metrics["output_tok_s"]["n"],
                    metrics["output_tok_s"]["text"],
                    _short(metrics["tpot_ms"]),
                    _short(metrics["ttft_ms"]),
                ]
            )
    return rows


def _short(v: dict[str, Any]) -> str:
    if v["mean"] is None:
        return "-"
    return f"{(v['mean'] - 1) * 100:+.1f}% [{(v['lo'] - 1) * 100:+.1f}, {(v['hi'] - 1) * 100:+.1f}] {v['kind']}"


VERDICT_HEADERS = ["comparison", "conc", "rounds", "output tok/s verdict", "TPOT B/A", "TTFT B/A"]


def write_report(doc: dict[str, Any], out: Path) -> None:
    from launcher.output import table

    lines = [
        "# nemolaunch ab",
        "",
        f"Status: {doc['status']}, {len(doc['rounds'])} round(s) of {doc['workload']['rounds_asked']}; mode "
        f"{doc['mode']} ({doc['mode_reason']}).",
        f"Workload: {doc['workload']['input_len']} in / {doc['workload']['output_len']} out tokens, concurrency "
        f"{doc['workload']['concurrency']}, {doc['workload']['warmup_passes']} unmeasured warm-up pass(es) per "
        "server start.",
        f"Method: {doc['method']}. Noise floor: {doc['noise_floor']['source']}.",
        "",
        "## Configurations",
        "",
    ]
    for s in doc["sides"]:
        extra = f": {s['diagnosis']}" if s["diagnosis"] else ""
        sets = ", ".join(f"{k}={v}" for k, v in s["overrides"].items())
        lines.append(f"- **{s['name']}**: profile {s['profile']}{' + ' + sets if sets else ''}; {s['status']}{extra}")
    lines += ["", "## Verdicts (ratio B/A per round; TPOT and TTFT: lower is better)", "", "```"]
    lines += [table(VERDICT_HEADERS, verdict_rows(doc)), "```", ""]
    answers = doc["answers"]
    lines.append("## Same answers")
    lines.append("")
    if not answers["applies"]:
        lines.append(f"Not compared: {answers['note']}.")
    else:
        for name, a in answers["sides"].items():
            lines.append(f"- {name} vs {doc['baseline']}: {a['text']}")
    if doc["invalid_passes"]:
        lines += ["", "## Invalid passes (not averaged in)", ""]
        lines += [
            f"- round {p['round']} {p['side']} c={p['concurrency']}: {p['reason']} ({p['folder']})"
            for p in doc["invalid_passes"]
        ]
    if _plot(doc, out / "ratios.png"):
        lines += ["", "![ratios](ratios.png)"]
    lines += ["", "Every pass is a bench result folder under passes/ (`nemolaunch compare` reads them)."]
    atomic_write_text(out / "report.md", "\n".join(lines) + "\n")


def _plot(doc: dict[str, Any], path: Path) -> bool:
    """Output tok/s ratio B/A per level with its interval and the margin band; False when nothing to plot."""
    series = [
        (name, [(int(c), m["output_tok_s"]) for c, m in per_level.items() if m["output_tok_s"]["mean"]])
        for name, per_level in doc["verdicts"].items()
    ]
    series = [(n, pts) for n, pts in series if pts]
    if not series:
        return False
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(7, 4))
    levels = sorted({c for _, pts in series for c, _ in pts})
    for k, (name, pts) in enumerate(series):
        xs = [levels.index(c) + (k - (len(series) - 1) / 2) * 0.15 for c, _ in pts]
        ys = [v["mean"] for _, v in pts]
        err = [[v["mean"] - v["lo"] for _, v in pts], [v["hi"] - v["mean"] for _, v in pts]]
        ax.errorbar(xs, ys, yerr=err, fmt="o", capsize=4, label=f"{name} / {doc['baseline']}")
        margin = max(v["margin"] for _, v in pts)
        ax.axhspan(1 / (1 + margin), 1 + margin, color="grey", alpha=0.12)
    ax.axhline(1.0, color="black", linewidth=0.8)
    ax.set_xticks(range(len(levels)), [str(c) for c in levels])
    ax.set_xlabel("concurrency")
    ax.set_ylabel("output tok/s ratio (95% interval)")
    ax.set_title("ab: ratio to the baseline; grey band: noise margin")
    ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return True
