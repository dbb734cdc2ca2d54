"""How fast `nemolaunch diagnose` reads a large log. Prints seconds and MB/s; not a test.

    python benchmarks/diagnose_speed.py [SIZE_MB] [--no-newlines] [--python ENGINE_PYTHON [--source DIR ...]]

The log is built from the real corpus excerpts (tests/fixtures/corpus) between many ordinary vLLM
INFO lines, so most blocks hold no finding and a few hold many. --no-newlines writes the same bytes with every
newline replaced by a space (one line of SIZE_MB: the case that once cost 14 s and 660 MB). --python names the
engine whose message index is used (built and cached before the timed run, so the time is the reading); --source adds
a package folder to it, as `diagnose --source` does. Prints the
CPU time and peak memory of the diagnose process and the load average too (the machine is shared: wall time varies).
"""

import json
import os
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
NORMAL = (
    "(APIServer pid=3137) INFO 11-30 04:34:03 [loggers.py:123] Engine 000: Avg prompt throughput: 512.0 tokens/s, "
    "Avg generation throughput: 886.1 tokens/s, Running: 32 reqs, Waiting: 0 reqs, GPU KV cache usage: 41.2%\n"
    'INFO:     127.0.0.1:50416 - "POST /v1/completions HTTP/1.1" 200 OK\n'
)


def build(path: Path, size_mb: int, newlines: bool = True) -> None:
    corpus = [json.loads(x)["log"] + "\n" for x in (ROOT / "tests/fixtures/corpus/sm12x-serving-logs.jsonl").open()]
    filler = NORMAL * 2000
    with path.open("w") as f:
        i = 0
        while f.tell() < size_mb << 20:
            chunk = filler + corpus[i % len(corpus)]
            f.write(chunk if newlines else chunk.replace("\n", " "))
            i += 1


def main() -> None:
    args = [a for a in sys.argv[1:] if a != "--no-newlines"]
    python: list[str] = []
    if "--python" in args:
        at = args.index("--python")
        python = ["--python", args[at + 1]]
        del args[at : at + 2]
    while "--source" in args:
        at = args.index("--source")
        python += ["--source", args[at + 1]]
        del args[at : at + 2]
    size_mb = int(args[0]) if args else 200
    with tempfile.TemporaryDirectory() as tmp:
        log = Path(tmp) / "big.log"
        build(log, size_mb, "--no-newlines" not in sys.argv)
        mb = log.stat().st_size / 2**20
        argv = [sys.executable, "-m", "launcher", "diagnose", str(log), "--json", *python]
        warm = Path(tmp) / "warm.log"
        warm.write_text("ok\n")
        subprocess.run([*argv[:4], str(warm), *argv[5:]], capture_output=True, cwd=ROOT, check=False)  # the index
        start = time.perf_counter()
        r = subprocess.run(argv, capture_output=True, text=True, cwd=ROOT)
        seconds = time.perf_counter() - start
        doc = json.loads(r.stdout)
        usage = resource.getrusage(resource.RUSAGE_CHILDREN)
        peak_mb, cpu = usage.ru_maxrss / 1024, usage.ru_utime + usage.ru_stime
        index = doc.get("index") or {}
        print(f"index: {index.get('templates', 0):,} templates of {index.get('packages')}")
        print(
            f"diagnose: {mb:.0f} MB, {doc['lines']:,} lines, {len(doc['findings'])} findings, exit {r.returncode}: "
            f"{seconds:.1f} s ({mb / seconds:.0f} MB/s), {cpu:.1f} s of CPU, peak memory {peak_mb:.0f} MB, "
            f"load average {os.getloadavg()[0]:.1f}"
        )


if __name__ == "__main__":
    main()
