"""Recall and false alarms of the knowledge base on real failure logs. Prints numbers; not a test.

    python benchmarks/diagnose_recall.py [tests/fixtures/diagnose/holdout.jsonl]

Each case is an excerpt quoted from a public thread (source URL in the file) with the key its fix must name
(a flag, variable or package) and whether it is benign. A failure counts as recognised when a specific (not
catch-all) error or warning finding's fix names that key; a benign case is a false alarm when any error is
found. holdout.jsonl holds the threads set aside at random before any rule was written
(tests/fixtures/diagnose/holdout-threads.json has the seed and the list); cases.jsonl holds those rules were
written from.
"""

import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from launcher.diagnose.run import diagnose_blocks, load_rules  # noqa: E402


def main() -> None:
    path = Path(sys.argv[1]) if len(sys.argv) > 1 else ROOT / "tests/fixtures/diagnose/holdout.jsonl"
    rules = load_rules()
    cases = [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
    recognised, failures, alarms, benign, root_named, missed = 0, 0, 0, 0, 0, []
    for case in cases:
        findings, _ = diagnose_blocks([case["excerpt"].encode()], None, rules)
        if case["benign"]:
            benign += 1
            alarms += any(f.severity == "error" for f in findings)
            continue
        failures += 1
        flagged = [f for f in findings if f.severity in ("error", "warning")]
        if case["fix_key"] and any(not f.rule.generic and case["fix_key"] in f.fix() for f in flagged):
            recognised += 1
        elif case["fix_key"] is None and flagged:
            recognised += 1  # the excerpt shows no root cause: the catch-all naming the failure is right
        else:
            missed.append(f"  {case['source']}  (wanted {case['fix_key']}; got {[f.rule.id for f in findings]})")
        root_named += any(f.severity == "error" for f in flagged)
    threads = len({c["source"].split("#")[0] for c in cases})
    for line in missed:
        print("missed", line)
    print(f"{path.name}: {len(rules)} rules; {failures} failure cases from {threads} threads")
    print(
        f"recognised with the right fix: {recognised}/{failures} ({recognised / max(failures, 1):.0%}); "
        f"an error finding at all: {root_named}/{failures}; false alarms: {alarms}/{benign} benign"
    )


if __name__ == "__main__":
    main()
