"""Secrets: where nemolaunch finds an API key, and how anything it writes or prints is kept free of secrets.

Redaction works two ways, because a name alone misses `--url http://user:pass@host` and a value alone misses
a short password: a variable or key whose *name* says secret (TOKEN, KEY, PASS, PWD, AUTH, ...) loses its
value, and any string whose *shape* is a secret (URL credentials, the token formats of Hugging Face, OpenAI,
GitHub, AWS, Slack, a bearer header) or that equals a secret value seen this run is masked wherever it sits.
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping
from pathlib import Path
from typing import Any

MASK = "<redacted>"
API_KEY_VARIABLES = ("NEMOLAUNCH_API_KEY", "VLLM_API_KEY", "OPENAI_API_KEY")

_SECRET_NAME = re.compile(r"KEY|TOKEN|SECRET|PASS|PWD|AUTH|CREDENTIAL|COOKIE|SESSION|PRIVATE|SIGNATURE", re.IGNORECASE)
# a name that contains a secret word but names no secret: keep these readable
# (ab's "passes" and "warmup_passes" are bench passes, not passwords)
_NOT_SECRET_NAME = re.compile(
    r"^(VLLM_)?(KEY_?VALUE|KV_?CACHE\w*|MAX_?TOKENS?\w*|\w*TOKENIZER\w*|PASSTHROUGH|\w*PASSES)$", re.I
)
# a count of text tokens (mean_prompt_tokens, total_output_tokens, num_tokens): a number under such a name is no
# secret, and masking it broke the documents' numbers (bench's mean_prompt_tokens read "<redacted>" on the H200)
_TOKEN_COUNT_NAME = re.compile(r"TOKENS|TOKEN_?COUNT|NUM_?TOKEN", re.IGNORECASE)
_URL_CREDENTIALS = re.compile(r"(?P<scheme>[a-zA-Z][a-zA-Z0-9+.-]*://)(?P<user>[^/\s:@]*):(?P<password>[^/\s@]+)@")
_TOKEN_SHAPES = re.compile(
    r"\bhf_[A-Za-z0-9]{20,}"  # Hugging Face
    r"|\bsk-(?:proj-|ant-)?[A-Za-z0-9_-]{20,}"  # OpenAI, Anthropic
    r"|\bgh[pousr]_[A-Za-z0-9]{30,}|\bgithub_pat_[A-Za-z0-9_]{30,}"  # GitHub
    r"|\bAKIA[0-9A-Z]{16}\b"  # AWS access key id
    r"|\bxox[abprs]-[A-Za-z0-9-]{10,}"  # Slack
    r"|(?i:\bbearer\s+)[A-Za-z0-9._~+/=-]{8,}"  # an Authorization header's value
)
_known_values: set[str] = set()


def is_secret_name(name: str) -> bool:
    return bool(_SECRET_NAME.search(name)) and not _NOT_SECRET_NAME.match(name)


def remember(value: str | None) -> None:
    """A secret value this process holds (an API key it read): masked wherever it appears from now on."""
    if value and len(value) >= 4:
        _known_values.add(value)


def redact_text(text: str) -> str:
    """`text` with URL passwords, token-shaped strings and remembered secret values masked."""
    text = _URL_CREDENTIALS.sub(lambda m: f"{m['scheme']}{m['user']}:{MASK}@", text)
    text = _TOKEN_SHAPES.sub(MASK, text)
    for value in sorted(_known_values, key=len, reverse=True):
        text = text.replace(value, MASK)
    return text


def redact_env(environ: Mapping[str, str]) -> dict[str, str]:
    """Variables with secret names lose their values; every other value is masked by shape."""
    for name, value in environ.items():
        if is_secret_name(name):
            remember(value)
    return {k: (MASK if is_secret_name(k) else redact_text(v)) for k, v in environ.items()}


def _numbers(value: Any) -> bool:
    """A number, or lists of numbers (ab's answer_tokens: the token ids of each greedy answer)."""
    if isinstance(value, list | tuple):
        return all(_numbers(v) for v in value)
    return isinstance(value, int | float) and not isinstance(value, bool)


def _masked(key: Any, value: Any) -> bool:
    """Whether a value goes under the mask for its key's name alone: any value under a secret-named key, except
    numbers under a name that counts or lists tokens (resume reads ab's answer_tokens back: masking broke it)."""
    if not (isinstance(key, str) and is_secret_name(key) and value):
        return False
    return not (_numbers(value) and _TOKEN_COUNT_NAME.search(key))


def redact_obj(obj: Any) -> Any:
    """A JSON-like document with every secret masked: values under secret-named keys (but a token count), and
    secret-shaped strings anywhere (argv lists included: the value after `--api-key` or `--hf-token` is masked
    too)."""
    if isinstance(obj, Mapping):
        return {k: (MASK if _masked(k, v) else redact_obj(v)) for k, v in obj.items()}
    if isinstance(obj, list | tuple):
        out, hide_next = [], False
        for item in obj:
            if hide_next and isinstance(item, str):
                out.append(MASK)
            else:
                out.append(redact_obj(item))
            hide_next = isinstance(item, str) and item.startswith("--") and is_secret_name(item.split("=", 1)[0])
            if hide_next and "=" in item:
                out[-1], hide_next = f"{item.split('=', 1)[0]}={MASK}", False
        return out if isinstance(obj, list) else tuple(out)
    if isinstance(obj, str):
        return redact_text(obj)
    return obj


def bearer(key: str | None) -> dict[str, str]:
    """The header that sends `key` to an OpenAI-compatible server (none without a key)."""
    return {"Authorization": f"Bearer {key}"} if key else {}


def api_key(key_file: Path | None = None, environ: Mapping[str, str] = os.environ) -> str | None:
    """The API key for a server that asks for one: the first line of `key_file`, else $NEMOLAUNCH_API_KEY, else
    $VLLM_API_KEY (what vLLM itself reads), else $OPENAI_API_KEY. The key is remembered, so it is masked in
    anything nemolaunch writes or prints. Raises OSError/ValueError on an unreadable or empty file."""
    key: str | None = None
    if key_file is not None:
        lines = key_file.read_text(encoding="utf-8").strip().splitlines()
        if not lines or not lines[0].strip():
            raise ValueError(f"{key_file} is empty")
        key = lines[0].strip()
    else:
        key = next((environ[v] for v in API_KEY_VARIABLES if environ.get(v)), None)
    remember(key)
    return key
