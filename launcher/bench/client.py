"""The request client: one streamed completion, timed the way vLLM bench serve times it, and the server
questions bench asks first (what it serves, whether it is OpenAI-compatible at all).

It asks the server for what vLLM's own client asks (`stream_options.include_usage`: one usage chunk at the end)
and nothing more: continuous usage stats on every chunk cost the server's single API process work per token.
The per-chunk path is cheap on purpose, because with hundreds of streams in one process the client's own CPU
per chunk becomes the measurement: a chunk of a completion stream is counted from its bytes (a payload that ends
with its choices, `}]}`, as vLLM's token chunks do, is not even searched; JSON is parsed only for the usage chunk,
errors, chat deltas and chunks a server sends with usage), and only its arrival time is kept; the statistics are
computed after the stream ends.
"""

from __future__ import annotations

import asyncio
import itertools
import json
import time
from dataclasses import dataclass, field
from typing import Any

import aiohttp

from checks.secrets import bearer
from launcher.errors import NemolaunchError, NotReady
from launcher.serve.sse import DONE, SSEReader


@dataclass(slots=True)
class RequestRecord:
    """One request as it went; one line of requests.jsonl."""

    level: str
    repeat: int
    index: int
    input_len: int | None = None  # asked for (None: a dataset prompt of unknown length)
    output_len: int = 0  # asked for
    ok: bool = False
    error_class: str | None = None  # http-NNN, timeout, stalled, disconnected, connect, malformed, server-error
    error: str | None = None
    start_s: float = 0.0  # from the level's start
    queue_s: float = 0.0  # waited in the client for a free slot under the concurrency cap (request-rate mode)
    ttft_s: float | None = None
    e2e_s: float | None = None
    itl_s: list[float] = field(default_factory=list)
    chunks: int = 0
    output_tokens: int = 0
    prompt_tokens: int | None = None  # as the server counted them (usage)
    completion_tokens: int | None = None
    length_ok: bool | None = None


class Failure(Exception):
    def __init__(self, error_class: str, message: str) -> None:
        super().__init__(message)
        self.error_class = error_class


@dataclass(frozen=True)
class Target:
    """Where requests go: the server, the model, the endpoint, the headers (a bearer key when one is given)."""

    url: str
    model: str
    endpoint: str = "completions"
    api_key: str | None = field(default=None, repr=False)

    @property
    def headers(self) -> dict[str, str]:
        return bearer(self.api_key)

    def request(self, prompt: str, output_len: int) -> tuple[str, dict[str, Any]]:
        # what vLLM bench serve sends, nothing more: no min_tokens (a logits processor on every step; ignore_eos
        # already runs to max_tokens), no temperature (the server's default sampling, as vLLM's client gets)
        common: dict[str, Any] = {
            "model": self.model,
            "max_tokens": output_len,
            "ignore_eos": True,
            "stream": True,
            "stream_options": {"include_usage": True},
        }
        if self.endpoint == "chat":
            return f"{self.url}/v1/chat/completions", {**common, "messages": [{"role": "user", "content": prompt}]}
        return f"{self.url}/v1/completions", {**common, "prompt": prompt}


def _chunk_tokens(data: bytes, chat: bool, record: RequestRecord) -> int | None:
    """How many tokens a `data:` payload carries: None when the server did not say (one chunk, count later from
    the final usage), 0 for a chunk with no token (usage only, a role delta)."""
    if not (data.startswith(b"{") and data.endswith(b"}")):
        raise Failure("malformed", f"not JSON: {data[:80]!r}")
    if not chat and b'"usage"' not in data and b'"error"' not in data:
        return None if b'"choices":[{' in data or b'"choices": [{' in data else 0  # the hot path: no parse
    try:
        event = json.loads(data)
    except json.JSONDecodeError:
        raise Failure("malformed", f"not JSON: {data[:80]!r}") from None
    if "error" in event:
        raise Failure("server-error", str(event["error"])[:200])
    choices = event.get("choices") or []
    usage = event.get("usage") or {}
    if usage.get("completion_tokens") is not None:
        record.prompt_tokens = usage.get("prompt_tokens")
        record.completion_tokens = usage["completion_tokens"]
    if not choices:
        return 0
    if chat and not any((c.get("delta") or {}).get("content") for c in choices):
        return 0  # the role chunk, or an empty delta: no token yet
    return -1 if usage.get("completion_tokens") is not None else None  # -1: exact count in completion_tokens


async def one_request(
    session: aiohttp.ClientSession,
    target: Target,
    prompt: str,
    record: RequestRecord,
    level_start: float,
    request_timeout_s: float,
    stall_timeout_s: float,
) -> None:
    url, body = target.request(prompt, record.output_len)
    chat = target.endpoint == "chat"
    times: list[float] = []  # arrival of each chunk that carried a token
    counts: list[int] = []  # the server's running completion count at those chunks, when it sends one
    start = time.perf_counter()
    record.start_s = start - level_start
    try:
        async with (
            asyncio.timeout(request_timeout_s),
            session.post(url, json=body, headers=target.headers) as resp,
        ):
            if resp.status != 200:
                raise Failure(f"http-{resp.status}", (await resp.text())[:200])
            done = False
            reader = SSEReader()
            loop = asyncio.get_running_loop()
            # one deadline per request, rather than a wait_for per line, pushed back only when a tenth of the stall
            # timeout has passed since the last push (a timer per block is a heap push per chunk): a stall is
            # reported after between 1 and 1.1 stall timeouts without data
            slack = stall_timeout_s / 10
            stall = asyncio.timeout(stall_timeout_s + slack)
            pushed = time.perf_counter()
            try:
                async with stall:
                    async for block in resp.content.iter_any():
                        now = time.perf_counter()  # every event in this block arrived now
                        if now - pushed > slack:
                            stall.reschedule(loop.time() + stall_timeout_s + slack)
                            pushed = now
                        for data in reader.feed(block):
                            if not chat and data.endswith(b"}]}"):
                                # the hot path: a completion chunk that ends with its choices, as vLLM's token
                                # chunks without usage do; counted from the final usage, not parsed
                                times.append(now)
                                continue
                            if data == DONE:
                                done = True
                                break
                            k = _chunk_tokens(data, chat, record)
                            if k == 0:
                                continue
                            times.append(now)
                            if k == -1:
                                counts.append(record.completion_tokens or 0)
                        if done:
                            break
            except TimeoutError:
                if stall.expired():
                    raise Failure("stalled", f"no data for {stall_timeout_s:g} s") from None
                raise
            if not done:
                raise Failure("disconnected", "the stream ended without [DONE]")
    except Failure as f:
        record.error_class, record.error = f.error_class, str(f)
        return
    except TimeoutError:
        record.error_class, record.error = "timeout", f"over {request_timeout_s:g} s"
        return
    except aiohttp.ClientConnectorError as e:
        record.error_class, record.error = "connect", str(e)[:200]
        return
    except (aiohttp.ClientPayloadError, aiohttp.ServerDisconnectedError, aiohttp.ClientOSError) as e:
        record.error_class, record.error = "disconnected", f"{type(e).__name__}: {e}"[:200]
        return
    if not times:
        record.error_class, record.error = "malformed", "the stream carried no token"
        return
    finish(record, start, times, counts if len(counts) == len(times) else None)


def finish(record: RequestRecord, start: float, times: list[float], counts: list[int] | None) -> None:
    """TTFT, E2E and the inter-token gaps of a stream that ended well.

    The output token count is the server's final usage (else one per chunk). When the server said how many tokens
    each chunk carried (continuous usage stats), a chunk of k tokens counts as k gaps of a k-th of its gap each.
    When it did not and the usage says there were more tokens than chunks (a stream interval, speculative decoding),
    each chunk gap is divided by the request's mean tokens per gap: one entry per chunk gap, so the mean ITL matches
    TPOT and the distribution keeps the chunks' shape."""
    record.ok = True
    record.chunks = len(times)
    record.ttft_s = times[0] - start
    record.e2e_s = times[-1] - start
    gaps = [b - a for a, b in itertools.pairwise(times)]
    if counts is not None:
        record.output_tokens = counts[-1]
        itl = [0.0] * (counts[0] - 1)  # the rest of the first chunk came with it
        for gap, prev, cur in zip(gaps, counts, counts[1:], strict=False):
            k = max(1, cur - prev)
            itl += [gap / k] * k
        record.itl_s = itl
        return
    record.output_tokens = record.completion_tokens if record.completion_tokens is not None else len(times)
    per_gap = (record.output_tokens - 1) / len(gaps) if gaps and record.output_tokens > len(times) else 1.0
    record.itl_s = [g / per_gap for g in gaps] if per_gap != 1.0 else gaps


class HTTPStatusError(NemolaunchError):
    def __init__(self, message: str, status: int) -> None:
        super().__init__(message)
        self.status = status


async def get_json(session: aiohttp.ClientSession, method: str, url: str, body: Any = None, **kw: Any) -> Any:
    """A JSON answer, or one line saying what came back instead (an HTML page, not JSON, an error status)."""
    async with session.request(method, url, json=body, timeout=aiohttp.ClientTimeout(total=60), **kw) as resp:
        text = await resp.text(errors="replace")
        if resp.status != 200:
            first = " ".join(text.split())[:120]
            raise HTTPStatusError(f"{method} {url} answered HTTP {resp.status}: {first}", resp.status)
        try:
            return json.loads(text)
        except json.JSONDecodeError:
            kind = "an HTML page" if text.lstrip().startswith("<") else "not JSON"
            raise NemolaunchError(f"{method} {url} answered {kind}: {' '.join(text.split())[:80]!r}") from None


@dataclass(frozen=True)
class ServerInfo:
    version: str | None
    models: list[dict[str, Any]]

    def max_model_len(self, model: str) -> int | None:
        for m in self.models:
            if m.get("id") == model and isinstance(m.get("max_model_len"), int):
                return int(m["max_model_len"])
        return None


async def server_info(session: aiohttp.ClientSession, url: str, api_key: str | None = None) -> ServerInfo:
    """What the server serves, from /v1/models; anything that is not an OpenAI-compatible model list is one line."""
    headers = bearer(api_key)
    fix = "give the address of an OpenAI-compatible server (vLLM: http://HOST:PORT, without /v1)"
    try:
        models = await get_json(session, "GET", f"{url}/v1/models", headers=headers)
    except (TimeoutError, aiohttp.ClientError) as e:
        raise NotReady(
            f"no OpenAI-compatible server answers at {url}: {e}",
            "start one (nemolaunch serve) or give its address with --url",
        ) from None
    except NemolaunchError as e:
        if isinstance(e, HTTPStatusError) and e.status in (401, 403):
            raise NotReady(
                f"{url} refused the request (HTTP {e.status})",
                "give its API key with --api-key-file FILE or $NEMOLAUNCH_API_KEY",
            ) from None
        raise NotReady(f"{url} is not an OpenAI-compatible server: {e.message}", fix) from None
    data = models.get("data") if isinstance(models, dict) else None
    if not isinstance(data, list) or not all(isinstance(m, dict) and isinstance(m.get("id"), str) for m in data):
        raise NotReady(f"{url}/v1/models is not an OpenAI model list (no data[].id): {json.dumps(models)[:80]}", fix)
    try:
        version = (await get_json(session, "GET", f"{url}/version", headers=headers)).get("version")
    except (TimeoutError, NemolaunchError, aiohttp.ClientError, AttributeError):
        version = None
    return ServerInfo(version, data)


def length_ok(endpoint: str, r: RequestRecord) -> bool:
    """Whether a request's token counts are the ones asked for (chat prompts also carry the chat template's
    tokens, so only completions can check the prompt length)."""
    prompt_ok = endpoint == "chat" or r.input_len is None or r.prompt_tokens in (None, r.input_len)
    return prompt_ok and r.completion_tokens in (None, r.output_len) and r.output_tokens == r.output_len
