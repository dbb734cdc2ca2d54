"""A NemotronH hybrid as the probe sees it (vLLM's NemotronHForCausalLM, read against vLLM 0.26's
model_executor/models/nemotron_h.py and layers/mamba/mamba_mixer2.py): each layer's linear GEMMs, fused as vLLM
fuses them, with the storage the checkpoint gives each module (launcher.model.quant); the routed experts; the Mamba
mixer. `hybrid_override_pattern` names each layer's mixer: M Mamba-2, E MoE, * attention, - MLP.

Per layer kind, the GEMMs vLLM runs (N x K, as the weight is out x in):
  M  in_proj (one GEMM: z, x, B, C and dt: 2 x d_inner + 2 x n_groups x state + heads) and out_proj (d_inner in)
  E  the shared expert's up_proj and down_proj (relu2, not gated); LatentMoE's fc1_latent_proj (hidden -> latent)
     and fc2_latent_proj (latent -> hidden); the routed experts run in the latent (the MoE chain, not here)
  *  qkv_proj (q_proj, k_proj and v_proj fused) and o_proj
  -  up_proj and down_proj
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from launcher.model.quant import Quantization
from launcher.probe.chains import CHAINS, MAMBA, MOE_CHAINS, ChainSelection

STORAGES = ("fp8", "nvfp4")  # the storages a dense chain of the probe runs


@dataclass(frozen=True)
class HybridGemms:
    """What a hybrid's checkpoint stores how: per storage, the (N, K) of its GEMMs and the module classes behind
    them; the routed experts' storage (None: the model has no routed experts)."""

    dense: dict[str, dict[tuple[int, int], list[str]]] = field(default_factory=dict)
    experts: str | None = None


def is_hybrid(config: dict[str, Any]) -> bool:
    return isinstance(config.get("hybrid_override_pattern"), str)


def mamba_dims(config: dict[str, Any]) -> tuple[int, int, int, int]:
    """(heads, head_dim, state size, groups) of the Mamba-2 mixer."""
    return (
        int(config["mamba_num_heads"]),
        int(config["mamba_head_dim"]),
        int(config["ssm_state_size"]),
        int(config["n_groups"]),
    )


def _gemms(config: dict[str, Any], kind: str) -> list[tuple[str, tuple[int, int]]]:
    """(the checkpoint's module that names the GEMM's storage, (N, K)) for one layer of `kind`."""
    h = int(config["hidden_size"])
    if kind == "M":
        heads, head_dim, state, groups = mamba_dims(config)
        inner = heads * head_dim
        return [("in_proj", (2 * inner + 2 * groups * state + heads, h)), ("out_proj", (h, inner))]
    if kind == "*":
        heads, kv = int(config["num_attention_heads"]), int(config["num_key_value_heads"])
        head_dim = int(config.get("head_dim") or h // heads)
        return [("q_proj", ((heads + 2 * kv) * head_dim, h)), ("o_proj", (h, heads * head_dim))]
    if kind == "E":
        shared = int(config.get("moe_shared_expert_intermediate_size") or 0)
        latent = config.get("moe_latent_size")
        found = [("shared_experts.up_proj", (shared, h)), ("shared_experts.down_proj", (h, shared))] if shared else []
        if latent:
            found += [("fc1_latent_proj", (int(latent), h)), ("fc2_latent_proj", (h, int(latent)))]
        return found
    if kind == "-":
        inter = int(config["intermediate_size"])
        return [("up_proj", (inter, h)), ("down_proj", (h, inter))]
    return []


def hybrid_gemms(config: dict[str, Any], quant: Quantization) -> HybridGemms:
    """Every layer's GEMMs by the storage the checkpoint gives their module (the first layer of a class sets the
    order), and the routed experts' storage (expert 0's up_proj of the first MoE layer: a checkpoint quantizes
    every routed expert alike)."""
    dense: dict[str, dict[tuple[int, int], list[str]]] = {}
    experts: str | None = None
    for layer, kind in enumerate(config["hybrid_override_pattern"]):
        for leaf, nk in _gemms(config, kind):
            storage = quant.dtype_of(f"backbone.layers.{layer}.mixer.{leaf}")
            classes = dense.setdefault(storage, {}).setdefault(nk, [])
            name = leaf.replace("q_proj", "qkv_proj")
            if name not in classes:
                classes.append(name)
        if kind == "E" and experts is None and config.get("n_routed_experts"):
            experts = quant.dtype_of(f"backbone.layers.{layer}.mixer.experts.0.up_proj")
    return HybridGemms(dense, experts)


def hybrid_chains(config: dict[str, Any], gemms: HybridGemms, where: str) -> ChainSelection:
    """The chains a hybrid uses: attention and Mamba where its pattern has such layers, a dense chain per storage
    its GEMMs carry (several for a mixed-precision checkpoint), the MoE chain of its routed experts' storage."""
    pattern = config["hybrid_override_pattern"]
    selection = ChainSelection()
    if "*" in pattern:
        selection.chains["attention"] = f"{pattern.count('*')} attention layers"
    if "M" in pattern:
        selection.chains[MAMBA] = (
            f"{pattern.count('M')} Mamba-2 layers: vLLM's --mamba-backend picks their decode kernel (selective "
            "state update)"
        )
    for storage in STORAGES:
        classes = sorted({c for names in gemms.dense.get(storage, {}).values() for c in names})
        if classes:
            selection.chains[f"{storage}_dense"] = f"{storage.upper()} GEMMs ({', '.join(classes)}) ({where})"
    if gemms.experts in STORAGES:
        latent = config.get("moe_latent_size")
        selection.chains[f"{gemms.experts}_moe"] = (
            f"{gemms.experts.upper()} routed experts ({where}), {config['n_routed_experts']} experts, top-"
            f"{config['num_experts_per_tok']}" + (f", in a {latent}-wide latent" if latent else "")
        )
    for chain in CHAINS:
        if chain in selection.chains:
            continue
        storage = chain.split("_")[0]
        if chain == MAMBA or chain == "attention":
            selection.left_out[chain] = f"the model has no {'Mamba' if chain == MAMBA else 'attention'} layers"
        elif chain in MOE_CHAINS:
            selection.left_out[chain] = (
                f"the routed experts are {gemms.experts}, not {storage.upper()} ({where})"
                if gemms.experts
                else "the model has no routed experts"
            )
        else:
            selection.left_out[chain] = f"no {storage.upper()} GEMMs in this checkpoint ({where})"
    return selection
