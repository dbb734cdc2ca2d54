"""A local OpenAI-compatible server that streams as fast as it can, or misbehaves on purpose: the faults the real
vLLM engine will not produce on demand (stalls, dropped connections, HTTP 500, malformed SSE, dying mid-level, a
server that is not OpenAI-compatible at all, one that wants an API key). It streams as vLLM 0.26 does: compact
JSON chunks, `usage` on every chunk only with `stream_options.continuous_usage_stats`, and a final usage chunk
with no choices with `include_usage` (usage on every chunk whatever was asked with force_usage, as vLLM's
--enable-force-include-usage). Used by the tests and by benchmarks/bench_client.py --server aiohttp.
Run alone: python tests/fake_server.py PORT [FAULT] [TOKEN_DELAY_S]."""

from __future__ import annotations

import asyncio
import json
import sys
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from aiohttp import web
from aiohttp.typedefs import Handler

FAULTS = (
    "none",
    "stall",
    "disconnect",
    "http500",
    "malformed",
    "die-after",
    "html",  # every path answers an HTML 404 page (a web server that is not vLLM)
    "models-not-json",  # /v1/models answers 200 with text
    "models-shape",  # /v1/models answers JSON of another shape
    "auth",  # every path wants `Authorization: Bearer secret-key-for-tests`
)
API_KEY = "secret-key-for-tests"
# a token delay for timed runs (ab's 1 s windows): about 100 requests a second at c=2, where "as fast as it can"
# floods the client and the server, both in the test's process, for the whole window (3x the CPU, same checks)
PACED_S = 0.002
STATE = web.AppKey("state", dict)


def _dump(obj: Any) -> bytes:
    return b"data: " + json.dumps(obj, separators=(",", ":")).encode() + b"\n\n"


def make_app(
    fault: str = "none",
    token_delay_s: float = 0.0,
    die_after: int = 10**9,
    tokens_per_chunk: int = 1,
    force_usage: bool = False,
) -> web.Application:
    """force_usage: usage on every chunk whatever the request asks, as vLLM's --enable-force-include-usage does."""
    state: dict[str, Any] = {"served": 0, "dead": False, "continuous": 0, "seen": []}

    @web.middleware
    async def faults(request: web.Request, handler: Handler) -> web.StreamResponse:
        if state["dead"]:  # a dead server: every connection is dropped
            assert request.transport is not None
            request.transport.close()
            raise ConnectionResetError
        if fault == "html":
            return web.Response(status=404, text="<html><body><h1>404 Not Found</h1>\n<p>nginx</p></body></html>")
        if fault == "auth" and request.headers.get("Authorization") != f"Bearer {API_KEY}":
            return web.json_response({"error": "Unauthorized"}, status=401)
        return await handler(request)

    async def models(request: web.Request) -> web.Response:
        if fault == "models-not-json":
            return web.Response(text="OK\nthis is a status page")
        if fault == "models-shape":
            return web.json_response({"models": ["fake"]})
        return web.json_response({"object": "list", "data": [{"id": "fake", "max_model_len": 4096}]})

    async def version(request: web.Request) -> web.Response:
        return web.json_response({"version": "fake-0.0"})

    async def health(request: web.Request) -> web.Response:
        return web.Response(text="")

    async def tokenize(request: web.Request) -> web.Response:
        body = await request.json()
        return web.json_response({"tokens": list(range(len(body["prompt"].split())))})

    async def detokenize(request: web.Request) -> web.Response:
        body = await request.json()
        return web.json_response({"prompt": " ".join("w" for _ in body["tokens"])})

    async def completions(request: web.Request) -> web.StreamResponse:
        body = await request.json()
        state["served"] += 1
        n = state["served"]
        state["seen"].append(body)
        if fault == "http500" and n % 2 == 0:
            return web.json_response({"error": "injected"}, status=500)
        if fault == "die-after" and n > die_after:
            state["dead"] = True
            assert request.transport is not None
            request.transport.close()
            raise ConnectionResetError
        chat = "messages" in body
        options = body.get("stream_options") or {}
        asked = bool(options.get("continuous_usage_stats"))
        state["continuous"] += asked
        continuous = asked or force_usage
        text_in = body["messages"][-1]["content"] if chat else body.get("prompt", "")
        prompt_tokens = len(text_in.split()) + (5 if chat else 0)  # a chat template adds tokens
        max_tokens = int(body["max_tokens"])
        resp = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
        await resp.prepare(request)
        if chat:  # vLLM's first chat chunk: the role, no token
            await resp.write(_dump({"choices": [{"index": 0, "delta": {"role": "assistant", "content": ""}}]}))
        plain = None
        if not continuous and not chat:
            plain = [
                _dump({"id": "cmpl-1", "choices": [{"index": 0, "text": " w" * k}]})
                for k in range(1 + tokens_per_chunk)
            ]
        for i in range(0, max_tokens, tokens_per_chunk):
            if fault == "stall" and n % 2 == 0 and i == 3:
                await asyncio.sleep(3)  # longer than the tests' stall timeout, short enough to shut down
            if fault == "disconnect" and n % 2 == 0 and i == 3:
                assert request.transport is not None
                request.transport.close()
                return resp
            if fault == "malformed" and n % 2 == 0 and i == 3:
                await resp.write(b"data: {not json\n\n")
                continue
            k = min(tokens_per_chunk, max_tokens - i)
            if plain is not None:
                await resp.write(plain[k])
            else:
                choice = {"index": 0, "delta": {"content": " w" * k}} if chat else {"index": 0, "text": " w" * k}
                event: dict[str, Any] = {"choices": [choice]}
                if continuous:
                    event["usage"] = {"prompt_tokens": prompt_tokens, "completion_tokens": i + k}
                await resp.write(_dump(event))
            if token_delay_s:
                await asyncio.sleep(token_delay_s)
        if options.get("include_usage") or force_usage:
            usage = {"prompt_tokens": prompt_tokens, "completion_tokens": max_tokens}
            await resp.write(_dump({"id": "cmpl-1", "choices": [], "usage": usage}))
        await resp.write(b"data: [DONE]\n\n")
        return resp

    app = web.Application(middlewares=[faults])
    app[STATE] = state
    app.router.add_get("/v1/models", models)
    app.router.add_get("/version", version)
    app.router.add_get("/health", health)
    app.router.add_post("/tokenize", tokenize)
    app.router.add_post("/detokenize", detokenize)
    app.router.add_post("/v1/completions", completions)
    app.router.add_post("/v1/chat/completions", completions)
    return app


class Served(str):
    """The server's URL, with the app's state (what it was asked) for tests that check the requests."""

    state: dict[str, Any]


@contextmanager
def serving(
    port: int,
    fault: str = "none",
    token_delay_s: float = 0.0,
    die_after: int = 10**9,
    tokens_per_chunk: int = 1,
    force_usage: bool = False,
) -> Iterator[Served]:
    """The fake server on 127.0.0.1:port in a background thread with its own event loop."""
    loop = asyncio.new_event_loop()
    app = make_app(fault, token_delay_s, die_after, tokens_per_chunk, force_usage)
    runner = web.AppRunner(app)
    loop.run_until_complete(runner.setup())
    loop.run_until_complete(web.TCPSite(runner, "127.0.0.1", port).start())
    thread = threading.Thread(target=loop.run_forever, daemon=True)
    thread.start()
    url = Served(f"http://127.0.0.1:{port}")
    url.state = app[STATE]
    try:
        yield url
    finally:
        asyncio.run_coroutine_threadsafe(runner.cleanup(), loop).result(timeout=10)
        loop.call_soon_threadsafe(loop.stop)
        thread.join(timeout=5)


if __name__ == "__main__":
    delay = float(sys.argv[3]) if len(sys.argv) > 3 else 0.0
    try:  # alone (the client ceiling), as fast as this machine allows: uvloop where it is installed
        import uvloop

        loop: asyncio.AbstractEventLoop | None = uvloop.new_event_loop()
    except ImportError:
        loop = None
    web.run_app(
        make_app(sys.argv[2] if len(sys.argv) > 2 else "none", delay),
        host="127.0.0.1",
        port=int(sys.argv[1]),
        print=None,
        loop=loop,
    )
