"""`nemolaunch roofline`: each level's share of the memory-bandwidth limit."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

import click

from launcher.cli.options import JSON_OPTION

if TYPE_CHECKING:
    from launcher.bench.roofline import Roofline


@click.command()
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

    result = stage.annotate_files(summary, model_dir)
    click.echo(json_document("roofline", result.to_json()) if as_json else render(result))
    return stage.exit_code(result)


def _pct(value: float | None) -> str | None:
    return None if value is None else f"{value:.1f}%"


def render(r: Roofline) -> str:
    from launcher.output import table

    if not r.applies:
        return f"roofline does not apply: {r.reason}"
    assert r.bandwidth is not None and r.ceiling_per_user_tok_s is not None
    lines = [f"roofline: {r.reason}"]
    if r.bandwidth.nvml_bytes_per_s and r.bandwidth.datasheet_bytes_per_s:
        lines.append(
            f"bandwidth: NVML {r.bandwidth.nvml_bytes_per_s / 1e12:.2f} TB/s, datasheet "
            f"{r.bandwidth.datasheet_bytes_per_s / 1e12:.2f} TB/s ({r.bandwidth.datasheet_source})"
        )
    lines.append(f"physical ceiling per user at c=1: {r.ceiling_per_user_tok_s:.0f} tok/s")
    hybrid = r.mamba_state_bytes_per_seq is not None  # a Mamba state column only where there is one
    rows = [
        [
            f"{lv.concurrency:g}",
            None if lv.distinct_experts is None else f"{lv.distinct_experts:.1f}",
            f"{lv.weight_bytes / 1e9:.2f}",
            f"{lv.kv_bytes / 1e9:.3f}",
            *([f"{lv.mamba_bytes / 1e9:.2f}"] if hybrid else []),
            f"{lv.ceiling_tok_s:.0f}",
            lv.measured_tok_s,
            _pct(lv.percent_of_limit),
            _pct(lv.percent_of_limit_decode),
        ]
        for lv in r.levels
    ]
    headers = ["c", "experts/layer", "weights GB", "KV GB", *(["Mamba GB"] if hybrid else []), "ceiling tok/s"]
    headers += ["measured", "% of limit", "% (TPOT)"]
    lines += [f"left out: {why}" for why in r.skipped]
    return "\n".join([*lines, "", table(headers, rows)])
