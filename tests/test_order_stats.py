"""Tests of pytest_specdec.core.order_stats: the order-statistics bounds of a percentile and the share bounds,
checked against their definitions (brute force over the binomial) and the counts MLPerf LoadGen quotes."""

from __future__ import annotations

import pytest
from scipy.stats import binom

from pytest_specdec.core.order_stats import min_samples, quantile_bounds, quantile_ranks, share_bounds


@pytest.mark.parametrize("n", [1, 5, 20, 48, 100, 458, 459, 1000])
@pytest.mark.parametrize("p", [0.5, 0.9, 0.95, 0.99])
def test_ranks_are_the_extreme_ones_that_hold_the_confidence(n: int, p: float) -> None:
    lower, upper = quantile_ranks(n, p, 0.99)
    holds_low = [rank for rank in range(1, n + 1) if binom.sf(rank - 1, n, p) >= 0.99]  # P(x_(l) <= q) >= c
    holds_up = [rank for rank in range(1, n + 1) if binom.cdf(rank - 1, n, p) >= 0.99]  # P(x_(u) >= q) >= c
    assert lower == (max(holds_low) if holds_low else None)
    assert upper == (min(holds_up) if holds_up else None)


def test_p99_needs_459_values_as_loadgen_says() -> None:
    assert quantile_ranks(459, 0.99, 0.99)[1] == 459  # the largest of 459 bounds p99 from above
    assert quantile_ranks(458, 0.99, 0.99)[1] is None
    assert (min_samples(0.99, 0.99), min_samples(0.95, 0.99), min_samples(0.90, 0.99)) == (459, 90, 44)


def test_quantile_bounds_worked_example() -> None:
    b = quantile_bounds([float(v) for v in range(48, 0, -1)], 0.9, 0.99)  # any order
    assert (b.n, b.estimate, b.low, b.high) == (48, pytest.approx(43.3), 38.0, 48.0)
    assert quantile_bounds([], 0.9, 0.99).estimate is None


def test_share_bounds() -> None:
    low, high = share_bounds(45, 48, 0.99)
    assert (round(low, 3), round(high, 3)) == (0.806, 0.991)
    assert share_bounds(0, 10, 0.99)[0] == 0.0 and share_bounds(10, 10, 0.99)[1] == 1.0
    with pytest.raises(ValueError):
        share_bounds(3, 2, 0.99)
