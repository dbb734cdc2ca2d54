"""Server-sent events, as OpenAI-compatible servers stream them: bytes in, `data:` payloads out.

One job: framing. It knows nothing about tokens or timing, so the benchmark client and serve's smoke completion
share it. Comments (`: ping`), `event:`/`id:` lines and blank separators are skipped; a payload split across
network blocks is kept until its line ends.
"""

from __future__ import annotations

DONE = b"[DONE]"


class SSEReader:
    """Feed it the bytes as they arrive; it returns the complete `data:` payloads, stripped."""

    __slots__ = ("_pending",)

    def __init__(self) -> None:
        self._pending = b""

    def feed(self, block: bytes) -> list[bytes]:
        if self._pending:
            block, self._pending = self._pending + block, b""
        # the common block, whole `data: PAYLOAD\n\n` events and nothing else, in one split (the per-chunk path of
        # a benchmark client); the newline count proves that no event held another line, so the payloads are the
        # ones the line by line path below gives
        if block.startswith(b"data: ") and block.endswith(b"\n\n"):
            newlines = block.count(b"\n")
            if newlines == 2:  # one event, the usual block of a paced stream
                return [block[6:-2].strip()]
            events = block[6:-2].split(b"\n\ndata: ")
            if newlines == 2 * len(events):
                return [e.strip() for e in events]
        *lines, self._pending = block.split(b"\n")
        return [line[5:].strip() for line in lines if line.startswith(b"data:")]

    @property
    def pending(self) -> bytes:
        """What arrived after the last complete line (nothing, on a well-formed stream that ended)."""
        return self._pending
