"""bench and compare: metrics on hand-checkable streams, faults injected by a local server, interrupts, the JSON
contract, and compare's ratios and refusals. The real-engine workload test is in test_engine_e2e.py."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from launcher.bench import BenchConfig, run
from launcher.cli.main import main
from launcher.errors import ExitCode
from tests.fake_server import serving
from tests.helpers import FIXTURES, ROOT, free_port


def cfg(url: str, **kw: object) -> BenchConfig:
    base = {
        "concurrency": (1, 2),
        "input_len": 16,
        "output_len": 8,
        "num_prompts": 4,
        "warmup": 0,
        "stall_timeout_s": 1.0,
        "request_timeout_s": 10.0,
    }
    return BenchConfig(url=url, **{**base, **kw})  # type: ignore[arg-type]


def test_asks_only_for_final_usage_as_vllms_client_does(tmp_path: Path) -> None:
    with serving(free_port(), tokens_per_chunk=2, token_delay_s=0.01) as url:
        outcome = run(cfg(url, concurrency=(1,), num_prompts=2), tmp_path / "r", None, print)
        bodies = list(url.state["seen"])
    assert outcome.code == ExitCode.OK
    assert all(b["stream_options"] == {"include_usage": True} for b in bodies)
    records = [json.loads(line) for line in (tmp_path / "r" / "requests.jsonl").read_text().splitlines()]
    # 4 chunks of 2 tokens each; the count comes from the final usage, each chunk gap holds 7/3 token gaps
    assert all(r["chunks"] == 4 and r["output_tokens"] == 8 and r["length_ok"] for r in records)
    assert all(len(r["itl_s"]) == 3 for r in records)
    level = outcome.summary["levels"][0]
    assert level["itl_ms"]["mean"] == pytest.approx(level["tpot_ms"]["mean"], rel=0.01)


def test_usage_on_every_chunk_still_gives_per_chunk_counts(tmp_path: Path) -> None:
    # a server that sends usage on every chunk unasked (vLLM's --enable-force-include-usage): those chunks are parsed,
    # not counted blind, so a chunk of 2 tokens counts as 2 gaps (7 ITL entries; 3 if the counts were lost)
    with serving(free_port(), tokens_per_chunk=2, force_usage=True) as url:
        outcome = run(cfg(url, concurrency=(1,), num_prompts=2), tmp_path / "r", None, print)
    assert outcome.code == ExitCode.OK
    records = [json.loads(line) for line in (tmp_path / "r" / "requests.jsonl").read_text().splitlines()]
    assert all(r["chunks"] == 4 and r["output_tokens"] == 8 and len(r["itl_s"]) == 7 for r in records)
    assert all(r["itl_s"][0] == 0.0 and r["length_ok"] for r in records)  # the first chunk's second token


@pytest.mark.parametrize(
    "fault, error_class",
    [("stall", "stalled"), ("disconnect", "disconnected"), ("http500", "http-500"), ("malformed", "malformed")],
)
def test_faults_are_counted_and_classified_and_the_sweep_finishes(tmp_path: Path, fault: str, error_class: str) -> None:
    with serving(free_port(), fault=fault) as url:
        outcome = run(cfg(url), tmp_path / "r", None, print)
    assert outcome.code == ExitCode.PROBLEM
    doc = json.loads((tmp_path / "r" / "summary.json").read_text())
    assert doc["status"] == "complete" and [lv["concurrency"] for lv in doc["levels"]] == [1, 2]
    assert all(lv["failures"] == {error_class: 2} and lv["completed"] == 2 for lv in doc["levels"])
    assert len((tmp_path / "r" / "requests.jsonl").read_text().splitlines()) == 8


def test_a_server_dying_mid_sweep_keeps_the_levels_measured(tmp_path: Path) -> None:
    with serving(free_port(), fault="die-after", die_after=6) as url:
        outcome = run(cfg(url, concurrency=(1, 2, 4)), tmp_path / "r", None, print)
    assert outcome.code == ExitCode.PROBLEM and "stopped answering during c=2" in outcome.message
    doc = json.loads((tmp_path / "r" / "summary.json").read_text())
    assert doc["status"] == "server-died" and doc["stopped_at"]["concurrency"] == 2
    assert doc["levels"][0]["completed"] == 4


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM], ids=["ctrl-c", "sigterm"])
def test_an_interrupt_keeps_what_was_measured(tmp_path: Path, sig: int) -> None:
    """Ctrl-C or SIGTERM once a request has finished (waited for on requests.jsonl, not on the clock): exit 130,
    one line, the summary says where it stopped, every finished request is kept whole."""
    out = tmp_path / "r"
    with serving(free_port(), token_delay_s=0.05) as url:  # 20 tokens: a second per request, 20 s for c=1
        argv = ["bench", "--url", url, "--concurrency", "1,2", "--input-len", "8", "--output-len", "20"]
        proc = subprocess.Popen(
            [sys.executable, "-m", "launcher", *argv, "--num-prompts", "20", "--warmup", "0", "--out", str(out)],
            cwd=ROOT,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            # a job started in the background of a script inherits SIGINT ignored (a CI run launched that way
            # failed here, the sweep running to its end): give the child Ctrl-C back
            preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),
        )
        try:
            log = out / "requests.jsonl"
            while proc.poll() is None and not (log.is_file() and log.stat().st_size):
                time.sleep(0.05)
            proc.send_signal(sig)
            _, err = proc.communicate(timeout=30)
        finally:
            proc.kill()
    assert proc.returncode == 130, err
    assert err.splitlines()[-1] == (
        f"nemolaunch: interrupted at c=1; the levels measured so far and every finished request are in {out}"
    )
    doc = json.loads((out / "summary.json").read_text())
    assert doc["status"] == "interrupted" and doc["stopped_at"]["concurrency"] == 1
    lines = (out / "requests.jsonl").read_text().splitlines()
    assert lines and all(json.loads(line)["ok"] for line in lines)


def test_summary_json_contract(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    with serving(free_port()) as url:
        rc = main(
            [
                "bench",
                "--url",
                url,
                "--concurrency",
                "1,2",
                "--input-len",
                "8",
                "--output-len",
                "4",
                "--num-prompts",
                "3",
                "--out",
                str(tmp_path / "r"),
                "--label",
                "A",
                "--json",
            ]
        )
    assert rc == 0
    doc = json.loads(capsys.readouterr().out)
    on_disk = json.loads((tmp_path / "r" / "summary.json").read_text())
    assert doc["schema"] == on_disk["schema"] == "nemolaunch.bench/1"
    assert {"provenance", "levels", "workload", "warnings"} <= set(on_disk)
    assert {"server", "client", "date", "host"} <= set(on_disk["provenance"])
    level = on_disk["levels"][0]
    assert {"concurrency", "completed", "failed", "output_throughput_tok_s", "request_throughput_req_s"} <= set(level)
    for metric in ("ttft_ms", "tpot_ms", "itl_ms", "e2el_ms"):
        assert set(level[metric]) == {"mean", "p50", "p90", "p99"}
    assert level["mean_prompt_tokens"] == 8.0  # the server's count, a number on disk (not masked for its name)
    for name in ("summary.csv", "requests.jsonl", "report.md", "throughput.png", "latency.png", "vllm-c1-in8.json"):
        assert (tmp_path / "r" / name).is_file(), name


def fake_run(folder: Path, label: str, tput: dict[int, tuple[float, float | None]], input_len: int = 512) -> Path:
    """A summary.json as bench writes it, with chosen throughputs (and stdevs) per concurrency."""
    stats = {"mean": 1.0, "p50": 1.0, "p90": 1.0, "p99": 1.0}
    folder.mkdir(parents=True)
    doc = {
        "schema": "nemolaunch.bench/1",
        "label": label,
        "status": "complete",
        "warnings": [],
        "workload": {
            "model": "m",
            "endpoint": "completions",
            "input_len": input_len,
            "output_len": 256,
            "prompts_sha": "x",
            "seed": 0,
            "repeats": 3,
        },
        "provenance": {"server": {"version": "0.16.1"}, "date": "2026-03-11", "launched_by_nemolaunch": None},
        "levels": [
            {
                "concurrency": c,
                "output_throughput_tok_s": t,
                "output_throughput_stdev": sd,
                "ttft_ms": stats,
                "tpot_ms": stats,
            }
            for c, (t, sd) in tput.items()
        ],
    }
    (folder / "summary.json").write_text(json.dumps(doc))
    return folder


def test_compare_ratios_and_noise(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    # the seed's table: Marlin 97 / 886 tok/s, native CUTLASS FP4 83 / 801 at concurrency 1 / 32
    marlin = fake_run(tmp_path / "marlin", "marlin", {1: (97.0, 1.0), 32: (886.0, 40.0)})
    cutlass = fake_run(tmp_path / "cutlass", "cutlass", {1: (83.0, 1.0), 32: (801.0, 40.0)})
    assert main(["compare", str(marlin), str(cutlass), "--out", str(tmp_path / "rep")]) == 0
    out = capsys.readouterr().out
    row1 = next(line for line in out.splitlines() if line.startswith("c=1 "))
    assert "0.856 (-14.4%)" in row1 and "beyond noise" in row1
    # -9.6% with a 40 tok/s spread over 3 repeats each: the interval reaches from -19% to +1%, undecided
    assert "inconclusive" in next(line for line in out.splitlines() if line.startswith("c=32 "))
    report = (tmp_path / "rep" / "report.md").read_text()
    assert "0.856 (-14.4%)" in report and (tmp_path / "rep" / "throughput.png").is_file()


def test_compare_refuses_different_workloads(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    a = fake_run(tmp_path / "a", "a", {1: (97.0, None)})
    b = fake_run(tmp_path / "b", "b", {1: (83.0, None)}, input_len=128)
    assert main(["compare", str(a), str(b), "--out", str(tmp_path / "rep")]) == 2
    assert f"input_len: 512 in a ({a}) vs 128 in b ({b})" in capsys.readouterr().err
    assert main(["compare", str(a), str(b), "--out", str(tmp_path / "rep"), "--force"]) == 0


@pytest.mark.parametrize(
    "argv, needle",
    [
        (["bench"], "give either --url"),
        (["bench", "--profile", "cpu"], "--profile needs --model"),
        (["bench", "--url", "http://127.0.0.1:9", "--concurrency", "1,x"], "not a comma-separated list"),
        (["bench", "--url", "http://127.0.0.1:9", "--out", "/tmp/nemolaunch-no-server"], "no OpenAI-compatible server"),
        (["compare", "."], "holds no bench run"),
    ],
    ids=["no-target", "profile-without-model", "bad-levels", "no-server", "not-a-run"],
)
def test_bad_input_is_one_line(argv: list[str], needle: str, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(argv) in (2, 3)
    assert needle in capsys.readouterr().err


def test_duration_mode_runs_for_the_time_given(tmp_path: Path) -> None:
    with serving(free_port(), token_delay_s=0.01) as url:
        start = time.monotonic()
        outcome = run(cfg(url, concurrency=(2,), num_prompts=None, duration_s=1.0), tmp_path / "r", None, print)
        took = time.monotonic() - start
    assert outcome.code == ExitCode.OK
    (level,) = outcome.summary["levels"]
    assert level["completed"] >= 1 and took >= 1.0  # bounds no load can break: it ran for the time given


def test_compare_of_real_h200_runs(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """The seed's enforce-eager artefact, measured with nemolaunch on the H200 (tests/fixtures/bench)."""
    fixtures = FIXTURES / "bench"
    assert main(["compare", str(fixtures / "h200-graphs"), str(fixtures / "h200-eager"), "--out", str(tmp_path)]) == 0
    row1 = next(line for line in capsys.readouterr().out.splitlines() if line.startswith("c=1 "))
    assert "437.53" in row1 and "95.32" in row1 and "0.218 (-78.2%)" in row1
    eager = json.loads((fixtures / "h200-eager" / "summary.json").read_text())
    assert any("--enforce-eager" in w for w in eager["warnings"])


def test_chat_endpoint_streams_and_checks_completion_length(tmp_path: Path) -> None:
    with serving(free_port()) as url:
        outcome = run(cfg(url, endpoint="chat", concurrency=(2,)), tmp_path / "r", None, print)
    assert outcome.code == ExitCode.OK
    records = [json.loads(line) for line in (tmp_path / "r" / "requests.jsonl").read_text().splitlines()]
    assert all(r["output_tokens"] == 8 and r["prompt_tokens"] == 21 and r["length_ok"] for r in records)


def test_measure_level_returns_one_typed_level_and_writes_nothing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from launcher.bench import LevelResult, measure_level

    monkeypatch.chdir(tmp_path)
    with serving(free_port(), token_delay_s=0.001) as url:
        level = measure_level(cfg(url, repeats=2), 2)
        assert url.state["served"] == 8  # 4 prompts x 2 repeats, no warm-up
    assert isinstance(level, LevelResult)
    assert (level.concurrency, level.completed, level.failed, level.repeats) == (2, 8, 0, 2)
    assert level.output_throughput_tok_s > 0 and level.tpot_ms.mean is not None
    assert list(tmp_path.iterdir()) == []
