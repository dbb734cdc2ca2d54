"""Two readings of logs that cannot name a cause (design points 8 and 9): a request the server answered with an
error status while it kept serving is reported as a refused request, with what to look at; a container its
orchestrator reports crashed, with no error of its own in the log, says what to collect. Excerpts are from the sixth
fresh set (tests/fixtures/diagnose/fresh-2026-12-03f.jsonl, read after it was measured); the thread is cited."""

from __future__ import annotations

from tests.diagnose.texts import ROOT_LOG, diagnose_text

# https://github.com/vllm-project/vllm/issues/13340: INFO lines only, the last one a 400
ONLY_INFO = (
    'INFO:     127.0.0.1:59042 - "POST /v1/chat/completions HTTP/1.1" 200 OK\n'
    "INFO 02-15 22:09:59 engine.py:275] Added request chatcmpl-803293759b1e415caefd7845b3fa8352.\n"
    "INFO 02-15 22:10:03 metrics.py:455] Avg prompt throughput: 33.4 tokens/s, Avg generation throughput: 37.8 "
    "tokens/s, Running: 1 reqs, Swapped: 0 reqs, Pending: 0 reqs, GPU KV cache usage: 0.1%, CPU KV cache usage: 0.0%.\n"
    'INFO:     127.0.0.1:59042 - "POST /v1/chat/completions HTTP/1.1" 400 Bad Request\n'
)
# https://github.com/vllm-project/vllm/issues/9364: the whole excerpt
BARE_400 = 'INFO:     10.147.113.100:54034 - "POST /v1/chat/completions HTTP/1.1" 400 Bad Request\n'
# https://github.com/sgl-project/sglang/pull/3552: a 500, then a traceback cut before its exception
SGLANG_500 = (
    '1.1" 500 Internal Server Error\n'
    "[2025-04-03 20:54:05] ERROR:    Exception in ASGI application\n"
    "Traceback (most recent call last):\n"
    '  File "/sgl-workspace/sglang/python/sglang/srt/openai_api/adapter.py", line 958, in v1_chat_generate_request\n'
    "    prompt_ids = tokenizer_manager.tokenizer.apply_chat_template(\n"
)
# https://github.com/llm-d/llm-d-benchmark/issues/668: a deploy script's lines, the last one the crash
POD_CRASH = (
    '16:52:48 - "vllm-standalone-llama-3-1b-845945945-dljsw" pod created\n'
    '16:52:53 - "vllm-standalone-llama-3-1b-845945945-dljsw" pod running\n'
    "16:52:53 - Waiting for pods to be Ready (timeout=900s)\n"
    "16:53:24 - \N{CROSS MARK} Crashed container in pod: vllm-standalone-llama-3-1b-845945945-dljsw\n"
)
# not a capture: the kubelet's BackOff event (Kubernetes pkg/kubelet/kuberuntime/kuberuntime_manager.go, doBackOff)
# as kubectl describe pod prints it
BACK_OFF = "  Warning  BackOff  33s (x70 over 15m)  kubelet  Back-off restarting failed container vllm in pod vllm-0\n"


def by_id(text: str) -> dict[str, dict[str, object]]:
    return {str(f["id"]): f for f in diagnose_text(text)}


def test_a_refused_request_in_a_serving_log_is_a_warning_naming_what_to_read() -> None:
    for text in (ONLY_INFO, BARE_400):
        found = by_id(text)
        assert found["request-refused"]["severity"] == "warning", found
        fix = str(found["request-refused"]["fix"])
        assert "HTTP 400 to POST /v1/chat/completions" in fix and "response body" in fix, fix
        assert "--max-model-len" in fix and "--enable-log-requests" in fix, fix
        assert not [f for f in found.values() if f["severity"] == "error"]


def test_a_request_the_server_failed_on_names_the_traceback_and_the_chat_template() -> None:
    fix = str(by_id(SGLANG_500)["request-refused"]["fix"])
    assert fix.startswith("HTTP 500") and "Exception in ASGI application" in fix and "--chat-template" in fix, fix


def test_a_refused_request_a_rule_explains_gets_no_second_word() -> None:
    # https://github.com/vllm-project/vllm/issues/1351 (fresh-2026-12-03f): the error line names the limit
    text = (
        "ERROR: This model's maximum context length is 4096 tokens. However, you requested 4107 tokens.\n"
        'INFO:     127.0.0.1:40000 - "POST /v1/completions HTTP/1.1" 400 Bad Request\n'
    )
    found = by_id(text)
    assert "request-exceeds-context" in found and "request-refused" not in found, found


def test_no_refused_request_where_the_server_died_or_a_page_was_browsed() -> None:
    assert "request-refused" not in by_id(BARE_400 + ROOT_LOG)
    # not a capture: uvicorn's access line for a browser's GET of a page the server lacks
    assert not by_id('INFO:     127.0.0.1:35504 - "GET /favicon.ico HTTP/1.1" 404 Not Found\n')
    # (the healthy CPU-engine log's access lines: a 200 is nothing to report)
    assert not by_id('INFO:     127.0.0.1:35504 - "POST /v1/completions HTTP/1.1" 200 OK\n' * 3)


def test_a_crashed_container_says_to_collect_its_previous_log() -> None:
    for text in (POD_CRASH, BACK_OFF):
        found = by_id(text)
        finding = found["not-enough-evidence"]
        assert finding["severity"] == "warning", finding
        assert "kubectl logs <pod> --previous" in str(finding["fix"]), finding
        assert "kubectl describe pod" in str(finding["fix"]), finding
