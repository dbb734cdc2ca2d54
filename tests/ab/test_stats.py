"""The verdict logic of `nemolaunch ab` on samples with known differences and known noise."""

from __future__ import annotations

import math
import random

import pytest

from launcher.ab import stats as abstats
from launcher.ab.report import sentence


def lognormal_ratios(true_ratio: float, sd: float, n: int, seed: int) -> list[float]:
    rng = random.Random(seed)
    return [math.exp(rng.gauss(math.log(true_ratio), sd)) for _ in range(n)]


@pytest.mark.parametrize(
    ("true_ratio", "sd", "n", "kind"),
    [
        pytest.param(1.25, 0.02, 4, "better", id="25pct-faster-2pct-noise"),
        pytest.param(0.80, 0.02, 4, "worse", id="20pct-slower"),
        pytest.param(1.0, 0.003, 8, "equivalent", id="same-low-noise"),
    ],
)
def test_known_differences_get_their_verdict(true_ratio: float, sd: float, n: int, kind: str) -> None:
    v = abstats.verdict("output_tok_s", lognormal_ratios(true_ratio, sd, n, seed=1), margin=0.02)
    assert v["kind"] == kind, sentence(v, "B")


def test_faster_text_names_size_interval_and_margin() -> None:
    v = abstats.verdict("output_tok_s", [1.20, 1.22, 1.21, 1.19], margin=0.02)
    assert v["kind"] == "better"
    assert sentence(v, "B").startswith("B faster by 20.5% [+")
    assert sentence(v, "B").endswith("outside the noise (+-2.0%)")
    assert v["lo"] is not None and v["mean"] is not None and v["hi"] is not None
    assert 1.18 < v["lo"] < v["mean"] < v["hi"] < 1.23
    assert v["ratios"] == [1.2, 1.22, 1.21, 1.19] and v["n"] == 4


def test_lower_latency_is_better() -> None:
    v = abstats.verdict("tpot_ms", [0.5, 0.52, 0.49], margin=0.02)
    assert v["kind"] == "better" and sentence(v, "B").startswith("B lower by")


def test_small_noisy_difference_is_inconclusive_with_a_round_estimate() -> None:
    v = abstats.verdict("output_tok_s", [1.06, 1.01, 1.09], margin=0.02)
    assert v["kind"] == "inconclusive"
    more = v["more_rounds"]
    assert more is not None and 1 <= more <= 30
    assert f"about {more} more round(s) would decide" in sentence(v, "B")
    # more rounds with the same spread do decide, roughly when predicted
    iv = abstats.interval([1.06, 1.01, 1.09])
    assert iv is not None
    need = abstats.rounds_to_decide(iv, 0.02)
    assert need is not None
    longer = [1.06, 1.01, 1.09] * math.ceil(need / 3 + 1)
    assert abstats.verdict("output_tok_s", longer, margin=0.02)["kind"] == "better"


def test_a_single_round_is_insufficient() -> None:
    assert abstats.verdict("output_tok_s", [1.5], margin=0.02)["kind"] == "insufficient"


def test_recorded_h200_single_pass_pairs_cannot_rank_cutlass_and_torch() -> None:
    # ../shared/gpu/README.md, H200, vLLM 0.26, c=64 output tok/s: torch-first 19706 (torch) / 16057 (cutlass),
    # cutlass-first 18436 / 19590: the two orders disagree, so the ratio torch/cutlass has no verdict
    ratios = [19706 / 16057, 18436 / 19590]
    v = abstats.verdict("output_tok_s", ratios, margin=0.03)
    assert v["kind"] == "inconclusive"
    assert v["lo"] is not None and v["hi"] is not None and v["lo"] < 1 < v["hi"]


def test_aa_runs_never_say_faster_once_the_floor_is_calibrated() -> None:
    # 300 A/A experiments with 3% per-round noise: each is judged against the floor of its own calibration run
    false_calls = 0
    for seed in range(300):
        floor = abstats.noise_floor(lognormal_ratios(1.0, 0.03, 4, seed=10_000 + seed))
        v = abstats.verdict("output_tok_s", lognormal_ratios(1.0, 0.03, 4, seed=seed), abstats.margin_for(floor))
        false_calls += v["kind"] in ("better", "worse")
    assert false_calls <= 3  # well under 1%: the interval must clear the A/A floor, not only 1.0


def test_without_the_floor_the_same_aa_noise_would_fool_a_plain_interval() -> None:
    # the reason for the floor: at the minimum margin alone, some A/A runs do look "faster"
    calls = sum(
        abstats.verdict("output_tok_s", lognormal_ratios(1.0, 0.03, 4, seed=s), abstats.MIN_MARGIN)["kind"] == "better"
        for s in range(300)
    )
    assert calls >= 1


def test_noise_floor_and_margin() -> None:
    assert abstats.noise_floor([1.0]) is None
    floor = abstats.noise_floor([1.01, 0.99, 1.02, 0.98])
    assert floor is not None and 0.02 < floor < 0.06
    assert abstats.margin_for(None) == abstats.DEFAULT_MARGIN
    assert abstats.margin_for(0.001) == abstats.MIN_MARGIN
    assert abstats.margin_for(floor) == floor


def test_identical_ratios_give_a_point_interval() -> None:
    iv = abstats.interval([1.1, 1.1, 1.1])
    assert iv is not None and iv.lo == pytest.approx(1.1) and iv.hi == pytest.approx(1.1)


def test_a_wide_noise_floor_never_says_equivalent_but_still_finds_a_big_difference() -> None:
    # the CPU rehearsal's A/A floor was +-131%: a +12.6% mean inside it is not "equivalent", it is unknown
    wide = abstats.verdict("output_tok_s", [1.05, 1.20, 1.13], margin=1.31)
    assert wide["kind"] == "inconclusive"
    assert sentence(wide, "B").startswith("too noisy to call equivalent: the noise floor is")
    assert abstats.verdict("output_tok_s", [5.0, 5.3, 4.8], margin=0.5)["kind"] == "better"
    assert abstats.verdict("output_tok_s", [1.001, 0.999, 1.0], margin=0.09)["kind"] == "equivalent"
