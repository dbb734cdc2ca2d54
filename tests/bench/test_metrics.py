"""bench's parts on their own: the SSE reader, the stream timing (finish), a level's statistics and goodput by
hand, arrival times as vLLM draws them, the dataset format, the config's refusals, the table view."""

from __future__ import annotations

import math
import random
from dataclasses import asdict
from pathlib import Path

import numpy as np
import pytest

from launcher.bench import BenchConfig, LevelSpec, RequestRecord, parse_slo, summarize, validate
from launcher.bench.client import finish
from launcher.bench.workload import arrival_offsets, read_dataset
from launcher.cli.bench import headers_for
from launcher.errors import BadInput
from launcher.serve.sse import DONE, SSEReader

SPEC = LevelSpec(1, None, 16)


def test_sse_reader_frames_payloads_across_blocks() -> None:
    reader = SSEReader()
    assert reader.feed(b'data: {"a":1}\n\ndata: {"b"') == [b'{"a":1}']
    assert reader.feed(b":2}\r\n\n: ping\nevent: x\nid: 3\n\ndata:[DONE]\n") == [b'{"b":2}', DONE]
    assert reader.pending == b""
    assert reader.feed(b"data: half") == [] and reader.pending == b"data: half"


def _line_by_line(stream: bytes) -> list[bytes]:
    """The reference: every complete line that starts with `data:`, stripped."""
    *lines, _ = stream.split(b"\n")
    return [line[5:].strip() for line in lines if line.startswith(b"data:")]


@pytest.mark.parametrize("seed", range(6))
def test_sse_reader_fast_path_gives_what_line_by_line_reading_gives(seed: int) -> None:
    # streams of whole vLLM-like events mixed with what the one-split path must not take for them: CRLF, comments,
    # other fields, `data:` without a space, extra spaces; fed in random blocks, some of them whole events
    rng = random.Random(seed)
    pieces = [b'data: {"choices":[{"text":"a"}]}\n\n', b"data:{}\n\n", b"data:  {} \n\n", b": ping\n\n"]
    pieces += [b"data: {}\r\n\r\n", b"event: x\ndata: {}\n\n", b"id: 3\n\n", b"data: [DONE]\n\n", b"data: x\ny\n\n"]
    events = [rng.choice(pieces) for _ in range(300)]
    stream = b"".join(events)
    blocks, i = [], 0
    while i < len(events):  # groups of 1-4 whole events, each fed whole or cut in two at a random byte
        k = rng.randint(1, 4)
        group = b"".join(events[i : i + k])
        i += k
        cut = rng.randint(1, len(group) - 1) if rng.random() < 0.5 else len(group)
        blocks += [group[:cut], group[cut:]] if cut < len(group) else [group]
    reader, got = SSEReader(), []
    for block in blocks:
        got += reader.feed(block)
    assert got == _line_by_line(stream) and reader.pending == b""
    whole = SSEReader()
    assert [p for e in events for p in whole.feed(e)] == _line_by_line(stream)


def test_finish_with_per_chunk_counts_gives_k_gaps_per_chunk() -> None:
    # chunks at 0.1 (2 tokens), 0.3 (+2), 0.4 (+1) s after the request was sent at 0
    r = RequestRecord("c1", 0, 0, 16, 5)
    finish(r, 0.0, [0.1, 0.3, 0.4], [2, 4, 5])
    assert (r.ttft_s, r.e2e_s, r.output_tokens, r.chunks) == (0.1, 0.4, 5, 3)
    assert r.itl_s == pytest.approx([0.0, 0.1, 0.1, 0.1])


def test_finish_without_per_chunk_counts_scales_chunk_gaps_by_tokens_per_gap() -> None:
    # 3 chunks, but the final usage says 5 tokens: 4 token gaps over 2 chunk gaps, 2 tokens per chunk gap
    r = RequestRecord("c1", 0, 0, 16, 5, completion_tokens=5)
    finish(r, 0.0, [0.1, 0.3, 0.5], None)
    assert r.output_tokens == 5 and r.itl_s == pytest.approx([0.1, 0.1])
    one = RequestRecord("c1", 0, 1, 16, 3, completion_tokens=3)
    finish(one, 0.0, [0.1, 0.2, 0.4], None)
    assert one.itl_s == pytest.approx([0.1, 0.2])  # one token per chunk: the gaps as they are


def ok_record(index: int, ttft: float, e2e: float, tokens: int = 5) -> RequestRecord:
    gaps = [(e2e - ttft) / (tokens - 1)] * (tokens - 1)
    return RequestRecord("c1", 0, index, 16, tokens, ok=True, ttft_s=ttft, e2e_s=e2e, itl_s=gaps, output_tokens=tokens)


def test_metrics_by_hand() -> None:
    # two requests of 5 tokens: TTFT 100 and 300 ms, end 500 and 700 ms; the level took 1 s
    a, b = ok_record(0, 0.1, 0.5), ok_record(1, 0.3, 0.7)
    bad = RequestRecord("c1", 0, 2, 16, 5, error_class="stalled")
    level = summarize(SPEC, [([a, b, bad], 1.0)])
    assert level.output_throughput_tok_s == 10.0  # 10 tokens / 1 s
    assert level.request_throughput_req_s == 2.0
    assert level.tpot_ms.mean == pytest.approx(100.0)  # (500 - 100) / 4 and (700 - 300) / 4
    assert level.ttft_ms.p50 == pytest.approx(200.0)
    assert level.e2el_ms.mean == pytest.approx(600.0)
    assert level.achieved_concurrency == 1.2  # 1.2 s of requests in 1 s
    assert level.per_user_tok_s == pytest.approx((10 + 5 / 0.7) / 2, abs=0.01)
    assert (level.completed, level.failed, level.failures) == (2, 1, {"stalled": 1})
    assert level.mean_prompt_tokens is None  # no usage came back: the server did not count the prompts
    a.prompt_tokens, b.prompt_tokens, bad.prompt_tokens = 250, 262, 999
    assert summarize(SPEC, [([a, b, bad], 1.0)]).mean_prompt_tokens == 256.0  # the completed requests' prompts


def test_goodput_by_hand() -> None:
    # TTFT 100 / 300 ms, TPOT 100 ms each; SLO ttft <= 200: one of the three sent requests is good
    a, b = ok_record(0, 0.1, 0.5), ok_record(1, 0.3, 0.7)
    bad = RequestRecord("c1", 0, 2, 16, 5, error_class="timeout")
    level = summarize(SPEC, [([a, b, bad], 2.0)], {"ttft": 200.0, "tpot": 100.0}, 0.3)
    assert level.goodput is not None
    assert (level.goodput.good, level.goodput.share, level.goodput.request_goodput_req_s) == (1, 0.3333, 0.5)
    assert level.goodput.met  # a third meets both, and a share of 0.3 was asked
    strict = summarize(SPEC, [([a, b, bad], 2.0)], {"ttft": 200.0}, 0.5).goodput
    assert strict is not None and not strict.met


def test_a_level_that_completed_nothing_has_no_nan() -> None:
    failed = [RequestRecord("c1", 0, i, 16, 5, error_class="timeout") for i in range(3)]
    level = summarize(SPEC, [(failed, 1.5)], {"ttft": 100.0})
    assert (level.completed, level.output_throughput_tok_s, level.per_user_tok_s) == (0, 0.0, None)
    assert level.ttft_ms.mean is None and level.goodput is not None and level.goodput.share == 0.0
    headers, rows = headers_for([asdict(level)])
    assert rows[0][headers.index("TTFT ms")] is None and rows[0][headers.index("in SLO")] == "0%"


def test_constant_arrivals_are_evenly_spaced() -> None:
    assert arrival_offsets(4, 2.0, math.inf, 0) == pytest.approx([0.5, 1.0, 1.5, 2.0])


@pytest.mark.parametrize("burstiness", [0.25, 1.0, 4.0], ids=["bursty", "poisson", "steady"])
def test_gamma_arrivals_have_vllms_shape(burstiness: float) -> None:
    # gaps of a gamma with shape b and mean 1/rate: coefficient of variation 1/sqrt(b); the last at count/rate
    offsets = arrival_offsets(20000, 10.0, burstiness, 1)
    gaps = np.diff([0.0, *offsets])
    assert offsets[-1] == pytest.approx(2000.0)
    assert gaps.std() / gaps.mean() == pytest.approx(1 / math.sqrt(burstiness), rel=0.05)


def test_dataset_file_format(tmp_path: Path) -> None:
    path = tmp_path / "d.jsonl"
    path.write_text('{"prompt": "hello there", "output_tokens": 7}\n\n{"prompt": "x"}\n')
    prompts = read_dataset(path, 32)
    assert [(p.text, p.input_len, p.output_len) for p in prompts] == [("hello there", None, 7), ("x", None, 32)]


@pytest.mark.parametrize(
    "text",
    [
        '{"prompt": ""}',
        '{"text": "x"}',
        '{"prompt": "x", "output_tokens": 0}',
        '{"prompt": "x", "output_tokens": 1000000000000}',
        "not json",
        '["x"]',
    ],
    ids=["empty-prompt", "no-prompt", "zero-output", "huge-output", "not-json", "not-an-object"],
)
def test_a_bad_dataset_line_is_named(tmp_path: Path, text: str) -> None:
    path = tmp_path / "d.jsonl"
    path.write_text('{"prompt": "fine"}\n' + text + "\n")
    with pytest.raises(BadInput) as e:
        read_dataset(path, 8)
    assert e.value.line() == (
        f'{path} line 2 is not a dataset entry; each line must be {{"prompt": "non-empty text", '
        '"output_tokens": 1 to 1,048,576 (optional)}'
    )


def test_a_dataset_that_is_no_file_or_too_big_is_refused_unread(tmp_path: Path) -> None:
    """`--dataset /dev/zero` read without a bound drove a host into a global OOM at 17 GB (trust case 87)."""
    with pytest.raises(BadInput) as e:
        read_dataset(Path("/dev/zero"), 8)
    assert e.value.line() == "--dataset /dev/zero is not a regular file; give a JSONL file of prompts"
    big = tmp_path / "big.jsonl"
    with big.open("wb") as f:  # sparse: no disk used
        f.truncate((256 << 20) + 1)
    with pytest.raises(BadInput) as e:
        read_dataset(big, 8)
    assert e.value.message == f"--dataset {big} is larger than 256 MiB"


def test_parse_slo() -> None:
    assert parse_slo("ttft=200,tpot:50") == (("ttft", 200.0), ("tpot", 50.0))
    for bad in ("ttft", "itl=3", "ttft=-1", "ttft=nan"):
        with pytest.raises(BadInput):
            parse_slo(bad)


@pytest.mark.parametrize(
    "kw, message",
    [
        ({"concurrency": (1000000,)}, "--concurrency 1000000 is beyond the limit of 16384"),
        ({"concurrency": (1, 2, 1)}, "--concurrency repeats [1]"),
        ({"request_timeout_s": 0.0}, "--request-timeout 0.0 is not a positive number of seconds"),
        ({"request_timeout_s": -1.0}, "--request-timeout -1.0 is not a positive number of seconds"),
        ({"request_timeout_s": math.nan}, "--request-timeout nan is not a positive number of seconds"),
        ({"label": "../../x"}, "--label '../../x' cannot be a file name"),
        ({"request_rates": (1.0, 1.0)}, "--request-rate repeats [1.0]"),
        ({"request_rates": (2.0,), "concurrency": (1, 2)}, "with --request-rate, --concurrency is one cap"),
        ({"shared_prefix_len": 16}, "--shared-prefix 16 must be shorter than the prompt"),
        (
            {"request_rates": (1e9,), "concurrency": ()},
            "--request-rate 1e+09 would send 10,000,000,000 prompts per level",
        ),
        (
            {"request_rates": (1e-9,), "concurrency": ()},
            "--request-rate 1e-09 would take 8,000,000,000 s to send 8 prompts",
        ),
        ({"arrival": "gamma", "burstiness": 1e-300}, "--burstiness 1e-300 is outside 0.01..1000"),
    ],
    ids=[
        "huge-concurrency",
        "duplicate-levels",
        "timeout-0",
        "timeout-negative",
        "timeout-nan",
        "label-path",
        "duplicate-rates",
        "rate-with-levels",
        "prefix-too-long",
        "rate-too-high",
        "rate-too-low",
        "burstiness-tiny",
    ],
)
def test_config_refuses(kw: dict[str, object], message: str) -> None:
    with pytest.raises(BadInput) as e:
        validate(BenchConfig(url="http://x", input_len=16, **kw))  # type: ignore[arg-type]
    assert e.value.message.startswith(message)


def test_a_url_password_and_an_api_key_together_are_one_line() -> None:
    """aiohttp refused the pair with an internal error (trust case 103)."""
    with pytest.raises(BadInput) as e:
        validate(BenchConfig(url="http://u:pw-0001@127.0.0.1:8000", api_key="k-0001"))
    assert e.value.line() == (
        "--url carries a user and password and an API key is given too: a request can send only one; drop the "
        "password from --url, or the key (--api-key-file, $NEMOLAUNCH_API_KEY, $VLLM_API_KEY)"
    )
