"""What a probe measures for a model: its layer's shapes (from config.json), its quantization (the checkpoint's,
or vLLM's online quantization) and the chains it can use; without a model, every chain at a Llama-8B-like layer.
A NemotronH hybrid's GEMMs, experts and Mamba mixer come from launcher/probe/hybrid.py."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from checks.model_config import ConfigError, read_hf_quant_config, read_model_config
from launcher.errors import BadInput
from launcher.model import quant as storage
from launcher.probe import chains as chain_table
from launcher.probe import hybrid
from launcher.profiles.profile import ServingProfile

DECODE_M, PREFILL_M = (1, 16, 64, 256), (2048,)
# (N, K) of Llama-3-8B's o_proj, gate (or up) and down projections: the shapes of the H200 captures
DEFAULT_NK = ((4096, 4096), (14336, 4096), (4096, 14336))


@dataclass(frozen=True)
class Layer:
    """The layer whose shapes the probes time: a model's (from its config.json), or by default a Llama-8B-like
    layer, an 8-expert top-2 MoE with 2048-wide SiLU-gated experts and Nemotron 3 Nano's Mamba-2 mixer."""

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
    # a dense chain's own (N, K) where they differ from `dense` (a mixed-precision hybrid: each storage's GEMMs)
    dense_by_chain: dict[str, tuple[tuple[int, int], ...]] = field(default_factory=dict)
    moe_latent: int | None = None  # LatentMoE: the routed experts' width (their GEMMs' K), not hidden
    moe_activation: str = "silu"  # vLLM's MoEActivation: "silu" is gated (2N rows), "relu2_no_mul" is not
    mamba_heads: int = 64
    mamba_head_dim: int = 64
    mamba_state: int = 128
    mamba_groups: int = 8
    mamba_state_dtype: str = "float32"  # the SSM state cache's dtype (the model's mamba_ssm_cache_dtype)

    def for_child(self) -> dict[str, int | bool | str | None]:
        """What the harness's set-ups need besides the shapes (launcher/child/probe_kernels/inputs.py)."""
        keys = ("experts", "topk", "heads", "kv_heads", "head_dim", "static_activations", "moe_activation")
        mamba = ("mamba_heads", "mamba_head_dim", "mamba_state", "mamba_groups", "mamba_state_dtype")
        return {k: getattr(self, k) for k in (*keys, *mamba)}


def read_config(model: Path) -> dict[str, Any]:
    """A model's config.json, merged as every stage merges it (checks.model_config)."""
    try:
        return read_model_config(model)
    except ConfigError as e:
        raise BadInput(str(e), "give a model folder") from None


def model_layer(model: Path, online: str | None = None) -> Layer:
    """A model's layer from its config.json (text_config for multimodal models); MoE sizes only if it has experts.
    `online`: vLLM's --quantization of an unquantized checkpoint (a hybrid's GEMMs are grouped by storage)."""
    cfg = read_config(model)
    if hybrid.is_hybrid(cfg):
        return hybrid_layer(model, cfg, online)
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


def hybrid_layer(model: Path, cfg: dict[str, Any], online: str | None) -> Layer:
    """A NemotronH hybrid's layer: its GEMMs per storage (each dense chain its own), its routed experts (relu2,
    not gated; in the latent for LatentMoE), its attention and its Mamba mixer."""
    try:
        gemms = hybrid.hybrid_gemms(cfg, module_storage(model, cfg, online))
        heads, head_dim, state, groups = hybrid.mamba_dims(cfg)
        h, q_heads = int(cfg["hidden_size"]), int(cfg["num_attention_heads"])
        moe = int(cfg.get("moe_intermediate_size") or cfg["intermediate_size"])
        layer = Layer(
            dense=tuple(dict.fromkeys(nk for found in gemms.dense.values() for nk in found)),
            hidden=h,
            moe_intermediate=moe,
            experts=int(cfg.get("n_routed_experts") or 1),
            topk=int(cfg.get("num_experts_per_tok") or 1),
            heads=q_heads,
            kv_heads=int(cfg.get("num_key_value_heads") or q_heads),
            head_dim=int(cfg.get("head_dim") or h // q_heads),
            dense_by_chain={f"{s}_dense": tuple(gemms.dense[s]) for s in hybrid.STORAGES if s in gemms.dense},
            moe_latent=int(cfg["moe_latent_size"]) if cfg.get("moe_latent_size") else None,
            moe_activation="relu2_no_mul" if cfg.get("mlp_hidden_act", "relu2") == "relu2" else "silu",
            mamba_heads=heads,
            mamba_head_dim=head_dim,
            mamba_state=state,
            mamba_groups=groups,
            mamba_state_dtype=str(cfg.get("mamba_ssm_cache_dtype") or "float32"),
        )
    except (KeyError, ValueError, TypeError) as e:
        raise BadInput(f"cannot read layer shapes from {model}/config.json: {e!r}", "give a model folder") from None
    return layer


def module_storage(model: Path, cfg: dict[str, Any], online: str | None) -> storage.Quantization:
    """Each module's storage, read as vLLM reads it (launcher.model.quant); an unknown scheme is bad input."""
    try:
        return storage.read(cfg, read_hf_quant_config(model), online)
    except storage.UnknownQuantization as e:
        raise BadInput(f"{model}: {e}", "give a model folder whose quantization vLLM runs with FP8 or NVFP4") from None


def model_quantization(model: Path, online: str | None) -> chain_table.Quantization:
    """The checkpoint's quantization, or vLLM's online quantization of an unquantized one (--quantization, or a
    profile's). A checkpoint quantized one way cannot be served quantized another: that is bad input."""
    found = chain_table.checkpoint_quantization(read_config(model), read_hf_quant_config(model))
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
    cfg, found = read_config(model), model_quantization(model, quantization)
    if hybrid.is_hybrid(cfg):  # a quantized checkpoint's map wins over `quantization` (a conflict was said above)
        gemms = hybrid.hybrid_gemms(cfg, module_storage(model, cfg, quantization))
        return hybrid.hybrid_chains(cfg, gemms, found.where)
    return chain_table.select_chains(cfg, found)


def shapes_for(chain: str, layer: Layer) -> list[list[int]]:
    """[M, N, K] per probe. GEMMs: M tokens x (N, K) weights. MoE: M tokens, expert intermediate N, hidden (or
    latent) K. Attention: M sequences, N new query tokens each, K tokens of context (decode: N=1; prefill: N=K).
    Mamba: M sequences decoding one token each, N heads of K channels."""
    if chain.endswith("_moe"):
        return [[m, layer.moe_intermediate, layer.moe_latent or layer.hidden] for m in (16, 256, 2048)]
    if chain == "attention":
        return [[m, 1, 4096] for m in (1, 16, 64)] + [[1, 2048, 2048]]
    if chain == chain_table.MAMBA:
        return [[m, layer.mamba_heads, layer.mamba_head_dim] for m in DECODE_M]
    return [[m, n, k] for n, k in layer.dense_by_chain.get(chain, layer.dense) for m in DECODE_M + PREFILL_M]
