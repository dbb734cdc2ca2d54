"""ab and tune never turn a usage error into a result, survive a server dying between passes, refuse to continue a
run whose profiles changed, and write a tuned profile only from what they measured (issue 25, classes 2, 4, 5, 6)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import psutil
import pytest

from launcher.ab import run as ab
from launcher.ab.config import AbConfig, Workload
from launcher.ab.servers import Up
from launcher.ab.sides import Side
from launcher.cli.main import main
from launcher.errors import BadInput
from tests.fake_server import PACED_S, serving
from tests.helpers import free_port


def _vllm_children() -> list[str]:
    me = psutil.Process()
    return [" ".join(p.cmdline()) for p in me.children(recursive=True) if "vllm" in " ".join(p.cmdline())]


@pytest.mark.parametrize(
    ("args", "message"),
    [
        pytest.param(["--concurrency", "2,2"], "--concurrency repeats [2]", id="duplicate-levels"),
        pytest.param(["--concurrency", "20000"], "beyond the limit of 16384", id="too-many-streams"),
        pytest.param(["--config", "a/b=cpu", "--config", "c=cpu"], "'a/b' is not a plain name", id="slash-name"),
    ],
)
def test_workload_errors_are_refused_before_any_server(
    args: list[str], message: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    base = ["ab", "--model", str(tmp_path), "--out", str(tmp_path / "o")]
    sides = [] if "--config" in args else ["--a", "cpu", "--b", "cpu"]
    assert main([*base, *sides, *args]) == 2
    err = capsys.readouterr().err
    assert message in err and "Traceback" not in err and len(err.strip().splitlines()) == 1, err
    assert not (tmp_path / "o").exists()


def test_a_model_folder_without_config_is_a_usage_error(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code = main(["ab", "--model", str(tmp_path), "--a", "cpu", "--b", "cpu", "--out", str(tmp_path / "o")])
    err = capsys.readouterr().err
    assert code == 2 and "has no config.json" in err, err
    assert not (tmp_path / "o").exists() and not _vllm_children()


def test_a_missing_engine_is_a_usage_error_not_two_infeasible_sides(
    tiny_model: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Trust case V4: `--python /nonexistent` once became two "infeasible" sides, "1 round(s) measured", exit 1."""
    argv = ["ab", "--model", str(tiny_model), "--a", "cpu", "--b", "cpu", "--python", "/nonexistent"]
    assert main([*argv, "--out", str(tmp_path / "o")]) == 2
    err = capsys.readouterr().err
    assert "/nonexistent (from --python) does not exist or is not executable" in err, err
    assert not (tmp_path / "o").exists() and not _vllm_children()


class DyingPool:
    """The fake server for A; B's server 'dies' after its first pass (its port then refuses connections)."""

    mode = "restart"

    def __init__(self, url: str) -> None:
        self.url, self.passes_b = url, 0
        self.released: list[str] = []

    def preflight(self, sides: Any, workload: Any) -> None:
        pass

    def pids(self) -> set[int]:
        return set()

    def ensure(self, side: Side) -> tuple[Up, bool]:
        info = {"argv": ["vllm", "--load-format", "dummy"], "profile": side.profile_ref}
        if side.name == "A":
            return Up(self.url, "fake", 0.1, info), False
        pool = self

        class Dying(Up):
            def alive(self) -> bool:
                return pool.passes_b < 2

        pool.passes_b += 1
        url = self.url if self.passes_b == 1 else f"http://127.0.0.1:{free_port()}"
        return Dying(url, "fake", 0.1, info), False

    def release(self, name: str) -> None:
        self.released.append(name)

    def close(self) -> None:
        pass


def test_a_server_dying_between_passes_ends_with_a_report(tmp_path: Path) -> None:
    """Trust case V4: a server gone between passes aborted ab with exit 3 and "give its address with --url",
    ab.json left "running" and no report. Now that side died: out of the run, the rest judged, exit 1."""
    # mode "restart", the pool's: co-resident CPU sides would wait out an idle engine's spin before each switch
    cfg = AbConfig("m", (Side("A", "cpu"), Side("B", "cpu")), Workload((2,), 8, 4, 8), rounds=2, warmup_passes=0,
                   window_s=1.0, mode="restart")  # fmt: skip
    with serving(free_port(), token_delay_s=PACED_S) as url:
        pool = DyingPool(url)
        outcome = ab.run_ab(cfg, tmp_path / "o", lambda m: None, pool)  # type: ignore[arg-type]
    assert outcome.code == 1 and "could not serve: B" in outcome.message
    doc = json.loads((tmp_path / "o" / "ab.json").read_text())
    assert doc["status"] == "complete" and (tmp_path / "o" / "report.md").is_file()
    b = next(s for s in doc["sides"] if s["name"] == "B")
    assert b["status"] == "died" and "stopped answering" in b["diagnosis"] and pool.released == ["B"]
    assert len(doc["rounds"]) == 1  # the round in which B died is recorded; no second round with one side


def test_a_run_whose_profile_changed_is_not_continued(tmp_path: Path) -> None:
    """Trust case V5: rounds of an edited profile were averaged with the old ones (the digest covered its name)."""
    profile = tmp_path / "b.toml"
    profile.write_text('schema = 1\n[vllm]\nmax_model_len = 2048\n[env]\nVLLM_CPU_KVCACHE_SPACE = "1"\n')
    cfg = AbConfig("m", (Side("A", "cpu"), Side("B", str(profile))), Workload((2,), 8, 4, 8), rounds=2,
                   warmup_passes=0, window_s=1.0, mode="restart")  # fmt: skip
    with serving(free_port(), token_delay_s=PACED_S) as url:
        from tests.ab.test_ab import FakePool

        assert ab.run_ab(cfg, tmp_path / "o", lambda m: None, FakePool(url)).code == 0  # type: ignore[arg-type]
        profile.write_text(profile.read_text().replace("2048", "1024"))
        more = AbConfig(**{**cfg.__dict__, "rounds": 3})
        with pytest.raises(BadInput, match="a profile's contents or the engine differ"):
            ab.run_ab(more, tmp_path / "o", lambda m: None, FakePool(url))  # type: ignore[arg-type]


def test_a_damaged_tune_state_is_one_line(tmp_path: Path) -> None:
    from launcher.ab.tune import TuneState

    (tmp_path / "tune-state.json").write_text(json.dumps({"digest": "x", "trials": {"t": {"name": 3}}, "final": None}))
    with pytest.raises(BadInput, match=r"tune-state.json: trials.t.name must be a string, not 3"):
        TuneState(tmp_path, "x")


def test_tune_with_nothing_to_try_writes_nothing_and_fails(
    engine_python: Path, tiny_model: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Trust case V4 / issue 26: tune said "winner: base" and wrote a "tuned" profile nothing measured."""
    out = tmp_path / "t"
    argv = ["tune", "--model", str(tiny_model), "--python", str(engine_python), "--knobs", "cuda_graphs"]
    assert main([*argv, "--concurrency", "2", "--out", str(out)]) == 1
    captured = capsys.readouterr()
    assert "nothing to try: no knob suggested a candidate; no profile written" in captured.err
    assert not list(out.glob("*.toml")) and json.loads((out / "tune.json").read_text())["profile"] is None
    assert "no profile written" in captured.out and not _vllm_children()


def test_tune_for_a_missing_model_writes_nothing(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    argv = ["tune", "--model", str(tmp_path / "none"), "--knobs", "max_num_seqs", "--out", str(tmp_path / "t")]
    assert main(argv) == 2
    assert "does not exist" in capsys.readouterr().err
    assert not (tmp_path / "t").exists()
