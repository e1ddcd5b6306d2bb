"""Distribution-free confidence bounds for a tail percentile and for a share, from binomial order statistics: the
evidence behind a tail verdict (``judge.tails``) when the latencies are measured (``measure.metrics``).

Percentile. For n independent values and the p-quantile q, the count of values <= q is Binomial(n, p), so the k-th
smallest value ``x_(k)`` lies below q with probability P(Bin(n, p) >= k). The lower bound at confidence c is
``x_(l)`` for the largest l with P(Bin(n, p) >= l) >= c, the upper bound ``x_(u)`` for the smallest u with
P(Bin(n, p) <= u - 1) >= c (the order-statistics interval of a quantile; Hahn & Meeker, *Statistical Intervals*,
section 5.2). A bound whose rank falls outside 1..n does not exist: n values cannot show it. The upper bound of p99
exists from n = 459 at c = 0.99 (0.99^459 < 0.01), the count MLPerf Inference's LoadGen needs to claim a p99 with no
value over it (``loadgen/early_stopping.cc``, a binomial bound on the count of values above the ceiling; the two
criteria are one test: ``x_(u) <= C`` exactly when at most ``n - u`` values exceed C).

Share. The Clopper-Pearson bounds of a binomial proportion k / n (beta quantiles), one-sided at confidence c.

scipy's ``binom`` and ``beta`` do the arithmetic.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

__all__ = ["TAIL_CONFIDENCE", "QuantileBounds", "min_samples", "quantile_bounds", "quantile_ranks", "share_bounds"]


#: The one-sided confidence of every tail verdict's bounds (MLPerf LoadGen's early stopping uses 99 % too): a
#: ceiling passes when the upper bound is under it, fails when the lower bound is over it.
TAIL_CONFIDENCE = 0.99


def quantile_ranks(n: int, p: float, confidence: float) -> tuple[int | None, int | None]:
    """The 1-based ranks of the order statistics that bound the ``p``-quantile of ``n`` values from below and from
    above, each one-sided at ``confidence``; None where ``n`` values cannot give that bound.

    Worked example: n = 48, p = 0.9, c = 0.99: upper rank 48 (P(Bin(48, 0.9) <= 47) = 1 - 0.9^48 = 0.9937 >= 0.99),
    lower rank 38; n = 48, p = 0.99: upper None (it needs n >= 459), lower 45.

    :raises ValueError: ``n < 0``, ``p`` or ``confidence`` outside (0, 1).
    """
    from scipy.stats import binom

    if n < 0 or not 0 < p < 1 or not 0 < confidence < 1:
        raise ValueError(f"quantile_ranks: need n >= 0 and p, confidence in (0, 1), got {n}, {p}, {confidence}")
    if n == 0:
        return None, None
    # Upper: smallest u with cdf(u - 1) >= c. ppf(c) is the smallest k with cdf(k) >= c, up to rounding: check.
    k = int(binom.ppf(confidence, n, p))
    while k > 0 and binom.cdf(k - 1, n, p) >= confidence:
        k -= 1
    while binom.cdf(k, n, p) < confidence:
        k += 1
    upper = k + 1 if k + 1 <= n else None
    # Lower: largest l with P(Bin >= l) = sf(l - 1) >= c.
    low = int(binom.ppf(1 - confidence, n, p))
    while low < n and binom.sf(low, n, p) >= confidence:
        low += 1
    while low > 0 and binom.sf(low - 1, n, p) < confidence:
        low -= 1
    lower = low if low >= 1 else None
    return lower, upper


def min_samples(p: float, confidence: float) -> int:
    """The fewest values that can bound the ``p``-quantile from above at ``confidence`` (all of them below the
    ceiling): ``ceil(ln(1 - c) / ln(p))``. p99 at 0.99: 459; p95: 90; p90: 44."""
    return math.ceil(math.log(1 - confidence) / math.log(p) - 1e-12)


@dataclass(frozen=True, slots=True)
class QuantileBounds:
    """The ``p``-quantile of ``n`` values: numpy's linear estimate and the order-statistics bounds (None where ``n``
    values cannot show one), in the values' unit."""

    n: int
    estimate: float | None
    low: float | None
    high: float | None


def quantile_bounds(values: Sequence[float], p: float, confidence: float) -> QuantileBounds:
    """:func:`quantile_ranks` applied to ``values`` (any order).

    Worked example: 48 values 1..48, p = 0.9, c = 0.99 -> estimate 43.3 (numpy linear), low 38, high 48.
    """
    import numpy as np

    n = len(values)
    if n == 0:
        return QuantileBounds(0, None, None, None)
    ordered = np.sort(np.asarray(values, dtype=float))
    lower, upper = quantile_ranks(n, p, confidence)
    return QuantileBounds(
        n,
        float(np.percentile(ordered, p * 100)),
        float(ordered[lower - 1]) if lower is not None else None,
        float(ordered[upper - 1]) if upper is not None else None,
    )


def share_bounds(k: int, n: int, confidence: float) -> tuple[float, float]:
    """One-sided Clopper-Pearson bounds of the share ``k / n`` at ``confidence``: (low, high), 0 and 1 at the edges.

    Worked example: 45 of 48 at 0.99 -> (0.806, 0.991).

    :raises ValueError: not ``0 <= k <= n``, ``n >= 1``.
    """
    from scipy.stats import beta

    if n < 1 or not 0 <= k <= n:
        raise ValueError(f"share_bounds: need 0 <= k <= n and n >= 1, got {k}, {n}")
    low = 0.0 if k == 0 else float(beta.ppf(1 - confidence, k, n - k + 1))
    high = 1.0 if k == n else float(beta.ppf(confidence, k + 1, n - k))
    return low, high
