"""One test's verdict after its body: its thresholds on the profile's measurement, the paired ``min_speedup`` check,
and the stored-baseline compare, each suspected throughput/latency regression measured again before it fails. With a
sequential design (a profile's ``workload.max_repeats`` / ``max_server_s``, ``sequential.py``) the floors, the speedup
and the compare's confirmation measure one repeat (or pair) at a time until decided or the budget is spent; what each
verdict cost goes to the record (``cost``).

``run/session.py`` calls :func:`judge_item` after a test body with plain values: the test's record and thresholds,
the run's measurements as a :class:`~pytest_specdec.judge.handle.MeasureHandle` (read, and ask for one more repeat or
pair), and the run's :class:`~pytest_specdec.judge.outcomes.Outcomes`; it gets back an :class:`ItemVerdict` (the
record as judged, the checks, the warnings, the failure text) and applies it to the test. Nothing here knows pytest.
The data-only parts: :func:`failure_message`, :func:`shared_verdict_message`, :func:`sweep_steps`,
:func:`judge_compare` (given a ``confirm`` callable), :func:`sequential_compare`.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from pytest_specdec.core.errors import CompareError
from pytest_specdec.judge import compare, sequential, speedup, sweep
from pytest_specdec.judge.noise import NOISE_K
from pytest_specdec.judge.paired import paired_ratios
from pytest_specdec.judge.thresholds import Check, Verdict, evaluate
from pytest_specdec.judge.tolerances import Tolerance, layered_tolerances
from pytest_specdec.measure import results, runner
from pytest_specdec.profiles.schema import MinSpeedup, Profile, Thresholds

if TYPE_CHECKING:
    from pytest_specdec.judge.baseline import Baselines
    from pytest_specdec.judge.handle import MeasureHandle
    from pytest_specdec.judge.outcomes import Outcomes

__all__ = [
    "SEQUENTIAL_KEYS",
    "BisectHint",
    "CompareSetup",
    "CompareVerdict",
    "ItemVerdict",
    "compare_item",
    "confirm_record",
    "design_for",
    "failure_message",
    "judge_compare",
    "judge_item",
    "record_cost",
    "sequential_checks",
    "sequential_compare",
    "shared_verdict_message",
    "speedup_check",
    "sweep_steps",
]

#: ``bisection.bisect_hint``'s shape: (fingerprint diff, good run, bad run, test id, good test id) -> the line.
BisectHint = Callable[[Sequence[str], str, str, str, "str | None"], str]


@dataclass(frozen=True, slots=True)
class CompareSetup:
    """What ``--specdec-compare`` asks of every test (``RunSettings``), and where its baselines come from."""

    baselines: Baselines
    #: This run's id (the bisect command names it).
    run_id: str
    #: ini ``specdec_tolerances`` lines.
    tolerances: tuple[str, ...] = ()
    #: ``--specdec-compare-profile``: speculative profiles compare with this profile's stored results.
    profile: str | None = None
    #: ``--specdec-compare-force``: compare although the workloads differ.
    force: bool = False
    #: Adds the ``bisect`` command under a failure with several fingerprint differences (``bisection.bisect_hint``).
    bisect_hint: BisectHint | None = None


@dataclass(frozen=True, slots=True)
class ItemVerdict:
    """What :func:`judge_item` decided for one test."""

    #: The test's result record as judged (longer runs, paired verdict, ``cost``).
    record: results.ResultRecord
    #: Per-threshold outcomes (``thresholds.Verdict.outcomes``).
    checks: dict[str, str]
    #: ``SpecdecWarning`` texts, in the order they arose.
    warnings: tuple[str, ...] = ()
    #: The failure text (threshold verdict, then the compare), or None when the test passed.
    failure: str | None = None


@dataclass(slots=True)
class _Case:
    """One test while it is judged: its node id, its record as it is now, the warnings so far."""

    nodeid: str
    record: results.ResultRecord
    warnings: list[str] = field(default_factory=list)

    def replace(self, **changes: Any) -> None:
        self.record = dataclasses.replace(self.record, **changes)


def design_for(profile: Profile, repeats: int) -> sequential.Design | None:
    """The sequential design of ``profile``'s verdicts: looks from ``repeats`` (the first measurement) up to
    ``workload.max_repeats`` (``sequential.DEFAULT_MAX_REPEATS`` when only ``max_server_s`` is set); None with
    fixed repeats (neither key set)."""
    wl = profile.workload
    if wl.max_repeats is None and wl.max_server_s is None:
        return None
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
    marker_tolerances: Sequence[str] = (),
) -> ItemVerdict:
    """A test's verdict after its body: its thresholds, then the baseline compare.

    :param record: the test's result record (``ResultRecord.from_measurements`` of its profile's run).
    :param thresholds: the profile's, merged with the test's marker.
    :param profiles: every loaded profile (a sweep point's steps are read from the profile it was derived from).
    :param repeats: the first measurement's repeats (``RunSettings.repeats_of``), where a sequential design starts.
    :param measurements: read the profile's run, and ask for more (confirming, sequential verdicts).
    :param outcomes: gets the first failure of each verdict, the compares and their notes.
    :param compare_setup: ``--specdec-compare`` (None without the option).
    :param marker_tolerances: the marker's ``tolerances=`` lines.
    """
    case = _Case(nodeid, record)
    vs = thresholds.min_speedup.vs if thresholds.min_speedup is not None else None
    design = design_for(profile, repeats)
    costs: dict[str, dict[str, Any]] = {}
    check = None
    if thresholds.min_speedup is not None:
        check = speedup_check(case, measurements, profile.name, thresholds.min_speedup, design, costs)
    steps, configured = sweep_steps(profile, profiles)
    judged = sequential_checks(case, measurements, profile, thresholds, vs, design, costs) if steps is None else {}
    run = measurements.run(profile.name)
    verdict = evaluate(
        thresholds,
        run.metrics,
        speculative=profile.is_speculative,
        speedup_check=check,
        sweep_steps=steps,
        configured_steps=configured,
        judged=judged,
    )
    case.warnings.extend(f"{c.line()}: not failed" for c in verdict.checks if c.undecided)
    failures = []
    if verdict.failed:
        message = failure_message(verdict, profile.name, run.metrics.num_ok, len(run.measurements))
        first = outcomes.first_failure(profile.name, message, nodeid)
        if first != nodeid:
            message = shared_verdict_message(verdict, profile.name, first)
        failures.append(message)
    if compare_setup is not None:
        # Sequential verdicts may have measured more repeats: compare the record as it is now.
        current = case.record if design is not None else record
        text = compare_item(
            case, measurements, outcomes, compare_setup, current, profile, marker_tolerances, design, costs
        )
        if text:
            failures.append(text)
    record_cost(case, measurements, profile.name, vs, costs)
    return ItemVerdict(case.record, verdict.outcomes(), tuple(case.warnings), "\n".join(failures) or None)


#: Threshold keys judged sequentially (``sequential.decide_floor``) when the profile sets ``workload.max_repeats``
#: or ``max_server_s``: key -> (``RunMetrics`` field, speculative only, label, unit), as ``thresholds.evaluate``
#: labels them. Ceilings and per-position/category floors keep the median rule.
SEQUENTIAL_KEYS = {
    "min_tok_s": ("output_tok_s", False, "output_tok_s", "tok/s"),
    "min_accept_length": ("accept_length", True, "accept_length", "tok/verify"),
    "min_accept_rate": ("accept_rate", True, "accept_rate", ""),
}


def _per_repeat(run: runner.RunResult, field_name: str) -> list[float]:
    vals = (getattr(m.metrics, field_name) for m in run.measurements)
    return [float(v) for v in vals if isinstance(v, int | float) and not isinstance(v, bool)]


def sequential_checks(
    case: _Case,
    measurements: MeasureHandle,
    profile: Profile,
    thresholds: Thresholds,
    vs: str | None,
    design: sequential.Design | None,
    costs: dict[str, dict[str, Any]],
) -> dict[str, Check]:
    """The :data:`SEQUENTIAL_KEYS` thresholds of a profile with a sequential ``design``, each decided on the
    per-repeat values: one more repeat (or pair, with ``vs``) is measured while any is undecided and the budget
    allows (``measurements.more``). Exact metrics (accept length/rate at temperature 0, identical repeats) decide at
    once. Empty with fixed repeats. The record is rebuilt on the longer run; each decision's repeats and
    server-seconds go to ``costs``.

    :returns: threshold key -> its check, for ``thresholds.evaluate(judged=...)``.
    """
    from pytest_specdec.judge.compare import EXACT_FIELDS

    if design is None:
        return {}
    keys = {
        key: spec
        for key, spec in SEQUENTIAL_KEYS.items()
        if getattr(thresholds, key) is not None and (profile.is_speculative or not spec[1])
    }
    zero = profile.workload.temperature == 0
    decided: dict[str, tuple[sequential.Decision, float]] = {}
    while True:
        run = measurements.run(profile.name)
        spent = measurements.spent_s(profile.name, vs)
        pending = False
        for key, (field_name, *_) in keys.items():
            values = _per_repeat(run, field_name)
            if key in decided or not values:  # no value: "not reported", evaluate's median rule says so
                continue
            exact = zero and field_name in EXACT_FIELDS and max(values) == min(values)
            decision = sequential.decide_floor(values, getattr(thresholds, key), design, exact=exact)
            if decision.decided:
                decided[key] = (decision, spent)
            else:
                pending = True
        if not pending or not design.may_continue(len(run.measurements), spent):
            break
        if not measurements.more(profile.name, vs):
            break
    _rebuild_record(case, measurements, profile.name, vs)
    run = measurements.run(profile.name)
    spent = measurements.spent_s(profile.name, vs)
    out: dict[str, Check] = {}
    for key, (field_name, _, label, unit) in keys.items():
        values = _per_repeat(run, field_name)
        if not values:
            continue
        threshold = float(getattr(thresholds, key))
        found = decided.get(key)
        if found is not None:
            decision, at = found
        else:
            exact = zero and field_name in EXACT_FIELDS and max(values) == min(values)
            decision, at = sequential.decide_floor(values, threshold, design, exact=exact), spent
        needed = sequential.repeats_needed(values, threshold, design) if not decision.decided else None
        bracket = sequential.detail(decision, unit="repeats", server_s=at, needed=needed, exhausted=True)
        verdict = {"above": "passed", "below": "FAILED"}.get(decision.verdict, "undecided")
        costs[key] = {"verdict": verdict, "repeats": decision.n, "server_s": round(at, 3)}
        shown = f"{label} {decision.estimate:.4g}{' ' + unit if unit else ''}"
        if verdict == "undecided":
            text = f"{shown}: undecided vs min {threshold:g} [{bracket}]"
        else:
            sym = ">=" if verdict == "passed" else "<"
            margin = decision.estimate - threshold
            rel = f", {margin / threshold * 100:+.1f}%" if threshold else ""
            text = f"{shown} {sym} min {threshold:g} (margin {margin:+.4g}{rel}) [geometric mean; {bracket}]"
        out[key] = Check(
            key, label, ">=", threshold, decision.estimate, unit, verdict != "FAILED", text=text,
            undecided=verdict == "undecided",
        )  # fmt: skip
    return out


def _rebuild_record(case: _Case, measurements: MeasureHandle, name: str, vs: str | None) -> None:
    """The test's record from the profile's run as it is now, when a sequential verdict measured more repeats."""
    measured = measurements.run(name).measurements
    if len(measured) == len(case.record.repeats.get("output_tok_s", [])):
        return
    fresh = results.ResultRecord.from_measurements(case.nodeid, measured, case.record.fingerprint)
    arms = measurements.arms(name, vs) if vs else None
    paired = dict(case.record.paired)
    if arms is not None:
        paired.update(arms.to_dict())
    case.replace(
        metrics=fresh.metrics, repeats=fresh.repeats, samples=fresh.samples, wall_time=fresh.wall_time, paired=paired
    )


def record_cost(
    case: _Case, measurements: MeasureHandle, name: str, vs: str | None, costs: Mapping[str, Mapping[str, Any]]
) -> None:
    """Put what the test's verdicts cost into its record (``ResultRecord.cost``): the server-seconds and repeats
    of the run it was judged on, and per sequential verdict its decision, repeats and server-seconds."""
    cost: dict[str, Any] = {
        "server_s": round(measurements.spent_s(name, vs), 3),
        "repeats": len(measurements.run(name).measurements),
    }
    if costs:
        cost["verdicts"] = {k: dict(v) for k, v in costs.items()}
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


def failure_message(verdict: Verdict, profile: str, num_ok: int, repeats: int) -> str:
    """The threshold verdict's text: one line per missed threshold, with its context.

    Example: ``accept_length 2.352 tok/verify < min 2.5 [profile eagle3, 64 requests, median of 3 repeats]``.

    :param num_ok: requests that succeeded in the measured phase (``RunMetrics.num_ok``).
    :param repeats: measured phases (the metrics are their medians).
    """
    context = f"profile {profile}, {num_ok} requests" + (f", median of {repeats} repeats" if repeats > 1 else "")
    return verdict.message(context)


def shared_verdict_message(verdict: Verdict, profile: str, first: str) -> str:
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
    name: str,
    ms: MinSpeedup,
    design: sequential.Design | None,
    costs: dict[str, dict[str, Any]],
) -> Check:
    """The ``min_speedup`` check of profile ``name`` on its paired arms: a median ratio below the floor is
    re-measured (as many pairs again) before it can fail; below but not significant warns. Not measured fails
    with the reason (never a silent pass). With a sequential ``design`` one pair at a time is added until the
    interval of the ratio is above or below the floor or the budget is spent (``undecided``: passes with a
    warning); its pairs and server-seconds go to ``costs``."""
    arms = measurements.arms(name, ms.vs)
    if arms is None:
        reason = measurements.pair_error(name, ms.vs) or f"profile {ms.vs!r} was not measured with {name!r}"
        text = f"speedup vs {ms.vs}: not measured: {reason}"
        return Check("min_speedup", f"speedup vs {ms.vs}", ">=", ms.ratio, None, "x", False, text=text)
    if design is not None:
        return _sequential_speedup(case, measurements, name, ms, design, costs)
    confirmable = arms.pairs <= arms.first and measurements.can_measure(name)
    judged = speedup.judge_speedup(
        arms.ratios(), ms.ratio, vs=ms.vs, mode=arms.mode, first=arms.first, confirmable=confirmable
    )
    if judged.verdict == "suspected":
        arms = measurements.confirm_pairs(name, ms.vs, _confirming_pairs(arms.first))
        judged = speedup.judge_speedup(
            arms.ratios(), ms.ratio, vs=ms.vs, mode=arms.mode, first=arms.first, confirmable=False
        )
    case.replace(paired={**arms.to_dict(), "speedup": judged.line(), "verdict": judged.verdict})
    if judged.verdict == "not significant":
        case.warnings.append(f"{judged.line()}: below the floor, not significant; not failed")
    return judged.check()


def _confirming_pairs(first: int) -> int:
    """Pairs a fixed-repeat confirmation adds to the first ``first``: as many again, at least
    ``speedup.CONFIRM_TOTAL_PAIRS`` in all."""
    return max(first, speedup.CONFIRM_TOTAL_PAIRS - first)


def _sequential_speedup(
    case: _Case,
    measurements: MeasureHandle,
    name: str,
    ms: MinSpeedup,
    design: sequential.Design,
    costs: dict[str, dict[str, Any]],
) -> Check:
    """``speedup_check`` with a sequential design: look after every pair (``speedup.judge_speedup_sequential``)."""
    while True:
        arms = measurements.arms(name, ms.vs)
        assert arms is not None  # measured (speedup_check), and more pairs only extend them
        spent = measurements.spent_s(name, ms.vs)
        ratios = arms.ratios()
        decision = sequential.decide_floor(ratios, ms.ratio, design)
        more = not decision.decided and design.may_continue(arms.pairs, spent) and measurements.can_measure(name)
        if not more or not measurements.more(name, ms.vs):
            break
    needed = None if decision.decided else sequential.repeats_needed(ratios, ms.ratio, design)
    judged = speedup.judge_speedup_sequential(
        ratios, ms.ratio, design, vs=ms.vs, mode=arms.mode, first=arms.first, exhausted=True,
        detail=lambda d: sequential.detail(d, unit="pairs", server_s=spent, needed=needed, exhausted=True),
    )  # fmt: skip
    costs["min_speedup"] = {"verdict": judged.verdict, "repeats": arms.pairs, "server_s": round(spent, 3)}
    _rebuild_record(case, measurements, name, ms.vs)
    case.replace(paired={**arms.to_dict(), "speedup": judged.line(), "verdict": judged.verdict})
    return judged.check()


def confirm_record(measurements: MeasureHandle, record: results.ResultRecord) -> results.ResultRecord | None:
    """A record of the test's profile measured again now (as many phases, or pairs, as the first time; once per
    profile and run), to confirm a suspected throughput/latency regression; None when its server is gone."""
    name = record.profile
    vs = (record.paired or {}).get("vs")
    arms = measurements.arms(name, vs) if vs else None
    again = measurements.confirmation(name, vs, pairs=_confirming_pairs(arms.first) if arms is not None else 0)
    if again is None:
        return None
    fingerprint = {**record.fingerprint, "runner": again.runner}
    confirmed = results.ResultRecord.from_measurements(name, again.measurements, fingerprint, paired=again.paired)
    return dataclasses.replace(confirmed, test_id=record.test_id)


def _extended(case: _Case, measurements: MeasureHandle, record: results.ResultRecord) -> results.ResultRecord | None:
    """The test's record with one more repeat (or pair) of its profile (``measurements.more``), for a sequential
    confirmation; None when none could be measured."""
    vs = (record.paired or {}).get("vs")
    if not measurements.more(record.profile, vs):
        return None
    _rebuild_record(case, measurements, record.profile, vs)
    return case.record


@dataclass(frozen=True, slots=True)
class CompareVerdict:
    """What :func:`judge_compare` decided for one test."""

    #: The failure text (head line, then the compare table(s)); None when the test did not regress.
    failure: str | None = None
    #: A ``SpecdecWarning`` text: a suspected regression that the confirming measurement did not show.
    warning: str | None = None
    #: How the compare was judged (``exact: ...``, ``throughput and latency judged ...``), for the summary.
    notes: tuple[str, ...] = ()
    #: A passing compare's table (``compare.Comparison.lines``): the deltas are shown under the summary too.
    table: tuple[str, ...] = ()


def judge_compare(
    base: results.ResultRecord,
    record: results.ResultRecord,
    *,
    run_id: str,
    test_id: str,
    tolerances: Mapping[str, Tolerance],
    noise: Mapping[str, float],
    force: bool,
    confirm: Callable[[], results.ResultRecord | None],
    design: sequential.Design | None = None,
    server_s: Callable[[], float] | None = None,
    costs: dict[str, dict[str, Any]] | None = None,
    current_run: str = "",
    bisect_hint: BisectHint | None = None,
) -> CompareVerdict:
    """Compare ``record`` with the stored ``base`` (of run ``run_id``, found under ``test_id``). A throughput or
    latency regression is measured again (``confirm()``, issue 15.3) and fails only when the confirming measurement
    regresses in one of the same metrics; an exact-metric regression fails at once (nothing to re-measure).

    With a sequential ``design``, ``confirm()`` returns the record with one more repeat (or pair) each call, and
    the suspected rows are decided by :func:`sequential_compare` instead of a second comparison.

    :param tolerances: ``tolerances.layered_tolerances``; :param noise: ``noise.read_noise`` (relative, per field).
    :param force: compare although the workloads differ (``--specdec-compare-force``).
    :param server_s: seconds the current record's phases held servers (sequential: the cost line).
    :param costs: gets ``compare``'s decision, repeats and server-seconds (sequential).
    :param current_run: this session's run id: with more than one fingerprint difference, the head is followed by
        the ``bisect`` command over the two runs (``bisect_hint``, i.e. ``bisection.bisect_hint``; none without).
    """
    try:
        comparison = compare.compare_results(base, record, tolerances, force=force, noise=noise)
    except CompareError as exc:
        return CompareVerdict(f"not compared with run {run_id}: {exc} (--specdec-compare-force compares anyway)")
    notes = tuple(n for n in comparison.notes if n.startswith(("exact:", "throughput and latency judged")))
    head = f"regression against run {run_id} ({test_id}):"
    hint = bisect_hint(comparison.diff, run_id, current_run, record.test_id, test_id) if bisect_hint else ""
    head = "\n".join(filter(None, [head, hint]))
    if comparison.confirmed_regressions:  # the compare command counts the same rows (CompareRow.needs_confirmation)
        return CompareVerdict("\n".join([head, *comparison.lines()]), notes=notes)
    if design is not None and _suspects(comparison):
        return sequential_compare(
            base, record, comparison, head=head, run_id=run_id, test_id=test_id, tolerances=tolerances,
            noise=noise, design=design, more=confirm, server_s=server_s or (lambda: 0.0),
            costs={} if costs is None else costs, notes=notes,
        )  # fmt: skip
    if not comparison.failed:
        return CompareVerdict(notes=notes, table=tuple(comparison.lines()))
    again = confirm()
    if again is None:
        text = "\n".join([head, *comparison.lines(), "(not confirmed: the server could not be measured again)"])
        return CompareVerdict(text, notes=notes)
    confirming = compare.compare_results(base, again, tolerances, force=True, noise=noise)
    suspected = {r.metric for r in comparison.regressions}
    table = [line for line in confirming.lines() if not line.startswith(("fingerprint", "  ", "runner state"))]
    if not suspected & {r.metric for r in confirming.regressions}:
        warning = (
            f"{test_id}: suspected regression of {', '.join(sorted(suspected))} against run {run_id} not "
            "confirmed by a second measurement; not failed"
        )
        return CompareVerdict(warning=warning, notes=notes)
    text = "\n".join([head, "first measurement:", *comparison.lines(), "confirming measurement:", *table])
    return CompareVerdict(text, notes=notes)


def _row_values(record: results.ResultRecord, metric: str) -> list[float]:
    """Per-repeat values behind a compare row: ``output_tok_s / baseline`` -> the paired ratios, else the field."""
    fname, sep, _ = metric.partition(" / ")
    return paired_ratios(record, fname) if sep else record.values(metric)


def _row_limit(row: compare.CompareRow, noise: Mapping[str, float], vs: str | None) -> float:
    """The relative worsening a row allows: its tolerance at the baseline median, or ``NOISE_K`` x the calibrated
    between-run noise when larger (the repeats' own spread is left to the t-test)."""
    tol = row.tolerance.allowed(row.baseline) / abs(row.baseline) if row.baseline else row.tolerance.rel
    fname, sep, _ = row.metric.partition(" / ")
    calibrated = noise.get(f"{fname}/{vs}" if sep else row.metric, 0.0)
    return max(tol, NOISE_K * calibrated)


def _suspects(comparison: compare.Comparison) -> tuple[compare.CompareRow, ...]:
    """Rows a sequential compare measures on: not exact, and the current median worse than the baseline's by more
    than the tolerance (``REGRESSED``, ``noise``, or ``ok`` only because the repeats' 3-sigma spread widened the
    limit): the repeats then decide, not the first measurement's spread."""
    out = []
    for r in comparison.rows:
        if r.basis == "exact" or r.verdict not in ("REGRESSED", "noise", "ok"):
            continue
        if r.delta is None or r.baseline is None:
            continue
        worse = -r.delta if r.higher_is_better else r.delta
        if worse > r.tolerance.allowed(r.baseline) + 1e-9 * max(abs(r.baseline), 1.0):
            out.append(r)
    return tuple(out)


def sequential_compare(
    base: results.ResultRecord,
    record: results.ResultRecord,
    comparison: compare.Comparison,
    *,
    head: str,
    run_id: str,
    test_id: str,
    tolerances: Mapping[str, Tolerance],
    noise: Mapping[str, float],
    design: sequential.Design,
    more: Callable[[], results.ResultRecord | None],
    server_s: Callable[[], float],
    costs: dict[str, dict[str, Any]],
    notes: tuple[str, ...],
) -> CompareVerdict:
    """The confirming measurement of a suspected regression, sequentially: one more repeat (``more()``) at a time,
    each suspected row (:func:`_suspects`: worse than its tolerance at the first measurement) decided by
    ``sequential.decide_shift`` on all the current repeats against the baseline's, until every row is ``worse`` or
    ``within`` its limit or the budget is spent. At least one repeat is added (the suspicion came from the first
    measurement). Fails when a row is ``worse``; when none is, a row that stayed undecided warns, and rows all
    within their limits pass silently unless the first comparison had called them ``REGRESSED``.
    """
    suspected = _suspects(comparison)
    vs = (record.paired or {}).get("vs")
    current = record
    decisions: dict[str, sequential.Decision] = {}
    while True:
        n = len(current.values("output_tok_s"))
        if current is not record:
            for row in suspected:
                if row.metric in decisions and decisions[row.metric].decided:
                    continue
                decisions[row.metric] = sequential.decide_shift(
                    _row_values(base, row.metric), _row_values(current, row.metric), _row_limit(row, noise, vs),
                    design, higher_is_better=row.higher_is_better,
                )  # fmt: skip
            if all(d.decided for d in decisions.values()) or not design.may_continue(n, server_s()):
                break
        nxt = more()
        if nxt is None:
            break
        current = nxt
    spent = server_s()
    if not decisions:
        text = "\n".join([head, *comparison.lines(), "(not confirmed: the server could not be measured again)"])
        return CompareVerdict(text, notes=notes)
    worse = [m for m, d in decisions.items() if d.verdict == "worse"]
    n = max(d.n for d in decisions.values())
    verdict = "FAILED" if worse else "passed" if all(d.decided for d in decisions.values()) else "undecided"
    costs["compare"] = {"verdict": verdict, "repeats": n, "server_s": round(spent, 3)}
    lines = [
        f"  {m}: {d.verdict} (current/baseline {d.estimate:.4g}, {d.interval()}, limit "
        f"{_row_limit(next(r for r in suspected if r.metric == m), noise, vs):.1%}, {d.method}, {d.n} repeats)"
        for m, d in decisions.items()
    ]
    if worse:
        final = compare.compare_results(base, current, tolerances, force=True, noise=noise)
        table = [line for line in final.lines() if not line.startswith(("fingerprint", "  ", "runner state"))]
        text = "\n".join(
            [head, "first measurement:", *comparison.lines(),
             f"sequential confirmation ({n} repeats, {spent:.1f} server-s):", *lines, *table]
        )  # fmt: skip
        return CompareVerdict(text, notes=notes)
    if verdict == "passed" and not comparison.failed:
        final = compare.compare_results(base, current, tolerances, force=True, noise=noise)
        return CompareVerdict(notes=notes, table=tuple(final.lines()))
    names = ", ".join(sorted(decisions))
    state = "within the limit" if verdict == "passed" else "undecided"
    warning = (
        f"{test_id}: suspected regression of {names} against run {run_id} {state} after {n} repeats "
        f"({spent:.1f} server-s); not failed: " + "; ".join(line.strip() for line in lines)
    )
    if verdict == "undecided":
        needed = [
            sequential.shift_repeats_needed(
                _row_values(base, row.metric), _row_values(current, row.metric), _row_limit(row, noise, vs), design,
                higher_is_better=row.higher_is_better,
            )
            for row in suspected if not decisions[row.metric].decided
        ]  # fmt: skip
        if any(x is None for x in needed):
            warning += (
                "; more repeats would not decide it at this spread (the estimate sits on the limit, or the "
                "baseline's own spread is too wide: record it with more repeats)"
            )
        else:
            most = max(x for x in needed if x is not None)
            warning += f"; about {most} repeats in all would decide it (raise workload.max_repeats or max_server_s)"
    return CompareVerdict(warning=warning, notes=notes)


def compare_item(
    case: _Case,
    measurements: MeasureHandle,
    outcomes: Outcomes,
    setup: CompareSetup,
    record: results.ResultRecord,
    profile: Profile,
    marker_tolerances: Sequence[str],
    design: sequential.Design | None,
    costs: dict[str, dict[str, Any]],
) -> str | None:
    """The baseline-compare failure text for one test, or None when it did not regress (``judge_compare`` on the
    baseline ``setup.baselines`` picks; no baseline warns)."""
    test_id = record.test_id
    if setup.profile and profile.is_speculative:
        # Swap only the profile's part of the parametrization id ("[eagle3-shifted-layers-1]" -> "[eagle3-1]");
        # profiles without speculation keep their own baseline.
        test_id = compare.swap_profile_id(test_id, profile.name, setup.profile)
    found = setup.baselines.find(test_id)
    if found is None:
        case.warnings.append(f"no baseline for {test_id} in {setup.baselines.where()}; not compared")
        return None
    run, base = found
    vs = (record.paired or {}).get("vs")
    judged = judge_compare(
        base,
        record,
        run_id=run.run_id,
        test_id=test_id,
        tolerances=layered_tolerances(list(setup.tolerances), profile.tolerances, list(marker_tolerances)),
        noise=outcomes.noise(profile.name),
        force=setup.force,
        confirm=lambda: (
            confirm_record(measurements, record) if design is None else _extended(case, measurements, record)
        ),
        design=design,
        server_s=lambda: measurements.spent_s(profile.name, vs),
        costs=costs,
        current_run=setup.run_id,
        bisect_hint=setup.bisect_hint,
    )
    outcomes.add_compare(run.run_id, record.test_id, [f"{profile.name}: {n}" for n in judged.notes], judged.table)
    if judged.warning is not None:
        case.warnings.append(judged.warning)
    return judged.failure
