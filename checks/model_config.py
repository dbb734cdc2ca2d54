"""A model's config.json (and the hf_quant_config.json beside it), read in one place: bounded, validated, and with
one rule for multimodal configs (the language model's values nest under `text_config` and win over the top level's;
the top level keeps what only it says, such as quantization_config). checks/ imports nothing from launcher/, so
doctor's facts, probe, bench's roofline and serve's preflight all read it here (launcher/documents.py re-exports
it)."""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

MAX_CONFIG_BYTES = 16 << 20  # the largest real configs (a ModelOpt module map) are ~5 MB


class ConfigError(ValueError):
    """config.json cannot be used: one line naming the file and what is wrong."""


def read_model_config(path: Path) -> dict[str, Any]:
    """The config as one mapping (text_config merged over the top level). `path` is the model folder or the file."""
    file = path / "config.json" if path.is_dir() else path
    try:
        with file.open("rb") as f:
            raw = f.read(MAX_CONFIG_BYTES + 1)
    except OSError as e:
        raise ConfigError(f"cannot read {file}: {e.strerror or e}") from None
    if len(raw) > MAX_CONFIG_BYTES:
        raise ConfigError(f"{file} is larger than {MAX_CONFIG_BYTES >> 20} MiB: not a model's config.json")
    try:
        doc = json.loads(raw)
    except (UnicodeDecodeError, json.JSONDecodeError) as e:
        raise ConfigError(f"{file}: not JSON ({e})") from None
    if not isinstance(doc, dict):
        raise ConfigError(f"{file}: a JSON {type(doc).__name__}, not an object")
    text = doc.get("text_config")
    if text is not None and not isinstance(text, dict):
        raise ConfigError(f"{file}: text_config must be an object, not {json.dumps(text)[:40]}")
    return merged(doc)


def read_hf_quant_config(path: Path) -> dict[str, Any] | None:
    """ModelOpt's hf_quant_config.json beside config.json (`path`: the model folder or its config.json), which vLLM
    reads when config.json has no quantization_config (ModelOpt 0.29 and before; Nemotron 3 Nano's NVFP4 release).
    None when there is none, or it is unreadable, too large or not a JSON object."""
    folder = path if path.is_dir() else path.parent
    try:
        with (folder / "hf_quant_config.json").open("rb") as f:
            raw = f.read(MAX_CONFIG_BYTES + 1)
        doc = json.loads(raw) if len(raw) <= MAX_CONFIG_BYTES else None
    except (OSError, ValueError):  # ValueError: not UTF-8 or not JSON
        return None
    return doc if isinstance(doc, dict) else None


def merged(config: dict[str, Any]) -> dict[str, Any]:
    """The one rule for a multimodal config: text_config's values over the top level's (a config already merged,
    or one without text_config, comes back as it is)."""
    text = config.get("text_config")
    return {**config, **text} if isinstance(text, dict) else config


def size(config: dict[str, Any], key: str, path: Path, limit: int = 1 << 31) -> int | None:
    """config[key] as a size: None when absent, else a positive integer below `limit` (a float such as 128256.0
    counts as its integer), or ConfigError naming the field."""
    value = config.get(key)
    if value is None:
        return None
    if isinstance(value, float) and math.isfinite(value) and value.is_integer():
        value = int(value)
    if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value < limit:
        raise ConfigError(f"{path}: {key} must be a positive integer below {limit:,}, not {json.dumps(value)[:40]}")
    return value
