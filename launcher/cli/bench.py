"""`nemolaunch bench` (the sweep) and `nemolaunch compare` (runs side by side); bench's result as a terminal
table, one row per level of summary.json."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import click

from launcher.cli.options import (
    FLOATS,
    INPUT_LEN_OPTION,
    INTS,
    JSON_OPTION,
    OUTPUT_LEN_OPTION,
    PYTHON_OPTION,
    default_out,
)
from launcher.defaults import SWEEP_LEVELS, levels_text
from launcher.errors import ExitCode


@click.command()
@click.option("--url", help="An OpenAI-compatible server already running (e.g. http://127.0.0.1:8000).")
@click.option("--profile", "profile_ref", help="Or: start vLLM with this profile (with --model), sweep, stop it.")
@click.option("--model", help="With --profile: the model folder. With --url: the served model name (default: first).")
@click.option(
    "--port",
    type=click.IntRange(1, 65535),
    help="With --profile: the port of the server bench starts on 127.0.0.1 [default: a free one].",
)
@click.option(
    "--concurrency",
    type=INTS,
    default=None,
    help=f"Levels, comma-separated [default: {levels_text(SWEEP_LEVELS)}]. With --request-rate or --context-lens: "
    "one value, the cap on requests in flight.",
)
@click.option(
    "--request-rate",
    type=FLOATS,
    help="Levels as requests per second, comma-separated (instead of concurrency levels).",
)
@click.option(
    "--arrival",
    type=click.Choice(["poisson", "constant", "gamma"]),
    default="poisson",
    show_default=True,
    help="With --request-rate: arrival times (gamma: shape --burstiness, as vLLM bench serve).",
)
@click.option("--burstiness", default=1.0, show_default=True, help="With --arrival gamma: below 1 burstier.")
@click.option("--slo", help="Goodput: service levels in ms, e.g. ttft=200,tpot=50 (names: ttft, tpot, e2el).")
@click.option("--slo-share", default=0.9, show_default=True, help="A level meets the SLOs when this share does.")
@click.option(
    "--dataset",
    type=click.Path(dir_okay=False, path_type=Path),
    help='Prompts from a JSONL file: {"prompt": "...", "output_tokens": 128} per line.',
)
@click.option(
    "--shared-prefix", default=0, show_default=True, type=click.IntRange(0), help="Tokens every prompt shares."
)
@click.option("--context-lens", type=INTS, help="A context-length sweep: prompt lengths in tokens, comma-separated.")
@INPUT_LEN_OPTION
@OUTPUT_LEN_OPTION
@click.option("--num-prompts", type=click.IntRange(1), help="Requests per level [default: 4 x concurrency, >= 8].")
@click.option("--duration", "duration_s", type=float, help="Seconds per level instead.")
@click.option("--warmup", default=2, show_default=True, type=click.IntRange(0), help="Unmeasured requests per level.")
@click.option("--repeats", default=1, show_default=True, type=click.IntRange(1))
@click.option("--endpoint", type=click.Choice(["completions", "chat"]), default="completions", show_default=True)
@click.option("--label", help="Name of this run in reports [default: the profile, or 'run'].")
@click.option(
    "--out",
    type=click.Path(file_okay=False, path_type=Path),
    help="Result folder [default: bench-results/<label>-<time>].",
)
@click.option("--seed", default=0, show_default=True)
@click.option("--request-timeout", default=600.0, show_default=True, help="Seconds per request.")
@click.option(
    "--client-processes",
    type=int,
    help="Spread each concurrency level's streams over this many client processes [default: one per 128 "
    "streams, at most one per 4 CPUs].",
)
@click.option(
    "--api-key-file",
    type=click.Path(dir_okay=False, path_type=Path),
    help="The server's API key (first line). Default: $NEMOLAUNCH_API_KEY, then $VLLM_API_KEY. Never written.",
)
@PYTHON_OPTION
@JSON_OPTION
def bench(
    url: str | None,
    profile_ref: str | None,
    model: str | None,
    port: int | None,
    concurrency: tuple[int, ...] | None,
    request_rate: tuple[float, ...] | None,
    arrival: str,
    burstiness: float,
    slo: str | None,
    slo_share: float,
    dataset: Path | None,
    shared_prefix: int,
    context_lens: tuple[int, ...] | None,
    input_len: int,
    output_len: int,
    num_prompts: int | None,
    duration_s: float | None,
    warmup: int,
    repeats: int,
    endpoint: str,
    label: str | None,
    out: Path | None,
    seed: int,
    request_timeout: float,
    client_processes: int | None,
    api_key_file: Path | None,
    python: Path | None,
    as_json: bool,
) -> int:
    """Run the throughput sweep (concurrency 1..64, or request rates) against an OpenAI-compatible server.

    Writes OUT/summary.json (schema nemolaunch.bench/1), summary.csv, requests.jsonl (every request, written
    as it finishes), per level vllm-LEVEL.json (the keys of vllm bench serve --save-result), report.md and
    plots. Ctrl-C or SIGTERM keeps everything measured so far. Exit 1 if requests failed.
    """
    from launcher import bench as stage
    from launcher.output import json_document, table

    cfg = stage.BenchConfig.from_options(
        url=url,
        profile=profile_ref,
        model=model,
        concurrency=concurrency,
        request_rates=request_rate,
        arrival=arrival,
        burstiness=burstiness,
        slo=slo,
        slo_share=slo_share,
        dataset=dataset,
        shared_prefix_len=shared_prefix,
        context_lens=context_lens,
        input_len=input_len,
        output_len=output_len,
        num_prompts=num_prompts,
        duration_s=duration_s,
        warmup=warmup,
        repeats=repeats,
        label=label,
        endpoint=endpoint,
        seed=seed,
        request_timeout_s=request_timeout,
        client_processes=client_processes,
        api_key_file=api_key_file,
    )
    out = out or default_out("bench-results", cfg.label)
    say = lambda message: click.echo(message, err=True)  # noqa: E731
    if profile_ref and model:
        outcome = stage.run_served(profile_ref, model, python, port, cfg, out, say)
    else:
        outcome = stage.run(cfg, out, None, say)
    levels_done = outcome.summary.get("levels", [])
    if as_json:
        click.echo(json_document("bench", outcome.summary))
    else:
        click.echo(table(*headers_for(levels_done)))
        for warning in outcome.summary.get("warnings", []):
            click.secho(f"warning: {warning}", fg="yellow", err=True)
        verdict = outcome.summary.get("slo")
        if verdict:
            click.echo(slo_line(verdict, outcome.summary["workload"]), err=True)
        roof = roofline_line(outcome.summary.get("roofline"))
        if roof:
            click.echo(roof, err=True)
        click.echo(f"results: {out}/summary.json, summary.csv, requests.jsonl, vllm-*.json, report.md", err=True)
    if outcome.code != ExitCode.OK:
        click.echo(f"nemolaunch: {outcome.message}", err=True)
    return outcome.code


@click.command()
@click.argument("runs", nargs=-1, required=True, type=click.Path(exists=True, file_okay=False, path_type=Path))
@click.option(
    "--out",
    type=click.Path(file_okay=False, path_type=Path),
    default=Path("bench-report"),
    show_default=True,
    help="Where report.md and the plots go.",
)
@click.option("--force", is_flag=True, help="Compare runs even if their workloads differ.")
def compare(runs: tuple[Path, ...], out: Path, force: bool) -> int:
    """Compare bench runs side by side across the concurrency curve (ratios to the first run)."""
    from launcher.bench import compare as stage

    text, report = stage.compare(list(runs), out, force)
    click.echo(text)
    click.echo(f"report: {report}", err=True)
    return ExitCode.OK


TABLE_HEADERS = [
    "conc",
    "rate",
    "ok",
    "failed",
    "out tok/s",
    "req/s",
    "TTFT ms",
    "TTFT p99",
    "TPOT ms",
    "ITL p99",
    "E2E ms",
    "achieved",
    "in SLO",
]


def table_rows(levels: list[dict[str, Any]]) -> list[list[object]]:
    """Rows for launcher.output.table; a level that completed nothing shows '-' for its latencies."""
    rows: list[list[object]] = []
    for lv in levels:
        goodput = lv.get("goodput") or {}
        share = goodput.get("share")
        rows.append(
            [
                lv["concurrency"],
                lv.get("request_rate"),
                lv["completed"],
                lv["failed"],
                lv["output_throughput_tok_s"],
                lv["request_throughput_req_s"],
                lv["ttft_ms"]["mean"],
                lv["ttft_ms"]["p99"],
                lv["tpot_ms"]["mean"],
                lv["itl_ms"]["p99"],
                lv["e2el_ms"]["mean"],
                lv["achieved_concurrency"],
                None if share is None else f"{share:.0%}",
            ]
        )
    return rows


def headers_for(levels: list[dict[str, Any]]) -> tuple[list[str], list[list[object]]]:
    """The table without the columns no level uses (rate without --request-rate, in SLO without --slo), and with
    the prompt length when levels differ in it (a context-length sweep)."""
    rows = table_rows(levels)
    keep = [
        i for i, h in enumerate(TABLE_HEADERS) if h not in ("rate", "in SLO") or any(row[i] is not None for row in rows)
    ]
    headers = [TABLE_HEADERS[i] for i in keep]
    rows = [[row[i] for i in keep] for row in rows]
    if len({lv.get("input_len") for lv in levels}) > 1:
        headers.insert(1, "in")
        for row, lv in zip(rows, levels, strict=True):
            row.insert(1, lv.get("input_len"))
    return headers, rows


def slo_line(verdict: dict[str, Any], workload: dict[str, Any]) -> str:
    slo = ", ".join(f"{k} <= {v:g} ms" for k, v in (workload.get("slo_ms") or {}).items())
    share = workload.get("slo_share") or 0
    best = verdict.get("highest_meeting") or "no level"
    tail = f"; first missed at {verdict['first_failing']}" if verdict.get("first_failing") else ""
    return f"SLO ({slo}, {share:.0%} of requests): met up to {best}{tail}"


def roofline_line(roofline: dict[str, Any] | None) -> str | None:
    """One line on the bandwidth roofline that summary.json carries when bench started the server."""
    if not roofline:
        return None
    if not roofline.get("applies"):
        return f"roofline: does not apply ({roofline.get('reason')})"
    shares = ", ".join(
        f"c={lv['concurrency']} {lv['percent_of_limit']:.0f}%"
        for lv in roofline.get("levels", [])
        if lv.get("percent_of_limit") is not None
    )
    return (
        f"roofline: at most {roofline['ceiling_per_user_tok_s']:.0f} tok/s per user at c=1 by memory bandwidth; "
        f"measured share of the limit: {shares or '-'} (nemolaunch roofline SUMMARY --model DIR for the table)"
    )
