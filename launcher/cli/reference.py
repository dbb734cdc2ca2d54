"""docs/reference/cli.md, generated from the click commands themselves: every command's and sub-command's --help
as click prints it, in the order `nemolaunch --help` lists them.

`python -m launcher.cli.reference` (make docs) writes it; `--check` (make lint) exits 1 when the file is not what
the commands say, so the reference cannot drift from the code.
"""

from __future__ import annotations

import sys
from collections.abc import Iterator
from pathlib import Path

import click

from launcher.cli.main import cli

REFERENCE = Path("docs/reference/cli.md")
WIDTH = 100  # fixed, so the text does not depend on the terminal that ran it


def _contexts(command: click.Command, ctx: click.Context) -> Iterator[click.Context]:
    yield ctx
    if isinstance(command, click.Group):
        for name in command.list_commands(ctx):
            sub = command.get_command(ctx, name)
            if sub is not None and not sub.hidden:
                yield from _contexts(sub, click.Context(sub, info_name=name, parent=ctx))


def render() -> str:
    """The whole reference as Markdown."""
    root = click.Context(cli, info_name="nemolaunch", terminal_width=WIDTH, max_content_width=WIDTH)
    contexts = list(_contexts(cli, root))
    lines = [
        "# CLI reference",
        "",
        "Every command's `--help`, generated from the commands by `make docs` (`python -m launcher.cli.reference`);",
        "do not edit by hand: `make lint` fails when this file and the commands disagree.",
        "",
    ]
    lines += [f"- [`{ctx.command_path}`](#{ctx.command_path.replace(' ', '-')})" for ctx in contexts]
    for ctx in contexts:
        lines += ["", f"## {ctx.command_path}", "", "```text", ctx.command.get_help(ctx), "```"]
    return "\n".join(lines) + "\n"


def main(argv: list[str]) -> int:
    text = render()
    if argv == ["--check"]:
        if REFERENCE.is_file() and REFERENCE.read_text(encoding="utf-8") == text:
            return 0
        print(f"nemolaunch: {REFERENCE} is not what the commands say; run make docs and commit it", file=sys.stderr)
        return 1
    if argv:
        print("usage: python -m launcher.cli.reference [--check]", file=sys.stderr)
        return 2
    REFERENCE.write_text(text, encoding="utf-8")
    print(f"wrote {REFERENCE}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
