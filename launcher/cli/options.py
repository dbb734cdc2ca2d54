"""What several commands share: --json, --python, comma lists parsed once, and the default result folders."""

from __future__ import annotations

import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

import click

from launcher import defaults

if TYPE_CHECKING:  # click 8.5 types ParamType by what it returns; older clicks do not subscript it at run time
    _ListType = click.ParamType[tuple[Any, ...], Any]
else:
    _ListType = click.ParamType

JSON_OPTION = click.option("--json", "as_json", is_flag=True, help="Machine output on stdout (schema-versioned JSON).")
PYTHON_OPTION = click.option(
    "--python",
    "python",
    type=click.Path(dir_okay=False, path_type=Path),
    help="The engine's interpreter (the venv where vLLM is installed). Default: $NEMOLAUNCH_PYTHON, "
    "then the profile's `python`, then this interpreter if it has vLLM, else the engine `make engine` built.",
)


class CommaList(_ListType):
    """`1,2,4` as a tuple of one item type, parsed where click parses the option; empty items are skipped.

    `positive` (for numbers) refuses an empty list and values below 1: concurrency levels, prompt lengths."""

    def __init__(self, item: type[int] | type[float] | type[str], positive: bool = False) -> None:
        self.item = item
        self.positive = positive
        self.name = {int: "integers", float: "numbers", str: "names"}[item]

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> tuple[Any, ...]:
        if isinstance(value, tuple):
            return value
        text = str(value)
        try:
            values: tuple[Any, ...] = tuple(self.item(v.strip()) for v in text.split(",") if v.strip())
        except ValueError:
            self.fail(f"{text!r} is not a comma-separated list of {self.name}", param, ctx)
        if self.positive and (not values or min(values) < 1):
            self.fail("give positive integers, e.g. 1,2,4,8", param, ctx)
        return values


INTS = CommaList(int, positive=True)
FLOATS = CommaList(float)
NAMES = CommaList(str)


# the workload bench, ab and tune send unless told otherwise (launcher/defaults.py holds the values)
INPUT_LEN_OPTION = click.option(
    "--input-len", default=defaults.INPUT_LEN, show_default=True, type=click.IntRange(1), help="Prompt tokens."
)
OUTPUT_LEN_OPTION = click.option(
    "--output-len",
    default=defaults.OUTPUT_LEN,
    show_default=True,
    type=click.IntRange(2),
    help="Tokens generated per request.",
)
COMPARE_LEVELS_OPTION = click.option(
    "--concurrency",
    type=INTS,
    default=defaults.levels_text(defaults.COMPARE_LEVELS),
    show_default=True,
    help="Levels, comma-separated.",
)


def default_out(folder: str, stem: str) -> Path:
    """Where a run goes without --out: FOLDER/STEM-<local time>, so runs never overwrite each other."""
    return Path(folder) / f"{stem}-{time.strftime('%Y%m%d-%H%M%S')}"
