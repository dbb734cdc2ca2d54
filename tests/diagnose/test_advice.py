"""The advice a logged message carries: each advising verb is found where an imperative stands, and a sentence
that uses the same verbs to tell what happened is not advice."""

from __future__ import annotations

import pytest

from launcher.diagnose.advice import ADVICE_VERBS, advises, message_advice


@pytest.mark.parametrize("verb", ADVICE_VERBS)
def test_each_advice_verb_is_found_where_an_imperative_stands(verb: str) -> None:
    assert advises(f"You should {verb} the model folder.")
    assert advises(f"{verb.capitalize()} the model folder before starting.")
    assert advises(f"The weights do not fit; please {verb} the model folder.")


@pytest.mark.parametrize(
    "sentence",
    [
        "Failed to provide a valid response to the request",
        "The worker will pass the tensor to rank 1",
        "We reduce the batch size to 8 internally",
        "Check failed: x == y",
        "Using the FLASH_ATTN backend for this model",
        "It was raised while the scheduler tried to add the request",
    ],
)
def test_a_sentence_telling_what_happened_is_not_advice(sentence: str) -> None:
    assert not advises(sentence)
    assert message_advice(sentence, knobs_only=False) is None


@pytest.mark.parametrize(
    ("message", "advice"),
    [  # messages of the CPU engine's vLLM 0.32 (v1/spec_decode/draft_model.py, config/vllm.py,
        # v1/executor/ray_utils.py, v1/spec_decode/dflash.py: the advising sentence verbatim, the one before it
        # paraphrased) and of its transformers (verbatim)
        (
            "Cannot infer the draft tensor parallel size. Please pass 'draft_tensor_parallel_size' in the "
            "speculative_config.",
            "Please pass 'draft_tensor_parallel_size' in the speculative_config.",
        ),
        (
            "max_num_batched_tokens (2048) is smaller than max_model_len (8192). This may lead to poor "
            "performance. Consider increasing max_num_batched_tokens to 8192.",
            "Consider increasing max_num_batched_tokens to 8192.",
        ),
        (
            "Ray is not installed. Please install Ray with `pip install ray`.",
            "Please install Ray with `pip install ray`.",
        ),
        (
            "Draft model attention does not support sliding windows. Consider using a different attention "
            "backend, e.g FlashAttention.",
            "Consider using a different attention backend, e.g FlashAttention.",
        ),
        (  # transformers' pipelines/__init__.py: "provide" was not an advice verb before
            "Impossible to instantiate a pipeline with tokenizer specified but not the model as the provided "
            "tokenizer may not be compatible with the default model. Please provide a PreTrainedModel class or a "
            "path/identifier to a pretrained model when providing tokenizer.",
            "Please provide a PreTrainedModel class or a path/identifier to a pretrained model when providing "
            "tokenizer.",
        ),
        (  # transformers' integrations/peft.py
            "Loading a tensor-parallel PEFT adapter requires peft >= 0.21.0, please upgrade your peft installation.",
            "Loading a tensor-parallel PEFT adapter requires peft >= 0.21.0, please upgrade your peft installation.",
        ),
    ],
    ids=["pass", "consider", "install", "use", "provide", "upgrade"],
)
def test_real_messages_give_their_advising_sentence(message: str, advice: str) -> None:
    assert message_advice(message, knobs_only=False) == advice
