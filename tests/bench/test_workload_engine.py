"""bench's workloads against the real vLLM CPU engine (one server for the module): request rate with a cap and
gamma arrivals, SLO goodput, a dataset file, a shared prefix, a context-length sweep up to the model's limit, and
the per-level JSON read back with the key names of the installed vLLM's `bench serve --save-result`."""

from __future__ import annotations

import asyncio
import json
import os
import re
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import aiohttp
import pytest

from launcher.bench.workload import Tokenizer, exact_prompts
from launcher.serve.process import Server
from tests.helpers import free_port

pytestmark = pytest.mark.engine
MAX_MODEL_LEN = 2048


@pytest.fixture(scope="module")
def server(engine_python: Path, tiny_model: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    port = free_port()
    argv = [str(engine_python), "-m", "vllm.entrypoints.openai.api_server", "--model", str(tiny_model)]
    argv += ["--host", "127.0.0.1", "--port", str(port), "--max-model-len", str(MAX_MODEL_LEN)]
    env = {**os.environ, "VLLM_CPU_KVCACHE_SPACE": "1"}
    srv = Server.start(argv, env, f"http://127.0.0.1:{port}", tmp_path_factory.mktemp("srv") / "vllm.log")
    try:
        srv.wait_ready(timeout_s=400)
        yield srv
    finally:
        srv.stop()


def bench(server: Server, out: Path, *args: str) -> subprocess.CompletedProcess[str]:
    argv = [sys.executable, "-m", "launcher", "bench", "--url", server.url, "--warmup", "1", "--out", str(out), *args]
    return subprocess.run(argv, capture_output=True, text=True, timeout=300)


def records(out: Path) -> list[dict[str, object]]:
    return [json.loads(line) for line in (out / "requests.jsonl").read_text().splitlines()]


def vllm_result_keys(engine_python: Path) -> set[str]:
    """The keys the installed vLLM's `bench serve --save-result` writes by default, read from its source."""
    (source,) = engine_python.parent.parent.glob("lib/python3*/site-packages/vllm/benchmarks/serve.py")
    text = source.read_text()
    block = text[text.index("result: dict[str, Any]") :]
    block = block[block.index("result = {") : block.index("}", block.index("result = {"))]
    keys = set(re.findall(r'^\s+"(\w+)":', block, re.M))
    setup = text[text.index("result_json: dict[str, Any] = {}") : text.index("# Merge with benchmark result")]
    keys |= set(re.findall(r'^    result_json\["(\w+)"\]', setup, re.M))  # the unconditional ones (4 spaces)
    metrics = re.search(r'default_percentile_metrics = "([\w,]+)"', text)
    percentiles = re.search(r'"--metric-percentiles",.*?default="([\d.,]+)"', text, re.S)
    assert metrics and percentiles and len(keys) > 20
    for m in metrics[1].split(","):
        keys |= {f"mean_{m}_ms", f"median_{m}_ms", f"std_{m}_ms"}
        keys |= {f"p{p}_{m}_ms" for p in percentiles[1].split(",")}
    return keys


def test_request_rate_with_a_cap_gamma_arrivals_and_goodput(
    server: Server, engine_python: Path, tmp_path: Path
) -> None:
    out = tmp_path / "rate"
    r = bench(
        server,
        out,
        "--request-rate",
        "4,16",
        "--concurrency",
        "4",
        "--arrival",
        "gamma",
        "--burstiness",
        "0.5",
        "--num-prompts",
        "8",
        "--input-len",
        "32",
        "--output-len",
        "8",
        "--slo",
        "ttft=20000,tpot=5000",
    )
    assert r.returncode == 0, r.stderr
    doc = json.loads((out / "summary.json").read_text())
    assert [(lv["request_rate"], lv["concurrency"], lv["completed"]) for lv in doc["levels"]] == [
        (4.0, 4, 8),
        (16.0, 4, 8),
    ]
    assert all(lv["goodput"]["share"] == 1.0 and lv["goodput"]["met"] for lv in doc["levels"])
    assert doc["slo"] == {"highest_meeting": "rate=16/s (c<=4)", "first_failing": None}
    assert doc["workload"]["load"] == {
        "mode": "request-rate",
        "request_rates": [4.0, 16.0],
        "arrival": "gamma",
        "burstiness": 0.5,
    }
    assert "SLO (ttft <= 20000 ms, tpot <= 5000 ms, 90% of requests): met up to rate=16/s (c<=4)" in r.stderr
    assert all(rec["prompt_tokens"] == 32 and rec["completion_tokens"] == 8 for rec in records(out))
    # the per-level file, read back with the installed vLLM's own key names
    result = json.loads((out / "vllm-rate4-c4-in32.json").read_text())
    missing = vllm_result_keys(engine_python) - set(result)
    assert not missing, missing
    assert (result["request_rate"], result["burstiness"], result["max_concurrency"]) == (4.0, 0.5, 4)
    assert (result["completed"], result["total_output_tokens"], result["output_lens"]) == (8, 64, [8] * 8)
    assert result["output_throughput"] == pytest.approx(doc["levels"][0]["output_throughput_tok_s"], rel=0.01)
    assert result["mean_ttft_ms"] == pytest.approx(doc["levels"][0]["ttft_ms"]["mean"], rel=0.01)


def test_a_tight_slo_is_missed_and_said(server: Server, tmp_path: Path) -> None:
    out = tmp_path / "slo"
    r = bench(
        server,
        out,
        "--concurrency",
        "1,4",
        "--num-prompts",
        "4",
        "--input-len",
        "32",
        "--output-len",
        "8",
        "--slo",
        "ttft=0.001",
    )
    assert r.returncode == 0, r.stderr
    doc = json.loads((out / "summary.json").read_text())
    assert [lv["goodput"]["share"] for lv in doc["levels"]] == [0.0, 0.0]
    assert doc["slo"] == {"highest_meeting": None, "first_failing": "c=1"}


def test_a_dataset_file_sets_prompts_and_output_lengths(server: Server, tmp_path: Path) -> None:
    data = tmp_path / "prompts.jsonl"
    lines = [
        {"prompt": "def main():", "output_tokens": 4},
        {"prompt": "import os\nimport sys", "output_tokens": 6},
        {"prompt": "class A:"},
    ]
    data.write_text("".join(json.dumps(x) + "\n" for x in lines))
    out = tmp_path / "data"
    r = bench(server, out, "--dataset", str(data), "--concurrency", "1", "--num-prompts", "3", "--output-len", "9")
    assert r.returncode == 0, r.stderr
    got = sorted((rec["index"], rec["completion_tokens"], rec["length_ok"]) for rec in records(out))
    assert got == [(0, 4, True), (1, 6, True), (2, 9, True)]
    assert json.loads((out / "summary.json").read_text())["workload"]["dataset"] == str(data)


def test_shared_prefix_prompts_share_their_first_tokens(server: Server, tmp_path: Path) -> None:
    async def build() -> list[list[int]]:
        async with aiohttp.ClientSession() as session:
            tok = Tokenizer(session, server.url, str(json.loads(_get(server.url + "/v1/models"))["data"][0]["id"]), {})
            prompts = await exact_prompts(tok, 64, 8, 4, 0, shared_prefix_len=48)
            return [await tok.encode(p.text) for p in prompts]

    ids = asyncio.run(build())
    assert [len(x) for x in ids] == [64] * 4
    assert len({tuple(x[:47]) for x in ids}) == 1  # the last prefix token may merge with the next one
    assert len({tuple(x[48:]) for x in ids}) == 4
    out = tmp_path / "prefix"
    r = bench(
        server,
        out,
        "--shared-prefix",
        "48",
        "--input-len",
        "64",
        "--output-len",
        "8",
        "--concurrency",
        "2",
        "--num-prompts",
        "4",
    )
    assert r.returncode == 0, r.stderr
    assert all(rec["prompt_tokens"] == 64 for rec in records(out))


def test_context_length_sweep_up_to_the_models_limit(server: Server, tmp_path: Path) -> None:
    out = tmp_path / "ctx"
    r = bench(
        server,
        out,
        "--context-lens",
        f"128,{MAX_MODEL_LEN - 8}",
        "--concurrency",
        "2",
        "--output-len",
        "8",
        "--num-prompts",
        "2",
    )
    assert r.returncode == 0, r.stderr
    doc = json.loads((out / "summary.json").read_text())
    assert [(lv["input_len"], lv["completed"]) for lv in doc["levels"]] == [(128, 2), (MAX_MODEL_LEN - 8, 2)]
    assert sorted({rec["prompt_tokens"] for rec in records(out)}) == [128, MAX_MODEL_LEN - 8]
    assert r.stdout.splitlines()[0].split()[:2] == ["conc", "in"]
    beyond = bench(server, tmp_path / "beyond", "--context-lens", f"128,{MAX_MODEL_LEN}", "--output-len", "8")
    assert beyond.returncode == 2
    assert beyond.stderr.splitlines() == [
        f"nemolaunch: prompt {MAX_MODEL_LEN} + output 8 tokens is beyond the model's context of {MAX_MODEL_LEN} "
        f"tokens; give --input-len / --context-lens up to {MAX_MODEL_LEN - 8}"
    ]


def _get(url: str) -> str:
    import urllib.request

    with urllib.request.urlopen(url, timeout=30) as resp:
        return str(resp.read().decode())
