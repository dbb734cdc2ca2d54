"""A request the server answered with an error status, read from an access line (uvicorn's, which vLLM and SGLang
print: `"POST /v1/chat/completions HTTP/1.1" 400 Bad Request`), and what to look at when the log says no more:
the reason is in the response body, and the server logs it only when asked to."""

from __future__ import annotations

import re

# the status after the protocol (an excerpt may begin at it: `1.1" 500 Internal Server Error`)
ACCESS = re.compile(
    rb'(?:(?:"(?P<method>[A-Z]{3,7}) (?P<path>[^\s"]{1,300}) )?HTTP/|^[ \t]*)\d(?:\.\d)?" (?P<status>[45]\d\d)(?=\s|$)',
    re.MULTILINE,
)
NEEDLES = (b'" 4', b'" 5')
MAX_LOOKS = 64  # candidates checked per block: a block full of `" 4` in other text is not read line by line
# a browser's or a probe's GET of a page the server lacks is no request refused
READS = (b"GET", b"HEAD")
REASONS = {
    "400": "a prompt plus max_tokens over --max-model-len, a sampling parameter out of range, messages the chat "
    "template refuses or a model without one (--chat-template), more images than --limit-mm-per-prompt",
    "401": "a missing or wrong API key (--api-key or VLLM_API_KEY on the server, the Authorization header sent)",
    "404": "a model name other than the one served (--served-model-name; GET /v1/models lists it), a LoRA adapter "
    "not loaded (--lora-modules), or a route this server does not have",
    "413": "a request body over the server's (or a proxy's) size limit",
    "422": "a body that does not fit the API's schema (a field of the wrong name or type)",
    "429": "the server's or a proxy's rate or queue limit",
}
FAILED_ON_REQUEST = (
    "the server failed on the request and went on serving: the traceback logged with it (uvicorn: 'Exception in "
    "ASGI application') names the error; on the chat route a model without a chat template is a common one "
    "(--chat-template)"
)
LOG_REQUESTS = (
    "to see the reason in the server's own log, restart with --enable-log-requests and --uvicorn-log-level debug "
    "(SGLang: --log-requests --log-level debug; TGI: RUST_LOG=debug)"
)


def refused_at(text: bytes) -> tuple[int, str] | None:
    """The first access line of `text` with an error status (its offset), and what to look at for it."""
    looks = 0
    for needle in NEEDLES:
        pos = text.find(needle)
        while pos >= 0 and looks < MAX_LOOKS:
            looks += 1
            start = text.rfind(b"\n", 0, pos) + 1
            end = text.find(b"\n", pos)
            m = ACCESS.search(text, start, end if end >= 0 else len(text))
            if m and not (m["method"] in READS and m["status"].startswith(b"4")):
                return start, next_step(m["status"].decode(), m["method"], m["path"])
            pos = text.find(needle, pos + 1)
    return None


def next_step(status: str, method: bytes | None, path: bytes | None) -> str:
    request = f" to {method.decode()} {path.decode()}" if method and path else ""
    if status.startswith("5"):
        return f"HTTP {status}{request}: {FAILED_ON_REQUEST}; {LOG_REQUESTS}"
    reasons = REASONS.get(status, REASONS["400"])
    return (
        f"HTTP {status}{request}: the reason is in the response body the client got (print it); the usual ones: "
        f"{reasons}; {LOG_REQUESTS}"
    )
