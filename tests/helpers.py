"""Helpers the tests share: where the checkout and its fixtures are, a free loopback port, a real venv with
chosen dist-info folders, a stand-in vLLM for serve's launch loop, and the engine the Makefile built. Fixtures
(pytest's) live in conftest.py."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from launcher.serve.run import ServePlan

ROOT = Path(__file__).resolve().parent.parent
FIXTURES = ROOT / "tests" / "fixtures"


def engine_paths() -> tuple[Path, Path] | None:
    """The engine's interpreter and the tiny model from `make engine model` (NEMOLAUNCH_TEST_ENGINE/_MODEL)."""
    engine, model = os.environ.get("NEMOLAUNCH_TEST_ENGINE"), os.environ.get("NEMOLAUNCH_TEST_MODEL")
    if engine and model and Path(engine).is_file() and Path(model, "config.json").is_file():
        return Path(engine), Path(model)
    return None


def diagnosed_errors(log: Path, engine_python: Path, env: dict[str, str] | None = None) -> list[str]:
    """The error findings of `nemolaunch diagnose --json` on a log, with the message index of the engine that wrote
    it (built under env's cache folder when env names one)."""
    argv = [sys.executable, "-m", "launcher", "diagnose", str(log), "--json", "--python", str(engine_python)]
    r = subprocess.run(argv, capture_output=True, text=True, timeout=600, env=env)
    findings = json.loads(r.stdout)["findings"]
    errors = [f"{f['id']}: {f['evidence']}" for f in findings if f["severity"] == "error"]
    assert (r.returncode == 0) == (not errors), r.stderr
    return errors


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def make_env(tmp_path: Path, dists: dict[str, str], files: dict[str, str] | None = None) -> Path:
    """A real venv (no pip) whose site-packages holds real dist-info folders and, optionally, package files."""
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True)
    site = next((venv / "lib").glob("python3*/site-packages"))
    for name, version in dists.items():
        info = site / f"{name.replace('-', '_')}-{version}.dist-info"
        info.mkdir()
        (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n")
    for rel, text in (files or {}).items():
        (site / rel).parent.mkdir(parents=True, exist_ok=True)
        (site / rel).write_text(text)
    return venv / "bin" / "python"


# A stand-in vLLM API server (python -c): answers /v1/models with one model on 127.0.0.1:PORT, after printing a real
# log (LOG) and starting an engine core that only waits (CORE), where asked.
STAND_IN_VLLM = """
import http.server, json, subprocess, sys
LOG
CORE
class H(http.server.BaseHTTPRequestHandler):
    def do_GET(self):
        body = json.dumps({"data": [{"id": "stand-in"}]}).encode()
        self.send_response(200); self.send_header("Content-Length", str(len(body))); self.end_headers()
        self.wfile.write(body)
    def log_message(self, *a): pass
print("INFO stand-in serving", flush=True)
http.server.HTTPServer(("127.0.0.1", PORT), H).serve_forever()
"""


def stand_in_vllm(port: int, log: Path | None = None, engine_core: bool = False) -> str:
    """The stand-in's code on `port`: it prints `log` first (serve diagnoses it live), and with engine_core it starts
    a child that only waits (the engine core a test kills)."""
    printed = f"sys.stdout.write(open({str(log)!r}).read()); sys.stdout.flush()" if log else ""
    core = 'core = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"])' if engine_core else ""
    return STAND_IN_VLLM.replace("LOG", printed).replace("CORE", core).replace("PORT", str(port))


def serve_plan(code: str, port: int, vllm: str = "0.32.0") -> ServePlan:
    """serve's plan for a vLLM that is `python -c code` (profile cpu, this interpreter, vLLM `vllm` as rendered)."""
    from launcher.engine import Interpreter
    from launcher.profiles.flags import Rendered
    from launcher.profiles.profile import load_profile
    from launcher.serve.run import ServePlan

    return ServePlan(
        profile=load_profile("cpu"),
        interpreter=Interpreter(Path(sys.executable), "test"),
        rendered=Rendered(vllm),
        argv=[sys.executable, "-c", code],
        host="127.0.0.1",
        port=port,
        verified=False,
    )


# three probe runs on one H200 on 2026-11-30: separate processes, the same shapes (tests/fixtures/probe)
H200_PROBE_RUNS = tuple(
    FIXTURES / "probe" / name
    for name in ("h200-vllm026-harness-2026-11-30.json", "h200-vllm026-2026-11-30.json", "h200-torch-2026-11-30.json")
)


def h200_three_starts() -> dict[str, Any]:
    """probe --json as a run timing each kernel in three process starts would write it, from the three H200 runs
    of 2026-11-30 as its starts: each kernel's medians from every run that measured it correctly (the first run
    lists every kernel), combined as the harness combines its starts (launcher/child/starts.py), then ranked and
    its ties found (launcher/probe/report.py)."""
    from launcher.child.starts import combine
    from launcher.probe.report import KernelResult, rank, ties

    runs = [json.loads(path.read_text()) for path in H200_PROBE_RUNS]
    kernels = []
    for k in runs[0]["kernels"]:
        same = [r for run in runs for r in run["kernels"] if (r["chain"], r["kernel"]) == (k["chain"], k["kernel"])]
        measured = [r for r in same if r["status"] == "ok"] if k["status"] == "ok" else [k]
        assert all([(s["m"], s["n"], s["k"]) for s in r["shapes"]] == [(s["m"], s["n"], s["k"]) for s in k["shapes"]]
                   for r in measured)  # fmt: skip
        answer = combine([{**r, "noise": r["noise_lines"], "t": {}} for r in measured], len(runs))
        fields = {key: answer.get(key, k[key]) for key in ("status", "error", "shapes", "seconds", "setup_s")}
        kernels.append(KernelResult(**{**k, **fields, "noise_lines": answer["noise"], "starts": answer["starts"]}))
    recommended, fastest = rank(kernels)
    return {
        **runs[0],
        "recommended": recommended,
        "fastest_measured": fastest,
        "starts": len(runs),
        "ties": ties(kernels, recommended),
        "kernels": [k.__dict__ for k in kernels],
        "captured": {"where": "the three H200 probe runs of 2026-11-30 as the starts of one run (tests/helpers.py)"},
    }
