"""What quantization a checkpoint's config really carries, read the way vLLM reads it: config.json's
`quantization_config`, else the older `hf_quant_config.json` beside it (ModelOpt 0.29 and before), else vLLM's
online `--quantization fp8`, else the config's dtype.

One reading serves `model shape` (the folder's label) and `roofline` (the bytes of each weight): a `Quantization`
says which storage each module has. A ModelOpt MIXED_PRECISION checkpoint names its quantized modules one by one
(`quantized_layers`); a module it does not name stays in the base dtype.
"""

from __future__ import annotations

import fnmatch
from dataclasses import dataclass, field
from typing import Any

_TORCH_DTYPES = {"float32": "fp32", "bfloat16": "bf16", "float16": "fp16", "half": "fp16"}
_MODELOPT_ALGOS = {"NVFP4": "nvfp4", "W4A16_NVFP4": "nvfp4", "FP8": "fp8", "FP8_PER_CHANNEL_PER_TOKEN": "fp8"}
_MODELOPT_ALGOS |= {"FP8_PB_WO": "fp8", "MXFP8": "fp8", "W4A8_AWQ": "int4", "W4A16_AWQ": "int4"}


class UnknownQuantization(ValueError):
    """A quantization_config whose weight storage nemolaunch does not know."""


@dataclass(frozen=True)
class Quantization:
    """The weights' storage per module. `default` applies to the quantizable linear layers that no entry of
    `layers` names and no `exclude` pattern matches; excluded modules and what a mixed map leaves out keep
    `base`. `kv` is the KV cache dtype the checkpoint asks for (None: vLLM's default)."""

    label: str  # "bf16", "fp8", "nvfp4", "mixed nvfp4+fp8" ...
    method: str  # quant_method as written ("" for none; "online" for vLLM's --quantization fp8)
    default: str
    base: str = "bf16"
    layers: dict[str, str] = field(default_factory=dict)
    exclude: tuple[str, ...] = ()
    kv: str | None = None

    def dtype_of(self, module: str) -> str:
        """The storage of one module, named as in the checkpoint (backbone.layers.3.mixer.in_proj, lm_head)."""
        if self.layers:
            return self.layers.get(module, self.base)
        if any(fnmatch.fnmatchcase(module, p) or module.endswith("." + p) for p in self.exclude):
            return self.base
        return self.default


def _base(config: dict[str, Any]) -> str:
    dtype = config.get("torch_dtype") or config.get("dtype") or (config.get("text_config") or {}).get("torch_dtype")
    return _TORCH_DTYPES.get(str(dtype or "bfloat16"), "bf16")


def _mixed_label(layers: dict[str, str]) -> str:
    kinds = sorted(set(layers.values()), key=("nvfp4", "mxfp4", "int4", "fp8", "int8").index)
    return "mixed " + "+".join(kinds) if len(kinds) > 1 else kinds[0]


def read(config: dict[str, Any], hf_quant: dict[str, Any] | None = None, online: str | None = None) -> Quantization:
    """The quantization of a checkpoint: its config.json (`config`), its hf_quant_config.json (`hf_quant`, read
    only when config.json has no quantization_config, as vLLM does) and vLLM's --quantization value (`online`)."""
    base = _base(config)
    qc = config.get("quantization_config")
    if not isinstance(qc, dict):
        qc = hf_quant if isinstance(hf_quant, dict) else None
    if qc is None:
        if online == "fp8":
            return Quantization("fp8", "online", "fp8", base, exclude=("lm_head", "*.gate"))
        return Quantization(base, "", base, base)
    inner: dict[str, Any] = qc["quantization"] if isinstance(qc.get("quantization"), dict) else qc
    method = str(qc.get("quant_method") or ("modelopt" if (qc.get("producer") or {}).get("name") == "modelopt" else ""))
    algo = str(inner.get("quant_algo") or "").upper()
    if method.lower().startswith("modelopt") or algo:
        kv = "fp8" if str(inner.get("kv_cache_quant_algo") or "").upper() == "FP8" else None
        scheme = qc.get("kv_cache_scheme")
        if isinstance(scheme, dict) and (scheme.get("type"), scheme.get("num_bits")) == ("float", 8):
            kv = "fp8"
        if algo == "MIXED_PRECISION":
            named = inner.get("quantized_layers") or {}
            layers = {name: _modelopt_algo(str(q.get("quant_algo", ""))) for name, q in named.items()}
            if not layers:
                raise UnknownQuantization("a MIXED_PRECISION quantization_config without quantized_layers")
            return Quantization(_mixed_label(layers), method, base, base, layers, kv=kv)
        exclude = tuple(inner.get("exclude_modules") or inner.get("ignore") or ())
        kind = _modelopt_algo(algo)
        return Quantization(kind, method, kind, base, exclude=exclude, kv=kv)
    lowered = method.lower()
    if lowered in ("fp8", "fbgemm_fp8"):
        return Quantization("fp8", method, "fp8", base, exclude=tuple(qc.get("ignored_layers") or ()))
    if lowered == "mxfp4":
        return Quantization("mxfp4", method, "mxfp4", base)
    if lowered in ("compressed-tensors", "compressed_tensors"):
        weights = [g.get("weights") or {} for g in (qc.get("config_groups") or {}).values()]
        bits = {(w.get("num_bits"), w.get("type")) for w in weights}
        found = next(
            (
                k
                for b, k in (((4, "float"), "nvfp4"), ((8, "float"), "fp8"), ((8, "int"), "int8"), ((4, "int"), "int4"))
                if b in bits
            ),
            None,
        )
        if found:
            return Quantization(found, method, found, base, exclude=tuple(qc.get("ignore") or ()))
    raise UnknownQuantization(f"quantization {method or qc!r} is not modelled")


def _modelopt_algo(algo: str) -> str:
    kind = _MODELOPT_ALGOS.get(algo.upper())
    if kind is None:
        raise UnknownQuantization(f"ModelOpt quant_algo {algo!r} is not modelled")
    return kind
