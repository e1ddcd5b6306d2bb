"""Sequential verdicts with three outcomes: after each look, a metric is decided passed or failed against its floor
(or a current run within or beyond a baseline's tolerance), and measured further while the interval cannot tell;
at the budget the verdict is *undecided*, never "ok".

**The looks.** A :class:`Design` fixes its looks before anything is measured: the first at ``start`` repeats, then
each about 1.5x the last, the final one at ``max_repeats`` (``Design(3, 24)``: 3, 5, 8, 12, 18, 24). Each look
spends ``alpha / looks`` on each one-sided test; by the union bound the chance that *any* look wrongly decides is at
most ``alpha``, however the looks are correlated and wherever the loop stops (Bonferroni bounds on a group-sequential
design: Pocock 1977, Biometrika 64:191; Jennison & Turnbull 2000, *Group Sequential Methods*, §2.3 and §3.4). Fewer,
geometrically spaced looks spend less alpha per look than a look after every repeat (6 looks instead of 22 above:
z 2.39 instead of 2.84), so an unchanged run is decided with about 30 % fewer repeats. A budget that ends between
looks makes its last look there: it replaces the looks that will not happen, so the count stays within ``looks``.

**A floor** (``min_tok_s``, ``min_speedup``, accept floors; :func:`decide_floor`): Student's one-sided t-test on the
log values (a throughput ratio is symmetric on the log scale): ``above`` (passed) when the interval's lower end is
above the floor, ``below`` (failed) when its upper end is below, else ``open``.

**A change against a baseline** (the stored compare; :func:`decide_shift`), with tolerance ``limit`` on the log
scale ``b = -log(1 - tol)`` for a higher-is-better metric: on the worsening ``w`` (log current/baseline, signed so
that positive is worse) with interval ``[w - h, w + h]``:

- ``within`` (passed) when the interval's worse end is inside the tolerance: ``w + h < b``;
- ``worse`` (failed) when the interval's better end is worse than no change (a significant regression) *and* the
  estimate is beyond the tolerance: ``w - h > 0`` and ``w > b``;
- else ``open``.

An unchanged run (``w <= 0``) fails only when the test wrongly finds it worse than no change: at most ``alpha``; a
regression beyond the tolerance passes only when the interval wrongly excludes it: at most ``alpha``. Both under
optional stopping, by the same union bound (``tests/test_sequential.py`` checks both by seeded simulation).

**Borrowing strength from history** (:class:`History`): the stored runs of the same test and fingerprint give a
pooled within-run variance with many degrees of freedom (the pooled-variance two-sample t-test: t near z where a
3-repeat baseline alone has 2 degrees of freedom) and the spread between runs (one-way random-effects ANOVA, method
of moments). The level stays the named baseline's own run: the other runs lend their spread but never move the
reference, so a 3-repeat baseline at a sigma of 6.9 % still keeps the half-width above ``2.3 x 6.9 % x sqrt(1/3) =
9.2 %`` however long today measures: a baseline stored with more repeats is what narrows it. When today's spread is
significantly larger than history's (an F-test at 5 %: a busier runner), today's own variance is used for today's
side (Welch 1947, Satterthwaite degrees of freedom), so a busy night widens its own interval instead of raising a
false alarm.

Why not the alternatives: an exact sign or Wilcoxon test reaches ``alpha / looks`` = 0.008 only from 7 repeats on
(smallest p = 2^-n); always-valid confidence sequences and the mixture SPRT (Johari, Pekelis & Walsh 2017, "Always
valid inference", KDD; Howard et al. 2021, Ann. Statist. 49:1055) need a known variance or bounded observations and
pay for looking after every sample, which a server measured in phases of seconds does not need.

Assumptions, stated: repeats are independent and roughly log-normal; a drifting load breaks independence, which is
why paired arms (``pairing.py``) are judged on their ratios. Exact metrics (accept length or rate at temperature 0
with identical repeats) carry no noise: they decide on the first repeat, by the value itself.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np

# The quantile functions themselves (what scipy.stats' t.ppf and f.ppf compute, scipy 1.17 t_gen._ppf/f_gen._ppf):
# the same floats without rv_continuous' argument handling, 50-100x cheaper per call, and scipy.special imports in a
# quarter of scipy.stats' time. A verdict asks for a quantile at every look of every row.
from scipy import special

__all__ = [
    "ALPHA",
    "ASSUMED_GPU_INSTANCE_SD",
    "ASSUMED_INSTANCE_SD",
    "ASSUMED_RATIO_INSTANCE_SD",
    "ASSUMED_BUSY_CPU_RATIO_SD",
    "ASSUMED_BUSY_CPU_INSTANCE_SD",
    "ASSUMED_UP_TO_RUNS",
    "DEFAULT_MAX_REPEATS",
    "Decision",
    "Design",
    "History",
    "RunEffect",
    "baseline_repeats_needed",
    "bound_of",
    "decide_floor",
    "decide_shift",
    "detail",
    "difference_decidable",
    "repeats_needed",
    "repeats_share",
    "shift_repeats_needed",
]

#: Overall one-sided error rate of a sequential verdict (each direction): false alarms and false passes.
ALPHA = 0.05
#: ``workload.max_repeats`` when the profile sets none: the budget that decides a 10 % tolerance at the paired
#: spread measured on real SGLang with CUDA graphs (H200, c1: sd of the per-pair log speedup 0.08-0.19;
#: ``benchmarks/bench_verdicts.py``).
DEFAULT_MAX_REPEATS = 24
#: The relative sd between server instances of one config that a compare assumes for a timing row (throughput,
#: latency) until stored runs measure it: each run starts its own servers, and one run's repeats cannot show how
#: instances differ. Measured (one-way random-effects ANOVA of the log, method of moments): real SGLang 0.5.17 on an
#: H200 with CUDA graphs 5-11 % (5 servers, ``benchmarks/data/h200-graphs-c1-pairs.json``); the reference server on
#: 2 cores 7 % at load 0.7-1.3 (10 runs, docs/measurements/verdicts.md) and 2.3-3.1 % quiet (16 instances,
#: ``benchmarks/data/ref-instances.json``).
ASSUMED_INSTANCE_SD = 0.07
#: :data:`ASSUMED_INSTANCE_SD` for runs measured on a host with a GPU (``fingerprint["gpus"]``): server instances of
#: one config spread more there. Measured (the same ANOVA) on real SGLang 0.5.17 with CUDA graphs, 9 interleaved
#: eagle3 runs on 4 H100 machines (2026-12-06, ``benchmarks/bench_stored_pairs.py --h100``): 12.2 % in tok/s, 11-14.5 %
#: in the latency rows (ITL p99 the largest), every one significant; earlier one H100 3.3 % and 14.8 % over two sets
#: of starts, the H200 5-11 %. Taken as known, so the upper row figure: at 7 % an unchanged night on a new instance
#: (tok/s -29 %, within-run sd 7 %) read REGRESSED after 3 repeats; of the 72 ordered pairs of those 9 runs, a night
#: failed on some timing or ratio row in 1 of 12 on one machine and 6 of 60 across machines at 7 %, 0 and 5 at 14 %.
#: Ratio rows keep :data:`ASSUMED_RATIO_INSTANCE_SD`: the paired ratio showed no instance effect there.
ASSUMED_GPU_INSTANCE_SD = 0.14
#: The same for a row judged on its ratio to a paired arm measured alongside (``output_tok_s / baseline``): what
#: both arms share cancels. Measured: H200 0-1.6 %, reference server 1.9 % (the same recordings).
ASSUMED_RATIO_INSTANCE_SD = 0.02
#: :data:`ASSUMED_RATIO_INSTANCE_SD` where either run was measured on an oversubscribed host without a GPU (load
#: average per CPU above 1, ``hoststate.oversubscribed``): there the speedup itself moves with the CPU share the
#: servers get, so the paired ratio no longer cancels the runner. Measured on the reference server, 2 cores, eagle3
#: paired with baseline: 16 fresh server pairs beside 0-4 busy processes, load 1.3-10.7, between-instance sd of the log
#: ratio 0.113 (ANOVA; speedups 0.99-1.46x, ``benchmarks/data/ref-instances-load.json``), against 0.03 quiet (load
#: per CPU 0.4-0.8, the 16 of ``ref-instances.json``); a fresh-user trial's six unchanged nights at load 6.8-9.4: sd
#: 0.126 (1.25x to 0.92x), the upper figure taken. At 2% an unchanged night on such a runner read REGRESSED in 27 of
#: 240 replayed pairs of instances, at 13% in 3 (``benchmarks/bench_cpu_load_ratio.py``; most stay undecided).
ASSUMED_BUSY_CPU_RATIO_SD = 0.13
#: :data:`ASSUMED_INSTANCE_SD` for a raw timing row (throughput, latency) where either run was measured on an
#: oversubscribed host without a GPU (load average per CPU above 1, ``hoststate.oversubscribed``): server instances of
#: one config then differ with the CPU share they get, whatever the load average says. Measured on the reference
#: server, 2 cores, 16 fresh instances beside 0-4 busy processes (load 1.3-10.7, ``benchmarks/data/
#: ref-instances-load.json``): between-instance sd of the log tok/s 0.52 (ANOVA; 0.48 over the 12 at load per CPU 2 or
#: more; median tok/s 28-146, and 41 against 105 at load 5.3 and 5.4); an adversarial trial's unchanged runs at load
#: 6.8-7.3 read 69-146 tok/s, and its TTFT and TPOT rows REGRESSED x1.6-1.7 against one stored run at 7%. Replayed
#: over the 240 ordered pairs of those instances (``benchmarks/bench_cpu_load_ratio.py --row raw``, tolerance 10%):
#: an unchanged night FAILED 74 times at 7%, 11 at 45%, 5 at 50%, none at 68%; at 68% a -80% night still FAILED in
#: 100, -50% in 24 (at 50%: 151 and 49; the rest undecided). The sd enters every test as ``log1p(sd)`` (the log
#: scale), so the measured log sd 0.52 is ``expm1(0.52)`` = 0.68 here; it was 0.50 (log 0.41) until 2026-12-07,
#: under the spread measured: replayed unchanged 3-point sweeps on those instances then failed 9.7% of the time, 2.0%
#: at 0.68 (``benchmarks/bench_sweep_instances.py``). On such a runner the ratio rows and the exact rows (accept
#: length) judge, and the floor stays however many runs are stored (``History.from_runs(assumed_always=True)``): a
#: quieter runner decides more.
ASSUMED_BUSY_CPU_INSTANCE_SD = 0.68
#: Histories of up to this many stored runs take the larger of the assumed run effect and their own estimate, as
#: known (``History.from_runs``).
ASSUMED_UP_TO_RUNS = 3
#: Largest total a "what more would take" estimate looks for.
_NEEDED_CAP = 1000
#: Growth of the look schedule: each look at about this many times the repeats of the last.
_LOOK_GROWTH = 1.5
#: Level of the F-test that falls back from history's variance to today's own.
_F_LEVEL = 0.05
#: Level of the ANOVA F-test that admits a between-run effect into a history (its few degrees of freedom widen).
#: 0.25, the "sometimes pool" level of a preliminary test (Paull 1950; Bancroft 1964), not 0.05: with 3-5 stored
#: runs a 5% test missed a server-instance spread of 7% beside 10% within a run (seen live on the reference server),
#: and one slow instance then read REGRESSED. tests/test_sequential.py: an unchanged run against 5 stored runs fails
#: 4.5% of the time at 0.25 (6.2% at 0.05); a history with no run effect still decides (the pooled-history test).
_BETWEEN_LEVEL = 0.25


@functools.lru_cache(maxsize=256)
def _look_points(start: int, max_repeats: int) -> tuple[int, ...]:
    first = max(start, 1)
    points = [first]
    while points[-1] < max_repeats:
        points.append(min(max_repeats, max(points[-1] + 1, math.ceil(points[-1] * _LOOK_GROWTH))))
    return tuple(points)


@dataclass(frozen=True, slots=True)
class Design:
    """The looks of one sequential verdict, from ``start`` repeats up to ``max_repeats`` (:attr:`points`).

    ``max_server_s`` is a server-seconds budget that ends the looks early (stopping early never inflates the error
    rate: a look's alpha is fixed in advance). ``Design(3, 3)`` is a single look at 3 repeats: a fixed-repeat
    verdict, at the full ``alpha``. Example: ``Design(3, 24)`` looks at 3, 5, 8, 12, 18 and 24 repeats, each
    one-sided test at 0.05 / 6 = 0.0083.
    """

    start: int
    max_repeats: int
    alpha: float = ALPHA
    max_server_s: float | None = None

    @property
    def points(self) -> tuple[int, ...]:
        """The repeat counts at which a look is taken (``start``, then x1.5 rounded up, the last ``max_repeats``)."""
        return _look_points(self.start, max(self.max_repeats, self.start))

    @property
    def looks(self) -> int:
        """Looks that spend alpha (``len(points)``)."""
        return len(self.points)

    @property
    def alpha_per_look(self) -> float:
        """``alpha / looks``: each look's one-sided level (Bonferroni)."""
        return self.alpha / self.looks

    def looks_between(self, last: int, n: int) -> tuple[int, ...]:
        """The looks a step from ``last`` repeats (the last look; 0: none yet) to ``n`` passes, in order: the points
        in ``(last, n]``, or ``(n,)`` past the last point when none is left there. A step of several repeats (a
        bracketed pairing's block) passes each such point: its look is taken on the step's first ``p`` repeats
        (``verdict._measure_until``), so the looks are the points the design planned, each spending
        :attr:`alpha_per_look` once, whatever the steps' sizes.

        Example: ``Design(3, 24).looks_between(3, 12)`` is ``(5, 8, 12)``; ``looks_between(8, 8)`` is ``()``.
        """
        passed = tuple(p for p in self.points if last < p <= n)
        if not passed and n > last and n >= self.max_repeats:
            return (n,)
        return passed

    def look_due(self, n: int, last: int) -> bool:
        """Whether a look is taken at ``n`` repeats when the last was taken at ``last`` (0: none yet): a point in
        ``(last, n]`` (:meth:`looks_between`), looked at where the step ends. A compare looks so: its stored record
        holds every repeat, and the ``compare`` command judges it on all of them. Each look still consumes a point,
        so at most :attr:`looks` looks spend ``alpha / looks`` each and the Bonferroni bound holds; looking later,
        with more repeats, costs no error (when a step ends depends on costs, not on the values)."""
        return bool(self.looks_between(last, n))

    def may_continue(self, n: int, server_s: float, next_s: float | None = None, step: int = 1) -> bool:
        """Whether another measuring step fits the budget after ``n`` repeats that took ``server_s`` server-seconds.

        :param next_s: what the next step is expected to cost at most; default ``step`` times the mean repeat. A
            budget is never overrun by a step of that cost.
        :param step: repeats the next step adds (a bracketed pairing measures its first block's pairs at once).
        """
        if n + max(step, 1) > self.max_repeats:
            return False
        if self.max_server_s is None or n == 0:
            return True
        return server_s + (next_s if next_s is not None else max(step, 1) * server_s / n) <= self.max_server_s


@dataclass(frozen=True, slots=True)
class Decision:
    """One look of :func:`decide_floor` / :func:`decide_shift`.

    ``verdict``: ``above`` / ``below`` (the floor), ``within`` / ``worse`` (the tolerance of a change), or ``open``
    (the interval cannot tell). ``estimate``, ``low`` and ``high`` are in the metric's unit for a floor (geometric
    mean and its interval) and a ratio current/baseline for a change; ``low``/``high`` are None when no interval
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

    @property
    def outcome(self) -> str:
        """``passed``, ``FAILED`` or ``undecided``: the verdict in the words a test prints."""
        return {"above": "passed", "within": "passed", "below": "FAILED", "worse": "FAILED"}.get(
            self.verdict, "undecided"
        )

    def interval(self) -> str:
        """``CI 97.1-105.4 (99.4%)``, or ``no interval (1 repeat)``."""
        if self.low is None or self.high is None:
            return f"no interval ({self.n} repeat{'s' if self.n != 1 else ''})"
        return f"CI {self.low:.4g}-{self.high:.4g} ({self.confidence:.1%})"


@dataclass(frozen=True, slots=True)
class RunEffect:
    """One-way random-effects ANOVA of runs' per-repeat values on the log scale: how much a run's (a server
    instance's) mean differs beyond its repeats (method of moments; Searle, Casella & McCulloch 1992, *Variance
    Components*, §3.5, with ``n0`` for unequal run sizes).

    ``var``: the pooled within-run variance of one repeat (``df`` = repeats - runs); ``between``: the run effect's
    variance, ``max(0, (MS_between - var) / n0)``; ``ms_between``; ``means``: each run's log mean.

    Example: runs [100, 102, 98], [110, 112, 108] tok/s: within sd 0.019, between sd 0.067 (of the log).
    """

    var: float
    df: int
    between: float
    ms_between: float
    means: np.ndarray
    n: int
    #: Repeats of each run, in the order of ``means``.
    sizes: tuple[int, ...] = ()

    @property
    def runs(self) -> int:
        return int(self.means.size)

    @classmethod
    def of(cls, runs: Sequence[Sequence[float | None]]) -> RunEffect | None:
        """The ANOVA of ``runs`` (each a list of per-repeat values > 0; others skipped). None when no run has 2
        values (no within-run spread)."""
        logs = [np.log(a) for a in (_finite(r) for r in runs) if a.size and bool(np.all(a > 0))]
        n = sum(int(a.size) for a in logs)
        df = n - len(logs)
        if not logs or df < 1:
            return None
        var = float(sum(float(((a - a.mean()) ** 2).sum()) for a in logs)) / df
        means = np.array([float(a.mean()) for a in logs])
        sizes = tuple(int(a.size) for a in logs)
        k = len(logs)
        if k < 2:
            return cls(var, df, 0.0, 0.0, means, n, sizes)
        n0 = (n - sum(int(a.size) ** 2 for a in logs) / n) / (k - 1)
        grand = float(np.concatenate(logs).mean())
        ms_between = float(sum(a.size * (float(a.mean()) - grand) ** 2 for a in logs)) / (k - 1)
        return cls(var, df, max(0.0, (ms_between - var) / n0), ms_between, means, n, sizes)

    def significant(self, level: float) -> bool:
        """The ANOVA F-test at ``level``: the runs' means spread more than their repeats explain."""
        if self.runs < 2 or self.var <= 0.0:
            return False
        return self.ms_between / self.var > float(special.fdtri(self.runs - 1, self.df, 1.0 - level))


@dataclass(frozen=True, slots=True)
class History:
    """The stored runs of a baseline (same test, same fingerprint), pooled on the log scale: the spread from all of
    them, the level from the baseline's own run.

    ``mean``: the baseline's log mean, of its own run (the first of :meth:`from_runs`, ``level_n`` repeats); ``var``:
    the pooled within-run variance of one repeat, with ``df`` = repeats - runs degrees of freedom; ``between``: the
    variance of a run's mean beyond its repeats' (one-way random-effects ANOVA, method of moments, when its F-test at
    25 % finds one, else 0); ``runs``, ``n``: runs and repeats.

    Why the other runs lend their spread but not their level: the reference is the run the user named. Runs stored
    after it are the nights that passed or stayed undecided against it, and a slow drift does both: pooled into the
    level, each moved the reference along with the drift (2 %/night against a 10 % tolerance failed only ~22 % below
    the named baseline; seeded, ``tests/test_sequential.py``); runs stored before it (a baseline stored again after
    unchanged nights, as a trial did) brought an old, loaded first baseline and any drift back into it. Their spread
    cannot move the reference: a drift only widens it, which leaves a verdict undecided, never ok.

    Example: runs [100, 102, 98] and [101, 99, 100] tok/s: 2 runs, 6 repeats, df 4, pooled sd of log 0.017, level
    log(100) from the first run.
    """

    mean: float
    var: float
    df: int
    between: float
    runs: int
    n: int
    #: ``between`` is the assumed run effect (too few runs to test for one), taken as known: no degrees of freedom.
    assumed: bool = False
    #: Runs and repeats behind :attr:`mean` (the baseline's own: 1 run); 0: all of them (``level_runs=None``).
    level_runs: int = 0
    level_n: int = 0

    @property
    def between_df(self) -> float:
        """Degrees of freedom of :attr:`between`: ``runs - 1`` when estimated, many when assumed."""
        return 1e9 if self.assumed else float(max(self.runs - 1, 1))

    @classmethod
    def from_runs(
        cls,
        runs: Sequence[Sequence[float | None]],
        assumed_sd: float = 0.0,
        *,
        level_runs: int | None = 1,
        assumed_always: bool = False,
    ) -> History | None:
        """Pool ``runs`` (each a list of per-repeat values > 0). None when no run has 2 values (no spread), or when
        a level run has no usable value.

        :param assumed_sd: the relative run-to-run sd to assume (:data:`ASSUMED_INSTANCE_SD`) with at most
            :data:`ASSUMED_UP_TO_RUNS` runs, or their own estimate when larger, taken as known (:attr:`assumed`):
            their F-test has 1-2 degrees of freedom and misses a real run effect most of the time (an unchanged run
            then read REGRESSED up to 8% of the time, by seeded simulation; tests/test_sequential.py).
        :param level_runs: the first ``level_runs`` of ``runs`` give the level: 1, the baseline's own run (the
            compare's rule); None, all of them (the rule before 2026-12-05, kept for the benchmarks' comparison).
        :param assumed_always: take the larger of ``assumed_sd`` and the estimate at any number of runs (a busy CPU
            runner's floor, :data:`ASSUMED_BUSY_CPU_INSTANCE_SD`: 4 unchanged runs there read a run-to-run sd of
            5.6% where 6 read 14.7%, and a real 1.15x slowdown passed against the 4, in an adversarial trial)."""
        level = len(runs) if level_runs is None else level_runs
        if not 1 <= level <= len(runs) or not all(_usable(r) for r in runs[:level]):
            return None
        anova = RunEffect.of(runs)
        if anova is None:
            return None
        var, df, k, n, estimate = anova.var, anova.df, anova.runs, anova.n, anova.between
        mean, level_n = float(anova.means[:level].mean()), sum(anova.sizes[:level])
        # The runs' means spread more than their repeats explain (one-way ANOVA F-test, level _BETWEEN_LEVEL): a run
        # effect, estimated by the method of moments; else none (pooling it in would only widen by noise).
        between = estimate if anova.significant(_BETWEEN_LEVEL) else 0.0
        assumed = (k <= ASSUMED_UP_TO_RUNS or assumed_always) and assumed_sd > 0.0
        if assumed:
            # 1-2 degrees of freedom neither find a run effect nor size it: the larger of the assumed one and the
            # estimate, taken as known (as estimated, with t at 1 df, 2 runs read CI 0.51-1.90 where 1 read
            # 0.91-1.10: a second stored run made a compare far less decidable, in a fresh-user trial).
            between = max(estimate, math.log1p(assumed_sd) ** 2)
        return cls(mean, var, df, between, k, n, assumed=assumed, level_runs=level, level_n=level_n)

    def mean_var(self) -> float:
        """The variance of :attr:`mean`: the level runs' means averaged, each its repeats' variance (at the pooled
        variance) plus the between-run part."""
        runs, n = (self.level_runs, self.level_n) if self.level_runs else (self.runs, self.n)
        return (self.between + self.var * runs / n) / runs


def _usable(values: Sequence[float | None]) -> bool:
    """A run :meth:`RunEffect.of` keeps: some finite values, all > 0 (the log scale)."""
    a = _finite(values)
    return bool(a.size) and bool(np.all(a > 0))


@functools.lru_cache(maxsize=4096)
def _t_quantile(q: float, df: float) -> float:
    """``scipy.stats.t.ppf(q, df)`` (``scipy.special.stdtrit``), cached: a verdict asks for the same few quantiles
    at every look."""
    return float(special.stdtrit(df, q))


def _finite(values: Sequence[float | None]) -> np.ndarray:
    return np.asarray([float(v) for v in values if v is not None and math.isfinite(float(v))], dtype=float)


def _log_scale(arr: np.ndarray, *refs: float) -> bool:
    return bool(arr.size) and bool(np.all(arr > 0)) and all(r > 0 for r in refs)


def decide_floor(values: Sequence[float | None], floor: float, design: Design, *, exact: bool = False) -> Decision:
    """Is the metric's true (geometric) mean above or below ``floor``, after these repeats?

    ``below`` when the one-sided t-test at ``design.alpha_per_look`` finds the log mean below ``log(floor)``,
    ``above`` when it finds it above, else ``open``. On the log scale when every value and the floor are positive,
    else on the values themselves. With ``exact`` (an exact metric at temperature 0, identical repeats) the value
    itself decides; without it, identical values (or one) have no interval and stay ``open``.

    Example: [131, 129, 133] tok/s vs floor 100, ``Design(3, 24)``: log mean 4.875, sd 0.0153, t(2, 0.9917) =
    7.65 -> interval 122.4-140.1 tok/s, ``above`` at the first look.

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
        if not exact:
            # Identical values of a figure that is not exact (a category agreeing by coincidence in a run that
            # varies) have no interval yet: more repeats show their spread.
            why = "t-test (needs 2 repeats)" if n == 1 else "t-test (no spread in the repeats yet)"
            return Decision("open", n, back(mean), None, None, conf, why)
        # The value itself, not exp(mean(log)): a floor set to the measured figure must hold (a round trip through
        # the log once read "2.638 < min 2.63836 (margin -4.441e-16)" for a floor copied from the results file).
        value = float(arr[0])
        verdict = "above" if value >= floor else "below"
        return Decision(verdict, n, value, value, value, 1.0, "exact (identical repeats)")
    sd = float(x.std(ddof=1))
    half = _t_quantile(1.0 - design.alpha_per_look, n - 1) * sd / math.sqrt(n)
    low, high = mean - half, mean + half
    verdict = "above" if low > ref else "below" if high < ref else "open"
    method = f"t-test on log values, {design.looks} looks" if log else f"t-test, {design.looks} looks"
    return Decision(verdict, n, back(mean), back(low), back(high), conf, method)


def bound_of(limit_rel: float, higher_is_better: bool) -> float:
    """The tolerance ``limit_rel`` (a fraction of the baseline) on the log worsening scale a shift is judged on:
    ``-log(1 - tol)`` (higher is better) or ``log(1 + tol)``."""
    return -math.log(max(1.0 - limit_rel, 1e-12)) if higher_is_better else math.log(1.0 + limit_rel)


@dataclass(frozen=True, slots=True)
class _Spread:
    """The pieces of a change's interval: the log difference, its squared standard error, degrees of freedom."""

    diff: float
    se2: float
    df: float
    method: str


def _satterthwaite(parts: Sequence[tuple[float, float]]) -> float:
    """Welch-Satterthwaite degrees of freedom of a sum of variance parts ``(v, df)``."""
    total = sum(v for v, _ in parts)
    denom = sum(v * v / df for v, df in parts if v > 0 and df > 0)
    return total * total / denom if denom > 0 else 1e9


def _spread(b: np.ndarray, c: np.ndarray, history: History | None, instance_var: float = 0.0) -> _Spread | None:
    """The log difference current - baseline and its standard error. Without ``history``: both runs' own repeats,
    pooled (Student's t) unless a two-sided F-test finds their variances differ or the smaller run spreads more
    (then Welch's t), plus ``2 * instance_var`` (the baseline and today are one server instance each; an assumed
    run effect, taken as known). With ``history``:
    its pooled variance and mean (today's own variance when an F-test finds it larger)."""
    lc = np.log(c)
    n_c = int(c.size)
    var_c = float(lc.var(ddof=1)) if n_c >= 2 else None
    if history is not None:
        diff = float(lc.mean()) - history.mean
        own = var_c is not None and var_c > history.var * _f_quantile(n_c - 1, history.df)
        if own:
            assert var_c is not None
            cur, cur_df, method = var_c / n_c, float(n_c - 1), "welch t-test on log values, today's variance"
        else:
            cur, cur_df, method = history.var / n_c, float(history.df), "pooled-variance t-test on log values"
        parts = [(cur, cur_df), (history.mean_var(), history.between_df if history.between else 1e9)]
        if history.between:
            parts.append((history.between, history.between_df))  # today's run has its own run effect
        method += f" ({history.runs} stored run{'s' if history.runs != 1 else ''}, {history.n} repeats)"
        return _Spread(diff, sum(v for v, _ in parts), _satterthwaite(parts), method)
    lb = np.log(b)
    diff = float(lc.mean() - lb.mean())
    var_b = float(lb.var(ddof=1)) if b.size >= 2 else None
    if var_b is None and var_c is None:
        return None
    if var_b is None or var_c is None:
        var = var_c if var_c is not None else var_b
        assert var is not None
        df = float((n_c if var_c is not None else b.size) - 1)
        se2, method = var * (1.0 / n_c + 1.0 / b.size), "t-test on log values, one side's variance"
    else:
        se2, df, method = _two_sample(var_b, int(b.size), var_c, n_c)
        method += " on log values"
    if instance_var > 0.0:
        parts = [(se2, df), (2.0 * instance_var, 1e9)]
        method += f", assumed run-to-run sd {math.expm1(math.sqrt(instance_var)):.0%} (one stored run)"
        return _Spread(diff, se2 + 2.0 * instance_var, _satterthwaite(parts), method)
    return _Spread(diff, se2, df, method)


def _two_sample(var_b: float, n_b: int, var_c: float, n_c: int) -> tuple[float, float, str]:
    """Squared standard error, degrees of freedom and name of the two-sample t-test of a baseline and today's run.

    Student's pooled-variance t-test (both runs' repeats estimate one spread, ``n_b + n_c - 2`` degrees of freedom)
    unless the two-sided F-test finds the spreads differ or the smaller run spreads more: then Welch's t. Welch
    alone gave a 2-repeat baseline about 1 degree of freedom whatever today measured (t ~ 76 at alpha/6): a 3x
    slowdown measured over 12 repeats stayed undecided. Pooling when the smaller run spreads more understates its
    spread (false alarms 6.2% instead of <= 5% in tests/test_sequential.py), hence the second condition.
    """
    if _same_variance(var_c, n_c - 1, var_b, n_b - 1) and (var_b <= var_c or n_b >= n_c):
        pooled = ((n_b - 1) * var_b + (n_c - 1) * var_c) / (n_b + n_c - 2)
        return pooled * (1.0 / n_b + 1.0 / n_c), float(n_b + n_c - 2), "pooled-variance t-test (both runs' repeats)"
    vb, vc = var_b / n_b, var_c / n_c
    return vb + vc, _satterthwaite([(vb, n_b - 1), (vc, n_c - 1)]), "welch t-test (unequal variances)"


def _same_variance(var_c: float, df_c: int, var_b: float, df_b: int) -> bool:
    """The two-sided F-test at :data:`_F_LEVEL`: no evidence that the two runs' variances differ (then pooling them is
    Student's t-test; else Welch's). A side with zero variance (identical repeats) is not pooled."""
    if var_b <= 0.0 or var_c <= 0.0:
        return False
    ratio = var_c / var_b
    low = float(special.fdtri(df_c, df_b, _F_LEVEL / 2.0))
    high = float(special.fdtri(df_c, df_b, 1.0 - _F_LEVEL / 2.0))
    return low <= ratio <= high


@functools.lru_cache(maxsize=4096)
def _f_quantile(dfn: int, dfd: int) -> float:
    """The F-test's critical ratio at :data:`_F_LEVEL` (inf with fewer than 2 values today: no test)."""
    if dfn < 1 or dfd < 1:
        return math.inf
    return float(special.fdtri(dfn, dfd, 1.0 - _F_LEVEL))


def decide_shift(
    baseline: Sequence[float | None],
    current: Sequence[float | None],
    limit_rel: float,
    design: Design,
    *,
    higher_is_better: bool,
    history: History | None = None,
    allowed: float | None = None,
    instance_sd: float = 0.0,
) -> Decision:
    """Is the current run within ``limit_rel`` of the baseline, or significantly worse and beyond it?

    The ratio current/baseline of geometric means, with its interval at ``design.alpha_per_look`` (module
    docstring): ``within`` when the interval's worse end is inside the tolerance, ``worse`` when its better end is
    worse than no change and the estimate beyond the tolerance, else ``open``. With ``history`` the baseline's mean
    and variance come from its stored runs (:class:`History`; ``baseline`` is then only checked for values).

    Example: baseline [100, 101, 99] tok/s, current [90, 91, 89, 90], tolerance 5 %, ``Design(4, 4)``: ratio 0.900,
    interval 0.879-0.921: better end below 1 and estimate below 0.95 -> ``worse``.

    :param limit_rel: the allowed relative worsening (the compare's tolerance), >= 0.
    :param allowed: an absolute tolerance (``10%+5`` ms: the allowed worsening in the metric's unit at the baseline):
        decided on the difference of the means instead of the log ratio (a latency near 0 ms has no useful log
        scale); ``history`` is not used then. The estimate and interval are still shown as ratios to the baseline.
    :param instance_sd: without ``history`` (or with ``allowed``, which does not use it), the relative sd between
        server instances (0.07: 7 %), added for the baseline's instance and today's (:data:`ASSUMED_INSTANCE_SD`, or
        what the stored runs or ``calibrate`` measured); the two runs' repeats cannot show it. With ``allowed`` it is
        taken at each run's mean, in the metric's unit.
    """
    b, c = _finite(baseline), _finite(current)
    n_c = int(c.size)
    conf = 1.0 - 2.0 * design.alpha_per_look
    if allowed is not None:
        return _decide_difference(b, c, allowed, design, higher_is_better=higher_is_better, instance_sd=instance_sd)
    if not b.size or not n_c or not _log_scale(np.concatenate([b, c])):
        return Decision("open", n_c, math.nan, None, None, conf, "no value")
    sign = -1.0 if higher_is_better else 1.0
    bound = bound_of(limit_rel, higher_is_better)
    spread = _spread(b, c, history, _instance_var(instance_sd, history))
    if spread is None:
        diff = float(np.log(c).mean() - np.log(b).mean())
        return Decision("open", n_c, math.exp(diff), None, None, conf, "t-test (needs 2 repeats)")
    diff = spread.diff
    if spread.se2 == 0.0:
        verdict = "worse" if sign * diff > bound else "within"
        return Decision(verdict, n_c, math.exp(diff), math.exp(diff), math.exp(diff), 1.0, "exact (identical repeats)")
    half = _t_quantile(1.0 - design.alpha_per_look, spread.df) * math.sqrt(spread.se2)
    worse = sign * diff
    if worse + half < bound:
        verdict = "within"
    elif worse - half > 0.0 and worse > bound:
        verdict = "worse"
    else:
        verdict = "open"
    return Decision(
        verdict, n_c, math.exp(diff), math.exp(diff - half), math.exp(diff + half), conf,
        f"{spread.method}, {design.looks} looks",
    )  # fmt: skip


def _decide_difference(
    b: np.ndarray, c: np.ndarray, allowed: float, design: Design, *, higher_is_better: bool, instance_sd: float = 0.0
) -> Decision:
    """:func:`decide_shift` on the linear scale: the two-sample interval of mean(current) - mean(baseline) against
    ``allowed`` (metric units), the same three outcomes; ``instance_sd`` (relative) adds ``sd^2 (mean(baseline)^2 +
    mean(current)^2)`` to its squared standard error, taken as known (each run is one server instance, its effect
    relative to its own level, as on the log scale).

    Why the run-to-run part here too: 8 unchanged H200 instances of one profile (SGLang 0.5.17, CUDA graphs) spread
    13-15 % run to run in ITL p50/p95 and TPOT, as much as in tok/s; judged on the two runs' repeats alone, the
    ``20%+0.1`` ms ITL p95 row read REGRESSED in 9 of their 56 ordered pairs."""
    n_c = int(c.size)
    conf = 1.0 - 2.0 * design.alpha_per_look
    if not b.size or not n_c:
        return Decision("open", n_c, math.nan, None, None, conf, "no value")
    base = float(b.mean())
    diff = float(c.mean()) - base

    def ratio(x: float) -> float:
        return (base + x) / base if base else math.nan

    var_b = float(b.var(ddof=1)) if b.size >= 2 else None
    var_c = float(c.var(ddof=1)) if n_c >= 2 else None
    sign = -1.0 if higher_is_better else 1.0
    if var_b is None and var_c is None:
        return Decision("open", n_c, ratio(diff), None, None, conf, "t-test (needs 2 repeats)")
    if var_b is not None and var_c is not None:
        se2, df, method = _two_sample(var_b, int(b.size), var_c, n_c)
    else:  # one side's variance for both
        var = var_b if var_b is not None else var_c
        assert var is not None
        se2, method = var * (1.0 / b.size + 1.0 / n_c), "t-test (one side's variance)"
        df = float((b.size if var_b is not None else n_c) - 1)
    if instance_sd > 0.0 and base:
        # Each run's instance effect at its own level (a relative spread): the baseline's and today's.
        run_var = instance_sd**2 * (base**2 + float(c.mean()) ** 2)
        df = _satterthwaite([(se2, df), (run_var, 1e9)])
        se2 += run_var
        method += f", run-to-run sd {instance_sd:.0%}"
    if se2 == 0.0:
        verdict = "worse" if sign * diff > allowed else "within"
        return Decision(verdict, n_c, ratio(diff), ratio(diff), ratio(diff), 1.0, "exact (identical repeats)")
    half = _t_quantile(1.0 - design.alpha_per_look, df) * math.sqrt(se2)
    worse = sign * diff
    verdict = "within" if worse + half < allowed else "worse" if worse - half > 0.0 and worse > allowed else "open"
    # Shown as ratios to the baseline: a latency is never below 0 (a trial read "CI -0.4945-2.662").
    return Decision(
        verdict, n_c, ratio(diff), max(ratio(diff - half), 0.0), max(ratio(diff + half), 0.0), conf,
        f"{method} on the difference, {design.looks} looks",
    )  # fmt: skip


def difference_decidable(
    baseline: Sequence[float | None],
    current: Sequence[float | None],
    allowed: float,
    design: Design,
    *,
    higher_is_better: bool,
    instance_sd: float,
) -> bool:
    """Whether more of today's repeats could decide a row with an absolute tolerance (:func:`decide_shift` with
    ``allowed``): its run-to-run part (``instance_sd`` at each run's mean, known) does not shrink with repeats, so
    it alone must come under the gap (to ``allowed`` when the difference is inside it, to no change beyond).

    Example: ITL 1.00 -> 1.25 ms at ``allowed`` 0.21 ms, 7 % run to run, ``Design(3, 16)``: the run-to-run part's
    half-width 2.33 x 0.07 x 1.60 = 0.26 ms exceeds the 0.25 ms gap: False. True without ``instance_sd``.
    """
    b, c = _finite(baseline), _finite(current)
    if instance_sd <= 0.0 or not b.size or not c.size:
        return True
    base, cur = float(b.mean()), float(c.mean())
    worse = (-1.0 if higher_is_better else 1.0) * (cur - base)
    gap = allowed - worse if worse < allowed else worse
    floor = _t_quantile(1.0 - design.alpha_per_look, 1e9) * instance_sd * math.sqrt(base**2 + cur**2)
    return floor < gap


def _look_alpha(design: Design, total: int) -> float:
    """The per-look alpha of the design that would stop at ``total`` repeats."""
    return design.alpha / len(_look_points(design.start, max(total, design.start)))


def repeats_needed(values: Sequence[float | None], floor: float, design: Design) -> int | None:
    """What more would take: the smallest total number of repeats at which the current mean and spread would
    decide against ``floor`` (in a design whose ``max_repeats`` is that total, so with its smaller per-look alpha).

    Example: [101, 104, 98] vs floor 100 (log sd 0.030, mean 1 % above) need 65 repeats; [104, 107, 101]
    (4 % above) need about 6.

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
        return None  # no spread to estimate from
    for total in range(max(int(arr.size), 2), _NEEDED_CAP + 1):
        if _t_quantile(1.0 - _look_alpha(design, total), total - 1) * sd / math.sqrt(total) < gap:
            return total
    return None


def detail(decision: Decision, *, unit: str, server_s: float, needed: int | None, exhausted: bool) -> str:
    """The bracket of a sequential verdict line: ``decided after 3 repeats, CI 121.1-141.6 (98.3%), 9.1 server-s``;
    undecided: ``undecided after 24 repeats, CI 97.1-105.4 (99.2%) contains the limit, 31.0 server-s; about 110
    repeats in all would decide it at this spread (~310 more server-s: raise workload.max_repeats)``.

    :param unit: what one look adds (``repeats``, ``pairs``); :param server_s: spent so far.
    :param needed: :func:`repeats_needed` (None: no number would); :param exhausted: the budget is spent.
    """
    n = decision.n
    if decision.decided or not exhausted:
        return f"decided after {n} {unit}, {decision.interval()}, {server_s:.1f} server-s"
    if n < 2:  # one value has no spread: no interval, and no estimate of how many more would give one
        return (f"undecided after {n} {unit.removesuffix('s') if n == 1 else unit}: no spread to test the limit "
                f"against, {server_s:.1f} server-s; 2 or more {unit} would test it")  # fmt: skip
    head = f"undecided after {n} {unit}, {decision.interval()} contains the limit, {server_s:.1f} server-s"
    if needed is None or n == 0:
        return f"{head}; more {unit} would not decide it at this spread (the estimate sits on the limit)"
    more_s = (needed - n) * server_s / n
    return (
        f"{head}; about {needed} {unit} in all would decide it at this spread (~{more_s:.0f} more server-s: raise "
        "workload.max_repeats or max_server_s)"
    )


def _open_gap(
    baseline: Sequence[float | None],
    current: Sequence[float | None],
    limit_rel: float,
    higher_is_better: bool,
    history: History | None,
    instance_var: float,
) -> tuple[np.ndarray, np.ndarray, _Spread, float] | None:
    """The start both "what would decide it" estimates share: the finite values (baseline, current), their
    :func:`_spread`, and the gap an interval's half-width must come under (to the tolerance when the estimate is
    inside it, to no change when beyond). None with fewer than 2 current values, values not on a log scale, or the
    estimate on the tolerance."""
    b, c = _finite(baseline), _finite(current)
    if c.size < 2 or not b.size or not _log_scale(np.concatenate([b, c])):
        return None
    spread = _spread(b, c, history, instance_var)
    if spread is None:
        return None
    worse = (-1.0 if higher_is_better else 1.0) * spread.diff
    bound = bound_of(limit_rel, higher_is_better)
    # Passing needs the worse end inside the tolerance; failing, the better end past no change.
    gap = bound - worse if worse < bound else worse if worse > bound else 0.0
    return (b, c, spread, gap) if gap > 0.0 else None


def shift_repeats_needed(
    baseline: Sequence[float | None],
    current: Sequence[float | None],
    limit_rel: float,
    design: Design,
    *,
    higher_is_better: bool,
    history: History | None = None,
    instance_sd: float = 0.0,
    more_than: int = 0,
) -> int | None:
    """:func:`repeats_needed` for :func:`decide_shift`: the smallest number of current repeats at which the
    current ratio and spreads would decide (within, or worse), the baseline's side staying as it is.

    ``more_than``: the repeats a row left open was measured at; the total is at least one more (the estimate's
    approximations, Satterthwaite's degrees of freedom with the run effect taken as known, can put it at the repeats
    that left the row open: an unchanged H100 night read "about 3 repeats in all would decide it" after 3).

    :returns: the total, or None when no number would: the estimate sits on the tolerance (or on no change), or
        the baseline's spread alone keeps the interval across it (record the baseline with more repeats or runs),
        or fewer than 2 current values.
    """
    instance_var = _instance_var(instance_sd, history)
    opened = _open_gap(baseline, current, limit_rel, higher_is_better, history, instance_var)
    if opened is None:
        return None
    b, c, spread, gap = opened
    var_c = float(np.log(c).var(ddof=1))
    base_se2 = spread.se2 - var_c / c.size if history is None else spread.se2 - (history.var / c.size)
    base_se2 = max(base_se2, 0.0)
    pooled = history is not None and var_c <= history.var
    per = history.var if history is not None and pooled else var_c
    base_df = history.between_df if history is not None and history.between else (
        1e9 if history is not None else float(max(b.size - 1, 1)))  # fmt: skip
    if instance_var:  # the assumed run effect is known: it lends the baseline's side its degrees of freedom
        base_df = _satterthwaite([(max(base_se2 - 2.0 * instance_var, 0.0), base_df), (2.0 * instance_var, 1e9)])

    def decides(total: int) -> bool:
        cur_df = float(history.df) if history is not None and pooled else float(total - 1)
        df = round(_satterthwaite([(per / total, cur_df), (base_se2, base_df)]), 1)
        return _t_quantile(1.0 - _look_alpha(design, total), df) * math.sqrt(per / total + base_se2) < gap

    return _smallest(max(int(c.size), more_than + 1), decides)


def baseline_repeats_needed(
    baseline: Sequence[float | None],
    current: Sequence[float | None],
    limit_rel: float,
    design: Design,
    *,
    higher_is_better: bool,
    history: History | None = None,
    instance_sd: float = 0.0,
) -> int | None:
    """What the baseline's side would need (asked when no number of today's repeats decides,
    :func:`shift_repeats_needed` None): the smallest number of repeats of the baseline's own run (its level, the
    compare's reference) at which today's run at ``design.max_repeats`` (today's mean and spread as they are) would
    decide, with the within-run and run-to-run spread as the stored runs (or the assumption) give them. A baseline is
    one server instance: no number of its repeats removes its run effect, so where that alone keeps the interval
    open, None.

    Example: a 3-repeat baseline at a per-repeat log sd of 0.20 (3 stored runs of 12, no run effect); today 10% worse
    over 24 repeats against a 5% tolerance is open; a baseline of about 60 repeats would decide it
    (tests/test_sequential.py).

    :returns: the baseline's repeats in all, or None when none up to 1000 would (the run-to-run spread or today's own
        spread keeps it open, or the estimate sits on the tolerance) or fewer than 2 current values.
    """
    instance_var = _instance_var(instance_sd, history)
    opened = _open_gap(baseline, current, limit_rel, higher_is_better, history, instance_var)
    if opened is None:
        return None
    b, c, _, gap = opened
    var_c = float(np.log(c).var(ddof=1))
    if history is not None:
        var, df, between = history.var, float(history.df), history.between
        between_df = history.between_df if between else 1e9
        now = history.level_n or int(b.size)
    elif b.size >= 2:
        var, df, between, between_df, now = float(np.log(b).var(ddof=1)), float(b.size - 1), instance_var, 1e9, b.size
    else:
        return None
    if var <= 0.0:
        return None
    total = max(design.max_repeats, int(c.size))
    own = var_c > var * _f_quantile(int(c.size) - 1, max(int(df), 1))
    cur = ((var_c if own else var) / total, float(total - 1) if own else df)
    alpha = _look_alpha(design, total)

    def decides(n_b: int) -> bool:  # the parts of _spread: today's, the baseline's level, today's instance
        parts = [cur, (between + var / n_b, between_df)]
        if between:
            parts.append((between, between_df))
        return _t_quantile(1.0 - alpha, _satterthwaite(parts)) * math.sqrt(sum(v for v, _ in parts)) < gap

    return _smallest(int(now) + 1, decides)


def repeats_share(
    baseline: Sequence[float | None],
    current: Sequence[float | None],
    *,
    history: History | None = None,
    instance_sd: float = 0.0,
) -> float | None:
    """The share of a :func:`decide_shift` interval's variance that today's repeats contribute, the only part more of
    them shrink (``var_c / n_c`` over :func:`_spread`'s ``se2``, on log values; with a pooled ``history``, its
    variance over ``n_c``): 0.03 when a quiet CPU's raw tok/s (3 repeats, sd 3%) is held open by the 7% assumed
    between server instances, so endless repeats would narrow the interval by about 1.5%; None with fewer than 2
    current values or values not on a log scale."""
    b, c = _finite(baseline), _finite(current)
    if c.size < 2 or not b.size or not _log_scale(np.concatenate([b, c])):
        return None
    spread = _spread(b, c, history, _instance_var(instance_sd, history))
    if spread is None or spread.se2 <= 0.0:
        return None
    var_c = float(np.log(c).var(ddof=1))
    if history is not None and var_c <= history.var * _f_quantile(int(c.size) - 1, history.df):
        var_c = history.var  # pooled, as _spread takes it
    return min(var_c / c.size / spread.se2, 1.0)


def _instance_var(instance_sd: float, history: History | None) -> float:
    """The assumed run effect as a variance of the log (``log(1 + sd)^2``); 0 with a history (it has its own)."""
    return math.log1p(instance_sd) ** 2 if instance_sd > 0.0 and history is None else 0.0


def _smallest(start: int, decides: Callable[[int], bool]) -> int | None:
    """The smallest total in ``[start, _NEEDED_CAP]`` for which ``decides`` holds, by doubling then bisection (the
    half-width shrinks as repeats grow, nearly monotone: a longer design spends alpha on a few more looks); None when
    no doubling up to the cap does."""
    low, high = start, max(start, 1)
    while not decides(high):
        if high >= _NEEDED_CAP:
            return None
        low, high = high + 1, min(_NEEDED_CAP, high * 2)
    while low < high:
        mid = (low + high) // 2
        if decides(mid):
            high = mid
        else:
            low = mid + 1
    return high
