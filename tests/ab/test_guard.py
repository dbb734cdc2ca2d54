"""What makes a pass invalid besides bench's own failures: first-use compilation in the server's log (read from a
real H200 vLLM 0.26 log), a GPU that slowed down or was shared, and a window too short to count."""

from __future__ import annotations

from pathlib import Path

from launcher.ab.guard import GpuRecord, compiled_during, watch_gpu
from launcher.ab.window import drift, settled, steady_window
from tests.helpers import FIXTURES

LOG = FIXTURES / "logs" / "h200-vllm026-nemotron-super-sm120-2026-12-03.log"


def _around(path: Path, text: bytes) -> tuple[int, int]:
    """Byte offsets just before the first line holding `text` and just after the last one."""
    data = path.read_bytes()
    first, last = data.find(text), data.rfind(text)
    return data.rfind(b"\n", 0, first) + 1, data.find(b"\n", last) + 1


def test_first_use_compilation_in_the_log_invalidates_a_pass() -> None:
    """The Nemotron Super start of 2026-12-03: FlashInfer's autotuner at start-up, then vLLM's JIT
    monitor in the first requests after it served: a pass over those requests timed a compiler."""
    before, after = _around(LOG, b"JIT compilation during inference")
    during = compiled_during(LOG, before)
    assert during is not None and "Triton kernel JIT compilation during inference: _zero_kv_blocks_kernel" in during
    assert compiled_during(LOG, after) is None  # the rest of the log compiles nothing
    assert "Autotuning process starts" in (compiled_during(LOG, 0) or "")


def test_a_slowed_down_or_shared_gpu_invalidates_a_pass_and_a_power_cap_does_not() -> None:
    assert GpuRecord(reasons=0x4).invalid() is None  # software power cap: a busy H200's steady state
    assert GpuRecord(reasons=0x4).summary()["events"] == ["software power cap"]
    assert GpuRecord(reasons=0x20).invalid() == "the GPU slowed down during the pass (software thermal slowdown)"
    shared = GpuRecord(foreign={4242})
    assert shared.invalid() == "another process used the GPU during the pass (pid 4242)"


def test_no_gpu_is_recorded_as_such() -> None:
    with watch_gpu(set()) as rec:  # this machine has no GPU (or no NVML); on a GPU host it samples
        pass
    assert rec.invalid() is None
    assert rec.error is None or (rec.summary() == {"gpu": rec.error} and rec.error.startswith("no GPU"))


def _closed_loop(streams: int, requests: int, latency: float, tokens: int = 10) -> list[dict[str, object]]:
    """Requests as a closed-loop client sends them: each stream starts its next request when one ends."""
    out: list[dict[str, object]] = []
    for s in range(streams):
        for k in range(requests // streams):
            start = k * latency + s * 0.001
            out.append({"ok": True, "start_s": start, "ttft_s": 0.01, "e2e_s": latency, "output_tokens": tokens,
                        "itl_s": [(latency - 0.01) / (tokens - 1)] * (tokens - 1)})  # fmt: skip
    return out


def test_the_window_holds_the_concurrency_and_leaves_ramp_and_drain_out() -> None:
    records = _closed_loop(streams=4, requests=200, latency=0.1)
    records += [{"ok": True, "start_s": 5.0, "ttft_s": 0.01, "e2e_s": 1.0, "output_tokens": 10, "itl_s": []}]
    w = steady_window(records, concurrency=4)
    assert w is not None and w.short is None
    assert 4.9 < w.seconds < 5.1 and w.in_flight > 3.9  # the lone straggler after 5 s is drain, not window
    assert w.drain_s > 0.9 and w.tok_s is not None and 390 < w.tok_s < 410  # 4 streams x 10 tokens / 0.1 s


def test_a_window_with_too_few_requests_is_short() -> None:
    w = steady_window(_closed_loop(streams=8, requests=40, latency=0.5), concurrency=8)
    assert (
        w is not None
        and w.short is not None
        and w.short.endswith("requests completed in the window, fewer than 10 x 8")
    )


def test_warm_up_settles_when_the_last_bins_stop_drifting() -> None:
    assert not settled((100.0, 120.0, 140.0, 160.0, 180.0), 0.02)
    assert settled((100.0, 170.0, 180.0, 181.0, 180.5, 179.5, 180.0), 0.02)


def _waves(streams: int, hold_s: float, prefill_s: float, tokens: int, step_s: float) -> list[dict[str, object]]:
    """A closed loop at high concurrency in lockstep: every stream's prefill together (no token for prefill_s),
    then `tokens` decode steps together; each stream sends its next request when one ends, until hold_s."""
    cycle = prefill_s + tokens * step_s
    out: list[dict[str, object]] = []
    for k in range(int(hold_s // cycle) + 1):
        for s in range(streams):
            out.append({"ok": True, "start_s": k * cycle + s * 1e-4, "ttft_s": prefill_s + step_s, "e2e_s": cycle,
                        "output_tokens": tokens, "itl_s": [step_s] * (tokens - 1)})  # fmt: skip
    return out


def test_waves_of_a_closed_loop_are_not_drift() -> None:
    # the H200, 2026-12-03 (third lease): every side's warm-up read 15-25% apart in one-second bins at c=32 and 64
    # and 1.2-1.4% at c=1, three passes each, "still drifting"; the model: 64 prefills of 256 tokens take ~0.3 s,
    # then 64 decode steps of ~7 ms, a wave every ~0.75 s
    records = _waves(streams=64, hold_s=8.0, prefill_s=0.3, tokens=64, step_s=0.007)
    w = steady_window(records, concurrency=64)
    assert w is not None and w.latency_s == 0.748
    times = [float(r["start_s"]) + 0.307 + i * 0.007 for r in records for i in range(64)]  # type: ignore[arg-type]
    cov = drift(tuple(float(sum(1 for t in times if b <= t < b + 1)) for b in range(1, 7)))
    assert cov is not None and cov > 0.1  # the waves, cut by one-second bins
    assert len(w.bins) >= 5 and max(w.bins) < 1.001 * min(w.bins)  # whole waves a bin: flat
    assert settled(w.bins, 0.02)
