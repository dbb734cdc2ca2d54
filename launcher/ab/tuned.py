"""The profile tune writes: the base's settings plus the winner's, each changed or tried setting with its ab
evidence in [why], and the workload and stack it was tuned on in [tuned]."""

from __future__ import annotations

import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

from launcher.ab.candidates import slug
from launcher.ab.document import AbDocument, TuneDocument, TuneStateDoc
from launcher.ab.report import sentence, trial_result
from launcher.output import atomic_write_text
from launcher.profiles.profile import SETTINGS, ServingProfile

if TYPE_CHECKING:
    from launcher.ab.tune import TuneConfig


def write_tuned_profile(
    cfg: TuneConfig,
    out: Path,
    base: ServingProfile,
    state: TuneStateDoc,
    final_doc: AbDocument | None,
    tune_doc: TuneDocument,
    skipped: list[str],
) -> Path:
    import tomli_w

    from launcher.engine import resolve_python
    from launcher.profiles.profile import parse_profile
    from launcher.profiles.stack import current_stack

    name = cfg.name or f"{base.name}-tuned"
    path = out / f"{name}.toml"
    winner = tune_doc["winner"] or "base"
    trials = list(state["trials"].values())
    winning = next((t for t in trials if t["name"] == winner), None)
    settings = {**base.settings, **(winning["overrides"] if winning else {})}
    w = cfg.workload
    workload = f"{w.input_len} in / {w.output_len} out tokens at concurrency {list(w.concurrency)}"
    why: dict[str, str] = dict(base.why)
    evidence: list[str] = []
    final = state["final"]
    for t in trials:
        verdicts = final_doc["verdicts"].get(slug(t["name"])) if final_doc else None
        if verdicts and final:
            cited = "; ".join(f"c={c}: {sentence(v['output_tok_s'], t['name'])}" for c, v in verdicts.items())
            source = f"ab {final['folder']}/ab.json"
        else:
            cited = f"screening round {t['status']}: {trial_result(t)}"
            source = f"ab {t['folder']}/ab.json"
        line = f"tune, {workload}: {t['name']} vs base {cfg.base}: {cited} ({source})"
        evidence.append(line)
        for key in t["overrides"]:
            if key in SETTINGS:
                prefix = "chosen" if t["name"] == winner else "not chosen"
                why[key] = f"{prefix}: {line}" if key not in why or t["name"] == winner else why[key]
    for key, v in list(why.items()):
        if key not in settings and not v.startswith("not chosen"):
            del why[key]
    stack = current_stack(resolve_python(cfg.python, base.python).path)
    revalidate = (
        f"nemolaunch ab --model {cfg.model} --a {base.path} --b {path} --concurrency "
        f"{','.join(map(str, w.concurrency))} --input-len {w.input_len} --output-len {w.output_len} --calibrate"
    )
    doc: dict[str, Any] = {
        "schema": 1,
        "description": f"tuned by nemolaunch tune from {base.name} for {workload}: winner {winner}",
        "vllm": settings,
        "env": dict(base.env),
        "why": why,
        "tuned": {
            "date": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
            "base": str(base.path),
            "winner": winner,
            "workload": {
                "model": cfg.model,
                "input_len": w.input_len,
                "output_len": w.output_len,
                "concurrency": list(w.concurrency),
            },
            "decision": tune_doc["decision"],
            "stack": stack,
            "evidence": evidence,
            "considered_not_tried": skipped,
            "revalidate": revalidate,
        },
    }
    if base.python:
        doc["python"] = base.python
    text = tomli_w.dumps(doc)
    parse_profile(text, path)  # what tune writes, serve must read
    atomic_write_text(path, text)
    return path
