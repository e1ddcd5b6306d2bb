"""Which stored result a test is compared with under ``--specdec-compare``, and what a result can decide as a
baseline when it is stored.

``--specdec-compare`` alone (``latest``) compares each test with the newest stored run in which that test was
*clean*: it completed (the session was not interrupted), passed, and every verdict it recorded passed
(``ResultRecord.baseline_problem``); a failed, undecided or interrupted run never becomes the next baseline. When
that run's own compare passed, the test is compared with the reference it passed against (followed back while the
runs are stored and clean): a night within its tolerance does not move the reference, so a slow drift adds up
against it and fails; a night that improved a row (none worse than half its tolerance) restarts it.
``--specdec-compare=NAME`` takes the run saved under that name (``--specdec-save NAME``, ``save``), names first,
then a run id or a run file. The compare line names the run chosen and why (:attr:`Baseline.why`).

:func:`baseline_notes` says, when a record is stored, what it cannot decide as a baseline (an outlier repeat, a
spread too wide for the tolerances) and the fix, with ``sequential.shift_repeats_needed``.
"""

from __future__ import annotations

import functools
import math
import statistics
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from pytest_specdec.core.errors import CompareError
from pytest_specdec.core.metric_table import EXACT_FIELDS, PAIRED_FIELDS
from pytest_specdec.core.tolerances import Tolerance, field_specs, merge_tolerances
from pytest_specdec.judge import sequential
from pytest_specdec.judge.compare import swap_profile_id
from pytest_specdec.judge.fingerprint import fingerprint_diff
from pytest_specdec.judge.pair_ratios import paired_ratios
from pytest_specdec.measure import results

__all__ = ["Baseline", "Baselines", "baseline_notes"]

#: Skipped runs named in a line at most (the rest are counted).
_SHOWN = 3
#: In a sweep point's profile name (``eagle3@num_steps=2``, ``run.sweep_spec``): a point is no renamed profile, nor
#: renamed into one (a sweep stored before a nightly's first night would otherwise pass that night over).
_SWEEP_POINT = "@"


def _same_test_of(other: results.ResultRecord, record: results.ResultRecord, speculative: bool) -> bool:
    """Whether ``other`` is ``record``'s test under another profile that could be its old name: not a sweep point,
    of the same kind (``speculative``: ``record``'s), the same test id once the profile part is swapped."""
    if _SWEEP_POINT in other.profile or bool(other.fingerprint.get("speculative")) != speculative:
        return False
    return swap_profile_id(other.test_id, other.profile, record.profile) == record.test_id


@dataclass(frozen=True, slots=True)
class Baseline:
    """The stored result one test is compared with."""

    run: results.RunFile
    record: results.ResultRecord
    #: Why this run: ``the newest run in which the test was clean (...)``, ``named night-1``, ``given by ...``.
    why: str
    #: Newer runs passed over, ``<run id> (<problem>)`` (``latest`` only).
    skipped: tuple[str, ...] = ()


@dataclass
class Baselines:
    """The baselines of one session. ``run`` is set for ``--specdec-compare=NAME_OR_RUN`` (``label`` says how it
    was named); otherwise ``paths`` lists the stored run files, newest first, read on first use.

    Usage (``run.selection.compare_setup``)::

        baselines = Baselines.from_option(settings.compare, store)  # None without the option
        found = baselines.find("tests/test_x.py::test_a[eagle3]")  # Baseline or None
        if found is None:
            print(baselines.missing("tests/test_x.py::test_a[eagle3]"))
    """

    results_dir: Path
    run: results.RunFile | None = None
    paths: list[Path] = field(default_factory=list)
    #: How ``run`` was asked for: ``named night-1`` or ``run <id>`` (empty with ``latest``).
    label: str = ""
    _loaded: dict[Path, results.RunFile] = field(default_factory=dict)
    _named: set[str] | None = None

    @classmethod
    def from_option(cls, ref: str | None, store: results.ResultStore) -> Baselines | None:
        """``--specdec-compare``'s value: ``"latest"`` (the option without a value), a name, a run id or file, or
        None.

        :raises CompareError: the named run cannot be read (``ResultStore.load``).
        """
        if ref is None:
            return None
        if ref == "latest":
            return cls(store.root, paths=list(reversed(store.list())))
        named = store.named(ref)
        run = store.load(ref)
        label = f"named {ref}" if named is not None else f"run {run.run_id}"
        return cls(store.root, run=run, label=label)

    def _runs(self) -> Iterator[results.RunFile]:
        """The stored runs, newest first, each read on first use (unreadable files passed over)."""
        return self._runs_of(self.paths)

    def _runs_of(self, paths: Sequence[Path]) -> Iterator[results.RunFile]:
        for path in paths:
            run = self._loaded.get(path)
            if run is None:
                try:
                    run = self._loaded[path] = results.read_run_file(path)
                except CompareError:
                    continue
            yield run

    def find(self, test_id: str) -> Baseline | None:
        """The stored result to compare ``test_id`` with, or None: with a named run, its record of the test
        (whatever its state: a run named on purpose is honoured, and :attr:`Baseline.why` says when it is not
        clean); with ``latest``, the newest run in which the test was clean (``ResultRecord.baseline_problem``), or
        the reference that run passed against (:meth:`_reference`), newer runs that have the test but are not clean
        listed in :attr:`Baseline.skipped`. Unreadable files are passed over."""
        if self.run is not None:
            record = self.run.find(test_id)
            if record is None:
                return None
            problem = record.baseline_problem()
            why = f"{self.label} (--specdec-compare)"
            if problem:
                why += f"; not clean ({problem}), compared anyway because it was named"
            return Baseline(self.run, record, why)
        skipped: list[str] = []
        for run in self._runs():
            record = run.find(test_id)
            if record is None:
                continue
            problem = record.baseline_problem() or self._uncompared_fix(run, record)
            if problem:
                skipped.append(f"{run.run_id} ({problem})")
                continue
            reference, chain = self._reference(run, record)
            why = "the newest stored run in which the test was clean (completed, passed, every verdict passed)"
            if chain:
                passed = ", which passed against ".join(r.run_id for r in chain)
                why = (f"the reference of {run.run_id}, {why}: it passed against {passed}; a "
                       "night that passes within its tolerance does not move the reference, so a slow drift adds up "
                       "against it")  # fmt: skip
            return Baseline(reference.run, reference.record, why, tuple(skipped))
        return None

    def _reference(
        self, run: results.RunFile, record: results.ResultRecord
    ) -> tuple[Baseline, list[results.RunFile]]:
        """The reference a clean night was judged by: follow ``ResultRecord.passed_against`` back while the run it
        names is stored and its record of the test is clean. Each link is a night that passed within its tolerance;
        chosen instead, each would move the reference by up to a tolerance, and a server slowing 1% a night passed
        a 15% tolerance for 20 nights in 28 of 60 replayed chains (``benchmarks/bench_drift.py --rule newest``).
        A night whose compare improved a row restarts the chain (``judge.verdict._restarts_reference``).

        :returns: the reference (``why`` empty) and the runs followed to it, newest first (empty: ``run`` itself).
        """
        chain: list[results.RunFile] = []
        seen = {run.run_id}
        while (older := record.passed_against()) is not None and older not in seen:
            found = self._run_by_id(older)
            base = found.find(record.test_id) if found is not None else None
            if found is None or base is None or base.baseline_problem():
                break
            seen.add(older)
            chain.append(found)
            run, record = found, base
        return Baseline(run, record, ""), chain

    def _uncompared_fix(self, run: results.RunFile, record: results.ResultRecord) -> str:
        """:meth:`passed_over`'s reason with how to take the run anyway (naming it), or ``""``."""
        why = self.passed_over(run, record)
        fix = f"to take it anyway: python -m pytest_specdec save {run.run_id} NAME, then --specdec-compare=NAME"
        return f"{why}; {fix}" if why else ""

    def passed_over(self, run: results.RunFile, record: results.ResultRecord) -> str:
        """Why ``latest`` passes a clean ``record`` of ``run`` over as a baseline, or ``""`` when it may take it: it
        may when it was compared, its run is named (``--specdec-save NAME``, ``save``: chosen on purpose), or no older
        stored run is clean for the test or regressed against its baseline (a first night) and it replaced no
        renamed profile's test (:meth:`_replaced`). Otherwise one run without ``--specdec-compare`` after a REGRESSED
        night became the baseline and the regression read ok the night after (an adversarial trial: aux layer ids
        changed, accept length 2.452 -> 2.169 REGRESSED, then ``ok`` against the unchecked run; a second trial, with
        the first clean run's file removed as pruning would, the same through the REGRESSED nights alone). The
        reason alone, for ``save``, which names such a run on purpose; a compare's lines add how to take the run
        anyway (:meth:`_uncompared_fix`)."""
        if record.compare_cost() is not None:
            return ""
        if self._named is None:
            self._named = set(results.ResultStore(self.results_dir).names().values())
        if run.run_id in self._named:
            return ""
        unchecked = "not compared when stored (no --specdec-compare, or no baseline then)"
        for older in self._runs():
            found = older.find(record.test_id) if older.run_id < run.run_id else None
            if found is None:
                continue
            if not found.baseline_problem():
                return f"{unchecked} after {older.run_id} was clean for it"
            if (compared := found.compare_cost()) is not None and compared.get("verdict") == "FAILED":
                return f"{unchecked} after {older.run_id} regressed against its baseline"
        replaced = self._replaced(run, record)
        if replaced is not None:
            # A renamed profile's first night, stored without a compare: it would be the baseline of a regression
            # made with the rename (an adversarial trial: aux ids changed with the name, accept length 2.286 ->
            # 2.103 read ok the night after).
            old_run, old = replaced
            return (f"{unchecked}, and its run has no {old.test_id}, which {old_run.run_id} was clean for (a renamed "
                    f"profile? --specdec-compare-profile={old.profile} compares with it)")  # fmt: skip
        return ""

    def _replaced(
        self, run: results.RunFile, record: results.ResultRecord
    ) -> tuple[results.RunFile, results.ResultRecord] | None:
        """The newest clean result, stored before ``run``, of the same test under another profile of the same kind
        (with speculation, or without) that ``run`` does not hold: the profile ``record``'s may have replaced."""
        if _SWEEP_POINT in record.profile:
            return None
        held = {r.profile for r in run.results}
        kind = bool(record.fingerprint.get("speculative"))
        for older in self._runs():
            if older.run_id >= run.run_id:
                continue
            for other in older.results:
                if other.profile not in held and not other.baseline_problem() and _same_test_of(other, record, kind):
                    return older, other
        return None

    def _run_by_id(self, run_id: str) -> results.RunFile | None:
        """The stored run ``run_id`` (its file ``<run_id>.json`` among :attr:`paths`), None when not stored or
        unreadable."""
        for path in self.paths:
            if path.stem == run_id:
                return next(self._runs_of([path]), None)
        return None

    def profile_kind(self, profile: str) -> bool | None:
        """Whether the newest stored results of ``profile`` ran speculative decoding (``fingerprint
        ["speculative"]``); None when no stored run has them."""
        for run in [self.run] if self.run is not None else self._runs():
            for record in run.results:
                if record.profile == profile:
                    return bool(record.fingerprint.get("speculative"))
        return None

    def missing(self, test_id: str) -> str:
        """Why ``test_id`` has no baseline, for its failure or warning: ``no baseline for X in DIR: no stored run
        has it`` or ``... none in which it was clean: R2 (undecided: compare), R1 (failed)``."""
        head = f"no baseline for {test_id} in {self.where()}"
        if self.run is not None:
            return f"{head}: the run has no result of this test"
        skipped = self.unclean(test_id)
        if not skipped:
            return f"{head}: no stored run has it"
        return f"{head}: {len(skipped)} stored run(s) have it, none clean: {shown(skipped)}"

    def renamed(self, record: results.ResultRecord, *, mapped_to: str | None = None) -> str:
        """For a test with no baseline: the same test stored under another profile of the same kind (with
        speculation, or without) that has a baseline, newest first, as ``; t.py::test_x[eagle3] has one (run R,
        differing in: draft aux ids: [1, 3, 5] -> [0, 1, 2]): a renamed profile? --specdec-compare-profile=eagle3
        compares with it``; ``""`` when none, or when it is ``mapped_to`` (the ``--specdec-compare-profile`` already
        given). A renamed profile otherwise started afresh, its first night the baseline of a regression made with
        the rename (an adversarial trial)."""
        kind = bool(record.fingerprint.get("speculative"))
        seen: set[str] = set()
        for run in [self.run] if self.run is not None else self._runs():
            for other in run.results:
                if other.test_id in seen or other.profile in (record.profile, mapped_to):
                    continue
                seen.add(other.test_id)
                if not _same_test_of(other, record, kind):
                    continue
                found = self.find(other.test_id)
                if found is None:
                    continue
                diff = fingerprint_diff(found.record.fingerprint, record.fingerprint)
                what = f"differing in: {'; '.join(diff[:2])}{'; ...' if len(diff) > 2 else ''}" if diff else (
                    "the same server and workload")
                return (f"; {other.test_id} has one (run {found.run.run_id}, {what}): a renamed profile? "
                        f"--specdec-compare-profile={other.profile} compares with it")  # fmt: skip
        return ""

    def unclean(self, test_id: str) -> list[str]:
        """The stored runs that have ``test_id`` but not clean, or clean but passed over (stored without a compare:
        :meth:`passed_over`), newest first: ``R2 (undecided: compare)``; empty for a named run (it is the baseline,
        clean or not)."""
        if self.run is not None:
            return []
        return [f"{run.run_id} ({p})" for run in self._runs() if (r := run.find(test_id)) is not None
                if (p := r.baseline_problem() or self._uncompared_fix(run, r))]  # fmt: skip

    def where(self) -> str:
        """Where baselines come from, for "no baseline for ... in <where>": ``run <id>`` (``night-1 (run <id>)``
        for a name) or the results directory."""
        if self.run is None:
            return f"{self.results_dir}"
        if self.label.startswith("named "):
            return f"{self.label.removeprefix('named ')} (run {self.run.run_id})"
        return f"run {self.run.run_id}"

    def header_line(self) -> str:
        """The ``pytest_report_header`` line saying what each test is compared with."""
        if self.run is not None:
            return f"specdec: comparing against {self.where()}"
        return (
            f"specdec: comparing each test against the newest of {len(self.paths)} stored run(s) in which it was "
            f"clean (completed, passed, every verdict passed), or the reference that run passed against "
            f"({self.results_dir})"
        )


def shown(items: Sequence[str]) -> str:
    """The first few of ``items``, joined, the rest counted: ``a, b, c and 2 more``."""
    head = ", ".join(items[:_SHOWN])
    return head + (f" and {len(items) - _SHOWN} more" if len(items) > _SHOWN else "")


# -- what a stored record can decide ---------------------------------------------------------------------------

#: Largest baseline size :func:`_baseline_repeats_needed` proposes.
_MAX_BASELINE_REPEATS = 200
#: A repeat is an outlier when it is more than this many MAD-sigmas from the median (log scale) and more than
#: :data:`OUTLIER_TOLERANCES` tolerances from it.
OUTLIER_SIGMAS = 3.0
#: ... and more than this many times the metric's tolerance from the median. The MAD of 3 values is the smaller of two
#: distances, near 0 when two repeats agree by chance: on the MAD alone a fresh-user trial's pair 6% below the median
#: (tolerance 5%, 3-5% noise) was an outlier. A tolerance is set at about 3 sigma of the noise (``calibrate``), so 3
#: tolerances is several sigma even where the tolerance is tight; 236, 215, 117 tok/s (-46%) stays an outlier.
OUTLIER_TOLERANCES = 3.0


def _row_values(record: results.ResultRecord, fname: str, paired: bool) -> list[float]:
    """The values the compare judges ``fname`` on: per-pair ratios to the paired arm, else the repeats."""
    return paired_ratios(record, fname) if paired else record.values(fname)


def _outlier(values: Sequence[float], limit: float) -> tuple[float, float] | None:
    """The repeat furthest from the median on the log scale, with its relative distance, when it is an outlier:
    more than :data:`OUTLIER_SIGMAS` MAD-sigmas (1.4826 x MAD of the log values) and more than
    :data:`OUTLIER_TOLERANCES` x ``limit`` (relative) away.

    Example at ``limit`` 0.05: 236, 215, 117 -> (117, -0.456); 100, 100.4, 94 -> None (-6%: two repeats that agree
    make the MAD small, but 6% is within 3 tolerances)."""
    logs = [math.log(v) for v in values if v > 0]
    if len(logs) < 3 or len(logs) != len(values):
        return None
    med = statistics.median(logs)
    mad = statistics.median(abs(x - med) for x in logs)
    worst = max(range(len(logs)), key=lambda i: abs(logs[i] - med))
    dev = abs(logs[worst] - med)
    if dev > OUTLIER_SIGMAS * 1.4826 * mad and abs(math.expm1(logs[worst] - med)) > OUTLIER_TOLERANCES * limit:
        return values[worst], math.exp(logs[worst] - med) - 1.0
    return None


def _tiled(values: Sequence[float], size: int) -> list[float]:
    """``values`` repeated to ``size`` values: the same mean and about the same spread, more repeats."""
    return [values[i % len(values)] for i in range(size)]


def _baseline_repeats_needed(
    values: Sequence[float], limit: float, design: sequential.Design, higher: bool
) -> int | None:
    """About how many repeats a baseline of this spread needs so that an unchanged run of the same spread passes
    at the last look of ``design`` (``sequential.decide_shift`` says ``within``), both sides tiled from ``values``
    (:func:`_tiled`); bisected up to :data:`_MAX_BASELINE_REPEATS` (None above)."""

    def passes(size: int) -> bool:
        current = _tiled(values, design.max_repeats)
        decision = sequential.decide_shift(_tiled(values, size), current, limit, design, higher_is_better=higher)
        return decision.verdict == "within"

    low, high = len(values), _MAX_BASELINE_REPEATS
    if not passes(high):
        return None
    while high - low > 1:
        mid = (low + high) // 2
        low, high = (low, mid) if passes(mid) else (mid, high)
    return high


#: A baseline of more than this many times the compare's budget is not proposed alone: the wider tolerance the
#: spread supports is proposed first.
_PRACTICAL_BASELINE_FACTOR = 2
#: The widest relative tolerance :func:`_tolerance_that_passes` proposes.
_WIDEST_PROPOSED = 1.0


@functools.lru_cache(maxsize=256)
def _tolerance_that_passes(
    values: tuple[float, ...], limit: float, design: sequential.Design, higher: bool
) -> float | None:
    """The smallest relative tolerance (whole percent, above ``limit``) at which an unchanged run of this spread
    passes against this baseline within ``design``'s budget (``sequential.shift_repeats_needed``, both sides
    ``values``); None when even :data:`_WIDEST_PROPOSED` does not."""

    def passes(tol: float) -> bool:
        needed = sequential.shift_repeats_needed(values, values, tol, design, higher_is_better=higher)
        return needed is not None and needed <= design.max_repeats

    low, high = max(int(limit * 100), 0), int(_WIDEST_PROPOSED * 100)
    if not passes(high / 100):
        return None
    while high - low > 1:
        mid = (low + high) // 2
        low, high = (low, mid) if passes(mid / 100) else (mid, high)
    return high / 100


@functools.lru_cache(maxsize=256)
def _needed(
    values: tuple[float, ...], limit: float, design: sequential.Design, higher: bool
) -> tuple[int | None, int | None]:
    """(current repeats an unchanged run needs against this baseline, ``sequential.shift_repeats_needed``; the
    baseline repeats that would bring it within the budget, :func:`_baseline_repeats_needed`, only when the first
    is None or over ``design.max_repeats``). Cached: every test of a profile stores the same measurement."""
    needed = sequential.shift_repeats_needed(values, values, limit, design, higher_is_better=higher)
    if needed is not None and needed <= design.max_repeats:
        return needed, None
    return needed, _baseline_repeats_needed(values, limit, design, higher)


def baseline_notes(
    record: results.ResultRecord, tolerances: Mapping[str, Tolerance], design: sequential.Design
) -> list[str]:
    """What ``record`` cannot decide as a baseline, one line per metric, each with its fix; empty when it can.

    Per tolerance field the compare judges (the per-pair ratio when the record has a paired arm and the field is
    paired, else the repeats; exact metrics at temperature 0 with identical repeats are skipped, they carry no
    noise):

    - an **outlier repeat**: one more than :data:`OUTLIER_SIGMAS` MAD-sigmas from the median and more than
      :data:`OUTLIER_TOLERANCES` tolerances from it (repeats 236, 215, 117 tok/s: 117 is -46 %; a repeat 6 % off at a
      5 % tolerance is not);
    - a **spread that cannot decide the tolerance**: an unchanged run of the same spread would not pass against
      this baseline within ``design``'s budget (``sequential.shift_repeats_needed`` with the record on both sides:
      None, or more than ``design.max_repeats``). The fix names about how many repeats the baseline needs.

    Example: ``output_tok_s: repeats 236, 215, 117 tok/s: 117 is an outlier (-46% from the median); at this spread
    (sd 35%) an unchanged run could not pass within 5% in 24 repeats: store the baseline with more repeats (about
    40: --specdec-repeats 40)``.

    :param tolerances: the layered tolerances the compare uses (``tolerances.layered_tolerances``).
    :param design: the sequential design the compare judges with (``verdict.design_for``).
    """
    specs = field_specs()
    vs = (record.paired or {}).get("vs")
    zero = (record.workload.get("temperature") or 0) == 0
    notes = []
    merged = merge_tolerances(tolerances)
    for fname, tol in merged.items():
        paired = bool(vs) and fname in PAIRED_FIELDS
        if paired:  # judged on its ratio row, at that row's own tolerance where one is given
            tol = merged.ratio(fname, str(vs)) or tol
        values = _row_values(record, fname, paired)
        if len(values) < 2 or (zero and fname in EXACT_FIELDS and max(values) == min(values)):
            continue
        raw = record.values(fname)
        median = statistics.median(raw) if raw else 0.0
        limit = tol.allowed(median) / abs(median) if median else tol.rel
        if limit <= 0:
            continue
        higher = specs[fname].higher_is_better
        label = f"{fname} / {vs}" if paired else fname
        unit = "" if paired else specs[fname].unit
        problems = []
        found = _outlier(values, limit)
        if found is not None:
            value, rel = found
            problems.append(f"{value:.4g} is an outlier ({rel * 100:+.0f}% from the median)")
        needed, more = _needed(tuple(values), limit, design, higher)
        if needed is None or needed > design.max_repeats:
            logs = [math.log(v) for v in values if v > 0]
            sd = statistics.stdev(logs) if len(logs) >= 2 else 0.0
            if needed is not None:
                would = f"would need about {needed} repeats to pass within {tol}"
            else:
                # "its own repeats": the fix that follows is the baseline's (a fresh-user trial read "in any number
                # of repeats ... store the baseline with about 7" as a contradiction).
                would = f"could not pass within {tol} against it, however many repeats of its own it measured"
            problems.append(
                f"at this spread (sd {sd * 100:.1f}%) an unchanged run {would} (budget {design.max_repeats} "
                "repeats, workload.max_repeats)"
            )
        if not problems:
            continue
        if more is None and found is not None:
            more = _baseline_repeats_needed(values, limit, design, higher)
        spread = needed is None or needed > design.max_repeats
        wider = _tolerance_that_passes(tuple(values), limit, design, higher) if spread else None
        widen = (
            f"widen the tolerance to {fname}{'/' + str(vs) if paired else ''}:{wider * 100:.0f}% (an unchanged run "
            "of this spread passes that within "
            f"{design.max_repeats} repeats)" if wider is not None else ""
        )  # fmt: skip
        if more is not None and more <= _PRACTICAL_BASELINE_FACTOR * design.max_repeats:
            fix = f"store the baseline with more repeats (about {more}: --specdec-repeats {more})"
            fix += f", or {widen}" if widen else ""
        elif widen:
            # A baseline of hundreds of repeats is not a fix anyone runs: say what tolerance this spread supports.
            costly = f" (a baseline of about {more} repeats would also do)" if more is not None else ""
            fix = f"{widen}, or measure it again on a quieter runner{costly}"
        else:
            fix = "no number of baseline repeats would do at this spread: measure it again on a quiet runner"
        shown_values = ", ".join(f"{v:.4g}" for v in values)
        what = "paired ratios" if paired else "repeats"
        notes.append(f"{label}: {what} {shown_values}{' ' + unit if unit else ''}: {'; '.join(problems)}: {fix}")
    return notes
