"""`nemolaunch model tiny/shape`: build models for testing and the embedded default; the known shapes and what
`model shape` wrote."""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path
from typing import TYPE_CHECKING, Any

import click

from launcher.cli.options import PYTHON_OPTION
from launcher.errors import ExitCode

if TYPE_CHECKING:
    from launcher.model.shapes import KnownShape


@click.group()
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


def _list_shapes(ctx: click.Context, param: click.Parameter, value: bool) -> None:
    """--list answers before the arguments are read, as --help does."""
    if value:
        from launcher.model.shapes import KNOWN

        click.echo(known_shapes(KNOWN.values()))
        ctx.exit(ExitCode.OK)


@model.command("shape")
@click.argument("ref", metavar="NAME|CONFIG.json")
@click.argument("out_dir", type=click.Path(file_okay=False, path_type=Path))
@click.option(
    "--quantization",
    type=click.Choice(["bf16", "fp8", "nvfp4"]),
    help="Default: what the config carries (none for a known name). bf16 drops a carried quantization; fp8: vLLM "
    "quantizes online; nvfp4: the model's NVFP4 release where known, else a ModelOpt NVFP4 quantization_config.",
)
@click.option("--set", "overrides", multiple=True, metavar="KEY=VALUE", help="Change a config.json key (repeatable).")
@click.option(
    "--list",
    is_flag=True,
    expose_value=False,
    is_eager=True,
    callback=_list_shapes,
    help="List the known shapes and exit (no NAME or OUT_DIR needed).",
)
@PYTHON_OPTION
def model_shape(
    ref: str, out_dir: Path, quantization: str | None, overrides: tuple[str, ...], python: Path | None
) -> int:
    """Write a weightless model folder with a known model's real shapes, to serve with --load-format dummy.

    \b
    NAME is a known shape (--list) or a model's config.json. The folder holds config.json (the real
    vocab_size), the project's tokenizer padded to it, and the flags vLLM needs; `serve` and
    `bench --profile` add them. Outputs are noise; throughput and latency are the model's.
    """
    from launcher.engine import resolve_python
    from launcher.model import shapes as shapes

    spec = shapes.resolve(ref, quantization, shapes.parse_overrides(overrides))
    interpreter = resolve_python(python)
    click.echo(f"writing the tokenizer with {interpreter.path} ({interpreter.source})", err=True)
    click.echo(shape_written(shapes.write(spec, out_dir, interpreter.path)))
    return ExitCode.OK


def known_shapes(known: Iterable[KnownShape]) -> str:
    from launcher.bench.roofline import model_traffic
    from launcher.output import table

    rows = []
    for s in known:
        c = s.config
        t = model_traffic(c)
        experts = f"{t.experts} (top-{t.top_k})" if t.experts else "-"
        rows.append(
            [
                s.name,
                c["architectures"][0],
                f"{t.total_params / 1e9:.1f}B",
                f"{(t.active_params + t.embed_params) / 1e9:.1f}B",
                c["num_hidden_layers"],
                c["hidden_size"],
                experts,
                c["vocab_size"],
            ]
        )
    headers = ["name", "architecture", "params", "active", "layers", "hidden", "experts", "vocab"]
    return table(headers, rows)


def shape_written(info: dict[str, Any]) -> str:
    flags = " ".join(info["serve_args"])
    return (
        f"wrote {info['path']}: {info['name']} ({info['quantization']}), vocab {info['vocab']['vocab_size']}, "
        f"no weights\nserve it with: {flags} (nemolaunch serve and bench --profile add these for this folder)"
    )
