"""How `nemolaunch ab` and `nemolaunch tune` read on a terminal."""

from __future__ import annotations

from typing import Any

from launcher.ab.run import VERDICT_HEADERS, verdict_rows
from launcher.output import table


def ab_text(doc: dict[str, Any]) -> str:
    lines = [table(VERDICT_HEADERS, verdict_rows(doc))]
    for s in doc["sides"]:
        if s["status"] in ("infeasible", "died"):
            lines.append(f"{s['name']}: {s['status']}: {s['diagnosis']}")
    answers = doc["answers"]
    if answers["applies"]:
        lines += [f"{name} vs {doc['baseline']}: {a['text']}" for name, a in answers["sides"].items()]
    else:
        lines.append(f"same answers not compared: {answers['note']}")
    lines.append(f"mode {doc['mode']}; noise floor {doc['noise_floor']['source']}; method: {doc['method']}")
    return "\n".join(lines)


def tune_text(doc: dict[str, Any]) -> str:
    rows = [[t["name"], t["stage"], t["status"], t.get("headline") or "-"] for t in doc["trials"]]
    lines = [table(["candidate", "stage", "status", "result"], rows)]
    lines += [f"not tested: {n}" for n in doc["not_tested"]]
    lines += doc["load_notes"]
    lines.append(f"winner: {doc['winner']}; profile written to {doc['profile']}")
    return "\n".join(lines)
