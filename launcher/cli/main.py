"""The command line's top: the click group, the one error boundary, --version and -v.

Each command lives in its own module (launcher/cli/<command>.py) with its view; stage modules are imported inside
each command so that `nemolaunch --help` stays fast and never pulls in anything heavy.
"""

from __future__ import annotations

import sys
import traceback

import click

from launcher import __version__
from launcher.cli.ab import ab, tune
from launcher.cli.bench import bench, compare
from launcher.cli.diagnose import diagnose
from launcher.cli.doctor import doctor
from launcher.cli.fleet import fleet
from launcher.cli.lock import lock
from launcher.cli.model import model
from launcher.cli.probe import probe
from launcher.cli.profile import profile
from launcher.cli.roofline import roofline
from launcher.cli.serve import serve
from launcher.errors import EXIT_CODES_HELP, ExitCode, NemolaunchError

_verbose = False


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


# in the order of the flow; `--help` lists them alphabetically
for command in (doctor, probe, profile, serve, bench, ab, tune, compare, diagnose, lock, roofline, model, fleet):
    cli.add_command(command)


def main(argv: list[str] | None = None) -> int:
    """The one error boundary: expected errors are one line on stderr; tracebacks only with -v. SIGTERM and SIGHUP
    are Ctrl-C: every command stops its children and exits 130 either way. Every line printed has its secrets
    masked (launcher/output.py)."""
    from launcher.output import redacted_streams
    from launcher.serve.lifetime import interrupts

    with redacted_streams(), interrupts():
        return _main(argv)


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
    except OSError as e:  # a folder that cannot take a write (read-only, full, a file in the way) or be read
        if _verbose:
            traceback.print_exc()
        from launcher.output import os_error_line

        click.echo(f"nemolaunch: {os_error_line(e)}", err=True)
        return ExitCode.PROBLEM
    except Exception as e:  # a bug: say so in one line, the traceback with -v
        if _verbose:
            traceback.print_exc()
        click.echo(f"nemolaunch: internal error: {type(e).__name__}: {e} (rerun with -v for the traceback)", err=True)
        return ExitCode.PROBLEM


if __name__ == "__main__":
    sys.exit(main())
