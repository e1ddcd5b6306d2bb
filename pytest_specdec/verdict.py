"""One test's verdict after its body: its thresholds on the profile's measurement, the paired ``min_speedup`` check,
and the stored-baseline compare, each suspected throughput/latency regression measured again before it fails.

``plugin.py::pytest_runtest_call`` calls :func:`judge_item`. The functions taking the ``SpecdecSession`` read its
measurements and may measure again (confirming); the others take data only: :func:`failure_message`,
:func:`shared_verdict_message`, :func:`sweep_steps`, :func:`judge_compare`.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import pytest

from pytest_specdec import compare, hoststate, pairing, results, runner, sweep
from pytest_specdec.errors import CompareError, ServerError, ServerStartError, SpecdecError, SpecdecWarning
from pytest_specdec.keys import CHECKS_PROPERTY, RECORD_PROPERTY, record_key, thresholds_key, tolerances_key
from pytest_specdec.profiles import MinSpeedup, Profile
from pytest_specdec.thresholds import Check, Verdict, evaluate

if TYPE_CHECKING:
    from pytest_specdec.session import SpecdecSession

__all__ = [
    "CompareVerdict",
    "compare_item",
    "confirm_pair",
    "confirm_record",
    "failure_message",
    "judge_compare",
    "judge_item",
    "noise_for",
    "replace_record",
    "shared_verdict_message",
    "speedup_check",
    "sweep_steps",
]


def judge_item(session: SpecdecSession, item: pytest.Item) -> None:
    """After a test body (``pytest_runtest_call``): its thresholds, then the baseline compare; fails the test with
    the verdict. Tests without a measurement are left alone.

    :raises pytest.fail.Exception: a threshold missed or a confirmed regression (one message, no traceback).
    """
    record = item.stash.get(record_key, None)
    if record is None:
        return
    profile = session.profile(record.profile)
    thresholds = item.stash.get(thresholds_key, None) or profile.thresholds
    run = session.runs[profile.name]
    check = None
    if thresholds.min_speedup is not None:
        check = speedup_check(session, item, profile.name, thresholds.min_speedup)
    steps, configured = sweep_steps(profile, session.profiles or {})
    verdict = evaluate(
        thresholds,
        run.metrics,
        speculative=profile.is_speculative,
        speedup_check=check,
        sweep_steps=steps,
        configured_steps=configured,
    )
    item.user_properties.append((CHECKS_PROPERTY, json.dumps(verdict.outcomes())))
    failures = []
    if verdict.failed:
        message = failure_message(verdict, profile.name, run.metrics.num_ok, len(run.measurements))
        first = session.verdicts.setdefault((profile.name, message), item.nodeid)
        if first != item.nodeid:
            message = shared_verdict_message(verdict, profile.name, first)
        failures.append(message)
    if session.baselines is not None:
        text = compare_item(session, item, record, profile)
        if text:
            failures.append(text)
    if failures:
        pytest.fail("\n".join(failures), pytrace=False)


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


def replace_record(item: pytest.Item, **changes: Any) -> None:
    """Update the test's result record (stash and the user property the controller reads)."""
    record = dataclasses.replace(item.stash[record_key], **changes)
    item.stash[record_key] = record
    item.user_properties[:] = [
        (k, json.dumps(record.to_dict(), default=str) if k == RECORD_PROPERTY else v) for k, v in item.user_properties
    ]


def speedup_check(session: SpecdecSession, item: pytest.Item, name: str, ms: MinSpeedup) -> Check:
    """The ``min_speedup`` check of profile ``name`` on its paired arms: a median ratio below the floor is
    re-measured (as many pairs again) before it can fail; below but not significant warns. Not measured fails
    with the reason (never a silent pass)."""
    key = (name, ms.vs)
    arms = session.pairs.get(key)
    if arms is None:
        reason = session.pair_errors.get(key, f"profile {ms.vs!r} was not measured with {name!r}")
        text = f"speedup vs {ms.vs}: not measured: {reason}"
        return Check("min_speedup", f"speedup vs {ms.vs}", ">=", ms.ratio, None, "x", False, text=text)
    confirmable = arms.pairs <= arms.first and name in session.servers
    judged = pairing.judge_speedup(
        arms.ratios(), ms.ratio, vs=ms.vs, mode=arms.mode, first=arms.first, confirmable=confirmable
    )
    if judged.verdict == "suspected":
        arms = confirm_pair(session, key, arms)
        judged = pairing.judge_speedup(
            arms.ratios(), ms.ratio, vs=ms.vs, mode=arms.mode, first=arms.first, confirmable=False
        )
    replace_record(item, paired={**arms.to_dict(), "speedup": judged.line(), "verdict": judged.verdict})
    if judged.verdict == "not significant":
        item.warn(SpecdecWarning(f"{judged.line()}: below the floor, not significant; not failed"))
    return judged.check()


def confirm_pair(session: SpecdecSession, key: tuple[str, str], arms: pairing.PairedArms) -> pairing.PairedArms:
    """``arms`` extended by as many pairs measured again (on failure to re-measure, ``arms`` unchanged and the
    reason recorded in ``session.pair_errors``)."""
    from pytest_specdec.session import measure_lock

    server = session.servers[key[0]]
    with measure_lock(session.config) as shared_file:
        try:
            count = max(arms.first, pairing.CONFIRM_TOTAL_PAIRS - arms.first)
            more = session.measure_pair(server, key[1], count, shared=shared_file is not None)
        except (ServerStartError, ServerError, ValueError) as exc:
            session.pair_errors[key] = f"confirming measurement failed: {exc}"
            return arms
    session.pairs[key] = arms = arms.extend(more)
    return arms


def confirm_record(session: SpecdecSession, record: results.ResultRecord) -> results.ResultRecord | None:
    """A record of the test's profile measured again now (as many phases, or pairs, as the first time; once per
    profile and session), to confirm a suspected throughput/latency regression; None when its server is gone."""
    from pytest_specdec.session import measure_lock

    name = record.profile
    if name in session.confirmations:
        found = session.confirmations[name]
        return None if found is None else dataclasses.replace(found, test_id=record.test_id)
    server = session.servers.get(name)
    confirmed = None
    if server is not None:
        before = hoststate.snapshot()
        vs = (record.paired or {}).get("vs")
        arms = session.pairs.get((name, vs)) if vs else None
        try:
            if arms is not None:
                if arms.pairs <= arms.first:
                    arms = confirm_pair(session, (name, vs), arms)  # type: ignore[arg-type]
                again = pairing.PairedArms(
                    arms.target_profile, arms.reference_profile, arms.mode,
                    arms.target[arms.first :], arms.reference[arms.first :], arms.pairs - arms.first,
                )  # fmt: skip
                measured, paired = again.target_measurements(), again.to_dict()
            else:
                with measure_lock(session.config):
                    repeats = session.repeats(server.profile)
                    measured, paired = runner.measure_repeats(server, repeats).measurements, {}
        except SpecdecError:
            measured = ()
        if measured:
            fingerprint = {**record.fingerprint, "runner": hoststate.summarize(before, hoststate.snapshot())}
            confirmed = results.ResultRecord.from_measurements(name, measured, fingerprint, paired=paired)
    session.confirmations[name] = confirmed
    return None if confirmed is None else dataclasses.replace(confirmed, test_id=record.test_id)


def noise_for(session: SpecdecSession, name: str) -> dict[str, float]:
    """Calibrated relative noise of profile ``name`` (``calibrate`` writes ``<specdec dir>/noise/<name>.json``);
    empty when absent or unreadable. Read once per session (``session.noise``)."""
    if name not in session.noise:
        session.noise[name] = compare.read_noise(session.out_dir / "noise" / f"{name}.json")
    return session.noise[name]


@dataclass(frozen=True, slots=True)
class CompareVerdict:
    """What :func:`judge_compare` decided for one test."""

    #: The failure text (head line, then the compare table(s)); None when the test did not regress.
    failure: str | None = None
    #: A ``SpecdecWarning`` text: a suspected regression that the confirming measurement did not show.
    warning: str | None = None
    #: How the compare was judged (``exact: ...``, ``throughput and latency judged ...``), for the summary.
    notes: tuple[str, ...] = ()


def judge_compare(
    base: results.ResultRecord,
    record: results.ResultRecord,
    *,
    run_id: str,
    test_id: str,
    tolerances: Mapping[str, compare.Tolerance],
    noise: Mapping[str, float],
    force: bool,
    confirm: Callable[[], results.ResultRecord | None],
) -> CompareVerdict:
    """Compare ``record`` with the stored ``base`` (of run ``run_id``, found under ``test_id``). A throughput or
    latency regression is measured again (``confirm()``, issue 15.3) and fails only when the confirming measurement
    regresses in one of the same metrics; an exact-metric regression fails at once (nothing to re-measure).

    :param tolerances: ``compare.layered_tolerances``; :param noise: ``compare.read_noise`` (relative, per field).
    :param force: compare although the workloads differ (``--specdec-compare-force``).
    """
    try:
        comparison = compare.compare_results(base, record, tolerances, force=force, noise=noise)
    except CompareError as exc:
        return CompareVerdict(f"not compared with run {run_id}: {exc} (--specdec-compare-force compares anyway)")
    notes = tuple(n for n in comparison.notes if n.startswith(("exact:", "throughput and latency judged")))
    if not comparison.failed:
        return CompareVerdict(notes=notes)
    head = f"regression against run {run_id} ({test_id}):"
    if any(r.basis == "exact" for r in comparison.regressions):
        return CompareVerdict("\n".join([head, *comparison.lines()]), notes=notes)
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


def compare_item(
    session: SpecdecSession, item: pytest.Item, record: results.ResultRecord, profile: Profile
) -> str | None:
    """The baseline-compare failure text for one test, or None when it did not regress (``judge_compare`` on the
    baseline ``session.baselines`` picks; no baseline warns)."""
    test_id = record.test_id
    base_profile = item.config.option.specdec_compare_profile
    if base_profile and profile.is_speculative:
        # Swap only the profile's part of the parametrization id ("[eagle3-shifted-layers-1]" -> "[eagle3-1]");
        # profiles without speculation keep their own baseline.
        test_id = compare.swap_profile_id(test_id, profile.name, base_profile)
    assert session.baselines is not None
    found = session.baselines.find(test_id)
    if found is None:
        item.warn(SpecdecWarning(f"no baseline for {test_id} in {session.baselines.where()}; not compared"))
        return None
    run, base = found
    session.compared.setdefault(run.run_id, []).append(record.test_id)
    judged = judge_compare(
        base,
        record,
        run_id=run.run_id,
        test_id=test_id,
        tolerances=compare.layered_tolerances(
            session.tolerances, profile.tolerances, item.stash.get(tolerances_key, [])
        ),
        noise=noise_for(session, profile.name),
        force=item.config.option.specdec_compare_force,
        confirm=lambda: confirm_record(session, record),
    )
    for note in judged.notes:
        session.compare_notes[f"{profile.name}: {note}"] = None
    if judged.warning is not None:
        item.warn(SpecdecWarning(judged.warning))
    return judged.failure
