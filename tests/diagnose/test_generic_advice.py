"""The advice a failure's own message carries, read without the curated rules (as for a failure no rule was
written for): the knob an error names, the advice printed in the lines under it, the package its words say is
missing. Excerpts are quoted from the fixture sets (tests/fixtures/diagnose), by their thread."""

from __future__ import annotations

import pytest

from launcher.diagnose.advice import advises, missing_packages, named_knobs
from launcher.diagnose.findings import Finding
from launcher.diagnose.index import load_index
from launcher.diagnose.run import diagnose_blocks
from tests.diagnose.test_generic_reading import excerpt
from tests.diagnose.texts import knowledge_base


def generic(source: str) -> list[Finding]:
    """The findings for a thread's excerpt with no curated rule and no message index: the generic fallback alone."""
    return diagnose_blocks([excerpt(source).encode()], rules=[])[0]


@pytest.mark.parametrize(
    ("source", "names"),
    [
        # the flag an error is about
        ("https://github.com/SemiAnalysisAI/InferenceX/issues/2128", "it names --mem-fraction-static"),
        # advice in parentheses
        ("https://github.com/NVIDIA/nccl/issues/1410", "run with NCCL_DEBUG=INFO for details"),
        # a list of workarounds in the lines under the exception
        ("https://github.com/huggingface/transformers/issues/17544", "Downgrade the protobuf package to 3.20.x"),
        # torch's advice printed a few lines under the CUDA error
        ("https://github.com/vllm-project/vllm/issues/40756", "consider passing CUDA_LAUNCH_BLOCKING=1"),
        # a module Python could not import
        ("https://github.com/NVlabs/Tool-N1/issues/2", "install the package that provides 'vllm'"),
        # two packages of different versions
        ("https://github.com/NVIDIA-NeMo/Export-Deploy/pull/679", "pip install 'flashinfer-cubin==0.6.10'"),
    ],
    ids=["flag-in-error", "parenthesis", "list-below", "lines-below", "no-module", "version-mismatch"],
)
def test_the_fallback_names_what_the_message_names(source: str, names: str) -> None:
    found = [f for f in generic(source) if f.rule.id == "message-advice"]
    assert found and names in found[0].fix(), [(f.rule.id, f.fix()) for f in generic(source)]


def test_help_pointers_and_error_codes_are_not_advice() -> None:
    # https://github.com/NVlabs/FoundationPose/issues/382: docker's "Run 'docker run --help' for more information"
    assert not advises("Run 'docker run --help' for more information")
    # https://github.com/vllm-project/vllm/issues/19613: NCCL's error code is no variable to set
    said = "NcclError: NCCL_ERROR_SYSTEM_ERROR: unhandled system error (run with NCCL_DEBUG=INFO for details)"
    assert named_knobs(said, advising_only=False) == ["NCCL_DEBUG"]


def test_a_warning_names_only_what_its_advice_names() -> None:
    # https://github.com/vllm-project/vllm/issues/7074: torch's Gloo warning, advice after a fallback
    said = (
        "Warning: Unable to resolve hostname to a (local) address. Using the loopback address as fallback. "
        "Manually set the network interface to bind to with GLOO_SOCKET_IFNAME. (function operator())"
    )
    assert named_knobs(said, advising_only=True) == ["GLOO_SOCKET_IFNAME"]
    # constructed: a quoted name outside advice (a checkpoint's tensor) is not a knob
    assert named_knobs("KeyError: 'language_model.embed_tokens.weight' is missing", advising_only=False) == []


def test_a_resolver_conflict_names_the_version_to_install() -> None:
    # https://github.com/hiyouga/EasyR1/issues/27: pip's resolver
    said = "vllm 0.7.3 requires torch==2.5.1, but you have torch 2.4.0+cu124 which is incompatible."
    assert missing_packages(said) == ["pip install 'torch==2.5.1'"]


@pytest.mark.parametrize(
    ("source", "names"),
    [
        ("https://github.com/sgl-project/sglang/issues/322", "--mem-fraction-static"),  # a bare line, no error word
        ("https://github.com/hiyouga/LlamaFactory/issues/6472", "gpu_memory_utilization"),  # a thread's title
        ("https://github.com/hiyouga/EasyR1/issues/27", "pip install 'torch==2.5.1'"),  # pip's resolver
    ],
    ids=["sglang-memory", "kv-cache", "pip-resolver"],
)
def test_a_line_that_says_what_is_wrong_and_what_to_change_is_a_warning(source: str, names: str) -> None:
    found = [(f.rule.id, str(f.severity), f.fix()) for f in generic(source)]
    assert [(rule, severity) for rule, severity, _ in found] == [("message-advice", "warning")]
    assert names in found[0][2]


@pytest.mark.parametrize(
    "source",
    [
        "https://github.com/vllm-project/vllm/issues/9990",  # "[DEPRECATED] ... Please remove --use-v2-block-manager"
        "https://github.com/gladiaio/gladia/issues/447",  # "TORCH_HUB is deprecated, please use env TORCH_HOME"
        "https://github.com/ray-project/ray/issues/15494",  # Ray's /dev/shm note, advice for performance
    ],
    ids=["deprecated-flag", "deprecated-variable", "performance-note"],
)
def test_advice_for_the_better_in_a_benign_log_is_no_finding(source: str) -> None:
    assert "message-advice" not in [f.rule.id for f in generic(source)]


def test_kv_cache_sizing_before_the_v1_engine_is_the_profiling_stage() -> None:
    # https://github.com/OpenRLHF/OpenRLHF/issues/336: vLLM 0.4's "# GPU blocks" line, then initialize_cache failed
    stages = {f.stage for f in generic("https://github.com/OpenRLHF/OpenRLHF/issues/336")}
    assert stages == {"memory profiling"}


@pytest.mark.parametrize(
    ("source", "names"),
    [
        # the raise site's message names code, not a knob: the stage's remedy stands with it
        ("https://github.com/OpenRLHF/OpenRLHF/issues/336", "lower --max-model-len"),
        # Triton's assertion, and its advice on the next line
        ("https://github.com/triton-lang/triton/pull/2883", "Please create a symlink of libcuda.so"),
    ],
    ids=["stage-remedy", "advice-below"],
)
def test_an_index_finding_carries_the_stage_and_the_advice_below(
    source: str, names: str, request: pytest.FixtureRequest
) -> None:
    index = load_index(request.getfixturevalue("engine_python"))[0]
    found, _ = diagnose_blocks([excerpt(source).encode()], rules=[], index=index)
    fixes = [f.fix() for f in found if f.origin == "index"]
    assert any(names in fix for fix in fixes), [(f.rule.id, f.fix()) for f in found]


def test_a_vague_index_match_gives_way_to_the_root_error(request: pytest.FixtureRequest) -> None:
    # https://github.com/QwenLM/Qwen2.5-Omni/issues/340: "AttributeError: 'tuple' object has no attribute 'ndim'"
    # matches torch's short template "… has no attribute `…`" of an unrelated function; the log's own root error
    # (a programming error) must still be said
    index = load_index(request.getfixturevalue("engine_python"))[0]
    source = "https://github.com/QwenLM/Qwen2.5-Omni/issues/340"
    found, _ = diagnose_blocks([excerpt(source).encode()], rules=knowledge_base(), index=index)
    assert "code-bug" in [f.rule.id for f in found], [(f.rule.id, f.fix()) for f in found]
