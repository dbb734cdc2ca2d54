"""What else happened on the machine during a pass, so a pass that measured something else is not averaged in:

- the GPU (NVML, sampled every half second): SM and memory clocks, power, temperature, clock-event reasons, and
  compute processes that are not ab's servers. A thermal or hardware slowdown, or a foreign process, makes the
  pass invalid. A software power cap is recorded but does not: a busy H200 at high concurrency runs at its power
  limit as its normal steady state, so excluding it would exclude the very load being measured;
- the server's log: a line that says vLLM compiled or tuned a kernel on first use (vLLM 0.26's JIT monitor,
  FlashInfer and DeepGEMM JIT, autotuning) means the pass timed a compiler, not the configuration.

pynvml is imported only here, lazily; a machine without a GPU records "no GPU".
"""

from __future__ import annotations

import contextlib
import os
import re
import statistics
import threading
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

# first-use compilation in a server log (vLLM 0.26: "Triton kernel JIT compilation during inference: ..."; the
# others as FlashInfer, DeepGEMM and vLLM's autotuners print them); matched case-insensitively
JIT_LINES = re.compile(
    r"JIT compilation during inference"  # vLLM 0.26's JIT monitor (seen on the H200, 2026-12-03)
    r"|\bBuilding\b.*\.cuda\.o\b|_jit_binding\.cuda\.o"  # a FlashInfer JIT module compiled by ninja
    r"|flashinfer\.jit: .*\b(compil|build)"
    r"|DeepGEMM.*\b(JIT|compil)"
    r"|\[Autotuner\]: (Autotuning|Tuning)\b|\bautotuning\b.*\b(start|begin)",
    re.IGNORECASE,
)
INVALIDATING = {  # NVML clock-event reason bit -> its name; any of these during a pass makes it invalid
    0x0000000000000008: "hardware slowdown",
    0x0000000000000020: "software thermal slowdown",
    0x0000000000000040: "hardware thermal slowdown",
    0x0000000000000080: "hardware power brake",
}
RECORDED = {0x0000000000000004: "software power cap"}
SAMPLE_S = 0.5


@dataclass
class GpuRecord:
    """What NVML saw during one pass, over every GPU ab can see."""

    gpus: list[str] = field(default_factory=list)  # UUIDs
    sm_mhz: list[int] = field(default_factory=list)
    mem_mhz: list[int] = field(default_factory=list)
    power_w: list[float] = field(default_factory=list)
    temp_c: list[int] = field(default_factory=list)
    reasons: int = 0
    foreign: set[int] = field(default_factory=set)  # compute processes that are not ab's servers
    error: str | None = None

    def summary(self) -> dict[str, Any]:
        if self.error:
            return {"gpu": self.error}

        def span(values: list[Any]) -> list[Any] | None:
            return [min(values), round(statistics.median(values), 1), max(values)] if values else None

        return {
            "gpus": self.gpus,
            "sm_mhz": span(self.sm_mhz),
            "mem_mhz": span(self.mem_mhz),
            "power_w": span(self.power_w),
            "temp_c": span(self.temp_c),
            "events": [name for bit, name in {**INVALIDATING, **RECORDED}.items() if self.reasons & bit],
            "foreign_pids": sorted(self.foreign),
        }

    def invalid(self) -> str | None:
        """Why the pass does not count, or None."""
        slow = [name for bit, name in INVALIDATING.items() if self.reasons & bit]
        if slow:
            return f"the GPU slowed down during the pass ({', '.join(slow)})"
        if self.foreign:
            return f"another process used the GPU during the pass (pid {', '.join(map(str, sorted(self.foreign)))})"
        return None


def _visible(pynvml: Any) -> list[Any]:
    count = pynvml.nvmlDeviceGetCount()
    wanted = os.environ.get("CUDA_VISIBLE_DEVICES")
    if wanted is None or not wanted.strip():
        return [pynvml.nvmlDeviceGetHandleByIndex(i) for i in range(count)]
    handles = []
    for item in (w.strip() for w in wanted.split(",")):
        with contextlib.suppress(pynvml.NVMLError, ValueError):
            handles.append(
                pynvml.nvmlDeviceGetHandleByIndex(int(item)) if item.isdigit()
                else pynvml.nvmlDeviceGetHandleByUUID(item)
            )  # fmt: skip
    return handles


def _sample(pynvml: Any, handles: list[Any], ours: set[int], rec: GpuRecord) -> None:
    for h in handles:
        with contextlib.suppress(pynvml.NVMLError):
            rec.sm_mhz.append(pynvml.nvmlDeviceGetClockInfo(h, pynvml.NVML_CLOCK_SM))
            rec.mem_mhz.append(pynvml.nvmlDeviceGetClockInfo(h, pynvml.NVML_CLOCK_MEM))
            rec.power_w.append(round(pynvml.nvmlDeviceGetPowerUsage(h) / 1000, 1))
            rec.temp_c.append(pynvml.nvmlDeviceGetTemperature(h, pynvml.NVML_TEMPERATURE_GPU))
            rec.reasons |= pynvml.nvmlDeviceGetCurrentClocksEventReasons(h)
        with contextlib.suppress(pynvml.NVMLError):
            rec.foreign |= {p.pid for p in pynvml.nvmlDeviceGetComputeRunningProcesses(h)} - ours


@contextlib.contextmanager
def watch_gpu(ours: set[int]) -> Iterator[GpuRecord]:
    """NVML sampled in a thread while the block runs; `ours` are the pids of ab's servers (their processes may use
    the GPU). Without NVML or a GPU the record says so and nothing is sampled."""
    rec = GpuRecord()
    try:
        import pynvml

        pynvml.nvmlInit()
    except Exception as e:  # no bindings, no driver, no permission: all mean "no GPU to watch"
        rec.error = f"no GPU ({type(e).__name__})"
        yield rec
        return
    stop = threading.Event()
    try:
        handles = _visible(pynvml)
        if not handles:
            rec.error = "no GPU"
            yield rec
            return
        for h in handles:
            with contextlib.suppress(pynvml.NVMLError):
                uuid = pynvml.nvmlDeviceGetUUID(h)
                rec.gpus.append(uuid.decode() if isinstance(uuid, bytes) else uuid)

        def loop() -> None:
            while not stop.wait(SAMPLE_S):
                _sample(pynvml, handles, ours, rec)

        _sample(pynvml, handles, ours, rec)
        sampler = threading.Thread(target=loop, name="nvml", daemon=True)
        sampler.start()
        try:
            yield rec
        finally:
            stop.set()
            sampler.join(timeout=2)
            _sample(pynvml, handles, ours, rec)
    finally:
        with contextlib.suppress(Exception):
            pynvml.nvmlShutdown()


def log_offset(log: Path | None) -> int:
    try:
        return log.stat().st_size if log else 0
    except OSError:
        return 0


def compiled_during(log: Path | None, since: int) -> str | None:
    """The first first-use compilation line the server logged after byte `since`, or None."""
    if log is None:
        return None
    try:
        with log.open("rb") as f:
            f.seek(since)
            text = f.read().decode("utf-8", errors="replace")
    except OSError:
        return None
    for line in text.splitlines():
        if JIT_LINES.search(line):
            return line.strip()[:200]
    return None
