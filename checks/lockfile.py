"""Installed versions against a lock (a pinned requirements file: name==version lines; hashes ignored)."""

from __future__ import annotations

import re
from pathlib import Path

from packaging.utils import canonicalize_name

from checks.facts import Facts
from checks.result import CheckResult

PIN = re.compile(r"^\s*([A-Za-z0-9][A-Za-z0-9._-]*)(?:\[[^\]]*\])?\s*==\s*([^\s;\\]+)")


def read_pins(path: Path) -> dict[str, str]:
    pins: dict[str, str] = {}
    for line in path.read_text(encoding="utf-8").splitlines():
        m = PIN.match(line)
        if m:
            pins[canonicalize_name(m.group(1))] = m.group(2)
    return pins


def check(facts: Facts) -> list[CheckResult]:
    lock = facts.get("lock")
    if lock is None:
        return [CheckResult("lock", "lock", "skip", "no --lock given")]
    installed: dict[str, str] = facts["stack"].get("all_packages") or {}
    pins: dict[str, str] = lock["pins"]
    missing = [n for n in pins if n not in installed]
    different = [n for n in pins if n in installed and installed[n] != pins[n]]
    if not missing and not different:
        return [CheckResult("lock", "lock", "pass", f"all {len(pins)} pins of {lock['path']} are installed")]
    parts = [f"{n} {installed[n]} (lock: {pins[n]})" for n in different[:10]]
    parts += [f"{n} missing (lock: {pins[n]})" for n in missing[:10]]
    return [
        CheckResult(
            "lock",
            "lock",
            "fail",
            f"{len(different)} differ, {len(missing)} missing: " + "; ".join(parts),
            f"every pin of {lock['path']}",
            f"pip install --require-hashes --no-deps -r {lock['path']}",
        )
    ]
