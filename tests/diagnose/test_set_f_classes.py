"""Failure classes closed from the sixth fresh set's misses (tests/fixtures/diagnose/fresh-2026-12-03f.jsonl, read
after it was measured): each class is tested with the set's excerpt (the thread is cited) and, where the class has
other wordings in a library's source, with that message (marked "not a capture", with its file and version)."""

from __future__ import annotations

import pytest

from tests.diagnose.texts import assert_named, diagnose_text

CASES = [
    # (where the line comes from, line, rule, severity, what the fix must name)
    (
        "https://github.com/opendatalab/MinerU/issues/3416",
        "SGlang only supports sm 75 and  above",
        "gpu-too-old-for-vllm",
        "error",
        "SGLang: sm75+",
    ),
    (
        "https://github.com/vllm-project/vllm/issues/20855",
        "Received a Qwen2VLImageProcessorFast for argument image_processor, but a Qwen2VLImageProcessor was expected",
        "processor-class-mismatch",
        "error",
        "install the transformers version the engine release pins",
    ),
    (
        "not a capture: transformers 5.19 transformers/processing_utils.py:1018, a tuple of classes",
        "TypeError: Received a LlamaTokenizer for argument tokenizer, but a ('PreTrainedTokenizerBase', None) was "
        "expected.",
        "processor-class-mismatch",
        "error",
        "transformers",
    ),
    (
        "https://github.com/vllm-project/vllm/issues/1455",
        "RuntimeError: Unsupported head size: 32",
        "attention-head-size-unsupported",
        "error",
        "attention_kernels.cu",
    ),
    (
        "not a capture: vLLM 0.3-0.6 vllm/attention/backends/*.py, the check in an attention Impl's __init__",
        "ValueError: Head size 208 is not supported by PagedAttention. Supported head sizes are: "
        "[64, 80, 96, 112, 120, 128, 192, 256].",
        "attention-head-size-unsupported",
        "error",
        "head size 208",
    ),
    (
        "https://github.com/vllm-project/vime/pull/186",
        "ValueError: The output_size of gate's and up's weight = 96 is not\n"
        "            divisible by weight quantization block_n = 128.",
        "fp8-block-shape-split",
        "error",
        "--enable-expert-parallel",
    ),
    (
        "not a capture: vLLM 0.32 vllm/model_executor/layers/quantization/utils/fp8_utils.py:1326",
        "ValueError: Weight input_size_per_partition = 2400 is not divisible by weight quantization block_k = 128.",
        "fp8-block-shape-split",
        "error",
        "multiple of 128",
    ),
    (
        "https://github.com/huggingface/text-generation-inference/issues/2037",
        "RuntimeError: FlashAttention only supports Ampere GPUs or newer.",
        "flash-attention-needs-ampere",
        "error",
        "USE_FLASH_ATTENTION=False",
    ),
    (
        "https://github.com/BatsResearch/bonito/issues/22",
        "ValueError: No available memory for the cache blocks. Try increasing `gpu_memory_utilization` when "
        "initializing the engine.",
        "kv-cache-no-blocks",
        "error",
        "enforce_eager=True",
    ),
    (
        "https://github.com/unslothai/unsloth/issues/482",
        "ValueError: Unknown quantization method: bitsandbytes. Must be one of ['awq', 'gptq', 'squeezellm', "
        "'marlin'].",
        "unknown-quantization-method",
        "error",
        "save_pretrained_merged",
    ),
    (
        "https://github.com/huggingface/text-generation-inference/pull/1427",
        '{"error":"Template error: template not found","error_type":"template_error"}',
        "no-chat-template",
        "error",
        "chat_template field of the model's tokenizer_config.json",
    ),
    (
        "https://github.com/huggingface/text-generation-inference/issues/1778",
        "2024-04-20T07:20:49.339061Z  WARN text_generation_launcher: Could not import Flash Attention enabled "
        "models: Flash Attention is not installed.\n"
        "Use the official Docker image (ghcr.io/huggingface/text-generation-inference:latest) or install flash "
        "attention with `cd server && make install install-flash-attention`\n\n"
        "2024-04-20T07:20:49.339802Z  WARN text_generation_launcher: Could not import Mamba: No module named "
        "'mamba_ssm'\n",
        "kernel-package-missing-fallback",
        "warning",
        "make install install-flash-attention",
    ),
    (
        "https://github.com/InternLM/lmdeploy/issues/2069",
        "lmdeploy - WARNING - Fallback to pytorch engine because turbomind engine is not installed correctly. If you "
        "insist to use turbomind engine, you may need to reinstall lmdeploy from pypi or build from source and try "
        "again.",
        "kernel-package-missing-fallback",
        "warning",
        "pip install lmdeploy",
    ),
]


@pytest.mark.parametrize(("where", "line", "rule", "severity", "names"), CASES, ids=[c[0] for c in CASES])
def test_a_line_of_the_class_reaches_its_rule(where: str, line: str, rule: str, severity: str, names: str) -> None:
    assert_named(line, rule, names, severity)


def test_a_kernel_fallback_is_no_error() -> None:
    """The server goes on with a slower path: a warning, never an error, however the log reads after it."""
    line = CASES[-1][1] + "\nlmdeploy - INFO - Loading model weights\n"
    assert not [f for f in diagnose_text(line) if f["severity"] == "error"]


@pytest.mark.parametrize(
    "line",
    [
        # not a capture: TGI router/src/validation.rs, ValidationError::MaxTotalTokens (TGI 2.x)
        "Input validation error: `inputs` tokens + `max_new_tokens` must be <= 4096. Given: 4000 `inputs` tokens and "
        "200 `max_new_tokens`",
        # not a capture: TGI router/src/validation.rs, ValidationError::InputLength (TGI 2.x)
        "Input validation error: `inputs` must have less than 1024 tokens. Given: 1500",
    ],
)
def test_tgi_refusing_a_long_request_names_its_limits(line: str) -> None:
    """The class of vllm#1351 (fresh-2026-12-03f: a request over the context) in TGI's words."""
    assert_named(line, "request-exceeds-context", "--max-total-tokens", "warning")
