"""Reading a log as an operator does: in blocks of whole lines, without the prefixes that containers, Ray,
torch and vLLM's logger put before a message, and with the message a wrapper quotes read as its own.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from typing import IO

from launcher.diagnose.advice import advises
from launcher.errors import BadInput

BLOCK_BYTES = 8 << 20
MAX_LINE_TEXT = 1024  # bytes of a line decoded for evidence or a root error (it is shown cut to 400 characters)
ANSI = re.compile(rb"\x1b\[[0-9;?]*[ -/]*[@-~]")
# a link a thread's markdown made of a path in a pasted log: "[/x/lib.so](https://...)" reads "/x/lib.so"
_MD_LINK = re.compile(rb"\[([^\]\n]{1,500})\]\(https?://[^)\s]*\)")

# Which container or process wrote a line: dropped from evidence, which keeps the level and the source file.
_WRITER = re.compile(
    r"^(?:[\w.-]+\s+\|\s)?(?:\((?:EngineCore|APIServer|Worker|VllmWorker|StageEngineCore)\w*"
    r"\s+pid=\d+\)\s*)?(?:\[rank\d+\]:\s*)?"
)
_LEVELS = r"(?:ERROR|WARNING|WARN|INFO|CRITICAL|DEBUG|FATAL)"
# Everything before the message, in any order and repeated: container name, CRI/k8s stream prefix, timestamps,
# SGLang's "[2025-01-01 12:00:00 TP0]", vLLM's and Ray's "(EngineCore pid=1)" / "(RayWorkerWrapper pid=1,
# ip=10.0.0.1)", "[rank0]:", torch's "[W1203 10:35:44.6 utils.cpp:68]", NCCL's "host:pid:tid [0]", vLLM's
# "ERROR 10-25 13:08:43 [core.py:708]" (before 0.6 without the bracket: "ERROR 06-28 06:11:45 worker_base.py:145]"),
# glog's "E0505 18:42:19.812688 1311 pod_workers.go:949]" (kubelet, Triton), syslog's "May 05 18:42:19 host
# kubelet[1311]:", uvicorn's "INFO:     ", Python logging's "- name - ERROR - ", a thread's quote mark "> ".
_PREFIX = re.compile(
    r"^(?:\s*(?:"
    r"[\w.-]+\s+\|\s"
    r"|\d{4}-\d\d-\d\dT[\d:.]+(?:Z|[+-]\d\d:?\d\d)?\s+(?:stdout|stderr)\s+[FP]\s"
    r"|\d{4}-\d\d-\d\d[T ][\d:.,]+(?:Z|[+-]\d\d:?\d\d)?(?:\s+-)?\s"
    r"|\[\d{4}-\d\d-\d\d[ T][\d:.,]+[^\]]{0,40}\]\s?"
    r"|\((?:[\w:.=-]+\s+){0,3}pid=\d+(?:,\s*ip=[\d.]+)?\)\s?"
    r"|\[rank\d+\]:\s?"
    r"|\[[WEIF]\d{4} [\d:.]+ [\w./-]+:\d+\]\s?"
    r"|[\w.-]+:\d+:\d+\s+\[\d+\]\s"
    rf"|{_LEVELS}\s+(?:\d\d-\d\d\s[\d:.]+\s+)?\[[\w./-]+:\d+\]\s?"
    rf"|{_LEVELS}\s+\d\d-\d\d\s[\d:.]+\s+[\w./-]+:\d+\]\s?"
    r"|[IWEF]\d{4}\s[\d:.]+\s+\d+\s[\w./-]+:\d+\]\s?"
    r"|[A-Z][a-z]{2}\s+\d\d?\s[\d:]{8}\s[\w.-]+\s[\w.-]+(?:\[\d+\])?:\s"
    r"|>\s"
    rf"|{_LEVELS}:\s+"
    rf"|[\w.]+\s+-\s+{_LEVELS}\s+-\s"
    r"))+"
)
# a line whose level says it is ordinary: vLLM's INFO/DEBUG lines, uvicorn's access log
_ORDINARY = re.compile(rb"^[^\n]{0,80}?(?:\b(?:INFO|DEBUG)\s+\d\d-\d\d\s|(?:^|\)\s|\|\s)(?:INFO|DEBUG):\s)")
# (NCCL puts a timestamp, host:pid:tid, device and source file before its "NCCL WARN": up to ~120 characters)
_LEVEL = re.compile(rb"^.{0,120}?(?<![\w-])(ERROR|WARNING|WARN|CRITICAL|FATAL|INFO|DEBUG)(?=[\s:\]])")
# a traceback frame in one of the packages the message index reads: (package path, function)
FRAME = re.compile(
    rb'File "[^"\n]*?/((?:vllm|torch|flashinfer|triton|transformers|huggingface_hub|ray|sglang|sgl_kernel|deep_gemm)'
    rb'/[^"\n]+\.py)", line \d+, in (\w+)'
)
_QUOTED = re.compile(r"""(['"])((?:(?!\1).){20,}?)\1(?=[\s,.;:)\]]|$)""")
_QUOTES = str.maketrans({'"': "'", "`": "'", "\u2018": "'", "\u2019": "'", "\u201c": "'", "\u201d": "'"})
_SPACE = re.compile(r"\s+")


def plain(text: bytes) -> bytes:
    """A block without what a terminal or a thread added to its lines: ANSI colours, markdown links."""
    if b"\x1b" in text:
        text = ANSI.sub(b"", text)
    if b"](http" in text:
        text = _MD_LINK.sub(rb"\1", text)
    return text


def decode(raw: bytes) -> str:
    return raw[:MAX_LINE_TEXT].decode("utf-8", "replace")


def evidence(raw: bytes) -> str:
    """A line as shown in a finding: without the container and process that wrote it, cut to 400 characters."""
    return _WRITER.sub("", decode(raw)).strip()[:400]


def message(raw: bytes | str) -> str:
    """The message of a line, without anything its writers put before it."""
    text = decode(raw) if isinstance(raw, bytes) else raw
    if "\r" in text:  # a progress bar redrawn in place: what the terminal showed last
        text = next((part for part in reversed(text.split("\r")) if part.strip()), "")
    return _PREFIX.sub("", text).strip()


def is_ordinary(raw: bytes) -> bool:
    """An INFO or DEBUG line of vLLM's logger or uvicorn's: no error or warning message is printed at that level."""
    return _ORDINARY.match(raw) is not None


def level(raw: bytes) -> str | None:
    """The level a line was logged at, when its prefix says (vLLM's, uvicorn's, Python logging's)."""
    m = _LEVEL.match(raw)
    return m.group(1).decode() if m else None


# a message that itself says something failed: an exception's name before it (pydantic's "Value error, ..." too), a
# CLI's "Error:"/"error:", an exit with a status, a crash
_FAILED = re.compile(
    r"^(?:(?:[A-Za-z_]\w*\.)*[A-Z]\w*(?:Error|Exception|Exit|Interrupt|Fault)\b|Value error,|(?:\w[\w.-]*: )?[Ee]rror:)"
    r"|\bexit(?:ed)?(?: with)? (?:code|status)\W{0,3}-?[1-9]|\bterminate called\b|\b(?:Segmentation fault|Aborted)\b"
)
# a message that says the program goes on: a feature left out, a fallback taken; or a shell tool's complaint about a
# path ("df: /root/.triton/autotune: No such file or directory")
_GOES_ON = re.compile(
    r"\b(?:is not available|are not available|not be enabled|[Ff]all(?:ing)? ?back|[Ss]kipping|[Ii]gnoring)\b"
    r"|^[a-z][\w-]{1,15}: (?:cannot \w+ )?['`]?[/~.][^\s:]*['`]?: "
)


def shows_failure(said: str, logged: str | None) -> bool:
    """The line itself says something failed: logged at an error level, an exception, an exit, a crash."""
    return logged in ("ERROR", "CRITICAL", "FATAL") or _FAILED.search(said) is not None


def looks_benign(said: str, logged: str | None) -> bool:
    """The line reads as one a working program prints: logged below the error levels, a fallback, a shell tool's
    note about a path."""
    return logged in ("INFO", "DEBUG", "WARNING", "WARN") or _GOES_ON.search(said) is not None


# a message that reports a failure in words, whoever printed it: a bare line quoted alone ("`ptxas` failed with error
# code 1", "health check failed", "CUDA error")
_SAYS_FAILED = re.compile(r"[Ee]rror\b|\bERROR\b|\b[Ff]ailed\b|\bFAILED\b|\b[Ff]atal\b|\bFATAL\b|\bnot supported\b")
# ... unless it says the program handled it: a warning (Python's "UserWarning:", a table's "| warning |"), an error
# caught, cleared or retried, the interpreter shutting down
_HANDLED = re.compile(
    r"[Ww]arning\b|\bWARN|\b(?:caught|cleared|retrying|will retry|recovered)\b|Python is likely shutting down"
)


def says_failed(said: str, logged: str | None) -> bool:
    """The line reports a failure in words and does not read as one a working program prints."""
    return _SAYS_FAILED.search(said) is not None and not looks_benign(said, logged) and not _HANDLED.search(said)


def frames(text: bytes) -> list[tuple[str, str]]:
    """The frames of a traceback that run through the indexed packages, outermost first: (file, function)."""
    return [(f.decode(), fn.decode()) for f, fn in FRAME.findall(text)]


def normal(text: str) -> str:
    """The form a message and a template are compared in: one kind of quote, single spaces. Logs re-quote and
    re-flow messages (a repr, a terminal wrap), and neither changes what the message says."""
    return _SPACE.sub(" ", text.translate(_QUOTES)).strip()


def inner_messages(text: str) -> list[str]:
    """The messages a wrapper quotes ("Worker failed with error 'CUDA error: out of memory'", a repr with \\n),
    each to be read as a line of its own."""
    pieces = [p.strip() for p in text.split("\\n") if p.strip()] if "\\n" in text else []
    pieces += [m.group(2) for m in _QUOTED.finditer(text) if " " in m.group(2)]
    return pieces


# an exception line whose message goes on in the lines below it: it ends with ":", or pydantic's "N validation
# errors for X" (the fields and their messages follow)
_OPEN_MESSAGE = re.compile(r"(?::|\bvalidation errors? for \w+)\s*$")
_EMPTY_MESSAGE = re.compile(r"^[\w.]+:$")  # "ImportError:": the whole message is below
_NEW_RECORD = ("Traceback", "File ", "During handling", "The above exception")


def continued(said: str, text: bytes, end: int, lines: int = 3) -> str:
    """An exception's message `said` (its line ends at text[end]) with the lines that continue it, when it goes on
    below its first line, and the advice printed right after it."""
    more: list[str] = []
    start = end + 1
    if _OPEN_MESSAGE.search(said):
        lines = 3 * lines if _EMPTY_MESSAGE.match(said) else lines
        while len(more) < lines and start < len(text):
            stop = text.find(b"\n", start)
            stop = len(text) if stop < 0 else stop
            line = message(text[start:stop])
            start = stop + 1
            if line.startswith(_NEW_RECORD):
                break
            if line:
                more.append(line)
    said = " ".join([said, *more])
    for advice in advice_after(text, start):
        # a sentence of its own, where the error's message ends without a stop
        said += f" {advice}" if said.endswith((".", ";", ":", "!", "?")) else f". {advice}"
    return said


_LIST_ITEM = re.compile(r"^(?:\d{1,2}[.)]|[-*•])\s+")  # "1. Downgrade the protobuf package", "- set ..."
ADVICE_LINES = 5  # lines after an error read for the advice printed under it


def advice_after(text: bytes, start: int, end: int | None = None) -> list[str]:
    """The advising lines among the few that follow an error ("For debugging consider passing
    CUDA_LAUNCH_BLOCKING=1", a list of workarounds), up to the next record or a line logged as INFO/DEBUG (and no
    further than `end`)."""
    found: list[str] = []
    # (a few KB on: in a log without newlines, a "line" would be the rest of the block)
    end = min(len(text) if end is None else end, start + ADVICE_LINES * MAX_LINE_TEXT)
    for _ in range(ADVICE_LINES):
        if start >= end:
            break
        stop = text.find(b"\n", start, end)
        stop = end if stop < 0 else stop
        raw = text[start:stop]
        start = stop + 1
        line = message(raw)
        if is_ordinary(raw) or level(raw) in ("INFO", "DEBUG") or line.startswith(_NEW_RECORD) or _FAILED.match(line):
            break
        item = _LIST_ITEM.sub("", line)
        if item and advises(item):
            found.append(item)
    return found


ENGINE_SNIFF = 4 << 20  # bytes of a log's start read to tell its engine
ENGINE_WORDS = {
    "vllm": (b"vllm", b"vLLM", b"VLLM"),
    "sglang": (b"sglang", b"SGLang", b"SGLANG", b"sgl_kernel", b"sgl-kernel"),
}


class LogEngine:
    """Which engine wrote a log: the one its first few MB name more often (in paths, banners, variables)."""

    def __init__(self) -> None:
        self.votes = dict.fromkeys(ENGINE_WORDS, 0)
        self.read_bytes = 0

    def read(self, text: bytes) -> None:
        if self.read_bytes < ENGINE_SNIFF:
            head = text[: ENGINE_SNIFF - self.read_bytes]
            self.read_bytes += len(head)
            for engine, words in ENGINE_WORDS.items():
                self.votes[engine] += sum(head.count(w) for w in words)

    @property
    def name(self) -> str | None:
        """vllm or sglang; None when the log names neither, or both alike."""
        (top, most), (_, next_most) = sorted(self.votes.items(), key=lambda kv: -kv[1])[:2]
        return top if most > next_most else None


def read_blocks(stream: IO[bytes], name: str) -> Iterator[bytes]:
    """Blocks of whole lines, a few MB each; a binary file is bad input. A line longer than a block is cut at
    block boundaries (kept parts are never re-joined, so a log without newlines costs one pass and one block
    of memory)."""
    head = stream.read(BLOCK_BYTES)
    if b"\x00" in head[:65536]:
        raise BadInput(f"{name} is a binary file, not a log", "give the text log vLLM wrote (or - for stdin)")
    pending = b""
    block = head
    while block:
        data = pending + block if pending else block
        cut = data.rfind(b"\n") + 1
        if cut:
            yield data[:cut]
            pending = data[cut:]
        elif len(data) >= BLOCK_BYTES:
            yield data  # no newline in a whole block: hand it on as part of one long line
            pending = b""
        else:
            pending = data
        block = stream.read(BLOCK_BYTES)
    if pending:
        yield pending
