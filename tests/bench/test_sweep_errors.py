"""bench under faults and hostile input, through the real CLI (issue 15's bench classes): a level that completes
nothing, a server that is not OpenAI-compatible, SIGTERM, a folder that cannot be written, absurd values, API keys
and secrets in what bench writes."""

from __future__ import annotations

import json
import os
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from launcher.cli.main import main
from tests.fake_server import API_KEY, serving
from tests.helpers import free_port

SMALL = ["--input-len", "8", "--output-len", "4", "--num-prompts", "3", "--warmup", "0"]


def bench(url: str, out: Path, *extra: str) -> list[str]:
    return ["bench", "--url", url, "--concurrency", "1,2", *SMALL, "--out", str(out), *extra]


@pytest.mark.parametrize("as_json", [False, True], ids=["table", "json"])
def test_a_level_that_completes_nothing_keeps_table_report_and_json(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], as_json: bool
) -> None:
    # every request takes ~1 s (20 tokens, 50 ms apart) and the timeout is 0.2 s: nothing completes
    with serving(free_port(), token_delay_s=0.05) as url:
        argv = bench(url, tmp_path / "r", "--output-len", "20", "--request-timeout", "0.2") + (
            ["--json"] if as_json else []
        )
        rc = main(argv)
    out, err = capsys.readouterr()
    assert rc == 1
    assert err.splitlines()[-1] == "nemolaunch: 6 request(s) failed"
    assert "internal error" not in err
    doc = json.loads((tmp_path / "r" / "summary.json").read_text())
    assert doc["status"] == "complete"
    assert [(lv["completed"], lv["failures"]) for lv in doc["levels"]] == [(0, {"timeout": 3})] * 2
    assert "c=1: no request completed (timeout x3): see requests.jsonl for the errors" in doc["warnings"]
    assert (tmp_path / "r" / "report.md").is_file()
    if as_json:
        assert json.loads(out)["levels"][0]["ttft_ms"] == {"mean": None, "p50": None, "p90": None, "p99": None}
    else:
        assert out.splitlines()[2].split()[:5] == ["1", "0", "3", "0.0", "0.0"]


@pytest.mark.parametrize(
    "fault, line",
    [
        (
            "html",
            "{url} is not an OpenAI-compatible server: GET {url}/v1/models answered HTTP 404: <html><body><h1>404 "
            "Not Found</h1> <p>nginx</p></body></html>",
        ),
        (
            "models-not-json",
            "{url} is not an OpenAI-compatible server: GET {url}/v1/models answered not JSON: "
            "'OK this is a status page'",
        ),
        ("models-shape", '{url}/v1/models is not an OpenAI model list (no data[].id): {{"models": ["fake"]}}'),
    ],
    ids=["html-404", "models-not-json", "models-other-shape"],
)
def test_a_server_that_is_not_openai_compatible_is_one_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], fault: str, line: str
) -> None:
    with serving(free_port(), fault=fault) as url:
        rc = main(bench(url, tmp_path / "r"))
    err = capsys.readouterr().err
    fix = "give the address of an OpenAI-compatible server (vLLM: http://HOST:PORT, without /v1)"
    assert rc == 3
    assert err.splitlines() == [f"nemolaunch: {line.format(url=url)}; {fix}"]
    assert not (tmp_path / "r").exists()


@pytest.fixture
def small_disk(tmp_path: Path) -> Iterator[Path]:
    """A 64 KiB tmpfs (needs root; skipped otherwise)."""
    mount = tmp_path / "disk"
    mount.mkdir()
    if subprocess.run(["mount", "-t", "tmpfs", "-o", "size=64k", "tmpfs", str(mount)], capture_output=True).returncode:
        pytest.skip("cannot mount a tmpfs here (not root)")
    try:
        yield mount
    finally:
        subprocess.run(["umount", str(mount)], check=True)


def test_a_full_disk_is_one_line_and_leaves_whole_lines(small_disk: Path, capsys: pytest.CaptureFixture[str]) -> None:
    # ~700 bytes per request line: 64 KiB fill up within the first levels
    with serving(free_port()) as url:
        rc = main(
            bench(url, small_disk / "r", "--concurrency", "8,16,32,64", "--num-prompts", "200", "--output-len", "16")
        )
    err = capsys.readouterr().err
    assert rc == 1
    assert err.splitlines()[-1].startswith(f"nemolaunch: cannot write {small_disk}/r/")
    assert "No space left on device; give a writable output folder with free space" in err.splitlines()[-1]
    text = (small_disk / "r" / "requests.jsonl").read_text()
    assert text.endswith("\n") and all(json.loads(line) for line in text.splitlines())


def test_a_read_only_out_is_one_line(small_disk: Path, capsys: pytest.CaptureFixture[str]) -> None:
    subprocess.run(["mount", "-o", "remount,ro", str(small_disk)], check=True)
    with serving(free_port()) as url:
        rc = main(bench(url, small_disk / "r"))
    err = capsys.readouterr().err
    assert rc == 1
    assert err.splitlines() == [
        f"nemolaunch: cannot write {small_disk}/r: Read-only file system; give a writable output folder with free "
        "space (what was written before is kept there)"
    ]


@pytest.mark.parametrize(
    "extra, line",
    [
        (
            ["--concurrency", "1000000"],
            "--concurrency 1000000 is beyond the limit of 16384; give levels between 1 and 16384",
        ),
        (
            ["--concurrency", "1,2,2"],
            "--concurrency repeats [2]; give each level once (use --repeats to measure it again)",
        ),
        (["--request-timeout", "0"], "--request-timeout 0.0 is not a positive number of seconds; give e.g. 600"),
        (["--request-timeout", "-5"], "--request-timeout -5.0 is not a positive number of seconds; give e.g. 600"),
        (["--request-timeout", "nan"], "--request-timeout nan is not a positive number of seconds; give e.g. 600"),
        (
            ["--label", "../../x"],
            "--label '../../x' cannot be a file name; labels name result files: use letters, "
            "digits, '-', '_', '.' (no path separators)",
        ),
        (
            ["--slo", "ttft"],
            "--slo 'ttft': 'ttft' is not NAME=MILLISECONDS; give e.g. --slo ttft=200,tpot=50 (names: "
            "ttft, tpot, e2el; positive numbers)",
        ),
    ],
    ids=[
        "huge-concurrency",
        "duplicate-levels",
        "timeout-0",
        "timeout-negative",
        "timeout-nan",
        "label-path",
        "bad-slo",
    ],
)
def test_absurd_values_are_refused_before_anything_is_sent(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], extra: list[str], line: str
) -> None:
    with serving(free_port()) as url:
        rc = main(["bench", "--url", url, *SMALL, "--out", str(tmp_path / "r"), *extra])
        assert url.state["served"] == 0
    assert rc == 2
    assert capsys.readouterr().err.splitlines() == [f"nemolaunch: {line}"]
    assert not (tmp_path / "r").exists()


def test_api_key_is_sent_and_never_written(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    for var in ("NEMOLAUNCH_API_KEY", "VLLM_API_KEY", "OPENAI_API_KEY"):
        monkeypatch.delenv(var, raising=False)
    with serving(free_port(), fault="auth") as url:
        assert main(bench(url, tmp_path / "none")) == 3
        assert capsys.readouterr().err.splitlines() == [
            f"nemolaunch: {url} refused the request (HTTP 401); give its API key with --api-key-file FILE or "
            "$NEMOLAUNCH_API_KEY"
        ]
        key_file = tmp_path / "key"
        key_file.write_text(API_KEY + "\n")
        assert main(bench(url, tmp_path / "file", "--api-key-file", str(key_file))) == 0
        monkeypatch.setenv("NEMOLAUNCH_API_KEY", API_KEY)
        assert main(bench(url, tmp_path / "env")) == 0
    out, err = capsys.readouterr()
    assert API_KEY not in out + err
    for folder in ("file", "env"):
        for path in (tmp_path / folder).iterdir():
            assert API_KEY.encode() not in path.read_bytes(), path


def test_url_password_and_argv_secrets_are_masked(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    with serving(free_port()) as url:
        with_password = url.replace("http://", "http://operator:hunter2-pw@")
        hf = "hf_" + "a1B2c3D4e5F6g7H8i9J0k1L2"
        assert main([*bench(with_password, tmp_path / "r", "--label", "x", "--json"), "--model", "fake"]) == 0
        os.environ["HF_TOKEN"] = hf
        try:
            assert main(bench(url, tmp_path / "s", "--label", hf[:3] + "x")) == 0
        finally:
            del os.environ["HF_TOKEN"]
    out, err = capsys.readouterr()
    assert "hunter2-pw" not in out + err
    for path in [*(tmp_path / "r").iterdir(), *(tmp_path / "s").iterdir()]:
        data = path.read_bytes()
        assert b"hunter2-pw" not in data and hf.encode() not in data, path
    doc = json.loads((tmp_path / "r" / "summary.json").read_text())
    assert doc["provenance"]["server"]["url"] == with_password.replace("hunter2-pw", "<redacted>")


def test_result_files_are_0644_under_umask_022(tmp_path: Path) -> None:
    old = os.umask(0o022)
    try:
        with serving(free_port()) as url:
            assert main(bench(url, tmp_path / "r")) == 0
    finally:
        os.umask(old)
    modes = {p.name: oct(p.stat().st_mode & 0o777) for p in (tmp_path / "r").iterdir()}
    assert set(modes) >= {"summary.json", "summary.csv", "requests.jsonl", "report.md", "vllm-c1-in8.json"}
    assert set(modes.values()) == {"0o644"}, modes
