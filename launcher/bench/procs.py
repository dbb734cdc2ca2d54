"""The client split over processes: one level's streams shared among N worker processes, each with its own event
loop (uvloop when it is installed, as it is wherever vLLM is), the records merged in the parent.

With hundreds of streams one Python process spends its core on the client (reading and timing chunks) and the
client becomes the measurement. Workers change where the work runs, not what is measured: every worker times its
requests with the same `one_request` against one level start (time.perf_counter is CLOCK_MONOTONIC, one clock for
every process on the machine), takes the next prompt from one shared counter (workers take prompts in turn, as
in one process), and sends each finished RequestRecord to the parent, which logs it at once and computes the
level's statistics with the same `summarize` over the merged records.
"""

from __future__ import annotations

import asyncio
import contextlib
import multiprocessing as mp
import queue as queue_mod
import resource
import signal
import time
from collections.abc import Callable, Coroutine
from typing import Any, TypeVar

import aiohttp

from launcher.bench.client import RequestRecord, Target, length_ok, one_request
from launcher.bench.config import BenchConfig, LevelSpec
from launcher.bench.workload import Prompt

T = TypeVar("T")


def run_async(main: Coroutine[Any, Any, T]) -> T:
    """asyncio.run, on uvloop's loop when uvloop is installed (an optional speed-up: the per-chunk path of the
    client is the event loop's as much as ours)."""
    try:
        import uvloop
    except ImportError:
        return asyncio.run(main)
    with asyncio.Runner(loop_factory=uvloop.new_event_loop) as runner:
        return runner.run(main)


def shares(concurrency: int, processes: int) -> list[int]:
    """Streams per worker: as even as possible, no worker without one."""
    n = max(1, min(processes, concurrency))
    return [concurrency // n + (1 if i < concurrency % n else 0) for i in range(n)]


def _worker(
    cfg: BenchConfig,
    target: Target,
    spec: LevelSpec,
    prompts: list[Prompt],
    repeat: int,
    streams: int,
    count: int,
    counter: Any,
    go: Any,
    out: Any,
) -> None:
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # the parent stops the workers; Ctrl-C reaches it alone

    async def main() -> None:
        connector = aiohttp.TCPConnector(limit=0)
        async with aiohttp.ClientSession(connector=connector, timeout=aiohttp.ClientTimeout(total=None)) as session:
            out.put("ready")
            start, deadline = go.recv()

            def take() -> int | None:
                if deadline is not None and time.perf_counter() >= deadline:
                    return None
                with counter.get_lock():
                    index = int(counter.value)
                    if deadline is None and index >= count:
                        return None
                    counter.value = index + 1
                return index

            async def stream() -> None:
                while (index := take()) is not None:
                    p = prompts[index % len(prompts)]
                    record = RequestRecord(spec.tag, repeat, index, p.input_len, p.output_len)
                    await one_request(
                        session, target, p.text, record, start, cfg.request_timeout_s, cfg.stall_timeout_s
                    )
                    if record.ok:
                        record.length_ok = length_ok(cfg.endpoint, record)
                    out.put(record)

            cpu0 = cpu_seconds()
            await asyncio.gather(*(stream() for _ in range(streams)))
            out.put(("cpu", cpu_seconds() - cpu0))

    try:
        run_async(main())
    finally:
        out.put(None)


def cpu_seconds() -> float:
    r = resource.getrusage(resource.RUSAGE_SELF)
    return r.ru_utime + r.ru_stime


async def run_level_split(
    cfg: BenchConfig,
    target: Target,
    spec: LevelSpec,
    prompts: list[Prompt],
    repeat: int,
    count: int,
    done: Callable[[RequestRecord], None],
) -> tuple[float, float]:
    """One fixed-concurrency level over cfg.processes_for(concurrency) workers; each finished record goes to `done`
    as it arrives. Returns the level's start (perf_counter), the same for every worker."""
    assert spec.concurrency is not None
    ctx = mp.get_context("spawn")
    counter = ctx.Value("q", 0)
    out: Any = ctx.Queue()
    procs, pipes = [], []
    for streams in shares(spec.concurrency, cfg.processes_for(spec.concurrency)):
        mine, theirs = ctx.Pipe()
        proc = ctx.Process(
            target=_worker,
            args=(cfg, target, spec, prompts, repeat, streams, count, counter, theirs, out),
            daemon=True,
        )
        proc.start()
        procs.append(proc)
        pipes.append(mine)
    loop = asyncio.get_running_loop()
    stop = False
    cpu: list[float] = []

    def receive(until_ready: bool) -> None:
        ready = finished = 0
        while not stop:
            try:
                item = out.get(timeout=0.2)
            except queue_mod.Empty:
                if out.empty() and any(p.exitcode not in (None, 0) for p in procs):
                    raise RuntimeError("a bench client process died") from None
                continue
            if item == "ready":
                ready += 1
                if until_ready and ready == len(procs):
                    return
            elif isinstance(item, tuple):
                cpu.append(item[1])
            elif item is None:
                finished += 1
                if finished == len(procs):
                    return
            else:
                loop.call_soon_threadsafe(done, item)

    try:
        await loop.run_in_executor(None, receive, True)  # every worker has its loop and session
        start = time.perf_counter()
        deadline = start + cfg.duration_s if cfg.duration_s else None
        for pipe in pipes:
            pipe.send((start, deadline))
        await loop.run_in_executor(None, receive, False)
        await asyncio.sleep(0)  # the records handed over with call_soon_threadsafe run first
        return start, sum(cpu)
    finally:
        stop = True
        for proc in procs:
            if proc.is_alive():
                proc.terminate()
        for proc in procs:
            with contextlib.suppress(Exception):
                proc.join(timeout=5)
