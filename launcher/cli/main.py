"""The command line: parse, call one stage function, render, exit with the code the stage decided.

Stage modules are imported inside each command so that `nemolaunch --help` stays fast and never pulls in
anything heavy.
"""

from __future__ import annotations

import json
import sys
import traceback
from pathlib import Path
from typing import Any

import click

from launcher import __version__
from launcher.errors import EXIT_CODES_HELP, ExitCode, NemolaunchError

_verbose = False

JSON_OPTION = click.option("--json", "as_json", is_flag=True, help="Machine output on stdout (schema-versioned JSON).")
PYTHON_OPTION = click.option(
    "--python",
    "python",
    type=click.Path(dir_okay=False, path_type=Path),
    help="The engine's interpreter (the venv where vLLM is installed). Default: $NEMOLAUNCH_PYTHON, "
    "then the profile's `python`, then this interpreter.",
)


@click.group(
    context_settings={"help_option_names": ["-h", "--help"]},
    epilog=EXIT_CODES_HELP,
)
@click.option("-v", "--verbose", is_flag=True, help="Show the traceback behind an error.")
@click.version_option(__version__, prog_name="nemolaunch")
def cli(verbose: bool) -> None:
    """Doctor, probe, profile, serve and benchmark vLLM on new NVIDIA GPUs.

    \b
    The flow: doctor -> probe -> profile -> serve -> bench -> compare.
    Without a GPU, nemolaunch serves the embedded default: the vLLM CPU engine and a tiny
    random-weight model it builds offline (`make bench`).
    """
    global _verbose
    _verbose = verbose


@cli.command()
@JSON_OPTION
@click.option("--strict", is_flag=True, help="Warnings fail too (exit 1).")
@click.option("--only", help="Run only these checks (comma-separated ids; see --list-checks).")
@click.option("--list-checks", is_flag=True, help="List the checks and exit.")
@click.option(
    "--lock",
    type=click.Path(exists=True, dir_okay=False, path_type=Path),
    help="Compare installed versions with this lock (name==version lines).",
)
@click.option("--model", type=click.Path(path_type=Path), help="A model folder: check memory headroom for it.")
@click.option(
    "--profile",
    "profile_ref",
    help="A serving profile: check its tensor/pipeline/data parallel sizes against --model and the GPUs, and a "
    "tuned profile's stack against the installed one.",
)
@click.option("--no-cache", is_flag=True, help="Re-run the import probes even if nothing changed.")
@PYTHON_OPTION
def doctor(
    as_json: bool,
    strict: bool,
    only: str | None,
    list_checks: bool,
    lock: Path | None,
    model: Path | None,
    profile_ref: str | None,
    no_cache: bool,
    python: Path | None,
) -> int:
    """Check driver, CUDA, torch, vLLM, FlashInfer and the GPU; give each problem its fix.

    Exit 0 when nothing fails (warnings allowed unless --strict), 1 when a check fails. On a host without an
    NVIDIA driver the GPU checks are skipped and doctor says that only the CPU engine can serve there.
    """
    from launcher.doctor import run as stage
    from launcher.output import json_document
    from launcher.views import doctor as view

    if list_checks:
        click.echo(view.render_checks(stage.known_checks()))
        return ExitCode.OK
    ids = [c.strip() for c in only.split(",") if c.strip()] if only else None
    report = stage.run(python, model, lock, ids, use_cache=not no_cache, profile=profile_ref)
    click.echo(json_document("doctor", report.to_json()) if as_json else view.render_report(report, click.style))
    return stage.exit_code(report, strict)


@cli.command()
@JSON_OPTION
@click.option(
    "--model",
    type=click.Path(exists=True, file_okay=False, path_type=Path),
    help="Probe the chains this model can use (its quantization, its experts; attention always), at the shapes "
    "of its config.json, instead of every chain at a Llama-8B-like layer.",
)
@click.option("--all", "every", is_flag=True, help="Every chain, even those --model cannot use.")
@click.option(
    "--quantization",
    help="vLLM's online quantization of an unquantized --model (e.g. fp8): probe the chains it would run.",
)
@click.option(
    "--only", help="Only these chains (comma-separated: fp8_dense, nvfp4_dense, nvfp4_moe, fp8_moe, attention)."
)
@click.option("--timeout", "timeout_s", default=180.0, show_default=True, help="Seconds per kernel probe.")
@click.option(
    "--build-wait",
    "build_wait_s",
    type=click.FloatRange(min=0),
    help="Seconds from the start to wait for FlashInfer's JIT builds (started first, in the background); a kernel "
    "still waiting then is reported not-built and the build goes on for the next run [default: 115, what a fresh "
    "H200's build needs, ending under 2 minutes].",
)
@click.option(
    "--recheck",
    "recheck_ref",
    help="A profile: re-run the probes behind its kernel choices and say "
    "whether they are still the fastest (exit 1 if not); its online quantization counts for --model.",
)
@PYTHON_OPTION
def probe(
    as_json: bool,
    model: Path | None,
    every: bool,
    quantization: str | None,
    only: str | None,
    timeout_s: float,
    build_wait_s: float | None,
    recheck_ref: str | None,
    python: Path | None,
) -> int:
    """Run the kernels of vLLM's FP8, FP4/MoE and attention chains here; rank them by measured speed.

    Each kernel runs isolated in its own process with a timeout; its output is checked against a float32
    reference. Without an NVIDIA GPU it lists the chains and exits 3.
    """
    from launcher.errors import NotReady
    from launcher.output import json_document
    from launcher.probe import run as stage
    from launcher.profiles.profile import load_profile
    from launcher.profiles.write import recheck, rechecked_chains
    from launcher.views.probe import render

    chains = [c.strip() for c in only.split(",") if c.strip()] if only else None
    steered = load_profile(recheck_ref) if recheck_ref else None
    if steered and not chains:
        chains = rechecked_chains(steered)
    if steered and quantization is None:
        quantization = stage.profile_quantization(steered)
    report = stage.run(
        python,
        model,
        timeout_s,
        chains,
        lambda m: click.echo(f"probing {m}", err=True),
        quantization,
        every,
        stage.BUILD_WAIT_S if build_wait_s is None else build_wait_s,
    )
    doc = report.to_json()
    checked = recheck(steered, doc) if steered and report.gpu else []
    if as_json:
        if steered:
            doc["recheck"] = [
                {"chain": c, "profile_gets": got, "probe_recommends": pick, "still_best": ok}
                for c, got, pick, ok in checked
            ]
        click.echo(json_document("probe", doc))
    else:
        click.echo(render(report, checked, steered.name if steered else None))
    if report.gpu is None:
        raise NotReady(
            "probes need an NVIDIA GPU (the chains above were read, nothing was run)",
            "run nemolaunch probe on the GPU host",
        )
    if report.interrupted:
        return ExitCode.INTERRUPTED
    if steered and not all(ok for *_, ok in checked):
        click.echo(
            f"nemolaunch: profile {steered.name} no longer picks the fastest kernel everywhere; "
            "fix: nemolaunch profile write from this probe's --json",
            err=True,
        )
        return ExitCode.PROBLEM
    return ExitCode.OK


@cli.group()
def profile() -> None:
    """List, show and write serving profiles (intent, rendered per vLLM version)."""


@profile.command("list")
@JSON_OPTION
def profile_list(as_json: bool) -> int:
    """List the shipped profiles."""
    from launcher.output import json_document
    from launcher.profiles.profile import list_profiles
    from launcher.views.profile import profile_json, render_list

    profiles = list_profiles()
    if as_json:
        click.echo(json_document("profile", {"profiles": [profile_json(p, None) for p in profiles]}))
    else:
        click.echo(render_list(profiles))
    return ExitCode.OK


@profile.command("show")
@click.argument("name")
@click.option("--vllm-version", help="Also show the flags rendered for this vLLM version.")
@JSON_OPTION
def profile_show(name: str, vllm_version: str | None, as_json: bool) -> int:
    """Show a profile (NAME or a path): its interpreter, each setting, its evidence, and optionally its rendering.
    Secret values read <redacted>."""
    from launcher.output import json_document
    from launcher.profiles.flags import render
    from launcher.profiles.profile import load_profile
    from launcher.views.profile import profile_json, render_show

    prof = load_profile(name)
    rendered = render(prof, vllm_version) if vllm_version else None
    click.echo(json_document("profile", profile_json(prof, rendered)) if as_json else render_show(prof, rendered))
    return ExitCode.OK


@profile.command("write")
@click.option("--name", required=True, help="The new profile's name.")
@click.option(
    "--from",
    "sources",
    multiple=True,
    required=True,
    type=click.Path(exists=True, dir_okay=False, path_type=Path),
    help="Evidence: the --json output of doctor and/or probe (repeat the option).",
)
@click.option("--base", help="Start from this profile (name or path); evidence overrides its settings.")
@click.option("--out", type=click.Path(dir_okay=False, path_type=Path), help="Where to write [default: NAME.toml].")
@click.option("--force", is_flag=True, help="Overwrite an existing profile at --out.")
def profile_write(name: str, sources: tuple[Path, ...], base: str | None, out: Path | None, force: bool) -> int:
    """Turn doctor and probe evidence into a profile: the fastest correct kernel per chain, memory that leaves
    graph-capture headroom, CUDA graphs on, and a why on every setting. An existing file is kept unless --force."""
    from launcher.errors import BadInput
    from launcher.output import atomic_write_text
    from launcher.profiles.profile import check_name, load_profile
    from launcher.profiles.write import load_evidence, write_profile

    check_name(name)
    out = out or Path(f"{name}.toml")
    if out.exists() and not force:
        raise BadInput(f"{out} already exists", "pass --force to overwrite it, or give another --out")
    text = write_profile(name, load_evidence(list(sources)), load_profile(base) if base else None, out)
    atomic_write_text(out, text)
    click.echo(text)
    click.echo(f"wrote {out}", err=True)
    return ExitCode.OK


@cli.command()
@click.option("--profile", "profile_ref", required=True, help="A shipped profile name (cpu, sm90, sm120) or a path.")
@click.option("--model", required=True, help="The model folder (config.json and weights).")
@click.option("--host", default="127.0.0.1", show_default=True)
@click.option("--port", default=8000, show_default=True, type=click.IntRange(1, 65535))
@click.option("--dry-run", is_flag=True, help="Print the exact command and environment, launch nothing.")
@click.option("--vllm-version", help="Render for another host's vLLM (implies --dry-run; nothing is verified).")
@click.option(
    "--log-file",
    type=click.Path(dir_okay=False, path_type=Path),
    help="Where vLLM's log goes (default: nemolaunch-logs/serve-<time>.log).",
)
@click.option("--quiet", is_flag=True, help="Do not echo vLLM's log to the terminal.")
@click.option("--smoke", is_flag=True, help="Once serving, send one streamed completion, then stop.")
@click.option(
    "--node-rank",
    default=0,
    show_default=True,
    type=click.IntRange(0),
    help="A multi-node profile: launch this node's part (its position in [placement].nodes; 0 is the head).",
)
@click.option(
    "--api-key-file",
    type=click.Path(dir_okay=False, path_type=Path),
    help="vLLM demands this key (the file's first line; handed to vLLM as $VLLM_API_KEY, never on its argv). "
    "Default: the profile's, else $VLLM_API_KEY.",
)
@PYTHON_OPTION
@JSON_OPTION
def serve(
    profile_ref: str,
    model: str,
    host: str,
    port: int,
    dry_run: bool,
    vllm_version: str | None,
    log_file: Path | None,
    quiet: bool,
    smoke: bool,
    node_rank: int,
    api_key_file: Path | None,
    python: Path | None,
    as_json: bool,
) -> int:
    """Launch vLLM with a profile's flags for the installed version, and watch its log.

    A multi-node profile ([placement].nodes) runs one node's part per call: `--node-rank 0` on the head
    (it serves the API), `--node-rank K` on node K (headless workers).

    A --host beyond loopback is warned about (and more so without an API key); once serving, serve says the
    address vLLM really listens on, and only after checking that the server answering is the one it started.
    """
    from checks.secrets import redact_text
    from launcher.output import json_document
    from launcher.serve import run as stage

    def say(message: str) -> None:
        click.echo(message, err=True)

    if not (dry_run or vllm_version):
        stage.check_model(model)
    plan = stage.make_plan(
        profile_ref, model, python, host, port, vllm_version, node_rank, api_key_file=api_key_file, say=say
    )
    for warning in stage.warnings(plan):
        click.secho(f"warning: {warning}", fg="yellow", err=True)
    if dry_run or vllm_version:
        click.echo(json_document("serve", plan.to_json()) if as_json else plan.shell())
        return ExitCode.OK
    say(f"engine: {plan.interpreter.describe()}, vLLM {plan.rendered.vllm_version}")
    log_path = log_file or stage.default_log_path()
    echo_log = None if quiet else (lambda line: click.echo(redact_text(line), err=True))
    return stage.run(plan, model, log_path, say=say, echo_log=echo_log, smoke=smoke)


def _int_list(text: str) -> tuple[int, ...]:
    try:
        values = tuple(int(v) for v in text.split(",") if v.strip())
    except ValueError:
        raise click.BadParameter(f"{text!r} is not a comma-separated list of integers") from None
    if not values or min(values) < 1:
        raise click.BadParameter("give positive integers, e.g. 1,2,4,8")
    return values


def _float_list(text: str) -> tuple[float, ...]:
    try:
        return tuple(float(v) for v in text.split(",") if v.strip())
    except ValueError:
        raise click.BadParameter(f"{text!r} is not a comma-separated list of numbers") from None


@cli.command()
@click.option("--url", help="An OpenAI-compatible server already running (e.g. http://127.0.0.1:8000).")
@click.option("--profile", "profile_ref", help="Or: start vLLM with this profile (with --model), sweep, stop it.")
@click.option("--model", help="With --profile: the model folder. With --url: the served model name (default: first).")
@click.option("--port", default=8000, show_default=True, type=click.IntRange(1, 65535))
@click.option(
    "--concurrency",
    default=None,
    help="Levels, comma-separated [default: 1,2,4,8,16,32,64]. With --request-rate or --context-lens: one value, "
    "the cap on requests in flight.",
)
@click.option("--request-rate", help="Levels as requests per second, comma-separated (instead of concurrency levels).")
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
@click.option("--context-lens", help="A context-length sweep: prompt lengths in tokens, comma-separated.")
@click.option("--input-len", default=512, show_default=True, type=click.IntRange(1))
@click.option("--output-len", default=256, show_default=True, type=click.IntRange(2))
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
    port: int,
    concurrency: str | None,
    request_rate: str | None,
    arrival: str,
    burstiness: float,
    slo: str | None,
    slo_share: float,
    dataset: Path | None,
    shared_prefix: int,
    context_lens: str | None,
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
    import time

    from checks.secrets import api_key
    from launcher import bench as stage
    from launcher.errors import BadInput
    from launcher.output import json_document, table
    from launcher.views import bench as view

    if bool(url) == bool(profile_ref):
        raise BadInput("give either --url (a running server) or --profile with --model (nemolaunch starts one)")
    if profile_ref and not model:
        raise BadInput("--profile needs --model (the model folder to serve)")
    if num_prompts and duration_s:
        raise BadInput("give --num-prompts or --duration, not both")
    try:
        key = api_key(api_key_file)
    except (OSError, ValueError) as e:
        raise BadInput(f"cannot read --api-key-file {api_key_file}: {e}") from None
    label = label or (Path(profile_ref).stem if profile_ref else "run")
    if request_rate or context_lens:
        levels = _int_list(concurrency) if concurrency else ()
    else:
        levels = _int_list(concurrency or "1,2,4,8,16,32,64")
    cfg_args = dict(
        concurrency=levels,
        request_rates=_float_list(request_rate) if request_rate else (),
        arrival=arrival,
        burstiness=burstiness,
        slo_ms=stage.parse_slo(slo) if slo else (),
        slo_share=slo_share,
        dataset=dataset,
        shared_prefix_len=shared_prefix,
        context_lens=(_int_list(context_lens) if context_lens else ()),
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
        api_key=key,
        client_processes=client_processes,
    )
    if context_lens and not levels:
        cfg_args["concurrency"] = (1,)
    stage.validate(stage.BenchConfig(url=url or "", **cfg_args))  # type: ignore[arg-type]
    out = out or Path("bench-results") / f"{label}-{time.strftime('%Y%m%d-%H%M%S')}"
    if (out / "summary.json").exists():
        raise BadInput(f"{out} already holds a bench run", "give a new --out folder (runs are never overwritten)")
    say = lambda message: click.echo(message, err=True)  # noqa: E731
    if url:
        cfg = stage.BenchConfig(url=url.rstrip("/"), model=model, **cfg_args)  # type: ignore[arg-type]
        outcome = stage.run(cfg, out, None, say)
    else:
        assert profile_ref and model
        outcome = stage.run_served(profile_ref, model, python, port, cfg_args, out, say)
    levels_done = outcome.summary.get("levels", [])
    if as_json:
        click.echo(json_document("bench", {k: v for k, v in outcome.summary.items() if k != "schema"}))
    else:
        click.echo(table(*view.headers_for(levels_done)))
        for warning in outcome.summary.get("warnings", []):
            click.secho(f"warning: {warning}", fg="yellow", err=True)
        verdict = outcome.summary.get("slo")
        if verdict:
            click.echo(view.slo_line(verdict, outcome.summary["workload"]), err=True)
        roof = view.roofline_line(outcome.summary.get("roofline"))
        if roof:
            click.echo(roof, err=True)
        click.echo(f"results: {out}/summary.json, summary.csv, requests.jsonl, vllm-*.json, report.md", err=True)
    if outcome.code != ExitCode.OK:
        click.echo(f"nemolaunch: {outcome.message}", err=True)
    return outcome.code


@cli.command()
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
@click.option("--concurrency", default="1,8,32", show_default=True, help="Levels, comma-separated.")
@click.option("--rounds", default=3, show_default=True, type=click.IntRange(1), help="ABBA blocks.")
@click.option("--input-len", default=256, show_default=True, type=click.IntRange(1))
@click.option("--output-len", default=128, show_default=True, type=click.IntRange(2))
@click.option("--num-prompts", type=click.IntRange(1), help="Requests per level and pass [default: 4 x conc, >= 8].")
@click.option("--warmup", default=2, show_default=True, type=click.IntRange(0), help="Unmeasured requests per level.")
@click.option(
    "--warmup-passes", default=1, show_default=True, type=click.IntRange(0), help="Unmeasured passes per server start."
)
@click.option(
    "--mode",
    type=click.Choice(["auto", "co-resident", "restart"]),
    default="auto",
    show_default=True,
    help="co-resident: all servers up at once, each its share of memory; restart: one server at a time.",
)
@click.option("--calibrate", is_flag=True, help="Also run A against itself (A/A) to measure the noise floor.")
@click.option("--noise-floor", help="A stored floor: a fraction (0.03) or the ab.json of a calibrated run.")
@click.option("--no-same-answers", is_flag=True, help="Skip the greedy same-answers check.")
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
    concurrency: str,
    rounds: int,
    input_len: int,
    output_len: int,
    num_prompts: int | None,
    warmup: int,
    warmup_passes: int,
    mode: str,
    calibrate: bool,
    noise_floor: str | None,
    no_same_answers: bool,
    out: Path | None,
    python: Path | None,
    as_json: bool,
) -> int:
    """Is B faster than A here? Interleaved ABBA rounds of bench passes, a verdict per level against the noise.

    Writes OUT/ab.json (schema nemolaunch.ab/1), report.md, ratios.png and every pass as a bench folder under
    OUT/passes/. Ctrl-C keeps the completed rounds (exit 130); the same command with the same --out continues
    (a larger --rounds extends a complete run). Exit 1 when a configuration cannot serve.
    """
    import time

    from launcher.ab import run as stage
    from launcher.output import json_document
    from launcher.views.ab import ab_text

    sides = stage.sides_from_options(a_ref, b_ref, set_a, set_b, configs)
    floor, source = stage.load_noise_floor(noise_floor) if noise_floor else (None, None)
    cfg = stage.AbConfig(
        model=model,
        sides=sides,
        concurrency=_int_list(concurrency),
        rounds=rounds,
        input_len=input_len,
        output_len=output_len,
        num_prompts=num_prompts,
        warmup_requests=warmup,
        warmup_passes=warmup_passes,
        mode=mode,  # type: ignore[arg-type]
        calibrate=calibrate,
        noise_floor=floor,
        noise_floor_source=source,
        python=python,
        same_answers=not no_same_answers,
    )
    out = out or Path("ab-results") / time.strftime("ab-%Y%m%d-%H%M%S")
    outcome = stage.run_ab(cfg, out, say=lambda m: click.echo(m, err=True))
    if as_json:
        click.echo(json_document("ab", {k: v for k, v in outcome.doc.items() if k != "schema"}))
    else:
        click.echo(ab_text(outcome.doc))
    click.echo(f"nemolaunch: {outcome.message}; results: {out}/ab.json, report.md", err=True)
    return outcome.code


@cli.command()
@click.option("--model", required=True, help="The model folder to tune for.")
@click.option("--base", default="cpu", show_default=True, help="The profile to start from (name or path).")
@click.option("--budget", "budget_min", default=30.0, show_default=True, type=click.FloatRange(min=1), help="Minutes.")
@click.option("--concurrency", default="1,8,32", show_default=True, help="Levels, comma-separated.")
@click.option("--input-len", default=256, show_default=True, type=click.IntRange(1))
@click.option("--output-len", default=128, show_default=True, type=click.IntRange(2))
@click.option("--num-prompts", type=click.IntRange(1), help="Requests per level and pass [default: 4 x conc, >= 8].")
@click.option("--rounds", default=3, show_default=True, type=click.IntRange(2), help="Final interleaved rounds.")
@click.option(
    "--knobs",
    help="What to search, comma-separated [default: probe, cuda_graphs, gpu_memory_utilization, max_num_seqs, "
    "max_num_batched_tokens, async_scheduling, kv_cache_dtype].",
)
@click.option(
    "--from",
    "probe_json",
    type=click.Path(exists=True, dir_okay=False, path_type=Path),
    help="A probe report (probe --json): its close calls and faster kernels become candidates.",
)
@click.option(
    "--noise-floor",
    help="The A/A floor the final's verdicts use: a fraction (0.03) or the ab.json of a calibrated ab run of the same "
    "model and workload [default: 3%, not measured].",
)
@click.option("--name", help="The tuned profile's name [default: BASE-tuned].")
@click.option("--out", type=click.Path(file_okay=False, path_type=Path), help="[default: tune-results/tune-<time>].")
@PYTHON_OPTION
@JSON_OPTION
def tune(
    model: str,
    base: str,
    budget_min: float,
    concurrency: str,
    input_len: int,
    output_len: int,
    num_prompts: int | None,
    rounds: int,
    knobs: str | None,
    probe_json: Path | None,
    noise_floor: str | None,
    name: str | None,
    out: Path | None,
    python: Path | None,
    as_json: bool,
) -> int:
    """Search serving settings end to end (screen, then interleaved ab of finalists) and write the winner.

    Writes OUT/NAME.toml (the tuned profile, [why] citing ab verdicts, [tuned] the stack and workload),
    OUT/tune.json and every trial's ab folder. Rerun the same command with the same --out to resume.
    """
    import time

    from launcher.ab import tune as stage
    from launcher.ab.run import load_noise_floor
    from launcher.output import json_document
    from launcher.views.ab import tune_text

    floor, source = load_noise_floor(noise_floor) if noise_floor else (None, None)
    cfg = stage.TuneConfig(
        model=model,
        base=base,
        budget_min=budget_min,
        concurrency=_int_list(concurrency),
        input_len=input_len,
        output_len=output_len,
        num_prompts=num_prompts,
        rounds=rounds,
        knobs=tuple(k.strip() for k in knobs.split(",") if k.strip()) if knobs else stage.KNOBS,
        probe=probe_json,
        python=python,
        name=name,
        noise_floor=floor,
        noise_floor_source=source,
    )
    out = out or Path("tune-results") / time.strftime("tune-%Y%m%d-%H%M%S")
    outcome = stage.run_tune(cfg, out, say=lambda m: click.echo(m, err=True))
    if as_json:
        click.echo(json_document("tune", {k: v for k, v in outcome.doc.items() if k != "schema"}))
    else:
        click.echo(tune_text(outcome.doc))
    click.echo(f"nemolaunch: {outcome.message}", err=True)
    return outcome.code


@cli.command()
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


@cli.command()
@click.argument("logfile", type=click.Path(exists=True, dir_okay=False, allow_dash=True))
@click.option(
    "--gpu", help="The GPU the log came from (SM120, sm_121, 'RTX 5090', 'GB10', ...): some findings depend on it."
)
@JSON_OPTION
def diagnose(logfile: str, gpu: str | None, as_json: bool) -> int:
    """Find known serving failures in a vLLM log (LOGFILE, or - for stdin) and give each its fix.

    Exit 1 when an error-level finding exists, 0 otherwise.
    """
    from checks.gpu_family import family_from_text
    from launcher.diagnose import run as stage
    from launcher.errors import BadInput
    from launcher.output import json_document

    family = family_from_text(gpu) if gpu else None
    if gpu and not family:
        raise BadInput(f"--gpu {gpu!r} names no GPU family I know", "write it like SM120, sm_121, 12.0 or GB10")
    findings, lines = stage.diagnose_file(logfile, sys.stdin.buffer, family)
    if as_json:
        click.echo(
            json_document(
                "diagnose",
                {"log": logfile, "lines": lines, "gpu_family": family, "findings": [f.to_json() for f in findings]},
            )
        )
    else:
        from launcher.views.diagnose import render_text

        click.echo(render_text(findings, lines, "stdin" if logfile == "-" else logfile))
    return stage.exit_code(findings)


@cli.group()
def lock() -> None:
    """Verify, capture and bundle lockfiles of whole serving stacks."""


@lock.command("verify")
@click.argument("lockfile", type=click.Path(exists=True, dir_okay=False, path_type=Path))
@PYTHON_OPTION
@JSON_OPTION
def lock_verify(lockfile: Path, python: Path | None, as_json: bool) -> int:
    """Check the installed stack (the engine's Python) and this host against LOCKFILE (.toml manifest or .txt).

    Exit 1 on a mismatch; each one comes with the command that fixes it.
    """
    from launcher.engine import resolve_python
    from launcher.lock import run as stage
    from launcher.output import json_document
    from launcher.views.lock import render_verify

    interpreter = resolve_python(python)
    lock_, mismatches = stage.verify(lockfile, interpreter.path)
    failed = [m for m in mismatches if m.severity == "fail"]
    if as_json:
        click.echo(
            json_document(
                "lock",
                {
                    "lock": str(lockfile),
                    "python": str(interpreter.path),
                    "pins": len(lock_.pins),
                    "ok": not failed,
                    "mismatches": [m.to_json() for m in mismatches],
                },
            )
        )
    else:
        click.echo(render_verify(lockfile, lock_, interpreter, mismatches))
    return ExitCode.PROBLEM if failed else ExitCode.OK


@lock.command("capture")
@click.option(
    "--out",
    required=True,
    type=click.Path(dir_okay=False, path_type=Path),
    help="The lock to write: OUT.toml, OUT.txt and OUT.in (any suffix is replaced).",
)
@click.option("--name", help="The lock's name [default: OUT's stem].")
@click.option("--validated", help="Where this stack was proven, e.g. a bench summary.json.")
@PYTHON_OPTION
def lock_capture(out: Path, name: str | None, validated: str | None, python: Path | None) -> int:
    """Write the working stack of the engine's Python (and this host's driver, CUDA, GPU family) as a lock."""
    from launcher.engine import resolve_python
    from launcher.lock import run as stage

    interpreter = resolve_python(python)
    for note in stage.capture(interpreter.path, out, name or out.with_suffix("").name, validated):
        click.secho(f"note: {note}", fg="yellow", err=True)
    click.echo(f"wrote {out.with_suffix('.toml')} and {out.with_suffix('.txt')} from {interpreter.describe()}")
    return ExitCode.OK


@lock.command("bundle")
@click.argument("lockfile", type=click.Path(exists=True, dir_okay=False, path_type=Path))
@click.option("--out", required=True, type=click.Path(file_okay=False, path_type=Path), help="Folder for the wheels.")
def lock_bundle(lockfile: Path, out: Path) -> int:
    """Download every pinned wheel of LOCKFILE for its Python and platform, for hosts without internet."""
    from launcher.lock import run as stage

    install = stage.bundle(lockfile, out)
    click.echo(f"on the offline host, with {out} copied there:\n  {install}")
    return ExitCode.OK


@cli.command()
@click.argument("summary", type=click.Path(exists=True, dir_okay=False, path_type=Path))
@click.option(
    "--model",
    "model_dir",
    required=True,
    type=click.Path(exists=True, path_type=Path),
    help="The served model's folder (or its config.json).",
)
@JSON_OPTION
def roofline(summary: Path, model_dir: Path, as_json: bool) -> int:
    """Each level of a bench SUMMARY.json as a share of the GPU's memory-bandwidth limit.

    A decode step reads the weights it uses (an MoE: the experts routed to) and the KV cache; over the
    GPU's bandwidth (NVML, or the datasheet) that gives the most tok/s possible. Not for the CPU engine.
    """
    from launcher.bench import roofline as stage
    from launcher.output import json_document
    from launcher.views import roofline as view

    doc, config = (
        _read_json(summary, "a bench summary.json"),
        _read_json(model_dir / "config.json" if model_dir.is_dir() else model_dir, "the model's config.json"),
    )
    from launcher.model.shapes import MARKER, launch_args

    # a shape folder records the flags it is served with (--quantization fp8 sets the weights' bytes)
    served_args = launch_args(str(model_dir), [])[0] if (model_dir / MARKER).is_file() else []
    result = stage.annotate(doc, config, served_args=served_args)
    click.echo(json_document("roofline", result.to_json()) if as_json else view.render(result))
    return ExitCode.OK if result.applies else ExitCode.NOT_READY


def _read_json(path: Path, what: str) -> dict[str, Any]:
    from launcher.errors import BadInput

    try:
        doc = json.loads(path.read_text())
    except (OSError, ValueError) as e:
        raise BadInput(f"cannot read {path}: {e}", f"give {what}") from None
    if not isinstance(doc, dict):
        raise BadInput(f"{path} is not a JSON object", f"give {what}")
    return doc


@cli.group()
def model() -> None:
    """Build models for testing and the embedded default."""


@model.command("tiny")
@click.argument("out_dir", type=click.Path(file_okay=False, path_type=Path))
@PYTHON_OPTION
def model_tiny(out_dir: Path, python: Path | None) -> int:
    """Build a tiny random-weight Llama with a real BPE tokenizer in OUT_DIR, offline.

    Runs in the engine's interpreter (it needs torch, transformers and tokenizers).
    """
    from launcher.engine import resolve_python
    from launcher.model import tiny as tinymodel

    interpreter = resolve_python(python)
    click.echo(f"building the tiny model with {interpreter.path} ({interpreter.source})", err=True)
    summary = tinymodel.build(interpreter.path, out_dir)
    click.echo(summary)
    return ExitCode.OK


@model.command("shape")
@click.argument("ref", metavar="NAME|CONFIG.json")
@click.argument("out_dir", type=click.Path(file_okay=False, path_type=Path))
@click.option(
    "--quantization",
    type=click.Choice(["bf16", "fp8", "nvfp4"]),
    default="bf16",
    show_default=True,
    help="fp8: vLLM quantizes online (--quantization fp8); nvfp4: a ModelOpt NVFP4 quantization_config.",
)
@click.option("--set", "overrides", multiple=True, metavar="KEY=VALUE", help="Change a config.json key (repeatable).")
@click.option("--list", "list_known", is_flag=True, help="List the known shapes and exit.")
@PYTHON_OPTION
def model_shape(
    ref: str, out_dir: Path, quantization: str, overrides: tuple[str, ...], list_known: bool, python: Path | None
) -> int:
    """Write a weightless model folder with a known model's real shapes, to serve with --load-format dummy.

    \b
    NAME is a known shape (--list) or a model's config.json. The folder holds config.json (the real
    vocab_size), the project's tokenizer padded to it, and the flags vLLM needs; `serve` and
    `bench --profile` add them. Outputs are noise; throughput and latency are the model's.
    """
    from launcher.engine import resolve_python
    from launcher.model import shapes as shapes
    from launcher.views import model as view

    if list_known:
        click.echo(view.known_shapes(shapes.KNOWN.values()))
        return ExitCode.OK
    spec = shapes.resolve(ref, quantization, shapes.parse_overrides(overrides))
    interpreter = resolve_python(python)
    click.echo(f"writing the tokenizer with {interpreter.path} ({interpreter.source})", err=True)
    click.echo(view.shape_written(shapes.write(spec, out_dir, interpreter.path)))
    return ExitCode.OK


@cli.group()
def fleet() -> None:
    """Several nodes at once (needs the ray extra: pip install 'nemolaunch[ray]')."""


@fleet.command("doctor")
@click.option("--ray", "address", required=True, help="The running Ray cluster's address (HEAD:6379, or auto).")
@click.option(
    "--profile",
    "profile_ref",
    help="A multi-node profile: check only its [placement].nodes, and that each reaches the head's port.",
)
@click.option("--timeout", "timeout_s", default=300.0, show_default=True, help="Seconds to wait for every node.")
@PYTHON_OPTION
@JSON_OPTION
def fleet_doctor(address: str, profile_ref: str | None, timeout_s: float, python: Path | None, as_json: bool) -> int:
    """Run doctor on every node of a Ray cluster (one task pinned to each) and show what differs.

    Exit 1 when the nodes would not serve together: a package, Python, NCCL or GPU family differs, a node's
    doctor fails, or a node cannot reach the head's port."""
    from launcher.doctor import fleet as stage
    from launcher.output import json_document
    from launcher.views.doctor import MARKS
    from launcher.views.fleet import render_fleet

    report = stage.run(address, profile_ref, python, timeout_s)
    click.echo(json_document("fleet", report.to_json()) if as_json else render_fleet(report, MARKS))
    return stage.exit_code(report)


def main(argv: list[str] | None = None) -> int:
    """The one error boundary: expected errors are one line on stderr; tracebacks only with -v. SIGTERM is
    Ctrl-C: every command stops its children and exits 130 either way."""
    import signal
    import threading

    def terminated(signum: int, frame: object) -> None:
        raise KeyboardInterrupt

    in_main = threading.current_thread() is threading.main_thread()
    previous = signal.signal(signal.SIGTERM, terminated) if in_main else None
    try:
        return _main(argv)
    finally:
        if in_main:
            signal.signal(signal.SIGTERM, previous)


def _main(argv: list[str] | None) -> int:
    try:
        rv = cli.main(args=argv, prog_name="nemolaunch", standalone_mode=False)
        return int(rv or 0)
    except click.ClickException as e:
        e.show()
        return e.exit_code
    except (click.Abort, KeyboardInterrupt):
        click.echo("interrupted", err=True)
        return ExitCode.INTERRUPTED
    except NemolaunchError as e:
        if _verbose:
            traceback.print_exc()
        click.echo(f"nemolaunch: {e.line()}", err=True)
        return e.code
    except Exception as e:  # a bug: say so in one line, the traceback with -v
        if _verbose:
            traceback.print_exc()
        click.echo(f"nemolaunch: internal error: {type(e).__name__}: {e} (rerun with -v for the traceback)", err=True)
        return ExitCode.PROBLEM


if __name__ == "__main__":
    sys.exit(main())
