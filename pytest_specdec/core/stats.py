"""Noise statistics over repeats: median, a confidence interval, and a one-sided "current is worse" test.

A regression needs two things (as asv ``asv/commands/compare.py`` with ``asv/_stats.py`` does: a ratio beyond
``--factor`` *and* a significant difference): the median shift is beyond the tolerance (``compare.py``) and the
per-repeat values say the shift is not noise (:func:`worse_test` here). Pure numpy; scipy is not needed.

Which test, by the number of repeats ``n_b`` (baseline) and ``n_c`` (current):

- the exact one-sided Mann–Whitney U test can reach ``alpha`` (smallest p = 1 / C(n_b + n_c, n_b) <= alpha, e.g.
  3 vs 3 repeats: 0.05; 2 vs 5: 0.048; 5 vs 5: 0.004): Mann–Whitney U, exact permutation distribution of U (ties
  count 1/2) when C(n_b + n_c, n_b) <= ``EXACT_LIMIT``, else the normal approximation with tie correction
  (Mann & Whitney 1947; tie correction as in scipy ``stats.mannwhitneyu(method="asymptotic")``). Under no change
  its false-positive rate is at most ``alpha`` (exact: by construction; ``tests/test_stats.py`` checks it).
- otherwise, "tolerance only", and the reason says why: one repeat on a side shows no spread; with 2 vs 2, 2 vs 3
  or 2 vs 4 repeats even complete separation has p >= 1/15 > 0.05, so no test can hold its stated 5 %. (A
  bootstrap of the median difference was used here before: it called complete separation significant and fired
  16 % of the time at 2 vs 2 and 7.7 % at 2 vs 3 under no change.) The tolerance alone decides; use >= 3 repeats
  on both sides for a significance test.

Zero variance (identical repeats, e.g. accept length at temperature 0): U is extremal when every current value is
worse than every baseline value, so a constant shift is significant (p = 1 / C(n_b + n_c, n_b)). Identical
constants give p = 1 (no shift).
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

__all__ = [
    "ALPHA",
    "EXACT_LIMIT",
    "Summary",
    "WorseTest",
    "geometric_mean",
    "mad_sigma",
    "repeat_summary",
    "worse_test",
]

#: One-sided significance level of :func:`worse_test`.
ALPHA = 0.05
#: Largest number of group splits C(n_b + n_c, n_b) enumerated for the exact U distribution (C(16, 8) = 12870).
EXACT_LIMIT = 20_000
#: Scale from the median absolute deviation to a normal sigma: 1 / Phi^-1(3/4) (Rousseeuw & Croux 1993).
MAD_TO_SIGMA = 1.4826


@dataclass(frozen=True, slots=True)
class Summary:
    """Median of repeats and a distribution-free confidence interval for it.

    The interval is the order-statistic interval ``[x(k), x(n+1-k)]`` with the largest ``k`` whose binomial
    coverage ``1 - 2 * P(Binom(n, 1/2) < k)`` is at least ``confidence`` (Conover, *Practical Nonparametric
    Statistics*, 3rd ed., §3.2). When even ``[min, max]`` cannot reach it (n <= 5 at 95 %), the interval is
    ``[min, max]`` and ``coverage`` says what it achieves (n = 5: 0.9375; n = 1: 0, a point).
    """

    n: int
    median: float
    ci_low: float
    ci_high: float
    coverage: float
    #: MAD-based sigma (:func:`mad_sigma`), in the metric's unit; 0 for n = 1 or identical values.
    sigma: float


@dataclass(frozen=True, slots=True)
class WorseTest:
    """Outcome of :func:`worse_test`. ``p_value`` is None for "tolerance only"; ``reason`` says why no test ran."""

    #: "tolerance only" | "mann-whitney exact" | "mann-whitney normal"
    method: str
    significant: bool
    p_value: float | None
    #: Why the method is "tolerance only", e.g. "2 vs 2 repeats: smallest possible p 0.167 > 0.05"; else "".
    reason: str = ""

    def describe(self) -> str:
        """``p=0.004``, or ``tolerance only, <reason>``, for a table cell."""
        if self.p_value is not None:
            return f"p={self.p_value:.3g}"
        return f"{self.method}, {self.reason}" if self.reason else self.method


def _clean(values: Sequence[float | None]) -> np.ndarray:
    return np.asarray([float(v) for v in values if v is not None and math.isfinite(float(v))], dtype=float)


def mad_sigma(values: Sequence[float | None]) -> float:
    """``1.4826 * median(|x - median(x)|)``: a robust sigma; 0 for fewer than 2 values.

    Example: [98, 100, 101, 103, 100] -> median 100, |dev| [2, 0, 1, 3, 0] -> MAD 1 -> sigma 1.4826.
    """
    arr = _clean(values)
    if arr.size < 2:
        return 0.0
    return float(MAD_TO_SIGMA * np.median(np.abs(arr - np.median(arr))))


def repeat_summary(values: Sequence[float | None], confidence: float = 0.95) -> Summary | None:
    """Median, order-statistic CI and MAD sigma of the per-repeat values (None and NaN skipped).

    :returns: None when no value is left.
    """
    arr = np.sort(_clean(values))
    n = int(arr.size)
    if n == 0:
        return None
    median = float(np.median(arr))
    best_k, coverage = 1, 0.0
    for k in range(1, n // 2 + 1):
        # P(Binom(n, 1/2) < k) = sum_{i < k} C(n, i) / 2^n
        tail = sum(math.comb(n, i) for i in range(k)) / 2**n
        cov = 1.0 - 2.0 * tail
        if k == 1 or cov >= confidence:
            best_k, coverage = k, cov
        if cov < confidence:
            break
    lo, hi = float(arr[best_k - 1]), float(arr[n - best_k])
    return Summary(
        n=n, median=median, ci_low=lo, ci_high=hi, coverage=max(coverage, 0.0), sigma=mad_sigma(arr.tolist())
    )


def _midranks(values: np.ndarray) -> np.ndarray:
    """Ranks 1..n, tied values sharing the mean of their ranks."""
    order = np.argsort(values, kind="mergesort")
    ranks = np.empty(values.size, dtype=float)
    sorted_vals = values[order]
    i = 0
    while i < values.size:
        j = i
        while j + 1 < values.size and sorted_vals[j + 1] == sorted_vals[i]:
            j += 1
        ranks[order[i : j + 1]] = (i + j) / 2.0 + 1.0
        i = j + 1
    return ranks


def _mwu_p_lower(current: np.ndarray, base: np.ndarray) -> tuple[float, str]:
    """One-sided p for H1 "current is stochastically smaller than base" (Mann–Whitney U).

    U_c = R_c - n_c (n_c + 1) / 2 = #pairs (c > b) + 1/2 #ties, with R_c the midrank sum of ``current``;
    small U_c supports H1. p = P(U_c <= observed) under H0 (every split of the pooled values equally likely).
    """
    n_c, n_b = current.size, base.size
    n = n_c + n_b
    ranks = _midranks(np.concatenate([current, base]))
    observed = float(ranks[:n_c].sum())
    total = math.comb(n, n_c)
    if total <= EXACT_LIMIT:
        rank_list = ranks.tolist()
        at_most = sum(1 for combo in itertools.combinations(rank_list, n_c) if sum(combo) <= observed + 1e-9)
        return at_most / total, "mann-whitney exact"
    u = observed - n_c * (n_c + 1) / 2.0
    mean_u = n_c * n_b / 2.0
    _, counts = np.unique(ranks, return_counts=True)
    tie_term = float((counts**3 - counts).sum()) / (n * (n - 1))
    var_u = n_c * n_b / 12.0 * ((n + 1) - tie_term)
    if var_u <= 0:
        return 1.0, "mann-whitney normal"
    z = (u - mean_u + 0.5) / math.sqrt(var_u)  # continuity correction toward H0
    return 0.5 * math.erfc(-z / math.sqrt(2.0)), "mann-whitney normal"


def worse_test(
    baseline: Sequence[float | None],
    current: Sequence[float | None],
    *,
    higher_is_better: bool,
    alpha: float = ALPHA,
) -> WorseTest:
    """Is ``current`` significantly worse than ``baseline`` over their per-repeat values? (one-sided)

    "Worse" is smaller for a higher-is-better metric (tok/s, accept length), larger otherwise (TTFT, ITL, TPOT).
    The method is chosen by the number of repeats; see the module docstring.

    :param baseline: per-repeat values of the stored baseline (None/NaN skipped).
    :param current: per-repeat values of the current run.
    :returns: method, whether significant at ``alpha``, and the p-value when the method has one.
    """
    base = _clean(baseline)
    cur = _clean(current)
    if not higher_is_better:
        base, cur = -base, -cur
    sizes = f"{base.size} vs {cur.size} repeats"
    if min(base.size, cur.size) < 2:
        return WorseTest("tolerance only", True, None, f"{sizes}: one value shows no spread")
    smallest_p = 1.0 / math.comb(base.size + cur.size, cur.size)
    if smallest_p > alpha:
        return WorseTest("tolerance only", True, None, f"{sizes}: smallest possible p {smallest_p:.3g} > {alpha:g}")
    p, method = _mwu_p_lower(cur, base)
    return WorseTest(method, p <= alpha, p)


@dataclass(frozen=True, slots=True)
class BelowTest:
    """Outcome of :func:`below_test`: is the true median of paired ratios below a floor?"""

    #: "wilcoxon exact" | "wilcoxon normal" | "tolerance only" (fewer than 2 non-tied pairs)
    method: str
    significant: bool
    p_value: float | None


def below_test(ratios: Sequence[float | None], floor: float, *, alpha: float = ALPHA) -> BelowTest:
    """One-sided Wilcoxon signed-rank test of H1 "the median paired ratio is below ``floor``" on
    ``d_i = log(ratio_i) - log(floor)`` (Wilcoxon 1945; exact null distribution by enumerating the 2^n sign
    patterns for n <= 16, else the normal approximation with tie correction, as scipy ``stats.wilcoxon``).

    Pairs with ``d_i = 0`` are dropped (Wilcoxon's convention). ``W+`` = sum of the midranks of ``|d_i|`` over the
    positive ``d_i``; small ``W+`` supports H1; p = P(W+ <= observed | H0).

    Example: ratios [0.95, 0.97, 0.96, 0.94, 0.98, 0.99] vs floor 1.05: all below, W+ = 0, p = 1/64 = 0.016.

    :param ratios: one target/reference throughput ratio per pair of phases measured close in time.
    :param floor: the ratio the target must reach (``min_speedup.ratio``), > 0.
    :returns: method, whether significant at ``alpha``, and p (None for "tolerance only").
    """
    arr = _clean(ratios)
    arr = arr[arr > 0]
    diffs = np.log(arr) - math.log(floor)
    diffs = diffs[diffs != 0.0]
    n = int(diffs.size)
    if n < 2:
        return BelowTest("tolerance only", True, None)
    ranks = _midranks(np.abs(diffs))
    observed = float(ranks[diffs > 0].sum())
    if n <= 16:
        rank_list = ranks.tolist()
        at_most = 0
        for signs in itertools.product((0, 1), repeat=n):
            if sum(r for r, s in zip(rank_list, signs, strict=True) if s) <= observed + 1e-9:
                at_most += 1
        p = at_most / 2**n
        return BelowTest("wilcoxon exact", p <= alpha, p)
    mean_w = n * (n + 1) / 4.0
    _, counts = np.unique(ranks, return_counts=True)
    var_w = n * (n + 1) * (2 * n + 1) / 24.0 - float((counts**3 - counts).sum()) / 48.0
    z = (observed - mean_w + 0.5) / math.sqrt(var_w)
    p = 0.5 * math.erfc(-z / math.sqrt(2.0))
    return BelowTest("wilcoxon normal", p <= alpha, p)


def pooled_sd(*groups: Sequence[float | None], log: bool = False) -> float:
    """The pooled standard deviation of several groups about their own means (Student's pooled variance, ``n - 1``
    per group): the repeat spread of a baseline and a current run, a shift between them not counted as spread. On
    the logs with ``log`` (a relative spread; groups with a value <= 0 are skipped). 0 with no group of 2 values.

    Example: [98, 100, 102] and [88, 90, 92] -> squared deviations 8 + 8 over 4 degrees of freedom -> 2.0. A MAD
    over so few values read 0 when two repeats coincided (151.5, 154.2, 154.2 tok/s: sd 1.0%, shown as σ 0.0%).
    """
    squares, df = 0.0, 0
    for group in groups:
        arr = _clean(group)
        if log:
            if not arr.size or np.any(arr <= 0):
                continue
            arr = np.log(arr)
        if arr.size >= 2:
            squares += float(((arr - arr.mean()) ** 2).sum())
            df += int(arr.size) - 1
    return math.sqrt(squares / df) if df else 0.0


def geometric_mean(values: Sequence[float]) -> float | None:
    """exp(mean(log v)) over the positive ``values`` (None without one): how ratios (speedups, a compare row's ``x``
    estimate) and throughputs average, on the log scale their verdicts are judged on (``judge.sequential``)."""
    s = [v for v in values if v > 0]
    return math.exp(sum(math.log(v) for v in s) / len(s)) if s else None
