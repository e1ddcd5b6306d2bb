"""Which of several measured points is best, with its evidence: the leader, the points the measurements cannot tell
apart from it (ties), and whether a gap is large enough, and measured well enough, to recommend a change.

Data in, decision out: each point is a :class:`Sample` of per-repeat values on one basis (output tok/s per repeat,
or the per-pair speedup ratio to a paired no-speculation arm, ``pairing.py``). Usage::

    ranking = rank([Sample("eagle3@num_steps=1", (90.1, 91.0, 89.5)), Sample("eagle3@num_steps=2", (99.0, ...))])
    ranking.leader, ranking.tied, ranking.decided
    judged = judge_gap(ranking, "eagle3@num_steps=1", max_gap=0.05)   # the configured point against the leader

The method (Welch 1947; Bonferroni; power by the noncentral t, all from ``scipy.stats``):

- Values are compared on the log scale (a throughput or a speedup ratio is multiplicative: a 10 % gap is the same
  shift at 50 and at 500 tok/s). The leader is the point with the highest mean log value (geometric mean).
- A point is *separated* from the leader when the one-sided Welch t-test (``scipy.stats.ttest_ind(equal_var=False,
  alternative="greater")``) of "leader above it" has p <= ``alpha`` after Bonferroni over the k - 1 comparisons
  with the leader (the leader is picked after looking, so each comparison is made at ``alpha / (k - 1)``: the chance
  that any point is called worse when all are equal stays <= ``alpha``). Points not separated are *tied*.
- A recommendation (:func:`judge_gap`) needs the configured point separated from the leader by *more than* the
  allowed gap: the same test with the null "gap <= max_gap" (the leader's log values shifted down by
  ``-log(1 - max_gap)``). A gap that is measured but not shown to exceed the allowance recommends nothing.
- With fewer than 2 values at any point there is no spread to test against: nothing is ranked (``decided`` is
  False). :func:`repeats_needed` says how many repeats per point would separate the observed gap at the observed
  spread (one-sided two-sample t-test, power 0.8, at the Bonferroni level).

Why not a rank test: with 3 repeats per point the exact Mann-Whitney U test cannot go below p = 1/20 = 0.05 even for
complete separation, so at ``0.05 / (k - 1)`` it could never separate anything; the t-test uses the size of the gap
against the spread. Repeats are measured within one server instance per point, so spread between instances (a GPU
server restarted) is not seen by them; a paired speedup cancels the load of the minutes it was measured in, not that.
So a sweep ranks with ``rank(instance_sd=)``: each comparison's variance also carries ``2 log(1 + instance_sd)^2``
(:func:`instance_separation`, :func:`instance_within`), which no number of repeats averages out (:func:`endless_gap`).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

__all__ = [
    "ALPHA",
    "GapVerdict",
    "POWER",
    "Ranking",
    "Sample",
    "Separation",
    "endless_gap",
    "instance_separation",
    "instance_within",
    "judge_gap",
    "rank",
    "repeats_needed",
    "separation",
    "shown_within",
    "within",
]

#: Family-wise significance level of a ranking (one-sided).
ALPHA = 0.05
#: Power aimed at by :func:`repeats_needed`.
POWER = 0.8
#: :func:`repeats_needed` gives up above this many repeats per point.
MAX_REPEATS = 100


@dataclass(frozen=True, slots=True)
class Sample:
    """One point's values on the ranking basis: per-repeat output tok/s, or per-pair speedup ratios (> 0)."""

    name: str
    values: tuple[float, ...]

    @property
    def logs(self) -> list[float]:
        return [math.log(v) for v in self.values if v > 0 and math.isfinite(v)]

    @property
    def center(self) -> float | None:
        """Geometric mean of the values (the leader is the highest); None without a positive value."""
        logs = self.logs
        return math.exp(sum(logs) / len(logs)) if logs else None


@dataclass(frozen=True, slots=True)
class Separation:
    """The leader against one other point (:func:`separation`)."""

    other: str
    #: Fraction the other point is below the leader: 1 - center(other) / center(leader); 0.123 = 12.3 %.
    gap: float
    #: One-sided Welch p of "leader above other by more than ``allowed``", Bonferroni-adjusted (x comparisons,
    #: capped at 1); None when a side has fewer than 2 values.
    p_value: float | None
    #: The allowed gap the null was shifted by (0 for a tie test).
    allowed: float = 0.0
    #: Bonferroni factor (comparisons with the leader).
    comparisons: int = 1

    def separated(self, alpha: float = ALPHA) -> bool:
        return self.p_value is not None and self.p_value <= alpha

    def describe(self) -> str:
        """``p=0.004`` (adjusted), or ``no spread`` when a side has one value."""
        return "no spread" if self.p_value is None else f"p={self.p_value:.2g}"


@dataclass(frozen=True, slots=True)
class Ranking:
    """:func:`rank`'s decision over one group of comparable points."""

    samples: tuple[Sample, ...]
    #: The point with the highest geometric mean; None when no point has a positive value.
    leader: str | None
    #: The leader against every other point (tie test: allowed gap 0), in sample order.
    separations: tuple[Separation, ...]
    #: False when a point has fewer than 2 values: no spread to test, nothing ranked, ``tied`` is every point.
    decided: bool
    #: Spread of log values (about the relative sigma, 0.05 = 5 %): pooled within repeats (of the points and
    #: ``spread_from``), else across points (an upper bound: real differences count as spread); None with too few
    #: values.
    sigma: float | None
    #: "within repeats" | "across points" | "" (no sigma).
    sigma_source: str
    alpha: float = ALPHA
    #: The relative sd between server instances of one config the separations count (:func:`instance_separation`;
    #: 0: the repeats alone, Welch's test).
    instance_sd: float = 0.0

    @property
    def tied(self) -> tuple[str, ...]:
        """The points not separated from the leader (leader excluded); every other point when undecided."""
        return tuple(s.other for s in self.separations if not (self.decided and s.separated(self.alpha)))

    @property
    def min_values(self) -> int:
        return min((len(s.logs) for s in self.samples), default=0)

    def sample(self, name: str) -> Sample | None:
        return next((s for s in self.samples if s.name == name), None)

    def need(self, gap: float) -> int | None:
        """:func:`repeats_needed` for ``gap`` at this ranking's spread, comparisons and instance sd."""
        if self.sigma is None:
            return None
        return repeats_needed(gap, self.sigma, comparisons=max(len(self.samples) - 1, 1), alpha=self.alpha,
                              instance_sd=self.instance_sd)  # fmt: skip

    def beyond_repeats(self, gap: float) -> bool:
        """True when no number of repeats separates ``gap`` at this ranking's instance sd (:func:`endless_gap`)."""
        m = max(len(self.samples) - 1, 1)
        return self.instance_sd > 0.0 and gap <= endless_gap(self.instance_sd, comparisons=m, alpha=self.alpha)


def _sd(logs: Sequence[float]) -> float:
    mean = sum(logs) / len(logs)
    return math.sqrt(sum((x - mean) ** 2 for x in logs) / (len(logs) - 1))


def separation(leader: Sample, other: Sample, *, allowed: float = 0.0, comparisons: int = 1) -> Separation:
    """Is ``leader`` above ``other`` by more than ``allowed`` (a fraction below the leader)?

    One-sided Welch t-test on log values (``scipy.stats.ttest_ind(equal_var=False, alternative="greater")``) of the
    leader's logs shifted by ``log(1 - allowed)`` against the other's; the p-value is multiplied by ``comparisons``
    (Bonferroni) and capped at 1. Both sides without spread (identical repeats): p = 0 when the shifted leader is
    above, else 1.

    Example: leader (100, 101, 99), other (90, 91, 89), allowed 0: gap 10.0 %, p ~ 2e-4.

    :param allowed: the gap under the null, in [0, 1); 0 tests "any gap".
    :param comparisons: the Bonferroni factor (how many points the leader was compared with), >= 1.
    :raises ValueError: ``allowed`` outside [0, 1) or ``comparisons`` < 1.
    """
    return _welch(leader, other, allowed, comparisons, within=False)


def within(leader: Sample, other: Sample, *, allowed: float, comparisons: int = 1) -> Separation:
    """Is ``other`` shown to be *less* than ``allowed`` below ``leader``? The reverse of :func:`separation`: the
    null "gap >= allowed", the one-sided Welch t-test of the other's log values shifted up by ``-log(1 - allowed)``
    above the leader's; Bonferroni-adjusted as there. A gap inside the allowance passes only on this test: a point
    estimate inside it, with an interval that reaches beyond, is not shown within.

    Example: leader (100, 101, 99), other (99, 100, 98), allowed 5%: gap 1.0 %, p ~ 0.004.

    :raises ValueError: ``allowed`` outside [0, 1) or ``comparisons`` < 1.
    """
    return _welch(leader, other, allowed, comparisons, within=True)


def _checked_gap(leader: Sample, other: Sample, allowed: float, comparisons: int) -> float:
    """The other point's gap below the leader (a fraction), after checking the test's arguments (``ValueError``)."""
    if not 0.0 <= allowed < 1.0:
        raise ValueError(f"allowed gap {allowed!r}: expected a fraction in [0, 1)")
    if comparisons < 1:
        raise ValueError(f"comparisons {comparisons!r}: expected >= 1")
    ca, cb = leader.center, other.center
    return 1.0 - cb / ca if ca and cb else 0.0


def _welch(leader: Sample, other: Sample, allowed: float, comparisons: int, *, within: bool) -> Separation:
    gap = _checked_gap(leader, other, allowed, comparisons)
    if len(leader.logs) < 2 or len(other.logs) < 2:
        return Separation(other.name, gap, None, allowed, comparisons)
    shift = math.log(1.0 - allowed)
    # separation: leader + log(1 - allowed) above other; within: other - log(1 - allowed) above leader.
    high, low = ([x - shift for x in other.logs], leader.logs) if within else ([x + shift for x in leader.logs],
                                                                               other.logs)  # fmt: skip
    if _sd(high) == 0.0 and _sd(low) == 0.0:
        p = 0.0 if sum(high) / len(high) > sum(low) / len(low) else 1.0
    else:
        from scipy import stats as sps

        p = float(sps.ttest_ind(high, low, equal_var=False, alternative="greater").pvalue)
    return Separation(other.name, gap, min(p * comparisons, 1.0), allowed, comparisons)


def instance_separation(
    leader: Sample, other: Sample, *, allowed: float, comparisons: int, instance_sd: float
) -> Separation:
    """:func:`separation` with each point's server instance counted: every point of a sweep is measured on a server
    of its own, and instances of one config differ by more than the repeats within one show (``instance_sd``: the
    relative sd between instances, ``judge.compare.assumed_instance_sd``). The difference of the two mean logs has
    variance ``s_a^2/n_a + s_b^2/n_b + 2 log(1 + instance_sd)^2``; one-sided t with Welch-Satterthwaite degrees of
    freedom, the instance part taken as known (infinite degrees of freedom: normal when the repeats have no
    spread); Bonferroni as :func:`separation`. (An adversarial trial: unchanged num_steps sweeps on a busy 2-core
    runner failed 2 of 6 runs on within-repeat Welch p of 0.007 and 0.045, recommending 4 steps, then 2.)

    :param instance_sd: the relative sd between server instances, >= 0 (0.07 = 7 %); 0 gives Welch's test.
    :raises ValueError: as :func:`separation`, or ``instance_sd`` < 0.
    """
    return _instance_test(leader, other, allowed, comparisons, instance_sd, within=False)


def instance_within(
    leader: Sample, other: Sample, *, allowed: float, comparisons: int, instance_sd: float
) -> Separation:
    """:func:`within` with each point's server instance counted as in :func:`instance_separation`: is ``other``
    shown less than ``allowed`` below ``leader`` beyond how server instances of one config differ? A sweep's
    configured point passes only on this test (helper-77's trial saw ``num_steps=2,6`` "separated" at 3 repeats a
    point and reversed at 12: repeats within one server do not see the spread between servers).

    Example: leader (100, 101, 99), other (99, 100, 98), allowed 5%, 1 comparison: p ~ 0.004 at ``instance_sd`` 0,
    ~ 0.007 at 1%, ~ 0.33 at 7%.

    :raises ValueError: as :func:`instance_separation`.
    """
    return _instance_test(leader, other, allowed, comparisons, instance_sd, within=True)


def shown_within(
    leader: Sample,
    other: Sample,
    *,
    comparisons: int,
    instance_sd: float,
    alpha: float = ALPHA,
    at_gap: float | None = None,
    endless: bool = False,
) -> float | None:
    """The smallest allowance :func:`instance_within` shows ``other`` inside at ``alpha`` (a fraction below
    ``leader``): what the run could have told apart, for a line that cannot say "within" at the allowance asked
    for. Solves ``p(allowed) = alpha`` for ``allowed``: ``1 - exp(d - q sqrt(var))``, d the difference of the mean
    logs (other minus leader), q the t (normal) quantile at ``alpha / comparisons``.

    Example: leader (100, 101, 99), other (99, 100, 98), 1 comparison: ~ 0.027 (2.7 %) at ``instance_sd`` 0,
    ~ 0.15 at 7%.

    :param at_gap: the gap to take instead of the measured one (0: equal points, what an allowance must be to show
        them within at this spread, whatever this run's estimate of the gap).
    :param endless: at endless repeats of both points at the measured gap: the repeats' part of the variance gone,
        ``2 log(1 + instance_sd)^2`` left, with the normal quantile (what no number of repeats narrows).
    :returns: the fraction in [0, 1) (0: shown not below the leader at all), or None when a side has fewer than 2
        values or nothing below 100 % is shown.
    :raises ValueError: ``comparisons`` < 1 or ``instance_sd`` < 0.
    """
    if comparisons < 1 or instance_sd < 0.0:
        raise ValueError(f"comparisons {comparisons!r} (expected >= 1), instance_sd {instance_sd!r} (expected >= 0)")
    moments = _moments(leader, other, instance_sd)
    if moments is None:
        return None
    diff, var, dof = moments
    if at_gap is not None:
        diff = -math.log(1.0 - at_gap)
    if endless:
        var, dof = 2.0 * math.log1p(instance_sd) ** 2, None
    from scipy import stats as sps

    level = alpha / comparisons
    q = float(sps.norm.isf(level)) if dof is None else float(sps.t.isf(level, dof))
    allowed = 1.0 - math.exp(-diff - q * math.sqrt(var))
    return None if allowed >= 1.0 else max(allowed, 0.0)


def _moments(leader: Sample, other: Sample, instance_sd: float) -> tuple[float, float, float | None] | None:
    """(mean log of leader - mean log of other, variance of that difference with two instances' spread, its
    Welch-Satterthwaite degrees of freedom or None when only the known instance part varies); None when a side has
    fewer than 2 values."""
    a, b = leader.logs, other.logs
    if len(a) < 2 or len(b) < 2:
        return None
    va, vb = _sd(a) ** 2 / len(a), _sd(b) ** 2 / len(b)
    var = va + vb + 2.0 * math.log1p(instance_sd) ** 2
    sampled = va**2 / (len(a) - 1) + vb**2 / (len(b) - 1)
    dof = None if sampled == 0.0 else var**2 / sampled
    return sum(a) / len(a) - sum(b) / len(b), var, dof


def _instance_test(
    leader: Sample, other: Sample, allowed: float, comparisons: int, instance_sd: float, *, within: bool
) -> Separation:
    if instance_sd < 0.0:
        raise ValueError(f"instance_sd {instance_sd!r}: expected >= 0")
    gap = _checked_gap(leader, other, allowed, comparisons)
    moments = _moments(leader, other, instance_sd)
    if moments is None:
        return Separation(other.name, gap, None, allowed, comparisons)
    diff, var, dof = moments
    # separation: leader + log(1 - allowed) above other; within: other - log(1 - allowed) above leader.
    excess = -(diff + math.log(1.0 - allowed)) if within else diff + math.log(1.0 - allowed)
    if var == 0.0:
        p = 0.0 if excess > 0 else 1.0
    else:
        from scipy import stats as sps

        t = excess / math.sqrt(var)
        p = float(sps.norm.sf(t)) if dof is None else float(sps.t.sf(t, dof))
    return Separation(other.name, gap, min(p * comparisons, 1.0), allowed, comparisons)


def rank(
    samples: Sequence[Sample], *, spread_from: Sequence[Sample] = (), alpha: float = ALPHA, instance_sd: float = 0.0
) -> Ranking:
    """Rank comparable points: the leader (highest geometric mean), which points are separated from it and which are
    tied (module docstring: Welch t on logs, Bonferroni over the k - 1 comparisons), and the spread.

    Undecided (``decided`` False) when a point has fewer than 2 values: then every point is tied. ``sigma`` is the
    pooled within-sample spread of the points and ``spread_from`` with 2 or more values; without any, the spread
    across the points' single values (an upper bound, for :func:`repeats_needed`).

    :param samples: one per point, names distinct; points without a positive value are left out.
    :param spread_from: samples measured like the points but not ranked (the no-speculation baseline's repeats):
        they only inform ``sigma``.
    :returns: the ranking; ``leader`` None and nothing decided when no point is left.
    """
    kept = tuple(s for s in samples if s.logs)
    if not kept:
        return Ranking((), None, (), False, None, "", alpha, instance_sd)
    leader = max(kept, key=lambda s: s.center or 0.0)
    others = [s for s in kept if s is not leader]
    m = max(len(others), 1)
    separations = tuple(
        instance_separation(leader, s, allowed=0.0, comparisons=m, instance_sd=instance_sd) if instance_sd > 0.0
        else separation(leader, s, comparisons=m)
        for s in others
    )  # fmt: skip
    decided = all(len(s.logs) >= 2 for s in kept)
    multi = [s.logs for s in (*kept, *spread_from) if len(s.logs) >= 2]
    if multi:
        dof = sum(len(x) - 1 for x in multi)
        pooled = sum(_sd(x) ** 2 * (len(x) - 1) for x in multi) / dof
        sigma, source = math.sqrt(pooled), "within repeats"
    elif len(kept) >= 2:
        sigma, source = _sd([s.logs[0] for s in kept]), "across points"
    else:
        sigma, source = None, ""
    return Ranking(kept, leader.name, separations, decided, sigma, source, alpha, instance_sd)


def repeats_needed(
    gap: float,
    sigma: float,
    *,
    comparisons: int = 1,
    alpha: float = ALPHA,
    power: float = POWER,
    instance_sd: float = 0.0,
) -> int | None:
    """Repeats per point for a one-sided two-sample t-test at ``alpha / comparisons`` to detect ``gap`` with
    probability ``power`` at log-scale spread ``sigma``: the smallest n >= 2 with
    ``1 - nct.cdf(t.ppf(1 - alpha', 2n - 2), 2n - 2, d sqrt(n / 2)) >= power``, d = -log(1 - gap) / sigma (the
    noncentral t, ``scipy.stats.nct``; Cohen, *Statistical Power Analysis*, 2nd ed., ch. 2). With ``instance_sd``
    (each point a server of its own, :func:`instance_separation`) the difference also carries ``2 log(1 +
    instance_sd)^2`` that no repeat shrinks: n is at least the normal approximation's ``2 sigma^2 / ((log-gap / (z_a +
    z_b))^2 - 2 log(1 + instance_sd)^2)``, and None for a gap at or below :func:`endless_gap`.

    Example: a 10 % gap at sigma 0.05, one comparison: d = 2.1, n = 4; at 7 % between instances: None.

    :returns: n, or None when the gap is not positive, sigma is not finite, more than :data:`MAX_REPEATS` would
        be needed, or no number would (``instance_sd``; :meth:`Ranking.beyond_repeats` tells which).
    """
    if not 0.0 < gap < 1.0 or not math.isfinite(sigma) or sigma < 0:
        return None
    from scipy import stats as sps

    level = alpha / max(comparisons, 1)
    floor = 2.0
    if instance_sd > 0.0:
        room = (-math.log(1.0 - gap) / (float(sps.norm.isf(level)) + float(sps.norm.isf(1.0 - power)))) ** 2
        room -= 2.0 * math.log1p(instance_sd) ** 2
        if room <= 0.0:
            return None
        floor = max(floor, math.ceil(2.0 * sigma**2 / room))
        if floor > MAX_REPEATS:
            return None
    if sigma == 0:
        return int(floor)
    d = -math.log(1.0 - gap) / sigma
    for n in range(2, MAX_REPEATS + 1):
        df = 2 * n - 2
        crit = sps.t.ppf(1.0 - level, df)
        if 1.0 - sps.nct.cdf(crit, df, d * math.sqrt(n / 2.0)) >= power:
            return max(n, int(floor))
    return None


def endless_gap(instance_sd: float, *, comparisons: int = 1, alpha: float = ALPHA, power: float = POWER) -> float:
    """The largest gap (a fraction) that no number of repeats separates with probability ``power`` at ``alpha /
    comparisons`` when server instances differ by ``instance_sd``: ``1 - exp(-(z_a + z_b) sqrt(2) log(1 +
    instance_sd))`` (the repeats' part of the variance gone).

    Example: 7 % between instances, 2 comparisons: ~ 0.24 (24 %); 2 %: ~ 0.075.
    """
    if instance_sd <= 0.0:
        return 0.0
    from scipy import stats as sps

    z = float(sps.norm.isf(alpha / max(comparisons, 1))) + float(sps.norm.isf(1.0 - power))
    return 1.0 - math.exp(-z * math.sqrt(2.0) * math.log1p(instance_sd))


@dataclass(frozen=True, slots=True)
class GapVerdict:
    """:func:`judge_gap`: the configured point against the leader."""

    #: "best" (it is the leader, and no other point is above it by the allowance or more: :func:`within`),
    #: "within" (shown less than the allowance below the leader: :func:`within`), "near" (inside the allowance on
    #: its estimate, or the leader with another point not shown within it: not shown, undecided), "tied" (beyond
    #: the allowance, not separated), "unproven" (separated, but not shown to exceed the allowance), "recommend"
    #: (shown to exceed it), "undecided" (no spread: fewer than 2 values on a side, whatever the gap).
    verdict: str
    gap: float = 0.0
    #: The test of "gap > allowed" (:func:`separation` with ``allowed``); None for "best".
    test: Separation | None = None
    #: Repeats per point that would separate the gap at the ranking's spread (:func:`repeats_needed`), for the
    #: verdicts that could not decide ("near", "tied", "unproven", "undecided"); None otherwise or when not
    #: computable.
    need: int | None = None
    #: "near" for the leader: the point not shown to be less than the allowance above it.
    rival: str = ""


def _within_need(ranking: Ranking, gap: float, max_gap: float) -> int | None:
    """Repeats per point that would show a ``gap`` inside ``max_gap`` to be within it: what must be separated is the
    distance to the allowance, ``1 - (1 - max_gap) / (1 - gap)`` as a fraction."""
    distance = 1.0 - (1.0 - max_gap) / (1.0 - gap)
    return ranking.need(distance) if distance > 0 else None


def judge_gap(ranking: Ranking, configured: Sample | str, *, max_gap: float) -> GapVerdict:
    """Should the configured point be changed to the leader? Only when the measurements show it more than
    ``max_gap`` below the leader (:func:`separation` with ``allowed=max_gap``, Bonferroni over the ranking's k - 1
    comparisons).

    :param configured: the configured point's sample, or its name among ``ranking.samples`` (a configured point
        that failed its thresholds is not ranked; pass its sample).
    :param max_gap: the allowed gap, a fraction in [0, 1).
    :raises ValueError: ``configured`` is a name not in the ranking, or the ranking has no leader.
    """
    if ranking.leader is None:
        raise ValueError("judge_gap: the ranking has no leader")
    sample = ranking.sample(configured) if isinstance(configured, str) else configured
    if sample is None:
        raise ValueError(f"judge_gap: {configured!r} is not a ranked point")
    m = max(len(ranking.samples) - 1, 1)
    if sample.name == ranking.leader:
        if not ranking.decided:
            return GapVerdict("best")  # its line says undecided: 1 repeat per point
        # The leader on its estimate: best only when no other point may be the allowance or more above it.
        rivals = [other for other in ranking.samples if other.name != sample.name]
        others = [within(other, sample, allowed=max_gap, comparisons=m) for other in rivals]
        worst = max(others, key=lambda t: (t.p_value if t.p_value is not None else 2.0), default=None)
        if worst is None or worst.separated(ranking.alpha):
            return GapVerdict("best")
        rival = next(o.name for o, t in zip(rivals, others, strict=True) if t is worst)
        return GapVerdict("near", 0.0, worst, _within_need(ranking, worst.gap, max_gap), rival)
    leader = ranking.sample(ranking.leader)
    assert leader is not None
    # A point outside the ranking (it failed its thresholds) is one comparison more.
    ranked = any(s.name == sample.name for s in ranking.samples)
    m = max(len(ranking.samples) - (1 if ranked else 0), 1)
    test = separation(leader, sample, allowed=max_gap, comparisons=m)
    tie = separation(leader, sample, comparisons=m)
    gap = test.gap
    # What a recommendation must show is the excess over the allowance, so that is what the repeats must separate.
    need = ranking.need(1.0 - (1.0 - gap) / (1.0 - max_gap)) if gap > max_gap else None
    if test.p_value is None or not ranking.decided:
        # No spread (1 repeat per point): a gap inside the allowance is no more shown than one beyond it.
        return GapVerdict("undecided", gap, test, need)
    if gap <= max_gap:
        shown = within(leader, sample, allowed=max_gap, comparisons=m)
        if shown.separated(ranking.alpha):
            return GapVerdict("within", gap, shown)
        return GapVerdict("near", gap, shown, _within_need(ranking, gap, max_gap))
    if not tie.separated(ranking.alpha):
        return GapVerdict("tied", gap, tie, need)
    if test.separated(ranking.alpha):
        return GapVerdict("recommend", gap, test)
    return GapVerdict("unproven", gap, test, need)
