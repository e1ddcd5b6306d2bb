"""What the run's verdicts decided, owned by the judging side: the tests' result records and failures, the marker
overrides, the stored-compare tables and notes, the first test that failed with each threshold verdict, and the
calibrated noise each compare read.

``judge.verdict`` writes it while judging a test; ``run.session`` adds each test's record as its report
arrives (on the xdist controller too: records travel in ``user_properties``); ``report.summary`` reads it.
Imports nothing heavy: every pytest run builds one.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Hashable, Mapping, Sequence
from pathlib import Path
from types import MappingProxyType
from typing import TYPE_CHECKING, Any, TypeVar, cast

if TYPE_CHECKING:
    from pytest_specdec.judge.baseline import Baseline
    from pytest_specdec.measure.results import ResultRecord

__all__ = ["Outcomes"]

_T = TypeVar("_T")


class Outcomes:
    """The outcomes of one run: read through the properties (read-only views), written through the methods.

    :param noise_dir: where ``calibrate`` wrote each profile's noise (``<specdec dir>/noise/<profile>.json``).
    """

    def __init__(self, noise_dir: Path) -> None:
        self._noise_dir = noise_dir
        self._records: list[ResultRecord] = []
        self._failures: dict[str, str] = {}
        self._overrides: dict[str, tuple[str, list[str]]] = {}
        self._compared: dict[str, list[str]] = {}
        self._chosen: dict[str, tuple[str, dict[str, None], dict[str, None]]] = {}
        self._compare_tables: dict[str, tuple[str, list[str]]] = {}
        self._compare_notes: dict[str, None] = {}
        #: Per test, what :meth:`add_compare` was given, as JSON-able data (:meth:`compare_of`).
        self._compare_args: dict[str, dict[str, Any]] = {}
        #: Compare notes that head a table shown under the summary (:attr:`compare_notes` leaves them out).
        self._notes_in_tables: set[str] = set()
        #: (profile, threshold verdict) -> the first test that failed with it; later tests refer to it.
        self._first_failures: dict[tuple[str, str], str] = {}
        #: profile -> calibrated relative noise per field.
        self._noise: dict[str, dict[str, float]] = {}
        #: (kind, profile, ...) -> a verdict judged once per run (:meth:`once`).
        self._judged: dict[Hashable, object] = {}

    # -- read (the summary) --

    @property
    def records(self) -> Sequence[ResultRecord]:
        """The tests' result records, in the order their reports arrived (outcome and checks set)."""
        return tuple(self._records)

    @property
    def failures(self) -> Mapping[str, str]:
        """node id -> failure text of failed specdec tests (for the markdown summary)."""
        return MappingProxyType(self._failures)

    @property
    def overrides(self) -> Mapping[str, tuple[str, list[str]]]:
        """node id -> (profile, what its marker changed in the profile's thresholds), for the summary."""
        return MappingProxyType(self._overrides)

    @property
    def compared(self) -> Mapping[str, list[str]]:
        """stored run id -> the tests compared with it."""
        return MappingProxyType(self._compared)

    @property
    def chosen(self) -> Mapping[str, tuple[str, dict[str, None], dict[str, None]]]:
        """stored run id -> why it was chosen (``Baseline.why``), the newer runs passed over (an ordered set of
        ``<run id> (<problem>)``), and what its record said when it was stored (``ResultRecord.baseline_notes``)."""
        return MappingProxyType(self._chosen)

    @property
    def compare_tables(self) -> Mapping[str, tuple[str, list[str]]]:
        """node id -> (outcome, table) of a compare that did not fail (``passed`` or ``undecided``;
        ``compare.Comparison.lines``), shown under the summary: a failed one prints its table with the failure."""
        return MappingProxyType(self._compare_tables)

    @property
    def compare_sections(self) -> Sequence[tuple[tuple[str, ...], str, list[str]]]:
        """:attr:`compare_tables` with one entry per distinct (outcome, table): (the node ids that read it, outcome,
        table), first seen first. Every test of a profile reads one measurement and gets the same compare
        (:meth:`once`), so its table is shown once, headed by those tests (a fresh-user trial read a profile's table
        once per test, and its run-to-run line three times)."""
        sections: dict[tuple[str, tuple[str, ...]], list[str]] = {}
        for test_id, (outcome, table) in self._compare_tables.items():
            sections.setdefault((outcome, tuple(table)), []).append(test_id)
        return tuple((tuple(tests), outcome, list(table)) for (outcome, table), tests in sections.items())

    @property
    def compare_notes(self) -> Sequence[str]:
        """How compares were judged (exact metrics, paired ratios, the run-to-run sd taken), printed under the
        summary, first seen first; a note already printed in one of :attr:`compare_tables` (they head each table) is
        left out."""
        return tuple(n for n in self._compare_notes if n not in self._notes_in_tables)

    # -- write (the verdicts, the session) --

    def once(self, key: Hashable, judge: Callable[[], _T]) -> _T:
        """The verdict ``key`` names (``("check", profile, threshold key, value)``, ``("speedup", ...)``,
        ``("compare", profile, baseline run, tolerances)``): judged by ``judge()`` the first time, the same object
        after. Every test of a profile reads one measurement, so every test gets the same answer and figures."""
        if key not in self._judged:
            self._judged[key] = judge()
        return cast(_T, self._judged[key])  # stored by the same key's judge

    def add_record(self, nodeid: str, record: ResultRecord, failure: str | None = None) -> None:
        """A test's record as its report arrived; ``failure``: the report's text when the test failed."""
        self._records.append(record)
        if failure is not None:
            self._failures[nodeid] = failure

    def mark_interrupted(self) -> None:
        """The run was interrupted: every record is kept, marked so that it never becomes a baseline."""
        self._records[:] = [dataclasses.replace(r, interrupted=True) for r in self._records]

    def add_override(self, nodeid: str, profile: str, changed: Sequence[str]) -> None:
        """What a test's marker changed in its profile's thresholds (``thresholds.overrides``)."""
        self._overrides[nodeid] = (profile, list(changed))

    def first_failure(self, profile: str, verdict: str, nodeid: str) -> str:
        """The node id of the first test of ``profile`` that failed with ``verdict`` (``nodeid`` when it is the
        first): every test of a profile shares one measurement, so a verdict is printed once and referred to."""
        return self._first_failures.setdefault((profile, verdict), nodeid)

    def noise(self, profile: str) -> Mapping[str, float]:
        """Calibrated relative noise of ``profile`` (``calibrate`` writes ``<noise dir>/<profile>.json``); empty when
        the file does not exist. Read once per run: ``run.session`` reads every selected profile's when the session
        starts with ``--specdec-compare``, so that a broken file stops the run before any server starts.

        :raises NoiseFileError: the file exists but is unusable (``noise.read_noise``: the message names the file,
            the key, the value and the fix).
        """
        if profile not in self._noise:
            from pytest_specdec.judge.noise import read_noise

            self._noise[profile] = read_noise(self._noise_dir / f"{profile}.json")
        return self._noise[profile]

    def add_compare(
        self, run_id: str, test_id: str, notes: Sequence[str], table: Sequence[str], baseline: Baseline | None = None,
        outcome: str = "passed", pooled: bool = False,
    ) -> None:
        """A test compared with stored run ``run_id``: how it was judged (``notes``, per profile), when it did not
        regress its table and ``outcome`` (``passed`` or ``undecided``), and the ``baseline`` found (why that run,
        the newer runs passed over, and what its record said when it was stored, unless ``pooled``: its spread was
        pooled with other stored runs, which that note, judging the record alone, did not know of; a trial read
        "could not pass within 5% against it" under compares that decided at 5%)."""
        chosen = None
        if baseline is not None:
            profile = baseline.record.profile
            stored = [] if pooled else [f"(profile {profile}): {n}" for n in baseline.record.baseline_notes]
            chosen = {"why": baseline.why, "skipped": list(baseline.skipped), "stored": stored}
        self.add_compare_of({"run_id": run_id, "test_id": test_id, "notes": list(notes), "table": list(table),
                             "chosen": chosen, "outcome": outcome})  # fmt: skip

    def compare_of(self, test_id: str) -> dict[str, Any] | None:
        """What :meth:`add_compare` was given for ``test_id``, as JSON-able data (None when it was not compared): an
        xdist worker sends it with the test's report, and the controller's :meth:`add_compare_of` says the same
        lines (a trial under ``-n 2`` saw no line naming the baseline, nor the tables of passing compares)."""
        return self._compare_args.get(test_id)

    def add_compare_of(self, data: Mapping[str, Any]) -> None:
        """:meth:`add_compare` from :meth:`compare_of`'s data."""
        run_id, test_id, notes, table = data["run_id"], data["test_id"], data["notes"], data["table"]
        self._compare_args[test_id] = dict(data)
        self._compared.setdefault(run_id, []).append(test_id)
        if (chosen := data.get("chosen")) is not None:
            why, skipped, stored = self._chosen.setdefault(run_id, (chosen["why"], {}, {}))
            skipped.update(dict.fromkeys(chosen["skipped"]))
            stored.update(dict.fromkeys(chosen["stored"]))
        self._compare_notes.update(dict.fromkeys(notes))
        if table:
            self._compare_tables[test_id] = (str(data["outcome"]), list(table))
            # A note is "<profile>: <a line of the table>" (``verdict.compare_item``): printed with the table.
            self._notes_in_tables.update(n for n in notes if n.partition(": ")[2] in table)
