"""What every family's set-ups share: the layer a job's shapes come from, FP8 quantization, the capability."""

from dataclasses import dataclass

import torch

FP8 = torch.float8_e4m3fn
FP8_MAX = 448.0


@dataclass(frozen=True)
class KernelLayer:
    """The layer besides the shapes (launcher/probe's Layer.for_child): an 8-expert top-2 SiLU-gated MoE, a
    Llama-8B-like attention and Nemotron 3 Nano's Mamba mixer unless a job gives a model's; and the device the
    inputs live on (the tests build some on the CPU)."""

    experts: int = 8
    topk: int = 2
    heads: int = 32
    kv_heads: int = 8
    head_dim: int = 128
    # the model's FP8 activation scales come from its checkpoint (None: no model; a kernel may assume either)
    static_activations: bool | None = None
    moe_activation: str = "silu"  # vLLM's MoEActivation value: "silu" gated (w1 has 2N rows), "relu2_no_mul" not
    # the Mamba-2 mixer: heads x head_dim channels, the SSM state per channel, B and C groups, the state's dtype
    mamba_heads: int = 64
    mamba_head_dim: int = 64
    mamba_state: int = 128
    mamba_groups: int = 8
    mamba_state_dtype: str = "float32"
    device: str = "cuda"


def capability() -> int:
    major, minor = torch.cuda.get_device_capability()
    return major * 10 + minor


def quantize_fp8(x: torch.Tensor, per_row: bool) -> tuple[torch.Tensor, torch.Tensor]:
    amax = x.abs().amax(dim=1, keepdim=True) if per_row else x.abs().amax()
    scale = (amax.float() / torch.finfo(FP8).max).clamp(min=1e-12)
    return (x / scale).to(FP8), scale
