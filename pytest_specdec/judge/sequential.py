"""Sequential verdicts: after every repeat, decide whether a metric is clearly above or below its floor (or a
current run clearly beyond or within a baseline's tolerance), and stop measuring as soon as it is.

The method is a **group-sequential design with Bonferroni (Pocock-type, constant) alpha spending**: the looks are
the repeat counts ``n = start, ..., max_repeats`` fixed before anything is measured, each look spends
``alpha / looks`` on each one-sided test, and by the union bound the chance that *any* look wrongly decides is at
most ``alpha``, however the looks are correlated and wherever the loop stops (Pocock 1977, "Group sequential
methods in the design and analysis of clinical trials", Biometrika 64:191; Jennison & Turnbull 2000, *Group
Sequential Methods with Applications to Clinical Trials*, §2.3 and §3.4 on Bonferroni bounds as a conservative
Pocock; Lan & DeMets 1983 for spending functions). At each look the test is Student's one-sided t-test on the
logarithms of the per-repeat values (a throughput ratio is symmetric on the log scale; Student 1908; quantiles
from ``scipy.stats.t``), for a stored compare Welch's t-test (Welch 1947, Satterthwaite degrees of freedom).

Why not the alternatives the issue named: an exact sign or Wilcoxon test can reach ``alpha / looks`` = 0.005 only
from 8 repeats on (smallest p = 2^-n), so even a 20 % drop would take 8 repeats; always-valid confidence sequences
(Howard, Ramdas, McAuliffe & Sekhon 2021, "Time-uniform, nonparametric, nonasymptotic confidence sequences", Ann.
Statist. 49:1055; the ``confseq`` library) need a known variance bound or bounded observations, which a
throughput does not have, and their quantile sequences (Howard & Ramdas 2022) are sign-based like the above.
A t-test decides a clear case at 2-3 repeats (t at 1 degree of freedom and 0.5 %: 63.7 standard errors).

Assumptions, stated: repeats are independent and roughly log-normal; a drifting load breaks independence, which is
why paired arms (``pairing.py``) are judged on their ratios. ``tests/test_sequential.py`` checks by simulation
that optional stopping after every repeat keeps the false-alarm rate at most ``alpha``.

Exact metrics (accept length or rate at temperature 0 with identical repeats) carry no noise: they decide on the
first repeat, by the value itself.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
from scipy import stats as sps

__all__ = [
    "ALPHA",
    "DEFAULT_MAX_REPEATS",
    "Decision",
    "Design",
    "decide_floor",
    "decide_shift",
    "detail",
    "repeats_needed",
    "shift_repeats_needed",
]

#: Overall one-sided error rate of a sequential verdict (each direction): false alarms and false passes.
ALPHA = 0.05
#: ``workload.max_repeats`` when only ``max_server_s`` is set.
DEFAULT_MAX_REPEATS = 20
#: Largest total a "what more would take" estimate looks for.
_NEEDED_CAP = 1000


@dataclass(frozen=True, slots=True)
class Design:
    """The looks of one sequential verdict: at ``start``, ``start + 1``, ..., ``max_repeats`` repeats.

    ``start`` is the first look (at least 2: one value shows no spread, though an exact metric decides at 1);
    ``max_server_s`` a server-seconds budget that ends the looks early (stopping early never inflates the error
    rate: a look's alpha is fixed in advance). Example: ``Design(3, 10)`` has 8 looks, each one-sided test at
    0.05 / 8 = 0.00625.
    """

    start: int
    max_repeats: int
    alpha: float = ALPHA
    max_server_s: float | None = None

    @property
    def looks(self) -> int:
        """Looks that spend alpha (``max_repeats - max(start, 2) + 1``, at least 1)."""
        return max(1, self.max_repeats - max(self.start, 2) + 1)

    @property
    def alpha_per_look(self) -> float:
        """``alpha / looks``: each look's one-sided level (Bonferroni)."""
        return self.alpha / self.looks

    def may_continue(self, n: int, server_s: float) -> bool:
        """Whether another repeat fits the budget after ``n`` repeats that took ``server_s`` server-seconds
        (the next one is assumed to cost their mean)."""
        if n >= self.max_repeats:
            return False
        if self.max_server_s is None or n == 0:
            return True
        return server_s + server_s / n <= self.max_server_s


@dataclass(frozen=True, slots=True)
class Decision:
    """One look of :func:`decide_floor` / :func:`decide_shift`.

    ``verdict``: ``above`` / ``below`` (the floor), ``worse`` / ``within`` (the limit of a shift), or ``open`` (the
    interval still contains it). ``estimate``, ``low`` and ``high`` are in the metric's unit for a floor (geometric
    mean and its interval) and a ratio current/baseline for a shift; ``low``/``high`` are None when no interval
    exists (fewer than 2 values). ``confidence`` is the interval's two-sided level at this look,
    ``1 - 2 alpha / looks``; ``method`` names the test.
    """

    verdict: str
    n: int
    estimate: float
    low: float | None
    high: float | None
    confidence: float
    method: str

    @property
    def decided(self) -> bool:
        return self.verdict != "open"

    def interval(self) -> str:
        """``CI 97.1-105.4 (99.4%)``, or ``no interval (1 repeat)``."""
        if self.low is None or self.high is None:
            return f"no interval ({self.n} repeat{'s' if self.n != 1 else ''})"
        return f"CI {self.low:.4g}-{self.high:.4g} ({self.confidence:.1%})"


@functools.lru_cache(maxsize=4096)
def _t_quantile(q: float, df: float) -> float:
    """``scipy.stats.t.ppf(q, df)``, cached: a verdict asks for the same few quantiles at every look."""
    return float(sps.t.ppf(q, df))


def _finite(values: Sequence[float | None]) -> np.ndarray:
    return np.asarray([float(v) for v in values if v is not None and math.isfinite(float(v))], dtype=float)


def _log_scale(arr: np.ndarray, *refs: float) -> bool:
    return bool(arr.size) and bool(np.all(arr > 0)) and all(r > 0 for r in refs)


def decide_floor(values: Sequence[float | None], floor: float, design: Design, *, exact: bool = False) -> Decision:
    """Is the metric's true (geometric) mean above or below ``floor``, after these repeats?

    ``below`` when the one-sided t-test at ``design.alpha_per_look`` finds the log mean below ``log(floor)``,
    ``above`` when it finds it above, else ``open``. On the log scale when every value and the floor are positive,
    else on the values themselves. Zero spread (identical repeats) decides by the value; with ``exact`` (an exact
    metric at temperature 0) a single value does too.

    Example: [131, 129, 133] tok/s vs floor 100, ``Design(3, 10)``: log mean 4.875, sd 0.0153, t(2, 0.99375) =
    8.86 -> interval 121.1-141.6 tok/s, ``above`` at the first look.

    :param values: per-repeat values (None/NaN skipped).
    :param floor: the threshold, in the metric's unit.
    :returns: the decision at ``n = len(values)`` (an empty list is ``open`` with estimate NaN).
    """
    arr = _finite(values)
    n = int(arr.size)
    conf = 1.0 - 2.0 * design.alpha_per_look
    if n == 0:
        return Decision("open", 0, math.nan, None, None, conf, "no value")
    log = _log_scale(arr, floor)
    x = np.log(arr) if log else arr
    ref = math.log(floor) if log else floor
    mean = float(x.mean())
    back = math.exp if log else float
    if n == 1 or float(np.ptp(x)) == 0.0:
        if not (exact or n >= 2):
            return Decision("open", n, back(mean), None, None, conf, "t-test (needs 2 repeats)")
        verdict = "above" if mean >= ref else "below"
        return Decision(verdict, n, back(mean), back(mean), back(mean), 1.0, "exact (identical repeats)")
    sd = float(x.std(ddof=1))
    half = _t_quantile(1.0 - design.alpha_per_look, n - 1) * sd / math.sqrt(n)
    low, high = mean - half, mean + half
    verdict = "above" if low > ref else "below" if high < ref else "open"
    method = f"t-test on log values, {design.looks} looks" if log else f"t-test, {design.looks} looks"
    return Decision(verdict, n, back(mean), back(low), back(high), conf, method)


def decide_shift(
    baseline: Sequence[float | None],
    current: Sequence[float | None],
    limit_rel: float,
    design: Design,
    *,
    higher_is_better: bool,
) -> Decision:
    """Is the current run worse than the baseline by more than ``limit_rel``, after these repeats of it?

    The ratio current/baseline of geometric means, by Welch's t-test on log values at ``design.alpha_per_look``:
    ``worse`` when the whole interval is beyond the limit (below ``1 - limit_rel`` for a higher-is-better metric,
    above ``1 + limit_rel`` otherwise), ``within`` when the whole interval is inside it, else ``open``. One
    baseline value borrows the current run's spread (and vice versa); a value <= 0 on either side makes it ``open``.

    Example: baseline [100, 101, 99] tok/s, current [90, 91, 89, 90], limit 5 %: ratio 0.900, interval well
    below 0.95 -> ``worse``.

    :param limit_rel: the allowed relative worsening (``compare``'s tolerance or 3-sigma noise limit), >= 0.
    """
    b, c = _finite(baseline), _finite(current)
    n_c = int(c.size)
    conf = 1.0 - 2.0 * design.alpha_per_look
    if not b.size or not n_c or not _log_scale(np.concatenate([b, c])):
        return Decision("open", n_c, math.nan, None, None, conf, "no value")
    lb, lc = np.log(b), np.log(c)
    diff = float(lc.mean() - lb.mean())
    # Worsening on the log scale, and the limit it must pass: higher-is-better worsens downwards.
    sign = -1.0 if higher_is_better else 1.0
    bound = -math.log(max(1.0 - limit_rel, 1e-12)) if higher_is_better else math.log(1.0 + limit_rel)
    var_b = float(lb.var(ddof=1)) if b.size >= 2 else None
    var_c = float(lc.var(ddof=1)) if n_c >= 2 else None
    if var_b is None and var_c is None:
        return Decision("open", n_c, math.exp(diff), None, None, conf, "welch t-test (needs 2 repeats)")
    if var_b is None or var_c is None:
        var = var_c if var_c is not None else var_b
        assert var is not None
        se2 = var * (1.0 / n_c + 1.0 / b.size)
        df = float((n_c if var_c is not None else b.size) - 1)
    else:
        vb, vc = var_b / b.size, var_c / n_c
        se2 = vb + vc
        df = se2**2 / (vb**2 / (b.size - 1) + vc**2 / (n_c - 1)) if se2 > 0 else 1.0
    if se2 == 0.0:
        worse = sign * diff
        verdict = "worse" if worse > bound else "within"
        return Decision(verdict, n_c, math.exp(diff), math.exp(diff), math.exp(diff), 1.0, "exact (identical repeats)")
    half = float(sps.t.ppf(1.0 - design.alpha_per_look, df)) * math.sqrt(se2)
    worse_low, worse_high = sign * diff - half, sign * diff + half
    verdict = "worse" if worse_low > bound else "within" if worse_high < bound else "open"
    return Decision(
        verdict, n_c, math.exp(diff), math.exp(diff - half), math.exp(diff + half), conf,
        f"welch t-test on log values, {design.looks} looks",
    )  # fmt: skip


def repeats_needed(values: Sequence[float | None], floor: float, design: Design) -> int | None:
    """What more would take: the smallest total number of repeats at which the current mean and spread would
    decide against ``floor`` (in a design whose ``max_repeats`` is that total, so with its smaller per-look alpha).

    Example: [101, 104, 98] vs floor 100 (log sd 0.030, mean 1 % above) need 110 repeats; [104, 107, 101] (4 %
    above) need 6.

    :returns: the total, or None when no number would (the mean sits on the floor, fewer than 2 values, or more
        than 1000 repeats).
    """
    arr = _finite(values)
    if arr.size < 2:
        return None
    log = _log_scale(arr, floor)
    x = np.log(arr) if log else arr
    gap = abs(float(x.mean()) - (math.log(floor) if log else floor))
    sd = float(x.std(ddof=1))
    if gap == 0.0:
        return None
    if sd == 0.0:
        return int(arr.size)
    for total in range(max(int(arr.size), 2), _NEEDED_CAP + 1):
        alpha = design.alpha / max(1, total - max(design.start, 2) + 1)
        if _t_quantile(1.0 - alpha, total - 1) * sd / math.sqrt(total) < gap:
            return total
    return None


def detail(decision: Decision, *, unit: str, server_s: float, needed: int | None, exhausted: bool) -> str:
    """The bracket of a sequential verdict line: ``decided after 3 repeats, CI 121.1-141.6 (98.8%), 9.1 server-s``;
    undecided: ``undecided after 10 repeats, CI 97.1-105.4 (99.4%) contains the limit, 31.0 server-s; about 110
    repeats in all would decide it at this spread (~310 more server-s: raise workload.max_repeats)``.

    :param unit: what one look adds (``repeats``, ``pairs``); :param server_s: spent so far.
    :param needed: :func:`repeats_needed` (None: no number would); :param exhausted: the budget is spent.
    """
    n = decision.n
    if decision.decided or not exhausted:
        return f"decided after {n} {unit}, {decision.interval()}, {server_s:.1f} server-s"
    head = f"undecided after {n} {unit}, {decision.interval()} contains the limit, {server_s:.1f} server-s"
    if needed is None or n == 0:
        return f"{head}; more {unit} would not decide it at this spread (the estimate sits on the limit)"
    more_s = (needed - n) * server_s / n
    return (
        f"{head}; about {needed} {unit} in all would decide it at this spread (~{more_s:.0f} more server-s: raise "
        "workload.max_repeats or max_server_s)"
    )


def shift_repeats_needed(
    baseline: Sequence[float | None],
    current: Sequence[float | None],
    limit_rel: float,
    design: Design,
    *,
    higher_is_better: bool,
) -> int | None:
    """:func:`repeats_needed` for :func:`decide_shift`: the smallest number of current repeats at which the
    current ratio and both spreads would decide against the limit (the baseline's repeats stay as they are).

    :returns: the total, or None when no number would: the ratio sits on the limit, or the baseline's spread alone
        keeps the interval across it (record the baseline with more repeats), or fewer than 2 current values.
    """
    b, c = _finite(baseline), _finite(current)
    if c.size < 2 or not b.size or not _log_scale(np.concatenate([b, c])):
        return None
    lb, lc = np.log(b), np.log(c)
    sign = -1.0 if higher_is_better else 1.0
    bound = -math.log(max(1.0 - limit_rel, 1e-12)) if higher_is_better else math.log(1.0 + limit_rel)
    gap = abs(sign * float(lc.mean() - lb.mean()) - bound)
    var_c = float(lc.var(ddof=1))
    var_b = float(lb.var(ddof=1)) if b.size >= 2 else var_c
    if gap == 0.0:
        return None
    for total in range(int(c.size), _NEEDED_CAP + 1):
        alpha = design.alpha / max(1, total - max(design.start, 2) + 1)
        df = max(total - 1, 1) + max(int(b.size) - 1, 0)
        if _t_quantile(1.0 - alpha, df) * math.sqrt(var_c / total + var_b / b.size) < gap:
            return total
    return None
