"""A stand-in engine interpreter for tests through the real CLI without the vLLM CPU engine: a real venv whose
`vllm` package (distribution `vllm` 0.32.0, as the CPU engine reports it) has the parts nemolaunch reads (envs.py's
registry, an argument parser) and an `api_server` that serves tests/fake_server.py on --host/--port. Like vLLM, the
API server starts an engine-core grandchild in its process group, so a test can check that nothing is left
behind. Every process of it has the venv's path in its command line: count them with `engine_processes`."""

from __future__ import annotations

import subprocess
import sys
import sysconfig
from pathlib import Path

import psutil

from tests.helpers import ROOT

ENVS = """environment_variables = {
    "VLLM_CPU_KVCACHE_SPACE": lambda: 0,
    "VLLM_API_KEY": lambda: None,
    "VLLM_HOST_IP": lambda: "",
    "VLLM_SERVER_DEV_MODE": lambda: False,
}
"""
OPTIONS = [
    "--model",
    "--host",
    "--port",
    "--uds",
    "--api-key",
    "--max-model-len",
    "--max-num-seqs",
    "--gpu-memory-utilization",
    "--load-format",
    "--quantization",
    "--enforce-eager",
    "--trust-remote-code",
    "--served-model-name",
    "--tensor-parallel-size",
    "--dtype",
    "--kv-cache-dtype",
    "--hf-overrides",
]
CLI_ARGS = f"""
def make_arg_parser(parser):
    for option in {OPTIONS!r}:
        parser.add_argument(option)
    return parser
"""
# the API server: an engine core that only waits (a grandchild of nemolaunch, in the server's process group), then
# the fake OpenAI server on the asked address, paced (ab's timed passes would flood it); FAKE_ENGINE_FAULT=exit makes
# it die before serving
API_SERVER = """
import argparse, os, subprocess, sys
parser = argparse.ArgumentParser()
parser.add_argument("--host", default="127.0.0.1")
parser.add_argument("--port", type=int, default=8000)
args, _ = parser.parse_known_args()
print("INFO fake vLLM API server starting", flush=True)
if os.environ.get("FAKE_ENGINE_FAULT") == "exit":
    print("ERROR fake engine failed to start", flush=True)
    sys.exit(1)
core = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(3600)", "fake-engine-core"])
from aiohttp import web
from tests.fake_server import PACED_S, make_app
web.run_app(make_app(token_delay_s=PACED_S), host=args.host or "0.0.0.0", port=args.port, print=None)
"""


def fake_engine(folder: Path) -> Path:
    """Build the stand-in under `folder`; returns its interpreter."""
    venv = folder / "engine"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True)
    site = next((venv / "lib").glob("python3*/site-packages"))
    # nemolaunch's own packages (aiohttp) and the checkout (tests.fake_server), also under `python -I`
    (site / "nemolaunch-tests.pth").write_text(f"{sysconfig.get_paths()['purelib']}\n{ROOT}\n")
    info = site / "vllm-0.32.0.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: vllm\nVersion: 0.32.0\n")
    files = {
        "vllm/__init__.py": '__version__ = "0.32.0"\n',
        "vllm/envs.py": ENVS,
        "vllm/utils/__init__.py": "",
        "vllm/utils/argparse_utils.py": "from argparse import ArgumentParser as FlexibleArgumentParser\n",
        "vllm/entrypoints/__init__.py": "",
        "vllm/entrypoints/openai/__init__.py": "",
        "vllm/entrypoints/openai/cli_args.py": CLI_ARGS,
        "vllm/entrypoints/openai/api_server.py": API_SERVER,
    }
    for rel, text in files.items():
        (site / rel).parent.mkdir(parents=True, exist_ok=True)
        (site / rel).write_text(text)
    return venv / "bin" / "python"


def engine_processes(python: Path) -> list[psutil.Process]:
    """The live processes (zombies excluded) running the stand-in's interpreter, anywhere on the machine."""
    marker = str(python.parent.parent)
    found = []
    for p in psutil.process_iter(["cmdline", "status"]):
        try:
            argv0 = (p.info["cmdline"] or [""])[0]
            if p.info["status"] != psutil.STATUS_ZOMBIE and argv0.startswith(marker):
                found.append(p)
        except psutil.Error:
            continue
    return found
