"""``python -m pytest_specdec bisect``: the differences between a good and a bad configuration that cause a
regression, by delta debugging over launched probes (``pytest_specdec.bisection``)."""

from __future__ import annotations

import argparse
import dataclasses
import os
import shlex
import signal
import sys
from pathlib import Path
from typing import Any

from pytest_specdec import bisection
from pytest_specdec.bisection.probes import Prober, profile_mapping
from pytest_specdec.bisection.symptoms import design
from pytest_specdec.cli.exits import EXIT_FINDINGS, EXIT_OK, EXIT_STOPPED, EXIT_USAGE
from pytest_specdec.core import clock
from pytest_specdec.core.errors import CompareError, ProfileError, SpecdecError
from pytest_specdec.core.redaction import REDACTED
from pytest_specdec.core.tolerances import layered_tolerances
from pytest_specdec.engines.rules import load_profiles
from pytest_specdec.measure.results import ResultStore

__all__ = ["bisect_command"]


def bisect_command(args: argparse.Namespace) -> int:
    """``bisect [PROFILE_FILE] --good A --bad B``: lists the differences, launches probes (a line per launch and per
    probe, an estimate once GOOD started) and prints the report (``bisection.report_lines``); returns ``EXIT_OK``
    when culprits were named for every symptom, ``EXIT_FINDINGS`` when the regression did not reproduce, nothing
    could be bisected, or the tok/s symptom was not (``tok/s not bisected``: no probe could decide in --max-pairs),
    ``EXIT_STOPPED`` when ``--max-launches``, Ctrl-C or SIGTERM ended it first (the report says what is known; every
    server is stopped), ``EXIT_USAGE`` on bad input."""
    try:
        good, bad, name, source, fixed, tolerances = _bisect_inputs(args)
        tolerance = layered_tolerances(tolerances)["output_tok_s"].rel
    except (ProfileError, CompareError, ValueError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return EXIT_USAGE
    diffs = bisection.differences(good, bad)
    if not diffs:
        print(f"bisect: {args.good} and {args.bad} have no difference a profile can apply")
        for item in fixed:
            print(f"not bisectable here: {item.line()}")
        return EXIT_FINDINGS
    print(f"bisect: {len(diffs)} difference{'s' if len(diffs) != 1 else ''} between {args.good} (good) and "
          f"{args.bad} (bad):")  # fmt: skip
    for d in diffs:
        print(f"  {d.line()}")
    started = clock.now()

    def launched(number: int, label: str, ready_s: float | None, why: str) -> None:
        _raise_if_terminated()
        state = f"ready in {ready_s:.0f} s" if ready_s is not None else why
        limit = f"/{args.max_launches}" if args.max_launches else ""
        print(f"launch {number}{limit}: {label}: {state} ({(clock.now() - started) / 60:.1f} min so far)",
              flush=True)  # fmt: skip

    try:
        prober = Prober(good, name=name, source=source, log_dir=Path(args.log_dir), log_prefix="bisect",
                        max_launches=args.max_launches, on_launch=launched)  # fmt: skip
    except ProfileError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return EXIT_USAGE

    def progress(rec: bisection.ProbeRecord) -> None:
        _raise_if_terminated()
        verdict = rec.verdict
        if verdict is not None:
            words = {"FAIL": "reproduces", "PASS": "does not reproduce", "UNRESOLVED": "unresolved"}
            shown = words[verdict.outcome or "UNRESOLVED"]
            n = prober.launches
            print(f"probe {rec.label}: {shown} [{verdict.basis}: {verdict.line}] ({n} launch{'es' if n != 1 else ''})",
                  flush=True)  # fmt: skip
        elif rec.ratios:
            n = prober.launches
            print(f"probe {rec.label}: tok/s {bisection.ratio_text(rec.ratios, rec.versus)} ({n} "
                  f"launch{'es' if n != 1 else ''})", flush=True)  # fmt: skip

    looks = design(args.max_pairs).points
    estimates = 0

    def estimated(low: int, high: int, why: str) -> None:
        _raise_if_terminated()
        nonlocal estimates
        estimates += 1
        line = _estimate_line(low, high, why, elapsed=clock.now() - started, launched=prober.launches,
                              start_s=prober.start_s, phase_s=prober.phase_s, pairs=(looks[0], looks[-1]),
                              bad_next=estimates == 1)  # fmt: skip
        if args.max_launches:
            line += f"; --max-launches {args.max_launches} stops it at {args.max_launches}"
        print(line, flush=True)

    previous = signal.getsignal(signal.SIGTERM)
    _TERMINATED.clear()
    signal.signal(signal.SIGTERM, _terminated)
    try:
        result = bisection.bisect(good, diffs, prober, tolerance_rel=tolerance, max_pairs=args.max_pairs,
                                  fixed=fixed, on_probe=progress, on_note=print, on_estimate=estimated)  # fmt: skip
    except SpecdecError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return EXIT_FINDINGS
    finally:
        # A second SIGTERM while the servers stop must not leave one behind: ignored until they are.
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
        try:
            prober.close()
        finally:
            signal.signal(signal.SIGTERM, previous)
    for line in bisection.report_lines(dataclasses.replace(result, launches=prober.launches, server_s=prober.server_s)):
        print(line)
    if result.stopped:
        return EXIT_STOPPED
    if result.culprits and not result.unsplit:
        return EXIT_OK
    # A CI script reads the status: say why it is 1 when culprits were named.
    if result.culprits:
        print("exit 1: culprits named, but a symptom was not bisected (the line above says what would bisect it)")
    return EXIT_FINDINGS


def _estimate_line(
    low: int,
    high: int,
    why: str,
    *,
    elapsed: float,
    launched: int,
    start_s: float | None,
    phase_s: float | None,
    pairs: tuple[int, int],
    bad_next: bool,
) -> str:
    """The estimate line: ``low``-``high`` launches in all (``bisection.estimate``), and the minutes they take at the
    pace measured so far: ``elapsed`` seconds for the ``launched`` servers, then for each launch left GOOD's start
    (``start_s``) and a phase (``phase_s``, the mean measured phase); with ``bad_next`` (the first estimate, BAD not
    measured yet) BAD's second phase and its paired tok/s phases, ``pairs`` (first look, --max-pairs) pairs of two
    phases. A probe measured for tok/s adds pairs too; how many probes are, the symptoms decide, so the line says
    what one adds. Example: ``estimate: 2 launches if each symptom has one cause (before the symptoms are known):
    ~2.2-7.8 min from the start at the pace so far (25 s to start GOOD, 8 s a phase; BAD's tok/s: 3-24 pairs of
    ~16 s); each probe measured for tok/s adds 3-24 pairs (~0.8-6.4 min)``."""
    count = f"{low} launch{'es' if low != 1 else ''}" if low == high else f"{low}-{high} launches"
    line = f"estimate: {count} {why}"
    if start_s is None or phase_s is None:
        return line
    each, pair = start_s + phase_s, 2 * phase_s
    fewest = elapsed + max(low - launched, 0) * each
    most = elapsed + max(high - launched, 0) * each
    bad = ""
    if bad_next:
        fewest += phase_s + pairs[0] * pair
        most += phase_s + pairs[1] * pair
        bad = f"; BAD's tok/s: {pairs[0]}-{pairs[1]} pairs of ~{pair:.0f} s"
    return (f"{line}: ~{_minutes(fewest, most)} from the start at the pace so far ({start_s:.0f} s to start GOOD, "
            f"{phase_s:.0f} s a phase{bad}); each probe measured for tok/s adds {pairs[0]}-{pairs[1]} pairs "
            f"(~{_minutes(pairs[0] * pair, pairs[1] * pair)})")  # fmt: skip


def _minutes(low_s: float, high_s: float) -> str:
    """``1.3-6.8 min``, or ``1.3 min`` when both round alike."""
    low, high = f"{low_s / 60:.1f}", f"{high_s / 60:.1f}"
    return f"{low} min" if low == high else f"{low}-{high} min"


class _Terminated(KeyboardInterrupt):
    """SIGTERM, raised where the bisect is (as Ctrl-C is): it stops with a report and no server left."""


#: Signals received during the bisect: the handler's exception is lost when the signal lands in code that swallows
#: exceptions (seen on CI: inside an import lock's weakref callback, "Exception ignored in: ..._get_module_lock"; the
#: bisect then ran to its end), so the progress callbacks raise it again.
_TERMINATED: list[str] = []


def _terminated(signum: int, frame: object) -> None:
    _TERMINATED.append("SIGTERM")
    raise _Terminated("SIGTERM")


def _raise_if_terminated() -> None:
    """Raise :class:`_Terminated` when a SIGTERM arrived and its exception was swallowed where it landed."""
    if _TERMINATED:
        raise _Terminated(_TERMINATED[0])


def _bisect_inputs(args: argparse.Namespace) -> tuple[dict[str, Any], dict[str, Any], str, str, list[Any], list[str]]:
    """(good mapping, bad mapping, good name, source, not-bisectable differences, good's tolerances) of ``bisect``,
    from two profiles of PROFILE_FILE or from two stored runs' recorded profile definitions.

    :raises ProfileError, CompareError: unknown profile, unreadable run, no such test, no recorded definition.
    """
    if args.profile_file:
        profiles = load_profiles(args.profile_file)
        good, bad = profiles.get(args.good, flag="--good"), profiles.get(args.bad, flag="--bad")
        return profile_mapping(good), profile_mapping(bad), good.name, good.source, [], list(good.tolerances)
    store = ResultStore(Path(args.results_dir))
    try:
        good_run, bad_run = store.load(args.good), store.load(args.bad)
    except CompareError as exc:
        # A fresh user meant two profiles and left out the file: say which argument reads them as runs.
        raise CompareError(
            f"{exc}; without PROFILE_FILE, --good and --bad name stored runs: to bisect two profiles, "
            f"give their file first (bisect specdec.yaml --good {args.good} --bad {args.bad})"
        ) from exc
    test = args.test
    if test is None:
        ids = [r.test_id for r in bad_run.results]
        if len(ids) != 1:
            raise CompareError(f"--test: run {bad_run.run_id} has {len(ids)} tests; name one with --test ID "
                               f"(tests: {', '.join(ids) or 'none'})")  # fmt: skip
        test = ids[0]
    bad_rec = bad_run.find(test)
    good_rec = good_run.find(args.good_test or test)
    if bad_rec is None:
        raise CompareError(f"--test={test}: no such test in bad run {bad_run.run_id} (tests: "
                           f"{', '.join(r.test_id for r in bad_run.results) or 'none'})")  # fmt: skip
    if good_rec is None:
        tests = ", ".join(r.test_id for r in good_run.results) or "none"
        if args.good_test:
            raise CompareError(f"--good-test={args.good_test}: no such test in good run {good_run.run_id} (tests: "
                               f"{tests})")  # fmt: skip
        # The bad run's test is not in the good run under its id (another profile's test): --good-test names it.
        ids = [r.test_id for r in good_run.results]
        example = f" {shlex.quote(ids[0])}" if len(ids) == 1 else " ID"
        raise CompareError(f"no test {test} in good run {good_run.run_id} (tests: {tests}); --test names the bad "
                           f"run's test: when the good run's has another id, add --good-test{example}")  # fmt: skip
    fixed = bisection.not_bisectable(good_rec.fingerprint, bad_rec.fingerprint)
    maps = []
    for run, rec in ((good_run, good_rec), (bad_run, bad_rec)):
        definition = rec.fingerprint.get("profile_def")
        if not isinstance(definition, dict):
            raise CompareError(f"run {run.run_id}: {rec.test_id} has no recorded profile definition (fingerprint "
                               "profile_def); bisect its profiles from the profile file instead")  # fmt: skip
        maps.append(_restore_paths(definition, Path(args.profiles_dir).resolve()))
    good, bad = maps
    for name in sorted(set(good.get("env") or {}) | set(bad.get("env") or {})):
        if REDACTED in ((good.get("env") or {}).get(name), (bad.get("env") or {}).get(name)):
            for m in (good, bad):
                if (m.get("env") or {}).get(name) == REDACTED:
                    if name in os.environ:
                        m["env"][name] = os.environ[name]
                    else:
                        del m["env"][name]
            if name not in os.environ:
                fixed.append(bisection.NotBisectable(f"env {name} (secret, redacted in the runs; export it to "
                                                     "include it)", "<redacted>", "<redacted>"))  # fmt: skip
    for m in (good, bad):
        m.pop("api_key", None)
    source = str(Path(args.profiles_dir).resolve() / "specdec.yaml")
    return good, bad, good_rec.profile, source, fixed, list(good.get("tolerances") or [])


def _restore_paths(value: Any, profiles_dir: Path) -> Any:
    """A recorded profile definition with ``<profiles>`` and ``<pytest_specdec>`` (``results.profile_definition``)
    made paths again: the profiles directory given, and this installed package."""
    if isinstance(value, str):
        package = str(Path(__file__).resolve().parents[1])
        return value.replace("<profiles>", str(profiles_dir)).replace("<pytest_specdec>", package)
    if isinstance(value, dict):
        return {k: _restore_paths(v, profiles_dir) for k, v in value.items()}
    if isinstance(value, list):
        return [_restore_paths(v, profiles_dir) for v in value]
    return value
