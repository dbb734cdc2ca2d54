"""Build a tiny random-weight Llama and a real byte-level BPE tokenizer, offline.

Run by the engine's interpreter: python -I tiny_model.py OUT_DIR. Prints one JSON line describing it.
Shapes follow what the vLLM CPU engine accepts (its attention needs head_dim 64, not 16).
"""

import json
import sys
import sysconfig
from pathlib import Path

# The tokenizer is trained on a fixed list of stdlib modules so that it is the same on every machine
# with the same Python; nothing is downloaded.
CORPUS_MODULES = ("argparse.py", "collections/__init__.py", "json/decoder.py", "pathlib.py", "textwrap.py")
VOCAB_SIZE = 1024
CHAT_TEMPLATE = (
    "{% for m in messages %}<|{{ m['role'] }}|>\n{{ m['content'] }}\n{% endfor %}"
    "{% if add_generation_prompt %}<|assistant|>\n{% endif %}"
)


def build(out: Path) -> dict[str, object]:
    import torch
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import LlamaConfig, LlamaForCausalLM, PreTrainedTokenizerFast

    stdlib = Path(sysconfig.get_paths()["stdlib"])
    files = [str(stdlib / m) for m in CORPUS_MODULES if (stdlib / m).is_file()]
    if not files:
        raise SystemExit(f"no training text found under {stdlib}")
    specials = ["<s>", "</s>", "<unk>", "<|system|>", "<|user|>", "<|assistant|>"]
    tok = Tokenizer(models.BPE(unk_token="<unk>"))
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=VOCAB_SIZE,
        special_tokens=specials,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tok.train(files, trainer)
    fast = PreTrainedTokenizerFast(
        tokenizer_object=tok,
        bos_token="<s>",
        eos_token="</s>",
        unk_token="<unk>",
        pad_token="</s>",
        model_max_length=4096,
    )
    fast.chat_template = CHAT_TEMPLATE
    config = LlamaConfig(
        vocab_size=tok.get_vocab_size(),
        hidden_size=128,
        intermediate_size=256,
        num_hidden_layers=2,
        num_attention_heads=2,
        num_key_value_heads=1,
        head_dim=64,
        max_position_embeddings=4096,
        bos_token_id=fast.bos_token_id,
        eos_token_id=fast.eos_token_id,
        pad_token_id=fast.pad_token_id,
        tie_word_embeddings=False,
        torch_dtype="bfloat16",
    )
    torch.manual_seed(0)
    model = LlamaForCausalLM(config).to(torch.bfloat16)
    out.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(out, safe_serialization=True)
    fast.save_pretrained(out)
    params = sum(p.numel() for p in model.parameters())
    return {"path": str(out), "parameters": params, "vocab_size": tok.get_vocab_size(), "trained_on": files}


if __name__ == "__main__":
    if len(sys.argv) != 2:
        raise SystemExit("usage: tiny_model.py OUT_DIR")
    print(json.dumps(build(Path(sys.argv[1]))))
