"""One level of a sweep: warm-up, then the requests in the load's shape (closed loop at a concurrency, split over
worker processes, or open loop at a request rate), and the prompt pools the levels draw from."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable

import aiohttp

from launcher.bench import procs
from launcher.bench.client import RequestRecord, ServerInfo, Target, length_ok, one_request
from launcher.bench.config import BenchConfig, LevelSpec
from launcher.bench.stats import level_label
from launcher.bench.workload import Prompt, Tokenizer, arrival_offsets, exact_prompts, read_dataset
from launcher.errors import BadInput


class Progress:
    """tqdm on a terminal, nothing otherwise."""

    def __init__(self, total: int, label: str) -> None:
        import sys

        self.bar = None
        if sys.stderr.isatty():
            from tqdm import tqdm

            self.bar = tqdm(total=total, desc=label, unit="req", leave=False)

    def step(self) -> None:
        if self.bar is not None:
            self.bar.update(1)

    def close(self) -> None:
        if self.bar is not None:
            self.bar.close()


async def run_level(
    session: aiohttp.ClientSession,
    target: Target,
    cfg: BenchConfig,
    spec: LevelSpec,
    prompts: list[Prompt],
    repeat: int,
    sink: Callable[[RequestRecord], None],
    cpu: list[float] | None = None,
) -> tuple[list[RequestRecord], float]:
    """Warm-up requests (not recorded), then the level: `concurrency` workers taking prompts in turn, or, with a
    request rate, requests sent at their arrival times with at most `concurrency` in flight. Returns the records and
    the level's wall time (first request sent to last token received). `cpu` gets the client's CPU seconds over
    the level (this process and its workers' streams), warm-up excluded."""
    tag = spec.tag

    async def send(index: int, start: float, queued: float = 0.0) -> RequestRecord:
        p = prompts[index % len(prompts)]
        record = RequestRecord(tag, repeat, index, p.input_len, p.output_len, queue_s=queued)
        await one_request(session, target, p.text, record, start, cfg.request_timeout_s, cfg.stall_timeout_s)
        if record.ok:
            record.length_ok = length_ok(cfg.endpoint, record)
        return record

    for i in range(cfg.warmup):
        await send(i, time.perf_counter())
    count = cfg.prompts_for(spec.concurrency, spec.request_rate)
    cpu0, worker_cpu = procs.cpu_seconds(), 0.0
    records: list[RequestRecord] = []
    timed = cfg.duration_s is not None and spec.request_rate is None
    progress = Progress(0 if timed else count, level_label(spec.__dict__))
    start = time.perf_counter()
    deadline = start + cfg.duration_s if timed and cfg.duration_s else None

    def done(record: RequestRecord) -> None:
        records.append(record)
        sink(record)
        progress.step()

    try:
        if spec.request_rate is None and cfg.processes_for(spec.concurrency or 1) > 1:
            start, worker_cpu = await procs.run_level_split(cfg, target, spec, prompts, repeat, count, done)
        elif spec.request_rate is None:
            assert spec.concurrency is not None
            next_index = 0

            async def worker() -> None:
                nonlocal next_index
                while (time.perf_counter() < deadline) if deadline is not None else next_index < count:
                    index = next_index
                    next_index += 1
                    done(await send(index, start))

            await asyncio.gather(*(worker() for _ in range(spec.concurrency)))
        else:
            cap = asyncio.Semaphore(spec.concurrency) if spec.concurrency else None

            async def arrive(index: int) -> None:
                if cap is None:
                    done(await send(index, start))
                    return
                arrived = time.perf_counter()
                async with cap:
                    done(await send(index, start, time.perf_counter() - arrived))

            tasks = []
            for index, offset in enumerate(
                arrival_offsets(count, spec.request_rate, cfg.burstiness_value(), cfg.seed + repeat)
            ):
                delay = start + offset - time.perf_counter()
                if delay > 0:
                    await asyncio.sleep(delay)
                tasks.append(asyncio.create_task(arrive(index)))
            await asyncio.gather(*tasks)
    finally:
        progress.close()
    if cpu is not None:
        cpu.append(procs.cpu_seconds() - cpu0 + worker_cpu)
    ends = [r.start_s + (r.e2e_s or 0) for r in records if r.ok]
    wall = max(ends) if ends else time.perf_counter() - start
    return records, wall


async def build_prompts(
    session: aiohttp.ClientSession, target: Target, cfg: BenchConfig, specs: list[LevelSpec], info: ServerInfo
) -> dict[int, list[Prompt]]:
    """The prompt pool per prompt length (one pool without a context sweep), checked against the model's limit."""
    if cfg.dataset is not None:
        return {0: read_dataset(cfg.dataset, cfg.output_len)}  # the levels' input_len is 0: the dataset's own
    limit = info.max_model_len(target.model)
    longest = max(s.input_len for s in specs)
    if limit is not None and longest + cfg.output_len > limit:
        raise BadInput(
            f"prompt {longest} + output {cfg.output_len} tokens is beyond the model's context of {limit} tokens",
            f"give --input-len / --context-lens up to {limit - cfg.output_len}",
        )
    tok = Tokenizer(session, target.url, target.model, target.headers)
    pools = {}
    for length in sorted({s.input_len for s in specs}):
        count = max(cfg.prompts_for(s.concurrency, s.request_rate) for s in specs if s.input_len == length)
        pools[length] = await exact_prompts(tok, length, cfg.output_len, count, cfg.seed, cfg.shared_prefix_len)
    return pools
