"""FlashInfer's JIT builds, the long pole of a fresh run (its attention modules took 114-145 s on a fresh H200,
its FP8 bmm 48-54 s): before anything else the probe starts them in a process of their own
(launcher/child/flashinfer_build.py) that writes into FlashInfer's cache and outlives the probe; the kernels that
need a module are handed to the set-up pool only once it is built (launcher/child/isolate.py waits for them)."""

from __future__ import annotations

import contextlib
import json
import os
import subprocess
import time
from pathlib import Path
from typing import Any

from checks.files import cache_dir
from launcher.paths import CHILD_DIR
from launcher.probe import chains as chain_table
from launcher.probe.selection import Layer

# how long (from the start of the run) kernels waiting for a FlashInfer JIT build are waited for once nothing else
# is left: a fresh H200's build took 94.5-110 s (2026-12-02, three sessions), so at 115 s a fresh run still
# ends under 2 minutes with every kernel measured; past it, the build goes on and the next run finds it done
BUILD_WAIT_S = 115.0
# the FlashInfer JIT modules a kernel loads (launcher/child/flashinfer_build.py builds them)
NEEDS_BUILD = {("attention", "FLASHINFER"): "attention", ("fp8_dense", "FlashInferFP8ScaledMMLinearKernel"): "gemm"}
BUILD_LABEL = {"attention": "FlashInfer's attention JIT modules", "gemm": "FlashInfer's FP8 bmm JIT module"}


def start_builds(
    python: Path, selection: chain_table.ChainSelection, layer: Layer, wait_until: float
) -> dict[str, dict[str, Any]]:
    """Start the FlashInfer JIT builds the selected chains' FlashInfer kernels need, in a session of their own
    (they outlive the probe); returns what the harness needs to wait for them (isolate.Build's fields)."""
    if os.environ.get("NEMOLAUNCH_FLASHINFER_PREBUILD") == "0":
        return {}
    modules = [m for (chain, _), m in NEEDS_BUILD.items() if chain in selection.chains]
    if not modules:
        return {}
    out = cache_dir("flashinfer-build", f"{time.strftime('%Y%m%dT%H%M%S')}-{os.getpid()}")
    out.mkdir(parents=True, exist_ok=True)
    with (out / "build.log").open("w") as log:
        subprocess.Popen(
            [str(python), str(CHILD_DIR / "flashinfer_build.py"), str(out), str(layer.head_dim), *modules],
            stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT, start_new_session=True,
        )  # fmt: skip
    return {
        m: {"status": str(out / f"{m}.json"), "wait_until": wait_until, "log": str(out / f"{m}.log"),
            "label": BUILD_LABEL[m]}
        for m in modules
    }  # fmt: skip


def build_timeline(build: dict[str, Any], start: float) -> dict[str, Any]:
    """A build's status at the end of the run, its times run-relative (ended None: still running)."""
    found: dict[str, Any] = {}
    with contextlib.suppress(OSError, json.JSONDecodeError):
        found = json.loads(Path(build["status"]).read_text())
    rel = {
        k: round(found[k] - start, 1) if isinstance(found.get(k), (int, float)) else None for k in ("started", "ended")
    }
    status = "running" if not found else ("done" if found.get("ok") else "failed")
    if found.get("not_prebuilt"):
        status = "not prebuilt"
    error = found.get("error") or found.get("not_prebuilt")
    return {"status": status, **rel, "error": error, "log": build["log"], "units": found.get("units", [])}
