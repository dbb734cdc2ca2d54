"""`nemolaunch diagnose`: a vLLM log against the curated knowledge base and the message index of the installed
serving stack; each finding with its fix.

Logs are read in blocks of a few MB (never whole), decoded leniently, stripped of ANSI colour. The same Matcher
runs inside `serve` on the live log, one line at a time.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import IO

from launcher.diagnose.findings import Finding
from launcher.diagnose.index import IndexInfo, IndexUnavailable, load_index, source_tree
from launcher.diagnose.logtext import read_blocks
from launcher.diagnose.matcher import Matcher
from launcher.diagnose.rules import Rule, Severity, load_rules
from launcher.diagnose.templates import TemplateIndex
from launcher.errors import BadInput, ExitCode

__all__ = ["Diagnosis", "Finding", "Matcher", "Rule", "diagnose_blocks", "diagnose_file", "exit_code", "load_rules"]


@dataclass(frozen=True)
class Diagnosis:
    findings: list[Finding]
    lines: int
    index: IndexInfo | None  # the message index used, None when there was none
    index_note: str | None  # why there was none


def message_index(
    python: str | os.PathLike[str] | None,
    on_build: Callable[[str], None] | None = None,
    sources: Sequence[Path] = (),
) -> tuple[TemplateIndex | None, IndexInfo | None, str | None]:
    """The index of the engine's interpreter (None: this one), with the source folders of packages it lacks, or
    why there is none."""
    from launcher.engine import resolve_python

    interpreter = resolve_python(None if python is None else Path(python))
    extra = dict(source_tree(folder) for folder in sources)
    try:
        index, info = load_index(interpreter.path, on_build=on_build, extra=extra)
    except IndexUnavailable as e:
        return None, None, str(e)
    return index, info, None


def diagnose_blocks(
    blocks: Iterable[bytes],
    gpu_family: str | None = None,
    rules: list[Rule] | None = None,
    index: TemplateIndex | None = None,
) -> tuple[list[Finding], int]:
    matcher = Matcher(rules if rules is not None else load_rules(), gpu_family, index)
    for block in blocks:
        matcher.feed(block)
    return matcher.report(), matcher.lines_seen


def diagnose_file(
    path: str,
    stdin: IO[bytes],
    gpu_family: str | None = None,
    python: str | os.PathLike[str] | None = None,
    use_index: bool = True,
    on_build: Callable[[str], None] | None = None,
    sources: Sequence[Path] = (),
) -> Diagnosis:
    """Diagnose a log file (or stdin: "-"), with the message index of `python`'s packages (and of the source
    folders of packages it lacks) unless use_index is off; on_build hears when that index has to be built first."""
    index, info, note = message_index(python, on_build, sources) if use_index else (None, None, "not asked for")
    try:
        if path == "-":
            findings, lines = diagnose_blocks(read_blocks(stdin, "stdin"), gpu_family, index=index)
        else:
            with open(path, "rb") as f:
                findings, lines = diagnose_blocks(read_blocks(f, path), gpu_family, index=index)
    except (IsADirectoryError, PermissionError, FileNotFoundError) as e:
        raise BadInput(f"cannot read {path}: {e.strerror}", "give a readable log file") from None
    return Diagnosis(findings, lines, info, note)


def exit_code(findings: list[Finding]) -> ExitCode:
    return ExitCode.PROBLEM if any(f.severity == Severity.ERROR for f in findings) else ExitCode.OK
