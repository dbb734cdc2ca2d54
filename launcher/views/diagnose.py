"""How `nemolaunch diagnose` reads on a terminal."""

from __future__ import annotations

from launcher.diagnose.run import Finding


def render_text(findings: list[Finding], lines: int, name: str) -> str:
    if not findings:
        return f"{name}: {lines} lines, no known failure found"
    out = [f"{name}: {lines} lines, {len(findings)} finding(s)"]
    for f in findings:
        out.append(f"\n[{f.severity}] {f.rule.title}  ({f.rule.id}, {f.count} line(s))")
        out += [f"  line {n}: {t}" for n, t in f.evidence]
        if f.stage is not None or f.rule.id == "root-error":
            out.append(f"  stage: {f.stage or 'start-up (before loading weights)'}")
        out.append(f"  cause: {f.rule.cause}")
        out.append(f"  fix:   {f.fix()}")
        if f.rule.avoid:
            out.append(f"  profile: {f.rule.avoid}")
    return "\n".join(out)
