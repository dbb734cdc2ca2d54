"""`ab --against-fallbacks` without an engine: the sides built from real H200 startup logs, the arrangement their
memory allows, usage errors, and the whole run against the fake OpenAI server with the H200 Nemotron 3 Super log
(vLLM 0.26.0, 2026-12-03) as the base's startup log."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from launcher.ab import against
from launcher.ab.config import AbConfig, Workload
from launcher.ab.servers import StartFailed, Up
from launcher.ab.sides import Side, side_profile
from launcher.cli.main import main
from launcher.errors import BadInput
from launcher.profiles.profile import ServingProfile
from launcher.serve import fallbacks
from tests.ab.test_ab import FAST, FakePool
from tests.helpers import FIXTURES

LOGS = FIXTURES / "logs"
SUPER = LOGS / "h200-vllm026-nemotron-super-sm120-2026-12-03.log"  # the Super shape with sm120's flags of record
SM90 = LOGS / "h200-vllm026-serve-sm90-2026-11-30.log"  # a 1B Llama shape, dummy weights


def super_sides() -> tuple[list[against.BuiltSide], list[against.NotMeasured]]:
    base = Side("base", "sm120")
    profile = side_profile(base)
    return against.build_sides(fallbacks.detect(SUPER.read_text(), profile.settings, profile.env), base)


def test_the_super_logs_fallbacks_become_one_side_each() -> None:
    """NVFP4 linear layers on Marlin (vLLM's first: FlashInfer CuteDSL), NVFP4 MoE on MARLIN (the profile's; vLLM's
    first: FLASHINFER_TRTLLM) and Triton attention (the profile's; FLASH_ATTN first valid): three sides, each the
    first alternative in vLLM's order, the later ones listed. The FP4 warning and the autotune cache have none."""
    sides, skipped = super_sides()
    assert [(s["name"], s["overrides"], s["asked"]) for s in sides] == [
        ("no-fp4-emulation-linear-backend", {"extra_args": ["--linear-backend", "flashinfer_cutedsl"]}, False),
        ("no-fp4-emulation-moe-backend", {"moe_backend": "flashinfer_trtllm"}, True),
        ("no-attention", {"attention_backend": "FLASH_ATTN"}, True),
    ]
    assert sides[1]["untried"] == [
        "moe_backend = 'flashinfer_cutedsl'",
        "moe_backend = 'flashinfer_cutlass'",
        "moe_backend = 'cutlass'",
    ]
    assert [(n["kind"], n["why"][:41]) for n in skipped] == [
        ("fp4-emulation", "no alternative here: a GPU with FP4 tenso"),
        ("autotune", "no alternative here: start once more here"),
    ]


def test_a_base_with_its_own_overrides_keeps_them_and_its_extra_args() -> None:
    """The base's --config overrides stay on every side; extra_args are appended to the base's, not replaced."""
    base = Side("base", "sm120", {"extra_args": ["--max-logprobs", "5"], "max_num_seqs": 64})
    found = fallbacks.detect(SUPER.read_text(), side_profile(base).settings)
    sides, _ = against.build_sides(found, base)
    assert sides[0]["overrides"] == {
        "extra_args": ["--max-logprobs", "5", "--linear-backend", "flashinfer_cutedsl"],
        "max_num_seqs": 64,
    }
    assert sides[2]["overrides"] == {"extra_args": ["--max-logprobs", "5"], "max_num_seqs": 64,
                                     "attention_backend": "FLASH_ATTN"}  # fmt: skip


def test_graphs_off_in_a_base_that_turns_them_off_is_measured_against_graphs_on() -> None:
    """The H200 eager capture: "CUDA graphs off" (the base asked for it) against cuda_graphs = true; a base that
    already sets what the alternative sets is not measured twice (an A/A)."""
    eager = (LOGS / "h200-vllm026-eager-1b-2026-11-30.log").read_text()
    base = Side("base", "sm90", {"cuda_graphs": False})
    sides, _ = against.build_sides(fallbacks.detect(eager, side_profile(base).settings), base)
    assert [(s["name"], s["overrides"], s["asked"]) for s in sides] == [("no-cuda-graphs", {"cuda_graphs": True}, True)]
    graphs_on = Side("base", "sm90", {"cuda_graphs": True})
    sides, skipped = against.build_sides(fallbacks.detect(eager), graphs_on)
    assert sides == [] and skipped[0]["why"] == "the base already sets cuda_graphs = True"


@pytest.mark.parametrize(
    ("log", "servers", "mode"),
    [(SUPER, 4, "restart"), (SUPER, 2, "restart"), (SM90, 4, "co-resident")],
    ids=["super-4", "super-2", "1b-4"],
)
def test_co_residence_follows_the_memory_the_base_used(log: Path, servers: int, mode: str) -> None:
    """Super used 69.46 + 3.74 + 0.25 + 0.89 = 74.34 GiB outside its KV cache: 0.84 x 139.8 / 2 = 58.7 GiB a server
    cannot hold it; the 1B shape used 0.44 GiB, and four servers at 29.4 GiB each fit."""
    arranged = against.co_resident_memory(log.read_text(), servers)
    assert arranged is not None and arranged[0] == mode
    if log is SUPER:
        assert arranged[2] == "the base's start used 74.3 GiB outside its KV cache of 139.8 GiB"
    assert against.co_resident_memory("no memory line (the CPU engine)", 2) is None


@pytest.mark.parametrize(
    ("args", "message"),
    [
        pytest.param([], "--against-fallbacks takes one --config, the base (got 0)", id="no-config"),
        pytest.param(["--config", "a=cpu", "--config", "b=cpu"], "takes one --config, the base (got 2)", id="two"),
        pytest.param(["--a", "cpu", "--b", "cpu"], "builds the other sides itself", id="a-and-b"),
        pytest.param(["--config", "a=cpu", "--headline-level", "5"], "--headline-level 5 is not one", id="level"),
    ],
)
def test_usage_errors_are_one_line_exit_2_and_store_nothing(
    args: list[str], message: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code = main(["ab", "--against-fallbacks", "--model", str(tmp_path), "--out", str(tmp_path / "o"), *args])
    err = capsys.readouterr().err
    assert code == 2, err
    assert message in err and "Traceback" not in err and len(err.strip().splitlines()) == 1
    assert not (tmp_path / "o").exists()


class LogPool(FakePool):
    """The fake server for every side, each start logged as the H200 Super start was; `fail` names sides whose
    start fails (the stand-in's diagnosis, not vLLM's)."""

    def __init__(self, url: str, logs: Path, fail: tuple[str, ...] = (), refuse: tuple[str, ...] = ()) -> None:
        super().__init__(url)
        self.logs, self.fail, self.refuse = logs, fail, refuse

    def preflight(self, sides: Any, workload: Any) -> str:
        for side in sides:
            if side.name in self.refuse:
                raise BadInput(f"stand-in: {side.name}'s flags are refused", "none")
        return "0.0-fake"

    def profile_for(self, side: Side) -> ServingProfile:
        return side_profile(side)

    def ensure(self, side: Side) -> tuple[Up, bool]:
        if side.name in self.fail:
            raise StartFailed(f"stand-in: {side.name} does not start here", "none")
        up, fresh = super().ensure(side)
        self.logs.mkdir(parents=True, exist_ok=True)
        up.log = self.logs / f"{side.name}-{len(self.started)}.log"
        up.log.write_text(SUPER.read_text())
        return up, fresh


def _run(
    tmp_path: Path, url: str, fail: tuple[str, ...] = (), refuse: tuple[str, ...] = ()
) -> tuple[against.AgainstOutcome, list[str], LogPool]:
    cfg = AbConfig("m", (Side("base", "sm120"),), Workload((2,), 8, 8, 8), rounds=2, **FAST)
    said: list[str] = []
    pool = LogPool(url, tmp_path / "o" / "logs", fail, refuse)
    return against.run_against_fallbacks(cfg, tmp_path / "o", said.append, pool), said, pool  # type: ignore[arg-type]


def test_a_run_measures_each_alternative_and_an_infeasible_one_is_a_result(tmp_path: Path) -> None:
    """The discovery start reads the Super log; the ab runs the base against its three sides on the fake server;
    the MoE side does not start, and is infeasible with its diagnosis while the others are judged. A rerun of the
    same command reads fallbacks.json and starts no second discovery."""
    from tests.fake_server import PACED_S, serving
    from tests.helpers import free_port

    with serving(free_port(), token_delay_s=PACED_S) as url:
        got, said, pool = _run(tmp_path, url, fail=("no-fp4-emulation-moe-backend",))
    assert pool.started[0] == "base"  # the discovery start, before the ab's own
    found = json.loads((tmp_path / "o" / "fallbacks.json").read_text())
    assert found["status"] == "found" and found["log"] == "logs/base-1.log"
    assert [s["name"] for s in found["sides"]] == [
        "no-fp4-emulation-linear-backend",
        "no-fp4-emulation-moe-backend",
        "no-attention",
    ]
    ab: dict[str, Any] = got.doc["ab"]
    status = {s["name"]: (s["status"], s["diagnosis"]) for s in ab["sides"]}
    assert status["no-fp4-emulation-moe-backend"] == (
        "infeasible",
        "stand-in: no-fp4-emulation-moe-backend does not start here",
    )
    assert status["no-attention"][0] == status["no-fp4-emulation-linear-backend"][0] == "ok"
    assert set(ab["verdicts"]) == {"no-fp4-emulation-linear-backend", "no-attention"} and len(ab["rounds"]) == 2
    assert got.code == 1  # a side could not serve, as ab says
    assert "ab: not measured: autotune: FlashInfer kernels on default tactics" in "\n".join(said)
    report = (tmp_path / "o" / "report.md").read_text()
    assert "## Fallbacks measured (ab --against-fallbacks)" in report
    assert "- no-attention: attention_backend = 'FLASH_ATTN', against: attention on TRITON_ATTN" in report
    with serving(free_port()) as url, pytest.raises(BadInput, match="holds a complete ab run"):
        _run(tmp_path, url)


def test_a_base_that_cannot_start_is_exit_1_with_its_diagnosis(tmp_path: Path) -> None:
    from tests.fake_server import serving
    from tests.helpers import free_port

    with serving(free_port()) as url:
        got, _, _ = _run(tmp_path, url, fail=("base",))
    assert got.code == 1 and got.message == "the base base cannot start: stand-in: base does not start here"
    assert json.loads((tmp_path / "o" / "fallbacks.json").read_text())["status"] == "infeasible"
    assert not (tmp_path / "o" / "ab.json").exists()


def test_sides_whose_flags_are_refused_before_a_start_are_not_measured(tmp_path: Path) -> None:
    """bench's preflight refuses every side's flags (a stand-in refusal): each is listed as not measured with the
    refusal, no ab runs, and that is an answer (exit 0), not a usage error."""
    from tests.fake_server import serving
    from tests.helpers import free_port

    names = ("no-fp4-emulation-linear-backend", "no-fp4-emulation-moe-backend", "no-attention")
    with serving(free_port()) as url:
        got, _, _ = _run(tmp_path, url, refuse=names)
    assert got.doc["sides"] == [] and got.doc["ab"] is None and not (tmp_path / "o" / "ab.json").exists()
    refused = [n for n in got.doc["not_measured"] if n["kind"] == "refused"]
    assert refused[0]["why"] == (
        "--linear-backend flashinfer_cutedsl is refused before any start: stand-in: "
        "no-fp4-emulation-linear-backend's flags are refused"
    )
    assert len(refused) == 3 and got.code == 0
    assert got.message == "nothing to measure: 5 fallback(s) found, none with an alternative this vLLM accepts"
