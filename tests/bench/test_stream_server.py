"""benchmarks/stream_server.py, the server of the bench client ceiling, holds to what vLLM sends: its responses
against a real vLLM server's captured byte for byte (tests/fixtures/bench/stream-capture.json, made by
benchmarks/capture_stream.py), and both clients read every token of it (nemolaunch bench, the SSE reader, and,
with the engine, vLLM's own request function), so the ceiling cannot be fast by sending less than vLLM would."""

from __future__ import annotations

import json
import random
import re
import socket
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from benchmarks.bench_client import alone
from benchmarks.capture_stream import BODIES, raw_post
from launcher.serve.sse import DONE, SSEReader
from tests.helpers import ROOT, free_port

CAPTURE = json.loads((ROOT / "tests" / "fixtures" / "bench" / "stream-capture.json").read_text())


@pytest.fixture(scope="module")
def server() -> Iterator[tuple[str, int]]:
    port = free_port()
    with alone(port, "fast") as (url, _):
        yield url, port


def stats(url: str) -> dict[str, float]:
    with urllib.request.urlopen(f"{url}/stats", timeout=5) as resp:
        return dict(json.loads(resp.read()))


def parse_http(raw: bytes) -> tuple[str, dict[str, str], list[bytes]]:
    """Status line, headers (lower-case names), and the body's HTTP chunks, de-chunked one by one."""
    head, _, body = raw.partition(b"\r\n\r\n")
    status, *lines = head.decode().split("\r\n")
    headers = {k.strip().lower(): v.strip() for k, _, v in (line.partition(":") for line in lines)}
    assert headers.get("transfer-encoding") == "chunked"
    chunks = []
    while True:
        size_line, _, body = body.partition(b"\r\n")
        size = int(size_line, 16)
        if size == 0:
            assert body == b"\r\n", "the body goes on after the last chunk"
            return status, headers, chunks
        chunks.append(body[:size])
        assert body[size : size + 2] == b"\r\n"
        body = body[size + 2 :]


def shape(obj: Any, key: str = "") -> Any:
    """The JSON's structure, with the values that differ between servers (ids, times, names, texts, prompt token
    counts) reduced to their type and every other value kept."""
    if isinstance(obj, dict):
        return {k: shape(v, k) for k, v in obj.items()}
    if isinstance(obj, list):
        return [shape(v) for v in obj]
    if key in ("id", "created", "model", "text", "prompt_tokens", "total_tokens", "system_fingerprint"):
        return type(obj).__name__
    return obj


def events(chunks: list[bytes]) -> list[bytes]:
    """Each HTTP chunk must be one SSE event; their payloads."""
    out = []
    for chunk in chunks:
        assert chunk.startswith(b"data: ") and chunk.endswith(b"\n\n") and chunk.count(b"\n\n") == 1, chunk
        out.append(chunk[6:-2])
    return out


@pytest.mark.parametrize("name", sorted(BODIES), ids=sorted(BODIES))
def test_it_streams_what_the_captured_vllm_server_sent(server: tuple[str, int], name: str) -> None:
    _, port = server
    body = {"model": "tiny", "prompt": "the model serves", "max_tokens": 8, "ignore_eos": True, "stream": True}
    ours = parse_http(raw_post(port, "/v1/completions", {**body, **BODIES[name]}))
    theirs = parse_http(CAPTURE[name].encode())
    assert ours[0] == theirs[0] == "HTTP/1.1 200 OK"
    assert list(ours[1]) == list(theirs[1])  # date, server, content-type, vary, connection, transfer-encoding
    for header in ("content-type", "transfer-encoding", "connection"):
        assert ours[1][header] == theirs[1][header]
    mine, real = events(ours[2]), events(theirs[2])
    assert len(mine) == len(real) == 8 + 2  # 8 tokens, the usage chunk, [DONE]
    assert mine[-1] == real[-1] == DONE
    for a, b in zip(mine[:-1], real[:-1], strict=True):
        assert shape(json.loads(a)) == shape(json.loads(b))
        assert abs(len(a) - len(b)) <= 24, (a, b)  # the same size, but for ids, names and token texts
    assert re.fullmatch(r"cmpl-[0-9a-f]{16}", json.loads(mine[0])["id"])  # vLLM 0.26's random_uuid


def test_nemolaunch_bench_reads_every_token_and_the_usage(server: tuple[str, int], tmp_path: Path) -> None:
    url, _ = server
    before = stats(url)["tokens"]
    argv = [sys.executable, "-m", "launcher", "bench", "--url", url, "--concurrency", "4", "--num-prompts", "12"]
    argv += ["--input-len", "16", "--output-len", "50", "--warmup", "1", "--out", str(tmp_path)]
    done = subprocess.run(argv, capture_output=True, text=True, timeout=120, cwd=ROOT)
    assert done.returncode == 0, done.stderr
    rows = [json.loads(line) for line in (tmp_path / "requests.jsonl").read_text().splitlines()]
    assert len(rows) == 12
    for r in rows:
        assert (r["ok"], r["chunks"], r["output_tokens"], r["completion_tokens"]) == (True, 50, 50, 50)
        assert r["prompt_tokens"] == 16 and r["length_ok"] and len(r["itl_s"]) == 49
    level = json.loads((tmp_path / "summary.json").read_text())["levels"][0]
    assert (level["completed"], level["failed"], level["length_mismatched"]) == (12, 0, 0)
    assert stats(url)["tokens"] - before == 13 * 50  # the warm-up and the level, nothing more


def test_the_sse_reader_gets_every_event_however_the_bytes_are_split(server: tuple[str, int]) -> None:
    _, port = server
    body = {
        "model": "m",
        "prompt": "a b c",
        "max_tokens": 300,
        "stream": True,
        "stream_options": {"include_usage": True},
    }
    *_, chunks = parse_http(raw_post(port, "/v1/completions", body))
    stream = b"".join(chunks)
    rng = random.Random(7)
    reader, payloads, at = SSEReader(), [], 0
    while at < len(stream):
        step = rng.randint(1, 300)
        payloads += reader.feed(stream[at : at + step])
        at += step
    assert reader.pending == b"" and payloads[-1] == DONE
    parsed = [json.loads(p) for p in payloads[:-1]]
    tokens = [p for p in parsed if p["choices"]]
    assert len(tokens) == 300 and [p["choices"][0]["finish_reason"] for p in tokens[-2:]] == [None, "length"]
    assert parsed[-1]["choices"] == [] and parsed[-1]["usage"]["completion_tokens"] == 300
    assert parsed[-1]["usage"]["prompt_tokens"] == 3


def test_a_client_gone_mid_stream_leaves_it_serving(server: tuple[str, int]) -> None:
    url, port = server
    body = json.dumps({"model": "m", "prompt": "a", "max_tokens": 10**7, "stream": True}).encode()
    with socket.create_connection(("127.0.0.1", port), timeout=10) as s:
        s.sendall(b"POST /v1/completions HTTP/1.1\r\nContent-Length: %d\r\n\r\n%s" % (len(body), body))
        assert s.recv(4096).startswith(b"HTTP/1.1 200 OK")
    counts = [stats(url)["tokens"]]
    for _ in range(50):  # the stream of the closed connection stops (within 5 s on a loaded machine)
        time.sleep(0.1)
        counts.append(stats(url)["tokens"])
        if counts[-1] == counts[-2]:
            break
    assert counts[-1] == counts[-2], counts
    rest = {"model": "m", "prompt": "a", "max_tokens": 5, "stream": True, "stream_options": {"include_usage": True}}
    assert len(events(parse_http(raw_post(port, "/v1/completions", rest))[2])) == 5 + 2


@pytest.mark.engine
def test_vllms_own_request_function_reads_every_token(server: tuple[str, int], engine_python: Path) -> None:
    url, _ = server
    code = (
        "import asyncio, json, sys, aiohttp\n"
        "from vllm.benchmarks.lib.endpoint_request_func import RequestFuncInput, async_request_openai_completions\n"
        "async def go():\n"
        "    async with aiohttp.ClientSession() as s:\n"
        "        i = RequestFuncInput(prompt='a b c', api_url=sys.argv[1] + '/v1/completions', prompt_len=3,\n"
        "                             output_len=40, model='fake', ignore_eos=True)\n"
        "        o = await async_request_openai_completions(i, s)\n"
        "        print(json.dumps([o.success, o.output_tokens, len(o.itl), o.generated_text]))\n"
        "asyncio.run(go())\n"
    )
    done = subprocess.run([str(engine_python), "-c", code, url], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    success, tokens, gaps, text = json.loads(done.stdout.splitlines()[-1])
    assert (success, tokens, gaps) == (True, 40, 39)
    from benchmarks.stream_server import TOKEN_TEXTS

    assert text == "".join(TOKEN_TEXTS[i % len(TOKEN_TEXTS)] for i in range(40))
