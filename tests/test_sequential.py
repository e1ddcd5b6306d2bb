"""The sequential stopping rule (``pytest_specdec/judge/sequential.py``): error rates under optional stopping, by seeded
simulation (no server), and the decisions on hand-made values."""

from __future__ import annotations

import math

import numpy as np
import pytest

from pytest_specdec.judge.sequential import ALPHA, Design, decide_floor, decide_shift, repeats_needed

SIMULATIONS = 3000


def _stop(values: np.ndarray, floor: float, design: Design) -> tuple[str, int]:
    """Look after every repeat from ``design.start`` on; the first decision, or ``undecided``."""
    for n in range(design.start, design.max_repeats + 1):
        decision = decide_floor(values[:n].tolist(), floor, design)
        if decision.decided:
            return decision.verdict, n
    return "undecided", design.max_repeats


@pytest.mark.parametrize("start, max_repeats", [(2, 10), (3, 12), (2, 20)])
def test_optional_stopping_keeps_false_alarms_at_most_alpha_on_null_data(start: int, max_repeats: int) -> None:
    # The worst null: the true median sits exactly on the floor, so every "below" is a false alarm. Looking after
    # every repeat without a correction would fire far more often than 5% (a 5% test at each of up to 19 looks).
    rng = np.random.default_rng(31)
    design = Design(start, max_repeats)
    floor = 100.0
    below = 0
    for _ in range(SIMULATIONS):
        values = floor * np.exp(0.05 * rng.standard_normal(max_repeats))
        verdict, _ = _stop(values, floor, design)
        below += verdict == "below"
    assert below / SIMULATIONS <= ALPHA


def test_uncorrected_looks_would_inflate_false_alarms() -> None:
    # The check above can fail: the same simulation with alpha spent whole at every look (no Bonferroni split).
    rng = np.random.default_rng(31)
    naive = Design(2, 2)  # one look: its full alpha at every n when reused below
    floor, below, runs = 100.0, 0, 1000
    for _ in range(runs):
        values = floor * np.exp(0.05 * rng.standard_normal(20))
        below += any(decide_floor(values[:n].tolist(), floor, naive).verdict == "below" for n in range(2, 21))
    assert below / runs > 2 * ALPHA


def test_optional_stopping_keeps_false_shifts_at_most_alpha() -> None:
    # Stored compare: the current run is exactly at the limit (5 % slower than the baseline, tolerance 5 %).
    rng = np.random.default_rng(7)
    design = Design(4, 12)
    worse, runs = 0, 1000
    for _ in range(runs):
        base = 100.0 * np.exp(0.03 * rng.standard_normal(3))
        current = 95.0 * np.exp(0.03 * rng.standard_normal(12))
        for n in range(4, 13):
            decision = decide_shift(base.tolist(), current[:n].tolist(), 0.05, design, higher_is_better=True)
            if decision.decided:
                worse += decision.verdict == "worse"
                break
    assert worse / runs <= ALPHA


def test_a_clear_shift_is_detected_early_and_a_small_one_by_the_budget() -> None:
    rng = np.random.default_rng(5)
    design = Design(2, 12)
    clear = [_stop(80.0 * np.exp(0.02 * rng.standard_normal(12)), 100.0, design) for _ in range(500)]
    assert all(verdict == "below" for verdict, _ in clear)
    assert np.mean([n for _, n in clear]) <= 3.0  # 20 % below at 2 % noise: 2-3 repeats, not a fixed 6
    small = [_stop(95.0 * np.exp(0.02 * rng.standard_normal(12)), 100.0, design) for _ in range(500)]
    assert sum(verdict == "below" for verdict, _ in small) >= 0.95 * len(small)
    passing = [_stop(120.0 * np.exp(0.02 * rng.standard_normal(12)), 100.0, design) for _ in range(500)]
    assert all(verdict == "above" for verdict, _ in passing)
    assert np.mean([n for _, n in passing]) <= 3.0


def test_decide_floor_on_hand_made_values() -> None:
    design = Design(3, 10)
    assert design.looks == 8 and design.alpha_per_look == pytest.approx(0.00625)
    above = decide_floor([131, 129, 133], 100, design)
    assert (above.verdict, above.n) == ("above", 3)
    assert above.low == pytest.approx(121.15, abs=0.01) and above.high == pytest.approx(141.63, abs=0.01)
    assert above.interval() == "CI 121.1-141.6 (98.8%)"
    assert decide_floor([101, 104, 98], 100, design).verdict == "open"
    assert decide_floor([80, 81, 79], 100, design).verdict == "below"
    one = decide_floor([120.0], 100, design)
    assert (one.verdict, one.interval()) == ("open", "no interval (1 repeat)")


def test_exact_metrics_decide_on_the_first_repeat() -> None:
    design = Design(1, 10)
    assert decide_floor([2.63], 2.5, design, exact=True).verdict == "above"
    assert decide_floor([2.35], 2.5, design, exact=True).verdict == "below"
    assert decide_floor([2.35, 2.35], 2.5, design).verdict == "below"  # identical repeats: no spread to test


def test_decide_shift_on_hand_made_values() -> None:
    design = Design(3, 10)
    worse = decide_shift([100, 101, 99], [90, 91, 89, 90], 0.05, design, higher_is_better=True)
    assert worse.verdict == "worse" and worse.estimate == pytest.approx(0.900, abs=1e-3)
    within = decide_shift([100, 101, 99], [100, 99, 101, 100], 0.05, design, higher_is_better=True)
    assert within.verdict == "within"
    slower_ttft = decide_shift([50, 51, 49], [60, 61, 59], 0.10, design, higher_is_better=False)
    assert slower_ttft.verdict == "worse"
    assert decide_shift([100], [96.0], 0.05, design, higher_is_better=True).verdict == "open"


def test_budget_and_what_more_would_take() -> None:
    design = Design(2, 6, max_server_s=30.0)
    assert design.may_continue(2, 20.0)  # 2 repeats of 10 s: a third fits in 30 s
    assert not design.may_continue(3, 30.0)
    assert not Design(2, 6).may_continue(6, 0.0)
    assert repeats_needed([101, 104, 98], 100, Design(3, 10)) == 110
    assert repeats_needed([104, 107, 101], 100, Design(3, 10)) == 6
    assert repeats_needed([100, 100.0], 100, Design(3, 10)) is None
    assert math.isnan(decide_floor([], 1.0, design).estimate)
