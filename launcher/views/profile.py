"""How `nemolaunch profile list/show` read on a terminal. Secret values (a token in [env], a key in
extra_args) are masked here as everywhere nemolaunch prints."""

from __future__ import annotations

import json

from checks.secrets import redact_env, redact_obj
from launcher.output import table
from launcher.profiles.flags import Rendered
from launcher.profiles.profile import SETTINGS, ServingProfile


def render_list(profiles: list[ServingProfile]) -> str:
    return table(["name", "description"], [(p.name, p.description) for p in profiles])


def render_show(prof: ServingProfile, rendered: Rendered | None) -> str:
    lines = [f"{prof.name}: {prof.description}", f"({prof.path})"]
    lines.append(
        f"python: {prof.python} (serve and --dry-run run this interpreter unless --python or $NEMOLAUNCH_PYTHON)"
        if prof.python
        else "python: not set (the engine's interpreter comes from --python, $NEMOLAUNCH_PYTHON or nemolaunch's own)"
    )
    settings = redact_obj(prof.settings)
    rows = [(k, json.dumps(v), prof.why.get(k, "")) for k, v in settings.items()]
    rows += [(f"env {k}", v, "") for k, v in redact_env(prof.env).items()]
    lines += ["", table(["setting", "value", "why"], rows)]
    unset = [k for k in SETTINGS if k not in prof.settings]
    lines += ["", f"left at vLLM's default: {', '.join(unset)}"]
    if rendered:
        lines += ["", f"for vLLM {rendered.vllm_version}: {' '.join(redact_obj(rendered.args))}"]
        lines += [f"  {k}={v}" for k, v in redact_env(rendered.env).items()]
        lines += [f"  note: {note}" for note in rendered.notes]
    return "\n".join(lines)


def profile_json(prof: ServingProfile, rendered: Rendered | None) -> dict[str, object]:
    doc: dict[str, object] = prof.to_dict()
    if rendered:
        doc["rendered"] = {
            "vllm_version": rendered.vllm_version,
            "args": rendered.args,
            "env": rendered.env,
            "notes": rendered.notes,
        }
    return dict(redact_obj(doc))
