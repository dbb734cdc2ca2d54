"""vLLM's own checks for the kernels it runs on other GPUs only (SM100/SM120) or only with an optional package:
each gate asks vLLM why not here, before touching CUDA, so the gates work (and say "not this device") without a
GPU too; where vLLM says the kernel runs, the kernel is reported not-probed (the probe driving it is still to
write), never skipped silently."""

import importlib
import inspect
import re
from collections.abc import Callable

from verdict import NotProbed, Unsupported

from .inputs import KernelLayer


def vllm_capability() -> int | None:
    """The capability as vLLM's platform sees it (None where it sees no CUDA device)."""
    from vllm.platforms import current_platform

    found = current_platform.get_device_capability()
    return found.to_int() if found is not None else None


def device_words() -> str:
    cap = vllm_capability()
    return f"sm_{cap}" if cap is not None else "this device (vLLM sees no CUDA GPU)"


def check_source(fn) -> str:
    """A vLLM check's own condition, one line (the reason it gives is its code: most have no message)."""
    try:
        lines = inspect.getsource(fn).splitlines()
    except (OSError, TypeError):
        return fn.__qualname__
    skip = ("@", "def ", '"""', "#", "p = current_platform")
    body = " ".join(line.strip() for line in lines if not line.strip().startswith(skip))
    return re.sub(r"\s+", " ", body.replace("return ", "")).replace("( ", "(").replace(" )", ")")[:240]


# the per-tensor schemes of the model's MoE weights, as vLLM's Fp8MoEMethod keys them: FP8 with static activation
# scales for a checkpoint that has them, dynamic ones for online FP8 (without a model: static, the widest scheme
# vLLM's per-tensor FP8 MoE kernels accept); NVFP4 static weight, dynamic activation scales
def moe_scheme(quant: str, layer: KernelLayer):
    from vllm.model_executor.layers.quantization.utils import quant_utils as qu

    if quant == "fp8":
        dynamic = layer.static_activations is False
        return qu.kFp8StaticTensorSym, qu.kFp8DynamicTensorSym if dynamic else qu.kFp8StaticTensorSym
    return qu.kNvfp4Static, qu.kNvfp4Dynamic


def check_moe_backend(quant: str, backend: str, layer: KernelLayer):
    """The experts class vLLM's oracle maps `backend` to, if one runs on this device with this quantization:
    vLLM's own _supports_current_device and _supports_quant_scheme decide; otherwise Unsupported, with the
    condition each class checks."""
    oracle = importlib.import_module(f"vllm.model_executor.layers.fused_moe.oracle.{quant}")
    enum = oracle.Fp8MoeBackend if quant == "fp8" else oracle.NvFp4MoeBackend
    if backend not in enum.__members__:
        raise ImportError(f"this vLLM has no {quant} MoE backend {backend}")
    weight_key, activation_key = moe_scheme(quant, layer)
    reasons = []
    for cls in oracle.backend_to_kernel_cls(enum[backend]):
        if not cls._supports_current_device():
            reasons.append(f"{cls.__name__} not on {device_words()} ({check_source(cls._supports_current_device)})")
        elif not cls._supports_quant_scheme(weight_key, activation_key):
            reasons.append(f"{cls.__name__} not for {weight_key} x {activation_key} on {device_words()}")
        else:
            return cls
    raise Unsupported(f"vLLM's {quant} MoE backend {backend}: " + "; ".join(reasons))


def moe_gate(quant: str, backend: str):
    """A MoE backend vLLM runs only on other GPUs (SM100/SM120): vLLM's checks say why not here; where they say it
    runs, the probe that drives it is still to be written (not-probed), never a silent skip."""

    def setup(m, n, k, layer):
        if backend == "HUMMING":
            humming_available()
        cls = check_moe_backend(quant, backend, layer)
        raise NotProbed(f"vLLM's {cls.__name__} runs on {device_words()}, but nemolaunch has no probe driving it yet")

    return setup


def linear_gate(table: str, name: str):
    """A linear kernel vLLM runs only on other GPUs: its own is_supported(capability) says why not here."""

    def setup(m, n, k, layer):
        from vllm.platforms.interface import PlatformEnum

        linear = importlib.import_module("vllm.model_executor.kernels.linear")
        kernel = next((c for c in getattr(linear, table)[PlatformEnum.CUDA] if c.__name__ == name), None)
        if kernel is None:
            raise ImportError(f"this vLLM has no {name} in {table}")
        ok, reason = kernel.is_supported(compute_capability=vllm_capability())
        if not ok:
            raise Unsupported(f"vLLM's {name}.is_supported on {device_words()}: {reason}")
        raise NotProbed(f"vLLM's {name} runs on {device_words()}, but nemolaunch has no probe driving it yet")

    return setup


def humming_available() -> None:
    from vllm.utils.import_utils import has_humming

    if not has_humming():
        raise ImportError("the optional humming package is not installed (vLLM's has_humming() is False)")


# kernels vLLM runs on other GPUs only (SM100/SM120), or only with an optional package
GATED_MOE = {
    "fp8": ("FLASHINFER_TRTLLM", "HUMMING"),
    "nvfp4": (
        "FLASHINFER_TRTLLM", "FLASHINFER_CUTEDSL", "FLASHINFER_CUTEDSL_BATCHED", "FLASHINFER_CUTLASS",
        "FLASHINFER_B12X", "VLLM_CUTLASS", "HUMMING",
    ),
}  # fmt: skip
GATED_LINEAR = {
    "fp8_dense": ("_POSSIBLE_FP8_KERNELS", ("B12xTensorFP8ScaledMMLinearKernel",)),
    "nvfp4_dense": (
        "_POSSIBLE_NVFP4_KERNELS",
        (
            "FlashInferCuteDslNvFp4LinearKernel", "FlashInferCutlassNvFp4LinearKernel",
            "FlashInferB12xNvFp4LinearKernel", "FlashInferCuteDslNvFp4W4A16LinearKernel",
            "FlashInferTrtllmNvFp4LinearKernel", "FlashInferCudnnNvFp4LinearKernel", "FbgemmNvFp4LinearKernel",
            "B12xNvFp4LinearKernel", "B12xNvFp4W4A16LinearKernel",
        ),
    ),
}  # fmt: skip
GATES: dict[tuple[str, str], Callable] = {
    **{(f"{quant}_moe", name): moe_gate(quant, name) for quant, names in GATED_MOE.items() for name in names},
    **{(chain, name): linear_gate(table, name) for chain, (table, names) in GATED_LINEAR.items() for name in names},
}
