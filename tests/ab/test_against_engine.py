"""`ab --against-fallbacks` on the real vLLM CPU engine with the tiny model. The cpu profile's own start names no
fallback (vLLM 0.32 CPU: no kernel chains, no CUDA graphs to lower); a base that asks for eager mode gets vLLM's
"Enforce eager set, disabling torch.compile, CUDAGraphs, and JIT kernel warmup" line, a fallback whose alternative
(cuda_graphs = true) the CPU engine can run: the one end-to-end run here, from the discovery start to the verdict."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.ab.test_ab_engine import _ours

pytestmark = pytest.mark.engine


def test_an_eager_base_is_measured_against_its_alternative(
    engine_python: Path, tiny_model: Path, tmp_path: Path
) -> None:
    out = tmp_path / "run"
    env = {**os.environ, "XDG_CACHE_HOME": str(tmp_path / "cache")}  # no stored noise of the user's machine
    argv = [sys.executable, "-m", "launcher", "ab", "--against-fallbacks", "--model", str(tiny_model), "--python",
            str(engine_python), "--config", "eager=cpu,cuda_graphs=false", "--concurrency", "4", "--input-len", "32",
            "--output-len", "32", "--window", "3", "--warmup-passes", "1", "--rounds", "2", "--json", "--out",
            str(out)]  # fmt: skip
    r = subprocess.run(argv, capture_output=True, text=True, timeout=900, env=env)
    assert r.returncode in (0, 1), r.stderr[-3000:]
    doc = json.loads(r.stdout)
    assert doc["schema"] == "nemolaunch.ab-fallbacks/1" and doc["status"] == "found"
    (graphs,) = [f for f in doc["fallbacks"] if f["kind"] == "cuda-graphs"]
    assert graphs["asked"] and graphs["line"].startswith("Enforce eager set, disabling torch.compile, CUDAGraphs")
    assert [(s["name"], s["overrides"]) for s in doc["sides"]] == [("no-cuda-graphs", {"cuda_graphs": True})]
    ab = doc["ab"]
    assert [(s["name"], s["status"]) for s in ab["sides"]] == [("eager", "ok"), ("no-cuda-graphs", "ok")], ab["sides"]
    assert "--enforce-eager" in ab["sides"][0]["served"]["argv"]
    assert "--enforce-eager" not in ab["sides"][1]["served"]["argv"]
    assert len(ab["rounds"]) == 2 and ab["verdicts"]["no-cuda-graphs"]["4"]["output_tok_s"]["n"] == 2
    assert r.returncode == 0
    assert "## Fallbacks measured (ab --against-fallbacks)" in (out / "report.md").read_text()
    assert _ours({"sides": [*ab["sides"], {"served": doc["served"]}]}) == []  # every server stopped
