"""Reports and compare follow the sweep's real axis and the real workload, through the real CLI against the local
stand-in server: request-rate runs are compared per rate, a context sweep keeps its levels apart, a dataset's
prompts are described by what the server counted, and measurements that cannot be the server's are flagged."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from launcher.bench.provenance import implausible
from launcher.cli.main import main
from tests.fake_server import serving
from tests.helpers import free_port

SMALL = ["--output-len", "4", "--warmup", "0"]


def bench(url: str, out: Path, *args: str) -> int:
    return main(["bench", "--url", url, *SMALL, *args, "--out", str(out)])


def test_request_rate_runs_are_compared_per_rate(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    with serving(free_port()) as url:
        for name in ("a", "b"):
            assert bench(url, tmp_path / name, "--request-rate", "20,40", "--num-prompts", "4", "--input-len", "8") == 0
    capsys.readouterr()  # bench's own tables
    assert main(["compare", str(tmp_path / "a"), str(tmp_path / "b"), "--out", str(tmp_path / "rep")]) == 0
    rows = [line.split()[0] for line in capsys.readouterr().out.splitlines()[2:]]
    assert rows == ["rate=20/s", "rate=40/s"]
    report = (tmp_path / "a" / "report.md").read_text()
    assert "| rate=20/s |" in report and "| rate=40/s |" in report and "levels by request-rate" in report


def test_a_context_sweep_keeps_its_levels_apart(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """Keyed by concurrency alone, the three levels (all at c=2) collapsed into one row."""
    with serving(free_port()) as url:
        assert (
            bench(url, tmp_path / "c", "--context-lens", "16,64,256", "--concurrency", "2", "--num-prompts", "2") == 0
        )
    capsys.readouterr()  # bench's own tables
    assert main(["compare", str(tmp_path / "c"), str(tmp_path / "c"), "--out", str(tmp_path / "rep")]) == 0
    rows = [" ".join(line.split()[:2]) for line in capsys.readouterr().out.splitlines()[2:]]
    assert rows == ["c=2 in=16", "c=2 in=64", "c=2 in=256"]
    doc = json.loads((tmp_path / "c" / "summary.json").read_text())
    assert doc["workload"]["input_len"] is None and doc["workload"]["axis"] == "context-length"
    assert "prompts of 16-256 tokens" in (tmp_path / "c" / "report.md").read_text()


def test_runs_over_different_levels_compare_on_the_shared_ones(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    with serving(free_port()) as url:
        assert bench(url, tmp_path / "a", "--concurrency", "1,4", "--input-len", "8") == 0
        assert bench(url, tmp_path / "b", "--concurrency", "1,2,4,8", "--input-len", "8") == 0
    capsys.readouterr()  # bench's own tables
    assert main(["compare", str(tmp_path / "a"), str(tmp_path / "b"), "--out", str(tmp_path / "rep")]) == 0
    assert [line.split()[0] for line in capsys.readouterr().out.splitlines()[2:]] == ["c=1", "c=4"]


def test_a_dataset_is_described_by_what_was_sent(tmp_path: Path) -> None:
    dataset = tmp_path / "d.jsonl"
    dataset.write_text("".join(json.dumps({"prompt": "w " * n, "output_tokens": 4}) + "\n" for n in (10, 20, 30)))
    with serving(free_port()) as url:
        assert bench(url, tmp_path / "r", "--dataset", str(dataset), "--concurrency", "2", "--num-prompts", "3") == 0
    doc = json.loads((tmp_path / "r" / "summary.json").read_text())
    assert doc["workload"]["input_len"] is None and doc["levels"][0]["input_len"] is None
    assert doc["workload"]["mean_prompt_tokens"] == doc["levels"][0]["mean_prompt_tokens"] == 20.0
    assert (tmp_path / "r" / "vllm-c2.json").is_file()  # not vllm-c2-in512.json: no prompt was 512 tokens
    assert f"dataset `{dataset}` (prompts of 20 tokens on average)" in (tmp_path / "r" / "report.md").read_text()


def test_an_offered_rate_the_server_cannot_keep_up_with_is_flagged(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Each request takes at least 4 x 0.1 s on this server, at most 2 in flight: 5 requests/s at most, whatever the
    machine's load, against 100 offered."""
    with serving(free_port(), token_delay_s=0.1) as url:
        rc = bench(url, tmp_path / "r", "--request-rate", "100", "--concurrency", "2", "--num-prompts", "6")
    assert rc == 0
    doc = json.loads((tmp_path / "r" / "summary.json").read_text())
    flagged = [w for w in doc["warnings"] if "requests/s completed of the 100/s offered" in w]
    assert len(flagged) == 1 and flagged[0].startswith("rate=100/s (c<=2): ")
    assert f"warning: {flagged[0]}" in capsys.readouterr().err


def test_tokens_that_arrived_together_are_not_a_tpot() -> None:
    """At load ~15 on two cores every chunk of a request arrived within 0.1 ms: TPOT read 0.0 ms, unflagged."""
    level = {"tpot_ms": {"mean": 0.0}, "client_cpu_per_wall_s": 0.2, "client_processes": 1, "request_rate": None}
    assert implausible("c=1", level) == [
        "c=1: TPOT 0.000 ms is below what any engine produces: the tokens arrived together, read late by a busy "
        "client or machine, so the latencies do not measure the server"
    ]
    level |= {"tpot_ms": {"mean": 4.1}, "client_cpu_per_wall_s": 0.95}
    assert implausible("c=1", level) == [
        "c=1: the client was busy 95% of the level on 1 process(es): it may have set the pace (give "
        "--client-processes, or run the client on a less loaded machine)"
    ]
