"""The advice a logged message carries: the sentences that tell the reader what to do, and the flags,
environment variables and parameters they name. A finding's fix quotes them: software often says its own fix.
"""

from __future__ import annotations

import difflib
import re

_FLAG = re.compile(r"(?<![\w-])--[a-z][a-z0-9-]+")
# an environment variable: the serving stack's prefixes, and the few others its messages advise setting
_ENV = re.compile(
    r"\b(?:VLLM|SGLANG|SGL|NCCL|CUDA|TORCH|PYTORCH|TRITON|FLASHINFER|HF|TRANSFORMERS|RAY|OMP|GLOO|MASTER|LD"
    r"|PROTOCOL_BUFFERS)_[A-Z0-9_]{2,}\b"
)
_ASSIGNED = re.compile(r"\b[A-Z][A-Z0-9]*(?:_[A-Z0-9]+)+(?==\S)")  # any variable a message sets: X_Y=1
_NOT_A_VARIABLE = re.compile(r"_(?:ERROR|STATUS|SUCCESS)")  # an error code in capitals: NCCL_ERROR_SYSTEM_ERROR
# verbs a message advises with, in the imperative ("Provide the model as ...", "you should pass --x")
ADVICE_VERBS = (
    "try", "set", "use", "pass", "provide", "specify", "install", "reinstall", "uninstall", "upgrade", "downgrade",
    "update", "increase", "decrease", "reduce", "lower", "raise", "disable", "enable", "add", "remove", "check",
    "verify", "ensure", "make sure", "run", "rerun", "restart", "export", "unset", "switch", "change", "adjust",
    "choose", "select", "consider", "free", "move", "point", "limit", "avoid", "rebuild", "recompile", "build",
    "call", "download", "login", "log in", "allocate", "mount", "configure",
)  # fmt: skip
# what stands before an imperative: the sentence's start, a plea, a modal addressed to the reader, a clause's
# start after a comma, "or" or a parenthesis ("(run with NCCL_DEBUG=INFO for details)"), an adverb before the
# verb ("Manually set"); a gerund after "consider"/"try"/"recommend" ("consider reducing")
_LEAD = (
    r"(?:^|\bplease\s+|\byou (?:can|could|may|should|must|need to|have to|might want to|will need to|want to)\s+"
    r"|\b(?:it is )?recommended to\s+|\bmake sure to\s+|\bbe sure to\s+|\bremember to\s+|[,;:]\s*"
    r"|\b(?:or|then|otherwise|instead|alternatively),?\s+|\bto fix (?:this|it),?\s+|\(\s*)"
    r"(?:(?:manually|explicitly|simply|also|first)\s+)?"
)
_ADVISING = re.compile(
    rf"(?i){_LEAD}(?:{'|'.join(ADVICE_VERBS)})\b(?!\s+(?:failed|error|succeeded|completed?|finished)\b)(?=\s+\S)"
    r"|\b(?:consider|try|recommend\w*|suggest\w*)\s+[a-z]+ing\b|\b(?:may|might|should|would|could) help\b"
    r"|\bplease\s+[a-z]{3,}"
)
_WORDS = re.compile(r"[a-z0-9]+")
_FIELD = re.compile(r"(?<![\w./-])[a-z][a-z0-9]*(?:_[a-z0-9]+)+\b")  # a parameter named in snake_case
_GUARD_FIELD = re.compile(r"\b(?:self|\w*config|\w*args)\.([a-z][a-z0-9]*(?:_[a-z0-9]+)+)\b(?!\()")
# a message that says the installed software lacks something: a newer release may have it
SUPPORT_GAP = re.compile(
    r"(?i)\bnot (?:yet )?(?:supported|implemented)\b|\bunsupported\b|\b(?:does|do) not support\b.*\byet\b"
    r"|\bunknown \w+ method\b"
)
# a sentence that says what causes the message ("This can be caused by too large tensor parallel size.")
_CAUSAL = re.compile(
    r"\b(?:(?:can|may|might|could) be|is|are|was|often|usually|likely) (?:caused by|due to|because)\b", re.I
)
# a parameter a message names in quotes or backticks ('num_stages', `gpu_memory_utilization`, 'numpy<2')
_QUOTED_NAME = re.compile(r"[`'\"][A-Za-z_][\w.-]*(?:[<>=]=?[\w.]+)?[`'\"]")
_SENTENCE = re.compile(r"(?<=[.;!?])\s+|\s+(?=(?:Please|Try|Consider|You can|You may|You should)\b)")


def advises(sentence: str) -> bool:
    """The sentence tells the reader to do something: an imperative verb where an imperative stands (and more than
    "Run 'x --help' for more information")."""
    return _ADVISING.search(sentence) is not None and "--help" not in sentence


def message_advice(said: str, knobs_only: bool) -> str | None:
    """The sentences of a logged message that advise what to do, for a finding's fix; with knobs_only, only those
    that name a flag, a variable or a quoted parameter (a curated fix already says the rest)."""
    kept = []
    for sentence in _SENTENCE.split(said):
        sentence = sentence.strip()
        if not sentence or not advises(sentence):
            continue
        if knobs_only and not (_FLAG.search(sentence) or _ENV.search(sentence) or _QUOTED_NAME.search(sentence)):
            continue
        kept.append(sentence)
    return " ".join(kept)[:300] or None


# what a message says is missing from the environment, as the package to install: a module Python could not import,
# a version pip's resolver or a library's check asks for, a library a tokenizer requires
_MISSING_PACKAGE = (
    (re.compile(r"No module named '(\w+)"), "install the package that provides '{0}' (pip install {0}, if so named)"),
    (re.compile(r"\brequires ([\w.-]+[<>=~!]=?[\w.*+-]+), but you have\b"), "pip install '{0}'"),
    (re.compile(r"\b([\w.-]+) with minimum required version ([\w.]+) is not installed"), "pip install '{0}>={1}'"),
    (re.compile(r"\brequires the (\w+) library but it was not found"), "pip install {0}"),
    (
        re.compile(r"\b([\w.-]+) version \(?([\w.+]+)\)? does not match ([\w.-]+) version \(?([\w.+]+)\b"),
        "install {0} and {2} of one version (pip install '{0}=={3}')",
    ),
)


def named_knobs(said: str, advising_only: bool) -> list[str]:
    """The knobs a message names as the thing to change: the flags, environment variables and quoted parameters of
    its advising sentences (of every sentence when advising_only is off: an error's own message names what it is
    about)."""
    knobs: list[str] = []
    for sentence in _SENTENCE.split(said):
        advising = advises(sentence)
        if advising_only and not advising:
            continue
        knobs += [f for f in _FLAG.findall(sentence) if f not in ("--help", "--version")]
        knobs += [v for v in _ENV.findall(sentence) + _ASSIGNED.findall(sentence) if not _NOT_A_VARIABLE.search(v)]
        if advising:  # a parameter in quotes is a knob where the sentence says to set it
            knobs += [q.strip("`'\"") for q in _QUOTED_NAME.findall(sentence) if "_" in q or "=" in q]
    return list(dict.fromkeys(knobs))


def missing_packages(said: str) -> list[str]:
    """What to install, where a message's words say a package is missing or of the wrong version."""
    installs = []
    for pattern, remedy in _MISSING_PACKAGE:
        if m := pattern.search(said):
            installs.append(remedy.format(*(g.lower() if g.isalpha() else g for g in m.groups())))
    return installs


def advice(said: str, guard: str | None, engine_args: frozenset[str]) -> tuple[list[str], list[str]]:
    """What the message itself says to do: its advising or causal sentences, and the flags, variables and
    parameters it names (an engine argument, in snake_case or in words, is its --flag) with the fields its raising
    condition tests."""
    sentences = [s.strip() for s in _SENTENCE.split(said)]
    clauses = [s for s in sentences if advises(s) or _CAUSAL.search(s)]
    fields = _FIELD.findall(said) + (_GUARD_FIELD.findall(guard) if guard else [])
    # an engine argument named in words ("too large tensor parallel size") is its flag too
    prose = " ".join(_WORDS.findall(said.lower()))
    fields += [a for a in sorted(engine_args) if "_" in a and f" {a.replace('_', ' ')} " in f" {prose} "]
    knobs = _FLAG.findall(said) + _ENV.findall(said)
    knobs += [f"--{w.replace('_', '-')}" if w in engine_args else w for w in fields]
    return clauses, list(dict.fromkeys(knobs))


# the groups of a rule's pattern that capture an option someone passed (a keyword argument, a command-line flag)
OPTION_GROUPS = ("arg", "argument", "arguments", "flag")


def misspelt(groups: dict[str, str], engine_args: frozenset[str]) -> str | None:
    """For an option the installed release refused that is a near spelling of one of its engine arguments
    ("gpu_memory_utilisation"), the argument it most likely meant."""
    for name in re.findall(r"[A-Za-z][\w-]+", " ".join(groups.get(g, "") for g in OPTION_GROUPS)):
        name = name.replace("-", "_").lower()
        if name in engine_args:
            continue
        for meant in difflib.get_close_matches(name, engine_args, n=1, cutoff=0.85):
            return f"'{name}' is no engine argument; did you mean {meant} (--{meant.replace('_', '-')})?"
    return None
