"""launcher/output.py: one run per output folder, and the one path out (documents and printed lines) that masks
secrets. Through the real CLI where a user can reach it."""

from __future__ import annotations

import io
import json
import subprocess
import sys
from pathlib import Path

import pytest

from checks.secrets import remember
from launcher.cli.main import main
from launcher.output import LOCK_NAME, hold, redacted_streams, write_json
from tests.fake_server import serving
from tests.helpers import ROOT, free_port

HOLDER = """
import sys, time
from pathlib import Path
from launcher.output import hold
with hold(Path(sys.argv[1]), "bench run"):
    print("held", flush=True)
    sys.stdin.read()
"""


def test_a_second_run_into_a_live_out_folder_is_one_line(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "r"
    holder = subprocess.Popen(
        [sys.executable, "-c", HOLDER, str(out)],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
        env={"PYTHONPATH": str(ROOT)},
    )
    try:
        assert holder.stdout is not None and holder.stdout.readline() == "held\n"
        with serving(free_port()) as url:
            rc = main(["bench", "--url", url, "--concurrency", "1", "--num-prompts", "2", "--out", str(out)])
        left = sorted(p.name for p in out.iterdir())  # the refused run wrote nothing there
    finally:
        holder.communicate("")
    assert rc == 2
    assert capsys.readouterr().err.splitlines() == [
        f"nemolaunch: {out} is in use by another nemolaunch bench run (pid {holder.pid}); wait for it to end, or "
        "give another --out"
    ]
    assert left == [LOCK_NAME]


def test_a_folder_made_for_nothing_is_removed_and_a_killed_holder_leaves_no_lock(tmp_path: Path) -> None:
    with hold(tmp_path / "empty"):
        pass
    assert not (tmp_path / "empty").exists()
    killed = subprocess.run(
        [sys.executable, "-c", HOLDER.replace("sys.stdin.read()", "import os; os._exit(9)"), str(tmp_path / "k")],
        env={"PYTHONPATH": str(ROOT)},
        check=False,
    )
    assert killed.returncode == 9
    with hold(tmp_path / "k"):  # the kernel dropped the dead holder's lock
        assert (tmp_path / "k" / LOCK_NAME).read_text() != ""


def test_documents_keep_token_ids_and_counts_but_no_key(tmp_path: Path) -> None:
    """ab's answer_tokens are read back on resume: masking them (their name says TOKEN) broke resume."""
    doc = {
        "served": {"argv": ["vllm", "--api-key", "k-0123456789"], "env": {"VLLM_API_KEY": "k-0123456789"}},
        "answer_tokens": [[1, 2, 3], [4, 5]],
        "total_output_tokens": 12,
    }
    write_json(tmp_path / "d.json", doc)
    assert json.loads((tmp_path / "d.json").read_text()) == {
        "served": {"argv": ["vllm", "--api-key", "<redacted>"], "env": {"VLLM_API_KEY": "<redacted>"}},
        "answer_tokens": [[1, 2, 3], [4, 5]],
        "total_output_tokens": 12,
    }


def test_printed_lines_are_masked_even_when_written_in_pieces(monkeypatch: pytest.MonkeyPatch) -> None:
    remember("planted-key-0123")
    stdout = io.StringIO()
    monkeypatch.setattr(sys, "stdout", stdout)
    with redacted_streams():
        sys.stdout.write("key: planted-")
        sys.stdout.write("key-0123 and http://u:pw@h/\nprogress\r")
        sys.stdout.write("tail")
    assert stdout.getvalue() == "key: <redacted> and http://u:<redacted>@h/\nprogress\rtail"


def test_a_file_where_the_output_folder_should_be_is_one_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """The error boundary turns what no stage caught into one line (model shape said "internal error: OSError")."""
    (tmp_path / "f").write_text("x")
    assert main(["model", "shape", "llama-3-8b", str(tmp_path / "f" / "out"), "--python", sys.executable]) == 1
    assert capsys.readouterr().err.splitlines()[-1] == (
        f"nemolaunch: cannot write {tmp_path / 'f'}: a file is there, not a folder; give a writable output folder "
        "with free space (what was written before is kept there)"
    )
