"""`nemolaunch model shape`: a model folder with a known model's real shapes and no weights, served with vLLM's
`--load-format dummy`, so a stack can be benchmarked on a model's shapes before its weights arrive.

A shape folder holds config.json (the model card's, with token ids remapped to the project's tokenizer), the tiny
model's tokenizer padded to the real vocab_size, nemolaunch-shape.json (what it is, where its config comes from,
the flags vLLM needs) and README.md (how to serve it). `serve` and `bench --profile` add the recorded flags when
they are given a shape folder; a folder without weights that is not a shape is refused with the flag it needs.

The vocabulary: config.json keeps the real vocab_size, so the embedding, the lm_head (4096 x 128256 for Llama 3 8B:
525M parameters, 7% of the weights read per decode step) and the sampler have their real cost. The tokenizer is
padded with filler words to exactly that many ids: prompts encode only to its 1024 trained ids, while every id the
random-weight model samples decodes to a short word, as with a real tokenizer (vLLM decodes an id past the
tokenizer's end to nothing, so most generated tokens would carry empty text and the detokenizer's work would not be
real). The tokenizer's own bos/eos/pad ids replace the card's.
"""

from __future__ import annotations

import copy
import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from checks.model_config import ConfigError, size
from launcher.errors import BadInput
from launcher.model import quant as quantmod
from launcher.model.known import KNOWN as KNOWN  # re-exported: the CLI lists them from here
from launcher.model.known import KnownShape as KnownShape  # re-exported: the views import it from here
from launcher.model.known import Release
from launcher.model.nemotron import biased_router
from launcher.output import atomic_write_text

MARKER = "nemolaunch-shape.json"
SCHEMA = "nemolaunch.shape/1"
QUANTIZATIONS = ("bf16", "fp8", "nvfp4")
HF_QUANT = "hf_quant_config.json"
WEIGHT_PATTERNS = ("*.safetensors", "*.bin", "*.pt", "*.pth", "*.gguf", "*.safetensors.index.json")

# what a shape's sizes may be: beyond these no model exists, and vocab_size ids are written into its tokenizer
SIZE_LIMITS = {
    "vocab_size": 1 << 21,
    "hidden_size": 1 << 18,
    "intermediate_size": 1 << 20,
    "num_hidden_layers": 1 << 12,
    "num_attention_heads": 1 << 12,
    "num_key_value_heads": 1 << 12,
}
REQUIRED_KEYS = ("architectures", "hidden_size", "num_hidden_layers", "num_attention_heads", "vocab_size")


@dataclass(frozen=True)
class ShapeSpec:
    """What `model shape` writes: the config (with quantization_config for NVFP4), other quantization files
    (hf_quant_config.json) and vLLM's flags. `quantization` labels what the folder really carries."""

    name: str
    source: str
    quantization: str
    config: dict[str, Any]
    serve_args: list[str]
    overrides: dict[str, Any] = field(default_factory=dict)
    files: dict[str, dict[str, Any]] = field(default_factory=dict)


def parse_overrides(items: tuple[str, ...] | list[str]) -> dict[str, Any]:
    """KEY=VALUE pairs; a value is read as JSON when it parses (2, 1e-6, null, [..]), else kept as text."""
    out: dict[str, Any] = {}
    for item in items:
        key, sep, value = item.partition("=")
        if not sep or not key.strip():
            raise BadInput(f"--set {item!r} is not KEY=VALUE", "write e.g. --set num_hidden_layers=4")
        try:
            out[key.strip()] = json.loads(value)
        except json.JSONDecodeError:
            out[key.strip()] = value
    return out


def resolve(ref: str, quantization: str | None = None, overrides: dict[str, Any] | None = None) -> ShapeSpec:
    """A known name, or a path to a config.json (any architecture vLLM knows), turned into what the folder holds.

    `quantization` None keeps what the config carries (a config.json's own quantization_config, or the
    hf_quant_config.json beside it; a known name: none); "bf16" drops a carried one; "fp8" is vLLM's online FP8;
    "nvfp4" is the model's NVFP4 release where nemolaunch knows it, else a ModelOpt NVFP4 map."""
    if quantization is not None and quantization not in QUANTIZATIONS:
        raise BadInput(f"unknown quantization {quantization!r}", f"use one of {', '.join(QUANTIZATIONS)}")
    router: str | None = None
    release: Release | None = None
    files: dict[str, dict[str, Any]] = {}
    if ref in KNOWN:
        known = KNOWN[ref]
        name, source, config, router = known.name, known.source, copy.deepcopy(known.config), known.router
        release = known.nvfp4_release
    elif ref.endswith(".json") or Path(ref).is_file():
        path = Path(ref).expanduser()
        config = _read_object(path, ref, "give a model's config.json or a known name")
        name, source = path.parent.name or path.stem, str(path)
        if any(k in config for k in ("num_experts", "num_local_experts", "n_routed_experts")):
            router = "*.gate"
        beside = path.parent / HF_QUANT
        if beside.is_file():  # ModelOpt 0.29 and before: the quantization beside config.json, read by vLLM too
            files[HF_QUANT] = _read_object(beside, str(beside), "remove it or give a readable one")
    else:
        raise BadInput(f"unknown model shape {ref!r}", f"give a config.json or one of {', '.join(KNOWN)}")
    overrides = overrides or {}
    config.update(overrides)
    missing = [k for k in REQUIRED_KEYS if k not in config]
    if missing:
        raise BadInput(f"{ref} lacks {', '.join(missing)}", "give a model's config.json (from its model card)")
    for key, limit in SIZE_LIMITS.items():  # a size a config or --set hands in: the tokenizer is padded to vocab_size
        try:
            value = size(config, key, Path(ref), limit)
        except ConfigError as e:
            raise BadInput(str(e), "give the model card's value") from None
        if value is not None:
            config[key] = value  # 128256.0 is 128256
    serve_args = ["--load-format", "dummy"]
    carried = config.get("quantization_config") or files.get(HF_QUANT)
    if quantization in ("fp8", "nvfp4") and carried:
        raise BadInput(
            f"{ref} already carries its quantization ({_label(config, files, None)})",
            "leave out --quantization to keep the checkpoint's own, or give --quantization bf16 to drop it",
        )
    if quantization == "bf16":
        config.pop("quantization_config", None)
        files.pop(HF_QUANT, None)
    elif quantization == "fp8":
        serve_args += ["--quantization", "fp8"]  # online FP8: vLLM quantizes the dummy bf16 weights at load
    elif quantization == "nvfp4" and release is not None:
        qc, files = release(config)
        if qc is not None:
            config["quantization_config"] = qc
    elif quantization == "nvfp4":
        config["quantization_config"] = nvfp4_quantization_config(router)
    label = _label(config, files, "fp8" if quantization == "fp8" else None)
    return ShapeSpec(name, source, label, config, serve_args, overrides, files)


def _read_object(path: Path, ref: str, fix: str) -> dict[str, Any]:
    try:
        doc = json.loads(path.read_text())
    except (OSError, json.JSONDecodeError) as e:
        raise BadInput(f"cannot read {ref}: {e}", fix) from None
    if not isinstance(doc, dict):
        raise BadInput(f"{ref} is not a JSON object", fix)
    return doc


def _label(config: dict[str, Any], files: dict[str, dict[str, Any]], online: str | None) -> str:
    """What the folder carries, as vLLM will read it; a quantization nemolaunch can not size keeps its method."""
    try:
        return quantmod.read(config, files.get(HF_QUANT), online).label
    except quantmod.UnknownQuantization:
        carried = config.get("quantization_config") or files.get(HF_QUANT) or {}
        return str(carried.get("quant_method") or "quantized")


def nvfp4_quantization_config(router: str | None) -> dict[str, Any]:
    """A ModelOpt NVFP4 quantization_config as NVIDIA's NVFP4 checkpoints carry it in config.json: FP4 weights and
    activations in groups of 16 with FP8 scales; lm_head (and an MoE's router) stay bf16. vLLM 0.26 reads it
    (ModelOptNvFp4Config, quant_method "modelopt") and builds uint8/fp8/float32 parameters that the dummy loader
    fills (integer tensors are left as allocated, the float scales get small random values)."""
    ignore = ["lm_head"] + ([router] if router else [])
    return {"quant_method": "modelopt", "quant_algo": "NVFP4", "group_size": 16, "ignore": ignore}


def write(spec: ShapeSpec, out_dir: Path, python: Path) -> dict[str, Any]:
    """Write the shape folder (atomically: a temporary sibling renamed into place). Returns what was written."""
    from launcher.model import tiny as tinymodel

    vocab = spec.config["vocab_size"]
    if not isinstance(vocab, int) or vocab < 1024:
        raise BadInput(f"vocab_size {vocab!r} is below the tokenizer's 1024 ids", "keep vocab_size >= 1024")
    with tinymodel.fresh_folder(out_dir) as tmp:
        tok = tinymodel.write_tokenizer(python, vocab, tmp)
        config = {
            **spec.config,
            "bos_token_id": tok["bos_token_id"],
            "eos_token_id": tok["eos_token_id"],
            "pad_token_id": tok["pad_token_id"],
        }
        marker = {
            "schema": SCHEMA,
            "name": spec.name,
            "config_source": spec.source,
            "quantization": spec.quantization,
            "overrides": spec.overrides,
            "serve_args": spec.serve_args,
            "vocab": {
                "vocab_size": vocab,
                "tokenizer_trained_ids": tok["trained_ids"],
                "note": "config.json keeps the real vocab_size (the lm_head's cost is real); the tokenizer is the "
                "project's tiny BPE padded with filler words to vocab_size ids, so every sampled id decodes",
            },
            "weights": "none: vLLM fills random values (--load-format dummy); throughput is real, outputs are not"
            + (f"; {DUMMY_ROUTING}" if biased_router(config) else ""),
        }
        atomic_write_text(tmp / "config.json", json.dumps(config, indent=2) + "\n")
        for file_name, doc in spec.files.items():
            atomic_write_text(tmp / file_name, json.dumps(doc, indent=2) + "\n")
        atomic_write_text(tmp / MARKER, json.dumps(marker, indent=2) + "\n")
        atomic_write_text(tmp / "README.md", _readme(spec, out_dir))
    return {"path": str(out_dir), **marker}


DUMMY_ROUTING = (
    "MoE routing is not real either: the router's correction bias sends every token to the same top_k experts, so "
    "MoE kernels run a degenerate batch (throughput above one sequence is not the real model's, and an MoE backend "
    "comparison does not carry over to real weights)"
)


def _readme(spec: ShapeSpec, out_dir: Path) -> str:
    flags = " ".join(spec.serve_args)
    return (
        f"# {spec.name} ({spec.quantization}): a model shape without weights\n\n"
        f"config.json follows {spec.source}"
        + (f", with {json.dumps(spec.overrides)}" if spec.overrides else "")
        + ".\nThere are no weights: vLLM fills random ones, so throughput and latency are the model's and the"
        " text is noise" + (f". {DUMMY_ROUTING}" if biased_router(spec.config) else "") + ".\n\n"
        "Serve it with these flags (nemolaunch serve and bench --profile add them for this folder):\n\n"
        f"    vllm serve {out_dir} {flags}\n"
    )


def has_weights(folder: Path) -> bool:
    return any(next(folder.glob(p), None) is not None for p in WEIGHT_PATTERNS)


def _given(flag: str, args: list[str]) -> bool:
    return any(a == flag or a.startswith(flag + "=") for a in args)


def launch_args(model: str, args: list[str]) -> tuple[list[str], list[str]]:
    """The flags a weightless folder needs beyond `args`, and notes saying why. A shape folder gets its recorded
    flags (those the profile already sets are left to the profile); a local folder with a config.json and no weights
    that is not a shape is refused unless `args` choose a load format."""
    folder = Path(model).expanduser()
    if not folder.is_dir() or has_weights(folder):
        return [], []
    marker_path = folder / MARKER
    if marker_path.is_file():
        try:
            recorded = json.loads(marker_path.read_text())["serve_args"]
        except (OSError, ValueError, KeyError, TypeError):
            recorded = None
        if not (isinstance(recorded, list) and len(recorded) % 2 == 0 and all(isinstance(a, str) for a in recorded)):
            raise BadInput(
                f"{marker_path} has no readable serve_args", "write the folder again with `nemolaunch model shape`"
            )
        extra: list[str] = []
        for flag, value in zip(recorded[::2], recorded[1::2], strict=True):
            if not _given(flag, args):
                extra += [flag, value]
        note = f"{model} is a model shape without weights: vLLM serves random weights"
        return extra, [note + (f" (adding {' '.join(extra)})" if extra else "")]
    if (folder / "config.json").is_file() and not _given("--load-format", args):
        raise BadInput(
            f"{model} holds no weights (no *.safetensors or *.bin)",
            'to serve its shapes with random weights add "--load-format", "dummy" to the profile\'s extra_args, '
            "or write the folder with `nemolaunch model shape`",
        )
    return [], []
