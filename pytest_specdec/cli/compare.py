"""``python -m pytest_specdec compare``: two stored runs loaded, compared test by test, one table each.

The judging is ``judge.compare.compare_runs``; this module finds the two runs (:func:`load_pair`), maps a profile's
tests onto another profile's (:func:`profile_mapper`; without ``--compare-profile``, as pytest mapped them:
:func:`_pytest_baseline_id`) and prints.
"""

from __future__ import annotations

import dataclasses
import difflib
import re
import sys
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import TextIO

from pytest_specdec.cli.exits import EXIT_FINDINGS
from pytest_specdec.core.errors import CompareError, NoiseFileError
from pytest_specdec.core.tolerances import Tolerance, Tolerances, parse_tolerances
from pytest_specdec.judge.compare import (
    compare_runs,
    design_of,
    judged_tolerances,
    single_look,
    swap_profile_id,
    tolerance_text,
)
from pytest_specdec.judge.history import StoredHistory
from pytest_specdec.judge.noise import CalibratedNoise, read_noise
from pytest_specdec.judge.verdict import undecided_block, undecided_reason
from pytest_specdec.measure.results import ResultRecord, ResultStore, RunFile
from pytest_specdec.report.terminal import undecided_count

__all__ = ["compare_command", "load_pair", "profile_mapper"]


def _noise(
    noise_path: str | Path | None, noise_dir: Path, current: RunFile
) -> Mapping[str, float] | Callable[[ResultRecord], Mapping[str, float]]:
    """The calibrated noise of the compare: ``--noise FILE`` for every test, else the noise each record of
    ``current`` was judged with in pytest (``CalibratedNoise.judged``: stored with it), else its profile's own
    ``noise_dir/<profile>.json`` as pytest reads it (``judge.outcomes.Outcomes.noise``), read here for every profile
    of ``current`` so that a broken one is an input error before anything is printed (an absent one is no noise).

    :raises NoiseFileError: ``--noise FILE`` does not exist or holds no sd; a noise file read is unusable
        (``read_noise``'s message: the file, the key, the value and the fix).
    """
    if noise_path:
        path = Path(noise_path)
        if not path.is_file():
            raise NoiseFileError(f"--noise={noise_path}: not found (calibrate writes .specdec/noise/<profile>.json; "
                                 "give one of those, or leave --noise out)", path=path)  # fmt: skip
        given = read_noise(path, named=True)  # one file for every test: its name need not be a profile's
        if not given:
            raise NoiseFileError(f"--noise={noise_path}: sigma_rel holds no sd; rerun calibrate or leave --noise out",
                                 path=path, key="sigma_rel")  # fmt: skip
        return given
    cache = {name: read_noise(noise_dir / f"{name}.json") for name in dict.fromkeys(r.profile for r in current.results)}
    none: Mapping[str, float] = {}

    def judged(record: ResultRecord) -> Mapping[str, float]:
        # The noise pytest judged the record with, when it stored it; else the profile's file, as pytest reads it.
        stored = CalibratedNoise.judged(record)
        return stored if stored is not None else cache.get(record.profile, none)

    return judged


def _latest_notes(
    store: ResultStore, base: RunFile, current: RunFile, mapper: Callable[[ResultRecord], str] | None = None
) -> list[str]:
    """BASE ``latest`` is the newest run before CURRENT, whatever its state; pytest's ``--specdec-compare`` (latest)
    takes, per test, the newest run in which the test was clean, or the reference that run passed against
    (``judge.baseline.Baselines.find``). Where the two differ (the test not clean in BASE, or not in it: a session
    of other profiles stored in between; BASE passed against an older reference), say which run pytest would have
    compared with, so that naming it reproduces pytest's verdict."""
    from pytest_specdec.judge.baseline import Baselines

    older = [p for p in reversed(store.list()) if p.stem < current.run_id]
    baselines = Baselines(store.root, paths=older)
    notes = []
    for record in current.results:
        wanted = mapper(record) if mapper is not None else record.test_id  # --compare-profile: the id compared with
        stored = base.find(wanted)
        problem = stored.baseline_problem() if stored is not None else ""
        found = baselines.find(wanted)
        if stored is None:
            # Sessions of other profiles stored in between: pytest walks back to the test's newest clean run.
            if found is not None:
                notes.append(f"note: {record.test_id}: BASE latest ({base.run_id}) has no result for it; pytest's "
                             f"--specdec-compare would compare it with run {found.run.run_id}: name that run as BASE "
                             "to decide as pytest did")  # fmt: skip
            continue
        if not problem:
            if found is not None and found.run.run_id != base.run_id:
                # Clean, but pytest takes another: the reference it passed against (a slow drift adds up), or an
                # older run, BASE being stored without a compare after a clean or regressed one (its own reason).
                passed_over = [s for s in found.skipped if s.startswith(f"{base.run_id} (")]
                why = (f"is passed over by pytest {passed_over[0].removeprefix(base.run_id + ' ')}" if passed_over
                       else "passed against an older reference (a night that passes within its tolerance does not "
                            "move the reference)")  # fmt: skip
                notes.append(f"note: {record.test_id}: BASE latest ({base.run_id}) {why}; pytest's --specdec-compare "
                             f"would compare it with run {found.run.run_id}: name that run as BASE to decide as "
                             "pytest did")  # fmt: skip
            continue
        instead = f"run {found.run.run_id}" if found is not None else "no run (none is clean for it)"
        notes.append(f"note: {record.test_id}: BASE latest ({base.run_id}) is not clean for it ({problem}); pytest's "
                     f"--specdec-compare would compare it with {instead}: name that run as BASE to decide as pytest "
                     "did")  # fmt: skip
    return notes


def _tolerances_line(given: Tolerances) -> str:
    """The header line that says what ``-t`` set, an absolute part with its unit (a bare number is absolute, as in
    pytest-benchmark's grammar): ``tolerances (-t, over each test's own): output_tok_s 5 tok/s, ttft_ms 10%+5 ms,
    accept_length 0.05, tpot_ms_p50[code] 30%``. The other fields keep the tolerances each test was judged with
    (``compare.judged_tolerances``), shown in its rows."""
    shown = [f"{name} {tolerance_text(name, tol)}" for name, tol in given.items()]
    shown += [f"{name}[{category}] {tolerance_text(name, tol)}" for (name, category), tol in given.categories.items()]
    shown += [f"{name}/{vs} {tolerance_text(name, tol)}" for (name, vs), tol in given.ratios.items()]
    return f"tolerances (-t, over each test's own): {', '.join(shown)}"


def _unmeasured(record: ResultRecord, tolerances: Mapping[str, Tolerance] | None) -> str:
    """Why ``record`` cannot be compared, or ``""`` when it can: no figure for any field its compare judges
    (:func:`judged_tolerances`), as a test that failed or errored before it measured leaves it. Compared anyway,
    its rows would read ``n/a`` and the command ``ok``. Example: ``CURRENT recorded no measurement of it (outcome:
    failed)``."""
    if any(record.values(name) for name in judged_tolerances(record, tolerances)):
        return ""
    said = "interrupted" if record.interrupted else record.outcome or "none recorded"
    return f"CURRENT recorded no measurement of it (outcome: {said})"


def _absent(base: RunFile, current: RunFile, mapper: Callable[[ResultRecord], str] | None) -> list[str]:
    """One line per test of ``base`` that no record of ``current`` is compared with and that ``current`` does not
    list as errored before it measured (``RunFile.errored``: said apart, :func:`_errored`), saying what ``current``
    tells of it. Runs stored before that list was kept hold only the tests that measured: a test that errored
    before it measured (its server did not start: every test of the profile) is as absent from them as one
    deselected (``-k``, ``--server-profile``) or renamed, so the line asks rather than tells. Example: ``in the
    baseline, not in CURRENT: t.py::test_x[eagle3] (errored, deselected or renamed? CURRENT has no test of profile
    eagle3: its server may not have started)``."""
    wanted = {mapper(r) if mapper is not None else r.test_id for r in current.results}
    covered = {r.profile for r in base.results if r.test_id in wanted}  # profiles CURRENT has tests of (mapped)
    errored = {e.test_id for e in current.errored}
    lines = []
    for record in base.results:
        if record.test_id in wanted or record.test_id in errored:
            continue
        if record.profile in covered:
            why = f"CURRENT has other tests of profile {record.profile}"
        else:
            why = f"CURRENT has no test of profile {record.profile}: its server may not have started"
        lines.append(f"in the baseline, not in CURRENT: {record.test_id} (errored, deselected or renamed? {why})")
    return lines


def _errored(current: RunFile) -> list[str]:
    """One line per test that ``current`` lists as errored or failed before it measured (``RunFile.errored``: its
    server did not start, its setup raised), with the first line of its error: it could not have shown a
    regression, so the command exits 1 on it. Example: ``errored in CURRENT before it measured:
    t.py::test_x[eagle3]: server 'eagle3' exited with code 3 before it was ready ...``."""
    measured = {r.test_id for r in current.results}
    return [f"errored in CURRENT before it measured: {e.test_id}: {e.error or 'no error line recorded'}"
            for e in current.errored if e.test_id not in measured]  # fmt: skip


def _failed_checks(current: RunFile) -> list[str]:
    """One line per threshold check that pytest FAILED for a test of ``current``, as its record stores it
    (``ResultRecord.checks``: ``min_speedup``, ``min_tok_s``, ``min_accept_length[code]`` ...): the check name and
    the stored verdict. pytest failed the test and exited 1 on it; the command judges the compare rows again but
    not the thresholds (they need no baseline), so it repeats pytest's verdict and exits 1 too (a fresh-user trial
    read exit 0 from ``compare`` on a night pytest had failed on ``min_speedup``). Example: ``failed check in
    CURRENT: t.py::test_x[eagle3]: min_speedup: FAILED: speedup vs baseline 0.98x < min 1.05x ...``."""
    return [f"failed check in CURRENT: {r.test_id}: {key}: {text}"
            for r in current.results for key, text in r.checks.items() if text.startswith("FAILED")]  # fmt: skip


def _open_checks(current: RunFile) -> list[str]:
    """One line per threshold check that pytest left undecided for a test of ``current`` (``ResultRecord.checks``
    ``undecided: ...``), as :func:`_failed_checks` repeats the failed ones: not an exit status (pytest passed them
    under ``--specdec-undecided=warn``), but said (an adversarial trial read a CURRENT whose ``min_speedup`` was left
    open at 0.771x against 0.9 as ``0 undecided``). Example: ``undecided check in CURRENT: t.py::test_x[eagle3]:
    min_speedup: undecided: speedup vs baseline 0.771x: undecided vs min 0.9x [...]``."""
    return [f"undecided check in CURRENT: {r.test_id}: {key}: {text}"
            for r in current.results for key, text in r.checks.items() if text.startswith("undecided")]  # fmt: skip


def load_pair(store: ResultStore, base_ref: str, current_ref: str) -> tuple[RunFile, RunFile]:
    """The two runs of a compare, ``(base, current)``, each a path, run id, unique prefix or ``latest``
    (``ResultStore.load``); ``latest`` for BASE is the newest run before CURRENT (``store.current`` is set).

    :raises CompareError: both refs are ``latest``; or a run cannot be loaded: the message names every one that
        cannot, e.g. ``BASE: no run 'v1': not a file and no run id in .specdec/results (3 runs stored); CURRENT: no
        run 'v2': ...`` (one alone keeps ``ResultStore.load``'s message).
    """
    if base_ref == "latest" and current_ref == "latest":
        raise CompareError("BASE and CURRENT are both 'latest'; name at least one run")
    problems: dict[str, str] = {}
    current = base = None
    try:
        current = store.load(current_ref)
        store.current = current.run_id
    except CompareError as exc:
        problems["CURRENT"] = str(exc)
    try:
        base = store.load(base_ref)
    except CompareError as exc:
        problems["BASE"] = str(exc)
    if base is None or current is None:
        if len(problems) == 1:
            raise CompareError(next(iter(problems.values())))
        raise CompareError(f"BASE: {problems['BASE']}; CURRENT: {problems['CURRENT']}")
    return base, current


def profile_mapper(spec: str, base: RunFile, current: RunFile) -> Callable[[ResultRecord], str]:
    """The ``baseline_id`` of :func:`compare_runs` for a profile mapping, as the plugin's
    ``--specdec-compare-profile``: ``NAME`` compares every test of a profile of NAME's kind (``fingerprint
    ["speculative"]`` set, or not, as in NAME's results) with the same test of profile NAME, and the other tests
    with their own; ``CUR=BASE[,CUR=BASE...]`` maps exactly the profiles named.

    :raises CompareError: an empty or malformed spec, a BASE profile absent from ``base`` or a CUR profile absent
        from ``current`` (the message lists the profiles each run has, and a close name), a pair written BASE=CUR
        (the message gives it the other way round).
    """

    def profiles(run: RunFile) -> list[str]:
        return sorted({r.profile for r in run.results})

    pairs = [p.strip() for p in spec.split(",") if p.strip()]
    if not pairs or any(p.count("=") > 1 or p.startswith("=") or p.endswith("=") for p in pairs):
        raise CompareError(f"--compare-profile={spec}: expected NAME or CUR=BASE[,CUR=BASE...], e.g. eagle3")
    explicit = dict(p.split("=", 1) for p in pairs if "=" in p)
    single = [p for p in pairs if "=" not in p]
    if single and (explicit or len(single) > 1):
        raise CompareError(f"--compare-profile={spec}: give one NAME, or only CUR=BASE pairs")

    def absent(name: str, run: RunFile, which: str) -> CompareError:
        close = difflib.get_close_matches(name, profiles(run), n=1)
        hint = f" (did you mean {close[0]!r}?)" if close else ""
        return CompareError(f"--compare-profile={spec}: no results of profile {name!r} in {which} run {run.run_id}"
                            f"{hint} (profiles there: {', '.join(profiles(run)) or 'none'})")  # fmt: skip

    for cur, name in explicit.items():
        # CUR=BASE written BASE=CUR: say the order rather than only that BASE is absent.
        if name not in profiles(base) and name in profiles(current) and cur in profiles(base):
            raise CompareError(f"--compare-profile={spec}: no results of profile {name!r} in baseline run "
                               f"{base.run_id}; CUR=BASE names the current run's profile first: --compare-profile "
                               f"{name}={cur}")  # fmt: skip
    for name in [*explicit.values(), *single]:
        if name not in profiles(base):
            raise absent(name, base, "baseline")
    for name in explicit:
        if name not in profiles(current):
            raise absent(name, current, "current")

    # NAME maps the tests of profiles of its kind: with speculation, or without (its stored results say which).
    kind = next((bool(r.fingerprint.get("speculative")) for r in base.results if single and r.profile == single[0]),
                True)  # fmt: skip

    def baseline_id(record: ResultRecord) -> str:
        if single:
            target = single[0] if bool(record.fingerprint.get("speculative")) == kind else None
        else:
            target = explicit.get(record.profile)
        return swap_profile_id(record.test_id, record.profile, target) if target else record.test_id

    return baseline_id


def _pytest_compared(record: ResultRecord) -> bool:
    """Whether pytest compared ``record`` with a stored run: its compare verdict is in its cost
    (``cost["verdicts"]["compare"]``, which ``verdict.compare_item`` stores only where it found a baseline)."""
    verdicts = record.cost.get("verdicts")
    return isinstance(verdicts, Mapping) and isinstance(verdicts.get("compare"), Mapping)


def _pytest_baseline_id(record: ResultRecord, base: RunFile) -> tuple[str | None, str]:
    """The test of ``base`` pytest compared ``record`` with under ``--specdec-compare-profile``, and how it was found;
    or None and why none is taken. The record's compare verdict names it where stored (``cost["verdicts"]["compare"]
    ["baseline_test"]``); else, as pytest maps (``verdict._baseline_of``: ``compare.swap_profile_id``), it is the test
    of ``base`` whose id is ``record``'s with the profile part swapped for another profile's, of the record's kind
    (with speculation or without) where more than one is found. Taken only where pytest compared the record
    (:func:`_pytest_compared`) and ``base`` holds no result under the record's own id: a test stored under its own
    id is what an unmapped pytest compares it with. None where no test of ``base`` is found, or several of one kind
    (the reason names them: ``--compare-profile`` picks one).

    Example: ``t.py::test_x[eagle3-shifted]`` compared by pytest with ``--specdec-compare-profile eagle3`` (or
    ``eagle3-shifted=eagle3``), ``base`` holding ``t.py::test_x[eagle3]`` and ``t.py::test_x[baseline]`` ->
    (``t.py::test_x[eagle3]``, ``"CURRENT's record has pytest's compare verdict and BASE no result under its own
    id"``).
    """
    if not _pytest_compared(record):
        return None, "pytest did not compare it"
    stored = record.cost["verdicts"]["compare"].get("baseline_test")
    if stored == record.test_id:  # compared with its own test: no mapping to take (a trial read the note as one)
        return None, "pytest compared it with its own test id"
    if isinstance(stored, str) and stored:
        if base.find(stored) is not None:
            return stored, "CURRENT's record names it"
        return None, f"pytest compared it with {stored}, which BASE ({base.run_id}) does not hold"
    if base.find(record.test_id) is not None:
        return None, "BASE holds its own test id"
    found = [
        r
        for r in base.results
        if r.profile != record.profile and swap_profile_id(record.test_id, record.profile, r.profile) == r.test_id
    ]
    same = [r for r in found if _speculates(r) == _speculates(record)] or found  # fmt: skip
    if len(same) == 1:
        return same[0].test_id, "CURRENT's record has pytest's compare verdict and BASE no result under its own id"
    if not same:
        return None, f"BASE ({base.run_id}) holds no test of another profile in its place"
    shown = ", ".join(r.test_id.split("::", 1)[-1] for r in same)
    return None, f"BASE ({base.run_id}) holds several tests in its place ({shown}): name one with --compare-profile"


def _tokens(name: str) -> list[str]:
    """A profile name's words: ``eagle3-shifted-layers`` -> ``["eagle3", "shifted", "layers"]``."""
    return [t for t in re.split(r"[-_.\s]+", name.lower()) if t]


def _likeness(current: ResultRecord, candidate: ResultRecord) -> tuple[int, int, int, int, int]:
    """How plausible ``candidate``'s profile is as the baseline of ``current``'s, as a tuple compared in order
    (larger: likelier): the same engine, the same speculative algorithm (each 1 where the records' fingerprints
    agree or one does not say), the candidate's name a whole-word stem of the current one (its word count:
    ``eagle3`` of ``eagle3-shifted-layers`` is 1, ``eagle3-wrong-layers`` 0), leading words in common, words in
    common. The stem comes before the words in common: profiles that vary one profile are named after it, and two
    variants share words with each other (``eagle3-wrong-layers`` and ``eagle3-shifted-layers`` share two)."""

    def agree(key: Callable[[ResultRecord], object]) -> int:
        a, b = key(current), key(candidate)
        return int(a is None or b is None or a == b)

    def algorithm(record: ResultRecord) -> object:
        spec = record.fingerprint.get("speculative")
        return spec.get("algorithm") if isinstance(spec, Mapping) else None

    mine, theirs = _tokens(current.profile), _tokens(candidate.profile)
    stem = len(theirs) if theirs == mine[: len(theirs)] else 0
    lead = next((i for i, (a, b) in enumerate(zip(mine, theirs, strict=False)) if a != b), min(len(mine), len(theirs)))
    return (agree(lambda r: r.fingerprint.get("engine")), agree(algorithm), stem, lead, len(set(mine) & set(theirs)))


def _speculates(record: ResultRecord) -> bool:
    return bool(record.fingerprint.get("speculative"))


def _likeliest(current: ResultRecord, base: RunFile) -> list[str]:
    """The profiles of ``base`` likeliest to be ``current``'s baseline (:func:`_likeness`), among those of its kind
    (with speculation or without: ``--compare-profile NAME`` maps only the profiles of NAME's kind): one name when
    one is likelier than the rest, several when they tie, none when ``base`` has no profile of that kind."""
    firsts = {r.profile: r for r in reversed(base.results)}  # one record per profile: its first
    same = [r for r in firsts.values() if _speculates(r) == _speculates(current)]
    if not same:
        return []
    best = max(_likeness(current, r) for r in same)
    return sorted(r.profile for r in same if _likeness(current, r) == best)


def _profile_hint(base: RunFile, current: RunFile, missing: Sequence[str]) -> str:
    """Why tests of ``current`` found no baseline when their profiles are absent from ``base``, naming the option
    that compares across profiles with the likeliest profile of ``base`` for each (:func:`_likeliest`); ``""`` when
    every missing test's profile is in ``base``. Example: ``profiles differ: baseline run b holds baseline, eagle3,
    eagle3-wrong-layers; current run c holds eagle3-shifted-layers. A test is compared with the same test of the same
    profile; to compare eagle3-shifted-layers with another profile, add --compare-profile <name> (e.g.
    --compare-profile eagle3, or --compare-profile eagle3-shifted-layers=eagle3)``. Several profiles equally likely
    are listed, not one named; none of the kind: a run that has one is needed as BASE."""
    have = sorted({r.profile for r in base.results})
    records = [r for r in (current.find(t) for t in missing) if r is not None and r.profile not in have]
    if not records or not have:
        return ""
    absent = {r.profile: r for r in reversed(records)}  # one record per profile: its first
    pairs: dict[str, str] = {}
    sentences = []
    for profile in sorted(absent):
        record = absent[profile]
        likeliest = _likeliest(record, base)
        kind = "with speculation" if _speculates(record) else "without speculation"
        if len(likeliest) == 1:
            pairs[profile] = likeliest[0]
        elif likeliest:
            sentences.append(f"to compare {profile} with another profile, add --compare-profile {profile}=NAME with "
                             f"NAME one of {', '.join(likeliest)} (profiles {kind} of the baseline run, none more like "
                             f"{profile} by engine, algorithm or name)")  # fmt: skip
        else:
            sentences.append(f"baseline run {base.run_id} holds no profile {kind} to compare {profile} with: name as "
                             f"BASE a run that holds {profile} or a profile like it")  # fmt: skip
    if pairs:
        spec = ",".join(f"{cur}={name}" for cur, name in pairs.items())
        shown = ", ".join(pairs)
        what = "another profile" if len(pairs) == 1 else "other profiles"
        # NAME maps every test of a profile of NAME's kind: offered only where that maps exactly the pairs.
        names = set(pairs.values())
        name = next(iter(names))
        kind_of_name = next(_speculates(r) for r in base.results if r.profile == name)
        mapped = {r.profile for r in current.results if _speculates(r) == kind_of_name} - {name}
        if len(names) == 1 and mapped == set(pairs):
            option = f"--compare-profile <name> (e.g. --compare-profile {name}, or --compare-profile {spec})"
        else:
            option = f"--compare-profile {spec}"
        sentences.insert(0, f"to compare {shown} with {what}, add {option}")
    return (f"profiles differ: baseline run {base.run_id} holds {', '.join(have)}; current run {current.run_id} holds "
            f"{', '.join(sorted({r.profile for r in current.results}))}. A test is compared with the same test of the "
            f"same profile; {'; '.join(sentences)}")  # fmt: skip


def compare_command(
    base_ref: str,
    current_ref: str,
    *,
    tolerances: Sequence[str] = (),
    force: bool = False,
    compare_profile: str | None = None,
    noise_path: str | Path | None = None,
    results_dir: str | Path = ".specdec/results",
    fail_on_suspected: bool = False,
    fail_on_missing: bool = False,
    stdout: TextIO | None = None,
    stderr: TextIO | None = None,
) -> int:
    """``python -m pytest_specdec compare`` (its options are defined in ``cli.main``): load both runs, compare them
    (:func:`compare_runs`) and print the fingerprint diff and one table per test to ``stdout``, errors to ``stderr``.

    :param base_ref: the baseline: a run file, a run id (or unique prefix) in ``results_dir``, or ``latest``.
    :param current_ref: the current run, the same way.
    :param tolerances: ``METRIC:TOL`` specs (:func:`parse_tolerances`), each replacing that metric's tolerance over
        the ones each record was judged with (``compare.judged_tolerances``).
    :param force: compare even when the workloads differ.
    :param compare_profile: ``NAME`` or ``CUR=BASE[,...]`` (:func:`profile_mapper`); None: each test with the test
        pytest compared it with where its record says pytest compared it and BASE holds no result under its own id
        (``--specdec-compare-profile``: :func:`_pytest_baseline_id`, one note line each), else with itself.
    :param noise_path: a noise file written by ``calibrate`` (:func:`read_noise`) for every test; None: each
        profile's own ``noise/<profile>.json`` beside ``results_dir``, as pytest reads it.
    :param fail_on_suspected: exit 1 on an undecided row whose estimate is beyond its tolerance as well.
    :param fail_on_missing: exit 1 on a test of ``current`` without baseline (a new test) or a test of ``base``
        that ``current`` does not hold (deselected or renamed; or errored before it measured, in a run stored
        before run files listed those) as well; without it both are listed and counted only.
    :returns: the exit code, documented as pytest-benchmark documents ``--benchmark-compare-fail``'s:

        - 0: every test of ``current`` with a baseline was compared and none regressed (undecided rows allowed);
          tests without baseline and tests of ``base`` absent from ``current`` are listed and counted;
        - 1: a row REGRESSED (decided as pytest decided: the current run's stored repeats, confirming pairs
          included, at the design its record was judged with, against the baseline and its stored runs of the same
          fingerprint); or a test of ``current`` recorded no measurement, or ``current`` lists it as errored
          before it measured (``RunFile.errored``: its server did not start; it could not have shown a
          regression); or a threshold check of a test of ``current`` FAILED in pytest (its record's ``checks``:
          ``min_speedup``, ``min_tok_s`` ..., each said with its stored verdict, as pytest exited 1 on it); or
          ``current`` was interrupted (``RunFile.interrupted``); or, with ``fail_on_suspected``, a
          row undecided beyond its
          tolerance; or, with ``fail_on_missing``, a test without baseline or absent from ``current``;
        - 2: unusable input: a bad tolerance, an unreadable file, no matching run, nothing compared (no test in
          common), a refused workload mismatch. Where 1 and 2 both apply: 1.
    """
    out = stdout or sys.stdout
    err = stderr or sys.stderr
    try:
        # A user's spec, as for pytest: a bare number on a rate or time field is refused (5% or 5tok/s).
        parsed = parse_tolerances(tolerances, strict=True, origin="compare -t") if tolerances else None
        store = ResultStore(Path(results_dir))
        base, current = load_pair(store, base_ref, current_ref)
        mapper = profile_mapper(compare_profile, base, current) if compare_profile else None
    except (ValueError, CompareError) as exc:
        print(f"error: {exc}", file=err)
        return 2
    # Without --compare-profile, a test pytest compared with another profile's (--specdec-compare-profile) is
    # compared with that one, so the command prints pytest's rows and exit (a trial read "1 without baseline", exit
    # 0, on a night pytest failed).
    as_pytest: dict[str, str] = {}
    found_how: dict[str, str] = {}
    why_not: dict[str, str] = {}
    if mapper is None:
        for item in current.results:
            wanted, why = _pytest_baseline_id(item, base)
            if wanted is not None:
                as_pytest[item.test_id], found_how[item.test_id] = wanted, why
            elif _pytest_compared(item) and base.find(item.test_id) is None:
                why_not[item.test_id] = why
        if as_pytest:

            def mapper(record: ResultRecord) -> str:
                return as_pytest.get(record.test_id, record.test_id)

    noise: Mapping[str, float] | Callable[[ResultRecord], Mapping[str, float]]
    try:
        noise = _noise(noise_path, Path(results_dir).parent / "noise", current)
    except NoiseFileError as exc:
        print(f"error: {exc}", file=err)
        return 2
    # A record without a figure (its test failed or errored before it measured) is said, not compared: its rows
    # would read n/a and the command ok (a fresh-user trial: a CI read green on a run that could not have seen it).
    unmeasured = {r.test_id: why for r in current.results if (why := _unmeasured(r, parsed))}
    measured = dataclasses.replace(current, results=tuple(r for r in current.results if r.test_id not in unmeasured))
    stored = StoredHistory(Path(results_dir), before=current.run_id)
    result = compare_runs(
        base, measured, parsed, force=force, baseline_id=mapper, noise=noise,
        history=lambda record: stored.of(base.run_id, record),
    )  # fmt: skip
    print(f"specdec compare: baseline {base.run_id} -> current {current.run_id}", file=out)
    if parsed is not None:
        print(_tolerances_line(parsed), file=out)
    for problem in stored.skipped:  # read by compare_runs above: said, not dropped silently
        print(f"note: stored run left out of the history: {problem}", file=out)
    if noise_path:
        # Stored runs of a test's fingerprint measure its spread themselves (a trial's 90% file changed nothing).
        print(f"note: --noise {noise_path} stands in where a test has fewer than 2 stored runs (its within-run sd) "
              "or fewer than 4 (its run-to-run sd, where larger than the assumed one); more stored runs measure "
              "their own", file=out)  # fmt: skip
    for test_id, wanted in as_pytest.items():
        print(f"note: {test_id}: compared with {wanted.split('::', 1)[-1]}, the test pytest compared it with "
              f"(--specdec-compare-profile; {found_how[test_id]}); --compare-profile overrides", file=out)  # fmt: skip
    if base.run_id == current.run_id:  # "compare latest latest", or one file twice: say so, not a silent pass
        print(f"note: BASE and CURRENT are the same run ({base.run_id}): each test is compared with itself, "
              "which tells nothing of a change", file=out)  # fmt: skip
    elif current.started < base.started:  # a trial swapped them and read a slowdown as a speed-up, unwarned
        print(f"note: CURRENT ({current.run_id}) started before BASE ({base.run_id}): every change reads backwards "
              "(a slowdown since BASE shows as a speed-up); give the older run first: compare OLDER NEWER",
              file=out)  # fmt: skip
    for comp in result.comparisons:
        print("", file=out)
        record = current.find(comp.test_id)
        wanted = mapper(record) if mapper is not None and record is not None else comp.test_id
        against = f", against {wanted.split('::', 1)[-1]}" if wanted != comp.test_id else ""
        print(f"== {comp.test_id} (profile {comp.profile}{against})", file=out)
        for line in comp.lines():
            print(line, file=out)
        old = base.find(wanted) if comp.undecided else None
        if old is not None and record is not None:
            # What pytest said of the same rows (verdict.judge_compare): why each is open and what would decide it.
            design, others = design_of(record) or single_look(record), stored.of(base.run_id, old)
            reasons = [undecided_reason(old, record, r, design, others) for r in comp.undecided]
            k = len(reasons)
            print(undecided_block(f"undecided: {k} row{'s' if k != 1 else ''} open", reasons), file=out)
    if base_ref == "latest":
        for line in _latest_notes(store, base, current, mapper):
            print(line, file=out)
    for test_id in result.missing:
        said = f"; pytest compared it with a stored run, but {why_not[test_id]}" if test_id in why_not else ""
        print(f"no baseline for {test_id}{said}", file=out)
    hint = _profile_hint(base, current, result.missing) if compare_profile is None else ""
    if hint:
        print(hint, file=out)
    for test_id, why in unmeasured.items():
        print(f"not compared: {test_id}: {why}; that run's pytest output says why", file=out)
    errored = _errored(current)
    for line in errored:
        print(line, file=out)
    absent = _absent(base, current, mapper)
    for line in absent:
        print(line, file=out)
    failed_checks = _failed_checks(current)
    open_checks = _open_checks(current)
    for line in (*failed_checks, *open_checks):
        print(line, file=out)
    if current.interrupted:  # tests it never ran are in neither of its lists: it cannot be judged whole
        print(f"interrupted: CURRENT ({current.run_id}) ended early (Ctrl-C): the tests it never ran are not in it, "
              "so it could not show their regressions; rerun it", file=out)  # fmt: skip
    if (absent or result.missing) and not fail_on_missing:
        print("note: tests without baseline or not in CURRENT do not change the exit status; --fail-on-missing "
              "exits 1 on them", file=out)  # fmt: skip
    for message in result.refused:
        print(f"error: {message}", file=err)
    # Decided as pytest decides (verdict.judge_compare): the same rows, the same design, the same history.
    regressed = [c.test_id for c in result.comparisons if c.failed]
    undecided = [c.test_id for c in result.comparisons if c.undecided and not c.failed]
    suspected = [c.test_id for c in result.comparisons if c.suspected and not c.failed]
    print("", file=out)
    # Counted in tests, as pytest's summary counts them (report.terminal.undecided_count: a fresh-user trial read
    # "1 verdict undecided" from pytest and "2 undecided" here on the same two tests of one profile); a regressed
    # test's open rows are said beside it (a fresh user read "0 undecided" above tables that each had 3 undecided rows).
    n = len(result.comparisons)
    # Each measurement's rows once: the tests of a profile read one measurement, and a trial's two tests of it
    # said "8 undecided rows in them" beside tables of 4. A row of the same measurement has the same figures (tests
    # of one profile measured in different shards of a merged run do not).
    open_rows = len({(c.profile, r.metric, r.baseline, r.current) for c in result.comparisons if c.failed
                     for r in c.undecided})  # fmt: skip
    in_regressed = f" ({open_rows} undecided row{'s' if open_rows != 1 else ''} in them)" if open_rows else ""
    profiles = list(dict.fromkeys(c.profile for c in result.comparisons if c.undecided and not c.failed))
    still_open = (undecided_count(len(undecided), profiles, f"{len(suspected)} suspected: estimate beyond the "
                                  "tolerance") if undecided else "0 undecided")  # fmt: skip
    print(
        f"specdec compare: {n} test{'s' if n != 1 else ''} compared, {len(regressed)} regressed{in_regressed}, "
        f"{still_open}, {len(result.missing)} without baseline, {len(result.refused)} refused"
        + (f", {len(unmeasured)} without measurement" if unmeasured else "")
        + (f", {len(errored)} errored before measuring" if errored else "")
        + (f", {len(absent)} not in CURRENT" if absent else "")
        + (f", {len(failed_checks)} failed check{'s' if len(failed_checks) != 1 else ''}" if failed_checks else "")
        + (f", {len(open_checks)} undecided check{'s' if len(open_checks) != 1 else ''}" if open_checks else "")
        + (", CURRENT interrupted" if current.interrupted else ""),
        file=out,
    )
    if fail_on_suspected and suspected:
        regressed += suspected
    # What CURRENT did not measure could not regress; a threshold pytest failed fails here too, as in pytest.
    if regressed or unmeasured or errored or failed_checks or current.interrupted:
        return EXIT_FINDINGS
    if result.refused or not result.comparisons:
        return 2
    if fail_on_missing and (result.missing or absent):
        return 1
    return 0
