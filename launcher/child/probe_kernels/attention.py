"""The paged attention kernels of vLLM's attention chain (Triton, FlashAttention, FlashInfer, FlexAttention): M
sequences, each with N new query tokens at the end of a K-token context, over a shuffled paged KV cache."""

from types import SimpleNamespace

import torch

from .inputs import KernelLayer

BLOCK = 16  # vLLM's default KV-cache block size


def paged_inputs(m: int, n: int, k: int, layer: KernelLayer):
    """m sequences, each with n new query tokens at the end of a k-token context, KV in a shuffled paged cache.
    Returns the keyword arguments both of vLLM's own paged-attention kernels take (output poisoned with NaN) and
    the float32 reference (a function: it runs later, when it cannot disturb another kernel's timing)."""
    blocks_per_seq = -(-k // BLOCK)
    num_blocks = m * blocks_per_seq + 1
    q = torch.randn(m * n, layer.heads, layer.head_dim, device=layer.device, dtype=torch.bfloat16)
    k_cache = torch.randn(num_blocks, BLOCK, layer.kv_heads, layer.head_dim, device=layer.device, dtype=torch.bfloat16)
    v_cache = torch.randn(num_blocks, BLOCK, layer.kv_heads, layer.head_dim, device=layer.device, dtype=torch.bfloat16)
    table = torch.randperm(num_blocks - 1, device=layer.device, dtype=torch.int32)[: m * blocks_per_seq].view(m, -1)
    scale = layer.head_dim**-0.5

    def reference():
        ref = torch.empty(m * n, layer.heads, layer.head_dim, device=layer.device)
        group = layer.heads // layer.kv_heads
        for i in range(m):
            kk = (
                k_cache[table[i].long()]
                .reshape(-1, layer.kv_heads, layer.head_dim)[:k]
                .float()
                .repeat_interleave(group, 1)
            )
            vv = (
                v_cache[table[i].long()]
                .reshape(-1, layer.kv_heads, layer.head_dim)[:k]
                .float()
                .repeat_interleave(group, 1)
            )
            scores = torch.einsum("qhd,khd->hqk", q[i * n : (i + 1) * n].float(), kk) * scale
            pos_q = torch.arange(k - n, k, device=layer.device)[:, None]
            scores = scores.masked_fill(torch.arange(k, device=layer.device)[None, :] > pos_q, float("-inf"))
            ref[i * n : (i + 1) * n] = torch.einsum("hqk,khd->qhd", torch.softmax(scores, -1), vv)
        return ref

    kwargs = {
        "q": q,
        "k": k_cache,
        "v": v_cache,
        "out": torch.full_like(q, float("nan")),
        "cu_seqlens_q": torch.arange(0, m * n + 1, n, device=layer.device, dtype=torch.int32),
        "max_seqlen_q": n,
        "seqused_k": torch.full((m,), k, device=layer.device, dtype=torch.int32),
        "max_seqlen_k": k,
        "softmax_scale": scale,
        "causal": True,
        "block_table": table,
    }
    return kwargs, reference


def attention_triton(m, n, k, layer: KernelLayer):
    from vllm.v1.attention.ops.triton_unified_attention import unified_attention

    kwargs, reference = paged_inputs(m, n, k, layer)

    def run():
        unified_attention(**kwargs, window_size=(-1, -1), softcap=0, q_descale=None, k_descale=None, v_descale=None)
        return kwargs["out"]

    return run, reference


def attention_flash(m, n, k, layer: KernelLayer):
    from vllm.vllm_flash_attn import flash_attn_varlen_func

    kwargs, reference = paged_inputs(m, n, k, layer)
    version = 3 if torch.cuda.get_device_capability()[0] == 9 else 2

    def run():
        flash_attn_varlen_func(**kwargs, window_size=[-1, -1], fa_version=version)
        return kwargs["out"]

    return run, reference


def attention_flex(m, n, k, layer: KernelLayer):
    """vLLM's FLEX_ATTENTION backend: its FlexAttentionImpl.forward on the FlexAttentionMetadata its builder makes
    (block sizes from the builder's own rule, vLLM's physical-to-logical map, the direct block mask over the
    paged cache, causal, decode offsets), K and V packed in one cache tensor laid out as the backend's
    get_kv_cache_shape and stride order say. torch.compile builds the kernel on the first call of each shape,
    in this process (one compile thread: no worker pool shared between forked probes)."""
    import torch._inductor.config as inductor_config
    from vllm.v1.attention.backends import flex_attention as flex

    inductor_config.compile_threads = 1
    kwargs, reference = paged_inputs(m, n, k, layer)
    # (blocks, kv heads, block, 2 x dim) over memory laid out (blocks, block, kv heads, 2 x dim); every page one up:
    # vLLM keeps page 0 as its null block, and the direct block mask skips it
    packed = torch.roll(torch.cat([kwargs["k"], kwargs["v"]], -1), 1, 0)
    kv_cache = packed.permute(0, 2, 1, 3)
    table = (kwargs["block_table"] + 1).to(torch.int32)
    seq_lens, starts = kwargs["seqused_k"], kwargs["cu_seqlens_q"]
    blocks, tokens, pages = kv_cache.shape[0], m * n, table.shape[1]
    small = flex.is_torch_equal_or_newer("2.9.0.dev0")
    sizes = SimpleNamespace(flex_attn_q_block_size=None, flex_attn_block_m=None, flex_attn_kv_block_size=None,
                            flex_attn_block_n=None)  # fmt: skip
    q_block, kv_block = flex.FlexAttentionMetadataBuilder._get_block_sizes(sizes, small, BLOCK)
    groups = -(-tokens // q_block)
    meta = flex.FlexAttentionMetadata(
        causal=True, num_actual_tokens=tokens, max_query_len=n, query_start_loc=starts,
        query_start_loc_cpu=starts.cpu(), max_seq_len=k, seq_lens=seq_lens, block_table=table, use_cascade=False,
        slot_mapping=torch.zeros(tokens, device=layer.device, dtype=torch.int64), common_prefix_len=0,
        cu_prefix_query_lens=None, prefix_kv_lens=None, suffix_kv_lens=None, total_cache_tokens=blocks * BLOCK,
        block_size=BLOCK, max_possible_sequence_length=k, num_reqs=m,
        physical_to_logical=flex.physical_to_logical_mapping(table, seq_lens, BLOCK, blocks),
        decode_offset=(seq_lens - n).to(torch.int32), num_blocks_per_seq=-(seq_lens // -BLOCK),
        persistent_kv_indices=torch.empty(groups, q_block * pages, device=layer.device, dtype=torch.int32),
        persistent_kv_num_blocks=torch.empty(groups, device=layer.device, dtype=torch.int32),
        persistent_doc_ids=torch.empty(tokens, device=layer.device, dtype=torch.int32),
        direct_build=small and kv_block == BLOCK, q_block_size=q_block, kv_block_size=kv_block,
    )  # fmt: skip
    meta.block_mask = meta._build_block_mask_direct() if meta.direct_build else meta.build_block_mask()
    impl = flex.FlexAttentionImpl(
        num_heads=layer.heads, head_size=layer.head_dim, scale=kwargs["softmax_scale"], num_kv_heads=layer.kv_heads,
        alibi_slopes=None, sliding_window=None, kv_cache_dtype="auto",
    )  # fmt: skip
    module, out = torch.nn.Module(), kwargs["out"]
    return (lambda: impl.forward(module, kwargs["q"], None, None, kv_cache, meta, out)), reference


def attention_flashinfer(m, n, k, layer: KernelLayer):
    """FlashInfer's paged wrappers as vLLM's FLASHINFER backend builds them: the decode wrapper with tensor
    cores for one new token, the prefill wrapper otherwise; backend "auto", buffers fixed for CUDA graphs. Their
    JIT modules are built before this runs (launcher/child/flashinfer_build.py, started by the probe ahead of
    everything else), unless NEMOLAUNCH_FLASHINFER_PREBUILD=0: then the wrappers compile them here, one after the
    other."""
    import flashinfer

    kwargs, reference = paged_inputs(m, n, k, layer)
    table = kwargs["block_table"]
    pages = table.shape[1]
    indptr = torch.arange(0, m * pages + 1, pages, device=layer.device, dtype=torch.int32)
    indices = table.reshape(-1).contiguous()
    last_len = torch.full((m,), k - (pages - 1) * BLOCK, device=layer.device, dtype=torch.int32)
    workspace = torch.zeros(256 << 20, device=layer.device, dtype=torch.uint8)  # FlashInfer wants it zeroed
    dims = (layer.heads, layer.kv_heads, layer.head_dim, BLOCK)
    types = {"q_data_type": torch.bfloat16, "kv_data_type": torch.bfloat16, "sm_scale": kwargs["softmax_scale"]}
    if n == 1:
        wrapper = flashinfer.BatchDecodeWithPagedKVCacheWrapper(
            workspace, "NHD", use_cuda_graph=True, use_tensor_cores=True, paged_kv_indptr_buffer=indptr,
            paged_kv_indices_buffer=indices, paged_kv_last_page_len_buffer=last_len,
        )  # fmt: skip
        wrapper.plan(indptr, indices, last_len, *dims, **types)
    else:
        qo_indptr = kwargs["cu_seqlens_q"]
        wrapper = flashinfer.BatchPrefillWithPagedKVCacheWrapper(
            workspace, "NHD", use_cuda_graph=True, qo_indptr_buf=qo_indptr, paged_kv_indptr_buf=indptr,
            paged_kv_indices_buf=indices, paged_kv_last_page_len_buf=last_len,
        )  # fmt: skip
        wrapper.plan(qo_indptr, indptr, indices, last_len, *dims, causal=True, **types)
    out = kwargs["out"]
    return (lambda: wrapper.run(kwargs["q"], (kwargs["k"], kwargs["v"]), out=out)), reference


KERNELS = {
    ("attention", "TRITON_ATTN"): attention_triton,
    ("attention", "FLASH_ATTN"): attention_flash,
    ("attention", "FLASHINFER"): attention_flashinfer,
    ("attention", "FLEX_ATTENTION"): attention_flex,
}
