"""What one decode step reads from GPU memory: a model's weights by module, its KV cache and, for a hybrid
(NemotronH), its Mamba-2 state.

A model is a list of weight modules named as in its checkpoint (backbone.layers.3.mixer.in_proj, lm_head), so a
quantization that differs per module (ModelOpt MIXED_PRECISION) prices each one: `Quantization.dtype_of(name)`.
Per decode step at concurrency c and mean context L:

    weights: every dense module once (attention, Mamba in/out projections, dense MLPs, shared experts, LatentMoE's
             latent projections, the router, the lm_head) + each MoE layer's distinct routed experts once
    KV:      c x L x (K and V of every full-attention layer), at the KV cache's dtype
    Mamba:   c x (SSM state + conv state) of every Mamba layer, read and written back (x2) every step

Norms, biases, Mamba's A/D/dt_bias and the conv1d weights (4 taps per channel) are left out: under 0.1% of the
bytes. A Multi-Token-Prediction head (Super's `num_nextn_predict_layers`) runs only with speculative decoding, which
nemolaunch does not turn on: it is left out too.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from checks.model_config import merged
from checks.seqmem import sequence_memory
from launcher.model import nemotron
from launcher.model.quant import Quantization

# Bytes per weight parameter, scales included: NVFP4 is 4 bits plus one FP8 scale per 16 values (0.5 + 1/16);
# MXFP4 one E8M0 scale per 32 (0.5 + 1/32); INT4 with a 16-bit scale per group of 128. FP8's per-tensor scale is
# one float per matrix (nothing per parameter).
BYTES_PER_PARAM = {
    "fp32": 4.0,
    "bf16": 2.0,
    "fp16": 2.0,
    "fp8": 1.0,
    "int8": 1.0,
    "nvfp4": 0.5625,
    "mxfp4": 0.53125,
    "int4": 0.5 + 2 / 128,
}
_STATE_DTYPES = {"float32": "fp32", "fp32": "fp32", "bfloat16": "bf16", "bf16": "bf16", "float16": "fp16"}
_STATE_DTYPES |= {"fp16": "fp16", "half": "fp16"}

# How a module is read per step: "dense" once (quantizable), "expert" once per distinct routed expert
# (quantizable), "base" once in the base dtype whatever the quantization (lm_head, router, as vLLM keeps them),
# "embed" not read (c rows gathered; counted in the totals only).
ROLES = ("dense", "expert", "base", "embed")


class RooflineError(ValueError):
    """The model's config can not be turned into a traffic model (a field missing, an unknown quantization)."""


@dataclass(frozen=True)
class Module:
    name: str  # as in the checkpoint; a routed expert's is expert 0's (every expert has the same storage)
    params: int
    role: str


@dataclass(frozen=True)
class ModelTraffic:
    """A decoder's weights by module, its KV elements per token and its Mamba state elements per sequence."""

    layers: int
    modules: tuple[Module, ...]
    moe_layers: int = 0
    experts: int = 0
    top_k: int = 0
    kv_per_token: int = 0  # KV elements per token of context, all full-attention layers
    window_kv_per_token: int = 0  # of those, on layers with a sliding window
    sliding_window: int | None = None
    mamba_layers: int = 0
    conv_state_per_seq: int = 0  # elements, all Mamba layers: conv_dim x (conv_kernel - 1)
    ssm_state_per_seq: int = 0  # elements, all Mamba layers: heads x head_dim x state_size
    ssm_state_dtype: str = "fp32"  # the config's mamba_ssm_cache_dtype (vLLM's default for NemotronH)
    biased_router: bool = False  # experts chosen on sigmoid scores plus a learned correction bias (NemotronH)

    def _sum(self, *roles: str) -> int:
        return sum(m.params for m in self.modules if m.role in roles)

    @property
    def dense_params(self) -> int:
        return self._sum("dense")

    @property
    def head_params(self) -> int:
        return sum(m.params for m in self.modules if m.name == "lm_head")

    @property
    def embed_params(self) -> int:
        return self._sum("embed")

    @property
    def expert_params(self) -> int:
        """All matrices of one routed expert, summed over the MoE layers."""
        return self._sum("expert")

    @property
    def total_params(self) -> int:
        return self._sum("dense", "base", "embed") + self.experts * self.expert_params

    @property
    def active_params(self) -> int:
        """Read per token: every dense weight, the lm_head and router, and top-k experts per MoE layer."""
        return self._sum("dense", "base") + self.top_k * self.expert_params


def _int(config: dict[str, Any], *keys: str, default: int | None = None) -> int:
    for key in keys:
        value = config.get(key)
        if isinstance(value, int) and not isinstance(value, bool):
            return value
    if default is not None:
        return default
    raise RooflineError(f"config.json has no {' or '.join(keys)}")


def model_traffic(config: dict[str, Any]) -> ModelTraffic:
    """From a Hugging Face config.json: a NemotronH hybrid (hybrid_override_pattern), or a Llama/Qwen/Mixtral-style
    decoder (gated MLPs, GQA attention)."""
    config = merged(config)
    if "kv_lora_rank" in config:
        raise RooflineError("multi-head latent attention (DeepSeek-style) is not modelled")
    if "hybrid_override_pattern" in config:
        return _nemotron_h(config)
    return _decoder(config)


def _attention(config: dict[str, Any], prefix: str) -> tuple[list[Module], int]:
    hidden = _int(config, "hidden_size")
    heads = _int(config, "num_attention_heads")
    kv_heads = _int(config, "num_key_value_heads", default=heads)
    head_dim = _int(config, "head_dim", default=hidden // heads)
    q, kv = heads * head_dim, kv_heads * head_dim
    mods = [
        Module(f"{prefix}.q_proj", hidden * q, "dense"),
        Module(f"{prefix}.k_proj", hidden * kv, "dense"),
        Module(f"{prefix}.v_proj", hidden * kv, "dense"),
        Module(f"{prefix}.o_proj", q * hidden, "dense"),
    ]
    return mods, 2 * kv


def _ends(config: dict[str, Any], embed_name: str) -> list[Module]:
    hidden, vocab = _int(config, "hidden_size"), _int(config, "vocab_size")
    head = [Module("lm_head", hidden * vocab, "base")]
    return head if config.get("tie_word_embeddings") else [*head, Module(embed_name, hidden * vocab, "embed")]


def _decoder(config: dict[str, Any]) -> ModelTraffic:
    hidden = _int(config, "hidden_size")
    layers = _int(config, "num_hidden_layers")
    experts = _int(config, "num_experts", "num_local_experts", "n_routed_experts", default=0)
    top_k = _int(config, "num_experts_per_tok", "moe_topk") if experts else 0
    step = _int(config, "decoder_sparse_step", default=1) or 1
    dense_only = set(config.get("mlp_only_layers") or [])
    modules: list[Module] = []
    moe_layers = kv_layer = 0
    for i in range(layers):
        attn, kv_layer = _attention(config, f"model.layers.{i}.self_attn")
        modules += attn
        mlp = f"model.layers.{i}.mlp"
        if experts and i not in dense_only and (i + 1) % step == 0:
            moe_layers += 1
            moe_inter = _int(config, "moe_intermediate_size", "intermediate_size")
            modules.append(Module(f"{mlp}.experts.0", 3 * hidden * moe_inter, "expert"))
            shared = _int(config, "shared_expert_intermediate_size", default=0)
            if shared:
                modules.append(Module(f"{mlp}.shared_expert", 3 * hidden * shared, "dense"))
            modules.append(Module(f"{mlp}.gate", hidden * experts, "base"))
        else:
            modules.append(Module(mlp, 3 * hidden * _int(config, "intermediate_size"), "dense"))
    window = config.get("sliding_window") if config.get("use_sliding_window", True) is not False else None
    return ModelTraffic(
        layers=layers,
        modules=(*modules, *_ends(config, "model.embed_tokens")),
        moe_layers=moe_layers,
        experts=experts,
        top_k=top_k,
        kv_per_token=0 if window else layers * kv_layer,
        window_kv_per_token=layers * kv_layer if window else 0,
        sliding_window=window if isinstance(window, int) else None,
    )


def _nemotron_h(config: dict[str, Any]) -> ModelTraffic:
    """NemotronH as vLLM 0.26 builds it (vllm/model_executor/models/nemotron_h.py): per `hybrid_override_pattern`
    character, M a MambaMixer2 (in_proj to 2 x d_inner + 2 x n_groups x state + heads, out_proj from d_inner), *
    attention (q/k/v/o), E an MoE (router; routed experts with up_proj and down_proj (relu2, no gate) in the
    moe_latent_size-wide latent when there is one, else in hidden; shared experts; fc1/fc2 latent projections),
    - a dense relu2 MLP."""
    pattern = str(config["hybrid_override_pattern"])
    hidden = _int(config, "hidden_size")
    heads, head_dim = _int(config, "mamba_num_heads"), _int(config, "mamba_head_dim")
    groups, state = _int(config, "n_groups", default=8), _int(config, "ssm_state_size")
    d_inner = heads * head_dim
    experts = _int(config, "n_routed_experts", default=0)
    latent = config.get("moe_latent_size")
    moe_hidden = latent if isinstance(latent, int) else hidden
    moe_inter = _int(config, "moe_intermediate_size", default=0)
    shared = _int(config, "moe_shared_expert_intermediate_size", default=0) * _int(
        config, "n_shared_experts", default=1
    )
    modules: list[Module] = []
    for i, kind in enumerate(pattern):
        p = f"backbone.layers.{i}.mixer"
        if kind == "M":
            modules.append(Module(f"{p}.in_proj", hidden * (2 * d_inner + 2 * groups * state + heads), "dense"))
            modules.append(Module(f"{p}.out_proj", d_inner * hidden, "dense"))
        elif kind == "*":
            modules += _attention(config, p)[0]
        elif kind == "E":
            modules.append(Module(f"{p}.gate", hidden * experts, "base"))
            modules.append(Module(f"{p}.experts.0.up_proj", moe_hidden * moe_inter, "expert"))
            modules.append(Module(f"{p}.experts.0.down_proj", moe_inter * moe_hidden, "expert"))
            if shared:
                modules.append(Module(f"{p}.shared_experts.up_proj", hidden * shared, "dense"))
                modules.append(Module(f"{p}.shared_experts.down_proj", shared * hidden, "dense"))
            if isinstance(latent, int):
                modules.append(Module(f"{p}.fc1_latent_proj", hidden * latent, "dense"))
                modules.append(Module(f"{p}.fc2_latent_proj", latent * hidden, "dense"))
        elif kind == "-":
            inter = _int(config, "intermediate_size")
            modules += [
                Module(f"{p}.up_proj", hidden * inter, "dense"),
                Module(f"{p}.down_proj", inter * hidden, "dense"),
            ]
        else:
            raise RooflineError(f"hybrid_override_pattern has an unknown layer kind {kind!r}")
    seq = sequence_memory(config)
    assert seq is not None  # hidden_size and num_attention_heads were read above
    return ModelTraffic(
        layers=len(pattern),
        modules=(*modules, *_ends(config, "backbone.embeddings")),
        moe_layers=pattern.count("E"),
        experts=experts if pattern.count("E") else 0,
        top_k=_int(config, "num_experts_per_tok") if experts and "E" in pattern else 0,
        kv_per_token=seq.kv_elements_per_token,
        mamba_layers=seq.mamba_layers,
        conv_state_per_seq=seq.conv_state_elements,
        ssm_state_per_seq=seq.ssm_state_elements,
        ssm_state_dtype=_STATE_DTYPES.get(seq.ssm_state_dtype, "fp32"),
        biased_router=nemotron.biased_router(config),
    )


def routed_experts(traffic: ModelTraffic, tokens: float, dummy_weights: bool = False) -> float:
    """Distinct routed experts one MoE layer reads for `tokens` tokens. With real weights, routing taken as uniform.
    With vLLM's dummy weights a biased router sends every token to the same top_k experts
    (`launcher.model.nemotron.biased_router`: 22.0-25.7 of Super's 512 at c=1-64, Nano 6.0-6.8 of 128; a softmax
    router without a bias stays uniform). Taken as top_k: at most ~2% of Super's step bytes low."""
    if dummy_weights and traffic.biased_router:
        return float(traffic.top_k)
    return expected_distinct_experts(traffic.experts, traffic.top_k, tokens)


def expected_distinct_experts(experts: int, top_k: int, tokens: float) -> float:
    """Experts of one layer that at least one of `tokens` is routed to, when each token picks top_k of the experts
    uniformly: E x (1 - (1 - k/E)^tokens). It is k at one token and approaches E as the batch grows."""
    if not experts:
        return 0.0
    return experts * (1.0 - float((1.0 - top_k / experts) ** tokens))


@dataclass(frozen=True)
class StepBytes:
    weights: float
    kv: float
    distinct_experts: float | None
    mamba: float = 0.0  # Mamba state read and written back

    @property
    def total(self) -> float:
        return self.weights + self.kv + self.mamba


def state_dtype(flag: str | None, default: str) -> str:
    """A --mamba-cache-dtype / --mamba-ssm-cache-dtype value ("auto" or absent: `default`) as a BYTES_PER_PARAM key."""
    return default if not flag or flag == "auto" else _STATE_DTYPES.get(flag, default)


def mamba_state_bytes(traffic: ModelTraffic, conv_dtype: str = "bf16", ssm_dtype: str | None = None) -> float:
    """One sequence's Mamba state (conv + SSM, all Mamba layers): what it holds in memory whatever its length."""
    ssm = BYTES_PER_PARAM[ssm_dtype or traffic.ssm_state_dtype]
    return traffic.conv_state_per_seq * BYTES_PER_PARAM[conv_dtype] + traffic.ssm_state_per_seq * ssm


def step_bytes(
    traffic: ModelTraffic,
    concurrency: float,
    context_len: float,
    weight_dtype: str | Quantization = "bf16",
    kv_dtype: str = "bf16",
    base_dtype: str = "bf16",
    conv_dtype: str | None = None,
    ssm_dtype: str | None = None,
    dummy_weights: bool = False,
) -> StepBytes:
    """Bytes one decode step moves at `concurrency` sequences of `context_len` tokens each. `weight_dtype` is one
    storage for every quantizable module, or a checkpoint's Quantization (per module); the lm_head and the router
    stay in the base dtype (as vLLM's online FP8 and NVIDIA's checkpoints keep them). The conv state's dtype is the
    base dtype unless given (vLLM's --mamba-cache-dtype auto). `dummy_weights`: served with --load-format dummy
    (routed_experts says what that does to a biased router)."""
    quant = (
        weight_dtype
        if isinstance(weight_dtype, Quantization)
        else Quantization(weight_dtype, "", weight_dtype, base_dtype)
    )
    base, kv = BYTES_PER_PARAM[quant.base], BYTES_PER_PARAM[kv_dtype]
    distinct = routed_experts(traffic, concurrency, dummy_weights) if traffic.experts else None
    weights = 0.0
    for m in traffic.modules:
        if m.role == "base":
            weights += base * m.params
        elif m.role == "dense":
            weights += BYTES_PER_PARAM[quant.dtype_of(m.name)] * m.params
        elif m.role == "expert":
            weights += (distinct or 0.0) * BYTES_PER_PARAM[quant.dtype_of(m.name)] * m.params
    windowed = min(context_len, traffic.sliding_window) if traffic.sliding_window else context_len
    kv_bytes = concurrency * kv * (traffic.kv_per_token * context_len + traffic.window_kv_per_token * windowed)
    mamba = 2 * concurrency * mamba_state_bytes(traffic, conv_dtype or quant.base, ssm_dtype)
    return StepBytes(weights, kv_bytes, distinct, mamba)
