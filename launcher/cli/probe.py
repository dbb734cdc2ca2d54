"""`nemolaunch probe` on a terminal: per chain, every kernel's verdict, then its times at every weight shape
measured (one table per (N, K); a table holds at most MAX_M_COLUMNS token counts and says how many it left out),
the recommendation, the chains left out and why, and the recheck of a profile."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

import click

from launcher.cli.options import JSON_OPTION, NAMES, PYTHON_OPTION

if TYPE_CHECKING:
    from launcher.probe.recheck import Recheck
    from launcher.probe.run import KernelResult, ProbeReport

MAX_M_COLUMNS = 6
DECLARED = {True: "yes", False: "no", None: "?"}


@click.command()
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
    "--only",
    type=NAMES,
    help="Only these chains (comma-separated: fp8_dense, nvfp4_dense, nvfp4_moe, fp8_moe, attention, mamba).",
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
    "--starts",
    type=click.IntRange(min=1),
    help="Process starts each correctly measured kernel is timed in; two kernels whose gap lies inside the spread "
    "of their starts are reported as a tie, and profile write changes nothing on a tie [default: 3].",
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
    only: tuple[str, ...] | None,
    timeout_s: float,
    build_wait_s: float | None,
    starts: int | None,
    recheck_ref: str | None,
    python: Path | None,
) -> int:
    """Run the kernels of vLLM's FP8, FP4/MoE, attention and Mamba chains here; rank them by measured speed.

    Each kernel runs isolated in its own process with a timeout; its output is checked against a float32
    reference. Without an NVIDIA GPU it lists the chains and exits 3.
    """
    from launcher.output import json_document
    from launcher.probe import recheck
    from launcher.probe import run as stage
    from launcher.profiles.profile import load_profile
    from launcher.profiles.write import rechecked_chains

    chains = list(only) if only else None
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
        progress=lambda m: click.echo(f"probing {m}", err=True),
        quantization=quantization,
        every=every,
        build_wait_s=stage.BUILD_WAIT_S if build_wait_s is None else build_wait_s,
        starts=stage.STARTS if starts is None else starts,
    )
    checked = recheck.recheck(steered, report) if steered else None
    if as_json:
        doc = report.to_json()
        if checked:
            doc["recheck"] = [row.to_json() for row in checked.rows]
        click.echo(json_document("probe", doc))
    else:
        click.echo(render(report, checked))
    code, message = recheck.exit_code(report, checked)
    if message:
        click.echo(f"nemolaunch: {message}", err=True)
    return code


def weight_shapes(members: list[KernelResult]) -> dict[tuple[int, int], list[int]]:
    """(N, K) -> the token counts M measured there, in the order the probe ran them."""
    found: dict[tuple[int, int], list[int]] = {}
    for k in members:
        for s in k.shapes:
            ms = found.setdefault((s["n"], s["k"]), [])
            if s["m"] not in ms:
                ms.append(s["m"])
    return {nk: sorted(ms) for nk, ms in found.items()}


def _cell(shape: dict[str, Any] | None) -> str | None:
    if shape is None:
        return None
    relative = shape.get("relative")
    return f"{shape['us']:.1f} x{relative:.2f}" if relative else f"{shape['us']:.1f}"


def _timings(chain: str, members: list[KernelResult]) -> list[str]:
    from launcher.output import table

    out = []
    measured = [k for k in members if k.shapes]
    for (n, k_dim), ms in weight_shapes(members).items():
        shown, hidden = ms[:MAX_M_COLUMNS], len(ms) - MAX_M_COLUMNS
        what = "sequences x new tokens N, context K" if chain == "attention" else "weights N x K"
        title = f"  N={n} K={k_dim} ({what}), us and x the fastest" + (
            f"; {hidden} more token counts measured (in --json)" if hidden > 0 else ""
        )
        rows = []
        for kernel in measured:
            at = {s["m"]: s for s in kernel.shapes if (s["n"], s["k"]) == (n, k_dim)}
            if at:
                rows.append([kernel.kernel, *(_cell(at.get(m)) for m in shown)])
        out += [title, table(["kernel", *(f"M={m}" for m in shown)], rows)]
    return out


def render(report: ProbeReport, checked: Recheck | None) -> str:
    from launcher.output import table
    from launcher.profiles.write import MARGIN

    gpu = report.gpu
    where = f"{gpu['name']} (sm_{gpu['capability'][0]}{gpu['capability'][1]})" if gpu else "no GPU"
    lines = [f"{where}; vLLM {report.vllm_version or 'not installed'} in {report.interpreter.describe()}"]
    for chain in dict.fromkeys(k.chain for k in report.kernels):
        members = [k for k in report.kernels if k.chain == chain]
        lines.append(f"\n{chain} ({report.sources[chain]}): {report.selection.chains.get(chain, '')}")
        rows = [
            [
                "-" if k.position is None else k.position + 1,
                k.kernel,
                DECLARED[k.declared],
                k.status,
                None if k.setup_s is None else f"{k.setup_s:.0f}",
                (k.error or "")[:90],
            ]
            for k in members
        ]
        lines.append(table(["#", "kernel", "declared", "status", "set-up s", "error"], rows))
        lines += _timings(chain, members)
        if gpu:
            pick, top = report.recommended.get(chain), report.fastest.get(chain)
            extra = f" (fastest measured: {top}, which vLLM declares unsupported here)" if top != pick else ""
            lines.append(f"recommended: {pick or 'none measured'}{extra}")
            if report.ties.get(chain):
                lines.append(
                    f"  a tie with {', '.join(report.ties[chain])}: the gap lies inside the spread of "
                    f"{report.starts} process starts (profile write keeps vLLM's choice on a tie)"
                )
    if report.selection.left_out:
        lines.append("\nleft out (--all probes every chain):")
        lines += [f"  {chain}: {why}" for chain, why in report.selection.left_out.items()]
    if checked and checked.rows:
        lines.append(
            f"\nrecheck of profile {checked.profile} (within {MARGIN - 1:.0%} of the fastest counts as still best)"
        )
        verdicts = [
            (r.chain, r.profile_gets, r.probe_recommends or "-", "yes" if r.still_best else "NO") for r in checked.rows
        ]
        lines.append(table(["chain", "profile gets", "probe recommends", "still best"], verdicts))
    lines.append(f"\n{report.seconds:.0f} s")
    return "\n".join(lines)
