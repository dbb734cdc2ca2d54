"""The model shapes nemolaunch knows by name: each model card's config.json, and for a model whose NVFP4 checkpoint
nemolaunch can rebuild, that release's own quantization files."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from launcher.model import nemotron

# A release's quantization files for a (possibly scaled-down) config: config.json's quantization_config (None:
# none) and other JSON files by name (hf_quant_config.json).
Release = Callable[[dict[str, Any]], tuple[dict[str, Any] | None, dict[str, dict[str, Any]]]]

_LLAMA3_8B = {
    "architectures": ["LlamaForCausalLM"],
    "model_type": "llama",
    "attention_bias": False,
    "hidden_act": "silu",
    "hidden_size": 4096,
    "intermediate_size": 14336,
    "max_position_embeddings": 8192,
    "mlp_bias": False,
    "num_attention_heads": 32,
    "num_hidden_layers": 32,
    "num_key_value_heads": 8,
    "rms_norm_eps": 1e-05,
    "rope_scaling": None,
    "rope_theta": 500000.0,
    "tie_word_embeddings": False,
    "torch_dtype": "bfloat16",
    "vocab_size": 128256,
}
# Llama 3.1: the same layers, 128k context through llama3 rope scaling.
_LLAMA31_ROPE = {
    "max_position_embeddings": 131072,
    "rope_scaling": {
        "factor": 8.0,
        "low_freq_factor": 1.0,
        "high_freq_factor": 4.0,
        "original_max_position_embeddings": 8192,
        "rope_type": "llama3",
    },
}


@dataclass(frozen=True)
class KnownShape:
    name: str
    source: str  # the model card whose config.json this follows
    config: dict[str, Any]
    router: str | None = None  # the MoE router's module pattern: kept in bf16 when the rest is NVFP4
    nvfp4_release: Release | None = None  # the published NVFP4 checkpoint's own quantization, when there is one


KNOWN: dict[str, KnownShape] = {
    s.name: s
    for s in (
        KnownShape(
            "llama-3-8b",
            "https://huggingface.co/meta-llama/Meta-Llama-3-8B/blob/main/config.json",
            _LLAMA3_8B,
        ),
        KnownShape(
            "llama-3.1-8b",
            "https://huggingface.co/meta-llama/Llama-3.1-8B/blob/main/config.json",
            {**_LLAMA3_8B, **_LLAMA31_ROPE},
        ),
        KnownShape(
            "llama-3.1-70b",
            "https://huggingface.co/meta-llama/Llama-3.1-70B/blob/main/config.json",
            {
                **_LLAMA3_8B,
                **_LLAMA31_ROPE,
                "hidden_size": 8192,
                "intermediate_size": 28672,
                "num_attention_heads": 64,
                "num_hidden_layers": 80,
            },
        ),
        KnownShape(
            "qwen3-8b",
            "https://huggingface.co/Qwen/Qwen3-8B/blob/main/config.json",
            {
                "architectures": ["Qwen3ForCausalLM"],
                "model_type": "qwen3",
                "attention_bias": False,
                "head_dim": 128,
                "hidden_act": "silu",
                "hidden_size": 4096,
                "intermediate_size": 12288,
                "max_position_embeddings": 40960,
                "num_attention_heads": 32,
                "num_hidden_layers": 36,
                "num_key_value_heads": 8,
                "rms_norm_eps": 1e-06,
                "rope_scaling": None,
                "rope_theta": 1000000,
                "sliding_window": None,
                "use_sliding_window": False,
                "tie_word_embeddings": False,
                "torch_dtype": "bfloat16",
                "vocab_size": 151936,
            },
        ),
        KnownShape(
            "qwen3-30b-a3b",
            "https://huggingface.co/Qwen/Qwen3-30B-A3B/blob/main/config.json",
            {
                "architectures": ["Qwen3MoeForCausalLM"],
                "model_type": "qwen3_moe",
                "attention_bias": False,
                "decoder_sparse_step": 1,
                "head_dim": 128,
                "hidden_act": "silu",
                "hidden_size": 2048,
                "intermediate_size": 6144,
                "max_position_embeddings": 40960,
                "mlp_only_layers": [],
                "moe_intermediate_size": 768,
                "norm_topk_prob": True,
                "num_attention_heads": 32,
                "num_experts": 128,
                "num_experts_per_tok": 8,
                "num_hidden_layers": 48,
                "num_key_value_heads": 4,
                "rms_norm_eps": 1e-06,
                "rope_scaling": None,
                "rope_theta": 1000000.0,
                "sliding_window": None,
                "use_sliding_window": False,
                "tie_word_embeddings": False,
                "torch_dtype": "bfloat16",
                "vocab_size": 151936,
            },
            router="*.mlp.gate",
        ),
        KnownShape(
            "mixtral-8x7b",
            "https://huggingface.co/mistralai/Mixtral-8x7B-v0.1/blob/main/config.json",
            {
                "architectures": ["MixtralForCausalLM"],
                "model_type": "mixtral",
                "hidden_act": "silu",
                "hidden_size": 4096,
                "intermediate_size": 14336,
                "max_position_embeddings": 32768,
                "num_attention_heads": 32,
                "num_experts_per_tok": 2,
                "num_hidden_layers": 32,
                "num_key_value_heads": 8,
                "num_local_experts": 8,
                "rms_norm_eps": 1e-05,
                "rope_theta": 1000000.0,
                "sliding_window": None,
                "tie_word_embeddings": False,
                "torch_dtype": "bfloat16",
                "vocab_size": 32000,
            },
            router="*.block_sparse_moe.gate",
        ),
        KnownShape(
            nemotron.SUPER,
            nemotron.SOURCES[nemotron.SUPER],
            nemotron.SUPER_CONFIG,
            nvfp4_release=nemotron.super_nvfp4_release,
        ),
        KnownShape(
            nemotron.NANO,
            nemotron.SOURCES[nemotron.NANO],
            nemotron.NANO_CONFIG,
            nvfp4_release=nemotron.nano_nvfp4_release,
        ),
    )
}
