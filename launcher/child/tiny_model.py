"""Build a tiny random-weight Llama and a real byte-level BPE tokenizer, offline.

Run by the engine's interpreter. Prints one JSON line describing what it wrote.
    python -I tiny_model.py OUT_DIR                          the tiny model (weights and tokenizer)
    python -I tiny_model.py --tokenizer-only VOCAB OUT_DIR   the tokenizer alone, padded to VOCAB ids (for shapes)
Shapes follow what the vLLM CPU engine accepts (its attention needs head_dim 64, not 16).
"""

import json
import sys
import sysconfig
from pathlib import Path
from typing import Any

# The tokenizer is trained on a fixed list of stdlib modules so that it is the same on every machine
# with the same Python; nothing is downloaded.
CORPUS_MODULES = ("argparse.py", "collections/__init__.py", "json/decoder.py", "pathlib.py", "textwrap.py")
VOCAB_SIZE = 1024
CHAT_TEMPLATE = (
    "{% for m in messages %}<|{{ m['role'] }}|>\n{{ m['content'] }}\n{% endfor %}"
    "{% if add_generation_prompt %}<|assistant|>\n{% endif %}"
)
LETTERS = "abcdefghijklmnopqrstuvwxyz"


def _filler_words(count: int, taken: set[str]) -> list[str]:
    """`count` distinct byte-level tokens (a space, then 3 or more lowercase letters) not already in the vocabulary.
    No merge produces them, so encoding never yields them; decoding one gives a short word."""
    out: list[str] = []
    n, length = 0, 3
    while len(out) < count:
        if n == len(LETTERS) ** length:
            n, length = 0, length + 1
        word, rest = "", n
        for _ in range(length):
            rest, i = divmod(rest, len(LETTERS))
            word = LETTERS[i] + word
        n += 1
        token = "\u0120" + word  # byte-level BPE writes a leading space as U+0120
        if token not in taken:
            out.append(token)
    return out


def build_tokenizer(pad_to: int | None = None) -> tuple[Any, list[str]]:
    """The project's tokenizer: BPE (1024 ids) trained on a few stdlib modules. With pad_to, filler tokens are
    appended to the BPE vocabulary up to exactly pad_to ids, so that every id a model of that vocabulary samples
    decodes to text (ids past a tokenizer's end decode to nothing in vLLM)."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

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
    if pad_to is not None:
        size = tok.get_vocab_size()
        if pad_to < size:
            raise SystemExit(f"vocab_size {pad_to} is smaller than the tokenizer's {size} ids")
        doc = json.loads(tok.to_str())
        vocab = doc["model"]["vocab"]
        for i, word in enumerate(_filler_words(pad_to - size, set(vocab)), start=size):
            vocab[word] = i
        tok = Tokenizer.from_str(json.dumps(doc))
    fast = PreTrainedTokenizerFast(
        tokenizer_object=tok,
        bos_token="<s>",
        eos_token="</s>",
        unk_token="<unk>",
        pad_token="</s>",
        model_max_length=4096 if pad_to is None else 1 << 30,
    )
    fast.chat_template = CHAT_TEMPLATE
    return fast, files


def build(out: Path) -> dict[str, object]:
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    fast, files = build_tokenizer()
    config = LlamaConfig(
        vocab_size=len(fast),
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
    return {"path": str(out), "parameters": params, "vocab_size": len(fast), "trained_on": files}


def build_padded_tokenizer(vocab_size: int, out: Path) -> dict[str, object]:
    fast, files = build_tokenizer(pad_to=vocab_size)
    out.mkdir(parents=True, exist_ok=True)
    fast.save_pretrained(out)
    ids = {"bos_token_id": fast.bos_token_id, "eos_token_id": fast.eos_token_id, "pad_token_id": fast.pad_token_id}
    return {"path": str(out), "vocab_size": len(fast), "trained_ids": VOCAB_SIZE, **ids, "trained_on": files}


if __name__ == "__main__":
    args = sys.argv[1:]
    if len(args) == 1:
        print(json.dumps(build(Path(args[0]))))
    elif len(args) == 3 and args[0] == "--tokenizer-only" and args[1].isdigit():
        print(json.dumps(build_padded_tokenizer(int(args[1]), Path(args[2]))))
    else:
        raise SystemExit("usage: tiny_model.py OUT_DIR | tiny_model.py --tokenizer-only VOCAB_SIZE OUT_DIR")
