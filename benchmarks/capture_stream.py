"""Capture what a real vLLM server sends for streamed /v1/completions requests, byte for byte (status line, headers,
the chunked body), as the fixture that tests/bench/test_stream_server.py holds benchmarks/stream_server.py to.

python benchmarks/capture_stream.py --engine ENGINE_PY --model DIR --out tests/fixtures/bench/stream-capture.json
    starts the vLLM API server of ENGINE_PY on the model (the CPU engine: about 80 s), sends two requests with
    max_tokens 8 (stream_options.include_usage, then with continuous_usage_stats too) over a raw socket, and writes
    the raw responses (the date header's value blanked) with the vLLM version
"""

from __future__ import annotations

import argparse
import json
import os
import re
import socket
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

BODIES = {
    "include_usage": {"stream_options": {"include_usage": True}},
    "continuous_usage": {"stream_options": {"include_usage": True, "continuous_usage_stats": True}},
}


def raw_post(port: int, path: str, body: dict[str, object]) -> bytes:
    """One HTTP/1.1 request with Connection: close; everything the server sent back."""
    data = json.dumps(body).encode()
    head = (
        f"POST {path} HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nContent-Type: application/json\r\n"
        f"Content-Length: {len(data)}\r\nConnection: close\r\n\r\n"
    ).encode()
    with socket.create_connection(("127.0.0.1", port), timeout=60) as s:
        s.sendall(head + data)
        chunks = []
        while block := s.recv(65536):
            chunks.append(block)
    return b"".join(chunks)


def main() -> None:
    from launcher.serve.process import Server
    from tests.conftest import free_port

    parser = argparse.ArgumentParser()
    parser.add_argument("--engine", required=True)
    parser.add_argument("--model", required=True)
    parser.add_argument("--out", required=True)
    args = parser.parse_args()
    port = free_port()
    argv = [args.engine, "-m", "vllm.entrypoints.openai.api_server", "--model", args.model]
    argv += ["--host", "127.0.0.1", "--port", str(port), "--max-model-len", "2048", "--served-model-name", "tiny"]
    version = subprocess.run(
        [args.engine, "-c", "import vllm; print(vllm.__version__)"], capture_output=True, text=True, check=True
    ).stdout.split()[-1]
    with tempfile.TemporaryDirectory() as tmp:
        env = {**os.environ, "VLLM_CPU_KVCACHE_SPACE": "1"}
        srv = Server.start(argv, env, f"http://127.0.0.1:{port}", Path(tmp) / "log")
        try:
            srv.wait_ready(timeout_s=400)
            captures = {}
            for name, extra in BODIES.items():
                body = {"model": "tiny", "prompt": "the model serves", "max_tokens": 8, "ignore_eos": True}
                raw = raw_post(port, "/v1/completions", {**body, "stream": True, **extra})
                captures[name] = re.sub(rb"(?im)^date: [^\r]*", b"date: -", raw).decode()
        finally:
            srv.stop()
    doc = {"vllm": version, "request": "POST /v1/completions, max_tokens 8, ignore_eos, stream", **captures}
    Path(args.out).write_text(json.dumps(doc, indent=1) + "\n")
    print(f"wrote {args.out} (vLLM {version})")


if __name__ == "__main__":
    main()
