"""Exit codes and the errors that the CLI's single error boundary turns into one line on stderr."""

from __future__ import annotations

import enum


class ExitCode(enum.IntEnum):
    OK = 0
    PROBLEM = 1  # a check failed, a mismatch was found, a server died
    USAGE = 2  # bad usage or bad input (a file, a profile, an option)
    NOT_READY = 3  # a prerequisite is missing (no GPU, no engine, no vLLM)
    INTERRUPTED = 130  # Ctrl-C or SIGTERM


EXIT_CODES_HELP = """\b
Exit codes:
  0    ok
  1    problem found (a check failed, a mismatch, a server died)
  2    bad usage or bad input
  3    not ready: a prerequisite is missing (no GPU, no engine)
  130  interrupted"""


class NemolaunchError(Exception):
    """An expected failure: one line naming what is wrong, and the fix."""

    code: ExitCode = ExitCode.PROBLEM

    def __init__(self, message: str, fix: str | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.fix = fix

    def line(self) -> str:
        return f"{self.message}; {self.fix}" if self.fix else self.message


class BadInput(NemolaunchError):
    code = ExitCode.USAGE


class NotReady(NemolaunchError):
    code = ExitCode.NOT_READY
