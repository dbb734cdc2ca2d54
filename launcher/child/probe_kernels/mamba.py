"""The Mamba-2 decode kernels vLLM's --mamba-backend chooses between: the selective state update (SSU) of one new
token per sequence, through Triton (vLLM's mamba_ssm.selective_state_update) or FlashInfer
(flashinfer.mamba.selective_state_update), called as vLLM 0.26's MambaMixer2 calls them through its ssu_dispatch:
M sequences, N heads of K channels each, the layer's SSM state size and groups.

Inputs as MambaMixer2 builds them for decode: A (float32, one per head) expanded over channels and state, dt,
dt_bias and D (one per head) expanded over channels, B and C per group, the state cache in the model's SSM state
dtype with each sequence in a shuffled slot past vLLM's null block 0, softplus on dt, no z. The kernels update the
state in place, so the reference starts from a copy taken before the first call.
"""

import torch

from .inputs import KernelLayer

NULL_BLOCK = 0  # vLLM's NULL_BLOCK_ID: the state slot a padded sequence points at


def ssu_inputs(m: int, layer: KernelLayer):
    """(the keyword arguments of a selective state update, the float32 reference of its output)."""
    heads, dim, dstate, groups = layer.mamba_heads, layer.mamba_head_dim, layer.mamba_state, layer.mamba_groups
    dev, bf16 = layer.device, torch.bfloat16
    state = torch.randn(m + 1, heads, dim, dstate, device=dev, dtype=getattr(torch, layer.mamba_state_dtype)) / 4
    x = torch.randn(m, heads, dim, device=dev, dtype=bf16)
    dt = torch.randn(m, heads, device=dev, dtype=bf16)[:, :, None].expand(-1, -1, dim)
    a = -torch.exp(torch.randn(heads, device=dev) / 2)[:, None, None].expand(-1, dim, dstate)
    b = torch.randn(m, groups, dstate, device=dev, dtype=bf16)
    c = torch.randn(m, groups, dstate, device=dev, dtype=bf16)
    d = torch.randn(heads, device=dev, dtype=bf16)[:, None].expand(-1, dim)
    dt_bias = torch.randn(heads, device=dev, dtype=bf16)[:, None].expand(-1, dim)
    slots = torch.randperm(m, device=dev).to(torch.int32) + 1
    start = state[slots.long()].float()  # the state before the first call (the kernel updates it in place)
    kwargs = {"state": state, "x": x, "dt": dt, "A": a, "B": b, "C": c, "D": d, "dt_bias": dt_bias,
              "state_batch_indices": slots, "out": torch.full_like(x, float("nan"))}  # fmt: skip

    def reference():
        per_group = heads // groups
        delta = torch.nn.functional.softplus(dt.float() + dt_bias.float())  # [m, heads, dim]
        bh = b.float().repeat_interleave(per_group, 1)[:, :, None, :]  # [m, heads, 1, state]
        ch = c.float().repeat_interleave(per_group, 1)[:, :, None, :]
        new = start * torch.exp(a[None] * delta[..., None]) + (delta * x.float())[..., None] * bh
        return (new * ch).sum(-1) + d.float() * x.float()

    return kwargs, reference


def mamba_triton(m, n, k, layer: KernelLayer):
    from vllm.model_executor.layers.mamba.ops.mamba_ssm import selective_state_update

    kwargs, reference = ssu_inputs(m, layer)

    def run():
        selective_state_update(**kwargs, dt_softplus=True, null_block_id=NULL_BLOCK)
        return kwargs["out"]

    return run, reference


def mamba_flashinfer(m, n, k, layer: KernelLayer):
    """FlashInfer's SSU compiles its module for these dtypes and sizes on the first call (a JIT build in this
    kernel's set-up; flashinfer_build.py does not prebuild it)."""
    from flashinfer.mamba import selective_state_update

    kwargs, reference = ssu_inputs(m, layer)

    def run():
        selective_state_update(**kwargs, dt_softplus=True, pad_slot_id=NULL_BLOCK)
        return kwargs["out"]

    return run, reference


KERNELS = {("mamba", "TRITON"): mamba_triton, ("mamba", "FLASHINFER"): mamba_flashinfer}
