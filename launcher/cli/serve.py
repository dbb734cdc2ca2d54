"""`nemolaunch serve`: launch vLLM with a profile's flags and watch its log."""

from __future__ import annotations

from pathlib import Path

import click

from launcher.cli.options import JSON_OPTION, PYTHON_OPTION
from launcher.errors import ExitCode


@click.command()
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
    echo_log = None if quiet else (lambda line: click.echo(redact_text(line), err=True))
    return stage.run(plan, model, log_file, say=say, echo_log=echo_log, smoke=smoke)
