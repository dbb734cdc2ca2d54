"""FlashInfer's JIT builds out of the probe's set-up pool: jobs that need a build wait for it, a build that fails
fails its kernels with its last error line, one that misses its wait limit leaves them not-built and goes on. Fake
builds (a shell command, or the real launcher/child/flashinfer_build.py driving ninja on a fake module)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from launcher.child.isolate import Build, Turn, run_isolated
from launcher.probe.report import KernelResult, rank
from launcher.probe.selection import Layer
from tests.helpers import ROOT

sys.path.insert(0, str(ROOT / "launcher" / "child"))
import flashinfer_build


def started_at(job: dict[str, Any], turn: Turn) -> dict[str, Any]:
    began = time.monotonic()
    turn.wait()
    return {"status": "ok", "began": began}


def fake_build(tmp_path: Path, seconds: float, ok: bool = True) -> tuple[subprocess.Popen[bytes], Path]:
    """A build in its own session that writes its status file (with the monotonic time it ended) after `seconds`."""
    status = tmp_path / "attention.json"
    code = (
        "import json, os, sys, time\n"
        f"time.sleep({seconds})\n"
        f"s = {{'ok': {ok}, 'error': 'nvcc: fatal: bad flag', 'ended': time.monotonic()}}\n"
        f"open(sys.argv[1] + '.tmp', 'w').write(json.dumps(s)); os.replace(sys.argv[1] + '.tmp', sys.argv[1])\n"
    )
    proc = subprocess.Popen([sys.executable, "-c", code, str(status)], start_new_session=True)
    return proc, status


def run_with(builds: dict[str, Build], jobs: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    results: dict[str, dict[str, Any]] = {}
    run_isolated(jobs, started_at, 30, 3, lambda job, r: results.__setitem__(job["name"], r), builds=builds,
                 poll_s=0.05)  # fmt: skip
    return results


def test_a_job_waiting_for_a_build_is_not_forked_before_it_is_done(tmp_path: Path) -> None:
    proc, status = fake_build(tmp_path, 1.0)
    build = Build(str(status), time.monotonic() + 60, str(tmp_path / "attention.log"))
    jobs = [{"name": "flashinfer", "needs": "attention"}, {"name": "a"}, {"name": "b"}]
    results = run_with({"attention": build}, jobs)
    proc.wait()
    ended = json.loads(status.read_text())["ended"]
    assert results["flashinfer"]["status"] == "ok" and results["flashinfer"]["began"] >= ended
    assert results["a"]["began"] < ended and results["b"]["began"] < ended  # the others did not wait for it
    t = results["flashinfer"]["t"]
    assert t["started"] <= t["set_up"] <= t["let_through"] <= t["ended"]


def test_a_build_that_misses_its_limit_leaves_its_kernel_not_built_and_goes_on(tmp_path: Path) -> None:
    proc, status = fake_build(tmp_path, 60.0)
    try:
        log = str(tmp_path / "attention.log")
        build = Build(str(status), time.monotonic() + 0.5, log, "FlashInfer's attention JIT modules")
        results = run_with({"attention": build}, [{"name": "flashinfer", "needs": "attention"}, {"name": "a"}])
        assert results["a"]["status"] == "ok"
        assert results["flashinfer"]["status"] == "not-built" and log in results["flashinfer"]["error"]
        assert "FlashInfer's attention JIT modules was still building" in results["flashinfer"]["error"]
        assert proc.poll() is None  # the build goes on for the next run
    finally:
        proc.kill()
        proc.wait()


def test_a_failed_build_fails_its_kernels_with_its_last_error_line(tmp_path: Path) -> None:
    proc, status = fake_build(tmp_path, 0.2, ok=False)
    build = Build(str(status), time.monotonic() + 60, str(tmp_path / "attention.log"), "FlashInfer's attention")
    results = run_with({"attention": build}, [{"name": "flashinfer", "needs": "attention"}, {"name": "a"}])
    proc.wait()
    assert results["flashinfer"] == {**results["flashinfer"], "status": "failed"}
    assert results["flashinfer"]["error"] == "FlashInfer's attention build failed: nvcc: fatal: bad flag"
    assert results["a"]["status"] == "ok"


class FakeSpec:
    """What flashinfer_build.build uses of FlashInfer's JitSpec: a module whose build.ninja runs `command`."""

    def __init__(self, root: Path, name: str, command: str) -> None:
        self.name, self.is_aot, self.sources = name, False, [root / "a.cu", root / "b.cu"]
        self.build_dir, self.lock_path = root / name, root / f"{name}.lock"
        self.ninja_path, self.command = self.build_dir / "build.ninja", command

    def write_ninja(self) -> None:
        self.build_dir.mkdir(parents=True, exist_ok=True)
        rule = f"rule run\n  command = {self.command} && touch $out\n"
        self.ninja_path.write_text(rule + "build a.o: run\nbuild b.o: run\nbuild m.so: run a.o b.o\ndefault m.so\n")


@pytest.mark.parametrize("fails", [False, True])
def test_the_build_runs_ninja_per_module_under_flashinfers_lock(tmp_path: Path, fails: bool) -> None:
    """The real build driver on a fake module: ninja in the module's own folder (its .ninja_log is the one a later
    JitSpec.build_and_load reads), per-unit times from that log, the module's last error line when it fails; the
    pool then fails the kernel with it."""
    command = "echo 'In file included: error: no member named foo' && false" if fails else "true"
    spec = FakeSpec(tmp_path, "batch_prefill_fa2", command)
    flashinfer_build.build(tmp_path, "attention", [spec], time.monotonic())
    found = json.loads((tmp_path / "attention.json").read_text())
    assert found["ok"] is not fails and found["started"] <= found["ended"]
    if fails:
        assert found["error"].endswith("In file included: error: no member named foo")
        build = Build(str(tmp_path / "attention.json"), time.monotonic() + 60, str(tmp_path / "attention.log"), "X")
        results = run_with({"attention": build}, [{"name": "flashinfer", "needs": "attention"}])
        assert results["flashinfer"]["status"] == "failed" and "no member named foo" in results["flashinfer"]["error"]
    else:
        assert sorted(name for name, _ in found["units"]) == ["a.o", "b.o", "m.so"]
        assert (spec.build_dir / ".ninja_log").exists()


@pytest.mark.parametrize("setting, expected", [(None, 10), ("gemm=0, attention=12", 12)])
def test_a_modules_compile_runs_at_its_niceness(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, setting: str | None, expected: int
) -> None:
    """Every compile unit runs at the module's niceness: 10 by default (the set-ups first), or what
    NEMOLAUNCH_FLASHINFER_NICE says for that module; `nice` in the unit's command prints what it got."""
    if setting is None:
        monkeypatch.delenv("NEMOLAUNCH_FLASHINFER_NICE", raising=False)
    else:
        monkeypatch.setenv("NEMOLAUNCH_FLASHINFER_NICE", setting)
    if os.nice(0) > expected:
        pytest.skip("this process is already nicer than the module's setting")
    spec = FakeSpec(tmp_path, "batch_prefill_fa2", f"nice >> {tmp_path / 'nice.txt'}")
    flashinfer_build.build(tmp_path, "attention", [spec], time.monotonic())
    assert json.loads((tmp_path / "attention.json").read_text())["ok"]
    assert set((tmp_path / "nice.txt").read_text().split()) == {str(expected)}


def test_a_chain_with_a_kernel_not_built_recommends_nothing() -> None:
    shapes = [{"m": 1, "n": 1, "k": 1, "us": 5.0, "numerics_ok": True}]
    kernels = [
        KernelResult("attention", "FLASH_ATTN", 0, None, None, "ok", shapes=shapes),
        KernelResult("attention", "FLASHINFER", 1, None, None, "not-built", error="still building"),
    ]
    assert rank(kernels) == ({"attention": None}, {"attention": None})


def test_the_gpu_summary_prints_the_timeline_sorted_by_start(tmp_path: Path) -> None:
    """benchmarks/probe_summary.py: the builds with their slowest compile units, then one line per kernel in the
    order the kernels started; benchmarks/probe_wait_builds.py says a build left running was not done."""
    kernels = [
        {"chain": "attention", "kernel": "FLASHINFER", "status": "not-built", "timeline": {"started": None,
         "set_up": None, "let_through": None, "ended": 100.2}},
        {"chain": "attention", "kernel": "FLASH_ATTN", "status": "ok", "timeline": {"started": 9.5, "set_up": 20.0,
         "let_through": 21.0, "ended": 22.5}},
        {"chain": "fp8_dense", "kernel": "bf16 (unquantized baseline)", "status": "ok", "timeline": {"started": 8.0,
         "set_up": 9.0, "let_through": 9.1, "ended": 9.6}},
    ]  # fmt: skip
    log = tmp_path / "attention.log"
    build = {"status": "running", "started": 0.4, "ended": None, "error": None, "log": str(log),
             "units": [["a.cuda.o", 12.0], ["b.cuda.o", 95.5]]}  # fmt: skip
    report = {
        "kernels": kernels,
        "timeline": {"harness_ready": 7.9, "chains_read": 6.1, "builds": {"attention": build}},
    }
    (tmp_path / "probe-dense-fresh.json").write_text(json.dumps(report))
    (tmp_path / "times.txt").write_text("dense-fresh exit 0 in 101.0 s (limit 120 s)\n")
    bench = ROOT / "benchmarks"
    r = subprocess.run(
        [sys.executable, bench / "probe_summary.py", tmp_path], capture_output=True, text=True, check=True
    )
    lines = r.stdout.split("timeline: ", 1)[1].splitlines()
    assert lines[0] == "harness ready 7.9 s, chains read 6.1 s"
    assert lines[1].startswith("  build attention: running 0.4-None s  slowest: b.cuda.o 95.5 s, a.cuda.o 12.0 s")
    order = [line.split("  ")[-1].split(":")[1].strip() for line in lines[3:]]
    assert order == ["bf16 (unquantized baseline) ok", "FLASH_ATTN ok", "FLASHINFER not-built"]
    w = subprocess.run([sys.executable, bench / "probe_wait_builds.py", tmp_path / "probe-dense-fresh.json", "dense",
                        "0.5"], capture_output=True, text=True, check=True)  # fmt: skip
    assert w.stdout.startswith("dense builds: attention NOT done after waiting")


def test_the_probe_starts_the_builds_its_kernels_need_in_their_own_session(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """start_builds with this interpreter (no FlashInfer): one build process, in a session of its own, for the
    attention and FP8 GEMM modules; it says it prebuilt nothing (so the kernels go ahead and report their own
    error); the report's timeline says so; NEMOLAUNCH_FLASHINFER_PREBUILD=0 starts none."""
    from launcher.probe import chains as chain_table
    from launcher.probe.builds import build_timeline, start_builds

    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    monkeypatch.delenv("NEMOLAUNCH_FLASHINFER_PREBUILD")
    start = time.monotonic()
    builds = start_builds(Path(sys.executable), chain_table.all_chains(), Layer(), start + 60)
    assert sorted(builds) == ["attention", "gemm"]
    for b in builds.values():
        status = Path(b["status"])
        while not status.exists() and time.monotonic() - start < 60:
            time.sleep(0.1)
        line = build_timeline(b, start)
        assert line["status"] == "not prebuilt" and "ModuleNotFoundError" in line["error"], line
        assert json.loads(status.read_text())["own_session"] is True
        assert line["started"] is not None and line["started"] <= line["ended"]
    results = run_with({m: Build(b["status"], b["wait_until"], b["log"]) for m, b in builds.items()},
                       [{"name": "flashinfer", "needs": "attention"}])  # fmt: skip
    assert results["flashinfer"]["status"] == "ok"  # not held back: its own first call would compile (or fail)
    monkeypatch.setenv("NEMOLAUNCH_FLASHINFER_PREBUILD", "0")
    assert start_builds(Path(sys.executable), chain_table.all_chains(), Layer(), start + 60) == {}
