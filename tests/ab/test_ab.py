"""`nemolaunch ab` and `tune` without an engine: option parsing, block order, answers agreement, bad input."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path
from typing import Any

import pytest

from launcher.ab import answers, floor, sides, tune
from launcher.ab import run as ab
from launcher.ab.config import AbConfig, Workload
from launcher.ab.document import read_ab
from launcher.ab.report import agreement_text, sentence
from launcher.ab.servers import Up
from launcher.ab.sides import Side
from launcher.ab.state import AbRun
from launcher.cli.main import main
from launcher.errors import BadInput
from launcher.profiles.profile import load_profile
from launcher.profiles.stack import stale
from tests.helpers import FIXTURES


def test_block_order_is_balanced_and_alternates() -> None:
    assert ab.block_order(["A", "B"], 0) == ["A", "B", "B", "A"]
    assert ab.block_order(["A", "B"], 1) == ["B", "A", "A", "B"]
    assert ab.block_order(["A", "B", "C"], 0) == ["A", "B", "C", "C", "B", "A"]


def test_config_and_set_parsing_reads_toml_values() -> None:
    side = sides.parse_config("slow=cpu,max_num_seqs=1,cuda_graphs=false")
    assert side == Side("slow", "cpu", {"max_num_seqs": 1, "cuda_graphs": False})
    assert sides.parse_sets(["kv_cache_dtype=fp8", 'disabled_kernels=["X"]'], "--set-b") == {
        "kv_cache_dtype": "fp8",
        "disabled_kernels": ["X"],
    }
    assert sides.side_profile(side).settings["max_num_seqs"] == 1


@pytest.mark.parametrize(
    ("args", "message"),
    [
        pytest.param(["--a", "cpu"], "give both --a and --b", id="a-without-b"),
        pytest.param(["--config", "x"], "is not NAME=PROFILE", id="bad-config"),
        pytest.param(["--a", "cpu", "--b", "cpu", "--set-b", "max_num_seqs"], "is not KEY=VALUE", id="bad-set"),
        pytest.param(
            ["--a", "cpu", "--b", "cpu", "--set-b", "max_num_seqs=lots"], "max_num_seqs must be", id="mistyped"
        ),
        pytest.param(["--a", "cpu", "--b", "cpu", "--set-b", "warp_speed=9"], "unknown setting", id="unknown-key"),
        pytest.param(["--a", "cpu", "--b", "nosuch"], "no profile named 'nosuch'", id="no-profile"),
        pytest.param(["--config", "x=cpu"], "at least two configurations", id="one-side"),
        pytest.param(["--a", "cpu", "--b", "cpu", "--noise-floor", "7"], "not a fraction", id="bad-floor"),
    ],
)
def test_bad_input_is_one_line_and_exit_2(
    args: list[str], message: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code = main(["ab", "--model", str(tmp_path), "--out", str(tmp_path / "o"), *args])
    err = capsys.readouterr().err
    assert code == 2, err
    assert message in err and "Traceback" not in err
    assert not (tmp_path / "o" / "ab.json").exists()  # nothing started, nothing written


def test_agreement_finds_the_first_divergence() -> None:
    same = answers.agreement([[1, 2, 3], [4, 5]], [[1, 2, 3], [4, 5]])
    assert same["identical"] == 2 and same["token_agreement"] == 1.0
    assert agreement_text(same) == "same answers: 2/2 greedy completions identical"
    diff = answers.agreement([[1, 2, 3, 4], [4, 5]], [[1, 2, 9, 9], [4, 5]])
    assert diff["first_divergence"] == [2, None]
    assert diff["token_agreement"] == pytest.approx(4 / 6, abs=1e-3)
    assert agreement_text(diff) == (
        "different answers: 1/2 identical, token agreement 67%, first divergence at tokens [2]"
    )


def test_dummy_weights_are_recognised() -> None:
    assert sides.dummy_weights(["python", "-m", "x", "--load-format", "dummy"])
    assert sides.dummy_weights(["--load-format=dummy"])
    assert not sides.dummy_weights(["--load-format", "safetensors"])


def test_auto_mode_restarts_when_memory_is_what_is_compared() -> None:
    memory = (Side("A", "sm90"), Side("B", "sm90", {"gpu_memory_utilization": 0.92}))
    assert sides.choose_mode("auto", memory)[0] == "restart"
    graphs = (Side("A", "sm90"), Side("B", "sm90", {"cuda_graphs": False}))
    assert sides.choose_mode("auto", graphs)[0] == "co-resident"
    assert sides.choose_mode("restart", graphs) == ("restart", "asked for")


H200 = FIXTURES / "gpu-h200-2026-12-02"
H200_SIDES = (Side("base", "cpu"), Side("eager", "cpu"))


def rejudged(fixture: Path, out: Path) -> AbRun:
    """A recorded H200 ab (schema nemolaunch.ab/1: its rounds are the same shape today) judged again by this
    code, and written as ab.json to `out`."""
    cfg = AbConfig(model="m", sides=H200_SIDES, workload=Workload(concurrency=(1, 64)), calibrate=True)
    run = AbRun(cfg, out, "co-resident", "test")
    run.rounds = json.loads(fixture.read_text())["rounds"]
    run.write()
    return run


def test_a_calibrated_ab_json_is_a_stored_floor(tmp_path: Path) -> None:
    """The 3-round H200 ab of 2026-12-02 measured a floor per level: --noise-floor reads it back, and refuses a
    run that did not calibrate."""
    run = rejudged(H200.parent / "gpu-h200-2026-12-02b" / "ab" / "ab.json", tmp_path)
    floors, source = floor.load_noise_floor(str(tmp_path / "ab.json"))
    measured, _ = run.floor()
    assert source == str(tmp_path / "ab.json") and floors[64]["output_tok_s"] == measured[64]["output_tok_s"]
    assert 0.05 < floors[64]["output_tok_s"] < 0.5  # the +-20% floor at c=64 that issue 26 starts from
    uncalibrated = AbRun(AbConfig(model="m", sides=H200_SIDES), tmp_path / "x", "co-resident", "test")
    (tmp_path / "x").mkdir()
    uncalibrated.write()
    with pytest.raises(BadInput, match=r"not an ab\.json of a calibrated run"):
        floor.load_noise_floor(str(tmp_path / "x" / "ab.json"))


@pytest.mark.parametrize(
    ("edit", "message"),
    [
        pytest.param(lambda d: d.pop("rounds"), "rounds is missing", id="missing"),
        pytest.param(lambda d: d["rounds"][0].update(index="one"), "rounds[0].index must be an integer", id="type"),
        pytest.param(lambda d: d.update(status="done"), "status must be running or complete", id="status"),
        pytest.param(lambda d: d.update(schema="nemolaunch.ab/1"), "schema must be 'nemolaunch.ab/2'", id="schema"),
        pytest.param(
            lambda d: d["verdicts"]["eager"]["64"]["output_tok_s"].update(kind="fast"),
            "verdicts.eager.64.output_tok_s.kind must be better or worse",
            id="verdict",
        ),
    ],
)
def test_a_damaged_ab_json_is_one_line_naming_the_field(edit: Any, message: str, tmp_path: Path) -> None:
    rejudged(H200.parent / "gpu-h200-2026-12-02b" / "ab" / "ab.json", tmp_path)
    doc = json.loads((tmp_path / "ab.json").read_text())
    edit(doc)
    (tmp_path / "ab.json").write_text(json.dumps(doc))
    with pytest.raises(BadInput) as got:
        read_ab(tmp_path / "ab.json")
    assert message in got.value.message and str(tmp_path / "ab.json") in got.value.message


def test_an_aa_run_of_one_round_gives_no_floor_and_cannot_be_reused(tmp_path: Path) -> None:
    """The H200 ab of 2026-12-02 ran 1 round before its guard (base, eager and the A/A side): it measured no
    floor, so its own verdicts use the default margin, and reusing it as a stored floor is refused (it once gave
    tune's final a margin of 1%, as if a floor of 0 had been measured)."""
    run = rejudged(H200 / "ab" / "ab.json", tmp_path)
    floors, source = run.floor()
    assert "not measured yet" in source and all(v is None for lv in floors.values() for v in lv.values())
    with pytest.raises(BadInput, match="measured no noise floor"):
        floor.load_noise_floor(str(tmp_path / "ab.json"))


def test_the_h200_ab_of_three_rounds_calls_eager_slower_and_the_aa_its_floor(tmp_path: Path) -> None:
    """The second H200 ab of 2026-12-02 (3 rounds, base / eager / base-again), re-judged from its recorded rounds:
    eager slower outside the A/A's floor at both levels; the A/A never better or worse, and its line says it is
    the floor, not "about 1 more round would decide" (its own interval is the margin: no round count decides)."""
    fixture = H200.parent / "gpu-h200-2026-12-02b" / "ab" / "ab.json"
    recorded = json.loads(fixture.read_text())
    got = rejudged(fixture, tmp_path).verdicts()
    for c in ("1", "64"):
        eager, aa = got["eager"][c]["output_tok_s"], got["base-again"][c]["output_tok_s"]
        text, aa_text = sentence(eager, "eager"), sentence(aa, "base-again")
        assert eager["kind"] == "worse" and "outside the noise" in text, text
        assert aa["kind"] == "noise" and aa["more_rounds"] is None
        assert "sets this run's noise floor" in aa_text and "more round" not in aa_text, aa_text
        assert text == recorded["verdicts"]["eager"][c]["output_tok_s"]["text"]  # the run's own verdict then


def test_a_stored_floor_missing_a_metric_leaves_it_at_the_default_margin(tmp_path: Path) -> None:
    pair = (Side("base", "cpu"), Side("b", "cpu"))
    cfg = AbConfig(model="m", sides=pair, workload=Workload(concurrency=(1, 64)),
                   noise_floor={1: {"output_tok_s": 0.02}}, noise_floor_source="stored")  # fmt: skip
    floors, _ = AbRun(cfg, tmp_path, "co-resident", "test").floor()
    assert floors[1]["output_tok_s"] == 0.02 and floors[64]["output_tok_s"] == 0.02  # the widest measured
    assert floors[1]["tpot_ms"] is None and floors[64]["ttft_ms"] is None  # never measured: not a floor of 0


def test_tune_hands_a_stored_noise_floor_to_its_final_ab(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    cfg = tune.TuneConfig(model="m", noise_floor={64: {"output_tok_s": 0.02}}, noise_floor_source="ab.json")
    made = tune._ab_config(cfg, (Side("base", "cpu"),), 3)
    assert made.noise_floor == {64: {"output_tok_s": 0.02}} and made.noise_floor_source == "ab.json"
    assert cfg.digest() != tune.TuneConfig(model="m").digest()  # a resumed run must use the same floor
    code = main(["tune", "--model", str(tmp_path), "--out", str(tmp_path / "o"), "--noise-floor", "7"])
    err = capsys.readouterr().err
    assert code == 2 and "not a fraction" in err and "Traceback" not in err
    assert not (tmp_path / "o").exists()


def test_a_tuned_profile_goes_stale_when_the_stack_changes(tmp_path: Path) -> None:
    path = tmp_path / "t.toml"
    path.write_text(
        'schema = 1\n[vllm]\nmax_num_seqs = 8\n[tuned]\nrevalidate = "nemolaunch ab --a cpu --b t.toml"\n'
        '[tuned.stack]\ngpu = "NVIDIA H200"\ndriver = "580.159.04"\ncuda = "13.0"\nvllm = "0.26.0"\n'
        'flashinfer = "0.6.14"\ntorch = "2.11.0"\n'
    )
    profile = load_profile(str(path))
    now = {"gpu": "NVIDIA H200", "driver": "580.159.04", "cuda": "13.0", "vllm": "0.26.0", "flashinfer": "0.6.14"}
    assert stale(profile, {**now, "torch": "2.11.0"}) is None
    warning = stale(profile, {**now, "torch": "2.12.0"})
    assert warning is not None
    assert "torch 2.11.0 -> 2.12.0" in warning and warning.endswith("nemolaunch ab --a cpu --b t.toml")


def test_probe_candidates_from_the_recorded_h200_probe() -> None:
    from launcher.ab.candidates import probe_candidates
    from launcher.profiles.write import load_evidence

    fixture = FIXTURES / "probe" / "h200-vllm026-harness-2026-11-30.json"
    probe = load_evidence([fixture])["probe"]
    found, _ = probe_candidates(probe, fixture)
    by_name = {c.name: c for c in found}
    # torch per-tensor came within the margin of CUTLASS, vLLM's SM90 choice: a close call worth an ab
    torch = by_name["fp8_dense:PerTensorTorchFP8ScaledMMLinearKernel"]
    assert torch.overrides == {"disabled_kernels": ["CutlassFP8ScaledMMLinearKernel"]}
    # FlashInfer FP8 needs SM100: vLLM cannot be steered to it, so it is no candidate
    assert not any("FlashInferFP8" in name for name in by_name)


class FakePool:
    """Stands in for ServerPool: every side is the fake OpenAI server (no engine), 'started' once per run."""

    mode = "restart"

    def __init__(self, url: str) -> None:
        self.url = url
        self.started: list[str] = []

    def preflight(self, sides: Any) -> None:
        pass

    def ensure(self, side: Side) -> tuple[Up, bool]:
        fresh = side.name not in self.started
        self.started.append(side.name)
        info = {"argv": ["vllm", "--load-format", "dummy"], "profile": side.profile_ref}
        return Up(self.url, "fake", 0.1, info), fresh

    def release(self, name: str) -> None:
        pass

    def close(self) -> None:
        pass


def test_a_rerun_with_the_same_out_continues_the_run(tmp_path: Path) -> None:
    from tests.fake_server import serving
    from tests.helpers import free_port

    pair = (Side("A", "cpu"), Side("B", "cpu", {"max_num_seqs": 8}))
    cfg = AbConfig("m", pair, Workload((2,), input_len=8, output_len=4, num_prompts=8), rounds=1, mode="restart")
    out = tmp_path / "run"
    with serving(free_port()) as url:
        first = ab.run_ab(cfg, out, lambda m: None, FakePool(url))  # type: ignore[arg-type]
        assert first.code == 0 and len(first.doc["rounds"]) == 1
        kept = first.doc["rounds"][0]
        # an interrupted second round left a pass folder behind: the rerun must not overwrite it
        stale_pass = out / "passes" / "r2-1-B"
        stale_pass.mkdir(parents=True)
        more = ab.run_ab(dataclasses.replace(cfg, rounds=2), out, lambda m: None, FakePool(url))  # type: ignore[arg-type]
        assert more.code == 0 and len(more.doc["rounds"]) == 2
        assert more.doc["rounds"][0] == kept
        assert more.doc["rounds"][1]["passes"][0]["folder"] == "passes/r2-1-B-2"
        assert not any(stale_pass.iterdir())
        with pytest.raises(BadInput, match="complete ab run of 2"):
            ab.run_ab(dataclasses.replace(cfg, rounds=2), out, lambda m: None, FakePool(url))  # type: ignore[arg-type]
        with pytest.raises(BadInput, match="other settings"):
            other = dataclasses.replace(cfg, rounds=3, workload=Workload((2,), 9, 4, 8))
            ab.run_ab(other, out, lambda m: None, FakePool(url))  # type: ignore[arg-type]


def test_ab_sends_the_servers_api_key(tmp_path: Path) -> None:
    """A side whose profile gives vLLM a key: ab's greedy-answer requests carry it (bench's passes get it through
    BenchConfig.api_key). Without it the server answers 401."""
    import urllib.error

    from launcher.ab.answers import greedy_answers
    from tests.fake_server import API_KEY, serving
    from tests.helpers import free_port

    with serving(free_port(), fault="auth") as url:
        with pytest.raises(urllib.error.HTTPError) as refused:
            greedy_answers(url, "m")
        assert refused.value.code == 401
        try:
            greedy_answers(url, "m", API_KEY)
        except urllib.error.HTTPError as e:  # the fake streams SSE, so what comes back is no JSON, but not a 401
            assert e.code != 401
        except ValueError:
            pass
        assert url.state["served"] >= 1  # the keyed request reached the completions handler
