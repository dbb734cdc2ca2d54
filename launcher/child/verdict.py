"""What an exception raised by a kernel's set-up or first call means: the kernel cannot run here (unsupported,
unavailable), the harness cannot drive it (not-probed), or a real failure of the kernel. Standard library only:
kernel_probe.py runs it under the engine's interpreter, the tests run it without torch."""

from __future__ import annotations

from typing import Any

# what libraries say when a kernel has no build or no tactic for this GPU (cuBLAS, CUTLASS, nvcc's fatbins)
UNSUPPORTED_TEXT = (
    "NOT_SUPPORTED",
    "not supported",
    "no kernel image",
    "unsupported architecture",
    "for CUDA device capability",
    "unsupported on sm",
    "requires sm",
)


class Unsupported(Exception):
    """The kernel says it cannot run here (capability, missing library): not a failure of the kernel."""


class NotProbed(Exception):
    """The kernel could run here, but this harness cannot drive it yet."""


def classify(e: BaseException) -> dict[str, Any] | None:
    """{"status", "error"} for errors that say the kernel cannot run here or cannot be driven; None for a real
    failure (the caller lets it propagate: the harness reports it as failed, with its class and message)."""
    text = str(e)
    first = text.splitlines()[0] if text else ""
    if isinstance(e, Unsupported):
        return {"status": "unsupported", "error": text}
    if isinstance(e, NotProbed):
        return {"status": "not-probed", "error": text}
    # a missing module, or an API that moved (the probe was written against another version's signature)
    if isinstance(e, ImportError) or (
        isinstance(e, AttributeError | TypeError)
        and ("has no attribute" in text or "argument" in text or "cannot import" in text)
    ):
        return {"status": "unavailable", "error": f"{type(e).__name__}: {first}"[:400]}
    if isinstance(e, RuntimeError | NotImplementedError | ValueError) and any(
        needle.lower() in text.lower() for needle in UNSUPPORTED_TEXT
    ):
        return {"status": "unsupported", "error": f"{type(e).__name__}: {first}"[:400]}
    return None
