"""NVIDIA Nemotron 3 Super 120B-A12B and Nano 30B-A3B: config.json as published and their NVFP4 releases'
quantization files, for `nemolaunch model shape`.

Both are NemotronH hybrids (vLLM's NemotronHForCausalLM): `hybrid_override_pattern` gives each layer's mixer, M for
a Mamba-2 mixer, E for an MoE (relu2 experts with up_proj and down_proj, one shared expert), * for GQA attention
without rotary embedding. Super's MoE is LatentMoE: the routed experts run in a 1024-wide latent between
`fc1_latent_proj` (hidden -> latent) and `fc2_latent_proj` (latent -> hidden).

The configs follow the model cards' config.json at the commits named in SOURCES, field for field, less `auto_map`
(a shape folder has no configuration_nemotron_h.py; vLLM uses its own NemotronHConfig, and a profile with
trust_remote_code would otherwise look for the file). Super's NVFP4 release names its 41,100 quantized modules one
by one in config.json's quantization_config (and again in hf_quant_config.json); the per-class layer lists below
rebuild that map: every routed expert NVFP4 (group 16), 139 FP8 matrices, layer 1's shared down_proj NVFP4, the
rest (attention q/k/v, the remaining Mamba projections and shared experts, every conv1d, the router, lm_head) BF16.
Nano's NVFP4 release keeps config.json unquantized and carries hf_quant_config.json: NVFP4 everywhere except the
lm_head, every attention layer's projections, the Mamba layer in front of each attention layer and every conv1d.
"""

from __future__ import annotations

from typing import Any

SUPER = "nemotron-3-super-120b-a12b"
NANO = "nemotron-3-nano-30b-a3b"
SOURCES = {
    SUPER: "https://huggingface.co/nvidia/NVIDIA-Nemotron-3-Super-120B-A12B-NVFP4/blob/4f0cf9da/config.json",
    NANO: "https://huggingface.co/nvidia/NVIDIA-Nemotron-3-Nano-30B-A3B-NVFP4/blob/6efb4a2a/config.json",
}

# The fields both configs share, as published.
_COMMON: dict[str, Any] = {
    "architectures": ["NemotronHForCausalLM"],
    "model_type": "nemotron_h",
    "attention_bias": False,
    "attention_dropout": 0.0,
    "bos_token_id": 1,
    "chunk_size": 128,
    "conv_kernel": 4,
    "eos_token_id": 2,
    "expand": 2,
    "head_dim": 128,
    "hidden_dropout": 0.0,
    "initializer_range": 0.02,
    "layer_norm_epsilon": 1e-05,
    "mamba_head_dim": 64,
    "mamba_hidden_act": "silu",
    "mamba_proj_bias": False,
    "mamba_ssm_cache_dtype": "float32",
    "max_position_embeddings": 262144,
    "mlp_bias": False,
    "mlp_hidden_act": "relu2",
    "n_group": 1,
    "n_groups": 8,
    "n_shared_experts": 1,
    "norm_eps": 1e-05,
    "norm_topk_prob": True,
    "num_attention_heads": 32,
    "num_key_value_heads": 2,
    "num_logits_to_keep": 1,
    "pad_token_id": 0,
    "partial_rotary_factor": 1.0,
    "rescale_prenorm_residual": True,
    "residual_in_fp32": False,
    "rope_theta": 10000,
    "sliding_window": None,
    "ssm_state_size": 128,
    "tie_word_embeddings": False,
    "time_step_floor": 0.0001,
    "time_step_max": 0.1,
    "time_step_min": 0.001,
    "topk_group": 1,
    "use_bias": False,
    "use_cache": True,
    "use_conv_bias": True,
    "use_mamba_kernels": True,
    "vocab_size": 131072,
}

SUPER_CONFIG: dict[str, Any] = {
    **_COMMON,
    "dtype": "bfloat16",
    "hidden_size": 4096,
    "hybrid_override_pattern": (
        "MEMEMEM*EMEMEMEM*EMEMEMEM*EMEMEMEMEM*EMEMEMEMEM*EMEMEMEMEM*EMEMEMEMEM*EMEMEMEM*EMEMEMEME"
    ),
    "intermediate_size": 2688,
    "mamba_num_heads": 128,
    "moe_intermediate_size": 2688,
    "moe_latent_size": 1024,
    "moe_shared_expert_intermediate_size": 5376,
    "moe_shared_expert_overlap": False,
    "mtp_hybrid_override_pattern": "*E",
    "n_routed_experts": 512,
    "num_experts_per_tok": 22,
    "num_hidden_layers": 88,
    "num_nextn_predict_layers": 1,
    "routed_scaling_factor": 5.0,
    "transformers_version": "4.57.6",
}

NANO_CONFIG: dict[str, Any] = {
    **_COMMON,
    "torch_dtype": "bfloat16",
    "hidden_size": 2688,
    "hybrid_override_pattern": "MEMEM*EMEMEM*EMEMEM*EMEMEM*EMEMEM*EMEMEMEM*EMEMEMEME",
    "intermediate_size": 1856,
    "mamba_num_heads": 64,
    "moe_intermediate_size": 1856,
    "moe_shared_expert_intermediate_size": 3712,
    "n_routed_experts": 128,
    "num_experts_per_tok": 6,
    "num_hidden_layers": 52,
    "routed_scaling_factor": 2.5,
    "transformers_version": "4.53.2",
}

# Super's NVFP4 release, module class -> the layers where that module is per-tensor FP8 (all others of the class
# are BF16). The routed experts of all 40 MoE layers are NVFP4, and so is layer 1's shared down_proj.
SUPER_FP8_LAYERS: dict[str, tuple[int, ...]] = {
    "in_proj": (
        0,
        2,
        4,
        6,
        9,
        11,
        13,
        15,
        18,
        20,
        27,
        29,
        31,
        40,
        49,
        51,
        53,
        55,
        57,
        60,
        62,
        66,
        68,
        71,
        73,
        82,
        84,
        86,
    ),
    "out_proj": (
        *(0, 2, 4, 9, 11, 13, 18, 38, 40, 42, 44, 49, 51, 53, 55, 57, 60, 62, 64, 66, 68, 71, 73, 75, 77, 80, 82),
        *(84, 86),
    ),
    "shared_experts.up_proj": (
        *(1, 3, 5, 8, 10, 12, 14, 17, 19, 21, 23, 26, 28, 30, 32, 34, 37, 39, 43, 45, 48, 50, 52, 54, 56, 59, 61),
        *(63, 65, 67, 70, 72, 74, 76, 79, 81, 83, 85, 87),
    ),
    "shared_experts.down_proj": (
        *(3, 5, 10, 12, 14, 17, 19, 21, 23, 26, 28, 30, 32, 34, 37, 39, 41, 43, 45, 48, 50, 52, 54, 56, 59, 61, 63),
        *(65, 67, 70, 72, 74, 79, 81, 83, 85, 87),
    ),
    "fc1_latent_proj": (1, 3, 5),
    "fc2_latent_proj": (3,),
    "o_proj": (69, 78),
}
SUPER_NVFP4_SHARED_DOWN_LAYER = 1
_NVFP4 = {"quant_algo": "NVFP4", "group_size": 16}
_FP8 = {"quant_algo": "FP8"}
_SUPER_PRODUCER = {"name": "modelopt", "version": "0.43.0.dev63+g449e700f9"}


def biased_router(config: dict[str, Any]) -> bool:
    """vLLM builds a NemotronH MoE layer's router on sigmoid scores plus a learned e_score_correction_bias. With
    vLLM's dummy weights (every parameter uniform in +-1e-3) the bias alone ranks the experts, the scores' spread
    across tokens being ~100x smaller, so every token goes to the same top_k experts: vLLM's own grouped_topk on
    such weights reads 22.0-25.7 of Super's 512 at c=1-64, where uniform routing reads up to 481
    (`benchmarks/dummy_routing.py`). MoE kernels served so run a degenerate batch: its speed does not carry over to
    real weights."""
    pattern = str(config.get("hybrid_override_pattern") or "")
    return "E" in pattern and bool(config.get("n_routed_experts"))


def layers_of(pattern: str, kind: str) -> list[int]:
    """The indices of `hybrid_override_pattern`'s layers of one kind (M, E, * or -)."""
    return [i for i, c in enumerate(pattern) if c == kind]


def _module(layer: int, leaf: str) -> str:
    return f"backbone.layers.{layer}.mixer.{leaf}"


def super_quantized_layers(config: dict[str, Any] = SUPER_CONFIG) -> dict[str, dict[str, Any]]:
    """Super's `quantized_layers` map (module name -> its quant_algo), in the release's order: the FP8 classes, the
    NVFP4 shared down_proj, then every routed expert's up_proj and down_proj (one entry per expert). The expert
    entries follow `config` so a scaled-down Super (fewer layers or experts) gets a map that matches it."""
    layers = len(config["hybrid_override_pattern"])
    out: dict[str, dict[str, Any]] = {}
    for leaf, fp8_layers in SUPER_FP8_LAYERS.items():
        for layer in fp8_layers:
            if layer < layers:
                out[_module(layer, leaf)] = dict(_FP8)
    if layers > SUPER_NVFP4_SHARED_DOWN_LAYER:
        out[_module(SUPER_NVFP4_SHARED_DOWN_LAYER, "shared_experts.down_proj")] = dict(_NVFP4)
    for layer in layers_of(config["hybrid_override_pattern"], "E"):
        for expert in range(config["n_routed_experts"]):
            for leaf in ("up_proj", "down_proj"):
                out[_module(layer, f"experts.{expert}.{leaf}")] = dict(_NVFP4)
    return out


def super_quantization_config(config: dict[str, Any] = SUPER_CONFIG) -> dict[str, Any]:
    """config.json's quantization_config as the release writes it: two config_groups that list the FP8 and the
    NVFP4 modules as targets, the same map as `quantized_layers`, an FP8 KV cache."""
    layers = super_quantized_layers(config)
    fp8 = [name for name, q in layers.items() if q["quant_algo"] == "FP8"]
    fp4 = [name for name, q in layers.items() if q["quant_algo"] == "NVFP4"]
    float8 = {"dynamic": False, "num_bits": 8, "type": "float"}
    float4 = {"dynamic": False, "num_bits": 4, "type": "float", "group_size": 16}
    return {
        "config_groups": {
            "group_0": {"input_activations": float8, "weights": float8, "targets": fp8},
            "group_1": {"input_activations": float4, "weights": float4, "targets": fp4},
        },
        "quantized_layers": layers,
        "ignore": [],
        "quant_algo": "MIXED_PRECISION",
        "kv_cache_scheme": float8,
        "producer": _SUPER_PRODUCER,
        "quant_method": "modelopt",
    }


def super_hf_quant_config(config: dict[str, Any] = SUPER_CONFIG) -> dict[str, Any]:
    """Super's hf_quant_config.json: the same map a second time (vLLM reads config.json's when both exist)."""
    return {
        "producer": _SUPER_PRODUCER,
        "quantization": {
            "quant_algo": "MIXED_PRECISION",
            "kv_cache_quant_algo": "FP8",
            "quantized_layers": super_quantized_layers(config),
        },
    }


def nano_hf_quant_config(config: dict[str, Any] = NANO_CONFIG) -> dict[str, Any]:
    """Nano's hf_quant_config.json: NVFP4 (group 16) and an FP8 KV cache, excluding the lm_head, every attention
    layer's q/k/v/o, the Mamba layer in front of each attention layer and every Mamba conv1d, in the release's
    order (the attention layers' exclusions first, then the convolutions)."""
    pattern = config["hybrid_override_pattern"]
    exclude = ["lm_head"]
    for layer in layers_of(pattern, "*"):
        before = [i for i in layers_of(pattern, "M") if i < layer]
        if before:
            exclude += [_module(before[-1], "in_proj"), _module(before[-1], "out_proj")]
        exclude += [_module(layer, f"{p}_proj") for p in ("q", "k", "v", "o")]
    exclude += [_module(layer, "conv1d") for layer in layers_of(pattern, "M")]
    return {
        "producer": {"name": "modelopt", "version": "0.29.0"},
        "quantization": {
            "quant_algo": "NVFP4",
            "kv_cache_quant_algo": "FP8",
            "group_size": 16,
            "exclude_modules": exclude,
        },
    }


def super_nvfp4_release(config: dict[str, Any]) -> tuple[dict[str, Any] | None, dict[str, dict[str, Any]]]:
    """Super's NVFP4 release for `config` (possibly scaled down with --set): config.json's quantization_config,
    and hf_quant_config.json."""
    return super_quantization_config(config), {"hf_quant_config.json": super_hf_quant_config(config)}


def nano_nvfp4_release(config: dict[str, Any]) -> tuple[dict[str, Any] | None, dict[str, dict[str, Any]]]:
    """Nano's NVFP4 release for `config`: no quantization_config in config.json, an hf_quant_config.json."""
    return None, {"hf_quant_config.json": nano_hf_quant_config(config)}
