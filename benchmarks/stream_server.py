"""A streaming server for the bench client ceiling: it sends what vLLM 0.26 sends for a streamed /v1/completions
request, as cheaply per token as Python allows, so that the clients, not the server, are what is measured.

What it sends, as vLLM 0.26's completion_stream_generator does (vllm/entrypoints/openai/completion/serving.py,
its pydantic models dumped the same way): HTTP/1.1 200 with `Transfer-Encoding: chunked` and
`content-type: text/event-stream; charset=utf-8` (uvicorn's StreamingResponse), one HTTP chunk per SSE event; one
token per event, `{"id":"cmpl-<16 hex>","object":"text_completion","created":T,"model":M,"choices":[{"index":0,
"text":...,"logprobs":null,"finish_reason":null,"stop_reason":null,"prompt_token_ids":null,"token_ids":null}]}`
(the last with finish_reason "length"); with `stream_options.include_usage` a final chunk with `"choices":[]` and
`usage` {prompt_tokens, total_tokens, completion_tokens}; with `continuous_usage_stats` usage on every chunk; then
`data: [DONE]`. Besides: GET /v1/models, /version, /health, /stats, POST /tokenize and /detokenize (words are
tokens), what nemolaunch bench and vllm bench serve call.

How it stays cheap: a plain asyncio protocol (uvloop's loop where installed), a request's events encoded once when
it arrives (a cycle of token texts), and one step clock for all streams: each step writes the next event of every
stream whose socket takes more (one transport.write per event per stream, as vLLM's API server writes one chunk
per stream per engine step), then yields to the loop; with --step-ms a step starts at most every STEP ms.
GET /stats says how many tokens it sent and the CPU it spent while streams were open, for the CPU per token.

Run: python benchmarks/stream_server.py PORT [--step-ms MS] [--host 127.0.0.1]
"""

from __future__ import annotations

import argparse
import asyncio
import email.utils
import json
import socket
import time
import uuid
from typing import Any

# token texts cycled through (about 4 bytes each, as a real vocabulary's tokens run); JSON-safe as they are
TOKEN_TEXTS = (" the", " model", " serve", "s", " token", " of", ",", " kernel", " a", " batch", "ing", " cache")
MAX_MODEL_LEN = 4096
FINGERPRINT = "vllm-0.26.0-5e1f7c2a"  # vLLM stamps "vllm-VERSION-HASH8" of its config on the final usage chunk
_SUFFIX = b'","logprobs":null,"finish_reason":%s,"stop_reason":null,"prompt_token_ids":null,"token_ids":null}]}'


def _usage(prompt_tokens: int, completion_tokens: int) -> bytes:
    """vLLM's UsageInfo as it dumps it (its field order)."""
    total = prompt_tokens + completion_tokens
    return b'{"prompt_tokens":%d,"total_tokens":%d,"completion_tokens":%d}' % (prompt_tokens, total, completion_tokens)


def frame(payload: bytes) -> bytes:
    """One SSE event in one HTTP chunk."""
    event = b"data: " + payload + b"\n\n"
    return b"%x\r\n%s\r\n" % (len(event), event)


END = frame(b"[DONE]") + b"0\r\n\r\n"


class Stream:
    """One streamed completion: its events, encoded when the request arrived, and how far it has got."""

    __slots__ = ("chunks", "conn", "continuous", "final", "head", "i", "n", "prompt_tokens")

    def __init__(self, conn: Connection, model: str, max_tokens: int, prompt_tokens: int, options: dict[str, Any]):
        self.conn, self.n, self.i, self.prompt_tokens = conn, max_tokens, 0, prompt_tokens
        rid = f"cmpl-{uuid.uuid4().int & (2**64 - 1):016x}"  # vLLM 0.26's random_uuid: 16 hex digits
        ident = b'"id":"%s","object":"text_completion","created":%d,"model":%s' % (
            rid.encode(),
            int(time.time()),
            json.dumps(model).encode(),
        )
        self.head = b'{%s,"choices":[{"index":0,"text":"' % ident
        include_usage = bool(options.get("include_usage"))  # vLLM's should_include_usage
        self.continuous = include_usage and bool(options.get("continuous_usage_stats"))
        self.chunks = [frame(self.head + t.encode() + _SUFFIX % b"null") for t in TOKEN_TEXTS]
        last = frame(self.head + TOKEN_TEXTS[(max_tokens - 1) % len(TOKEN_TEXTS)].encode() + _SUFFIX % b'"length"')
        self.chunks.append(last)
        final = b""
        if include_usage:
            usage = _usage(prompt_tokens, max_tokens)
            final = frame(
                b'{%s,"choices":[],"usage":%s,"system_fingerprint":"%s"}' % (ident, usage, FINGERPRINT.encode())
            )
        self.final = final + END

    def next_chunk(self) -> bytes:
        """The next event; after the last token, the usage chunk and [DONE] come with it."""
        i = self.i
        self.i = i + 1
        if self.continuous:
            return self._with_usage(i)
        if i + 1 == self.n:
            return self.chunks[-1] + self.final
        return self.chunks[i % len(TOKEN_TEXTS)]

    def _with_usage(self, i: int) -> bytes:
        last = i + 1 == self.n
        text = TOKEN_TEXTS[i % len(TOKEN_TEXTS)].encode()
        # vLLM's chunk with continuous usage: the choice, then "usage" (exclude_unset keeps the field order)
        body = (self.head + text + _SUFFIX % (b'"length"' if last else b"null"))[:-1]
        body += b',"usage":%s}' % _usage(self.prompt_tokens, i + 1)
        return frame(body) + (self.final if last else b"")


class Clock:
    """The step clock: every step, one event to each stream whose socket is not full."""

    def __init__(self, step_s: float) -> None:
        self.streams: list[Stream] = []
        self.step_s = step_s
        self.wake = asyncio.Event()
        self.tokens = 0
        self.busy_cpu_s = 0.0
        self.busy_wall_s = 0.0
        self._since: tuple[float, float] | None = None

    def add(self, stream: Stream) -> None:
        if self._since is None:
            self._since = (time.process_time(), time.perf_counter())
        self.streams.append(stream)
        self.wake.set()

    def _idle(self) -> None:
        if self._since is not None:
            cpu, wall = self._since
            self.busy_cpu_s += time.process_time() - cpu
            self.busy_wall_s += time.perf_counter() - wall
            self._since = None

    def stats(self) -> dict[str, float]:
        cpu, wall = self._since if self._since is not None else (time.process_time(), time.perf_counter())
        return {
            "tokens": self.tokens,
            "busy_cpu_s": self.busy_cpu_s + time.process_time() - cpu,
            "busy_wall_s": self.busy_wall_s + time.perf_counter() - wall,
        }

    async def run(self) -> None:
        loop = asyncio.get_running_loop()
        while True:
            if not self.streams:
                self._idle()
                self.wake.clear()
                await self.wake.wait()
                continue
            began = loop.time()
            sent = 0
            keep = []
            streams, self.streams = self.streams, []  # a stream that starts during the step joins the next
            for s in streams:
                conn = s.conn
                if conn.closed:
                    continue
                if conn.paused:
                    keep.append(s)
                    continue
                conn.transport.write(s.next_chunk())
                sent += 1
                if s.i < s.n:
                    keep.append(s)
                else:
                    conn.ended()
                    conn.next_request()
            self.streams = keep + self.streams
            self.tokens += sent
            if self.step_s:
                await asyncio.sleep(max(0.0, began + self.step_s - loop.time()))
            elif sent:
                await asyncio.sleep(0)
            else:  # every socket is full: wait until one drains (or a new stream arrives)
                self.wake.clear()
                await self.wake.wait()


class Connection(asyncio.Protocol):
    """HTTP/1.1 keep-alive, requests with a Content-Length body (what aiohttp's client sends), one at a time."""

    def __init__(self, server: Server) -> None:
        self.server = server
        self.buf = b""
        self.paused = False
        self.closed = False
        self.close_after = False  # the request said Connection: close
        self.streaming: Stream | None = None
        self.transport: asyncio.Transport = None  # type: ignore[assignment]

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]  # uvloop's is not an asyncio.Transport subclass
        sock = transport.get_extra_info("socket")
        if sock is not None:  # small writes go out at once, as uvicorn's do
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)

    def connection_lost(self, exc: Exception | None) -> None:
        self.closed = True

    def pause_writing(self) -> None:
        self.paused = True

    def resume_writing(self) -> None:
        self.paused = False
        self.server.clock.wake.set()

    def data_received(self, data: bytes) -> None:
        self.buf += data
        if self.streaming is None:
            self.next_request()

    def next_request(self) -> None:
        """Answer the next complete request in the buffer (after a stream ends, the one that waited behind it)."""
        while self.streaming is None and not self.closed:
            head_end = self.buf.find(b"\r\n\r\n")
            if head_end < 0:
                return
            lines = self.buf[:head_end].decode("latin-1").split("\r\n")
            length = 0
            for line in lines[1:]:
                name, _, value = line.partition(":")
                name = name.strip().lower()
                if name == "content-length":
                    length = int(value.strip())
                elif name == "connection":
                    self.close_after = value.strip().lower() == "close"
            if len(self.buf) < head_end + 4 + length:
                return
            body = self.buf[head_end + 4 : head_end + 4 + length]
            self.buf = self.buf[head_end + 4 + length :]
            method, _, rest = lines[0].partition(" ")
            self.server.route(self, method, rest.partition(" ")[0].partition("?")[0], body)

    def respond(self, status: int, obj: Any, content_type: bytes = b"application/json") -> None:
        body = obj if isinstance(obj, bytes) else json.dumps(obj).encode()
        reason = {200: b"OK", 400: b"Bad Request", 404: b"Not Found"}.get(status, b"Error")
        self.transport.write(
            b"HTTP/1.1 %d %s\r\ndate: %s\r\nserver: uvicorn\r\ncontent-length: %d\r\ncontent-type: %s\r\n%s\r\n%s"
            % (status, reason, _date(), len(body), content_type, self.connection_header(), body)
        )
        self.ended()

    def connection_header(self) -> bytes:
        return b"connection: close\r\n" if self.close_after else b""

    def ended(self) -> None:
        """A response is complete: close the connection if the request asked for it (after what is buffered)."""
        self.streaming = None
        if self.close_after:
            self.closed = True
            self.transport.close()


def _date() -> bytes:
    return email.utils.formatdate(usegmt=True).encode()


class Server:
    def __init__(self, step_s: float, model: str) -> None:
        self.clock = Clock(step_s)
        self.model = model

    def route(self, conn: Connection, method: str, path: str, body: bytes) -> None:
        try:
            request = json.loads(body) if body else {}
        except json.JSONDecodeError:
            conn.respond(400, {"error": {"message": "the body is not JSON", "code": 400}})
            return
        if method == "GET" and path == "/v1/models":
            model = {"id": self.model, "object": "model", "owned_by": "vllm", "root": self.model, "parent": None}
            conn.respond(200, {"object": "list", "data": [{**model, "max_model_len": MAX_MODEL_LEN}]})
        elif method == "GET" and path == "/version":
            conn.respond(200, {"version": "stream-server"})
        elif method == "GET" and path == "/health":
            conn.respond(200, b"")
        elif method == "GET" and path == "/stats":
            conn.respond(200, self.clock.stats())
        elif method == "POST" and path == "/tokenize":
            tokens = list(range(len(str(request.get("prompt", "")).split())))
            conn.respond(200, {"count": len(tokens), "max_model_len": MAX_MODEL_LEN, "tokens": tokens})
        elif method == "POST" and path == "/detokenize":
            conn.respond(200, {"prompt": " ".join("w" for _ in request.get("tokens", []))})
        elif method == "POST" and path == "/v1/completions":
            self.complete(conn, request)
        else:
            conn.respond(404, {"error": {"message": f"{method} {path} is not served here", "code": 404}})

    def complete(self, conn: Connection, request: dict[str, Any]) -> None:
        max_tokens = request.get("max_tokens", 16)
        prompt = request.get("prompt")
        if not isinstance(max_tokens, int) or max_tokens < 1 or not isinstance(prompt, str):
            conn.respond(400, {"error": {"message": "give a prompt (text) and max_tokens >= 1", "code": 400}})
            return
        if not request.get("stream"):
            text = "".join(TOKEN_TEXTS[i % len(TOKEN_TEXTS)] for i in range(max_tokens))
            usage = {"prompt_tokens": len(prompt.split()), "total_tokens": len(prompt.split()) + max_tokens}
            choice = {"index": 0, "text": text, "logprobs": None, "finish_reason": "length", "stop_reason": None}
            conn.respond(200, {"object": "text_completion", "choices": [choice], "usage": usage})
            return
        options = request.get("stream_options") or {}
        stream = Stream(conn, str(request.get("model", self.model)), max_tokens, len(prompt.split()), options)
        conn.streaming = stream
        conn.transport.write(
            b"HTTP/1.1 200 OK\r\ndate: %s\r\nserver: uvicorn\r\ncontent-type: text/event-stream; charset=utf-8\r\n"
            b"vary: Origin\r\n%stransfer-encoding: chunked\r\n\r\n" % (_date(), conn.connection_header())
        )
        self.clock.add(stream)


async def serve(port: int, step_s: float = 0.0, host: str = "127.0.0.1", model: str = "fake") -> None:
    server = Server(step_s, model)
    loop = asyncio.get_running_loop()
    listener = await loop.create_server(lambda: Connection(server), host, port, backlog=4096)
    async with listener:
        await server.clock.run()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("port", type=int)
    parser.add_argument("--step-ms", type=float, default=0.0, help="at most one step every MS (0: as fast as it can)")
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--model", default="fake", help="the model name /v1/models lists")
    args = parser.parse_args()
    coro = serve(args.port, args.step_ms / 1000, args.host, args.model)
    try:
        import uvloop
    except ImportError:
        asyncio.run(coro)
        return
    with asyncio.Runner(loop_factory=uvloop.new_event_loop) as runner:
        runner.run(coro)


if __name__ == "__main__":
    main()
