"""What a probe measures for a model: its layer's shapes (from config.json), its quantization (the checkpoint's,
or vLLM's online quantization) and the chains it can use; without a model, every chain at a Llama-8B-like layer."""

from __future__ import annotations

import contextlib
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from launcher.errors import BadInput
from launcher.probe import chains as chain_table
from launcher.profiles.profile import ServingProfile

DECODE_M, PREFILL_M = (1, 16, 64, 256), (2048,)
# (N, K) of Llama-3-8B's o_proj, gate (or up) and down projections: the shapes of the H200 captures
DEFAULT_NK = ((4096, 4096), (14336, 4096), (4096, 14336))


@dataclass(frozen=True)
class Layer:
    """The layer whose shapes the probes time: a model's (from its config.json), or by default a Llama-8B-like
    layer and an 8-expert top-2 MoE with 2048-wide experts."""

    # (N, K) of the dense GEMMs; from a model: qkv, gate_up (fused, as vLLM runs them) and down
    dense: tuple[tuple[int, int], ...] = DEFAULT_NK
    hidden: int = 4096
    moe_intermediate: int = 2048
    experts: int = 8
    topk: int = 2
    heads: int = 32
    kv_heads: int = 8
    head_dim: int = 128
    # the model's FP8 activation scales come from its checkpoint (None: no model; a kernel may assume either)
    static_activations: bool | None = None

    def for_child(self) -> dict[str, int | bool | None]:
        """What the harness's set-ups need besides the shapes (launcher/child/probe_kernels/inputs.py)."""
        keys = ("experts", "topk", "heads", "kv_heads", "head_dim", "static_activations")
        return {k: getattr(self, k) for k in keys}


def read_config(model: Path) -> dict[str, Any]:
    """A model's config.json (its text_config for multimodal models)."""
    try:
        cfg = json.loads((model / "config.json").read_text())
    except (OSError, json.JSONDecodeError) as e:
        raise BadInput(f"cannot read layer shapes from {model}/config.json: {e}", "give a model folder") from None
    if not isinstance(cfg, dict):
        raise BadInput(f"{model}/config.json is not a JSON object", "give a model folder")
    text = cfg.get("text_config")
    if isinstance(text, dict):  # the quantization of a multimodal model is kept at the top level
        return {**text, **{k: cfg[k] for k in ("quantization_config",) if k in cfg and k not in text}}
    return cfg


def model_layer(model: Path) -> Layer:
    """A model's layer from its config.json (text_config for multimodal models); MoE sizes only if it has experts."""
    cfg = read_config(model)
    try:
        h, heads = int(cfg["hidden_size"]), int(cfg["num_attention_heads"])
        kv = int(cfg.get("num_key_value_heads") or heads)
        head_dim = int(cfg.get("head_dim") or h // heads)
        inter = int(cfg.get("intermediate_size") or cfg["moe_intermediate_size"])
        experts = next((cfg[k] for k in chain_table.EXPERT_KEYS if cfg.get(k)), None)
        moe: dict[str, Any] = {}
        if experts:
            moe = {
                "experts": int(experts),
                "topk": int(cfg.get("num_experts_per_tok") or cfg.get("moe_topk") or cfg["top_k"]),
                "moe_intermediate": int(cfg.get("moe_intermediate_size") or inter),
            }
    except (KeyError, ValueError, TypeError) as e:
        raise BadInput(f"cannot read layer shapes from {model}/config.json: {e!r}", "give a model folder") from None
    dense = ((heads * head_dim + 2 * kv * head_dim, h), (2 * inter, h), (h, inter))
    return Layer(dense=dense, hidden=h, heads=heads, kv_heads=kv, head_dim=head_dim, **moe)


def model_quantization(model: Path, online: str | None) -> chain_table.Quantization:
    """The checkpoint's quantization, or vLLM's online quantization of an unquantized one (--quantization, or a
    profile's). A checkpoint quantized one way cannot be served quantized another: that is bad input."""
    hf_quant: dict[str, Any] | None = None
    with contextlib.suppress(OSError, json.JSONDecodeError):
        hf_quant = json.loads((model / "hf_quant_config.json").read_text())
    found = chain_table.checkpoint_quantization(read_config(model), hf_quant if isinstance(hf_quant, dict) else None)
    if online is None:
        return found
    asked = chain_table.online_quantization(online, f"--quantization {online}")
    if found.kind is not None and found.kind != asked.kind:
        raise BadInput(
            f"{model} is quantized as {found.kind} ({found.where}); --quantization {online} does not apply to it",
            "leave --quantization out for a quantized checkpoint",
        )
    return found if found.kind is not None else asked


def profile_quantization(profile: ServingProfile) -> str | None:
    """The online quantization a profile asks vLLM for: a `quantization` setting, or --quantization/-q in its
    extra_args."""
    if profile.settings.get("quantization"):
        return str(profile.settings["quantization"])
    args = [str(a) for a in profile.settings.get("extra_args", [])]
    for i, arg in enumerate(args):
        if arg.startswith("--quantization="):
            return arg.split("=", 1)[1]
        if arg in ("--quantization", "-q") and i + 1 < len(args):
            return args[i + 1]
    return None


def chains_for(model: Path | None, quantization: str | None, every: bool) -> chain_table.ChainSelection:
    """What to probe: with a model (and not --all), the chains it can use; otherwise every chain."""
    if model is None or every:
        return chain_table.all_chains()
    return chain_table.select_chains(read_config(model), model_quantization(model, quantization))


def shapes_for(chain: str, layer: Layer) -> list[list[int]]:
    """[M, N, K] per probe. GEMMs: M tokens x (N, K) weights. MoE: M tokens, expert intermediate N, hidden K.
    Attention: M sequences, N new query tokens each, K tokens of context (decode: N=1; prefill: N=K)."""
    if chain.endswith("_moe"):
        return [[m, layer.moe_intermediate, layer.hidden] for m in (16, 256, 2048)]
    if chain == "attention":
        return [[m, 1, 4096] for m in (1, 16, 64)] + [[1, 2048, 2048]]
    return [[m, n, k] for n, k in layer.dense for m in DECODE_M + PREFILL_M]
