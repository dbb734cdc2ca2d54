"""The stopping rule's error rates on simulated ab runs whose noise is drawn from recorded A/A runs (H200 and the
CPU engine): with looks after every round, a wrong "better" or "worse" stays under 5% where an unadjusted interval
at every look would not. Fixed seeds: the numbers are the same on every run, and the sequence counts make the
bound's margin several standard errors wide (benchmarks/ab_error_rates.py prints the full table)."""

from __future__ import annotations

import math

import pytest

from benchmarks.ab_error_rates import rates, recorded_spreads

RUNS = 2000  # a 5% rate has a standard error of 0.5% at this count
ROUNDS = 8


@pytest.mark.parametrize("name", list(recorded_spreads()))
def test_nothing_differs_and_the_rule_says_so_at_least_95_percent_of_the_time(name: str) -> None:
    sd = recorded_spreads()[name]
    pure = rates(sd, 0.0, RUNS, ROUNDS, threshold=1e-9, seed=7)  # a threshold of 0: only the rule's own 5% guards
    assert pure["better"] + pure["worse"] <= 0.05, pure
    default = rates(sd, 0.0, RUNS, ROUNDS, threshold=0.02, seed=7)
    assert default["better"] + default["worse"] <= 0.025, default


def test_looking_after_every_round_without_the_correction_would_not_hold_5_percent() -> None:
    """The reason for Pocock's level: at the H200's c=1 noise, an unadjusted 95% interval at each of 7 looks calls a
    difference where there is none well over 5% of the time."""
    sd = recorded_spreads()["H200 c=1, 1-12 s whole passes (2026-12-02)"]
    naive = rates(sd, 0.0, RUNS, ROUNDS, threshold=1e-9, seed=7, pocock=False)
    assert naive["better"] + naive["worse"] > 0.07, naive


def test_a_five_percent_change_at_the_h200_noise_is_found() -> None:
    """Issue 26's target: at a per-round spread of 1.5%, a real +5% is called "better" (beyond the 2% threshold)
    almost always, in a handful of rounds."""
    found = rates(0.015, math.log(1.05), RUNS, ROUNDS, threshold=0.02, seed=7)
    assert found["better"] >= 0.9 and found["median_rounds"] <= 4, found
