"""The Mamba-2 decode kernels vLLM's --mamba-backend chooses between: the selective state update (SSU) of one new
token per sequence, through Triton (vLLM's mamba_ssm.selective_state_update) or FlashInfer
(flashinfer.mamba.selective_state_update), called as vLLM 0.26's MambaMixer2 calls them through its ssu_dispatch:
M sequences, N heads of K channels each, the layer's SSM state size and groups.

Inputs in the layout MambaMixer2 (vllm/model_executor/layers/mamba/mamba_mixer2.py) hands its SSU on decode, which
FlashInfer's kernel checks stride by stride (0.6.14, csrc/selective_state_update.cu): A float32, one per head,
expanded over channels and state (strides 1, 0, 0); dt, dt_bias and D one per head expanded over channels (dt a
column of in_proj's output: strides W, 1, 0); x, B and C views of in_proj's output row [z | x B C | dt] of width W
(the causal conv updates x B C in place); the SSM state a view into each slot's page behind its conv state (vLLM's
Mamba page: conv then SSM, one page per block, so the state's slot stride is the page); slot indices [M, 1] int32
(mamba_cache_mode none, no speculative tokens), each sequence in a shuffled slot past vLLM's null block 0, read and
written in place; softplus on dt, no z. The kernels update the state in place, so the reference starts from a copy
taken before the first call.
"""

import torch

from .inputs import KernelLayer

NULL_BLOCK = 0  # vLLM's NULL_BLOCK_ID: the state slot a padded sequence points at
CONV_WIDTH = 3  # conv_kernel - 1 of both Nemotron 3 shapes: the conv state's columns in each page


def ssu_inputs(m: int, layer: KernelLayer):
    """(the keyword arguments of a selective state update, the float32 reference of its output)."""
    heads, dim, dstate, groups = layer.mamba_heads, layer.mamba_head_dim, layer.mamba_state, layer.mamba_groups
    dev, bf16, state_dtype = layer.device, torch.bfloat16, getattr(torch, layer.mamba_state_dtype)
    inner, grouped = heads * dim, groups * dstate
    conv_dim = inner + 2 * grouped
    # one page per slot: the conv state (bf16) then the SSM state, counted in the SSM state's elements
    size = torch.empty((), dtype=state_dtype).element_size()
    conv, ssm = -(-conv_dim * CONV_WIDTH * 2 // size), heads * dim * dstate
    pages = torch.randn(m + 1, conv + ssm, device=dev, dtype=state_dtype) / 4
    state = pages[:, conv:].view(m + 1, heads, dim, dstate)
    row = torch.randn(m, inner + conv_dim + heads, device=dev, dtype=bf16)  # in_proj's output: z, x B C, dt
    xbc = row[:, inner : inner + conv_dim]
    x = xbc[:, :inner].view(m, heads, dim)
    b = xbc[:, inner : inner + grouped].view(m, groups, dstate)
    c = xbc[:, inner + grouped :].view(m, groups, dstate)
    dt = row[:, inner + conv_dim :][:, :, None].expand(-1, -1, dim)
    # A is a parameter of one value per head (vLLM loads -exp(A_log)): expanded, never materialised
    a = (-torch.exp(torch.randn(heads, device=dev) / 2))[:, None, None].expand(-1, dim, dstate)
    d = torch.randn(heads, device=dev, dtype=bf16)[:, None].expand(-1, dim)
    dt_bias = torch.randn(heads, device=dev, dtype=bf16)[:, None].expand(-1, dim)
    slots = (torch.randperm(m, device=dev).to(torch.int32) + 1)[:, None]
    start = state[slots[:, 0].long()].float()  # the state before the first call (the kernel updates it in place)
    kwargs = {"state": state, "x": x, "dt": dt, "A": a, "B": b, "C": c, "D": d, "dt_bias": dt_bias,
              "state_batch_indices": slots, "dst_state_batch_indices": slots,
              "out": torch.full((m, heads, dim), float("nan"), device=dev, dtype=bf16)}  # fmt: skip

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
