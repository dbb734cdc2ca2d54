"""Failure classes whose fix is read from the line itself, on public threads' lines (tests/fixtures/diagnose/
cases.jsonl): a command line argparse refused (any CLI), a compiled extension built against another torch (any
package), a full disk or quota (any folder)."""

from __future__ import annotations

import json

import pytest

from tests.diagnose.texts import diagnose_text
from tests.helpers import FIXTURES

CASES = {
    json.loads(line)["source"]: json.loads(line)
    for line in (FIXTURES / "diagnose" / "cases.jsonl").read_text().splitlines()
}


def _finding(source: str, rule: str) -> dict[str, object]:
    findings = {f["id"]: f for f in diagnose_text(CASES[source]["excerpt"])}
    assert rule in findings, sorted(findings)
    return findings[rule]


@pytest.mark.parametrize(
    ("source", "rule", "named"),
    [
        (
            "https://github.com/unslothai/unsloth/pull/2811",
            "cli-invalid-choice",
            ["--dtype does not take 'torch.bfloat16'", "'auto', 'bfloat16', 'float', 'float16', 'float32', 'half'"],
        ),
        (
            "https://github.com/intel/llm-scaler/issues/403",
            "cli-invalid-choice",
            ["--attention-backend does not take 'torch_sdpa'", "'triton', 'torch_native'", "'intel_xpu'"],
        ),
        ("https://github.com/n1nj4sec/pupy/issues/87", "cli-invalid-choice", ["launcher does not take '127.0.0.1'"]),
        ("https://github.com/vllm-project/vllm/issues/27347", "cli-unrecognized-arguments", ["--all2all-backend"]),
        ("https://github.com/vllm-project/vllm/issues/13150", "cli-missing-arguments", ["give model_tag"]),
    ],
    ids=["vllm-dtype", "sglang-attention-backend", "any-cli", "unrecognized", "required"],
)
def test_a_refused_command_line_names_the_argument_and_what_it_accepts(
    source: str, rule: str, named: list[str]
) -> None:
    finding = _finding(source, rule)
    assert finding["severity"] == "error"
    for text in named:
        assert text in str(finding["fix"]), finding["fix"]


@pytest.mark.parametrize(
    ("source", "package", "library"),
    [
        ("https://github.com/flashinfer-ai/flashinfer/issues/911", "flashinfer", "flashinfer_kernels.abi3.so"),
        (
            "https://github.com/Dao-AILab/flash-attention/issues/784",
            "flash_attn",
            "flash_attn_2_cuda.cpython-310-x86_64-linux-gnu.so",
        ),
        (
            "https://github.com/leonardodalinky/pytorch_fpsample/issues/8",
            "torch_fpsample",
            "_core.cpython-312-x86_64-linux-gnu.so",
        ),
        ("https://github.com/sgl-project/sglang/issues/36462", "the package that ships it", "common_ops.abi3.so"),
        ("https://github.com/flashinfer-ai/flashinfer/issues/872", "flashinfer", "flashinfer_kernels.abi3.so"),
        ("https://github.com/vllm-project/vllm/pull/27378", "xformers", "_C.so"),
    ],
    ids=["flashinfer-aot", "flash-attn", "any-extension", "sgl-kernel-without-a-path", "at-a-call", "ldd"],
)
def test_an_extension_built_for_another_torch_names_its_package_and_library(
    source: str, package: str, library: str
) -> None:
    fix = str(_finding(source, "extension-torch-abi")["fix"])
    assert fix.startswith(f"{package} (its library {library} lacks _ZN"), fix
    assert "installed torch" in fix


def test_vllms_own_compiled_ops_are_the_same_class() -> None:
    """vllm#5501 (cases.jsonl): vLLM's _C, quoted in a warning."""
    fix = str(_finding("https://github.com/vllm-project/vllm/issues/5501", "extension-torch-abi")["fix"])
    assert fix.startswith("vllm (its library _C.abi3.so lacks _ZN5torch7Library"), fix


def test_the_torch_a_package_needs_is_read_from_pips_line() -> None:
    finding = _finding("https://github.com/hiyouga/EasyR1/issues/27", "pip-torch-pin-conflict")
    assert finding["fix"] == (
        "install the torch vllm requires: pip install 'torch==2.5.1' (or a vllm release built for torch 2.4.0+cu124)"
    )


@pytest.mark.parametrize(
    ("source", "rule", "severity", "named"),
    [
        (
            "https://github.com/InternLM/lmdeploy/issues/3457",
            "ray-temp-disk-nearly-full",
            "warning",
            ["/tmp/ray/session_2025-03-25_17-33-57_554404_959134", "RAY_TMPDIR"],
        ),
        (  # the path is on its own line: the thread's log wrapped it
            "https://github.com/ray-project/ray/issues/36959",
            "ray-temp-disk-nearly-full",
            "warning",
            ["/tmp/ray/session_2023-06-29_11-21-28_818264_5598", "RAY_TMPDIR"],
        ),
        (
            "https://github.com/kijai/ComfyUI-Geowizard/issues/10",
            "disk-full",
            "error",
            ["~/.cache/huggingface/hub/models--lemonaddie--geowizard", "HF_HOME"],
        ),
        (
            "https://github.com/mikeizbicki/cmc-csci145-math166/issues/137",
            "disk-full",
            "error",
            ["the folder being written", "TMPDIR", "VLLM_CACHE_ROOT", "TORCHINDUCTOR_CACHE_DIR", "RAY_TMPDIR"],
        ),
        ("https://github.com/huggingface/lerobot/issues/59", "disk-full", "error", ["TMPDIR", "PIP_CACHE_DIR"]),
    ],
    ids=["ray-session", "ray-session-wrapped", "hf-cache-path", "quota", "pip-install"],
)
def test_a_full_disk_names_the_folder_and_where_to_move_it(
    source: str, rule: str, severity: str, named: list[str]
) -> None:
    finding = _finding(source, rule)
    assert finding["severity"] == severity
    for text in named:
        assert text in str(finding["fix"]), finding["fix"]


def test_rays_disk_warning_in_a_running_server_is_not_an_error() -> None:
    """vllm!26278's log: the raylet warned every ten seconds while the server ran."""
    line = (
        "(APIServer pid=132135) (raylet) [2025-12-23 23:06:29,336 E 133251 133275] (raylet) file_system_monitor.cc:116:"
        " /tmp/ray/session_2025-12-23_22-55-15_211286_132135 is over 95% full, available space: 46.5185 GB; capacity:"
        " 7096.47 GB. Object creation will fail if spilling is required.\n"
    )
    findings = diagnose_text(line * 5)
    assert [(f["id"], f["severity"]) for f in findings] == [("ray-temp-disk-nearly-full", "warning")]
