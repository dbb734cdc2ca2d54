"""The dense GEMMs of vLLM's fp8_dense and nvfp4_dense chains, each through the library call vLLM makes for it,
with bf16 as the yardstick: M tokens times an N x K weight."""

import torch
from verdict import NotProbed, Unsupported

from .gates import humming_available
from .inputs import FP8, FP8_MAX, KernelLayer, capability, quantize_fp8


def fp8_inputs(m: int, n: int, k: int, per_row: bool, device: str):
    a = torch.randn(m, k, device=device, dtype=torch.bfloat16)
    w = torch.randn(n, k, device=device, dtype=torch.bfloat16) / k**0.5
    qa, sa = quantize_fp8(a, per_row)
    qw, sw = quantize_fp8(w, per_row)
    return qa, sa, qw, sw, lambda: (qa.float() * sa) @ (qw.float() * sw).t()


def fp8_torch(per_row: bool):
    def setup(m, n, k, layer: KernelLayer):
        qa, sa, qw, sw, reference = fp8_inputs(m, n, k, per_row, layer.device)
        sa = sa.reshape(m, 1) if per_row else sa.reshape(())
        sw = sw.reshape(1, n) if per_row else sw.reshape(())
        return (lambda: torch._scaled_mm(qa, qw.t(), scale_a=sa, scale_b=sw, out_dtype=torch.bfloat16)), reference

    return setup


def fp8_cutlass(m, n, k, layer: KernelLayer):
    from vllm import _custom_ops as ops

    qa, sa, qw, sw, reference = fp8_inputs(m, n, k, per_row=False, device=layer.device)
    if not ops.cutlass_scaled_mm_supports_fp8(capability()):
        raise Unsupported("vLLM's CUTLASS build has no FP8 scaled-mm for this capability")
    b = qw.t()  # K x N, column-major as vLLM stores it
    return (
        lambda: ops.cutlass_scaled_mm(
            qa, b, scale_a=sa.reshape(1, 1), scale_b=sw.reshape(1, 1), out_dtype=torch.bfloat16
        )
    ), reference


def fp8_flashinfer(m, n, k, layer: KernelLayer):
    import flashinfer

    qa, sa, qw, sw, reference = fp8_inputs(m, n, k, per_row=False, device=layer.device)
    a3, b3 = qa.unsqueeze(0), qw.t().unsqueeze(0)
    return (lambda: flashinfer.bmm_fp8(a3, b3, sa.reshape(()), sw.reshape(()), torch.bfloat16).squeeze(0)), reference


def bf16_baseline(m, n, k, layer: KernelLayer):
    a = torch.randn(m, k, device=layer.device, dtype=torch.bfloat16)
    w = torch.randn(n, k, device=layer.device, dtype=torch.bfloat16) / k**0.5
    return (lambda: a @ w.t()), lambda: a.float() @ w.float().t()


def nvfp4_torch(m, n, k, layer: KernelLayer):
    if not hasattr(torch, "float4_e2m1fn_x2"):
        raise Unsupported(f"torch {torch.__version__} has no float4_e2m1fn_x2")
    a = torch.randint(0, 255, (m, k // 2), device=layer.device, dtype=torch.uint8).view(torch.float4_e2m1fn_x2)
    b = torch.randint(0, 255, (n, k // 2), device=layer.device, dtype=torch.uint8).view(torch.float4_e2m1fn_x2)

    def blocks(rows: int) -> int:  # one e4m3 scale per 16 values, in cuBLAS's swizzled 128x4 tiles
        return -(-rows // 128) * 128 * (-(-(k // 16) // 4) * 4)

    sa = torch.ones(blocks(m), device=layer.device, dtype=torch.float8_e4m3fn)
    sb = torch.ones(blocks(n), device=layer.device, dtype=torch.float8_e4m3fn)
    # random packed codes: the reference would need an FP4 decoder, so numerics stay unchecked (never recommended)
    return (lambda: torch._scaled_mm(a, b.t(), scale_a=sa, scale_b=sb, out_dtype=torch.bfloat16)), None


def nvfp4_cutlass(m, n, k, layer: KernelLayer):
    from vllm import _custom_ops as ops

    if not ops.cutlass_scaled_mm_supports_fp4(capability()):
        raise Unsupported(f"vLLM's CUTLASS FP4 GEMM needs SM100+ (this GPU is sm_{capability()})")
    raise NotProbed("vLLM's CUTLASS FP4 GEMM runs here, but the probe cannot pack FP4 weights for it yet")


def marlin_workspace():
    from vllm.model_executor.layers.quantization.utils.marlin_utils import marlin_make_workspace_new

    return marlin_make_workspace_new(torch.device("cuda", torch.cuda.current_device()))


def fp8_marlin(m, n, k, layer: KernelLayer):
    """MarlinFP8: FP8 weights (one scale per output channel, as vLLM converts per-tensor checkpoints), bf16
    activations (W8A16)."""
    from vllm.model_executor.layers.quantization.utils.marlin_utils_fp8 import (
        apply_fp8_marlin_linear,
        marlin_quant_fp8_torch,
    )

    x = torch.randn(m, k, device=layer.device, dtype=torch.bfloat16)
    w_ref, qweight, scales = marlin_quant_fp8_torch(
        torch.randn(n, k, device=layer.device, dtype=torch.bfloat16) / k**0.5, -1
    )
    workspace = marlin_workspace()
    return (
        lambda: apply_fp8_marlin_linear(x, qweight, scales, workspace, n, k, None)
    ), lambda: x.float() @ w_ref.float()


def nvfp4_marlin(m, n, k, layer: KernelLayer):
    """MarlinNvFp4: NVFP4 weights (16-value blocks, e4m3 block scales, a global scale), bf16 activations."""
    from vllm.model_executor.layers.quantization.utils.marlin_utils_fp4 import (
        apply_fp4_marlin_linear,
        rand_marlin_weight_nvfp4_like,
    )

    x = torch.randn(m, k, device=layer.device, dtype=torch.bfloat16)
    w = torch.randn(n, k, device=layer.device, dtype=torch.bfloat16) / k**0.5
    w_ref, qweight, scales, global_scale = rand_marlin_weight_nvfp4_like(w, 16)
    workspace = marlin_workspace()
    return (
        lambda: apply_fp4_marlin_linear(x, qweight, scales, global_scale, workspace, n, k)
    ), lambda: x.float() @ w_ref.float()


def linear_module(n: int, k: int) -> torch.nn.Module:
    """The attributes vLLM's linear layers carry that kernels' process_weights_after_loading read."""
    module = torch.nn.Module()
    module.input_size_per_partition, module.input_size, module.output_size = k, k, n
    module.output_partition_sizes, module.logical_widths = [n], [n]
    module.params_dtype, module.has_bias = torch.bfloat16, False
    return module


def parameter(t: torch.Tensor, **attrs) -> torch.nn.Parameter:
    p = torch.nn.Parameter(t, requires_grad=False)
    for name, value in attrs.items():
        setattr(p, name, value)
    return p


def fp8_humming(m, n, k, layer: KernelLayer):
    """vLLM's HummingFP8ScaledMMLinearKernel as Fp8LinearMethod leaves an online-FP8 layer for it: a per-tensor
    FP8 weight transposed to K x N, one weight scale, no input scale; then the kernel's own
    process_weights_after_loading and apply_weights (bf16 activations)."""
    humming_available()
    from vllm.model_executor.kernels.linear.scaled_mm.humming import HummingFP8ScaledMMLinearKernel
    from vllm.model_executor.kernels.linear.scaled_mm.ScaledMMLinearKernel import FP8ScaledMMLinearLayerConfig
    from vllm.model_executor.layers.quantization.utils.quant_utils import kFp8DynamicTokenSym, kFp8StaticTensorSym

    x = torch.randn(m, k, device=layer.device, dtype=torch.bfloat16)
    qw, sw = quantize_fp8(torch.randn(n, k, device=layer.device, dtype=torch.bfloat16) / k**0.5, per_row=False)
    # the kernel itself, as init_fp8_linear_kernel builds the one it picks (forcing it there would fall back to
    # another kernel silently if it could not be used)
    config = FP8ScaledMMLinearLayerConfig(
        weight_quant_key=kFp8StaticTensorSym, activation_quant_key=kFp8DynamicTokenSym, weight_shape=(n, k),
        input_dtype=torch.bfloat16, out_dtype=torch.bfloat16,
    )  # fmt: skip
    kernel = HummingFP8ScaledMMLinearKernel(config, ["weight", "weight_scale", "input_scale", "input_scale_ub"])
    module = linear_module(n, k)
    module.weight = parameter(qw.t(), input_dim=0, output_dim=1)
    module.weight_scale = parameter(sw.reshape(1))
    module.input_scale = None
    kernel.process_weights_after_loading(module)
    return (lambda: kernel.apply_weights(module, x)), lambda: x.float() @ (qw.float() * sw).t()


def nvfp4_weight(n: int, k: int, device: str):
    """Random NVFP4 codes packed two per byte (low nibble first), e4m3 scales per 16 values and a global scale,
    with the bf16 weight they decode to (the decoding of vLLM's rand_marlin_weight_nvfp4_like)."""
    w = torch.randn(n, k, device=device, dtype=torch.bfloat16) / k**0.5
    scales = w.view(n, -1, 16).abs().amax(-1).float() / 6
    global_scale = scales.max() / FP8_MAX
    scales = (scales / global_scale).to(FP8)
    packed = torch.randint(0, 256, (n, k // 2), dtype=torch.uint8, device=device)

    def decode(code):  # an e2m1 nibble in the top of a byte, read as e4m3 and rescaled
        return ((code & 0b10000000) | ((code & 0b01110000) >> 2)).view(FP8).to(torch.bfloat16) * 2**6

    ref = torch.stack([decode(packed << 4), decode(packed)], 2).view(n, k)
    ref = ref * global_scale.to(torch.bfloat16) * scales.to(torch.bfloat16).repeat_interleave(16, 1)
    return packed, scales, global_scale.reshape(()), ref


def nvfp4_humming(m, n, k, layer: KernelLayer):
    """vLLM's HummingNvFp4LinearKernel as the compressed-tensors NVFP4 scheme leaves a layer for it (W4A16):
    packed weight, e4m3 block scales, the global scale already inverted to the dequantizing one; then the
    kernel's own process_weights_after_loading and apply_weights."""
    humming_available()
    from vllm.model_executor.kernels.linear.nvfp4.base import NvFp4LinearLayerConfig
    from vllm.model_executor.kernels.linear.nvfp4.humming import HummingNvFp4LinearKernel

    x = torch.randn(m, k, device=layer.device, dtype=torch.bfloat16)
    packed, scales, global_scale, ref = nvfp4_weight(n, k, layer.device)
    kernel = HummingNvFp4LinearKernel(NvFp4LinearLayerConfig())
    module = linear_module(n, k)
    module.weight = parameter(packed, input_dim=1, output_dim=0)
    module.weight_scale = parameter(scales, input_dim=1, output_dim=0)
    module.weight_global_scale = parameter(global_scale.float())
    kernel.process_weights_after_loading(module)
    return (lambda: kernel.apply_weights(module, x)), lambda: x.float() @ ref.float().t()


KERNELS = {
    ("fp8_dense", "bf16 (unquantized baseline)"): bf16_baseline,
    ("fp8_dense", "PerTensorTorchFP8ScaledMMLinearKernel"): fp8_torch(per_row=False),
    ("fp8_dense", "ChannelWiseTorchFP8ScaledMMLinearKernel"): fp8_torch(per_row=True),
    ("fp8_dense", "CutlassFP8ScaledMMLinearKernel"): fp8_cutlass,
    ("fp8_dense", "FlashInferFP8ScaledMMLinearKernel"): fp8_flashinfer,
    ("fp8_dense", "MarlinFP8ScaledMMLinearKernel"): fp8_marlin,
    ("fp8_dense", "HummingFP8ScaledMMLinearKernel"): fp8_humming,
    ("nvfp4_dense", "TorchNvFp4LinearKernel"): nvfp4_torch,
    ("nvfp4_dense", "CutlassNvFp4LinearKernel"): nvfp4_cutlass,
    ("nvfp4_dense", "MarlinNvFp4LinearKernel"): nvfp4_marlin,
    ("nvfp4_dense", "HummingNvFp4LinearKernel"): nvfp4_humming,
}
