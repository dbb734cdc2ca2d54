"""Recall and false alarms of `diagnose` on real failure logs from public threads. Prints numbers; not a test.

    python benchmarks/diagnose_recall.py [CASES.jsonl] [--python ENGINE_PYTHON [--source DIR ...]]
        [--holdout | --dev] [-v]

Each case is an excerpt quoted from a public thread (source URL in the file) with the key its fix must name
(a flag, variable or package) and whether it is benign. A failure counts as recognised when an error or warning
finding other than the catch-alls ("root-error", "engine-core-died") names that key in its fix; a case without a
key only needs an error or warning. A benign case is a false alarm when any error is found.

--python builds (or reads from the cache) the message index of that engine's packages and matches with it too;
without it, the curated knowledge base alone. --source adds a package folder the engine lacks (an unpacked
wheel's sglang/, as `diagnose --source`). The origin of each recognising finding is counted: the message
index, the curated base, or the fallback (what to collect when the log cannot tell).

A key matches with "_" and "-" taken as the same character: an engine argument is --max-model-len on the command
line and max_model_len in Python, and either spelling in a fix names it.

Sets: holdout.jsonl (threads set aside before the curated rules were written; holdout-threads.json) and the fresh
sets collected later from other threads (fresh-2026-12-03.jsonl, fresh-2026-12-03b.jsonl, fresh-2026-12-03c.jsonl);
each fresh set's quarter (fresh-holdout-2026-12-03.json, fresh-2026-12-03b-holdout.json,
fresh-2026-12-03c-holdout.json) was drawn at random before diagnose ran on any of it. --holdout scores that quarter
only, --dev the rest.
"""

import argparse
import json
import sys
from collections import Counter
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from launcher.diagnose.index import IndexUnavailable, load_index, source_tree  # noqa: E402
from launcher.diagnose.rules import load_rules  # noqa: E402
from launcher.diagnose.run import diagnose_blocks  # noqa: E402

CATCH_ALLS = {"root-error", "engine-core-died"}
FIXTURES = ROOT / "tests/fixtures/diagnose"
# the first fresh set's hold-out file predates the <set>-holdout.json naming
HOLDOUT_FILES = {"fresh-2026-12-03.jsonl": "fresh-holdout-2026-12-03.json"}


def holdout_file(cases: Path) -> Path:
    return cases.with_name(HOLDOUT_FILES.get(cases.name, f"{cases.stem}-holdout.json"))


def spelled(text: str) -> str:
    """A key or a fix compared with "_" and "-" alike and without case."""
    return text.lower().replace("_", "-")


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("cases", nargs="?", type=Path, default=FIXTURES / "holdout.jsonl")
    parser.add_argument("--python", help="the engine interpreter whose message index is used")
    parser.add_argument("--source", type=Path, action="append", default=[], help="a package folder read beside it")
    split = parser.add_mutually_exclusive_group()
    split.add_argument("--holdout", action="store_true", help="only the held-out quarter of the fresh set")
    split.add_argument("--dev", action="store_true", help="only the rest of the fresh set")
    parser.add_argument("-v", action="store_true", help="print every case's findings")
    args = parser.parse_args()

    rules = load_rules()
    try:
        extra = dict(source_tree(folder) for folder in args.source)
        index = load_index(args.python, extra=extra)[0] if args.python else None
    except IndexUnavailable as e:
        sys.exit(f"diagnose_recall: {e}")
    cases = [json.loads(line) for line in args.cases.read_text().splitlines() if line.strip()]
    if args.holdout or args.dev:
        held = set(json.loads(holdout_file(args.cases).read_text())["holdout_threads"])
        cases = [c for c in cases if (c["source"].split("#")[0] in held) == args.holdout]
    recognised, failures, alarms, benign, errors, missed = 0, 0, 0, 0, 0, []
    origins: Counter[str] = Counter()
    for case in cases:
        findings, _ = diagnose_blocks([case["excerpt"].encode()], None, rules, index)
        got = [(f.rule.id, str(f.severity), f.origin) for f in findings]
        if args.v:
            print(case["source"], case["fix_key"], got)
        if case["benign"]:
            benign += 1
            if any(f.severity == "error" for f in findings):
                alarms += 1
                missed.append(f"  false alarm {case['source']}: {[g for g in got if g[1] == 'error']}")
            continue
        failures += 1
        flagged = [f for f in findings if f.severity in ("error", "warning")]
        errors += bool(flagged)
        key = case["fix_key"]
        named = [f for f in flagged if f.rule.id not in CATCH_ALLS and key and spelled(key) in spelled(f.fix())]
        hits = named if key else flagged
        if hits:
            recognised += 1
            origins[hits[0].origin] += 1
        else:
            missed.append(f"  missed {case['source']} (wanted {key}; got {got})")
    for line in missed:
        print(line)
    threads = len({c["source"].split("#")[0] for c in cases})
    which = "holdout quarter" if args.holdout else "dev part" if args.dev else "all"
    print(f"{args.cases.name} ({which}): {len(rules)} rules, index: {len(index) if index else 'none'} templates")
    print(f"{failures} failure cases, {benign} benign, from {threads} threads")
    print(
        f"recognised with the right fix: {recognised}/{failures} ({recognised / max(failures, 1):.0%}); "
        f"an error or warning at all: {errors}/{failures}; false alarms: {alarms}/{benign} benign"
    )
    print("recognised by origin: " + ", ".join(f"{k} {v}" for k, v in sorted(origins.items())))


if __name__ == "__main__":
    main()
