"""Silent fallbacks named from real vLLM logs: the H200 captures (vLLM 0.26.0, 2026-11-30 and 2026-12-02), the
SM12x corpus (users' posts, tests/fixtures/corpus), the lines NOTES.md quotes from the H200 run of Nemotron 3
Super (2026-12-03); and serve saying each one when it is serving."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from launcher.profiles.profile import load_profile
from launcher.serve import fallbacks
from launcher.serve.run import launched
from tests.helpers import FIXTURES, ROOT, free_port, serve_plan, stand_in_vllm

LOGS = FIXTURES / "logs"
# the H200's Qwen3-30B-A3B shape with online FP8, 2026-12-02 (bench's server log, lines as bench kept them)
MOE_START = ROOT / "docs/measurements/runs/2026-12-02/gpu-h200-2026-12-02b/moe/starts-server.txt"
CORPUS = {
    d["id"]: d for d in map(json.loads, (FIXTURES / "corpus" / "sm12x-serving-logs.jsonl").read_text().splitlines())
}


def _kinds(found: list[fallbacks.Fallback]) -> list[tuple[str, int]]:
    return [(f.kind, f.line_no) for f in found]


def test_enforce_eager_on_the_h200_is_named_with_its_fix() -> None:
    found = fallbacks.detect((LOGS / "h200-vllm026-eager-1b-2026-11-30.log").read_text())
    assert _kinds(found) == [("cuda-graphs", 13), ("autotune", 34)]
    graphs = found[0]
    assert graphs.what == "CUDA graphs off" and graphs.fix == "cuda_graphs = true in the profile"
    assert [a.overrides for a in graphs.alternatives] == [{"vllm": {"cuda_graphs": True}}]
    assert graphs.line.startswith("Enforce eager set, disabling torch.compile and CUDAGraphs")


def test_a_default_h200_start_takes_no_fallback_but_the_first_starts_tactics() -> None:
    """FLASH_ATTN is the first valid attention backend and graphs are FULL_AND_PIECEWISE: nothing to name."""
    found = fallbacks.detect((LOGS / "h200-vllm026-serve-sm90-2026-11-30.log").read_text())
    assert _kinds(found) == [("autotune", 45)]


def test_the_h200_moe_shape_names_its_moe_and_linear_fallbacks() -> None:
    found = fallbacks.detect(MOE_START.read_text())
    assert _kinds(found) == [("linear-kernel", 6), ("moe-backend", 7), ("moe-config", 12)]
    linear, moe, _ = found
    assert linear.what == "FP8 linear layers on CutlassFP8ScaledMMLinearKernel, not FlashInferFP8ScaledMMLinearKernel"
    assert moe.what == "Fp8 MoE on TRITON, not FLASHINFER_TRTLLM (vLLM's first CUDA candidate)"
    assert [a.label for a in moe.alternatives] == [
        "moe_backend = 'flashinfer_trtllm'",
        "moe_backend = 'flashinfer_cutlass'",
        "moe_backend = 'deep_gemm'",
    ]
    # what the profile asked for: a kernel it disables is no fallback, a backend it chose is marked
    asked = fallbacks.detect(
        MOE_START.read_text(), {"moe_backend": "triton", "disabled_kernels": ["FlashInferFP8ScaledMMLinearKernel"]}
    )
    assert _kinds(asked) == [("moe-backend", 7), ("moe-config", 12)] and asked[0].asked


def test_alternatives_for_ab() -> None:
    """What `ab --against-fallbacks` builds its B sides from: each fallback with an alternative and its overrides."""
    pairs = fallbacks.alternatives(MOE_START.read_text())
    assert [(f.kind, overrides) for f, overrides in pairs] == [
        ("linear-kernel", [{"vllm": {"extra_args": ["--linear-backend", "flashinfer_cutlass"]}}]),
        (
            "moe-backend",
            [{"vllm": {"moe_backend": b}} for b in ("flashinfer_trtllm", "flashinfer_cutlass", "deep_gemm")],
        ),
    ]


@pytest.mark.parametrize(
    ("entry", "expected"),
    [
        ("benign-fp8-moe-triton-fallback-01", [("moe-backend", "Fp8 MoE on TRITON, not FLASHINFER_TRTLLM")]),
        (
            "benign-gb10-marlin-nvfp4-selected-01",
            [
                ("fp4-emulation", "NVFP4 linear layers on MarlinNvFp4LinearKernel, not FlashInferCuteDslNvFp4Linear"),
                ("fp4-emulation", "NvFp4 MoE on MARLIN, not VLLM_CUTLASS (vLLM's first CUDA candidate): Marlin runs"),
            ],
        ),
        (
            "attn-flashinfer-sinks-unsupported-gptoss-01",
            [
                ("attention", "attention on TRITON_ATTN; Triton attention is the only backend vLLM found valid here"),
                ("fp4-emulation", "FP4 MoE on Marlin (older vLLM's wording, MXFP4 or NVFP4)"),
            ],
        ),
    ],
    ids=["fp8-moe-triton", "gb10-marlin-nvfp4", "gptoss-triton-attention"],
)
def test_the_corpus_fallbacks(entry: str, expected: list[tuple[str, str]]) -> None:
    found = fallbacks.detect(CORPUS[entry]["log"])
    assert [(f.kind, f.what[: len(what)]) for f, (_, what) in zip(found, expected, strict=False)] == expected
    assert len(found) == len(expected)


@pytest.mark.parametrize(
    "entry",
    sorted(
        set(CORPUS)
        - {
            "benign-fp8-moe-triton-fallback-01",
            "benign-gb10-marlin-nvfp4-selected-01",
            "attn-flashinfer-sinks-unsupported-gptoss-01",
        }
    ),
)
def test_corpus_logs_without_a_fallback_name_none(entry: str) -> None:
    """Crashes, build errors and benign noise are diagnose's; none of them is a path vLLM fell back to."""
    assert fallbacks.detect(CORPUS[entry]["log"]) == []


def test_the_lines_notes_quotes_from_the_h200_super_run() -> None:
    """NOTES.md, 2026-12-03: "Your GPU does not have native support for FP4" (the seed's warning) is named; the
    dummy weights' negative-scales warning and the JIT monitor's line are not fallbacks. (The run's full log was not
    kept; benchmarks/gpu_nemotron.sh saves the next one's server.log.)"""
    quoted = [
        "Your GPU does not have native support for FP4",
        "NVFP4 Marlin assumes the scales to be >=0, but has encountered negative scales",
        "Triton kernel JIT compilation during inference: _zero_kv_blocks_kernel",
    ]
    found = fallbacks.detect("\n".join(quoted))
    assert _kinds(found) == [("fp4-emulation", 1)]
    assert found[0].fix == "a GPU with FP4 tensor cores (SM100, SM120); on this one Marlin is vLLM's only FP4 path"


def test_serve_says_each_fallback_when_serving(tmp_path: Path) -> None:
    port = free_port()
    plan = serve_plan(stand_in_vllm(port, LOGS / "h200-vllm026-eager-1b-2026-11-30.log"), port, "0.26.0")
    (tmp_path / "config.json").write_text("{}")
    said: list[str] = []
    with launched(plan, str(tmp_path), tmp_path / "vllm.log", said.append, None, ready_timeout_s=60):
        pass
    named = [s for s in said if s.startswith("fallback: ")]
    assert named[0] == (
        "fallback: CUDA graphs off; fix: cuda_graphs = true in the profile (log line 14)"
    )  # the log's first line is serve's header
    assert len(named) == 2


def test_the_h200_super_start_names_every_fallback_it_took() -> None:
    """The full start of Nemotron 3 Super's shape with profiles/sm120.toml on the H200 (vLLM 0.26.0, 2026-12-03,
    benchmarks/gpu_nemotron.sh): every fallback in it is named, the profile's own choices are marked as asked, and
    the default FULL-decode / PIECEWISE-mixed graphs are not a fallback."""
    profile = load_profile("sm120")
    log = (LOGS / "h200-vllm026-nemotron-super-sm120-2026-12-03.log").read_text()
    found = fallbacks.detect(log, profile.settings, profile.env)
    assert [(f.kind, f.line_no, f.asked) for f in found] == [
        ("fp4-emulation", 32, False),
        ("fp4-emulation", 33, True),
        ("attention", 34, True),
        ("fp4-emulation", 35, False),
        ("autotune", 64, False),
    ]
    assert found[0].what == (
        "NVFP4 linear layers on MarlinNvFp4LinearKernel, not FlashInferCuteDslNvFp4LinearKernel: Marlin runs FP4"
        " weights as W4A16: they are dequantized to BF16 in the kernel, no FP4 tensor cores are used"
    )


def test_vllm_032s_eager_line_is_named_too() -> None:
    """vLLM 0.32 (the CPU engine's config/vllm.py:1704, its message as written there) words enforce-eager with JIT
    warmup added; tests/ab/test_against_engine.py sees the CPU engine print it for a cuda_graphs = false base."""
    line = (
        "Enforce eager set, disabling torch.compile, CUDAGraphs, and JIT kernel warmup. This is equivalent to setting "
        "-cc.mode=none -cc.cudagraph_mode=none and --kernel_config.enable_jit_warmup=False"
    )
    (found,) = fallbacks.detect(line, {"cuda_graphs": False})
    assert (found.kind, found.what, found.asked) == ("cuda-graphs", "CUDA graphs off", True)
