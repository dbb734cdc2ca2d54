"""`nemolaunch profile list/show/write`. Secret values (a token in [env], a key in extra_args) are masked here as
everywhere nemolaunch prints."""

from __future__ import annotations

import json
from pathlib import Path
from typing import TYPE_CHECKING

import click

from launcher.cli.options import JSON_OPTION
from launcher.errors import ExitCode

if TYPE_CHECKING:
    from launcher.profiles.flags import Rendered
    from launcher.profiles.profile import ServingProfile


@click.group()
def profile() -> None:
    """List, show and write serving profiles (intent, rendered per vLLM version)."""


@profile.command("list")
@JSON_OPTION
def profile_list(as_json: bool) -> int:
    """List the shipped profiles."""
    from launcher.output import json_document
    from launcher.profiles.profile import list_profiles

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


def render_list(profiles: list[ServingProfile]) -> str:
    from launcher.output import table

    return table(["name", "description"], [(p.name, p.description) for p in profiles])


def render_show(prof: ServingProfile, rendered: Rendered | None) -> str:
    from checks.secrets import redact_env, redact_obj
    from launcher.output import table
    from launcher.profiles.profile import SETTINGS

    lines = [f"{prof.name}: {prof.description}", f"({prof.path})"]
    lines.append(
        f"python: {prof.python} (serve and --dry-run run this interpreter unless --python or $NEMOLAUNCH_PYTHON)"
        if prof.python
        else "python: not set (the engine's interpreter comes from --python, $NEMOLAUNCH_PYTHON, nemolaunch's own "
        "if it has vLLM, else the engine `make engine` built)"
    )
    settings = redact_obj(prof.settings)
    rows = [(k, json.dumps(v), prof.why.get(k, "")) for k, v in settings.items()]
    rows += [(f"env {k}", v, "") for k, v in redact_env(prof.env).items()]
    lines += ["", table(["setting", "value", "why"], rows)]
    unset = [k for k in SETTINGS if k not in prof.settings]
    lines += ["", f"left at vLLM's default: {', '.join(unset)}"]
    if rendered:
        lines += ["", f"for vLLM {rendered.vllm_version}: {' '.join(redact_obj(rendered.args))}"]
        lines += [f"  {k}={v}" for k, v in redact_env(rendered.env).items()]
        lines += [f"  note: {note}" for note in rendered.notes]
    return "\n".join(lines)


def profile_json(prof: ServingProfile, rendered: Rendered | None) -> dict[str, object]:
    from checks.secrets import redact_obj

    doc: dict[str, object] = prof.to_dict()
    if rendered:
        doc["rendered"] = {
            "vllm_version": rendered.vllm_version,
            "args": rendered.args,
            "env": rendered.env,
            "notes": rendered.notes,
        }
    return dict(redact_obj(doc))
