"""How much CPU an idle vLLM server takes (does a co-resident server disturb the one `ab` measures?).

Starts one server with `nemolaunch serve`, sends one completion, waits SETTLE seconds, then samples every thread of
the server's processes for WINDOW seconds and prints the total and the busiest threads. On the CPU engine run it
under the engine lock:
    flock /tmp/nemolaunch-engine.lock .venv/bin/python benchmarks/idle_cpu.py --python ENGINE --model build/tiny-llama
"""

from __future__ import annotations

import argparse
import json
import signal
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import psutil


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--python", required=True, help="the engine's interpreter")
    ap.add_argument("--model", required=True)
    ap.add_argument("--profile", default="cpu")
    ap.add_argument("--port", type=int, default=18123)
    ap.add_argument("--settle", type=float, default=3.0, help="seconds idle before sampling")
    ap.add_argument("--window", type=float, default=15.0, help="seconds sampled")
    a = ap.parse_args()
    url = f"http://127.0.0.1:{a.port}"
    argv = [sys.executable, "-m", "launcher", "serve", "--profile", a.profile, "--model", a.model]
    argv += ["--python", a.python, "--port", str(a.port), "--quiet", "--log-file", f"/tmp/idle-cpu-{a.port}.log"]
    server = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, cwd=Path(__file__).parents[1])
    # SIGTERM (timeout, a killed job) must reach the `finally` that stops the server: one run left it orphaned
    signal.signal(signal.SIGTERM, lambda signum, frame: sys.exit(143))
    try:
        started = time.monotonic()
        while True:
            try:
                urllib.request.urlopen(f"{url}/v1/models", timeout=2).read()
                break
            except OSError:
                if server.poll() is not None or time.monotonic() - started > 600:
                    print("the server did not start", file=sys.stderr)
                    return 1
                time.sleep(2)
        body = json.dumps({"model": a.model, "prompt": "hello", "max_tokens": 8}).encode()
        req = urllib.request.Request(f"{url}/v1/completions", data=body, headers={"Content-Type": "application/json"})
        urllib.request.urlopen(req, timeout=120).read()
        time.sleep(a.settle)
        procs = [psutil.Process(server.pid), *psutil.Process(server.pid).children(recursive=True)]

        def snapshot() -> dict[tuple[int, int], tuple[str, float]]:
            out = {}
            for p in procs:
                try:
                    for t in p.threads():
                        name = Path(f"/proc/{p.pid}/task/{t.id}/comm").read_text().strip()
                        out[(p.pid, t.id)] = (name, t.user_time + t.system_time)
                except (psutil.Error, OSError):
                    pass
            return out

        before = snapshot()
        time.sleep(a.window)
        after = snapshot()
        rows = sorted(((after[k][1] - before.get(k, ("", 0.0))[1]) / a.window * 100, after[k][0], k) for k in after)[
            ::-1
        ]
        for pct, name, (pid, tid) in rows[:5]:
            print(f"  {pct:5.1f}%  pid {pid} thread {tid} {name}")
        print(
            f"idle server CPU, {a.settle:.0f}-{a.settle + a.window:.0f} s after its last request: "
            f"{sum(r[0] for r in rows):.1f}% of one core"
        )
        return 0
    finally:
        server.send_signal(2)
        server.wait(60)


if __name__ == "__main__":
    sys.exit(main())
