"""`ab --against-fallbacks`: what each fallback vLLM took costs, measured where the alternative exists.

The base (one --config) is started once alone, as its profile asks (the discovery start); its startup log is read
by launcher.serve.fallbacks and the server is stopped. Each fallback with an alternative becomes one side named
`no-<kind>` (`no-<kind>-<setting>` where two share a kind): the base plus the first alternative in vLLM's own
order, the candidate vLLM ranks next ahead of the one it took; the later ones are listed, untried. A fallback
whose first alternative another side already forces joins that side. The rest are named with why none is
measured: no alternative here (the detector's fix says why), the alternative is what the base already sets, or it
sets [env] (an ab side carries [vllm] settings only).

Then the normal ab, the base against every side, with its statistics; a side whose alternative cannot start is
infeasible, with its diagnosis. In auto mode the servers are co-resident when the memory the base's start used
outside its KV cache (vLLM's own line) leaves every server its share with room for a KV cache, restarted otherwise.

OUT/fallbacks.json keeps what the discovery found; the same command with the same --out continues the ab from it
without a second discovery start (a base that could not start is tried again).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, Literal, TypedDict

from launcher.ab.config import AbConfig, Mode
from launcher.ab.run import Say, check_workload, pass_workload, run_ab
from launcher.ab.servers import CO_RESIDENT_MEMORY, ServerPool, StartFailed
from launcher.ab.sides import Side, run_digest, side_profile
from launcher.documents import Reader, read_json
from launcher.errors import BadInput, ExitCode, NotReady
from launcher.output import hold, write_json, write_text
from launcher.serve.fallbacks import Fallback, detect

SCHEMA = "nemolaunch.ab-fallbacks/1"
# a co-resident server needs room for a KV cache beside what the base's start used outside it
KV_ROOM_GIB = 4.0
# vLLM's memory line at the end of a start (0.26: "... Actual usage is 69.46 GiB for weight, 3.74 GiB for peak
# activation, 0.25 GiB for non-torch memory, and 0.89 GiB for CUDAGraph memory. Replace ...")
_MEMORY = re.compile(r"Free memory on device \([\d.]+/([\d.]+) GiB\) on startup\..*?Actual usage is (.*?)\. Replace")
_GIB_FOR = re.compile(r"([\d.]+) GiB for")


class BuiltSide(TypedDict):
    name: str
    overrides: dict[str, Any]  # the side's [vllm] overrides: the base's, and the alternative's
    alternative: str  # the alternative's label ("moe_backend = 'flashinfer_cutlass'")
    fallbacks: list[str]  # what vLLM did, for each fallback this side takes the alternative of
    asked: bool  # the base's profile asked for (one of) them
    untried: list[str]  # the later alternatives of the same fallbacks


class NotMeasured(TypedDict):
    kind: str
    what: str
    why: str


class FallbacksDoc(TypedDict):
    schema: str
    digest: str  # the base and the run's options (launcher.ab.sides.run_digest): a rerun continues only the same
    base: dict[str, Any]  # name, profile, overrides
    status: Literal["found", "infeasible"]
    diagnosis: str | None  # why the base could not start
    log: str | None  # the discovery start's log, relative to OUT
    startup_s: float | None
    served: dict[str, Any] | None  # the discovery server's provenance (bench's `served`: argv, vLLM, secrets masked)
    memory: str | None  # what the start used, as the arrangement of servers read it
    mode: Mode | None  # auto's choice from that memory (None: ab's own rule)
    mode_reason: str | None
    fallbacks: list[dict[str, Any]]  # every fallback found (launcher.serve.fallbacks.Fallback)
    sides: list[BuiltSide]
    not_measured: list[NotMeasured]


@dataclass
class AgainstOutcome:
    code: int
    message: str
    doc: dict[str, Any]  # fallbacks.json with the ab run's ab.json under "ab" (None when none ran)


def base_from_options(a_ref: str | None, b_ref: str | None, configs: tuple[str, ...]) -> None:
    """The options --against-fallbacks takes: the base as one --config, the other sides built from its log."""
    fix = "e.g. ab --against-fallbacks --config base=sm90 (the sides come from the base's fallbacks)"
    if a_ref or b_ref:
        raise BadInput("--against-fallbacks builds the other sides itself: give the base as --config, not --a/--b", fix)
    if len(configs) != 1:
        raise BadInput(f"--against-fallbacks takes one --config, the base (got {len(configs)})", fix)


def build_sides(found: list[Fallback], base: Side) -> tuple[list[BuiltSide], list[NotMeasured]]:
    """One side per fallback with an alternative (merged where two force the same), and the fallbacks not measured
    with why."""
    settings = side_profile(base).settings
    sides: list[BuiltSide] = []
    changes: list[str] = []  # per side, the setting its alternative changes (extra_args: the flag)
    skipped: list[NotMeasured] = []
    for f in found:
        if not f.alternatives:
            skipped.append({"kind": f.kind, "what": f.what, "why": f"no alternative here: {f.fix}"})
            continue
        first, *rest = f.alternatives
        if set(first.overrides) != {"vllm"}:
            skipped.append({"kind": f.kind, "what": f.what,
                            "why": f"{first.label} sets [env]: an ab side carries [vllm] settings only"})  # fmt: skip
            continue
        alt = dict(first.overrides["vllm"])
        change = next(iter(alt))
        if "extra_args" in alt:  # appended to the profile's, as a profile's extra_args would be
            change = str(alt["extra_args"][0]).lstrip("-")
            alt["extra_args"] = [*settings.get("extra_args", []), *alt["extra_args"]]
        if {**settings, **alt} == settings:
            skipped.append({"kind": f.kind, "what": f.what, "why": f"the base already sets {first.label}"})
            continue
        overrides = {**base.overrides, **alt}
        same = next((s for s in sides if s["overrides"] == overrides), None)
        if same is not None:
            same["fallbacks"].append(f.what)
            same["asked"] = same["asked"] or f.asked
            same["untried"] += [a.label for a in rest if a.label not in same["untried"]]
            continue
        sides.append({"name": f"no-{f.kind}", "overrides": overrides, "alternative": first.label,
                      "fallbacks": [f.what], "asked": f.asked, "untried": [a.label for a in rest]})  # fmt: skip
        changes.append(change.replace("_", "-"))
    _name_apart(sides, changes)
    return sides, skipped


def _name_apart(sides: list[BuiltSide], changes: list[str]) -> None:
    """Sides of one kind are told apart by the setting each changes (no-fp4-emulation-moe-backend), then by a
    number."""
    names = [s["name"] for s in sides]
    for side, change in zip(sides, changes, strict=True):
        if names.count(side["name"]) > 1:
            side["name"] = f"{side['name']}-{change}"
    seen: dict[str, int] = {}
    for side in sides:
        seen[side["name"]] = seen.get(side["name"], 0) + 1
        if seen[side["name"]] > 1:
            side["name"] += f"-{seen[side['name']]}"


def co_resident_memory(log: str, servers: int) -> tuple[Mode, str, str] | None:
    """(mode, why, what the start used) from vLLM's memory line: co-resident when each of `servers` servers' share
    of the device leaves KV_ROOM_GIB beside what the base used outside its KV cache; None without the line (the CPU
    engine prints none: ab's own rule decides)."""
    match = _MEMORY.search(log)
    if not match:
        return None
    total = float(match[1])
    used = sum(float(g) for g in _GIB_FOR.findall(match[2]))
    share = CO_RESIDENT_MEMORY * total / servers
    seen = f"the base's start used {used:.1f} GiB outside its KV cache of {total:.1f} GiB"
    if share - used >= KV_ROOM_GIB:
        return "co-resident", f"{servers} servers at {share:.1f} GiB each fit: {seen}", seen
    return (
        "restart",
        (
            f"{servers} servers at {share:.1f} GiB each leave less than {KV_ROOM_GIB:g} GiB of KV cache beside what "
            f"{seen[4:]}: one server at a time"
        ),
        seen,
    )


def _discover(cfg: AbConfig, base: Side, out: Path, say: Say, digest: str, pool: ServerPool) -> FallbacksDoc:
    """The discovery start: the base alone, as its profile asks; its startup log read once it serves, then
    stopped."""
    doc: FallbacksDoc = {"schema": SCHEMA, "digest": digest,
                         "base": {"name": base.name, "profile": base.profile_ref, "overrides": base.overrides},
                         "status": "infeasible", "diagnosis": None, "log": None, "startup_s": None, "served": None,
                         "memory": None,
                         "mode": None, "mode_reason": None, "fallbacks": [], "sides": [],
                         "not_measured": []}  # fmt: skip
    say(f"ab: starting the base {base.name} alone to read the fallbacks vLLM takes")
    try:
        up, _ = pool.ensure(base)
        profile = pool.profile_for(base)
    except StartFailed as e:
        doc["diagnosis"] = e.message
        return doc
    finally:
        pool.close()  # the server's log is complete once it stopped
    assert up.log is not None
    text = up.log.read_text(encoding="utf-8", errors="replace")
    found = detect(text, profile.settings, profile.env)
    sides, skipped = build_sides(found, base)
    for side in list(sides):  # a flag this vLLM refuses is known without a start: that side is not measured
        try:
            pool.preflight([Side(side["name"], base.profile_ref, side["overrides"])], pass_workload(cfg))
        except (BadInput, NotReady) as e:
            sides.remove(side)
            why = f"{side['alternative']} is refused before any start: {e.message}"
            skipped += [{"kind": "refused", "what": what, "why": why} for what in side["fallbacks"]]
    doc["status"], doc["log"], doc["startup_s"] = "found", str(up.log.relative_to(out)), round(up.startup_s, 1)
    doc["served"] = up.info
    doc["fallbacks"], doc["sides"], doc["not_measured"] = [f.to_json() for f in found], sides, skipped
    arranged = co_resident_memory(text, 1 + len(sides) + cfg.calibrate)
    if arranged:
        doc["mode"], doc["mode_reason"], doc["memory"] = arranged
    return doc


def _stored(out: Path, digest: str) -> FallbacksDoc | None:
    path = out / "fallbacks.json"
    if not path.exists():
        return None
    r = Reader(path, "give a new --out, or the same options and base to continue that run")
    doc = read_json(path, r.fix)
    if doc.get("schema") != SCHEMA:
        raise r.fail("schema", repr(SCHEMA), doc.get("schema"))
    if doc.get("digest") != digest:
        raise BadInput(f"{out} holds an ab --against-fallbacks run of another base or other options", r.fix)
    for i, side in enumerate(r.array(r.get(doc, "sides", ""), "sides")):
        r.text(r.get(r.table(side, f"sides[{i}]"), "name", f"sides[{i}]."), f"sides[{i}].name")
        r.table(r.get(side, "overrides", f"sides[{i}]."), f"sides[{i}].overrides")
    r.array(r.get(doc, "not_measured", ""), "not_measured")
    return doc  # type: ignore[return-value]


def run_against_fallbacks(cfg: AbConfig, out: Path, say: Say, pool: ServerPool | None = None) -> AgainstOutcome:
    """Discover the base's fallbacks (or read them from OUT), then ab the base against each alternative. `pool`
    (tests): the servers of both the discovery and the ab; by default the discovery's own, restarted."""
    from launcher.serve.lifetime import interrupts

    base = cfg.sides[0]
    check_workload(replace(cfg, sides=(base, replace(base, name=f"{base.name}-alternative"))))
    discovery = pool or ServerPool(cfg.model, cfg.python, "restart", out / "logs", say, shares=1)
    discovery.preflight([base], pass_workload(cfg))  # usage and environment errors: nothing starts, nothing written
    digest = run_digest(replace(cfg, sides=(base,)))
    with hold(out, "ab"):
        found = _stored(out, digest)
        if found is None or found["status"] == "infeasible":
            try:
                with interrupts():
                    found = _discover(cfg, base, out, say, digest, discovery)
            except KeyboardInterrupt:
                doc = {"schema": SCHEMA, "status": "interrupted", "ab": None}
                return AgainstOutcome(ExitCode.INTERRUPTED, "interrupted in the base's discovery start", doc)
            write_json(out / "fallbacks.json", found)
        for line in lines(found):
            say(f"ab: {line}")
        if found["status"] == "infeasible":
            message = f"the base {base.name} cannot start: {found['diagnosis']}"
            return AgainstOutcome(ExitCode.PROBLEM, message, {**found, "ab": None})
        if not found["sides"]:
            message = (
                f"nothing to measure: {len(found['fallbacks'])} fallback(s) found, none with an alternative this vLLM "
                "accepts"
            )
            return AgainstOutcome(ExitCode.OK, message, {**found, "ab": None})
        sides = (base, *(Side(s["name"], base.profile_ref, s["overrides"]) for s in found["sides"]))
        mode = found["mode"] if cfg.mode == "auto" and found["mode"] else cfg.mode
        reason = found["mode_reason"] if cfg.mode == "auto" else None
        outcome = run_ab(replace(cfg, sides=sides, mode=mode, mode_reason=reason), out, say, pool)
        _add_to_report(out, found)
    return AgainstOutcome(outcome.code, outcome.message, {**found, "ab": outcome.doc})


def lines(doc: FallbacksDoc) -> list[str]:
    """What the discovery found, one line each: the start, every side with the fallbacks it answers, the later
    alternatives, and every fallback not measured with why."""
    if doc["status"] == "infeasible":
        return [f"the base {doc['base']['name']} could not start: {doc['diagnosis']}"]
    out = [f"the base's start ({doc['log']}, serving after {doc['startup_s']:g} s) took {len(doc['fallbacks'])} "
           f"fallback(s); {len(doc['sides'])} measured"]  # fmt: skip
    for s in doc["sides"]:
        asked = " (the profile asks for it)" if s["asked"] else ""
        out.append(f"{s['name']}: {s['alternative']}, against: {'; '.join(s['fallbacks'])}{asked}")
        if s["untried"]:
            out.append(f"{s['name']}: later alternatives, untried: {', '.join(s['untried'])}")
    out += [f"not measured: {n['kind']}: {n['what']}: {n['why']}" for n in doc["not_measured"]]
    if doc["mode"]:
        out.append(f"mode {doc['mode']}: {doc['mode_reason']}")
    return out


def _add_to_report(out: Path, doc: FallbacksDoc) -> None:
    """report.md (ab's) gains what the discovery found."""
    report = out / "report.md"
    if not report.exists():
        return
    text = report.read_text(encoding="utf-8")
    section = ["", "## Fallbacks measured (ab --against-fallbacks)", "", *[f"- {line}" for line in lines(doc)], ""]
    write_text(report, text.rstrip("\n") + "\n" + "\n".join(section))
