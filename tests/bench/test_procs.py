"""The client split over processes (`--client-processes`): the streams are shared out, every prompt is taken once,
and the statistics of the merged records are exactly the single-process definitions (summarize over the records,
the wall from one level start)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from launcher.bench import BenchConfig, RequestRecord, run, summarize
from launcher.bench.config import LevelSpec
from launcher.bench.procs import shares
from launcher.bench.results import level_document
from launcher.errors import ExitCode
from tests.fake_server import serving
from tests.helpers import ROOT, free_port


def test_streams_are_shared_out_evenly_and_no_worker_is_idle() -> None:
    assert shares(256, 4) == [64, 64, 64, 64]
    assert shares(10, 4) == [3, 3, 2, 2]
    assert shares(2, 8) == [1, 1]
    assert sum(shares(257, 3)) == 257


def test_by_default_one_process_per_128_streams_at_most_one_per_4_cpus(monkeypatch: pytest.MonkeyPatch) -> None:
    auto = BenchConfig(url="http://x")
    monkeypatch.setattr("os.cpu_count", lambda: 16)
    assert [auto.processes_for(c) for c in (1, 64, 127, 128, 256, 512, 4096)] == [1, 1, 1, 1, 2, 4, 4]
    monkeypatch.setattr("os.cpu_count", lambda: 2)
    assert auto.processes_for(1024) == 1
    assert BenchConfig(url="http://x", client_processes=3).processes_for(1) == 3


def cfg(url: str, processes: int, **kw: object) -> BenchConfig:
    base = {
        "concurrency": (6,),
        "input_len": 16,
        "output_len": 12,
        "num_prompts": 30,
        "warmup": 1,
        "stall_timeout_s": 5.0,
        "request_timeout_s": 30.0,
        "client_processes": processes,
    }
    return BenchConfig(url=url, **{**base, **kw})  # type: ignore[arg-type]


def test_merged_records_give_the_single_process_statistics(tmp_path: Path) -> None:
    with serving(free_port(), token_delay_s=0.004) as url:
        split = run(cfg(url, 3), tmp_path / "split", None, print)
        served = url.state["served"]
        one = run(cfg(url, 1), tmp_path / "one", None, print)
    assert split.code == one.code == ExitCode.OK
    assert served == 31  # 1 warm-up + 30: every prompt sent once, none twice across the workers
    rows = [json.loads(line) for line in (tmp_path / "split" / "requests.jsonl").read_text().splitlines()]
    assert sorted(r["index"] for r in rows) == list(range(30))
    records = [RequestRecord(**r) for r in rows]
    assert all(r.ok and r.output_tokens == 12 and r.length_ok and r.start_s >= 0 for r in records)
    # the parent's numbers are summarize() over the merged records with the wall from the one level start
    wall = max(r.start_s + (r.e2e_s or 0) for r in records)
    again = level_document(summarize(LevelSpec(6, None, 16), [(records, wall)]))
    level = split.summary["levels"][0]
    for key in ("completed", "failed", "output_throughput_tok_s", "ttft_ms", "tpot_ms", "itl_ms", "e2el_ms"):
        assert level[key] == again[key], key
    # 6 streams in 3 processes were in flight together (bounds that hold however loaded the machine is: the server
    # sleeps 4 ms per token, so no TPOT can be shorter; a busy machine only makes it longer)
    assert level["achieved_concurrency"] > 1
    # the workers' CPU is counted: some, and no more than the parent and its 3 workers could spend over the level
    assert level["client_cpu_s"] > 0 and level["client_cpu_per_wall_s"] <= 4.0
    for lv in (level, one.summary["levels"][0]):
        assert lv["tpot_ms"]["mean"] >= 4.0


def test_the_cli_takes_client_processes_and_refuses_absurd_counts(tmp_path: Path) -> None:
    with serving(free_port()) as url:
        argv = [sys.executable, "-m", "launcher", "bench", "--url", url, "--concurrency", "4", "--num-prompts", "8"]
        argv += ["--input-len", "8", "--output-len", "4", "--warmup", "0"]
        ok = subprocess.run(
            [*argv, "--client-processes", "2", "--out", str(tmp_path / "a")],
            capture_output=True,
            text=True,
            cwd=ROOT,
            timeout=120,
        )
        bad = subprocess.run(
            [*argv, "--client-processes", "0", "--out", str(tmp_path / "b")],
            capture_output=True,
            text=True,
            cwd=ROOT,
            timeout=60,
        )
    assert ok.returncode == 0, ok.stderr
    assert json.loads((tmp_path / "a" / "summary.json").read_text())["levels"][0]["completed"] == 8
    assert bad.returncode == ExitCode.USAGE and "--client-processes" in bad.stderr
    assert "Traceback" not in bad.stderr and not (tmp_path / "b").exists()


@pytest.mark.parametrize("processes", [2])
def test_a_duration_level_stops_every_worker_at_one_deadline(tmp_path: Path, processes: int) -> None:
    with serving(free_port(), token_delay_s=0.002) as url:
        outcome = run(cfg(url, processes, num_prompts=None, duration_s=1.0), tmp_path / "d", None, print)
    level = outcome.summary["levels"][0]
    rows = [json.loads(line) for line in (tmp_path / "d" / "requests.jsonl").read_text().splitlines()]
    assert outcome.code == ExitCode.OK and level["completed"] == len(rows) >= 1
    assert max(r["start_s"] for r in rows) < 1.0  # nothing was started after the deadline
    assert sorted(r["index"] for r in rows) == list(range(len(rows)))


def test_a_log_row_is_the_records_asdict() -> None:
    from dataclasses import asdict

    from launcher.bench.results import record_row

    r = RequestRecord("c1", 0, 3, 16, 4, ok=True, ttft_s=0.1, e2e_s=0.4, itl_s=[0.1, 0.1, 0.1], output_tokens=4)
    assert record_row(r) == asdict(r) and list(record_row(r)) == list(asdict(r))
