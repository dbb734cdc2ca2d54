"""`nemolaunch ab` (is B faster than A here?) and `nemolaunch tune` (search settings with ab), and how their
results read on a terminal."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

import click

from launcher import noise as noise_rule
from launcher.ab.config import ROUNDS, WARMUP_PASSES, WINDOW_S
from launcher.cli.options import (
    COMPARE_LEVELS_OPTION,
    INPUT_LEN_OPTION,
    JSON_OPTION,
    NAMES,
    OUTPUT_LEN_OPTION,
    PYTHON_OPTION,
    default_out,
)

if TYPE_CHECKING:
    from collections.abc import Callable

    from launcher.ab.document import AbDocument, TuneDocument


def _judging(f: Callable[..., Any]) -> Callable[..., Any]:
    """The options ab and tune share: how long a pass holds the load, and how a difference is judged."""
    for option in reversed(
        [
            click.option("--num-prompts", type=click.IntRange(1),
                         help="Distinct prompts per pass, sent in turn through the window [default: 4 x conc]."),
            click.option("--window", "window_s", default=WINDOW_S, show_default=True, type=click.FloatRange(1, 3600),
                         help="Seconds each pass holds the concurrency (its steady window; ramp and drain extra)."),
            click.option("--threshold", default=noise_rule.THRESHOLD, show_default=True,
                         type=click.FloatRange(0, 0.5, min_open=True, max_open=True),
                         help="The smallest change worth acting on (0.02 = 2%): 'faster' needs the whole interval "
                         "beyond it, 'equivalent' the whole interval within it."),
            click.option("--headline-level", type=click.IntRange(1),
                         help="The level whose output tok/s is judged [default: the highest]; the rest are "
                         "exploratory."),
            click.option("--noise",
                         help="The per-round noise when this run measures none: a fraction (0.015) or the ab.json of "
                         "a calibrated run [default: the noise stored for this machine, if any]."),
            click.option("--calibrate", is_flag=True,
                         help="Also run the baseline against itself (A/A): measures the noise, and stores it for this "
                         "machine."),
        ]
    ):  # fmt: skip
        f = option(f)
    return f


@click.command()
@click.option("--model", required=True, help="The model folder both sides serve.")
@click.option("--a", "a_ref", help="Profile of side A, the baseline (name or path).")
@click.option("--b", "b_ref", help="Profile of side B.")
@click.option("--set-a", multiple=True, metavar="KEY=VALUE", help="Override a [vllm] setting of A (repeatable).")
@click.option("--set-b", multiple=True, metavar="KEY=VALUE", help="Override a [vllm] setting of B (repeatable).")
@click.option(
    "--config",
    "configs",
    multiple=True,
    metavar="NAME=PROFILE[,KEY=VALUE...]",
    help="More configurations (or instead of --a/--b); the first given is the baseline.",
)
@COMPARE_LEVELS_OPTION
@INPUT_LEN_OPTION
@OUTPUT_LEN_OPTION
@_judging
@click.option("--rounds", default=ROUNDS, show_default=True, type=click.IntRange(2), help="The most rounds.")
@click.option("--budget", "budget_min", type=click.FloatRange(0, min_open=True), help="Minutes the run may take.")
@click.option(
    "--warmup-passes",
    default=WARMUP_PASSES,
    show_default=True,
    type=click.IntRange(0),
    help="The most unmeasured passes per server start and level (fewer once throughput stops drifting).",
)
@click.option(
    "--mode",
    type=click.Choice(["auto", "co-resident", "restart"]),
    default="auto",
    show_default=True,
    help="co-resident: all servers up at once, each its share of memory; restart: one server at a time.",
)
@click.option("--no-same-answers", is_flag=True, help="Skip the greedy same-answers check.")
@click.option(
    "--against-fallbacks",
    is_flag=True,
    help="Start the one --config (the base) alone, read the fallbacks vLLM names in its log, and measure the base "
    "against each fallback's alternative (a side no-<kind> per fallback that has one).",
)
@click.option("--out", type=click.Path(file_okay=False, path_type=Path), help="[default: ab-results/ab-<time>].")
@PYTHON_OPTION
@JSON_OPTION
def ab(
    model: str,
    a_ref: str | None,
    b_ref: str | None,
    set_a: tuple[str, ...],
    set_b: tuple[str, ...],
    configs: tuple[str, ...],
    concurrency: tuple[int, ...],
    input_len: int,
    output_len: int,
    num_prompts: int | None,
    window_s: float,
    threshold: float,
    headline_level: int | None,
    noise: str | None,
    calibrate: bool,
    rounds: int,
    budget_min: float | None,
    warmup_passes: int,
    mode: str,
    no_same_answers: bool,
    against_fallbacks: bool,
    out: Path | None,
    python: Path | None,
    as_json: bool,
) -> int:
    """Is B faster than A here? Order-balanced rounds of steady-state passes; the headline judged against the
    threshold and the measured noise, with a stopping rule that keeps a wrong "faster" under 5%.

    After each round from the second, ab stops once every headline is decided, when --rounds are done, or when
    --budget cannot hold another round. Writes OUT/ab.json (schema nemolaunch.ab/3), report.md, ratios.png and
    every pass as a bench folder under OUT/passes/. Ctrl-C keeps the completed rounds (exit 130); the same command
    with the same --out continues. Exit 1 when a configuration cannot serve.

    --against-fallbacks: the sides come from the base's startup log (OUT/fallbacks.json says which fallback each
    answers, and which have no alternative and why); exit 1 when the base cannot start, 0 when no fallback has an
    alternative to measure.
    """
    from launcher.ab import run as stage
    from launcher.ab.calibration import parse_noise_option
    from launcher.ab.config import AbConfig, Workload
    from launcher.ab.sides import sides_from_options
    from launcher.output import json_document

    if against_fallbacks:
        from launcher.ab.against import base_from_options

        base_from_options(a_ref, b_ref, configs)
    sides = sides_from_options(a_ref, b_ref, set_a, set_b, configs)
    given, source = parse_noise_option(noise) if noise else (None, None)
    cfg = AbConfig(
        model=model,
        sides=sides,
        workload=Workload(concurrency, input_len, output_len, num_prompts),
        rounds=rounds,
        warmup_passes=warmup_passes,
        window_s=window_s,
        threshold=threshold,
        budget_min=budget_min,
        headline_level=headline_level,
        mode=mode,  # type: ignore[arg-type]
        calibrate=calibrate,
        noise=given,
        noise_source=source,
        python=python,
        same_answers=not no_same_answers,
    )
    out = out or default_out("ab-results", "ab")
    if against_fallbacks:
        from launcher.ab.against import run_against_fallbacks

        found = run_against_fallbacks(cfg, out, say=lambda m: click.echo(m, err=True))
        click.echo(json_document("ab", found.doc) if as_json else against_text(found.doc))
        kept = "fallbacks.json" + (", ab.json, report.md" if found.doc.get("ab") else "")
        click.echo(f"nemolaunch: {found.message}; results: {out}/{kept}", err=True)
        return found.code
    outcome = stage.run_ab(cfg, out, say=lambda m: click.echo(m, err=True))
    if as_json:
        click.echo(json_document("ab", outcome.doc))
    else:
        click.echo(ab_text(outcome.doc))
    click.echo(f"nemolaunch: {outcome.message}; results: {out}/ab.json, report.md", err=True)
    return outcome.code


@click.command()
@click.option("--model", required=True, help="The model folder to tune for.")
@click.option("--base", default="cpu", show_default=True, help="The profile to start from (name or path).")
@click.option(
    "--budget", "budget_min", default=30.0, show_default=True, type=click.FloatRange(0, min_open=True), help="Minutes."
)
@COMPARE_LEVELS_OPTION
@INPUT_LEN_OPTION
@OUTPUT_LEN_OPTION
@_judging
@click.option("--rounds", default=ROUNDS, show_default=True, type=click.IntRange(2), help="The final's most rounds.")
@click.option(
    "--knobs",
    type=NAMES,
    help="What to search, comma-separated [default: probe, cuda_graphs, gpu_memory_utilization, max_num_seqs, "
    "max_num_batched_tokens, async_scheduling, kv_cache_dtype].",
)
@click.option(
    "--from",
    "probe_json",
    type=click.Path(exists=True, dir_okay=False, path_type=Path),
    help="A probe report (probe --json): its close calls and faster kernels become candidates.",
)
@click.option("--name", help="The tuned profile's name [default: BASE-tuned].")
@click.option("--out", type=click.Path(file_okay=False, path_type=Path), help="[default: tune-results/tune-<time>].")
@PYTHON_OPTION
@JSON_OPTION
def tune(
    model: str,
    base: str,
    budget_min: float,
    concurrency: tuple[int, ...],
    input_len: int,
    output_len: int,
    num_prompts: int | None,
    window_s: float,
    threshold: float,
    headline_level: int | None,
    noise: str | None,
    calibrate: bool,
    rounds: int,
    knobs: tuple[str, ...] | None,
    probe_json: Path | None,
    name: str | None,
    out: Path | None,
    python: Path | None,
    as_json: bool,
) -> int:
    """Search serving settings end to end (screen, then an interleaved ab of the finalists and their combination)
    and write the winner: only a setting whose headline cleared the threshold; a tie keeps the base.

    Writes OUT/NAME.toml (the tuned profile, [why] citing ab verdicts, [tuned] the stack and workload),
    OUT/tune.json and every trial's ab folder; nothing when nothing was measured (exit 1, the reason said).
    Rerun the same command with the same --out to resume.
    """
    from launcher.ab import tune as stage
    from launcher.ab.calibration import parse_noise_option
    from launcher.ab.candidates import KNOBS
    from launcher.ab.config import Workload
    from launcher.output import json_document

    given, source = parse_noise_option(noise) if noise else (None, None)
    cfg = stage.TuneConfig(
        model=model,
        base=base,
        budget_min=budget_min,
        workload=Workload(concurrency, input_len, output_len, num_prompts),
        rounds=rounds,
        window_s=window_s,
        threshold=threshold,
        headline_level=headline_level,
        calibrate=calibrate,
        knobs=knobs or tuple(KNOBS),
        probe=probe_json,
        python=python,
        name=name,
        noise=given,
        noise_source=source,
    )
    out = out or default_out("tune-results", "tune")
    outcome = stage.run_tune(cfg, out, say=lambda m: click.echo(m, err=True))
    if as_json:
        click.echo(json_document("tune", outcome.doc))
    else:
        click.echo(tune_text(outcome.doc))
    click.echo(f"nemolaunch: {outcome.message}", err=True)
    return outcome.code


def ab_text(doc: AbDocument) -> str:
    from launcher.ab.report import VERDICT_HEADERS, agreement_text, verdict_rows
    from launcher.output import table

    lines = [table(VERDICT_HEADERS, verdict_rows(doc))]
    for s in doc["sides"]:
        if s["status"] in ("infeasible", "died"):
            lines.append(f"{s['name']}: {s['status']}: {s['diagnosis']}")
    answers = doc["answers"]
    if answers["applies"]:
        lines += [f"{name} vs {doc['baseline']}: {agreement_text(a)}" for name, a in answers["sides"].items()]
    else:
        lines.append(f"same answers not compared: {answers['note']}")
    lines.append(f"stopped: {doc['stopped_by']}; noise: {doc['noise']['source']}; mode {doc['mode']}")
    return "\n".join(lines)


def against_text(doc: dict[str, Any]) -> str:
    """ab --against-fallbacks: what the base's start showed, then the ab's verdicts (if one ran)."""
    from launcher.ab.against import lines

    out = lines(doc) if doc.get("status") in ("found", "infeasible") else []  # type: ignore[arg-type]
    if doc.get("ab"):
        out.append(ab_text(doc["ab"]))
    return "\n".join(out)


def tune_text(doc: TuneDocument) -> str:
    from launcher.ab.report import trial_result
    from launcher.output import table

    rows = [[t["name"], t["stage"], t["status"], trial_result(t)] for t in doc["trials"]]
    if doc["final"]:
        rows.append(["final", "final", "done", doc["final"]["folder"]])
    lines = [table(["candidate", "stage", "status", "result"], rows)]
    lines += [f"not tested: {n}" for n in doc["not_tested"]]
    if doc["profile"]:
        lines.append(f"winner: {doc['winner']}; profile written to {doc['profile']}")
    else:
        lines.append(f"no profile written: {doc['decision']}")
    return "\n".join(lines)
