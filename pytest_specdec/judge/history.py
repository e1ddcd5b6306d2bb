"""A baseline's history: the other stored runs of the same test with the same fingerprint, whose repeats a compare
pools (``sequential.History``) so that a short baseline does not keep the interval wide however long today measures.

Used the same way by pytest's ``--specdec-compare`` (``judge.verdict``) and the ``compare`` command
(``cli.compare``), so both decide on the same numbers.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from pytest_specdec.core.errors import CompareError
from pytest_specdec.judge.fingerprint import fingerprint_diff
from pytest_specdec.measure import results

__all__ = ["MAX_HISTORY_RUNS", "StoredHistory"]

#: Stored runs pooled at most (the newest first): enough degrees of freedom, and old enough runs drop out.
MAX_HISTORY_RUNS = 10


@dataclass
class StoredHistory:
    """The stored runs of a results directory, read once, searched per baseline record.

    Usage::

        history = StoredHistory(Path(".specdec/results"))
        others = history.of(base_run_id, base_record)   # [ResultRecord, ...], newest first, base excluded

    A record belongs to the history of ``base`` when it has the same test id, the same fingerprint
    (``fingerprint_diff`` empty: versions, engine config, draft, env, argv, workload, hardware; the runner's load
    is not part of it), is clean as a baseline is or was left undecided by its own compare with no suspected row
    (``ResultRecord.history_problem``), is stored before today's run (``before``, a run id: the ``compare``
    command's CURRENT; pytest's run is not stored yet), and is not the baseline itself. Runs newer than the
    baseline count: under a gated nightly the baseline stays the last clean night while the unchanged, undecided
    nights after it are the runs that measure the run-to-run spread.
    """

    results_dir: Path
    #: Today's run id: only runs stored before it are read (None: every stored run).
    before: str | None = None
    _runs: list[results.RunFile] | None = field(default=None, repr=False)
    #: The stored run files left out because they cannot be read (``read_run_file``'s message: the file, the test,
    #: the field and the fix); a compare says so (a trial's edited file was dropped from the pool without a word).
    skipped: list[str] = field(default_factory=list)

    def _load(self) -> list[results.RunFile]:
        if self._runs is None:
            store = results.ResultStore(self.results_dir)
            runs = []
            for path in reversed(store.list() if self.results_dir.is_dir() else []):
                try:
                    runs.append(results.read_run_file(path))
                except CompareError as exc:
                    self.skipped.append(str(exc))
            self._runs = runs
        return self._runs

    def of(self, base_run_id: str, base: results.ResultRecord) -> list[results.ResultRecord]:
        """The other runs of ``base`` (stored in run ``base_run_id``), newest first, at most
        :data:`MAX_HISTORY_RUNS` - 1. A compare takes their spread, never their level: the reference is ``base``'s
        own run (``sequential.History``)."""
        runs = self._load()  # newest first
        ids = [r.run_id for r in runs]
        start = ids.index(self.before) + 1 if self.before in ids else 0
        found: list[results.ResultRecord] = []
        for run in runs[start:]:
            if run.run_id == base_run_id:
                continue
            record = run.find(base.test_id)
            if record is None or record.history_problem():
                continue
            if fingerprint_diff(base.fingerprint, record.fingerprint):
                continue
            found.append(record)
            if len(found) >= MAX_HISTORY_RUNS - 1:
                break
        return found
