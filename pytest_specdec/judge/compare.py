"""Baseline compare: one test's current result judged against its baseline, row by metric field.

Each throughput/latency row is decided on the interval of the ratio current/baseline (``sequential.decide_shift``):
``ok`` when the interval's worse end is inside the tolerance, ``REGRESSED`` when its better end is worse than no
change and the estimate beyond the tolerance, ``undecided`` when the interval cannot tell (never "ok" on a point
estimate whose interval holds the limit). The interval is at the alpha of the look it was taken at (a
``sequential.Design``; one look at the full alpha when none is given), so pytest's sequential loop and the
``compare`` command on the same stored records print the same verdict. The baseline's stored runs of the same
fingerprint (``history``) pool their variance (``sequential.History``). Unlike pytest-benchmark's
``--benchmark-compare-fail`` (seconds only, larger = worse, session-wide failure) each metric has its own direction
and tolerance, and each test fails on its own.

The tolerances are ``core.tolerances``, the fingerprint diff ``judge.fingerprint``, the per-pair ratios
``judge.pair_ratios``; the ``compare`` command on stored runs is ``cli.compare``.
"""

from __future__ import annotations

import dataclasses
import math
import re
from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import NamedTuple

from pytest_specdec.core import hoststate, metric_table, stats
from pytest_specdec.core.errors import CompareError
from pytest_specdec.core.metric_table import EXACT_FIELDS, PAIRED_FIELDS, TAIL_PERCENTILES, tail_samples_needed
from pytest_specdec.core.table import Column, text_table
from pytest_specdec.core.tolerances import (
    CATEGORY_FIELDS,
    Tolerance,
    Tolerances,
    field_specs,
    foreign_ratio_tolerances,
    merge_tolerances,
    parse_tolerances,
)
from pytest_specdec.judge import sequential
from pytest_specdec.judge.fingerprint import fingerprint_diff, workload_differences
from pytest_specdec.judge.pair_ratios import paired_ratios
from pytest_specdec.measure.results import ResultRecord, RunFile

__all__ = [
    "CATEGORY_COMPARE_FIELDS",
    "EXACT_FIELDS",
    "MIN_CATEGORY_REQUESTS",
    "TAIL_PERCENTILES",
    "CompareRow",
    "Comparison",
    "RunComparison",
    "assumed_instance_sd",
    "measured_on_gpu",
    "calibrated_history",
    "compare_results",
    "compare_runs",
    "design_of",
    "history_values",
    "row_values",
    "run_to_run_sd",
    "single_look",
    "swap_profile_id",
    "tail_samples_needed",
    "tolerance_text",
]


#: Beside a row whose figure the baseline had and this run does not.
_LOST_NOTE = "not reported by this run; the baseline had it"
#: Units an absolute tolerance part is shown with (``5 tok/s``, ``10%+5 ms``): throughput and latency. Accept length
#: and the fractions (accept rate, SLO attainment) show the bare number: their units are ratios, not read as units.
_SHOWN_UNITS = ("tok/s", "req/s", "ms")
#: A bare absolute tolerance on a field of these units below this share of the baseline gets a note
#: (:func:`_small_absolute_note`): ``output_tok_s:5`` reads as 5% to someone used to relative tolerances.
_SMALL_ABSOLUTE = 0.01


def _unit(metric: str) -> str:
    """The unit an absolute tolerance part of a compare row or tolerance key is shown with, "" for none:
    ``output_tok_s`` -> ``tok/s``, ``ttft_ms`` and ``tpot_ms_p50[code]`` -> ``ms``, ``accept_length`` -> ""."""
    name = metric.partition(" / ")[0].partition("[")[0]
    spec = field_specs().get(name) or metric_table.METRICS.get(name)
    return spec.unit if spec is not None and spec.unit in _SHOWN_UNITS else ""


def tolerance_text(metric: str, tol: Tolerance) -> str:
    """A tolerance as the compare shows it, an absolute part with its unit: ``5%``, ``5 tok/s``, ``10%+5 ms``,
    ``0.05`` (accept length: no unit shown). ``metric`` is a field, a metric name, or a compare row's name
    (``tpot_ms_p50[code]``)."""
    unit = f" {_unit(metric)}" if _unit(metric) else ""
    rel = f"{tol.rel * 100:g}%" if tol.rel else ""
    if rel and tol.abs:
        return f"{rel}+{tol.abs:g}{unit}"
    return rel or f"{tol.abs:g}{unit}"


@dataclass(frozen=True, slots=True)
class CompareRow:
    """One metric field: the baseline and current figures, the change, and the verdict. A statistical row shows what
    its verdict compares (geometric means over repeats, arithmetic with an absolute tolerance part: ``_compared``),
    so its delta % is the verdict's ``x`` estimate; exact and ``n/a`` rows show medians.

    ``verdict``: ``REGRESSED`` (significantly worse than no change and beyond the tolerance), ``undecided`` (the
    interval holds the tolerance: more repeats would decide), ``ok`` (the interval's worse end inside the
    tolerance), ``improved`` (ok, and significantly better beyond the tolerance), ``changed`` (an exact metric moved
    within its tolerance), or ``n/a`` (missing on a side; a tail percentile or category with too few samples per
    repeat, :data:`TAIL_PERCENTILES`, :data:`MIN_CATEGORY_REQUESTS`). ``decision`` is the interval behind a
    statistical verdict (``sequential.decide_shift``); ``noise`` the per-repeat sigma in the metric's unit, shown
    beside the tolerance.
    ``basis``: ``exact`` when the row was judged equal-or-not (temperature 0, identical repeats: no statistics);
    ``raw`` for a throughput/latency row that also has a ``metric / vs`` ratio row (paired arms): the raw row sees a
    slowdown of both arms alike, the ratio row the target alone.
    """

    metric: str
    higher_is_better: bool
    baseline: float | None
    current: float | None
    delta: float | None
    delta_pct: float | None
    tolerance: Tolerance
    verdict: str
    decision: sequential.Decision | None = None
    noise: float | None = None
    basis: str = ""
    #: Why a row has no verdict (``n/a``), shown beside it: ``3 requests < 8 per repeat``.
    note: str = ""
    #: The design a statistical row was judged with: a paired field's raw and ratio rows share the field's alpha
    #: (half each), and a field's k statistical category rows share it too (``alpha / k`` each), so what "more
    #: repeats would decide it" estimates must use this one, not the run's.
    design: sequential.Design | None = None
    #: The run-to-run sd the row's interval took: :func:`assumed_instance_sd` with fewer than 2 stored runs and no
    #: calibrated noise, the larger of it and 2-3 runs' own estimate, 0 otherwise; the "more would decide it"
    #: estimates take it too.
    instance_sd: float = 0.0
    #: ``instance_sd`` is a busy CPU runner's floor (``hoststate.oversubscribed``), taken at any number of stored
    #: runs: a quieter runner decides the row, not more stored runs.
    busy: bool = False
    #: For a tolerance with an absolute part (``20%+0.1`` ms), the tolerance as a ratio to the baseline shown
    #: (``x1.39``): its interval is a ratio too, and the limit was otherwise worked out by hand (fresh-user trial).
    limit_ratio: float | None = None

    @property
    def regressed(self) -> bool:
        return self.verdict == "REGRESSED"

    @property
    def undecided(self) -> bool:
        return self.verdict == "undecided"

    @property
    def suspected(self) -> bool:
        """Undecided with the estimate beyond the tolerance: the ``compare`` command's ``--fail-on-suspected``."""
        if not self.undecided or self.delta is None or self.baseline is None:
            return False
        worse = -self.delta if self.higher_is_better else self.delta
        return worse > self.tolerance.allowed(self.baseline)

    def limit_text(self) -> str:
        """The tolerance, with the per-repeat noise beside it when known: ``5%`` or ``5% (σ 7.2%)``; an absolute
        part with its unit (``10%+5 ms``), a relative one derived from it (a ratio row) to 3 digits (``5.13%``)."""
        tol = self.tolerance
        # A derived relative part (a ratio row's, from an absolute one) to 3 digits: "5.12754%" was read as noise.
        text = tolerance_text(self.metric, dataclasses.replace(tol, rel=float(f"{tol.rel:.3g}")))
        if self.noise and self.baseline:
            text += f" (σ {self.noise / abs(self.baseline) * 100:.1f}%)"
        return text


def _num(value: float | None) -> str:
    if value is None:
        return "n/a"
    if value != 0 and (abs(value) >= 1e6 or abs(value) < 1e-3):
        return f"{value:.3e}"
    return f"{value:.4g}" if abs(value) < 1000 else f"{value:.1f}"


@dataclass(frozen=True, slots=True)
class Comparison:
    """Result of :func:`compare_results`. :meth:`lines` prints the fingerprint diff first, then the table."""

    test_id: str
    profile: str
    rows: tuple[CompareRow, ...]
    diff: tuple[str, ...]
    notes: tuple[str, ...] = ()
    #: Runner-state changes between the two measurements (``hoststate.state_changes``), printed first.
    runner: tuple[str, ...] = ()

    @property
    def failed(self) -> bool:
        """True when at least one row regressed."""
        return any(r.regressed for r in self.rows)

    @property
    def regressions(self) -> tuple[CompareRow, ...]:
        return tuple(r for r in self.rows if r.regressed)

    @property
    def undecided(self) -> tuple[CompareRow, ...]:
        """Rows whose interval holds the tolerance: more repeats would decide them."""
        return tuple(r for r in self.rows if r.undecided)

    @property
    def suspected(self) -> tuple[CompareRow, ...]:
        """Undecided rows whose estimate is beyond the tolerance (:attr:`CompareRow.suspected`)."""
        return tuple(r for r in self.rows if r.suspected)

    @property
    def outcome(self) -> str:
        """``FAILED`` (a row regressed), ``undecided`` (none regressed, one undecided) or ``passed``."""
        return "FAILED" if self.failed else "undecided" if self.undecided else "passed"

    def lines(self) -> list[str]:
        """Fixed-width text: the fingerprint diff (``fingerprint: N differences from baseline`` then one indented
        line each, then the runner-state line; or the runner-state line, then ``fingerprint: same as baseline``),
        notes, then one table row per metric, its verdict with the
        interval behind it (``REGRESSED (x0.871, CI 0.84-0.90 (99.2%))``)."""
        # What changed in the configuration is the likely cause: it comes first, then the runner's state.
        runner = [f"runner state changed since the baseline: {'; '.join(self.runner)}"] if self.runner else []
        if self.diff:
            out = [f"fingerprint: {len(self.diff)} difference{'s' if len(self.diff) != 1 else ''} from baseline"]
            out += [f"  {line}" for line in self.diff] + runner
        else:
            out = [*runner, "fingerprint: same as baseline"]
        out += list(self.notes)
        columns = [
            Column("metric"),
            Column("better"),
            *(Column(header, "right") for header in ("baseline", "current", "delta", "delta %")),
            Column("tolerance"),
            Column("verdict"),
        ]
        table = []
        for r in self.rows:
            pct = "n/a" if r.delta_pct is None else f"{r.delta_pct:+.1f}%"
            delta = "n/a" if r.delta is None else ("+" if r.delta >= 0 else "") + _num(r.delta)
            verdict = r.verdict
            if r.basis == "exact" and r.verdict in ("REGRESSED", "changed", "improved"):
                verdict = f"{verdict} (exact)"
            elif r.decision is not None and r.decision.low is not None:
                limit = f", limit x{r.limit_ratio:.3g}" if r.limit_ratio is not None else ""
                verdict = f"{verdict} (x{r.decision.estimate:.3g}, {r.decision.interval()}{limit}, n={r.decision.n})"
            if r.note:
                verdict = f"{verdict} ({r.note})"
            table.append(
                [
                    r.metric,
                    "higher" if r.higher_is_better else "lower",
                    _num(r.baseline),
                    _num(r.current),
                    delta,
                    pct,
                    r.limit_text(),
                    verdict,
                ]
            )
        return out + text_table(columns, table)


class _Change(NamedTuple):
    """Medians over repeats and the change between them, in :class:`CompareRow` field order."""

    baseline: float | None
    current: float | None
    #: current - baseline; None when a side has no value.
    delta: float | None
    #: delta / |baseline| x 100; None without a delta or at a zero baseline.
    delta_pct: float | None


def _change(b_vals: Sequence[float], c_vals: Sequence[float]) -> _Change:
    """The medians of both sides (``stats.repeat_summary``) and the change: ``[98, 100, 102]`` -> ``[90, 91, 92]`` is
    100 -> 91, delta -9, delta % -9.0."""
    b_sum, c_sum = stats.repeat_summary(b_vals), stats.repeat_summary(c_vals)
    b_med = None if b_sum is None else b_sum.median
    c_med = None if c_sum is None else c_sum.median
    delta = None if b_med is None or c_med is None else c_med - b_med
    pct = None if delta is None or not b_med else delta / abs(b_med) * 100.0
    return _Change(b_med, c_med, delta, pct)


def _worse_by(delta: float, higher_is_better: bool) -> float:
    return -delta if higher_is_better else delta


def compare_results(
    base: ResultRecord,
    current: ResultRecord,
    tolerances: Mapping[str, Tolerance] | None = None,
    *,
    force: bool = False,
    noise: Mapping[str, float] | None = None,
    design: sequential.Design | None = None,
    history: Sequence[ResultRecord] = (),
) -> Comparison:
    """Compare one test's current result with its baseline.

    Each statistical row is decided on the interval of current/baseline (:func:`_judge`, the module docstring),
    taken at ``design``'s per-look alpha (default: one look at the current run's repeats, the full alpha). The
    baseline's spread comes from ``history`` (its stored runs of the same fingerprint, pooled with ``base``:
    ``sequential.History``) when they hold more than one run, else from a calibrated ``noise`` (a relative sigma per
    field, or ``field/vs`` for a paired ratio, written by ``calibrate``), else from the two records' own repeats
    (Welch), with the run-to-run spread of server instances assumed (:func:`assumed_instance_sd`) where fewer than
    4 stored runs cannot measure it (with 2-3, their own estimate where larger). When both records carry the same
    paired reference arm, throughput and latency are judged on their ratio to it (:func:`_paired_rows`). Accept
    length/rate at temperature 0 with identical repeats are compared equal-or-not (``EXACT_FIELDS``). Runner-state
    changes are listed first. Prompt categories both records have get rows of their own (``accept_length[code]``,
    ``CATEGORY_COMPARE_FIELDS``), a field's k statistical ones at ``alpha / k`` each (:func:`_category_rows`). A
    tail percentile (p90, p95, p99) with fewer than 1 / (1 - q) samples in a repeat is shown as ``n/a`` with the
    count (:data:`TAIL_PERCENTILES`): there it is the repeat's largest sample.

    For each metric field with a tolerance (``tolerances`` keys are metric names or fields, merged over
    :data:`DEFAULT_TOLERANCES` by :func:`merge_tolerances`, so naming one metric never drops the others): medians
    over repeats (``stats.repeat_summary``), delta = current - baseline, delta % = delta / |baseline| * 100. A
    category row takes its own tolerance where one is given (``Tolerances.categories``), else its field's; one given
    for a category not in both records is said in a note.

    :param force: compare even when the workload differs (the differences stay in the fingerprint diff and a
        note says the comparison was forced).
    :raises CompareError: the workloads differ (prompt set hash, max_new_tokens, concurrency, num_requests,
        temperature, api) and ``force`` is False; the message lists each difference.
    """
    mismatch = workload_differences(base, current)
    notes: list[str] = []
    if mismatch:
        if not force:
            raise CompareError(
                f"{current.test_id}: workload differs from the baseline, results are not comparable: "
                f"{'; '.join(mismatch)}; re-record the baseline with this workload or compare anyway with --force"
            )
        notes.append(f"workload differs ({'; '.join(mismatch)}); compared anyway (--force)")
    specs = field_specs()
    rows = []
    gpu = measured_on_gpu(base, current, *history)
    # On CPUs shared with other work the speedup itself moves with the CPU share the servers get: the pairing no
    # longer cancels the runner (``sequential.ASSUMED_BUSY_CPU_RATIO_SD``).
    busy = None if gpu else hoststate.oversubscribed(base.fingerprint.get("runner"), current.fingerprint.get("runner"))
    judging = _Judging(design or single_look(current), (base, *history), noise or {}, gpu=gpu, busy_cpu=busy)
    merged = merge_tolerances(tolerances)
    # A paired field is judged twice (raw and ratio) and fails on either: the two share the field's alpha
    # (Bonferroni), so that an unchanged run fails a field at most alpha, not twice that (benchmarks/bench_verdicts.py).
    halved = dataclasses.replace(judging, design=dataclasses.replace(judging.design, alpha=judging.design.alpha / 2))
    ratio_rows, vs = _paired_rows(base, current, merged, halved)
    arms = [(record.paired or {}).get("vs") for record in (base, current)]
    if all(arms) and arms[0] != arms[1]:
        # Mapped profiles (--specdec-compare-profile) paired with arms of other names: a trial found the ratio rows
        # gone, unsaid, on the night the runner's load swung the raw rows.
        notes.append(
            f"no ratio rows: the runs are paired with different arms ({arms[0]!r} at the baseline, {arms[1]!r} today), "
            "and a ratio to one arm is not a ratio to another; the raw rows alone judge this compare, with the "
            "runner's load in them: pair both profiles with the same arm (min_speedup: {vs: ...}) to judge the ratio"
        )
    # Exact rows only between exact runs (2 or more repeats each, agreeing on every accept figure), the floors' rule
    # (``verdict._exact_run``): one repeat shows no agreement, and a category can agree by coincidence in a run
    # that varies.
    temperature = _shared_temperature(base, current) if _exact_record(base) and _exact_record(current) else None
    for fname, tol in merged.items():
        higher = specs[fname].higher_is_better
        b_vals, c_vals = base.values(fname), current.values(fname)
        if not b_vals and not c_vals:
            continue
        if fname in ratio_rows:
            # Both rows are judged: the ratio sees the target alone, the raw row a slowdown of both arms alike.
            rows.append(dataclasses.replace(_judge(fname, higher, tol, b_vals, c_vals, halved, key=fname),
                                            basis="raw"))  # fmt: skip
            rows.append(ratio_rows[fname])
            continue
        is_exact = metric_table.is_exact(fname, b_vals, c_vals, temperature=temperature)
        short = _tail_too_few(fname, base, current)
        if short:
            rows.append(_no_verdict(fname, higher, tol, b_vals, c_vals, short))
            continue
        rows.append(_judge(fname, higher, tol, b_vals, c_vals, judging, key=fname, exact=is_exact))
    # A field's category rows share the full alpha among themselves (alpha / k each; the top rows keep theirs).
    rows.extend(_category_rows(base, current, merged, temperature, judging, paired=vs if ratio_rows else None))
    notes.extend(_unused_category_tolerances(merged, base, current))
    notes.extend(_unused_ratio_tolerances(merged, vs))
    origins = merged.origins_note({r.metric.split(" / ")[0].partition("[")[0] for r in rows})
    if origins:
        notes.append(origins)
    notes.extend(_small_absolute_note(rows, merged))
    notes.extend(_never_fails_note(rows))
    if ratio_rows:
        notes.append(
            f"throughput and latency judged twice: raw (a slowdown of both arms alike: runner load, a lost NCCL env, "
            f"a driver) and as the ratio to the paired {vs!r} arm measured with them (the target alone)"
        )
        raw_regressed = [r for r in rows if r.basis == "raw" and r.regressed]
        # Only where it is true: the ratio row decided not slower (an undecided ratio may still be the target alone)
        # and the reference arm's own values slower too (a trial read it beside ratio rows that improved).
        slower = [r for r in raw_regressed if _reference_slower(base, current, r.metric, r.higher_is_better)]
        for verdict, what in (
            ("ok", "alike (raw REGRESSED, the ratio to {vs!r} held)"),
            ("improved", "(raw REGRESSED), the reference arm more (the ratio to {vs!r} improved)"),
        ):
            both = [r.metric for r in slower if ratio_rows[r.metric].verdict == verdict]
            if both:
                notes.append(
                    f"{', '.join(both)}: both arms slower {what.format(vs=vs)}: a change of the runner or of "
                    "something both servers share; see the runner state and fingerprint lines"
                )  # fmt: skip
        open_ratio = [r.metric for r in raw_regressed if ratio_rows[r.metric].undecided]
        if open_ratio:
            notes.append(
                f"{', '.join(open_ratio)}: raw REGRESSED, the ratio to {vs!r} undecided: both arms slower, or the "
                "target alone; more pairs would tell which"
            )
    taken: dict[str, list[float]] = {}
    for r in rows:
        if r.instance_sd and r.decision is not None and r.decision.low is not None:
            taken.setdefault("ratio" if " / " in r.metric else "raw", []).append(r.instance_sd)
    if judging.busy_cpu is not None and any(r.instance_sd for r in rows):
        lb, lc = judging.busy_cpu
        ratio = any(" / " in r.metric and r.instance_sd for r in rows)
        raw = any(" / " not in r.metric and r.instance_sd for r in rows)
        took = [f"{sequential.ASSUMED_BUSY_CPU_INSTANCE_SD:.0%} for raw rows (not {sequential.ASSUMED_INSTANCE_SD:.0%})"
                if raw else "",
                f"{sequential.ASSUMED_BUSY_CPU_RATIO_SD:.0%} for ratio rows (not "
                f"{sequential.ASSUMED_RATIO_INSTANCE_SD:.0%})" if ratio else ""]  # fmt: skip
        sds = " and ".join(t for t in took if t)
        notes.append(
            f"{'ratio' if not raw else 'raw' if not ratio else 'raw and ratio'} rows: a busy runner without a GPU "
            f"(load average per CPU {lb:.2g} at the baseline, {lc:.2g} today): there server instances of one config "
            "differ with the CPU share they get (tok/s 28-146 over 16 instances of one config, a log sd of 0.52; the "
            f"speedup of speculative decoding by ~13%), so the run-to-run sd taken is {sds} (or the stored runs' own "
            "estimate where larger), however many runs are stored: on a quieter runner (load per CPU under 1 at "
            "both runs) they can decide more"
        )
    if taken:
        kinds = sorted(taken.items(), key=lambda kv: kv[0] != "raw")
        sds = ", ".join(f"{_percent_range(values)} {kind}" for kind, values in kinds)
        starts = judging.calibrated_run_to_run()
        raw_sd = assumed_instance_sd("output_tok_s", gpu=judging.gpu)
        busy_raw = f" ({sequential.ASSUMED_BUSY_CPU_INSTANCE_SD:.0%} on this busy runner)" if judging.busy_cpu else ""
        source = (
            f"assumed: {raw_sd:.0%} raw{' on a GPU host' if judging.gpu else busy_raw} or the row's within-run sd "
            f"where larger, {sequential.ASSUMED_RATIO_INSTANCE_SD:.0%} ratio"
            + (f" ({sequential.ASSUMED_BUSY_CPU_RATIO_SD:.0%} on this busy runner)" if judging.busy_cpu else "")
        )
        source += f", or calibrate's over {starts} server starts where larger" if starts else ""
        if judging.busy_cpu is not None:
            head = "run-to-run: on a busy runner stored runs do not measure how server instances differ"
            until = "stored runs' own estimate where larger) however many are stored"
        else:
            head = "run-to-run: too few stored runs to measure how server instances differ"
            until = ("2-3 stored runs' own estimate where larger) until 4 or more unchanged runs of this fingerprint "
                     "are stored")
        notes.append(f"{head}; timing rows take a run-to-run sd of {sds} ({source}; {until}")
    if any(r.basis == "exact" for r in rows):
        notes.append(
            "exact: accept length/rate at temperature 0 with identical repeats are compared equal-or-not, "
            "without statistics"
        )
    return Comparison(
        test_id=current.test_id,
        profile=current.profile,
        rows=tuple(rows),
        diff=tuple(fingerprint_diff(base.fingerprint, current.fingerprint)),
        notes=tuple(notes),
        runner=tuple(hoststate.state_changes(base.fingerprint.get("runner"), current.fingerprint.get("runner"))),
    )


def _reference_slower(base: ResultRecord, current: ResultRecord, fname: str, higher: bool) -> bool:
    """Whether the paired reference arm's ``fname`` moved the slower way from ``base`` to ``current`` (geometric
    means of its per-pair values, ``record.paired["reference"]``); False without them."""

    def mean(record: ResultRecord) -> float | None:
        values = ((record.paired or {}).get("reference") or {}).get(fname) or []
        return stats.geometric_mean([float(v) for v in values if isinstance(v, int | float)])

    b, c = mean(base), mean(current)
    return b is not None and c is not None and (c < b if higher else c > b)


#: Fields compared per prompt category (``RunMetrics.by_category``), each row at its own tolerance where one is
#: given (``tpot_ms_p50[code]:30%``), else at the field's (``core.tolerances.CATEGORY_FIELDS``).
CATEGORY_COMPARE_FIELDS = CATEGORY_FIELDS
#: A category row gets a verdict only when the category has at least this many successful requests in every repeat
#: of both runs (exact rows excepted): a p50 of fewer requests moves with one request (a 1-request
#: ``tpot_ms_p50[structured]`` was once called REGRESSED at +20%).
MIN_CATEGORY_REQUESTS = 8


def _category_rows(
    base: ResultRecord,
    current: ResultRecord,
    tolerances: Tolerances,
    temperature: float | None,
    judging: _Judging,
    *,
    paired: str | None = None,
) -> list[CompareRow]:
    """Rows ``accept_length[code]`` ... for every category both records have, each at its own tolerance where one
    is given (``tpot_ms_p50[code]:30%``: ``Tolerances.row``), else at its field's (a row judged on its paired ratio:
    its field's ratio row's, ``Tolerances.ratio``), judged by the rule of the field's own row:

    - the field's top row judged on its ratio to the paired arm ``paired`` (:func:`_paired_rows`): the category's
      row on the per-pair ratio of the category's values (``itl_ms_p50[code] / baseline``), or ``n/a`` with the
      reason when the records carry no per-category paired values (runs stored before they were recorded);
    - exact (``metric_table.is_exact`` at the runs' shared ``temperature``): equal-or-not, whatever the number of
      requests;
    - otherwise a verdict only with :data:`MIN_CATEGORY_REQUESTS` successful requests of the category per repeat on
      both sides (``num_ok[CATEGORY]``), else ``n/a (3 requests < 8 per repeat)``.

    The k statistical rows of one field (neither exact nor ``n/a``) share the design's alpha: each is judged at
    ``alpha / k`` (Bonferroni over the categories), so that an unchanged run fails any category row of a field at
    most ``alpha``, not about ``k x alpha`` (a fresh-user trial: a category row FAILED an unchanged server beside
    its field's undecided top row; seeded, ``tests/test_compare.py``).
    """
    specs = field_specs()
    if len(base.categories) == 1 and base.categories == current.categories:
        return []  # every request in one category: its rows would repeat the top rows (a trial read them twice)
    # First each row's rule, then the statistical ones judged: their number per field sets the alpha they share.
    planned: list[CompareRow | _CategoryCase] = []
    for category in sorted(set(base.categories) & set(current.categories)):
        counts = base.values(f"num_ok[{category}]") + current.values(f"num_ok[{category}]")
        fewest = int(min(counts)) if counts else None
        for fname in CATEGORY_COMPARE_FIELDS:
            tol = tolerances.row(fname, category)
            if tol is None:
                continue
            name = f"{fname}[{category}]"
            higher = specs[fname].higher_is_better
            b_vals, c_vals = base.values(name), current.values(name)
            if not b_vals and not c_vals:
                continue
            is_exact = metric_table.is_exact(fname, b_vals, c_vals, temperature=temperature)
            few = not is_exact and fewest is not None and fewest < MIN_CATEGORY_REQUESTS
            if paired is not None and fname in PAIRED_FIELDS:
                b_ratios, c_ratios = paired_ratios(base, name), paired_ratios(current, name)
                if b_ratios and c_ratios and not few:
                    # Judged on its ratio as its field's top row is: its own tolerance, else the ratio row's.
                    tol = tolerances.categories.get((fname, category)) or tolerances.ratio(fname, paired) or tol
                    planned.append(_CategoryCase(fname, name, higher, _relative(tol, b_vals), b_ratios, c_ratios,
                                                 f"{name} / ", f"{name} / {paired}"))  # fmt: skip
                    continue
                why = "no paired values per category" if not (b_ratios and c_ratios) else ""
                planned.append(_no_verdict(name, higher, tol, b_vals, c_vals, why or _few(fewest), paired=True))
                continue
            if few:
                planned.append(_no_verdict(name, higher, tol, b_vals, c_vals, _few(fewest)))
            elif is_exact or not (b_vals and c_vals):  # equal-or-not, or a side missing: no statistics spent
                planned.append(_judge(name, higher, tol, b_vals, c_vals, judging, key=name, exact=is_exact))
            else:
                planned.append(_CategoryCase(fname, name, higher, tol, b_vals, c_vals, name, name))
    judged = Counter(case.field for case in planned if isinstance(case, _CategoryCase))
    rows: list[CompareRow] = []
    for case in planned:
        if isinstance(case, CompareRow):
            rows.append(case)
            continue
        shared = _split_alpha(judging, judged[case.field])
        row = _judge(case.name, case.higher, case.tolerance, case.b_vals, case.c_vals, shared, key=case.key)
        rows.append(dataclasses.replace(row, metric=case.metric) if case.metric != row.metric else row)
    return rows


@dataclass(frozen=True, slots=True)
class _CategoryCase:
    """A category row to be judged statistically (:func:`_category_rows`), once its field's alpha share is known."""

    field: str
    name: str
    higher: bool
    tolerance: Tolerance
    b_vals: Sequence[float]
    c_vals: Sequence[float]
    #: ``field[cat]``, or ``field[cat] / `` for the ratio to a paired arm (``row_values``).
    key: str
    #: The row's name in the table: ``name``, or ``field[cat] / vs``.
    metric: str


def _unused_category_tolerances(tolerances: Tolerances, base: ResultRecord, current: ResultRecord) -> list[str]:
    """A note for each category tolerance no row of this comparison takes (its category is not in both records):
    a misspelt category (``tpot_ms_p50[cod]:30%``) would otherwise leave the row at its field's tolerance unsaid.
    Example: ``tolerance tpot_ms_p50[cod]:30%: no category 'cod' in both runs (their categories: chat, code); no
    row takes it: check the name against the prompts' "category"``."""
    compared = set(base.categories) & set(current.categories)
    unused = [(f, c, t) for (f, c), t in tolerances.categories.items() if c not in compared]
    listed = ", ".join(sorted(set(base.categories) | set(current.categories))) or "none"
    return [f"tolerance {f}[{c}]:{t}: no category {c!r} in both runs (their categories: {listed}); no row takes it: "
            'check the name against the prompts\' "category"' for f, c, t in unused]  # fmt: skip


def _unused_ratio_tolerances(tolerances: Tolerances, vs: str | None) -> list[str]:
    """A note for each ratio-row tolerance no row takes (the runs are not paired with that arm): a misspelt arm
    (``output_tok_s/basline:15%``) would otherwise leave the ratio row at its field's tolerance unsaid. Example:
    ``tolerance output_tok_s/basline:15%: no ratio row to 'basline' (the runs are paired with 'baseline'); no row
    takes it: name the arm min_speedup names``."""
    said = f"the runs are paired with {vs!r}" if vs else "the runs are not paired: no min_speedup arm"
    return [f"tolerance {f}/{arm}:{t}: no ratio row to {arm!r} ({said}); no row takes it: name the arm "
            "min_speedup names" for (f, arm), t in foreign_ratio_tolerances(tolerances, vs).items()]  # fmt: skip


def _never_fails_note(rows: Sequence[CompareRow]) -> list[str]:
    """One note naming the higher-is-better rows whose tolerance is 100% or more of the baseline: no run can fail them
    (``output_tok_s:500%``: tok/s cannot fall by more than itself), so they are reported, not gated; a fresh-user
    trial's 500% passed silently. Example: ``output_tok_s 500%: can never fail (a higher-is-better figure cannot fall
    by 100% or more): reported, not gated; write less than 100% to gate it``."""
    named = [f"{r.metric} {tolerance_text(r.metric, r.tolerance)}" for r in rows
             if r.higher_is_better and r.baseline and r.tolerance.allowed(r.baseline) >= abs(r.baseline)]  # fmt: skip
    if not named:
        return []
    return [f"{', '.join(named)}: can never fail (a higher-is-better figure cannot fall by 100% or more): reported, "
            "not gated; write less than 100% to gate it"]


def _small_absolute_note(rows: Sequence[CompareRow], tolerances: Tolerances) -> list[str]:
    """One note naming each bare absolute tolerance on a throughput or latency row (``output_tok_s:5``: 5 tok/s, as in
    pytest-benchmark's grammar, where ``5%`` is relative) below 1% of the row's baseline, which a relative reading was
    likely meant: ``output_tok_s:5 is 5 tok/s, 0.41% of the baseline's 1210 tok/s; write 5% if you meant relative``.
    Not an error: an absolute tolerance is legitimate. A category row is named only for a tolerance of its own
    (``tpot_ms_p50[code]:1``), not for one its field's passed down; ``10%+5`` has a relative part and is not named.
    The preflight warns of a profile's bare number on a throughput before a run (``engines.preflight``); this note
    also covers the ini, the marker and the ``compare`` command's ``-t``, against the baseline's value.

    :returns: the note, or nothing when no row qualifies.
    """
    named: list[tuple[str, str]] = []  # (what it reads as, the token meant as relative)
    for r in rows:
        tol, unit = r.tolerance, _unit(r.metric)
        if tol.rel or not tol.abs or not unit or not r.baseline or " / " in r.metric:
            continue
        field_name, _, category = r.metric.partition("[")
        if category and (field_name, category.rstrip("]")) not in tolerances.categories:
            continue
        share = tol.abs / abs(r.baseline)
        if share < _SMALL_ABSOLUTE:
            level = f"{r.baseline:.4g}" if abs(r.baseline) < 1000 else f"{r.baseline:.0f}"
            said = f"{r.metric}:{tol} is {tol.abs:g} {unit}, {share * 100:.2g}% of the baseline's {level} {unit}"
            named.append((said, f"{r.metric}:{tol.abs:g}%"))
    if not named:
        return []
    # One row: the relative spelling alone, as the user would retype it; several: each token, so none is guessed.
    fix = f"{named[0][1].rpartition(':')[2]}" if len(named) == 1 else ", ".join(token for _, token in named)
    return [f"{'; '.join(said for said, _ in named)}; write {fix} if you meant relative"]


def _split_alpha(judging: _Judging, rows: int) -> _Judging:
    """``judging`` with its design's alpha shared by ``rows`` rows (Bonferroni: ``alpha / rows`` each; at every look,
    as each look spends ``alpha / looks`` of it: ``sequential.Design.alpha_per_look``)."""
    if rows <= 1:
        return judging
    return dataclasses.replace(judging, design=dataclasses.replace(judging.design, alpha=judging.design.alpha / rows))


def _tail_samples(record: ResultRecord, fname: str) -> list[int]:
    """Per-repeat sample counts behind a latency percentile of ``record`` (:data:`TAIL_PERCENTILES`)."""
    ok = record.values("num_ok")
    if fname.startswith("itl_ms"):
        return [int(t - n) for t, n in zip(record.values("output_tokens"), ok, strict=False)]
    return [int(n) for n in ok]


def _tail_too_few(fname: str, base: ResultRecord, current: ResultRecord) -> str:
    """Why a tail percentile row gets no verdict (``14 samples < 100 per repeat for p99``), or "" when it may."""
    needed = tail_samples_needed(fname)
    if needed is None:
        return ""
    counts = _tail_samples(base, fname) + _tail_samples(current, fname)
    if not counts or min(counts) >= needed:
        return ""  # records without the counts (hand-made, old) keep their verdict
    fewest = min(counts)
    stat = fname.rpartition("_")[2]
    return f"{fewest} sample{'s' if fewest != 1 else ''} < {needed} per repeat for {stat}"


def _few(fewest: int | None) -> str:
    n = fewest or 0
    return f"{n} request{'s' if n != 1 else ''} < {MIN_CATEGORY_REQUESTS} per repeat"


def _relative(tol: Tolerance, raw: Sequence[float]) -> Tolerance:
    """``tol`` as a relative tolerance for a ratio row: an absolute part turned relative at the raw median."""
    summary = stats.repeat_summary(raw)
    rel = tol.rel
    if tol.abs and summary is not None and summary.median:
        rel = tol.allowed(summary.median) / abs(summary.median)
    return Tolerance(rel=rel)


def _no_verdict(
    name: str,
    higher: bool,
    tol: Tolerance,
    b_vals: Sequence[float],
    c_vals: Sequence[float],
    why: str,
    *,
    paired: bool = False,
) -> CompareRow:
    """A row shown with its medians and change but no verdict (``n/a``), saying why."""
    note = f"top row paired; {why}" if paired else why
    return CompareRow(name, higher, *_change(b_vals, c_vals), tol, "n/a", note=note)


def _exact_record(record: ResultRecord) -> bool:
    """Every accept figure the record reports agrees across its 2 or more repeats."""
    found = [values for fname in EXACT_FIELDS if (values := record.values(fname))]
    return bool(found) and all(len(values) >= 2 and max(values) == min(values) for values in found)


def _shared_temperature(base: ResultRecord, current: ResultRecord) -> float | None:
    """The sampling temperature both runs were measured at, None when they differ or either is not recorded."""
    b, c = base.workload.get("temperature"), current.workload.get("temperature")
    return float(b) if isinstance(b, (int, float)) and b == c else None


@dataclass(frozen=True, slots=True)
class _Judging:
    """How the statistical rows of one comparison are decided: the look's design, the baseline's stored runs
    (``base`` first) and the calibrated noise (``noise.read_noise``: a plain mapping of per-repeat sds, or a
    ``CalibratedNoise`` that also carries the run-to-run sds)."""

    design: sequential.Design
    history: tuple[ResultRecord, ...]
    noise: Mapping[str, float]
    #: The runs were measured on a host with a GPU (:func:`measured_on_gpu`): raw rows assume its instance spread.
    gpu: bool = False
    #: Load per CPU at the baseline and today where either exceeds 1 on a host without a GPU
    #: (``hoststate.oversubscribed``): ratio rows assume ``sequential.ASSUMED_BUSY_CPU_RATIO_SD``.
    busy_cpu: tuple[float, ...] | None = None

    def _noise_key(self, key: str) -> str:
        fname, sep, _ = key.partition(" / ")
        vs = (self.history[0].paired or {}).get("vs") if self.history else None
        return f"{fname}/{vs}" if sep else fname

    def assumed_sd(self, key: str, within: float = 0.0) -> float:
        """:func:`run_to_run_sd` of a row, with what ``calibrate`` measured for it (its noise file)."""
        measured = getattr(self.noise, "run_to_run", {}).get(self._noise_key(key))
        return run_to_run_sd(key, within, measured, gpu=self.gpu, busy_cpu=self.busy_cpu is not None)

    def pooled(self, key: str, b_vals: Sequence[float]) -> sequential.History | None:
        """The baseline's :class:`~sequential.History` for a row: its stored runs' values of ``key`` (``field`` or
        ``field / `` for a paired ratio) when more than one run has them; else the calibrated noise as a pooled
        per-repeat sigma (``noise`` key ``field`` or ``field/vs``) around the baseline's own values, with the
        run-to-run part of :meth:`assumed_sd` taken as known; else None."""
        runs = history_values(self.history, key)
        if len(runs) >= 2:
            # On a busy CPU runner the busy floor stays at any number of stored runs: a few runs' estimate under-reads
            # a spread that moves with the load (sequential.ASSUMED_BUSY_CPU_INSTANCE_SD).
            return sequential.History.from_runs(runs, self.assumed_sd(key, _within(*runs)),
                                                assumed_always=self.busy_cpu is not None)  # fmt: skip
        sigma = self.noise.get(self._noise_key(key))
        logs = [math.log(v) for v in b_vals if v > 0]
        if not sigma or not logs:
            return None
        # The run-to-run sd at least that sigma, not the baseline's own few repeats (which once read 12% where
        # calibrate had measured 3.8%, and the row opened beside its category row on the same values; a trial).
        return calibrated_history(b_vals, sigma, self.assumed_sd(key, sigma))

    def calibrated_run_to_run(self) -> int:
        """Server starts behind the calibrated run-to-run sds (0: none measured)."""
        return int(getattr(self.noise, "runs", 0)) if getattr(self.noise, "run_to_run", None) else 0


def history_values(records: Sequence[ResultRecord], key: str) -> list[list[float]]:
    """The values of ``key`` (:func:`row_values`) of ``records`` (the baseline first, then its other stored runs) that
    have some, the baseline's first (its own run is the level: ``sequential.History.from_runs``); empty when the
    baseline has none."""
    found = [row_values(record, key) for record in records]
    return [list(values) for values in found if values] if found and found[0] else []


def run_to_run_sd(
    key: str, within: float = 0.0, measured: float | None = None, *, gpu: bool = False, busy_cpu: bool = False
) -> float:
    """The run-to-run sd a row (``key``: ``field``, or ``field / `` for a paired ratio) takes for each server
    instance while its stored runs cannot measure one (fewer than 4): :func:`assumed_instance_sd` (0 for accept
    rows), for a raw timing row at least ``within`` (the relative sd of one repeat within a run: the stored runs' and
    today's pooled, or calibrate's), or ``measured`` (calibrate's run-to-run sd) where larger. ``calibrate`` asks it
    too, so that its proposals are decided as the compare decides.

    Why the within-run floor: in every recording the run-to-run sd of raw tok/s was 0.3-1.5x the within-run sd
    (reference server 0.023 / 0.031 and 0.07 / 0.10; H200 with CUDA graphs 0.05-0.11 / 0.15 and 0.14 / 0.12 over
    8 instances), and a runner whose repeats spread 12 % is not one whose instances agree to 7 %: on those 8
    H200 instances the 7 % alone read REGRESSED in 7 of 56 unchanged pairs (``benchmarks/bench_stored_pairs.py``).
    Not for a ratio row: pairing cancels what instances share (run to run 0-2 % beside 5-20 % within).
    Why calibrate's only where larger: a few starts size the spread poorly; on one H100, 4 starts of one SGLang
    config read 3.3 % run to run and the next 6 starts 14.8 % (docs/measurements/verdicts.md).
    """
    default = assumed_instance_sd(key, gpu=gpu, busy_cpu=busy_cpu)
    if default and " / " not in key:
        default = max(default, within)
    return max(default, float(measured)) if measured is not None and default else default


def calibrated_history(b_vals: Sequence[float], sigma: float, run_sd: float) -> sequential.History | None:
    """A baseline of one stored run (``b_vals``) with a calibrated per-repeat ``sigma`` (relative) and run-to-run
    sd ``run_sd``, both taken as known: a calibrated sigma pools the spread of several runs (many degrees of
    freedom), and one stored run cannot show how instances differ. None without a sigma or a positive value."""
    logs = [math.log(v) for v in b_vals if v > 0]
    if not sigma or not logs:
        return None
    between = math.log1p(run_sd) ** 2
    return sequential.History(sum(logs) / len(logs), math.log1p(sigma) ** 2, 1000, between, 1, len(logs),
                              assumed=between > 0.0, level_runs=1, level_n=len(logs))  # fmt: skip


def _within(*runs: Sequence[float]) -> float:
    """The relative sd of one repeat within a run, pooled over ``runs`` (``stats.pooled_sd`` of the logs)."""
    return math.expm1(stats.pooled_sd(*runs, log=True))


def _percent_range(values: Sequence[float]) -> str:
    """``7%`` or ``4.9-7%``: the run-to-run sds a comparison's rows took."""
    low, high = f"{min(values) * 100:.2g}", f"{max(values) * 100:.2g}"
    return f"{high}%" if low == high else f"{low}-{high}%"


def assumed_instance_sd(key: str, *, gpu: bool = False, busy_cpu: bool = False) -> float:
    """The run-to-run sd a row judged without a history (fewer than 2 stored runs, no calibrated noise) assumes
    for each server instance: ``sequential.ASSUMED_INSTANCE_SD`` for a timing row (throughput, latency),
    ``ASSUMED_GPU_INSTANCE_SD`` for one measured on a GPU host (``gpu``: :func:`measured_on_gpu`),
    ``ASSUMED_RATIO_INSTANCE_SD`` for its ratio to a paired arm (``field / `` keys), or
    ``ASSUMED_BUSY_CPU_RATIO_SD`` and for a raw row ``ASSUMED_BUSY_CPU_INSTANCE_SD`` where a run was measured on an
    oversubscribed host without a GPU (``busy_cpu``: ``hoststate.oversubscribed``), 0 for accept length and rate (a
    property of the models and prompts, not of a server instance)."""
    fname, sep, _ = key.partition(" / ")
    spec = field_specs().get(fname.partition("[")[0])
    if spec is None or spec.exact:
        return 0.0
    if sep and busy_cpu and not gpu:
        return sequential.ASSUMED_BUSY_CPU_RATIO_SD
    if sep:
        return sequential.ASSUMED_RATIO_INSTANCE_SD
    if busy_cpu and not gpu:
        return sequential.ASSUMED_BUSY_CPU_INSTANCE_SD
    return sequential.ASSUMED_GPU_INSTANCE_SD if gpu else sequential.ASSUMED_INSTANCE_SD


def measured_on_gpu(*records: ResultRecord) -> bool:
    """Any of ``records`` was measured on a host with a GPU: its fingerprint lists one (``gpus``, read from
    ``nvidia-smi`` by ``measure.results.gpu_info``)."""
    return any(record.fingerprint.get("gpus") for record in records)


def row_values(record: ResultRecord, key: str) -> list[float]:
    """Per-repeat values behind a compare row: key ``field / `` -> the paired ratios of ``field``, else the field."""
    fname, sep, _ = key.partition(" / ")
    return paired_ratios(record, fname) if sep else record.values(fname)


def single_look(record: ResultRecord) -> sequential.Design:
    """A single look at the record's repeats: what a compare of two stored runs without a stored design decides."""
    n = max(len(record.values("output_tok_s")), 1)
    return sequential.Design(n, n)


def _judge(
    fname: str,
    higher: bool,
    tol: Tolerance,
    b_vals: Sequence[float],
    c_vals: Sequence[float],
    judging: _Judging,
    *,
    key: str,
    exact: bool = False,
) -> CompareRow:
    """One row: the compared figures (``_compared``; medians for exact rows), delta, and the verdict.

    Exact rows: worse beyond the tolerance -> ``REGRESSED``, any other difference ``changed``/``improved``, no test.
    Other rows: ``sequential.decide_shift`` on the per-repeat values at the tolerance (relative at the baseline
    median), with the baseline's history (:meth:`_Judging.pooled`): within -> ``ok`` (``improved`` when the whole
    interval is better than the tolerance), worse -> ``REGRESSED``, open -> ``undecided``.
    """
    change = _change(b_vals, c_vals)
    base_median, delta = change.baseline, change.delta
    if base_median is not None and change.current is None and fname == "accept_length":
        # The baseline had the figure and this run has none: an accept length gone is a server that stopped
        # speculating (SGLang sends spec_verify_ct only with speculative decoding on), never a pass.
        return CompareRow(fname, higher, *change, tol, "REGRESSED", note=_LOST_NOTE)
    if base_median is None or delta is None:
        return CompareRow(fname, higher, *change, tol, "n/a")
    worse = _worse_by(delta, higher)
    # A relative margin so that "10% shift at a 10% tolerance" is not decided by float rounding.
    margin = 1e-9 * max(abs(base_median), 1.0)
    allowed = tol.allowed(base_median)
    if exact:
        if worse > allowed + margin:
            verdict = "REGRESSED"
        elif delta == 0:
            verdict = "ok"
        else:
            verdict = "improved" if worse < 0 else "changed"
        return CompareRow(fname, higher, *change, tol, verdict, basis="exact")
    limit = allowed / abs(base_median) if base_median else tol.rel
    history = judging.pooled(key, b_vals)
    # One stored run shows no run-to-run spread, and 2-3 cannot size it; each run is one server instance, and
    # instances differ: the interval takes a spread (``_Judging.assumed_sd``) until 4 stored runs measure one.
    instance_sd = judging.assumed_sd(key, _within(b_vals, c_vals)) if history is None else 0.0
    if history is not None and history.assumed:
        instance_sd = math.expm1(math.sqrt(history.between))  # the assumed one, or 2-3 runs' estimate if larger
    if tol.abs:
        # An absolute part (``10%+5`` ms) is decided on the two runs' difference (near-zero latencies have no useful
        # log scale), with the run-to-run part the history measured or the one assumed.
        run_sd = math.expm1(math.sqrt(history.between)) if history is not None else instance_sd
        decision = sequential.decide_shift(b_vals, c_vals, limit, judging.design, higher_is_better=higher,
                                           allowed=allowed, instance_sd=run_sd)  # fmt: skip
        history = None  # the figures shown are the two runs' means
    else:
        decision = sequential.decide_shift(b_vals, c_vals, limit, judging.design, higher_is_better=higher,
                                           history=history, instance_sd=instance_sd)  # fmt: skip
    verdict = {"within": "ok", "worse": "REGRESSED"}.get(decision.verdict, "undecided")
    if verdict == "ok" and decision.low is not None and decision.high is not None:
        better_end = decision.low if higher else 1.0 / decision.high
        if better_end > 1.0 + limit:
            verdict = "improved"
    shown = _compared(b_vals, c_vals, history, linear=bool(tol.abs)) or change
    scale = abs(shown.baseline) if shown.baseline is not None else abs(base_median)
    if history is not None:
        noise = math.sqrt(history.var) * scale  # a relative sigma, at the baseline shown
    elif base_median and not tol.abs:  # the relative spread the test used (sd of the logs), at the baseline shown
        noise = stats.pooled_sd(b_vals, c_vals, log=True) * scale
    else:  # an absolute tolerance part, or a baseline median of 0 (ITL p50 of events that arrived together): units
        noise = stats.pooled_sd(b_vals, c_vals)
    limit_ratio = None
    if tol.abs and shown.baseline:
        limit_ratio = 1.0 + (-allowed if higher else allowed) / abs(shown.baseline)
    return CompareRow(fname, higher, *shown, tol, verdict, decision, noise=noise or None, design=judging.design,
                      instance_sd=instance_sd, busy=bool(instance_sd) and judging.busy_cpu is not None,
                      limit_ratio=limit_ratio)  # fmt: skip


def _compared(
    b_vals: Sequence[float], c_vals: Sequence[float], history: sequential.History | None, *, linear: bool
) -> _Change | None:
    """The figures a statistical verdict compares, so that a row's delta % and its ``x`` estimate agree: geometric
    means over repeats (the baseline's from its stored runs when ``history`` pooled them), arithmetic means for a
    tolerance with an absolute part (``sequential.decide_shift``). None when a side has no positive value.

    Why not the medians: a run whose last two of 16 repeats stalled (296 and 307 tok/s beside ~480; H200, 2026-12-04)
    read -9.1% by medians beside a verdict of x0.81, REGRESSED at a 15% tolerance.
    """
    b = [float(v) for v in b_vals if v is not None and math.isfinite(v)]
    c = [float(v) for v in c_vals if v is not None and math.isfinite(v)]
    if not b or not c:
        return None
    if linear:
        base, cur = sum(b) / len(b), sum(c) / len(c)
    else:
        if min(b + c) <= 0:
            return None
        g_base, g_cur = stats.geometric_mean(b), stats.geometric_mean(c)
        assert g_base is not None and g_cur is not None  # every value positive
        base, cur = (math.exp(history.mean) if history is not None else g_base), g_cur
    delta = cur - base
    return _Change(base, cur, delta, delta / abs(base) * 100.0 if base else None)


def _paired_rows(
    base: ResultRecord, current: ResultRecord, tolerances: Tolerances, judging: _Judging
) -> tuple[dict[str, CompareRow], str | None]:
    """``metric / vs`` ratio rows for the paired fields, when both records carry the same paired reference arm.

    On a shared runner the raw throughput of two runs differs by the runner's load (-28 % measured on 2 busy
    cores); the ratio to an arm measured in the same minutes does not. A ratio row takes its own tolerance where one
    is given (``output_tok_s/baseline:15%``: ``Tolerances.ratio``), else its field's. A relative tolerance applies to
    the ratio as it is; an absolute one is turned relative at the baseline's raw median. Noise key:
    ``output_tok_s/baseline``. Not every slowdown shows in the ratio: one that slows both arms alike (a lost NCCL
    setting) leaves it unchanged; the raw rows beside it say so.
    """
    vs = (base.paired or {}).get("vs")
    if not vs or vs != (current.paired or {}).get("vs"):
        return {}, None
    specs = field_specs()
    rows: dict[str, CompareRow] = {}
    for fname in PAIRED_FIELDS:
        tol = tolerances.ratio(fname, vs) if fname in tolerances else None
        b_ratios, c_ratios = paired_ratios(base, fname), paired_ratios(current, fname)
        if tol is None or not b_ratios or not c_ratios:
            continue
        rows[fname] = dataclasses.replace(
            _judge(
                fname,
                specs[fname].higher_is_better,
                _relative(tol, base.values(fname)),
                b_ratios,
                c_ratios,
                judging,
                key=f"{fname} / ",
            ),
            metric=f"{fname} / {vs}",
        )
    return rows, vs


@dataclass(frozen=True, slots=True)
class RunComparison:
    """:func:`compare_runs` result: one :class:`Comparison` per test found in both runs, plus what was skipped."""

    comparisons: tuple[Comparison, ...]
    missing: tuple[str, ...] = field(default=())
    refused: tuple[str, ...] = field(default=())

    @property
    def failed(self) -> bool:
        return any(c.failed for c in self.comparisons)


def compare_runs(
    base: RunFile,
    current: RunFile,
    tolerances: Mapping[str, Tolerance] | None = None,
    *,
    force: bool = False,
    baseline_id: Callable[[ResultRecord], str] | None = None,
    noise: Mapping[str, float] | Callable[[ResultRecord], Mapping[str, float]] | None = None,
    history: Callable[[ResultRecord], Sequence[ResultRecord]] | None = None,
) -> RunComparison:
    """Compare every test of ``current`` with the same test id in ``base``, each at the design its record was
    judged with in pytest (:func:`design_of`), so a stored run reads as pytest decided it.

    Tests without a baseline go to ``missing``; workload mismatches (when not forced) go to ``refused`` with the
    :class:`CompareError` message instead of raising, so one changed test does not hide the others.

    :param tolerances: the command line's ``-t`` layer, over the tolerances each record was judged with
        (:func:`judged_tolerances`).
    :param baseline_id: the test id to look up in ``base`` for a current record (default: its own), e.g. from
        :func:`profile_mapper` to compare one profile with another.
    :param history: a baseline record -> its other stored runs of the same fingerprint (pooled variance).
    :param noise: calibrated relative noise, one mapping for every record or a current record -> its profile's
        (as pytest reads ``noise/<profile>.json``).
    """
    comparisons, missing, refused = [], [], []
    for record in current.results:
        wanted = baseline_id(record) if baseline_id is not None else record.test_id
        old = base.find(wanted)
        if old is None:
            missing.append(record.test_id if wanted == record.test_id else f"{record.test_id} (as {wanted})")
            continue
        try:
            comparisons.append(
                compare_results(
                    old,
                    record,
                    judged_tolerances(record, tolerances),
                    force=force,
                    noise=noise(record) if callable(noise) else noise,
                    design=design_of(record),
                    history=history(old) if history is not None else (),
                )  # fmt: skip
            )
        except CompareError as exc:
            refused.append(str(exc))
    return RunComparison(tuple(comparisons), tuple(missing), tuple(refused))


def judged_tolerances(record: ResultRecord, override: Mapping[str, Tolerance] | None = None) -> dict[str, Tolerance]:
    """The tolerances pytest judged a stored record with, ``override`` (the ``compare`` command's ``-t``) on top:
    ``cost["tolerances"]`` (the merged ini, profile and marker layers, stored with every record), else, for a
    record stored without them, its profile's own ``tolerances`` (``fingerprint.profile_def``) over the defaults.
    Seen on an H200 night: pytest judged tok/s at the profile's 15%, the command at the default 5%.

    :raises ValueError: never for a stored spec the plugin wrote; a hand-edited one that does not parse is skipped.
    """
    spec = (record.cost or {}).get("tolerances") or ((record.fingerprint or {}).get("profile_def") or {}).get(
        "tolerances")  # fmt: skip
    judged: Mapping[str, Tolerance] | None = None
    if isinstance(spec, (str, list)) and spec:
        try:
            judged = parse_tolerances(spec)
        except ValueError:
            judged = None
    return merge_tolerances(judged, override)


def design_of(record: ResultRecord) -> sequential.Design | None:
    """The sequential design a stored record was judged with (``cost["design"]``: start, max_repeats), or None for
    a record stored without one (a single look at its repeats is then used)."""
    found = (record.cost or {}).get("design")
    if not isinstance(found, Mapping):
        return None
    try:
        return sequential.Design(int(found["start"]), int(found["max_repeats"]))
    except (KeyError, TypeError, ValueError):
        return None


def swap_profile_id(test_id: str, profile: str, other: str) -> str:
    """``test_id`` with the profile part of its parametrization id replaced, and nothing else:
    ``t.py::test_x[eagle3-shifted-layers-1]`` with (eagle3-shifted-layers, eagle3) -> ``t.py::test_x[eagle3-1]``.
    The same test id is returned when ``profile`` is not a whole part of the brackets."""
    return re.sub(rf"(?<=[\[-]){re.escape(profile)}(?=[\]-])", other, test_id, count=1)
