"""Matching log lines against the message index: the templates of the messages the installed software prints.

A template is its literal parts with a gap for each formatted part. It matches a message that holds its literal
parts in order, compared in `logtext.normal` form (one kind of quote, single spaces), so a re-quoted or re-flowed
message still matches, a message cut by a terminal wrap matches across the next line, and one that ends early (cut,
or an older release's shorter wording) matches what it has. Each template is anchored on its rarest whole word (and
its opening words' rarest); a line is compared only with the templates anchored on its words.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass
from typing import Any

from launcher.diagnose.advice import advice
from launcher.diagnose.literals import NON_WORD, WORD, ordinary_word_counts
from launcher.diagnose.logtext import message, normal

MIN_MATCHED = 16  # literal characters a match must cover
MIN_SHARE = 0.25  # and this share of the message: a short common phrase inside a long message is not its source
# a match this specific says where the message came from by itself; a looser one ("… is not available." in "FlashInfer
# is not available. Falling back to the PyTorch") is only a lead: the line must show a failure to be one
SPECIFIC_MATCHED, SPECIFIC_SHARE = 32, 0.5
# where a package's own messages win a tie: the engines' first, then their kernels, then the libraries under them
PACKAGE_ORDER = (
    "vllm",
    "sglang",
    "flashinfer",
    "sgl_kernel",
    "nccl",
    "cuda_runtime",
    "torch",
    "triton",
    "transformers",
    "huggingface_hub",
)
# the engines whose messages the index may hold, with their kernel packages: a log from one of them is matched
# against its own engine's messages and the libraries', never the other engine's (SGLang copied much of vLLM's
# wording, and a vLLM failure fixed by "pip install -U sglang" is a wrong fix); in a log that names no engine the
# interpreter's engine comes first, and the other's message is a lead (sites.SiteRules)
ENGINES = {"vllm": ("vllm",), "sglang": ("sglang", "sgl_kernel")}


@dataclass(frozen=True)
class Site:
    """Where a message is raised or logged, and what its code reads."""

    package: str
    file: str
    line: int | None
    function: str | None
    exception: str
    level: str  # error | warning
    guard: str | None
    knobs: tuple[str, ...]
    text: str  # the template, "…" for each formatted part

    def where(self) -> str:
        place = f"{self.file}:{self.line}" if self.line else self.file
        return f"{self.function} ({place})" if self.function else place

    def to_json(self) -> dict[str, Any]:
        return {
            "package": self.package,
            "file": self.file,
            "line": self.line,
            "function": self.function,
            "exception": self.exception,
            "condition": self.guard,
            "knobs": list(self.knobs),
            "template": self.text,
        }


def _words(parts: list[str | None], head: int | None = None) -> list[str]:
    """Whole words of the literal parts (with head: of the template's first `head` characters, when its first part
    is literal): a word at the edge of a part next to a gap may be glued to the value that fills it, so only words
    with a non-letter (or the template's own start or end) on both sides count."""
    out = []
    for i, part in enumerate(parts):
        if part is None or (head is not None and i > 0):
            continue
        for m in WORD.finditer(part):
            if head is not None and m.end() > head:
                break
            left = m.start() > 0 or i == 0
            right = m.end() < len(part) or i == len(parts) - 1
            if left and right and len(m.group()) >= 3:
                out.append(m.group())
    return out


HEAD = 48  # characters of a message that an older, shorter wording or a cut line still has


def anchors(templates: list[dict[str, Any]]) -> list[list[str]]:
    """Each template's anchors: its whole word least common among ordinary log lines, then among the templates
    (so each word's list stays short), then the longest; and the same among the words of its first HEAD
    characters, where that is another word (a message cut short, or worded shorter by an older release, still has
    those). None: the template has no whole word of 3+ letters."""
    words = [_words(t["parts"]) for t in templates]
    spread = Counter(w for ws in words for w in set(ws))
    ordinary = ordinary_word_counts()

    def rarest(ws: list[str]) -> str:
        return min(ws, key=lambda w: (ordinary.get(w.encode(), 0) > 0, spread[w], -len(w)))

    out = []
    for t, ws in zip(templates, words, strict=True):
        head = _words(t["parts"], HEAD)
        out.append(list(dict.fromkeys([rarest(ws), *([rarest(head)] if head else [])])) if ws else [])
    return out


class TemplateIndex:
    """The templates of a message index, ready to match lines."""

    def __init__(self, doc: dict[str, Any]) -> None:
        self.packages: dict[str, str] = doc["packages"]
        installed = doc.get("installed", list(self.packages))
        # the engine a log comes from when it does not say: the interpreter's own (its installed packages)
        self.home_engine = next((e for e in ENGINES if e in installed), None)
        self.engine_args: frozenset[str] = frozenset(doc.get("engine_args", []))
        self._raw: list[dict[str, Any]] = doc["templates"]
        self._parts: list[tuple[str, ...]] = []
        self._by_word: dict[bytes, list[int]] = {}
        for i, (t, words) in enumerate(zip(self._raw, doc["anchors"], strict=True)):
            self._parts.append(tuple(normal(p) if p.strip() else " " for p in t["parts"] if p is not None))
            # Python's own "object has no attribute" says nothing about where a failure began
            generic = (t["function"] or "").endswith(("__getattr__", "__getattribute__"))
            if not generic:
                for anchor in words:
                    self._by_word.setdefault(anchor.encode(), []).append(i)
        self._sites: dict[int, Site] = {}

    def __len__(self) -> int:
        return len(self._raw)

    def parts(self, i: int) -> list[str | None]:
        """Template i as the index stores it: its literal parts, None for each formatted part."""
        return list(self._raw[i]["parts"])

    def site(self, i: int) -> Site:
        if i not in self._sites:
            t = self._raw[i]
            self._sites[i] = Site(
                package=t["package"],
                file=t["file"],
                line=t["line"],
                function=t["function"],
                exception=t["exception"],
                level=t["level"],
                guard=t["guard"],
                knobs=tuple(t["knobs"]),
                text="".join("…" if p is None else p for p in t["parts"]).strip(),
            )
        return self._sites[i]

    def _covered(self, i: int, text: str) -> int:
        """Literal characters of template i found in order in text; -1 where a part is missing. A message that ends
        inside a part (cut by the log, or an older release's shorter wording: "... increase --mem-fraction-static"
        where the installed one goes on ". Current value: ...") counts what it has of it."""
        at, covered = 0, 0
        for part in self._parts[i]:
            found = text.find(part, at)
            if found < 0:
                rest = text[at:].rstrip(" .:")
                start = text.find(part[:MIN_MATCHED], at) if len(part) > MIN_MATCHED else -1
                if start >= 0 and part.startswith(text[start:].rstrip(" .:")) and not rest.endswith(part):
                    return covered + len(text[start:].rstrip(" .:"))
                return -1
            at = found + len(part)
            covered += len(part)
        return covered

    def match(self, raw: bytes, following: bytes | None = None, engine: str | None = None) -> int | None:
        """The template a log line says, or None (see find)."""
        found = self.find(raw, following, engine)
        return found[0] if found else None

    def find(self, raw: bytes, following: bytes | None = None, engine: str | None = None) -> tuple[int, bool] | None:
        """The template a log line says and whether the match is specific (SPECIFIC_MATCHED literal characters,
        SPECIFIC_SHARE of the message), or None. `following` is the next line: a message a terminal or a container
        wrapped continues there. `engine` is the engine the log comes from (None: it does not say, so the
        interpreter's own): another engine's messages are not its source."""
        text = normal(message(raw))
        if len(text) < MIN_MATCHED:
            return None
        candidates = {i for w in set(text.encode().translate(NON_WORD).split()) for i in self._by_word.get(w, ())}
        if not candidates:
            return None
        joined = normal(text + " " + message(following)) if following else None
        best: tuple[bool, int, int, int] | None = None  # (own engine's, covered, -package rank, -index)
        for i in candidates:
            package = self._raw[i]["package"]
            foreign = self.foreign(i, engine)
            if foreign and engine is not None:
                continue
            covered = self._covered(i, text)
            if covered < 0 and joined is not None:
                covered = self._covered(i, joined)
            if covered < max(MIN_MATCHED, MIN_SHARE * len(text)):
                continue
            rank = PACKAGE_ORDER.index(package) if package in PACKAGE_ORDER else len(PACKAGE_ORDER)
            key = (not foreign, covered, -rank, -i)
            if best is None or key > best:
                best = key
        if best is None:
            return None
        covered = best[1]
        return -best[3], covered >= max(SPECIFIC_MATCHED, SPECIFIC_SHARE * len(text))

    def foreign(self, i: int, engine: str | None) -> bool:
        """Template i is a message of another engine than the log's (None: the interpreter's)."""
        engine = engine or self.home_engine
        package = self._raw[i]["package"]
        return engine is not None and any(package in ps for e, ps in ENGINES.items() if e != engine)

    def advice(self, said: str, guard: str | None = None) -> tuple[list[str], list[str]]:
        """What the message itself says to do (advice.advice), an engine argument named as its --flag."""
        return advice(said, guard, self.engine_args)

    def flag_of(self, knob: str) -> str:
        """A config field the code reads, as the flag that sets it where there is one."""
        field = knob.rsplit(".", 1)[-1]
        return f"--{field.replace('_', '-')} ({knob})" if field in self.engine_args else knob
