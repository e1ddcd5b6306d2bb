"""Sweep points after the run: which records are points and which their baselines, their speedups, and their
ranking with its evidence (``ranking.py``), and whether the profile's configured point is too far below the best.

The points of one concurrency are ranked with their evidence: on the paired speedup when every point was measured
with its own baseline arm, else on per-repeat tok/s; a point not separated from the best is tied with it, and with 1
repeat per point nothing is ranked (the lines say how many repeats would decide). The configured point fails the run
only when shown to be more than ``--specdec-sweep-max-gap`` below the best, and passes only when shown within it; both
across server instances of one config too (each point is a server of its own), else it is undecided. The points come
from ``run.sweep_spec``; the table and the run's sweep summary are ``report.sweep_table``'s. Usage::

    points = sweep_records(records)
    groups = rank_points(points, thresholds_ok=thresholds_ok(records), baselines=baseline_records(records, None))
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass

from pytest_specdec.core.sweep_names import AT, SPECULATIVE_KEYS, SWEEP_KEYS, WORKLOAD_KEYS, point_label, split_name
from pytest_specdec.core.table import format_value
from pytest_specdec.judge import ranking
from pytest_specdec.judge.pair_ratios import paired_ratios
from pytest_specdec.measure.results import ResultRecord
from pytest_specdec.profiles.schema import Profile

__all__ = [
    "RankedGroup",
    "SPECULATIVE_KEYS",
    "SWEEP_KEYS",
    "WORKLOAD_KEYS",
    "baseline_records",
    "best_points",
    "concurrency_of",
    "load_label",
    "load_of",
    "rate_of",
    "configured_point_lines",
    "instance_sd_of",
    "instances_note",
    "method_note",
    "point_label",
    "rank_points",
    "repeats_note",
    "sample_of",
    "speedup",
    "speedup_reference",
    "split_name",
    "spread_note",
    "sweep_records",
    "thresholds_ok",
    "tok_s_range",
    "would_note",
]


def _one_per_profile(records: Iterable[ResultRecord]) -> list[ResultRecord]:
    """The first record of each profile, in run order (every test of a profile shares its measurement)."""
    seen: dict[str, ResultRecord] = {}
    for record in records:
        seen.setdefault(record.profile, record)
    return list(seen.values())


def sweep_records(records: Iterable[ResultRecord]) -> list[ResultRecord]:
    """One record per derived speculative profile (a sweep point), in run order."""
    return [
        r
        for r in _one_per_profile(records)
        if split_name(r.profile)[1] and r.fingerprint.get("speculative") is not None
    ]


def baseline_records(records: Iterable[ResultRecord], name: str | None) -> list[ResultRecord]:
    """The records speedups are computed against: one per profile named ``name`` or derived from it
    (``baseline@concurrency=8``); with ``name`` None, those of every profile without speculation
    (``fingerprint["speculative"]`` is None)."""
    out = []
    for record in _one_per_profile(records):
        base = split_name(record.profile)[0]
        if name is not None and base == name:
            out.append(record)
        elif name is None and record.fingerprint.get("speculative") is None:
            out.append(record)
    return out


def thresholds_ok(records: Iterable[ResultRecord]) -> dict[str, bool]:
    """Per profile: True when every specdec test of it passed (so its profile and marker thresholds, speedup and
    compare checks held), False when one failed or errored."""
    ok: dict[str, bool] = {}
    for record in records:
        ok[record.profile] = ok.get(record.profile, True) and record.outcome == "passed"
    return ok


def concurrency_of(record: ResultRecord) -> int | None:
    value = record.workload.get("concurrency")
    return int(value) if isinstance(value, int) else None


def rate_of(record: ResultRecord) -> float | None:
    """The record's open-loop ``request_rate`` (requests/s), None for a closed loop or an old record."""
    value = record.workload.get("request_rate")
    return float(value) if isinstance(value, int | float) and not isinstance(value, bool) else None


def load_of(record: ResultRecord) -> tuple[int, float]:
    """The load a point ran under, (concurrency, request rate), 0 for unknown and inf for a closed loop: points of
    different loads are not ranked against each other, and a speedup divides by the baseline of the same load."""
    rate = rate_of(record)
    return concurrency_of(record) or 0, float("inf") if rate is None else rate


def load_label(group: RankedGroup, groups: Sequence[RankedGroup]) -> str:
    """`` at concurrency 8``, `` at request_rate 4``, or both: what sets ``group`` apart from the other groups (empty
    with one group)."""
    if len(groups) < 2:
        return ""
    parts = []
    if len({g.concurrency for g in groups}) > 1:
        parts.append(f"concurrency {group.concurrency}")
    if len({g.request_rate for g in groups}) > 1:
        parts.append(f"request_rate {group.request_rate:g}" if group.request_rate is not None else "closed loop")
    return " at " + ", ".join(parts) if parts else ""


def speedup(record: ResultRecord, baselines: Sequence[ResultRecord]) -> float | None:
    """``output_tok_s`` of ``record`` / that of the baseline with the same workload concurrency (the only baseline
    when there is one); None without a matching baseline or with a zero baseline throughput.

    Example: 94.0 tok/s over a baseline of 88.8 tok/s -> 1.0586.

    A point measured with a paired baseline arm (``record.paired``, ``pairing.py``) gives the median of its per-pair
    ratios instead: phases measured minutes apart on a shared runner do not make a speedup.
    """
    ratios = paired_ratios(record, "output_tok_s")
    if ratios:
        return statistics.median(ratios)
    baseline = _baseline_of(record, baselines)
    if baseline is None:
        return None
    base = baseline.metrics.get("output_tok_s")
    value = record.metrics.get("output_tok_s")
    if not isinstance(base, int | float) or not isinstance(value, int | float) or base <= 0:
        return None
    return float(value) / float(base)


def speedup_reference(record: ResultRecord, baselines: Sequence[ResultRecord]) -> str | None:
    """The profile :func:`speedup` divided by: the paired arm's (``record.paired["vs"]``, a point paired with its
    ``min_speedup.vs`` profile, which need not be among ``baselines``), else the baseline of the same concurrency (the
    only one when there is one); None when there is none."""
    vs = (record.paired or {}).get("vs")
    if vs and paired_ratios(record, "output_tok_s"):
        return str(vs)
    baseline = _baseline_of(record, baselines)
    return baseline.profile if baseline is not None else None


def _baseline_of(record: ResultRecord, baselines: Sequence[ResultRecord]) -> ResultRecord | None:
    """The baseline of ``record``'s load (concurrency and request rate), else the only baseline when there is one,
    else None."""
    match = [b for b in baselines if load_of(b) == load_of(record)]
    if not match and len(baselines) == 1:
        match = list(baselines)
    return match[0] if match else None


def _passing(records: Iterable[ResultRecord], thresholds_ok: Mapping[str, bool]) -> list[ResultRecord]:
    """The points whose tests passed and that have a throughput (only they can be the best)."""
    return [
        r
        for r in records
        if thresholds_ok.get(r.profile, False) and isinstance(r.metrics.get("output_tok_s"), int | float)
    ]


def sample_of(record: ResultRecord, basis: str) -> ranking.Sample:
    """The point's values on a ranking basis: ``"paired speedup"``: its per-pair speedup ratios to the paired
    no-speculation arm (``pair_ratios.paired_ratios``); ``"tok/s"``: its per-repeat output tok/s
    (``ResultRecord.values``)."""
    if basis == "paired speedup":
        return ranking.Sample(record.profile, tuple(paired_ratios(record, "output_tok_s")))
    return ranking.Sample(record.profile, tuple(record.values("output_tok_s")))


def _basis(records: Sequence[ResultRecord]) -> str:
    """``paired speedup`` when every point carries paired ratios (each measured with its own baseline arm, so the
    load of its minutes cancels), else ``tok/s`` (a baseline measured apart divides every point by the same number
    and cannot change the order)."""
    if records and all(paired_ratios(r, "output_tok_s") for r in records):
        return "paired speedup"
    return "tok/s"


@dataclass(frozen=True, slots=True)
class RankedGroup:
    """The points of one load, workload concurrency and request rate (tok/s at different loads are not comparable:
    more requests in flight or arriving always raise throughput), and their :func:`ranking.rank` among those that
    passed."""

    concurrency: int | None
    #: Every point of the group, in run order.
    records: tuple[ResultRecord, ...]
    #: The passing points, ranked on ``basis``.
    ranked: tuple[ResultRecord, ...]
    basis: str
    ranking: ranking.Ranking
    #: The group's open-loop request rate (requests/s); None for a closed loop.
    request_rate: float | None = None

    def record(self, name: str | None) -> ResultRecord | None:
        return next((r for r in self.records if r.profile == name), None)

    @property
    def best(self) -> ResultRecord | None:
        """The leader when the ranking is decided (or it is the only passing point), else None."""
        if self.ranking.leader is None or not (self.ranking.decided or len(self.ranked) == 1):
            return None
        return self.record(self.ranking.leader)

    @property
    def tied(self) -> list[ResultRecord]:
        """The passing points not separated from the best (empty when there is no best)."""
        if self.best is None:
            return []
        return [r for r in self.ranked if r.profile in self.ranking.tied]


def rank_points(
    records: Sequence[ResultRecord], *, thresholds_ok: Mapping[str, bool], baselines: Sequence[ResultRecord] = ()
) -> list[RankedGroup]:
    """One :class:`RankedGroup` per load (``load_of``: concurrency, then request rate), in that order (one group
    without a concurrency or request_rate sweep); a group's passing points ranked by ``ranking.rank`` on their
    paired speedup when all have one, else their per-repeat tok/s (then the repeats of the baseline of the same load
    inform the spread).

    :param records: :func:`sweep_records`; :param thresholds_ok: :func:`thresholds_ok` (missing counts as not ok).
    :param baselines: :func:`baseline_records`.
    """
    groups: dict[tuple[int, float], list[ResultRecord]] = {}
    for record in records:
        groups.setdefault(load_of(record), []).append(record)
    out = []
    for _, group in sorted(groups.items()):
        passing = _passing(group, thresholds_ok)
        basis = _basis(passing)
        base = _baseline_of(group[0], baselines) if basis == "tok/s" else None
        spread_from = [sample_of(base, basis)] if base is not None else []
        # Each point is a server of its own: the ties count how instances of one config differ (instance_sd_of).
        sd = _instance_sd(passing, basis)[0] if passing else 0.0
        ranked = ranking.rank([sample_of(r, basis) for r in passing], spread_from=spread_from, instance_sd=sd)
        out.append(
            RankedGroup(concurrency_of(group[0]), tuple(group), tuple(passing), basis, ranked, rate_of(group[0]))
        )
    return out


def best_points(
    records: Sequence[ResultRecord], *, thresholds_ok: Mapping[str, bool], baselines: Sequence[ResultRecord] = ()
) -> list[ResultRecord]:
    """The best point per concurrency (:attr:`RankedGroup.best`: decided rankings only), in order of concurrency."""
    groups = rank_points(records, thresholds_ok=thresholds_ok, baselines=baselines)
    return [g.best for g in groups if g.best is not None]


def tok_s_range(record: ResultRecord) -> tuple[float, float] | None:
    """(min, max) of the point's per-repeat output tok/s (``ResultRecord.values``); None when it has none."""
    values = record.values("output_tok_s")
    return (min(values), max(values)) if values else None


def _configured(profile: Profile, keys: Iterable[str]) -> dict[str, float] | None:
    point: dict[str, float] = {}
    for key in keys:
        if key in WORKLOAD_KEYS:
            value: float | None = getattr(profile.workload, key)
        else:
            value = getattr(profile.speculative, key, None) if profile.speculative is not None else None
        if value is None:
            return None
        point[key] = value if key == "request_rate" else int(value)
    return point


def spread_note(group: RankedGroup) -> str:
    """``σ 5.1% within repeats`` / ``σ 23.1% across points, an upper bound``."""
    r = group.ranking
    if r.sigma is None:
        return "no spread"
    text = f"σ {r.sigma:.1%} {r.sigma_source}"
    return text + ", an upper bound" if r.sigma_source == "across points" else text


def would_note(
    need: int | None,
    what: str,
    ran: int = 1,
    *,
    inside_allowance: bool = False,
    verb: str = "separate",
    instances: str = "",
) -> str:
    """``7 repeats per point would separate <what> at this spread`` (or more than the cap). ``ran``: the repeats per
    point this run measured, which did not decide it: a power estimate on the pooled spread can ask for no more than
    that (the test is Welch's, on each point's own spread, with fewer degrees of freedom), and "2 repeats would
    separate" after 2 that did not reads as a contradiction (a fresh-user trial). ``inside_allowance``: the gap
    measured (on 1 repeat per point, no spread) is inside the allowance, so no repeat count is estimated: ``2 or
    more repeats per point would test it for <what>``. ``verb``: ``show`` for a gap to be shown inside the allowance.
    ``instances``: :func:`instances_note` when no number of repeats would (``ranking.Ranking.beyond_repeats``):
    ``no number of repeats per point would separate <what>: <instances>``."""
    if inside_allowance:
        return f"2 or more repeats per point would test it for {what}"
    if need is None and instances:
        return f"no number of repeats per point would {verb} {what}: {instances}"
    if need is None:
        return f"more than {ranking.MAX_REPEATS} repeats per point would be needed to {verb} {what}"
    if need <= ran:
        return f"more than the {ran} repeats per point run would {verb} {what}"
    return f"{need} repeats per point would {verb} {what} at this spread"


def repeats_note(group: RankedGroup) -> str:
    n = group.ranking.min_values
    return f"{n} repeat{'s' if n != 1 else ''} per point"


def method_note(group: RankedGroup, comparisons: int | None = None, *, instances: bool = False) -> str:
    """The test behind a decision, for the lines that state one (``comparisons``: the Bonferroni factor used;
    ``instances``: the ranking's own test, which counts the spread between server instances, ``ranking.rank``)."""
    m = comparisons or max(len(group.ranked) - 1, 1)
    sd, where = instance_sd_of(group)
    if instances and group.ranking.instance_sd > 0.0:
        return (f"one-sided t-test on log {group.basis}, {sd:.0%} assumed between server instances{where}, "
                f"Bonferroni x{m}, {repeats_note(group)}")  # fmt: skip
    return f"one-sided Welch t-test on log {group.basis}, Bonferroni x{m}, {repeats_note(group)}"


def instances_note(group: RankedGroup, gap: float) -> str:
    """Why more repeats would not decide ``gap`` (``""`` when they might: ``ranking.Ranking.beyond_repeats``):
    ``server instances of one config differ by 7% (as assumed), which repeats do not average out; a paired sweep (a
    min_speedup threshold in the profile) would decide it``, the paired sweep named for an unpaired one, a quieter
    runner for a busy one, each where its spread separates ``gap`` (:func:`_beyond_repeats_ways`)."""
    if not group.ranking.beyond_repeats(gap):
        return ""
    sd, where = instance_sd_of(group)
    m = max(len(group.ranked) - 1, 1)
    ways = _beyond_repeats_ways(group, decides=lambda at: gap > ranking.endless_gap(at, comparisons=m))
    text = f"server instances of one config differ by {sd:.0%}{where} (as assumed), which repeats do not average out"
    text = f"{text}; {' or '.join(ways)} would decide it" if ways else text
    return text + _no_paired_sweep(group, ways, m)


def _paired_sd(group: RankedGroup) -> float:
    """The spread between instances a paired sweep of the group's points would take (2% on a CPU, 13% busy)."""
    return _instance_sd(group.ranked, "paired speedup")[0]


def _quiet_sd(group: RankedGroup) -> float:
    """The spread between instances a quiet CPU runner takes for the group's basis (7% tok/s, 2% paired): what "a
    quieter runner" would judge a busy runner's gap at."""
    from pytest_specdec.judge import compare

    key = "output_tok_s / baseline" if group.basis == "paired speedup" else "output_tok_s"
    return compare.assumed_instance_sd(key)


#: The way :func:`_beyond_repeats_ways` names a paired sweep.
_PAIRED_SWEEP = "a paired sweep (a min_speedup threshold in the profile)"


def _beyond_repeats_ways(group: RankedGroup, *between: str, decides: Callable[[float], bool]) -> list[str]:
    """What decides a gap the spread between server instances holds open, in the order the lines say it: a paired
    sweep (for an unpaired one: 2% between instances, not 7%), ``between`` (an allowance), a quieter runner (on a busy
    one), the first and last only where ``decides`` holds at their spread (:func:`_paired_sd`, :func:`_quiet_sd`):
    helper-81 followed "a paired sweep would decide it" for a 3.8% gap and the paired sweep's own line said no number
    of repeats would; a live paired sweep on a busy runner offered a quieter runner for a 2.4% gap to show within 5%,
    which 2% between instances does not."""
    ways = [_PAIRED_SWEEP] if group.basis != "paired speedup" and decides(_paired_sd(group)) else []
    ways.extend(between)
    if instance_sd_of(group)[1] == " on this busy runner" and decides(_quiet_sd(group)):
        ways.append("a quieter runner")
    return ways


def _no_paired_sweep(group: RankedGroup, ways: Sequence[str], comparisons: int) -> str:
    """``; a paired sweep would not decide it either: it separates gaps beyond ~6.7% only (2% between instances)``
    for an unpaired group whose ``ways`` (:func:`_beyond_repeats_ways`) leave the paired sweep out
    (``ranking.endless_gap`` at :func:`_paired_sd`), ``""`` otherwise."""
    if group.basis == "paired speedup" or _PAIRED_SWEEP in ways:
        return ""
    sd = _paired_sd(group)
    endless = ranking.endless_gap(sd, comparisons=comparisons)
    return (f"; a paired sweep would not decide it either: it separates gaps beyond ~{endless:.1%} only ({sd:.0%} "
            "between instances)")  # fmt: skip


def instance_sd_of(group: RankedGroup) -> tuple[float, str]:
    """The relative sd between server instances of one config that a sweep's points, each on a server of its own,
    are judged with, and where it applies (``""``, ``" on a GPU host"``, ``" on this busy runner"``):
    ``judge.compare.assumed_instance_sd`` for ``output_tok_s`` (a ``tok/s`` basis) or its paired ratio (``paired
    speedup``), as the compare takes them: 7 % raw and 2 % paired on a CPU, 14 % raw on a GPU host, 68 % raw and 13 %
    paired on a busy CPU runner (``hoststate.oversubscribed``)."""
    return _instance_sd(group.ranked, group.basis)


def _instance_sd(records: Sequence[ResultRecord], basis: str) -> tuple[float, str]:
    from pytest_specdec.core import hoststate
    from pytest_specdec.judge import compare

    gpu = compare.measured_on_gpu(*records)
    busy = None if gpu else hoststate.oversubscribed(*(r.fingerprint.get("runner") for r in records))
    key = "output_tok_s / baseline" if basis == "paired speedup" else "output_tok_s"
    where = " on a GPU host" if gpu else " on this busy runner" if busy is not None else ""
    return compare.assumed_instance_sd(key, gpu=gpu, busy_cpu=busy is not None), where


def _beyond_instances(
    group: RankedGroup, leader: ResultRecord, sample: ranking.Sample, max_gap: float, test: ranking.Separation | None
) -> str:
    """``""`` when a recommended gap also stands beyond how server instances of one config differ
    (:func:`ranking.instance_separation` at :func:`instance_sd_of`), else the undecided line that replaces it."""
    assert test is not None
    best = group.ranking.sample(leader.profile)
    assert best is not None
    sd, where = instance_sd_of(group)
    held = ranking.instance_separation(best, sample, allowed=max_gap, comparisons=test.comparisons, instance_sd=sd)
    if held.separated(group.ranking.alpha):
        return ""
    excess = 1.0 - (1.0 - test.gap) / (1.0 - max_gap)  # what a recommendation must separate
    m = test.comparisons
    ways = _beyond_repeats_ways(group, decides=lambda at: excess > ranking.endless_gap(at, comparisons=m))
    decide = f"; {' or '.join(ways)} would decide it" if ways else ""
    return (
        f"configured point {_figured(sample.name, sample, group)} is {test.gap:.1%} below the highest "
        f"{_figured(leader.profile, best, group)}: undecided: beyond the "
        f"allowed {max_gap:.0%} between the two servers' repeats ({test.describe()}), not beyond how server instances "
        f"of one config differ ({held.describe()}, {sd:.0%} assumed between instances{where}, "
        f"{method_note(group, test.comparisons)}){decide}{_no_paired_sweep(group, ways, m)}; not failed"
    )


def _ways_to_decide(
    group: RankedGroup, leader: ranking.Sample, sample: ranking.Sample, max_gap: float, comparisons: int, sd: float
) -> str:
    """What this run shows and what would decide a configured point (``sample``) not shown within ``max_gap`` of
    ``leader`` across server instances: ``this run shows it within 19.1%`` (:func:`ranking.shown_within`), ``and more
    repeats alone would show no less than 18.4% at this gap and that instance spread`` (``more repeats would not
    narrow it`` when that is within a point of what it shows) when even endless repeats at the measured gap could
    not show ``max_gap`` (``ranking.shown_within(endless=True)``: the repeats' part of the variance gone), then a
    paired sweep (unpaired only), an allowance within which both this run and equal points at this spread are shown
    (``--specdec-sweep-max-gap``; not this run's estimate of the gap alone, which the next run does not repeat), a
    quieter runner (busy only)."""
    alpha = group.ranking.alpha
    shown = ranking.shown_within(leader, sample, comparisons=comparisons, instance_sd=sd, alpha=alpha)
    said = [f"this run shows it within {shown:.1%}"] if shown is not None else []

    def endless_at(at: float) -> float | None:  # what endless repeats would show it within at that spread
        return ranking.shown_within(leader, sample, comparisons=comparisons, instance_sd=at, alpha=alpha, endless=True)

    endless = endless_at(sd)
    if endless is not None and endless >= max_gap:
        said.append("more repeats would not narrow it: the spread between instances dominates"
                    if shown is not None and shown - endless < 0.01 else
                    f"more repeats alone would show no less than {endless:.1%} at this gap and that instance spread")
    # Not this run's estimate of the gap alone: helper-79 followed a suggested 9% (from a configured point measured
    # 14% above) and the next run, 1% above, could not show 9%. At least what equal points are shown within.
    equal = ranking.shown_within(leader, sample, comparisons=comparisons, instance_sd=sd, alpha=alpha, at_gap=0.0)
    allowance = max((v for v in (shown, equal) if v is not None), default=None)

    def decides(at: float) -> bool:
        shown_at = endless_at(at)
        return shown_at is not None and shown_at < max_gap

    ways = _beyond_repeats_ways(group, *(
        [f"--specdec-sweep-max-gap {math.ceil(allowance * 100)} (within it both this run and equal points at this "
         "spread would be shown)"] if allowance is not None else []
    ), decides=decides)  # fmt: skip
    decide = f"{' or '.join(ways)} would decide it"
    paired_sd = _paired_sd(group)
    paired = endless_at(paired_sd)
    if group.basis != "paired speedup" and _PAIRED_SWEEP not in ways and paired is not None:
        # helper-81: a paired sweep followed as told was undecided again (3.8% apart, 5% allowed, 2% between them).
        decide += (f"; a paired sweep would not: at this gap and {paired_sd:.0%} between instances it would show no "
                   f"less than {paired:.1%}")  # fmt: skip
    return f"{', and '.join(said)}; {decide}" if said else decide


def _within_instances(
    group: RankedGroup,
    leader: ranking.Sample,
    sample: ranking.Sample,
    max_gap: float,
    test: ranking.Separation,
    head: str,
) -> tuple[str, bool]:
    """(line, passed): is ``sample`` (the configured point) shown within ``max_gap`` of ``leader`` also beyond how
    server instances of one config differ (:func:`ranking.instance_within` at :func:`instance_sd_of`)? ``test``: the
    within-repeats test that passed; ``head``: the line's start (``configured point X is 1.6% below the sweep's best
    Y``). Passed: ``<head>, within the allowed 5% (p=0.01 across server instances, 2% assumed between them, <method>)``;
    else the undecided line with what this run shows and what would decide."""
    sd, where = instance_sd_of(group)
    m = test.comparisons
    held = ranking.instance_within(leader, sample, allowed=max_gap, comparisons=m, instance_sd=sd)
    if held.separated(group.ranking.alpha):
        # The instance-aware test decided it, and the method said is that one (it read "Welch" beside it).
        return (f"{head}, within the allowed {max_gap:.0%} ({held.describe()} across server instances, "
                f"{method_note(group, m, instances=True)})"), True  # fmt: skip
    return (
        f"{head}: undecided: within the allowed {max_gap:.0%} between the two servers' repeats ({test.describe()}), "
        f"not across server instances of one config ({held.describe()}, {sd:.0%} assumed between instances{where}, "
        f"{method_note(group, m)}): {_ways_to_decide(group, leader, sample, max_gap, m, sd)}; not failed"
    ), False


def _best_across_instances(group: RankedGroup, sample: ranking.Sample, max_gap: float) -> tuple[str, bool]:
    """(line, passed) for a configured point that leads on its repeats and is shown within ``max_gap`` of no point
    above it there (``ranking.judge_gap``'s "best"): passed when no other point may be ``max_gap`` or more above it
    across server instances too (:func:`ranking.instance_within` of each other point at :func:`instance_sd_of`, the
    least shown deciding): ``configured point X is the sweep's best``, or for a leader tied with other points ``... has
    the highest paired speedup: no other point is the allowed 5% or more above it (p=0.02 for Y, the least shown,
    <method>)`` (helper-80 read "within the allowed 5% of every other point" beside a point 19% below it); else the
    undecided line naming the point it is not shown within ``max_gap`` of."""
    sd, where = instance_sd_of(group)
    m = max(len(group.ranking.samples) - 1, 1)
    rivals = [other for other in group.ranking.samples if other.name != sample.name]
    tests = [(ranking.instance_within(o, sample, allowed=max_gap, comparisons=m, instance_sd=sd), o) for o in rivals]
    held, rival = max(tests, key=lambda pair: pair[0].p_value if pair[0].p_value is not None else 2.0)
    # Named with their figures, as every configured-point line names its points (helper-81: "is the sweep's best"
    # alone beside lines that give them).
    me, them = _figured(sample.name, sample, group), _figured(rival.name, rival, group)
    if held.separated(group.ranking.alpha) and not group.ranking.tied:
        return f"configured point {me} is the sweep's best", True
    if held.separated(group.ranking.alpha):  # not shown above the points it is tied with: none is the allowance above
        return (f"configured point {me} has the highest {group.basis}: no other point is the allowed "
                f"{max_gap:.0%} or more above it ({held.describe()} for {them}, the least shown, "
                f"{method_note(group, m, instances=True)})"), True  # fmt: skip
    repeats = ranking.within(rival, sample, allowed=max_gap, comparisons=m)
    return (
        f"configured point {me} has the highest {group.basis}: undecided: within the allowed {max_gap:.0%} of "
        f"every other point between the servers' repeats (of {them}: {repeats.describe()}), not shown within it "
        f"of {rival.name} across server instances of one config ({held.describe()}, {sd:.0%} assumed between "
        f"instances{where}, {method_note(group, m)}): {_ways_to_decide(group, rival, sample, max_gap, m, sd)}; "
        "not failed"
    ), False


def _or_ties(group: RankedGroup, configured: str) -> str:
    """`` (or a point tied with it: eagle3@num_steps=2)`` where the leader a recommendation names is not separated
    from other points (helper-79: "set num_steps: 3" for a leader tied with 2 steps at p=0.53); ``""`` otherwise."""
    ties = [r.profile for r in group.tied if r.profile != configured]
    return f" (or a point tied with it: {', '.join(ties)})" if ties else ""


def _figured(name: str, sample: ranking.Sample | None, group: RankedGroup) -> str:
    """``eagle3@num_steps=3 (204.0 tok/s)``: a point named with the figure its gap in a line is of, the geometric mean
    of its repeats on the ranking basis (helper-80 read a line's 1.9% beside the table's medians, 1.2% apart, with
    no figure to tell them apart); the name alone without a sample."""
    return f"{name} ({_shown(sample.center, group.basis)})" if sample is not None else name


def _shown(center: float | None, basis: str) -> str:
    """A point's geometric mean on the ranking basis: ``92.1 tok/s`` or ``1.21x paired speedup``."""
    if basis == "paired speedup":
        return f"{format_value('{:.2f}', center)}x paired speedup"
    return f"{format_value('{:.1f}', center)} tok/s"


def configured_point_lines(
    records: Sequence[ResultRecord],
    profiles: Mapping[str, Profile],
    *,
    thresholds_ok: Mapping[str, bool],
    max_gap: float,
    baselines: Sequence[ResultRecord] = (),
) -> tuple[list[str], list[str], list[str]]:
    """Is the profile's configured point (its own num_steps/topk/draft tokens/concurrency) within ``max_gap`` of the
    sweep's best? The check the original incident needed: 2 steps beat the 5 configured, and nothing said so.

    Per concurrency group (:func:`rank_points`) with a leader: the configured point of the leader's base profile,
    judged by ``ranking.judge_gap``: the run fails (a recommendation) only when the measurements show the configured
    point more than ``max_gap`` below the leader (one-sided Welch t-test on log values, Bonferroni over the group's
    comparisons), and passes ("within", "the sweep's best") only when they show it inside ``max_gap``; each also
    across server instances (``ranking.instance_separation``, ``ranking.instance_within`` at :func:`instance_sd_of`),
    else undecided with what this run shows and what would decide. Tied, not shown beyond the allowance, or
    undecided (1 repeat per point) recommends nothing and says how many repeats per point would decide
    (``ranking.repeats_needed``).

    :param profiles: the session's profiles by name (the base profiles, before sweep expansion).
    :param max_gap: the largest allowed gap as a fraction (0.05 = 5 %).
    A configured point that failed its thresholds is not ranked (its test fails on them already): its line says so.
    A configured point outside the swept points is undecided (its gap was not measured), with the points to add.

    :returns: (lines for the table, the failing ones among them, the undecided ones among them), e.g. failing:
        ``configured point eagle3@num_steps=5 (92.1 tok/s) is 12.3% below the sweep's best eagle3@num_steps=2
        (105.0 tok/s), more than the allowed 5% (--specdec-sweep-max-gap); set num_steps: 2 in profile eagle3
        [p=0.004: one-sided Welch t-test on log tok/s, Bonferroni x3, 3 repeats per point]``.
    """
    lines: list[str] = []
    failing: list[str] = []
    undecided: list[str] = []
    groups = rank_points(records, thresholds_ok=thresholds_ok, baselines=baselines)
    for group in groups:
        leader = group.record(group.ranking.leader)
        if leader is None:
            continue
        base, point = split_name(leader.profile)
        profile = profiles.get(base)
        configured = _configured(profile, point) if profile is not None else None
        if configured is None:
            continue
        if any(k in point and configured[k] != point[k] for k in WORKLOAD_KEYS):
            continue  # the configured point belongs to another load's group
        name = f"{base}{AT}{point_label(configured)}"
        conf = group.record(name)
        decided = group.ranking.decided or len(group.ranked) == 1
        # "best" only for a leader separated from every other point; one tied with others is "the highest".
        best = "the sweep's best" if decided and not group.ranking.tied else "the highest"
        if conf is None:
            # Undecided, not silent: the gap this check exists for was never measured (helper-76's trial read exit
            # 0 under --specdec-undecided=fail with nothing counted).
            line = (f"configured point {name} was not swept; not compared with {best} {leader.profile}: undecided; "
                    f"a sweep with {point_label(configured)} among its points would compare it; not failed")
            lines.append(line)
            undecided.append(line)
            continue
        if not any(r is conf for r in group.ranked):
            # A point that failed a floor is left out of the ranking; its tok/s gap to the leader means nothing.
            lines.append(f"configured point {name} failed its thresholds, so it is not ranked; the highest point "
                         f"that passes them is {leader.profile}")  # fmt: skip
            continue
        sample = group.ranking.sample(name) or sample_of(conf, group.basis)
        judged = ranking.judge_gap(group.ranking, sample, max_gap=max_gap)
        test = judged.test
        allowed = f"the allowed {max_gap:.0%}"
        if judged.verdict == "best" and len(group.ranked) == 1:
            # Nothing compared: the only point (a one-point sweep) or the only one that met the thresholds.
            alone = len(group.records) == 1
            line = (f"configured point {name} is the only point swept{load_label(group, groups)}: not compared; "
                    "undecided; a sweep with other points would compare it; not failed" if alone else
                    f"configured point {name} is the only point that met the thresholds")  # fmt: skip
            if alone:
                undecided.append(line)
        elif judged.verdict == "best" and decided:
            line, passed = _best_across_instances(group, sample, max_gap)
            if not passed:
                undecided.append(line)
        elif judged.verdict == "best":  # the highest on too few repeats to rank: not shown to be the best
            line = f"configured point {name} has the highest {group.basis}; undecided: {repeats_note(group)}"
            undecided.append(line)
        elif judged.verdict == "within":
            assert test is not None
            top = group.ranking.sample(leader.profile)
            assert top is not None
            head = f"configured point {_figured(name, sample, group)} is {judged.gap:.1%} below {best} " + _figured(
                leader.profile, top, group)
            line, passed = _within_instances(group, top, sample, max_gap, test, head)
            if not passed:
                undecided.append(line)
        elif judged.verdict == "recommend" and (held := _beyond_instances(group, leader, sample, max_gap, test)):
            line = held
            undecided.append(line)
        elif judged.verdict == "recommend":
            assert test is not None
            better = ", ".join(f"{k}: {v}" for k, v in point.items() if configured.get(k) != v)
            top = group.ranking.sample(leader.profile)
            assert top is not None
            # The figures the gap is of: geometric means on the ranking's basis (a paired sweep's gap is of paired
            # speedups, not of tok/s: helper-79 read "(83.0 tok/s) is 26.7% below ... (97.6 tok/s)").
            line = (
                f"configured point {_figured(name, sample, group)} is {judged.gap:.1%} below {best} "
                f"{_figured(leader.profile, top, group)}, more than {allowed} "
                f"(--specdec-sweep-max-gap); set {better} in profile {base}{_or_ties(group, name)} "
                f"[{test.describe()}: {method_note(group, test.comparisons)}]"
            )
            failing.append(line)
        else:
            beyond = f"a gap beyond {allowed}"
            top = group.ranking.sample(leader.profile)
            figured, led = _figured(name, sample, group), _figured(leader.profile, top, group)
            ran = group.ranking.min_values
            excess = 1.0 - (1.0 - judged.gap) / (1.0 - max_gap)  # what a recommendation must separate
            would = would_note(judged.need, beyond, ran, inside_allowance=judged.gap <= max_gap,
                               instances=instances_note(group, excess) if excess > 0 else "")  # fmt: skip
            if judged.verdict == "near":
                # Inside the allowance on its estimate only: the repeats that would show it within.
                assert test is not None
                where = (
                    f"has the highest {group.basis}, not shown within {allowed} of {judged.rival}" if judged.rival
                    else f"is {judged.gap:.1%} below {best} {led}, not shown within {allowed}"
                )  # fmt: skip
                head = f"configured point {figured} {where} ({test.describe()}, {method_note(group, test.comparisons)})"
                distance = 1.0 - (1.0 - max_gap) / (1.0 - judged.gap)  # what "within" must separate
                would = would_note(judged.need, f"it within {allowed}", ran, verb="show",
                                   instances=instances_note(group, distance) if distance > 0 else "")  # fmt: skip
            elif judged.verdict == "tied":
                assert test is not None
                # The ranking's own test names the tie, across server instances: the table's "tied with X (p=..)"
                # (helper-81 read p=0.21 there and the repeats-only p=0.05 here for the same two points).
                sep = next((x for x in group.ranking.separations if x.other == name), None)
                why = (f"{sep.describe()}, {method_note(group, instances=True)}" if sep is not None
                       else f"{test.describe()}, {method_note(group, test.comparisons)}")  # fmt: skip
                head = (f"configured point {figured} is tied with {best} {led} ({judged.gap:.1%} below, not "
                        f"separated: {why})")  # fmt: skip
            elif judged.verdict == "unproven":
                assert test is not None
                head = (
                    f"configured point {figured} is {judged.gap:.1%} below {best} {led}, not shown "
                    f"to be more than {allowed} ({test.describe()}, {method_note(group, test.comparisons)})"
                )
            else:
                head = (
                    f"configured point {figured} is {judged.gap:.1%} below the highest {led}: "
                    f"undecided: {repeats_note(group)}"
                )
            line = f"{head}; {would} ({spread_note(group)}); not failed"
            undecided.append(line)
        lines.append(line)
    return lines, failing, undecided
