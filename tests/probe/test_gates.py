"""The probes for kernels vLLM runs only on other GPUs (SM100/SM120) or with an optional package: under the real
vLLM of the CPU engine they reach vLLM's own checks and report why the kernel cannot run, with vLLM's reason;
with the platform made to look like an H200 (sm_90) they give the SM90 verdict. No GPU needed: each gate asks
vLLM before it touches CUDA."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from checks.proc import Conversation
from launcher.probe.harness import probe_all
from launcher.probe.report import KernelResult
from launcher.probe.selection import Layer
from tests.helpers import FIXTURES, ROOT

CHILD = ROOT / "launcher" / "child"
# runs under the engine's Python: every gate (probe_kernels/gates.py), its exception as the probe would classify it
SCRIPT = """
import json, sys
sys.path.insert(0, sys.argv[1])
from probe_kernels.gates import GATES
from probe_kernels.inputs import KernelLayer
from verdict import classify

def run_gates():
    out = {}
    for (chain, kernel), setup in GATES.items():
        try:
            setup(16, 256, 256, KernelLayer())
            out[f"{chain}/{kernel}"] = {"status": "returned"}
        except Exception as e:
            out[f"{chain}/{kernel}"] = classify(e) or {"status": "failed", "error": repr(e)}
    return out

out = run_gates()  # also imports every module the gates read, as the CPU platform (their import-time CUDA work)
if sys.argv[2] != "none":  # then the platform looks like a CUDA GPU of that capability to vLLM's checks
    major, minor = int(sys.argv[2][0]), int(sys.argv[2][1:])
    from vllm.platforms import current_platform
    from vllm.platforms.interface import DeviceCapability
    platform = type(current_platform)
    platform.is_cuda = lambda self: True
    platform.get_device_capability = classmethod(lambda cls, device_id=0: DeviceCapability(major, minor))
    out = run_gates()
print(json.dumps(out))
"""


def gates(engine_python: Path, capability: str) -> dict[str, dict[str, str]]:
    r = subprocess.run(
        [engine_python, "-c", SCRIPT, str(CHILD), capability], capture_output=True, text=True, timeout=300
    )
    assert r.returncode == 0, r.stderr[-2000:]
    return json.loads(r.stdout.strip().splitlines()[-1])


@pytest.fixture(scope="module")
def on_cpu(engine_python: Path) -> dict[str, dict[str, str]]:
    return gates(engine_python, "none")


@pytest.fixture(scope="module")
def on_sm90(engine_python: Path) -> dict[str, dict[str, str]]:
    return gates(engine_python, "90")


@pytest.mark.engine
def test_every_gate_reaches_vllms_checks_without_a_gpu(on_cpu: dict[str, dict[str, str]]) -> None:
    assert on_cpu, "no gates"
    for name, verdict in on_cpu.items():
        if name.endswith("/HUMMING"):  # the optional package is missing before any device question
            assert verdict["status"] == "unavailable" and "humming" in verdict["error"], (name, verdict)
        else:
            assert verdict["status"] == "unsupported", (name, verdict)
            assert "vLLM sees no CUDA GPU" in verdict["error"], (name, verdict)


@pytest.mark.engine
def test_sm100_only_kernels_say_so_on_sm90(on_sm90: dict[str, dict[str, str]]) -> None:
    """The reasons are vLLM's: the capability family its experts classes check, the message of is_supported."""
    for name in ("fp8_moe/FLASHINFER_TRTLLM", "nvfp4_moe/FLASHINFER_TRTLLM", "nvfp4_moe/FLASHINFER_CUTEDSL"):
        verdict = on_sm90[name]
        assert verdict["status"] == "unsupported", (name, verdict)
        assert "not on sm_90" in verdict["error"] and "is_device_capability_family(100)" in verdict["error"]
    cutlass_fp4 = on_sm90["nvfp4_moe/VLLM_CUTLASS"]
    assert cutlass_fp4["status"] == "unsupported" and "not on sm_90" in cutlass_fp4["error"], cutlass_fp4
    cutedsl = on_sm90["nvfp4_dense/FlashInferCuteDslNvFp4LinearKernel"]
    assert cutedsl["status"] == "unsupported" and "is_supported on sm_90: " in cutedsl["error"], cutedsl
    assert "sm_10x" in cutedsl["error"], cutedsl  # vLLM's own message


@pytest.mark.engine
def test_the_new_probes_run_contained_in_the_real_harness(engine_python: Path) -> None:
    """Through the real harness (a forked child each): a gate answers unsupported, FlashInfer's CUTLASS FP8 MoE
    stops at vLLM's device check, FLEX_ATTENTION fails for want of CUDA as its own failure; the run goes on."""
    kernels = [
        KernelResult("nvfp4_moe", "FLASHINFER_CUTEDSL", 2, None, None, "not-probed"),
        KernelResult("fp8_moe", "FLASHINFER_CUTLASS", 2, None, None, "not-probed"),
        KernelResult("attention", "FLEX_ATTENTION", 3, None, None, "not-probed"),
        KernelResult("fp8_dense", "HummingFP8ScaledMMLinearKernel", 6, True, None, "not-probed"),
    ]
    with Conversation([engine_python, CHILD / "kernel_probe.py", "--serve"]) as harness:
        assert not probe_all(harness, kernels, Layer(dense=((64, 64),)), 120, lambda _: None)
    cutedsl, fi_cutlass, flex, humming = kernels
    assert cutedsl.status == "unsupported" and "FlashInferCuteDSLExperts" in (cutedsl.error or ""), cutedsl
    assert fi_cutlass.status == "unsupported" and "FlashInferExperts" in (fi_cutlass.error or ""), fi_cutlass
    assert flex.status == "failed" and "CUDA" in (flex.error or ""), flex
    assert humming.status == "unavailable" and "humming" in (humming.error or ""), humming


def test_the_gpu_script_summary_counts_the_report(tmp_path: Path) -> None:
    """benchmarks/probe_summary.py on the H200 capture as one run and a run that left no report: its counts and
    FlashInfer's set-up are the capture's; the run without a report says why in one line."""
    capture = json.loads((FIXTURES / "probe/h200-vllm026-harness-2026-11-30.json").read_text())
    capture["chains_probed"] = {"attention": "x", "fp8_moe": "y"}
    (tmp_path / "probe-moe-fresh.json").write_text(json.dumps(capture))
    (tmp_path / "probe-dense-warm.json").write_text("")
    (tmp_path / "probe-dense-warm.log").write_text("Traceback ...\nnemolaunch: the probe harness does not start\n")
    (tmp_path / "times.txt").write_text("moe-fresh exit 0 in 117.4 s (limit 120 s)\ndense-warm exit 3 in 2.0 s\n")
    r = subprocess.run(
        [sys.executable, ROOT / "benchmarks/probe_summary.py", tmp_path],
        capture_output=True, text=True, check=True,
    )  # fmt: skip
    rows = {line.split()[0]: line for line in r.stdout.splitlines()[1:3]}
    statuses = [k["status"] for k in capture["kernels"]]
    setup = next(k["setup_s"] for k in capture["kernels"] if k["kernel"] == "FLASHINFER")
    counts = "/".join(str(statuses.count(s)) for s in ("ok", "failed", "unsupported"))
    assert rows["moe-fresh"].split()[1:4] == ["117.4", "0", str(capture["seconds"])]
    assert " attention,fp8_moe " in rows["moe-fresh"] and f" {counts} " in rows["moe-fresh"]
    assert rows["moe-fresh"].rstrip().endswith(str(setup)), rows["moe-fresh"]
    assert "no report: nemolaunch: the probe harness does not start" in rows["dense-warm"]
    listed = r.stdout.split("moe-fresh: recommended", 1)[1]
    assert "VLLM_CUTLASS" in listed and "AITER" not in listed  # ran vs. not run by design


# runs under the engine's Python: the FLEX_ATTENTION probe on the CPU, as written for vLLM 0.26, through
# the CPU engine's vLLM FlexAttentionImpl; the engine's vLLM differs in two places (its metadata dropped the
# cascade fields, its block-size rule takes whether the KV cache is paged), bridged here; flex_attention runs
# eagerly (torch's CPU inductor cannot compile it on these machines)
FLEX_SCRIPT = """
import dataclasses, inspect, json, sys
sys.path.insert(0, sys.argv[1])
from probe_kernels.attention import attention_flex
from probe_kernels.inputs import KernelLayer
from vllm.v1.attention.backends import flex_attention as flex
layer = KernelLayer(heads=4, kv_heads=2, head_dim=64, device="cpu")
metadata, builder = flex.FlexAttentionMetadata, flex.FlexAttentionMetadataBuilder
known = {f.name for f in dataclasses.fields(metadata)}
flex.FlexAttentionMetadata = lambda **kw: metadata(**{k: v for k, v in kw.items() if k in known})
sizes = builder._get_block_sizes
if len(inspect.signature(sizes).parameters) == 4:
    builder._get_block_sizes = staticmethod(lambda cfg, small, block: sizes(cfg, small, block, True))
flex.flex_attention_compiled = flex.flex_attention
out = {}
for m, n, k in [(3, 1, 40), (1, 24, 24), (2, 8, 40), (20, 1, 33)]:
    run, reference = attention_flex(m, n, k, layer)
    got, want = run().float(), reference()
    out[f"{m},{n},{k}"] = float((got - want).norm() / want.norm())
print(json.dumps(out))
"""


@pytest.mark.engine
def test_flex_attention_probe_matches_the_reference_on_the_cpu_engine(engine_python: Path) -> None:
    """The FLEX_ATTENTION probe's cache layout (K and V packed, pages past vLLM's null block), metadata and block
    mask, through vLLM's own FlexAttentionImpl: decode, prefill, a chunk of a longer context, and more
    sequences than one query block holds all match the float32 reference."""
    r = subprocess.run([engine_python, "-c", FLEX_SCRIPT, str(CHILD)], capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr[-2000:]
    errors = json.loads(r.stdout.strip().splitlines()[-1])
    assert len(errors) == 4 and all(0 <= e < 1e-2 for e in errors.values()), errors


# runs under the engine's Python: the FP8 MoE probes' inputs on the CPU at Qwen3-30B-A3B's expert count and top-k
MOE_SCRIPT = """
import json, sys, time
sys.path.insert(0, sys.argv[1])
import torch
from probe_kernels import moe as kp
from probe_kernels.inputs import KernelLayer
layer = KernelLayer(experts=128, topk=8, device="cpu")
torch.manual_seed(0)
started = time.monotonic()
x, w1q, w2q, w1s, w2s, weights, ids, reference = kp.moe_fp8_inputs(16, 64, 128, layer)
setup_s = time.monotonic() - started
d = kp.DISTINCT_EXPERTS
same = lambda a, b: torch.equal(a.view(torch.uint8), b.view(torch.uint8))
tiled = all(same(w1q[e], w1q[e % d]) and same(w2q[e], w2q[e % d]) and w1s[e] == w1s[e % d] and w2s[e] == w2s[e % d]
            for e in range(128))
distinct = len({w1q[e].view(torch.uint8).sum().item() for e in range(d)})
w1, w2 = w1q.float() * w1s[:, None, None], w2q.float() * w2s[:, None, None]
naive = torch.zeros(16, 128)
for t in range(16):
    for j in range(8):
        e = int(ids[t, j])
        g, u = (x[t].float() @ w1[e].t()).chunk(2)
        naive[t] += weights[t, j] * ((torch.nn.functional.silu(g) * u) @ w2[e].t())
got = reference()
misrouted = kp.moe_reference(x, w1, w2, weights, (ids + 1) % 128)
print(json.dumps({"shapes": [list(w1q.shape), list(w2q.shape), list(w1s.shape)], "tiled": tiled, "distinct": distinct,
                  "err": float((got - naive).norm() / naive.norm()),
                  "misrouted": float((misrouted - naive).norm() / naive.norm()), "setup_s": setup_s}))
"""


@pytest.mark.engine
def test_moe_inputs_quantize_a_few_experts_and_tile_them(engine_python: Path) -> None:
    """Qwen3-30B-A3B's 128 experts: 4 distinct experts quantized, tiled over all 128 (each its own copy), the
    float32 reference from the same dequantized weights matches a token-by-token one, and a kernel routing every
    token to the next expert would fail the check."""
    r = subprocess.run([engine_python, "-c", MOE_SCRIPT, str(CHILD)], capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr[-2000:]
    found = json.loads(r.stdout.strip().splitlines()[-1])
    assert found["shapes"] == [[128, 128, 128], [128, 128, 64], [128]]
    assert found["tiled"] and found["distinct"] == 4
    assert found["err"] < 1e-5 and found["misrouted"] > 0.5, found
