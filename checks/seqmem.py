"""What one sequence holds in GPU memory beside the weights: KV per token on the full-attention layers, and for a
hybrid (NemotronH) a fixed Mamba-2 state whatever its length. It bounds how many sequences fit: for Nemotron 3
Super, 170 MB of state against 4 KiB of FP8 KV per token, so the state costs as much as ~41k tokens of KV.

The shapes are vLLM 0.26's (MambaStateShapeCalculator.mamba2_state_shape, one replica, no speculative tokens):
conv state (d_inner + 2 x n_groups x state_size) x (conv_kernel - 1) in the model's dtype, SSM state heads x
head_dim x state_size in `mamba_ssm_cache_dtype` (float32 for NemotronH unless set otherwise).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from checks.model_config import merged

DTYPE_BYTES = {"float32": 4, "fp32": 4, "bfloat16": 2, "bf16": 2, "float16": 2, "fp16": 2, "half": 2, "fp8": 1}


@dataclass(frozen=True)
class SequenceMemory:
    attention_layers: int
    kv_elements_per_token: int  # K and V of every full-attention layer
    mamba_layers: int = 0
    conv_state_elements: int = 0  # all Mamba layers
    ssm_state_elements: int = 0
    ssm_state_dtype: str = "float32"

    def kv_bytes_per_token(self, kv_dtype: str = "bf16") -> int:
        return self.kv_elements_per_token * DTYPE_BYTES.get(kv_dtype, 2)

    def state_bytes(self, conv_dtype: str = "bf16", ssm_dtype: str | None = None) -> int:
        ssm = DTYPE_BYTES.get(ssm_dtype or self.ssm_state_dtype, 4)
        return self.conv_state_elements * DTYPE_BYTES.get(conv_dtype, 2) + self.ssm_state_elements * ssm

    def sequences_that_fit(self, free_bytes: float, tokens: int, kv_dtype: str = "bf16") -> int:
        """Sequences of `tokens` tokens each whose KV and state fit in `free_bytes`."""
        per = self.state_bytes() + tokens * self.kv_bytes_per_token(kv_dtype)
        return int(free_bytes // per) if per else 0


def _int(config: dict[str, Any], key: str, default: int) -> int:
    value = config.get(key)
    return value if isinstance(value, int) and not isinstance(value, bool) else default


def sequence_memory(config: dict[str, Any]) -> SequenceMemory | None:
    """From a config.json; None when it lacks the attention fields (or holds latent attention, not sized here)."""
    config = merged(config)
    hidden, heads = _int(config, "hidden_size", 0), _int(config, "num_attention_heads", 0)
    if not hidden or not heads or "kv_lora_rank" in config:
        return None
    kv_heads = _int(config, "num_key_value_heads", heads)
    head_dim = _int(config, "head_dim", hidden // heads)
    pattern = config.get("hybrid_override_pattern")
    if not isinstance(pattern, str):
        layers = _int(config, "num_hidden_layers", 0)
        return SequenceMemory(layers, layers * kv_heads * head_dim * 2)
    mamba = pattern.count("M")
    m_heads, m_dim = _int(config, "mamba_num_heads", 0), _int(config, "mamba_head_dim", 0)
    groups, state = _int(config, "n_groups", 8), _int(config, "ssm_state_size", 0)
    conv_dim = m_heads * m_dim + 2 * groups * state
    return SequenceMemory(
        attention_layers=pattern.count("*"),
        kv_elements_per_token=pattern.count("*") * kv_heads * head_dim * 2,
        mamba_layers=mamba,
        conv_state_elements=mamba * conv_dim * (_int(config, "conv_kernel", 4) - 1),
        ssm_state_elements=mamba * m_heads * m_dim * state,
        ssm_state_dtype=str(config.get("mamba_ssm_cache_dtype") or "float32"),
    )
