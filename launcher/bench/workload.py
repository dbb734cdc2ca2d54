"""What is sent and when: prompts of an exact token length cut from a seeded text (for the served model's own
tokenizer), prompts sharing a prefix, prompts from a dataset file, and request arrival times.

Dataset file format (JSONL, one request per line, UTF-8):
    {"prompt": "text sent as is", "output_tokens": 128}
`output_tokens` is optional (default: --output-len). vLLM bench serve's custom dataset reads the same two keys.
"""

from __future__ import annotations

import json
import math
import random
from dataclasses import dataclass
from pathlib import Path

import aiohttp
import numpy as np

from launcher.bench.client import get_json
from launcher.errors import BadInput, NemolaunchError, NotReady

# a fixed word list for the base text that prompts are cut from: the same prompts on every run with one seed
MAX_DATASET_BYTES = 256 << 20  # read whole: a bound, so /dev/zero or a mistaken file cannot fill memory
MAX_OUTPUT_TOKENS = 1 << 20  # beyond any model's context

_WORD_TEXT = (
    "serve model token kernel graph memory cache batch queue stream latency throughput request tensor "
    "layer expert router weight scale block tile warp thread device driver version profile chain backend "
    "decode prefill attention window context sample logits vocabulary embedding norm residual gate value "
    "key query"
)
WORDS = tuple(_WORD_TEXT.split())


@dataclass(frozen=True)
class Prompt:
    text: str
    input_len: int | None  # tokens, when bench made it exact; None for a dataset prompt
    output_len: int


class Tokenizer:
    """The served model's tokenizer, through vLLM's /tokenize and /detokenize."""

    def __init__(self, session: aiohttp.ClientSession, url: str, model: str, headers: dict[str, str]) -> None:
        self.session, self.url, self.model, self.headers = session, url, model, headers

    async def encode(self, text: str) -> list[int]:
        body = {"model": self.model, "prompt": text}
        try:
            tokens = (await get_json(self.session, "POST", f"{self.url}/tokenize", body, headers=self.headers))[
                "tokens"
            ]
        except (NemolaunchError, KeyError, TypeError) as e:
            raise NotReady(f"the server cannot tokenize ({e})", "bench needs vLLM's /tokenize endpoint") from None
        return list(tokens)

    async def decode(self, ids: list[int]) -> str:
        body = {"model": self.model, "tokens": ids}
        return str(
            (await get_json(self.session, "POST", f"{self.url}/detokenize", body, headers=self.headers))["prompt"]
        )

    async def exact(self, ids: list[int], filler: list[int]) -> str:
        """Text that the server tokenizes to exactly len(ids) tokens, starting from those ids: detokenize and
        re-tokenize is not always a round trip, so adjust from what the server actually sees."""
        n = len(ids)
        prompt = ""
        for _attempt in range(4):
            prompt = await self.decode(ids)
            got = await self.encode(prompt)
            if len(got) == n:
                break
            ids = got[:n] if len(got) > n else got + filler[: n - len(got)]
        return prompt


async def exact_prompts(
    tok: Tokenizer, input_len: int, output_len: int, count: int, seed: int, shared_prefix_len: int = 0
) -> list[Prompt]:
    """`count` prompts of exactly input_len tokens: windows of a seeded base text. With a shared prefix, every
    prompt starts with the same `shared_prefix_len` tokens (up to the last prefix token, which may merge with the
    first token after it) and goes on with its own window."""
    rng = random.Random(seed)
    text = " ".join(rng.choice(WORDS) for _ in range(input_len * 4 + 64))
    base = await tok.encode(text)
    while len(base) < 3 * input_len + 2:  # a tokenizer that packs words into few tokens: make the base longer
        base = base + base
    prefix = base[:shared_prefix_len]
    rest = input_len - shared_prefix_len
    prompts = []
    for _ in range(count):
        start = rng.randrange(shared_prefix_len, max(shared_prefix_len + 1, len(base) - rest * 2))
        ids = prefix + base[start : start + rest]
        prompts.append(Prompt(await tok.exact(ids, base), input_len, output_len))
    return prompts


def read_dataset(path: Path, output_len: int) -> list[Prompt]:
    """The dataset file (format in this module's docstring); a bad line is one clear error naming it."""
    if not path.is_file():  # a device (/dev/zero) or a pipe has no end to read to
        what = "does not exist" if not path.exists() else "is not a regular file"
        raise BadInput(f"--dataset {path} {what}", "give a JSONL file of prompts")
    try:
        with path.open("rb") as f:
            raw = f.read(MAX_DATASET_BYTES + 1)
        if len(raw) > MAX_DATASET_BYTES:
            raise BadInput(
                f"--dataset {path} is larger than {MAX_DATASET_BYTES >> 20} MiB",
                "give a smaller sample of prompts (a level sends at most --num-prompts of them)",
            )
        lines = raw.decode("utf-8").splitlines()
    except (OSError, UnicodeDecodeError) as e:
        raise BadInput(f"cannot read --dataset {path}: {e}") from None
    prompts = []
    for number, line in enumerate(lines, 1):
        if not line.strip():
            continue
        try:
            item = json.loads(line)
            text, out = item["prompt"], item.get("output_tokens", output_len)
            if not isinstance(text, str) or not text or not isinstance(out, int) or isinstance(out, bool):
                raise ValueError
            if not 1 <= out <= MAX_OUTPUT_TOKENS:
                raise ValueError
        except (json.JSONDecodeError, KeyError, TypeError, ValueError, AttributeError):
            raise BadInput(
                f"{path} line {number} is not a dataset entry",
                f'each line must be {{"prompt": "non-empty text", "output_tokens": 1 to {MAX_OUTPUT_TOKENS:,} '
                "(optional)}",
            ) from None
        prompts.append(Prompt(text, None, out))
    if not prompts:
        raise BadInput(f"{path} holds no prompt", 'one JSON object per line: {"prompt": "...", "output_tokens": 128}')
    return prompts


def arrival_offsets(count: int, rate: float, burstiness: float, seed: int) -> list[float]:
    """Seconds from the level's start at which each request is sent, as vLLM bench serve draws them: gaps from a
    gamma distribution of shape `burstiness` and mean 1/rate (shape 1: Poisson; infinite: constant), summed and
    rescaled so the last request goes out at count/rate."""
    if math.isinf(burstiness):
        gaps = np.full(count, 1.0 / rate)
    else:
        gaps = np.random.default_rng(seed).gamma(shape=burstiness, scale=1.0 / (rate * burstiness), size=count)
    offsets = np.cumsum(gaps)
    offsets *= (count / rate) / offsets[-1]
    return [float(x) for x in offsets]
