"""Tests of pytest_specdec.stats: median CI, MAD sigma, and the one-sided worse test (hand-computed values)."""

from __future__ import annotations

import math

import pytest

from pytest_specdec.stats import Summary, WorseTest, mad_sigma, summarize, worse_test


def test_summarize_five_repeats_order_statistic_interval() -> None:
    # n = 5: [min, max] covers the median with 1 - 2/32 = 0.9375 (< 95 %, the widest available).
    s = summarize([103, 98, 100, None, 101, 100])
    assert s == Summary(n=5, median=100.0, ci_low=98.0, ci_high=103.0, coverage=0.9375, sigma=1.4826)


def test_summarize_twenty_repeats_reaches_95_percent() -> None:
    # n = 20: k = 6 -> [x(6), x(15)], coverage 1 - 2 * P(Binom(20, 1/2) <= 5) = 0.9586...
    s = summarize(list(range(20)))
    assert s is not None
    assert (s.ci_low, s.ci_high, s.median) == (5.0, 14.0, 9.5)
    assert s.coverage == pytest.approx(1 - 2 * sum(math.comb(20, i) for i in range(6)) / 2**20)


def test_summarize_single_and_empty() -> None:
    assert summarize([7.0]) == Summary(n=1, median=7.0, ci_low=7.0, ci_high=7.0, coverage=0.0, sigma=0.0)
    assert summarize([None, float("nan")]) is None


def test_mad_sigma() -> None:
    assert mad_sigma([98, 100, 101, 103, 100]) == pytest.approx(1.4826)
    assert mad_sigma([2.0, 2.0, 2.0]) == 0.0
    assert mad_sigma([5.0]) == 0.0


def test_one_repeat_falls_back_to_tolerance_only() -> None:
    assert worse_test([100.0], [50.0, 51.0], higher_is_better=True) == WorseTest("tolerance only", True, None)


def test_exact_mann_whitney_complete_separation_five_vs_five() -> None:
    result = worse_test([100, 101, 99, 100, 102], [90, 91, 89, 90, 92], higher_is_better=True)
    assert result.method == "mann-whitney exact"
    assert result.significant
    assert result.p_value == pytest.approx(1 / 252)
    assert result.describe() == "p=0.00397"


def test_direction_lower_is_better() -> None:
    faster = worse_test([50, 51, 52], [45, 46, 44], higher_is_better=False)
    slower = worse_test([50, 51, 52], [55, 56, 54], higher_is_better=False)
    assert (faster.significant, faster.p_value) == (False, 1.0)
    assert (slower.significant, slower.p_value) == (True, pytest.approx(1 / 20))


def test_zero_variance_constant_shift_is_significant() -> None:
    shifted = worse_test([2.0] * 5, [1.8] * 5, higher_is_better=True)
    same = worse_test([2.0] * 5, [2.0] * 5, higher_is_better=True)
    assert (shifted.significant, shifted.p_value) == (True, pytest.approx(1 / 252))
    assert (same.significant, same.p_value) == (False, 1.0)


def test_two_repeats_use_seeded_bootstrap() -> None:
    # U cannot reach 0.05 with 2 vs 2 (smallest p = 1/6): bootstrap of the median difference instead.
    assert worse_test([2.0, 2.0], [1.8, 1.8], higher_is_better=True) == WorseTest("bootstrap median", True, None)
    assert worse_test([100, 104], [101, 97], higher_is_better=True) == WorseTest("bootstrap median", False, None)


def test_overlap_is_not_significant() -> None:
    result = worse_test([100, 95, 103, 98, 101], [97, 102, 94, 99, 100], higher_is_better=True)
    assert result.method == "mann-whitney exact"
    assert not result.significant


def test_normal_approximation_for_many_repeats() -> None:
    base = list(range(30))
    worse = worse_test(base, [x - 10 for x in base], higher_is_better=True)
    better = worse_test(base, [x + 10 for x in base], higher_is_better=True)
    assert worse.method == "mann-whitney normal"
    assert worse.significant and worse.p_value is not None and worse.p_value < 0.001
    assert not better.significant
