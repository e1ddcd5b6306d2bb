"""One test's verdict after its body: its thresholds on the profile's measurement, the paired ``min_speedup`` check,
and the stored-baseline compare, each with three outcomes (passed / FAILED / undecided) and each measured until
decided: a check whose interval cannot tell asks for one more repeat or pair (``MeasureHandle.more``) at a time, up
to the profile's budget (``workload.max_repeats``, ``max_server_s``; ``sequential.DEFAULT_MAX_REPEATS`` when unset),
and at the budget says *undecided* with what would decide it. What each check needed goes to the record (``cost``).

One measurement, one verdict: every test of a profile reads the same measurement, so a check is judged once per run
and profile (``Outcomes.once``); a later test gets the same answer, figures and cost line.

``run.session`` calls :func:`judge_item` after a test body with plain values: the test's record and thresholds,
the run's measurements as a :class:`~pytest_specdec.judge.handle.MeasureHandle` (read, and ask for more), and the
run's :class:`~pytest_specdec.judge.outcomes.Outcomes`; it gets back an :class:`ItemVerdict` (the record as judged,
the checks, the warnings, the failure text) and applies it to the test. Nothing here knows pytest.
"""

from __future__ import annotations

import dataclasses
import functools
import math
import statistics
import textwrap
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from pytest_specdec.core.errors import CompareError
from pytest_specdec.core.tolerances import Tolerance, format_tolerances, merge_tolerances
from pytest_specdec.judge import compare, sequential, speedup, sweep
from pytest_specdec.judge.noise import CalibratedNoise
from pytest_specdec.judge.thresholds import (
    FLOOR_RULES,
    Check,
    ThresholdChecks,
    evaluate,
    shown_against,
    sweep_not_applicable,
    tail_verdicts,
)
from pytest_specdec.measure import results, runner
from pytest_specdec.profiles.schema import MinSpeedup, Profile, Thresholds

if TYPE_CHECKING:
    from pytest_specdec.core.records import RunMetrics
    from pytest_specdec.judge.baseline import Baseline, Baselines
    from pytest_specdec.judge.handle import MeasureHandle
    from pytest_specdec.judge.history import StoredHistory
    from pytest_specdec.judge.outcomes import Outcomes
    from pytest_specdec.measure.pairing import PairedArms

__all__ = [
    "UNDECIDED_POLICIES",
    "BisectHint",
    "CompareSetup",
    "CompareVerdict",
    "ItemVerdict",
    "compare_item",
    "design_for",
    "failure_message",
    "judge_compare",
    "judge_item",
    "record_cost",
    "sequential_checks",
    "shared_verdict_message",
    "speedup_check",
    "sweep_steps",
    "OpenRow",
    "undecided_block",
    "undecided_reason",
]

#: ``bisection.bisect_hint``'s shape: (fingerprint diff, good run, bad run, test id, good test id) -> the line.
BisectHint = Callable[[Sequence[str], str, str, str, "str | None"], str]
#: ``--specdec-undecided``: ``fail`` fails a test with an undecided verdict, ``warn`` passes it with a warning.
UNDECIDED_POLICIES = ("fail", "warn")


@dataclass(frozen=True, slots=True)
class CompareSetup:
    """What ``--specdec-compare`` asks of every test (``RunSettings``), and where its baselines come from."""

    baselines: Baselines
    #: This run's id (the bisect command names it).
    run_id: str
    #: ``--specdec-compare-profile``: tests of profiles of this profile's kind compare with its stored results.
    profile: str | None = None
    #: Whether ``profile`` runs speculative decoding: it maps the tests of profiles that do (or, False, that don't).
    profile_speculative: bool = True
    #: ``--specdec-compare-missing``: ``fail`` fails a test without a baseline, ``warn`` passes it with a warning.
    missing: str = "fail"
    #: ``--specdec-compare-force``: compare although the workloads differ.
    force: bool = False
    #: Adds the ``bisect`` command under a failure with several fingerprint differences (``bisection.bisect_hint``).
    bisect_hint: BisectHint | None = None
    #: The baseline's other stored runs of the same fingerprint (pooled variance); None: the baseline alone.
    history: StoredHistory | None = None


@dataclass(frozen=True, slots=True)
class ItemVerdict:
    """What :func:`judge_item` decided for one test."""

    #: The test's result record as judged (longer runs, paired verdict, ``cost``).
    record: results.ResultRecord
    #: Per-threshold outcomes (``thresholds.ThresholdChecks.outcomes``).
    checks: dict[str, str]
    #: ``SpecdecWarning`` texts, in the order they arose.
    warnings: tuple[str, ...] = ()
    #: The failure text (threshold verdict, then the compare, then undecided verdicts under ``fail``), or None.
    failure: str | None = None
    #: The verdicts that stayed undecided at the budget, one line each (the summary counts them).
    undecided: tuple[str, ...] = ()


@dataclass(slots=True)
class _Case:
    """One test while it is judged: its node id, its record as it is now, the warnings so far."""

    nodeid: str
    record: results.ResultRecord
    warnings: list[str] = field(default_factory=list)
    undecided: list[str] = field(default_factory=list)

    def replace(self, **changes: Any) -> None:
        self.record = dataclasses.replace(self.record, **changes)


def design_for(profile: Profile, repeats: int) -> sequential.Design:
    """The sequential design of ``profile``'s verdicts: looks from ``repeats`` (the first measurement) up to
    ``workload.max_repeats`` (:data:`sequential.DEFAULT_MAX_REPEATS` when unset), within ``max_server_s``.
    ``max_repeats`` equal to ``repeats`` is a single look: fixed repeats."""
    wl = profile.workload
    most = max(wl.max_repeats or sequential.DEFAULT_MAX_REPEATS, repeats)
    return sequential.Design(repeats, most, max_server_s=wl.max_server_s)


def judge_item(
    record: results.ResultRecord,
    *,
    nodeid: str,
    profile: Profile,
    thresholds: Thresholds,
    profiles: Mapping[str, Profile],
    repeats: int,
    measurements: MeasureHandle,
    outcomes: Outcomes,
    compare_setup: CompareSetup | None = None,
    tolerances: Mapping[str, Tolerance] | None = None,
    undecided: str = "warn",
) -> ItemVerdict:
    """A test's verdict after its body: its thresholds, then the baseline compare.

    :param record: the test's result record (``ResultRecord.from_measurements`` of its profile's run).
    :param thresholds: the profile's, merged with the test's marker.
    :param profiles: every loaded profile (a sweep point's steps are read from the profile it was derived from).
    :param repeats: the first measurement's repeats (``RunSettings.repeats_of``), where the design starts.
    :param measurements: read the profile's run, and ask for more (sequential verdicts).
    :param outcomes: gets the first failure of each verdict, the compares and their notes; holds the verdicts
        already judged for the profile (``Outcomes.once``).
    :param compare_setup: ``--specdec-compare`` (None without the option).
    :param tolerances: the test's compare tolerances, merged once from its layers (``tolerances.merge_tolerances``
        of the ini's, the profile's and the marker's); None: the defaults.
    :param undecided: ``--specdec-undecided`` (:data:`UNDECIDED_POLICIES`): ``fail`` fails the test on an
        undecided verdict, ``warn`` passes it with a warning.
    """
    case = _Case(nodeid, record)
    vs = thresholds.min_speedup.vs if thresholds.min_speedup is not None else None
    design = design_for(profile, repeats)
    merged = tolerances if tolerances is not None else merge_tolerances()
    # The design and the tolerances the record is judged with: the ``compare`` command reads both from the record.
    costs: dict[str, dict[str, Any]] = {"design": {"start": design.start, "max_repeats": design.max_repeats},
                                        "tolerances": {"specs": format_tolerances(merged)}}
    # Thresholds first: a clear one decides at the first look and costs that, before the speedup measures on.
    steps, configured = sweep_steps(profile, profiles)
    # A failure the first repeats decide exactly (temperature 0) decides the test: the other verdicts judge what was
    # measured and measure no more (on a GPU each repeat of a night already red costs minutes).
    halt = None
    if steps is None:
        halt = exact_failure(case, measurements, profile, thresholds, compare_setup, merged, outcomes)
    if halt is not None:
        measurements = _Halted(measurements, halt)
    fixed, one_look = None, design
    if steps is None:
        judged = sequential_checks(case, measurements, outcomes, profile, thresholds, vs, design, costs)
    else:
        # A sweep point is measured with the sweep's repeats: its floors are judged on them, at one look (passed
        # only when their interval clears the limit; one repeat has none, so only an exact figure decides there).
        n = len(measurements.run(profile.name).measurements)
        fixed = (f"a sweep point is judged on the sweep's {n} repeat{'s' if n != 1 else ''} (--specdec-repeats or "
                 "workload.repeats set them)")  # fmt: skip
        one_look = sequential.Design(max(n, 1), max(n, 1))
        judged = sequential_checks(case, _Fixed(measurements, fixed), outcomes, profile, thresholds, vs, one_look,
                                   costs, sweep=(steps, configured))  # fmt: skip
    # A sweep point measures no more: its speedup and compare, too, are judged at one look on what the sweep measured
    # (no point of a sweep gets more pairs than another).
    judging = measurements if fixed is None else _Fixed(measurements, fixed)
    check = None
    if thresholds.min_speedup is not None:
        speedup_design = design if fixed is None else _one_look(measurements.arms(profile.name,
                                                                                  thresholds.min_speedup.vs))
        check = speedup_check(case, judging, outcomes, profile.name, thresholds.min_speedup, speedup_design, costs)
    run = measurements.run(profile.name)
    # Once per profile and ceiling, as the floors: a later test whose marker measured more repeats would otherwise
    # judge the profile's p99 ceiling on more requests than the first test did, and the two could disagree.
    for key, tail in tail_verdicts(thresholds, run.metrics).items():
        judged[key] = outcomes.once(("tail", profile.name, key, repr(tail.threshold)), functools.partial(_itself, tail))
    verdict = evaluate(
        thresholds,
        run.metrics,
        speculative=profile.is_speculative,
        speedup_check=check,
        sweep_steps=steps,
        configured_steps=configured,
        judged=judged,
    )
    case.undecided.extend(c.line() for c in verdict.checks if c.undecided)
    case.warnings.extend(c.line() for c in verdict.checks if c.stopped)
    failures = []
    if verdict.failed:
        message = failure_message(verdict, profile.name, run.metrics.num_ok, len(run.measurements))
        first = outcomes.first_failure(profile.name, message, nodeid)
        if first != nodeid:
            message = shared_verdict_message(verdict, profile.name, first)
        failures.append(message)
    if compare_setup is not None:
        # From every repeat measured so far: min_speedup may have added pairs, and a compare that started from the
        # first measurement asked for one more past max_repeats (seen live: "FAILED after 25 repeats", max 24).
        _rebuild_record(case, measurements, profile.name, vs)
        compare_design = design if fixed is None else one_look
        text = compare_item(case, judging, outcomes, compare_setup, profile, merged, compare_design, costs)
        if text:
            # The compare leads: its fingerprint diff names the likely cause, the thresholds show the symptoms.
            failures.insert(0, text)
    _rebuild_record(case, measurements, profile.name, vs)
    record_cost(case, measurements, profile.name, vs, costs)
    stopped = None if halt is not None else fixed or measurements.more_error(profile.name)
    if case.undecided and stopped:
        # The budget was not what stopped them: say what did (it is not "more repeats would decide it").
        case.warnings.append(f"{profile.name}: {stopped}; the undecided verdicts stopped measuring there")
    if case.undecided:
        if undecided == "fail":
            if not failures:  # failed by the policy alone: its measurement may still join a history
                case.replace(cost={**case.record.cost, "failed_by": "undecided"})
            failures.append(_undecided_failure(case.undecided))
        else:
            not_failed = ": not failed (--specdec-undecided=warn)"
            case.warnings.extend(_after_head(line, not_failed) for line in case.undecided)
    return ItemVerdict(
        case.record, verdict.outcomes(), tuple(case.warnings), "\n".join(failures) or None, tuple(case.undecided)
    )


def _undecided_failure(lines: Sequence[str]) -> str:
    head = f"{len(lines)} verdict{'s' if len(lines) != 1 else ''} undecided at the budget (--specdec-undecided=fail):"
    # A compare's line is a head and its open rows (undecided_block): each indented under the count as a whole.
    return "\n".join([head, *(textwrap.indent(line, "  ") for line in lines)])


def _after_head(text: str, suffix: str) -> str:
    """``suffix`` at the end of ``text``'s first line: an undecided compare's rows stay below its head."""
    head, newline, rows = text.partition("\n")
    return f"{head}{suffix}{newline}{rows}"


@dataclass(frozen=True, slots=True)
class OpenRow:
    """What :func:`undecided_reason` says of one open compare row: a short line (the metric, its estimate and
    interval, the tolerance, what would decide it) and the explanations behind it, which several rows share and
    :func:`undecided_block` gives once."""

    text: str
    why: tuple[str, ...] = ()

    def __str__(self) -> str:
        return self.text


def undecided_block(head: str, reasons: Sequence[str | OpenRow]) -> str:
    """An undecided compare as pytest's warning and the ``compare`` command print it: ``head`` on a line of its own,
    then one indented line per open row (:func:`undecided_reason`), then each explanation the rows share once,
    indented under ``* `` (a fresh-user trial read a 250-character reason per row, 8 rows a wall of text; before
    that, nine rows' reasons as one 2.5 kB line, once per test).

    Example: ``undecided_block("compare against run R1 undecided after 8 repeats (16.0 server-s), 2 rows open",
    [itl, tpot])`` with both rows kept open by the assumed run-to-run sd -> the head, ``  itl_ms_p50 x1.01, CI
    0.80-1.26 (98.3%) holds the tolerance 10%: 4+ stored runs would decide it (run-to-run sd taken as 7%)``, the same
    for tpot, then ``  * run-to-run: today's run is one more server instance; ...`` and ``  * else: ...`` once.
    """
    why = dict.fromkeys(w for r in reasons if isinstance(r, OpenRow) for w in r.why)
    return "\n".join([head, *(f"  {reason}" for reason in reasons), *(f"  * {w}" for w in why)])


def _per_repeat(run: runner.RunResult, field_name: str) -> list[float]:
    return [v for v in (_figure(field_name, m.metrics) for m in run.measurements) if v is not None]


def _measure_until(
    measurements: MeasureHandle,
    name: str,
    vs: str | None,
    design: sequential.Design,
    decided: Callable[[int], bool],
    verdict: str = "",
) -> int:
    """Ask for one more repeat (with ``vs``: one more pair) at a time until ``decided(p)`` at a look of ``design``,
    or the budget is spent, or nothing more can be measured. The next repeat is started only when its expected
    cost (the mean so far; a bracketed block's with its server switches) fits ``max_server_s``.

    A bracketed block of several pairs passes several looks: each is taken in order on the block's first ``p``
    pairs (``decided(p)``: judged on what was measured up to ``p``) and the first that decides ends the loop, so a
    block decides where pairs measured one at a time would have (its later pairs were measured and count in the
    budget, but not in the verdict; ``sequential.Design.looks_between``). Before, one look where the block ended:
    with 15-minute starts, one block of the whole budget had one look (replayed on an H100's pairs, a 20% slower
    target FAILED 103 of 200 times instead of 124; ``benchmarks/bench_bracketed.py``). The first look is where the
    loop starts (what earlier checks measured, all of it), as for pairs measured one at a time.

    :param decided: whether the verdict is decided on the first ``p`` pairs (repeats without ``vs``).
    :param verdict: its name in the progress line (``min_speedup: pair 9 of at most 24``).
    :returns: the pairs (repeats) the verdict is judged on: where it decided, else all that were measured.
    """
    n = _count(measurements, name, vs)
    if design.look_due(n, 0) and decided(n):
        return n
    last = n
    while True:
        step = _next_step(measurements, name, vs, design, n, in_phases=False)
        if not design.may_continue(n, measurements.spent_s(name, vs), step.cost_s, step=step.pairs) or (
            not measurements.can_measure(name)
        ):
            return n
        if not measurements.more(name, vs, step.pairs, why=_looking(verdict, vs, n, step.pairs, design)):
            return n
        n = _count(measurements, name, vs)
        for point in design.looks_between(last, n):
            last = point
            if decided(point):
                return point


def _looking(verdict: str, vs: str | None, measured: int, pairs: int | None, design: sequential.Design) -> str:
    """What a verdict's next measurement is, for the progress line: ``min_speedup: pair 9 of at most 24``,
    ``compare: repeats 4-6 of at most 24`` (``measured`` so far, ``pairs`` in the next block)."""
    unit = "pair" if vs else "repeat"
    first, last = measured + 1, measured + max(pairs or 1, 1)
    which = f"{unit} {first}" if last == first else f"{unit}s {first}-{last}"
    return f"{verdict + ': ' if verdict else ''}{which} of at most {design.max_repeats}"


def _first_measurements(
    measurements: MeasureHandle, name: str, vs: str | None, count: int
) -> tuple[runner.Measurement, ...]:
    """The profile's repeats measured by its first ``count`` pairs (repeats without ``vs``): a look inside a
    bracketed block judges them. Every pair added since the first measurement appended its target phases to the
    run (``MeasurementStore.more``), so the phases of the pairs after ``count`` are the run's last ones."""
    run = measurements.run(name).measurements
    arms = measurements.arms(name, vs) if vs else None
    if arms is None:
        return run[:count]
    later = sum(len(group) for group in arms.target[count:])
    return run[: max(len(run) - later, 0)]


def _first_pairs(arms: PairedArms, count: int) -> PairedArms:
    """``arms``' first ``count`` pairs (a look inside a bracketed block judges their ratios)."""
    return dataclasses.replace(arms, target=arms.target[:count], reference=arms.reference[:count])


@dataclass(frozen=True, slots=True)
class _Step:
    """What the next ``more()`` is asked for and adds: ``pairs`` (repeats without a pairing), the target phases it
    adds (a compare's repeats) and its expected cost in seconds (None: the budget's mean-repeat rule)."""

    pairs: int
    phases: int
    cost_s: float | None = None


def _next_step(
    measurements: MeasureHandle, name: str, vs: str | None, design: sequential.Design, n: int, *, in_phases: bool
) -> _Step:
    """The next ``more()`` after ``n`` (pairs, or target phases when ``in_phases``: a compare counts its repeats).
    Alone or interleaved: one repeat or pair. Bracketed (``pairing.PairedArms``): one block of pairs, each with its
    target phases around the reference, that reaches the design's next look and whose measuring lasts at least as
    long as the block's two server switches (:func:`_bracket_pairs`), with its cost counted before asking: on real
    SGLang a block of the first block's 3 pairs cost two restarts for 3 pairs and passed looks without landing on
    them (2026-12-06, an H100: 5 blocks in 10 minutes, no verdict)."""
    arms = measurements.arms(name, vs) if vs else None
    if arms is None or arms.mode == "interleaved":
        return _Step(1, 1)
    per_pair = max((len(group) for group in arms.target), default=1)
    pair_s = arms.measuring_s() / max(arms.pairs, 1)
    switch_s = arms.restart_s / arms.brackets if arms.brackets else 0.0
    pairs = _bracket_pairs(design, n, per_pair if in_phases else 1, pair_s, switch_s)
    return _Step(pairs, pairs * per_pair, pairs * pair_s + switch_s)


def _bracket_pairs(design: sequential.Design, n: int, unit: int, pair_s: float, switch_s: float) -> int:
    """Pairs of the next bracketed block after ``n`` (in ``unit`` per pair): the fewest that reach a look point of
    ``design`` and measure at least ``switch_s`` (a block's server switches, s) at ``pair_s`` a pair, else the rest
    of the budget in one block (a 15-minute start: the whole budget at once, one look). At least 1."""
    room = (design.max_repeats - n) // unit
    if room < 1:
        return 1  # past the budget: ``Design.may_continue`` refuses it
    for point in design.points:
        if point <= n:
            continue
        pairs = min(math.ceil((point - n) / unit), room)
        if pairs * pair_s >= switch_s:
            return pairs
    return room


def _count(measurements: MeasureHandle, name: str, vs: str | None) -> int:
    arms = measurements.arms(name, vs) if vs else None
    return arms.pairs if arms is not None else len(measurements.run(name).measurements)


@dataclass(frozen=True, slots=True)
class _Floor:
    """One floor or ceiling decided on per-repeat values: a ``thresholds.FLOOR_RULES`` threshold, a per-position floor
    (``min_accept_rate_at``) or a per-category one (``categories:``)."""

    #: The threshold key (``Check.key``): ``min_accept_rate_at``, ``min_accept_length``, ...
    key: str
    #: Where its cost is recorded: the key, or ``min_accept_rate_at[1]``, ``min_accept_length[code]``.
    cost_key: str
    #: ``Check.label``: ``output_tok_s``, ``accept_rate_at[1]``, ``accept_length[code]``.
    label: str
    op: str
    threshold: float
    unit: str
    #: The field whose exactness rule applies (``metric_table.is_exact``; per-position rates are accept rates).
    exact_field: str
    #: The figure of one repeat, None when that repeat did not report it.
    value: Callable[[RunMetrics], float | None]


def _floors(
    profile: Profile, thresholds: Thresholds, steps: int | None = None, configured: int | None = None
) -> list[_Floor]:
    """Every floor and ceiling of ``thresholds`` that per-repeat values decide (``thresholds.evaluate``'s labels),
    less a ``min_accept_length`` a sweep point at ``steps`` cannot reach or that was set for more steps."""
    floors = []
    # Throughput first: it is the floor that most often measures on, and the cost line has always led with it.
    for key in sorted(FLOOR_RULES, key=lambda k: k != "min_tok_s"):
        field_name, op, label, unit, spec_only = FLOOR_RULES[key]
        threshold = getattr(thresholds, key)
        if threshold is not None and sweep_not_applicable(key, threshold, steps, configured):
            continue
        if threshold is not None and (profile.is_speculative or not spec_only):
            floors.append(_Floor(key, key, label, op, float(threshold), unit, field_name,
                                 functools.partial(_figure, field_name)))  # fmt: skip
    speculative = profile.is_speculative
    for position, floor in sorted((thresholds.min_accept_rate_at or {}).items() if speculative else ()):
        floors.append(_Floor("min_accept_rate_at", f"min_accept_rate_at[{position}]", f"accept_rate_at[{position}]",
                             ">=", floor, "", "accept_rate", functools.partial(_position, position, None)))  # fmt: skip
    for category, limits in sorted((thresholds.categories or {}).items()):
        for key, threshold in limits.model_dump(exclude_none=True).items():
            if key == "min_accept_rate_at":
                drafted = threshold.items() if speculative else ()
                for position, floor in sorted((p, f) for p, f in drafted if steps is None or p <= steps):
                    floors.append(_Floor(key, f"{key}[{position}][{category}]",
                                         f"accept_rate_at[{position}][{category}]", ">=", floor, "", "accept_rate",
                                         functools.partial(_position, position, category)))  # fmt: skip
                continue
            field_name, op, label, unit, spec_only = FLOOR_RULES[key]
            if spec_only and not speculative or sweep_not_applicable(key, threshold, steps, configured):
                continue  # evaluate says why: no speculative decoding, or a sweep point's floor not applicable
            floors.append(_Floor(key, f"{key}[{category}]", f"{label}[{category}]", op, float(threshold), unit,
                                 field_name, functools.partial(_category_figure, category, field_name)))  # fmt: skip
    return floors


def _number(value: Any) -> float | None:
    return float(value) if isinstance(value, int | float) and not isinstance(value, bool) else None


def _figure(field_name: str, metrics: RunMetrics) -> float | None:
    return _number(getattr(metrics, field_name, None))


def _category_figure(category: str, field_name: str, metrics: RunMetrics) -> float | None:
    return _number((metrics.by_category or {}).get(category, {}).get(field_name))


def _position(position: int, category: str | None, metrics: RunMetrics) -> float | None:
    rates = metrics.accept_rate_at if category is None else (metrics.by_category or {}).get(category, {}).get(
        "accept_rate_at")
    rates = tuple(rates or ())
    return _number(rates[position - 1]) if len(rates) >= position else None


def sequential_checks(
    case: _Case,
    measurements: MeasureHandle,
    outcomes: Outcomes,
    profile: Profile,
    thresholds: Thresholds,
    vs: str | None,
    design: sequential.Design,
    costs: dict[str, dict[str, Any]],
    *,
    sweep: tuple[int | None, int | None] = (None, None),
) -> dict[str, Check]:
    """The floors and ceilings per-repeat values decide (the ``thresholds.FLOOR_RULES`` thresholds, per-position and
    per-category floors), each on its per-repeat values (``sequential.decide_floor``): more repeats (or pairs, with
    ``vs``) are measured while any is undecided and the budget allows, so a floor is never passed on a median whose
    interval holds it. Exact figures (accept length/rate/per-position rate at temperature 0, identical repeats:
    ``metric_table.is_exact``) decide at once and cost one repeat. Each check is judged once per profile and
    threshold (``outcomes.once``); its repeats and server-seconds go to ``costs`` (``min_tok_s``,
    ``min_accept_rate_at[1]``, ``min_accept_length[code]``).

    :param sweep: a sweep point's (num_steps, the profile's own num_steps) (``sweep_steps``): a ``min_accept_length``
        not applicable there (``thresholds.evaluate``) is not judged.
    :returns: threshold key (the ``thresholds.FLOOR_RULES``) or check label (``accept_rate_at[1]``,
        ``accept_length[code]``) -> its check, for ``thresholds.evaluate(judged=...)``.
    """
    from pytest_specdec.core.metric_table import is_exact

    def values_of(floor: _Floor, count: int) -> list[float]:
        found = (floor.value(m.metrics) for m in _first_measurements(measurements, profile.name, vs, count))
        return [v for v in found if v is not None]

    def decision(floor: _Floor, count: int) -> sequential.Decision | None:
        """The decision on the first ``count`` pairs (repeats without ``vs``): a look inside a bracketed block."""
        values = values_of(floor, count)
        if not values:  # "not reported": evaluate's median rule says so
            return None
        # Exact only as part of an exact run (every accept figure agrees across its repeats, not this one alone by
        # coincidence) and, where more can be measured, on 2 repeats or more: one repeat shows no agreement.
        exact = is_exact(floor.exact_field, values, temperature=profile.workload.temperature) and (
            design.max_repeats <= 1 or _exact_run(profile, measurements.run(profile.name)))
        return sequential.decide_floor(values, floor.threshold, design, exact=exact)

    def judge(floor: _Floor) -> tuple[Check, dict[str, Any]] | None:
        # Judged at the look that decided (a bracketed block's later pairs do not move its figures).
        count = _measure_until(measurements, profile.name, vs, design, lambda p: _decided(decision(floor, p)),
                               floor.cost_key)  # fmt: skip
        found = decision(floor, count)
        if found is None:
            return None
        return _floor_check(floor, found, values_of(floor, count), measurements, profile.name, vs, design)

    out: dict[str, Check] = {}
    for floor in _floors(profile, thresholds, *sweep):
        memo = ("check", profile.name, floor.cost_key, repr(floor.threshold), _halt_of(measurements))
        judged = outcomes.once(memo, functools.partial(judge, floor))
        if judged is not None:
            out[floor.key if floor.key == floor.cost_key else floor.label], costs[floor.cost_key] = judged
    return out


def _itself(check: Check) -> Check:
    return check


def _decided(decision: sequential.Decision | None) -> bool:
    return decision is None or decision.decided


def _floor_check(
    floor: _Floor,
    decision: sequential.Decision,
    values: Sequence[float],
    measurements: MeasureHandle,
    name: str,
    vs: str | None,
    design: sequential.Design,
) -> tuple[Check, dict[str, Any]]:
    """One threshold's check and cost from its last decision (a floor: above passes; a ceiling: below passes)."""
    op, unit, threshold = floor.op, floor.unit, floor.threshold
    spent = measurements.spent_s(name, vs)
    exact = decision.method.startswith("exact")
    good, bad = ("above", "below") if op == ">=" else ("below", "above")
    verdict = "passed" if decision.verdict == good else "FAILED" if decision.verdict == bad else "undecided"
    needed = None if decision.decided else sequential.repeats_needed(values, threshold, design)
    # An exact metric needed one repeat; its server-seconds are one repeat's share.
    repeats = 1 if exact else decision.n
    at = spent / max(decision.n, 1) if exact else spent
    bracket = sequential.detail(decision, unit="repeats", server_s=at, needed=needed, exhausted=True)
    if exact and decision.n == 1:  # max_repeats 1: nothing shows this engine's temperature-0 repeats agree
        bracket = (f"temperature 0, 1 repeat: decided by its value, {at:.1f} server-s; workload.max_repeats 1 "
                   "measures no second repeat to show the repeats agree (a batch-variant engine needs 2 or more)")
    elif exact:
        bracket = f"temperature 0, {decision.n} identical repeats: decided by the first, {at:.1f} server-s"
    kind = "min" if op == ">=" else "max"
    figure, margin = shown_against(decision.estimate, threshold)
    shown = f"{floor.label} {figure}{' ' + unit if unit else ''}"
    if verdict == "undecided":
        text = f"{shown}: undecided vs {kind} {threshold:g} [{bracket}]"
    else:
        sym = op if verdict == "passed" else ("<" if op == ">=" else ">")
        mean = "exact" if exact else "geometric mean"  # exact: "[exact; temperature 0, ...]"
        text = f"{shown} {sym} {kind} {threshold:g} ({margin}) [{mean}; {bracket}]"
    check = Check(floor.key, floor.label, op, threshold, decision.estimate, unit, verdict != "FAILED", text=text,
                  undecided=verdict == "undecided")  # fmt: skip
    halt = _halt_of(measurements)
    if check.undecided and halt:
        check = _not_measured(check, halt, f"{decision.n} repeat{'s' if decision.n != 1 else ''}")
        verdict = NOT_MEASURED
    return check, {"verdict": verdict, "repeats": repeats, "server_s": round(at, 3)}


#: A verdict that stopped measuring before it decided because the test had already failed decisively: neither passed
#: nor undecided at the budget (``report.summary.undecided_lines`` does not count it; it never fails a test).
NOT_MEASURED = "not measured further"


def _not_measured(check: Check, halt: str, measured: str) -> Check:
    """``check`` (undecided) as a verdict not measured further: ``output_tok_s 95.1 tok/s: not measured further vs
    min 100 (geometric mean of 3 repeats; eagle3 had already failed min_accept_length)``: the figure is the
    check's estimate, not the summary's median repeat."""
    kind = "min" if check.op == ">=" else "max"
    x = "x" if check.unit == "x" else ""
    unit = x or (f" {check.unit}" if check.unit else "")
    shown = f"{check.label} {check.measured:.4g}{unit}" if check.measured is not None else check.label
    text = f"{shown}: not measured further vs {kind} {check.threshold:g}{x} (geometric mean of {measured}; {halt})"
    return dataclasses.replace(check, passed=True, undecided=False, stopped=halt, text=text)


def exact_failure(
    case: _Case,
    measurements: MeasureHandle,
    profile: Profile,
    thresholds: Thresholds,
    compare_setup: CompareSetup | None,
    tolerances: Mapping[str, Tolerance],
    outcomes: Outcomes,
) -> str | None:
    """Why the test has already failed decisively, or None: at temperature 0, a speculative profile whose repeats
    agree exactly (every repeat's accept length and rate identical) and that misses an accept-length/rate floor,
    a per-position floor (``min_accept_rate_at``), a per-category floor, or whose compare has an exact row that
    REGRESSED (``compare.CompareRow.basis`` ``exact``). These are decided by the first repeats whatever more are
    measured, so :func:`judge_item` measures no more for the test's other verdicts.

    :returns: ``eagle3 had already failed min_accept_length`` or ``eagle3's compare had already regressed
        accept_length (exact)``.
    """
    from pytest_specdec.core.metric_table import EXACT_FIELDS

    run = measurements.run(profile.name)
    if not _exact_run(profile, run):
        return None
    checks = evaluate(thresholds, run.metrics, speculative=True)
    exact_keys = {k for k, rule in FLOOR_RULES.items() if rule.field in EXACT_FIELDS} | {"min_accept_rate_at"}
    failed = [c for c in checks.failed if c.key in exact_keys]
    if failed:
        return f"{profile.name} had already failed {failed[0].key}"
    if compare_setup is None:
        return None
    found = _baseline_of(case.record, compare_setup, profile)[1]
    if found is None:
        return None
    try:
        comparison = compare.compare_results(found.record, case.record, tolerances, force=compare_setup.force,
                                             noise=outcomes.noise(profile.name))  # fmt: skip
    except CompareError:
        return None
    rows = [r.metric for r in comparison.regressions if r.basis == "exact"]
    return f"{profile.name}'s compare had already regressed {rows[0]} (exact)" if rows else None


def _one_look(arms: PairedArms | None) -> sequential.Design:
    """A single look at the pairs measured (a sweep point's ``min_speedup``)."""
    pairs = max(arms.pairs if arms is not None else 1, 1)
    return sequential.Design(pairs, pairs)


def _exact_run(profile: Profile, run: runner.RunResult) -> bool:
    """A speculative profile at temperature 0 whose 2 or more repeats agree exactly on accept length and rate: its
    accept figures (per position and category too) are decided by the first repeat. Repeats that differ (a
    batch-variant engine) are judged statistically; one repeat alone shows no agreement."""
    from pytest_specdec.core.metric_table import EXACT_FIELDS, is_exact

    if profile.workload.temperature != 0 or not profile.is_speculative or len(run.measurements) < 2:
        return False  # one repeat shows no agreement
    reported = {f: values for f in EXACT_FIELDS if (values := _per_repeat(run, f))}  # a field not reported: no vote
    return bool(reported) and all(is_exact(f, values, temperature=0) for f, values in reported.items())


def _halt_of(measurements: MeasureHandle) -> str:
    """The reason a :class:`_Halted` handle gives; "" for one that may measure on."""
    return measurements.reason if isinstance(measurements, _Halted) else ""


@dataclass(frozen=True, slots=True)
class _Fixed:
    """A :class:`MeasureHandle` that reads the measurements so far and measures no more, saying why (a sweep point:
    its verdicts left open are undecided)."""

    inner: MeasureHandle
    reason: str

    def run(self, profile: str) -> runner.RunResult:
        return self.inner.run(profile)

    def arms(self, profile: str, vs: str) -> PairedArms | None:
        return self.inner.arms(profile, vs)

    def pair_error(self, profile: str, vs: str) -> str | None:
        return self.inner.pair_error(profile, vs)

    def more_error(self, profile: str) -> str | None:
        return self.reason

    def can_measure(self, profile: str) -> bool:
        return False

    def more(self, profile: str, vs: str | None, pairs: int | None = None, *, why: str = "") -> bool:
        return False

    def spent_s(self, profile: str, vs: str | None) -> float:
        return self.inner.spent_s(profile, vs)


@dataclass(frozen=True, slots=True)
class _Halted(_Fixed):
    """A :class:`_Fixed` handle of a test that has already failed decisively: its verdicts left open are *not
    measured further* (:data:`NOT_MEASURED`), not undecided."""


def _rebuild_record(case: _Case, measurements: MeasureHandle, name: str, vs: str | None) -> None:
    """The test's record from the profile's run as it is now (every test of the profile shows the same figures):
    its repeats, and its paired arms, which a later test's ``min_speedup`` may have extended without adding a
    repeat count this test would notice (a fresh-user trial found 6 pairs in one test's record and 3 in the other's,
    and the ``compare`` command judged them differently)."""
    measured = measurements.run(name).measurements
    arms = measurements.arms(name, vs) if vs else None
    now = arms.to_dict() if arms is not None else {}
    stale_arms = any(case.record.paired.get(k) != v for k, v in now.items())
    if len(measured) == len(case.record.repeats.get("output_tok_s", [])) and not stale_arms:
        return
    fresh = results.ResultRecord.from_measurements(case.nodeid, measured, case.record.fingerprint)
    case.replace(
        metrics=fresh.metrics, repeats=fresh.repeats, samples=fresh.samples, wall_time=fresh.wall_time,
        paired={**case.record.paired, **now},
    )  # fmt: skip


def record_cost(
    case: _Case, measurements: MeasureHandle, name: str, vs: str | None, costs: Mapping[str, Mapping[str, Any]]
) -> None:
    """Put what the test's verdicts cost into its record (``ResultRecord.cost``): the server-seconds and repeats
    of the run it was judged on, the design and tolerances it was judged with (``design``: start, max_repeats;
    ``tolerances``: ``format_tolerances`` of the merged layers; the ``compare`` command reads both to decide as
    pytest did), and per verdict its outcome, repeats and server-seconds."""
    cost: dict[str, Any] = {
        "server_s": round(measurements.spent_s(name, vs), 3),
        "repeats": len(measurements.run(name).measurements),
    }
    if "design" in costs:
        cost["design"] = dict(costs["design"])
    if "tolerances" in costs:
        cost["tolerances"] = costs["tolerances"]["specs"]
    verdicts = {k: dict(v) for k, v in costs.items() if k not in ("design", "tolerances")}
    if verdicts:
        cost["verdicts"] = verdicts
    case.replace(cost=cost)


def sweep_steps(profile: Profile, profiles: Mapping[str, Profile]) -> tuple[int | None, int | None]:
    """At a sweep point (``eagle3@num_steps=2``): the point's ``num_steps`` and those of the profile it was derived
    from (``eagle3`` in ``profiles``); a threshold the point cannot reach by construction, or one set for more steps,
    is not applicable there (``thresholds.evaluate``). ``(None, None)`` for a profile outside a sweep."""
    base_name, point = sweep.split_name(profile.name)
    if not point:
        return None, None
    steps = profile.speculative.num_steps if profile.speculative is not None else None
    base = profiles.get(base_name)
    configured = base.speculative.num_steps if base is not None and base.speculative is not None else None
    return steps, configured


def failure_message(verdict: ThresholdChecks, profile: str, num_ok: int, repeats: int) -> str:
    """The threshold verdict's text: one line per missed threshold, with its context.

    Example: ``accept_length 2.352 tok/verify < min 2.5 [..., decided after 3 repeats ...] [profile eagle3, 64
    requests x 3 repeats]`` (each line's own bracket says how its figure was decided: exact, geometric mean).

    :param num_ok: requests that succeeded in the measured phase (``RunMetrics.num_ok``).
    :param repeats: measured phases (the metrics are their medians).
    """
    context = f"profile {profile}, {num_ok} requests" + (f" x {repeats} repeats" if repeats > 1 else "")
    return verdict.message(context)


def shared_verdict_message(verdict: ThresholdChecks, profile: str, first: str) -> str:
    """The text for a later test of a profile that failed like ``first`` (a node id): every test of a profile shares
    one measurement, so the verdict is printed once and referred to after."""
    missed = ", ".join(c.label for c in verdict.failed)
    return (
        f"{missed} missed the thresholds of profile {profile}: the same verdict as "
        f"{first.split('::', 1)[-1]} (printed there)"
    )


def speedup_check(
    case: _Case,
    measurements: MeasureHandle,
    outcomes: Outcomes,
    name: str,
    ms: MinSpeedup,
    design: sequential.Design,
    costs: dict[str, dict[str, Any]],
) -> Check:
    """The ``min_speedup`` check of profile ``name`` on its paired arms: one more pair at a time until the interval
    of the ratio is above the floor (passed) or below it (FAILED), or the budget is spent (undecided, with what would
    decide it). Not measured fails with the reason (never a silent pass). Judged once per profile and floor."""
    if measurements.arms(name, ms.vs) is None:
        reason = measurements.pair_error(name, ms.vs) or f"profile {ms.vs!r} was not measured with {name!r}"
        text = f"speedup vs {ms.vs}: not measured: {reason}"
        return Check("min_speedup", f"speedup vs {ms.vs}", ">=", ms.ratio, None, "x", False, text=text)

    def judge() -> tuple[Check, dict[str, Any], dict[str, Any]]:
        def ratios(count: int) -> list[float]:
            arms = measurements.arms(name, ms.vs)
            return _first_pairs(arms, count).ratios() if arms is not None else []

        count = _measure_until(measurements, name, ms.vs, design,
                               lambda p: sequential.decide_floor(ratios(p), ms.ratio, design).decided,
                               "min_speedup")  # fmt: skip
        arms = measurements.arms(name, ms.vs)
        assert arms is not None  # measured above, and more pairs only extend them
        # The line judges the pairs of the look that decided; the server-seconds are all that were spent, the rest
        # of a bracketed block included (it was measured).
        judged_on = _first_pairs(arms, count).ratios()
        spent = measurements.spent_s(name, ms.vs)
        decision = sequential.decide_floor(judged_on, ms.ratio, design)
        needed = None if decision.decided else sequential.repeats_needed(judged_on, ms.ratio, design)
        judged = speedup.judge_speedup_sequential(
            judged_on, ms.ratio, design, vs=ms.vs, mode=arms.mode, first=arms.first, exhausted=True,
            detail=lambda d: sequential.detail(d, unit="pairs", server_s=spent, needed=needed, exhausted=True),
        )  # fmt: skip
        cost = {"verdict": judged.verdict, "repeats": min(count, arms.pairs), "server_s": round(spent, 3)}
        check = judged.check()
        if check.undecided and halt:
            check = _not_measured(check, halt, f"{arms.pairs} pair{'s' if arms.pairs != 1 else ''}")
            cost["verdict"] = NOT_MEASURED
        return check, cost, {**arms.to_dict(), "speedup": check.line(), "verdict": cost["verdict"], "limit": ms.ratio}

    halt = _halt_of(measurements)
    check, cost, paired = outcomes.once(("speedup", name, ms.vs, ms.ratio, halt), judge)
    costs["min_speedup"] = cost
    case.replace(paired=paired)
    return check


@dataclass(frozen=True, slots=True)
class CompareVerdict:
    """What :func:`judge_compare` decided for one test."""

    #: The failure text (head line, then the compare table, then why its open rows are open: ``2 undecided rows not
    #: measured further: the compare had regressed at 3 repeats``, or each open row's reason); None when the test did
    #: not regress.
    failure: str | None = None
    #: Undecided rows at the budget (:func:`undecided_block`: a head line, then one line per open row, ``metric
    #: x0.93, CI ... holds the tolerance 5%; about N repeats would decide it``), None when every row was decided.
    undecided: str | None = None
    #: How the compare was judged (``exact: ...``, ``throughput and latency judged ...``), for the summary.
    notes: tuple[str, ...] = ()
    #: A passing or undecided compare's table (``compare.Comparison.lines``), shown under the summary.
    table: tuple[str, ...] = ()
    #: ``passed``, ``FAILED`` or ``undecided`` (``compare.Comparison.outcome``), with its repeats and server-s;
    #: undecided: ``suspected`` (the open rows beyond their tolerance) and ``open`` (each open row's line).
    cost: Mapping[str, Any] = field(default_factory=dict)


def judge_compare(
    base: results.ResultRecord,
    record: results.ResultRecord,
    *,
    run_id: str,
    test_id: str,
    tolerances: Mapping[str, Tolerance],
    noise: Mapping[str, float],
    force: bool,
    more: Callable[[], results.ResultRecord | None] = lambda: None,
    design: sequential.Design | None = None,
    history: Sequence[results.ResultRecord] = (),
    server_s: Callable[[], float] = lambda: 0.0,
    current_run: str = "",
    bisect_hint: BisectHint | None = None,
    next_step: Callable[[], tuple[int, float | None]] = lambda: (1, None),
) -> CompareVerdict:
    """Compare ``record`` with the stored ``base`` (of run ``run_id``, found under ``test_id``), every statistical
    row decided on its interval (``compare.compare_results`` at the look's alpha). While a row is undecided at a
    look of ``design`` and the budget allows, ``more()`` returns the record with one more repeat (or pair); at the
    budget, undecided rows say what would decide them. An exact-metric regression fails at once.

    :param tolerances: ``tolerances.layered_tolerances``; :param noise: ``noise.read_noise`` (relative, per field).
    :param force: compare although the workloads differ (``--specdec-compare-force``).
    :param history: the baseline's other stored runs of the same fingerprint (``history.StoredHistory.of``).
    :param server_s: seconds the current record's phases held servers (the cost line and the budget).
    :param next_step: (the repeats, i.e. target phases, the next ``more()`` adds; its expected seconds, a bracketed
        block's with its server switches, None: that many mean repeats): the budget counts them before asking.
        Asked once before each ``more()``, which measures that step.
    :param current_run: this session's run id: with more than one fingerprint difference, the head is followed by
        the ``bisect`` command over the two runs (``bisect_hint``, i.e. ``bisection.bisect_hint``; none without).
    """
    design = design or compare.single_look(record)
    current = record

    def comparison_of(rec: results.ResultRecord) -> compare.Comparison:
        return compare.compare_results(base, rec, tolerances, force=force, noise=noise, design=design, history=history)

    try:
        comparison, compared = comparison_of(current), current
    except CompareError as exc:
        return CompareVerdict(f"not compared with run {run_id}: {exc} (--specdec-compare-force compares anyway)")
    stopped_at_failure = False
    last = 0
    while True:
        n = len(current.values("output_tok_s"))
        if design.look_due(n, last):
            last = n
            if compared is not current:
                comparison, compared = comparison_of(current), current
            # Until the third look a few repeats' estimate may still swing into either verdict: measure on; not
            # where every open row is held open by a spread no repeat of today's narrows: the one assumed between
            # server instances, on a busy runner (helper-79: an unchanged-config night measured 8 repeats, 470
            # server-s, to the same undecided it had at 3) or where today's repeats are a small part of it
            # (helper-80: a quiet unpaired compare against one stored run, 18 raw rows at 7%, 172.7 server-s), unless
            # the row's estimate is beyond its tolerance: a server slowing over the run moves the estimate itself
            # (helper-81: x0.86 after 3 repeats, then x0.74, FAILED at 8 where the first look left it undecided).
            settled = n >= design.points[min(2, design.looks - 1)] or all(
                r.busy or not r.suspected and _repeats_bound(base, current, r, history) for r in comparison.undecided)
            if not comparison.undecided or settled and not any(
                _worth_measuring(base, current, r, design, history) for r in comparison.undecided
            ):
                break
            if comparison.failed:
                # A regressed row is final at its look (exact, or its interval spent at this look's alpha): the
                # compare has failed, and its open rows would cost repeats of a night already red (replayed: a 20%
                # regression decided after 3 pairs, not 5; the open rows, even a -87% tok/s at 2 repeats, say so).
                adds, cost_s = next_step()
                stopped_at_failure = design.may_continue(n, server_s(), cost_s, step=adds)
                break
        adds, cost_s = next_step()
        if not design.may_continue(n, server_s(), cost_s, step=adds):
            break
        nxt = more()
        if nxt is None:
            break
        current = nxt
    if compared is not current:
        comparison = comparison_of(current)
    n = len(current.values("output_tok_s"))
    cost: dict[str, Any] = {"verdict": comparison.outcome, "repeats": n, "server_s": round(server_s(), 3)}
    if comparison.outcome == "undecided":
        # Open rows whose estimate is beyond the tolerance: a run with none may join later compares' history
        # (``ResultRecord.history_problem``), one with any may not (it may be the regression it could not decide).
        cost["suspected"] = [r.metric for r in comparison.suspected]
    kept = ("exact:", "throughput and latency judged", "run-to-run:")
    notes = tuple(n for n in comparison.notes if n.startswith(kept))
    head = f"regression against run {run_id} ({test_id}):"
    hint = bisect_hint(comparison.diff, run_id, current_run, record.test_id, test_id) if bisect_hint else ""
    head = "\n".join(filter(None, [head, hint]))
    if comparison.failed:
        lines = comparison.lines()
        k = len(comparison.undecided)
        rows = f"{k} undecided row{'s' if k != 1 else ''}"
        if stopped_at_failure:
            lines.append(f"{rows} not measured further: the compare had regressed at {n} repeats")
        elif comparison.undecided:
            # Open at the budget, or where more repeats would not decide them (a busy runner's spread: flake hunt
            # seed 178, tok/s x0.186 open beside a regressed ITL): each says what would decide it, as an undecided
            # compare's rows do.
            reasons = [undecided_reason(base, current, r, design, history) for r in comparison.undecided]
            lines.append(undecided_block(f"{rows} beside the regression after {n} repeats:", reasons))
        return CompareVerdict("\n".join([head, *lines]), notes=notes, cost=cost)
    if comparison.undecided:
        reasons = [undecided_reason(base, current, r, design, history) for r in comparison.undecided]
        # Each open row's line as the warning gives it (the markdown summary, and a merge of shards, read it from the
        # stored record: the run file has no baseline to say it again).
        cost["open"] = [str(r) for r in reasons]
        k = len(reasons)
        head = (f"compare against run {run_id} undecided after {n} repeat{'s' if n != 1 else ''} "
                f"({cost['server_s']:.1f} server-s), {k} row{'s' if k != 1 else ''} open")  # fmt: skip
        return CompareVerdict(undecided=undecided_block(head, reasons), notes=notes, table=tuple(comparison.lines()),
                              cost=cost)  # fmt: skip
    if _restarts_reference(comparison):
        cost["new_reference"] = True
    return CompareVerdict(notes=notes, table=tuple(comparison.lines()), cost=cost)


def _repeats_bound(
    base: results.ResultRecord,
    current: results.ResultRecord,
    row: compare.CompareRow,
    history: Sequence[results.ResultRecord],
) -> bool:
    """Whether an open row's interval is all but fixed by what today's repeats do not average out (the spread
    between server instances, assumed or measured by stored runs, and the baseline's own): today's repeats are at
    most :data:`EARLY_STOP_REPEATS_SHARE` of its variance (``sequential.repeats_share``)."""
    data = _row_data(base, current, row, history)
    if data is None:
        return False
    share = sequential.repeats_share(data.baseline, data.current, history=data.history, instance_sd=data.instance_sd)
    return share is not None and share <= EARLY_STOP_REPEATS_SHARE


#: An open row whose interval's variance is at most this share today's repeats' (so that endless repeats would
#: narrow it by ~5% at most) is not measured on to the third look for a few repeats' estimate to swing: the rest is
#: the run-to-run spread (assumed until 4 stored runs measure it) and the baseline's. Replayed
#: (``benchmarks/bench_verdicts.py --unpaired --stream-per-run``, docs/measurements/verdicts.md): unchanged unpaired
#: compares against one stored run -25-30% server-s, detections the same run for run; paired compares all but
#: unchanged (their ratio rows' repeats dominate).
EARLY_STOP_REPEATS_SHARE = 0.10


def _restarts_reference(comparison: compare.Comparison) -> bool:
    """A passed compare after which this run, not its baseline, is the reference of later nights
    (``ResultRecord.passed_against``): some row improved (significantly better beyond its tolerance) and no row's
    estimate is worse than half its tolerance, so a restart lowers no row's reference by more than that. Without an
    improvement the reference stays: nights passing within their tolerance would otherwise carry it along a slow
    drift (``benchmarks/bench_drift.py --rule newest``)."""
    worse_by = [((-r.delta if r.higher_is_better else r.delta), r.tolerance.allowed(r.baseline))
                for r in comparison.rows if r.delta is not None and r.baseline]  # fmt: skip
    improved = any(r.verdict == "improved" for r in comparison.rows)
    return improved and all(worse <= allowed / 2 for worse, allowed in worse_by)


@dataclass(frozen=True, slots=True)
class _RowData:
    """A compare row's values as its verdict saw them: the baseline's and today's repeats, the pooled history of
    the baseline's stored runs (None with fewer than 2), the tolerance as a fraction of the baseline and the
    run-to-run sd the row assumed without a history (``CompareRow.instance_sd``)."""

    baseline: list[float]
    current: list[float]
    history: sequential.History | None
    limit: float
    instance_sd: float = 0.0


def _row_data(
    base: results.ResultRecord,
    current: results.ResultRecord,
    row: compare.CompareRow,
    history: Sequence[results.ResultRecord],
) -> _RowData | None:
    """None for a row with an absolute tolerance (no estimate covers it) or without a baseline value."""
    if row.tolerance.abs or row.baseline is None:
        return None
    key = f"{row.metric.partition(' / ')[0]} / " if " / " in row.metric else row.metric
    runs = compare.history_values((base, *history), key)
    pooled = sequential.History.from_runs(runs, row.instance_sd) if len(runs) >= 2 else None
    limit = row.tolerance.allowed(row.baseline) / abs(row.baseline) if row.baseline else row.tolerance.rel
    return _RowData(compare.row_values(base, key), compare.row_values(current, key), pooled, limit,
                    row.instance_sd)  # fmt: skip


def _ask(estimate: Callable[..., int | None], data: _RowData, row: compare.CompareRow,
         design: sequential.Design, **more: int) -> int | None:  # fmt: skip
    """``estimate`` (``sequential.shift_repeats_needed`` or ``baseline_repeats_needed``) asked of a row's data;
    ``more``: the estimate's own keywords (``more_than``)."""
    return estimate(data.baseline, data.current, data.limit, row.design or design,
                    higher_is_better=row.higher_is_better, history=data.history,
                    instance_sd=data.instance_sd, **more)  # fmt: skip


def _shift_needed(data: _RowData, row: compare.CompareRow, design: sequential.Design) -> int | None:
    """``sequential.shift_repeats_needed`` of an open row: more than the repeats it was left open at."""
    measured = row.decision.n if row.decision is not None else 0
    return _ask(sequential.shift_repeats_needed, data, row, design, more_than=measured)


def _other_fix(row: compare.CompareRow, vs: str | None) -> str:
    """What else decides a row the run-to-run spread keeps open: a wider tolerance; for a paired raw row one of its
    own beside its ratio row's (``core.tolerances``: ``FIELD/ARM:TOL``), or, without a paired arm, pairing the profile
    with a reference arm."""
    if " / " in row.metric:
        return "a wider tolerance"
    if vs:
        return (f"a wider tolerance for the raw row alone ({row.metric}:N%), its ratio row held to its own "
                f"({row.metric}/{vs}:M%: paired arms differ 0-5% run to run)")
    return ("a wider tolerance, or a paired reference arm (min_speedup: {vs: ...}) whose ratio rows differ 0-2% run "
            "to run (on GPU hosts and CPUs under 1 load per CPU; ~13% on an oversubscribed CPU)")


def _not_decidable_today(data: _RowData | None, row: compare.CompareRow, design: sequential.Design,
                         vs: str | None = None) -> tuple[str, tuple[str, ...]]:  # fmt: skip
    """Why no number of today's repeats decides a row (its :func:`_row_data`), and what would
    (``sequential.baseline_repeats_needed``), as (the row's short tail, the explanations rows share): ``a baseline of
    about 40 repeats would decide it (now 3; 4 stored runs, run-to-run sd 2.1%)`` and how to store one."""
    d = row.decision
    if data is None or d is None or d.low is None or d.high is None:
        return "more repeats would not decide it: the estimate sits on the limit", ()
    needed = _ask(sequential.baseline_repeats_needed, data, row, design)
    h = data.history
    run_sd = math.expm1(math.sqrt(h.between)) if h is not None and h.between and not h.assumed else 0.0
    now = (h.level_n or len(data.baseline)) if h is not None else len(data.baseline)
    known = f"{h.runs} stored runs" if h is not None else "1 stored run"
    if run_sd:
        known += f", run-to-run sd {run_sd:.1%}"
    elif data.instance_sd:
        known += f", run-to-run sd taken as {data.instance_sd * 100:.2g}%"
    other = _else_line(row, vs)
    if needed is not None:
        return (f"a baseline of about {needed} repeats would decide it (now {now}; {known})", (_RESTORE,))
    if data.instance_sd and not run_sd:
        below = _deciding_sd(data.baseline, data.current, row, design, data.instance_sd)
        # With none deciding at no spread either: the repeats that would, beside stored runs that measure little.
        four = dataclasses.replace(data, history=_four_runs(data.baseline, 0.0), instance_sd=0.0)
        repeats = _ask(sequential.shift_repeats_needed, four, row, design) if below is None else None
        return _stored_runs_decide(data.instance_sd, row, vs, h.runs if h is not None else 1, below, repeats)
    if run_sd:
        # The measured run-to-run sd, for the baseline's instance and today's: what keeps it open at tonight's
        # estimate (a trial read "a night further from the limit" beside x1.25 against a limit of x0.95).
        return (f"the run-to-run spread keeps it open ({known})",
                ("run-to-run: the baseline and today's run are one server instance each, and the stored runs measure "
                 "how instances differ: at that spread no number of repeats, here or in the baseline, decides this "
                 "row at tonight's estimate", other))  # fmt: skip
    return ("neither more repeats today nor a longer baseline alone decide it at this budget; both would",
            ("both: raise workload.max_repeats, and store the baseline again with more repeats (pytest "
             "--specdec-save=NAME --specdec-repeats N): the reference is the named baseline's own run",))


def _deciding_sd(
    baseline: Sequence[float], current: Sequence[float], row: compare.CompareRow, design: sequential.Design,
    instance_sd: float,
) -> float | None:
    """The largest run-to-run sd (a fraction, below ``instance_sd``) at which tonight's repeats and the baseline's
    would decide the row at its design (``sequential.decide_shift``, bisected to 0.1 point): what stored runs must
    measure for "4+ stored runs would decide it" to hold; None when even no spread between instances would (the
    estimate too near the tolerance for these repeats, or no spread between instances is taken). An estimate: stored
    runs also move the reference level. On a busy runner (``row.busy``) it is asked at the spread a quiet runner
    takes (``compare.assumed_instance_sd``: 7% raw, 2% ratio): what a quieter runner's stored runs must show."""
    if row.busy:
        instance_sd = compare.assumed_instance_sd(row.metric)
    if not instance_sd:
        return None
    allowed = row.tolerance.allowed(row.baseline) if row.tolerance.abs and row.baseline is not None else None

    def decides(sd: float) -> bool:
        return sequential.decide_shift(baseline, current, row.tolerance.rel, row.design or design,
                                       higher_is_better=row.higher_is_better, instance_sd=sd, allowed=allowed,
                                       history=None if allowed is not None else _four_runs(baseline, sd),
                                       ).decided  # fmt: skip

    if not decides(0.0):
        return None
    low, high = 0.0, instance_sd
    while high - low > 0.0005:
        mid = (low + high) / 2.0
        low, high = (mid, high) if decides(mid) else (low, mid)
    return low


def _four_runs(baseline: Sequence[float], sd: float) -> sequential.History | None:
    """The history 4 stored runs like the baseline's would give, their run-to-run sd measured at ``sd``: the
    baseline's level and within-run variance, 4 x its repeats, the run effect ``log(1 + sd)^2`` on 3 degrees of
    freedom (``sequential.History``); None with fewer than 2 positive values."""
    logs = [math.log(v) for v in baseline if v and v > 0]
    if len(logs) < 2:
        return None
    n = len(logs)
    return sequential.History(statistics.fmean(logs), statistics.variance(logs), 4 * (n - 1), math.log1p(sd) ** 2,
                              4, 4 * n, level_runs=1, level_n=n)  # fmt: skip


def _stored_runs_decide(
    instance_sd: float, row: compare.CompareRow, vs: str | None, stored: int = 1, below: float | None = -1.0,
    repeats: int | None = None,
) -> tuple[str, tuple[str, ...]]:
    """The tail and explanations of a row open at an assumed run-to-run sd ``instance_sd`` (a fraction): ``4+ stored
    runs would decide it if they measure a run-to-run sd under 3.1% (taken as 7% until then)`` (``below``:
    :func:`_deciding_sd`; -1: not computed, the plain ``4+ stored runs would decide it``; helper-81 followed the
    unconditional "4+ stored runs would decide it", and 4 runs that spread 11% left it open), or where ``below`` is
    None ``4+ stored runs and about 9 repeats would decide it if the runs measure little run-to-run spread``
    (``repeats``: ``sequential.shift_repeats_needed`` at no spread) or ``4+ stored runs alone would not decide it:
    at tonight's estimate even no spread between instances leaves it open``. Not "no number of runs": the spread is
    taken, not measured, and 4 stored runs measure it (a trial read "no number of repeats or runs decides ...;
    stored runs that spread less will show it" as a paradox). On a busy CPU runner (``row.busy``) stored runs do not
    lower the floor: a quieter runner decides it, with 4+ stored runs where fewer are (``stored``: the baseline's
    runs of this fingerprint; a trial followed "a quieter runner would decide it" against one stored run and read
    all 18 rows undecided again, at the quiet 7% assumed); there ``below`` is :func:`_deciding_sd` at the quiet
    runner's spread: a quieter runner alone where that spread decides at tonight's estimate, else with the stored
    runs' sd named, or that it alone would not (None)."""
    if row.busy:
        # A trial read "(load per CPU under 1 at both runs; ...)" as a claim about this busy runner: said as a need.
        quiet = compare.assumed_instance_sd(row.metric)
        runs = "" if stored > sequential.ASSUMED_UP_TO_RUNS else " and 4+ stored runs of this fingerprint"
        if below is not None and 0.0 <= below < quiet - 0.001:
            # At tonight's estimate a quiet runner's own 7% would not decide it: what its stored runs must show.
            runs = f" and 4+ stored runs there measuring a run-to-run sd under {below:.1%}" if below >= 0.001 else (
                " and 4+ stored runs there measuring almost no run-to-run spread")  # fmt: skip
        elif below is not None and below >= 0.0:
            runs = ""  # a quiet runner's assumed spread decides it at tonight's estimate
        head = ("a quieter runner alone would not decide it at tonight's estimate" if below is None else
                f"a quieter runner{runs} would decide it")  # fmt: skip
        return (f"{head} (one with load per CPU under 1 at both runs; this busy runner's run-to-run sd is taken as "
                f"{instance_sd * 100:.2g}%)", (_else_line(row, vs),))  # fmt: skip
    taken = f"{instance_sd * 100:.2g}%"
    if below is None and repeats is not None:
        return (f"4+ stored runs and about {repeats} repeats would decide it if the runs measure little run-to-run "
                f"spread (taken as {taken} until then)", (_TAKEN, _else_line(row, vs)))  # fmt: skip
    if below is None:
        return (f"4+ stored runs alone would not decide it: at tonight's estimate even no spread between instances "
                f"leaves it open (run-to-run sd taken as {taken})", (_TAKEN, _else_line(row, vs)))  # fmt: skip
    if below >= 0.0:
        under = f"a run-to-run sd under {below:.1%}" if below >= 0.001 else "almost no run-to-run spread"
        return (f"4+ stored runs would decide it if they measure {under} (taken as {taken} until then)",
                (_TAKEN, _else_line(row, vs)))  # fmt: skip
    return f"4+ stored runs would decide it (run-to-run sd taken as {taken})", (_TAKEN, _else_line(row, vs))


def _else_line(row: compare.CompareRow, vs: str | None) -> str:
    """The other fixes of a row the run-to-run spread keeps open, said once for all such rows of a compare: with a
    paired arm one line for its raw and ratio rows (the ratio is the fix only for a raw row: a ratio row is already
    judged on its paired arm)."""
    if vs:
        # Not "catches the target's regressions" (a trial widened the raw row as told; its slower target model slowed
        # both arms and only the raw row had moved): the ratio row sees what slows the speculative arm alone.
        return (f"else: a wider tolerance; for a raw row, one of its own (output_tok_s:40% beside "
                f"output_tok_s/{vs}:15%: the ratio row still catches what slows the speculative arm alone (draft, "
                "verify, speculative config), but a slowdown both arms share (the target model, a lost NCCL env, the "
                "runner) is then gated only beyond the raw row's 40%)")
    return f"else: {_other_fix(row, vs)}"


#: Why rows open at an assumed run-to-run sd are decided by stored runs, not repeats (once per undecided warning).
_TAKEN = ("run-to-run: today's run is one more server instance; until 4 or more unchanged runs of this fingerprint "
          "are stored, instances are taken to spread run to run as each row says (the compare table's run-to-run "
          "line says why), and at that spread no number of today's repeats decides it: the stored runs measure the "
          "real spread (a row decides if it is smaller)")


#: How the compare's reference gets known better: it is the named baseline's own run (``sequential.History``).
_RESTORE = ("baseline repeats: the reference is the named baseline's own run (other stored runs lend their spread, "
            "not their level); store it again with more repeats: pytest --specdec-save=NAME --specdec-repeats N")


def _worth_measuring(
    base: results.ResultRecord,
    current: results.ResultRecord,
    row: compare.CompareRow,
    design: sequential.Design,
    history: Sequence[results.ResultRecord],
) -> bool:
    """Whether more repeats may decide an undecided row: some number within :data:`WORTH_BUDGETS` budgets would
    (not when the baseline's own spread keeps the interval across the tolerance, nor when about 527 repeats would
    against a budget of 24: a trial's paired profile measured its 24 for 13 minutes so; an absolute tolerance has no
    estimate of how many: measured on until the budget, unless its run-to-run part alone keeps it open)."""
    if row.tolerance.abs:
        return _difference_decidable(base, current, row, design)
    budget = WORTH_BUDGETS * (row.design or design).max_repeats
    data = _row_data(base, current, row, history)  # once: the history's ANOVA is in it
    if data is None:
        return False
    needed = _shift_needed(data, row, design)
    if needed is not None and needed <= budget:
        return True
    if not FUTILITY_SHIFT_SE or row.decision is None:
        return False
    # Asked again with today's estimate FUTILITY_SHIFT_SE standard errors further from the limit, the side it is on
    # (an estimate a few repeats made may sit near the limit by chance: an unchanged H100 night at x0.93 after 8 pairs).
    # Today's own standard error, not the interval's: the chance the stop is about is that of today's few repeats;
    # the baseline's and the run-to-run parts do not move with more of them.
    logs = [math.log(v) for v in data.current if v and v > 0]
    if len(logs) < 3:
        return False
    step = FUTILITY_SHIFT_SE * statistics.stdev(logs) / math.sqrt(len(logs))
    worse = math.log(row.decision.estimate) * (-1.0 if row.higher_is_better else 1.0)
    inside = worse < sequential.bound_of(data.limit, row.higher_is_better)
    step = step if inside == row.higher_is_better else -step
    needed = _shift_needed(dataclasses.replace(data, current=[v * math.exp(step) for v in data.current]), row, design)
    return needed is not None and needed <= budget


#: An open row is measured on while the repeats it needs (estimated from the look's repeats, which may be few) are
#: within this many budgets: twice, so that a rough early estimate does not stop a row the budget would decide.
WORTH_BUDGETS = 2
#: And while they would be with today's estimate this many standard errors further from the limit, on the side it
#: is on: a futility stop on the estimate alone stopped unchanged H100 nights at 8 pairs whose estimate sat near the
#: limit by chance, so they could never pass. Replayed (`benchmarks/bench_verdicts.py --futility-shift-se 0|1`, 200
#: runs a cell, seed 43): H100 pairs at 15%, 4 stored runs x 16, max 32: unchanged passed 97/200 where 74/200, the
#: real -17.5% (draft extend off its CUDA graph) failed 166 where 173, server-s 55 where 39; the default cells (5%,
#: 3 stored runs x 12, max 24): -20% on the H200 failed 106/200 where 82, the H100 variant 132 where 105, the
#: reference server's -6% 186 where 162; unchanged cells failed 0-2/200 either way; server-s +15-40%.
FUTILITY_SHIFT_SE = 1.0


def _difference_decidable(
    base: results.ResultRecord, current: results.ResultRecord, row: compare.CompareRow, design: sequential.Design
) -> bool:
    """``sequential.difference_decidable`` for a row with an absolute tolerance, at the design it was judged with."""
    if row.baseline is None:
        return False
    return sequential.difference_decidable(
        compare.row_values(base, row.metric), compare.row_values(current, row.metric),
        row.tolerance.allowed(row.baseline), row.design or design, higher_is_better=row.higher_is_better,
        instance_sd=row.instance_sd,
    )  # fmt: skip


def undecided_reason(
    base: results.ResultRecord,
    current: results.ResultRecord,
    row: compare.CompareRow,
    design: sequential.Design,
    history: Sequence[results.ResultRecord],
) -> OpenRow:
    """``output_tok_s x0.93, CI 0.85-1.01 (99.2%) holds the tolerance 5%; about 40 repeats in all would decide it``,
    or what else would (``... holds the tolerance 5%: 4+ stored runs would decide it (run-to-run sd taken as 7%)``,
    its explanation in :attr:`OpenRow.why`): what pytest and the ``compare`` command say of an undecided row
    (:func:`undecided_block`).

    :param design: the design the run was judged with (``compare.design_of``); :param history: the baseline's other
        stored runs of the same fingerprint (``history.StoredHistory.of``)."""
    d = row.decision
    shown = f"{row.metric} x{d.estimate:.3g}, {d.interval()}" if d is not None else row.metric
    data = _row_data(base, current, row, history)  # read once: both estimates below ask of it
    needed = _shift_needed(data, row, design) if data is not None else None
    text = f"{shown} holds the tolerance {compare.tolerance_text(row.metric, row.tolerance)}"
    if row.tolerance.abs:
        if _difference_decidable(base, current, row, design):
            return OpenRow(text + " (more repeats would narrow it: raise workload.max_repeats)")
        below = _deciding_sd(compare.row_values(base, row.metric), compare.row_values(current, row.metric), row,
                             design, row.instance_sd)  # fmt: skip
        tail, why = _stored_runs_decide(row.instance_sd, row, (base.paired or {}).get("vs"), len(history) + 1, below)
        return OpenRow(f"{text}: {tail}", why)
    if needed is None:
        tail, why = _not_decidable_today(data, row, design, (base.paired or {}).get("vs"))
        return OpenRow(f"{text}: {tail}", why)
    return OpenRow(text + f"; about {needed} repeats in all would decide it (raise workload.max_repeats or "
                   "max_server_s)")  # fmt: skip


def compare_item(
    case: _Case,
    measurements: MeasureHandle,
    outcomes: Outcomes,
    setup: CompareSetup,
    profile: Profile,
    tolerances: Mapping[str, Tolerance],
    design: sequential.Design,
    costs: dict[str, dict[str, Any]],
) -> str | None:
    """The baseline-compare failure text for one test, or None when it did not regress (``judge_compare`` on the
    baseline ``setup.baselines`` picks; no baseline warns). Judged once per profile and baseline run."""
    record = case.record
    test_id, found = _baseline_of(record, setup, profile)
    if found is None:
        renamed = setup.baselines.renamed(record, mapped_to=setup.profile)
        text = f"{setup.baselines.missing(test_id)}{renamed}; not compared"
        if setup.missing == "fail" and setup.baselines.unclean(test_id):
            # Not a new test: its nights never ended clean (a fresh-user trial followed the advice below, which would
            # have switched its compare off for good).
            return (f"{text}: store a night whose verdicts decide (raise workload.max_repeats, or measure on a "
                    "quieter runner), or name one of these runs after reading why it was not clean: python -m "
                    "pytest_specdec save RUN NAME --force, then --specdec-compare=NAME")  # fmt: skip
        if setup.missing == "fail":
            return f"{text}: a new test? --specdec-compare-missing=warn passes it for its first night"
        case.warnings.append(f"{text} (--specdec-compare-missing=warn)")
        return None
    run, base = found.run, found.record
    vs = (record.paired or {}).get("vs")

    # The step judge_compare's budget counted is the one ``more()`` measures: planned once per step (it was
    # computed three times: for its repeats, its seconds and the pairs asked for).
    planned: list[_Step] = []

    def next_step() -> tuple[int, float | None]:
        n = len(case.record.values("output_tok_s"))
        planned[:] = [_next_step(measurements, profile.name, vs, design, n, in_phases=True)]
        return planned[0].phases, planned[0].cost_s

    def more() -> results.ResultRecord | None:
        pairs = planned[0].pairs if planned else None
        n = len(case.record.values("output_tok_s"))
        if not measurements.more(profile.name, vs, pairs, why=_looking("compare", vs, n, pairs, design)):
            return None
        _rebuild_record(case, measurements, profile.name, vs)
        return case.record

    def judge() -> CompareVerdict:
        return judge_compare(
            base, case.record, run_id=run.run_id, test_id=test_id, tolerances=tolerances,
            noise=outcomes.noise(profile.name), force=setup.force, more=more, design=design,
            history=others,
            server_s=lambda: measurements.spent_s(profile.name, vs), current_run=setup.run_id,
            bisect_hint=setup.bisect_hint, next_step=next_step,
        )  # fmt: skip

    history = setup.history
    # The baseline's other stored runs, read once: the compare pools them, and a stored run that cannot be read is
    # said, not dropped silently.
    others = history.of(run.run_id, base) if history is not None else []
    if history is not None:
        for problem in outcomes.once(("history skipped",), lambda: list(history.skipped)):
            if problem not in case.warnings:
                case.warnings.append(f"stored run left out of the compare's history: {problem}")
    halt = _halt_of(measurements)
    # Keyed by the repeats the record holds: a later test whose floors measured more is judged on them, so the
    # ``compare`` command reading its stored record decides as pytest did.
    repeats = len(record.repeats.get("output_tok_s", []))
    key = ("compare", profile.name, run.run_id, repr(sorted(tolerances.items())), halt, repeats)
    judged_for, judged = outcomes.once(key, lambda: (test_id, _halted_compare(judge(), halt)))
    if judged.failure is not None and judged_for != test_id:
        # The same verdict, headed by this test's own baseline (one measurement, one verdict).
        head, _, rest = judged.failure.partition("\n")
        judged = dataclasses.replace(judged, failure="\n".join([head.replace(f"({judged_for}):", f"({test_id}):"),
                                                               rest]))  # fmt: skip
    outcomes.add_compare(run.run_id, record.test_id, [f"{profile.name}: {n}" for n in judged.notes], judged.table,
                         baseline=found, outcome=str(judged.cost.get("verdict", "passed")),
                         pooled=bool(others))  # fmt: skip
    if judged.cost:
        # With the noise it was judged with: the compare command reads it, not a noise file calibrated later.
        # And the baseline test it was compared with (another profile's under --specdec-compare-profile): the
        # compare command takes the same one.
        costs["compare"] = {**judged.cost, "baseline_test": test_id, "baseline_run": run.run_id,
                            "noise": CalibratedNoise.stored(outcomes.noise(profile.name))}  # fmt: skip
    if judged.undecided is not None:
        # Named by profile, not test: every test of the profile shares this verdict (run.session warns it once).
        (case.warnings if halt else case.undecided).append(f"profile {profile.name}: {judged.undecided}")
    return judged.failure


def _halted_compare(judged: CompareVerdict, halt: str) -> CompareVerdict:
    """A compare that stopped measuring because the test had already failed (``halt``): its undecided rows are not
    measured further, neither undecided at the budget (``report.summary.undecided_lines``) nor failed."""
    if not halt or judged.undecided is None:
        return judged
    head, _, rows = judged.undecided.partition("\n")
    text = f"{head.replace(' undecided after ', ' not measured further after ')} ({halt})\n{rows}"
    return dataclasses.replace(judged, undecided=text, cost={**judged.cost, "verdict": NOT_MEASURED})


def _baseline_of(
    record: results.ResultRecord, setup: CompareSetup, profile: Profile
) -> tuple[str, Baseline | None]:
    """The test id a test's baseline is stored under (``--specdec-compare-profile`` swaps the profile's part of the
    parametrization id: ``[eagle3-shifted-layers-1]`` -> ``[eagle3-1]``; profiles of the other kind keep their own)
    and the baseline found there (``Baselines.find``), None when there is none."""
    test_id = record.test_id
    if setup.profile and profile.is_speculative == setup.profile_speculative:
        test_id = compare.swap_profile_id(test_id, profile.name, setup.profile)
    return test_id, setup.baselines.find(test_id)
