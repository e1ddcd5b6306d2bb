"""Which stored result a test is compared with under ``--specdec-compare``: the run it names, or, per test, the
newest stored run in which that test passed (a regressed run never becomes the next baseline)."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from pytest_specdec.core.errors import CompareError
from pytest_specdec.measure import results

__all__ = ["Baselines"]


@dataclass
class Baselines:
    """The baselines of one session. ``run`` is set for ``--specdec-compare=RUN_OR_PATH``; otherwise ``paths`` lists
    the stored run files, newest first, read on first use.

    Usage (``run/selection.py::compare_setup``)::

        baselines = Baselines.from_option(settings.compare, store)  # None without the option
        found = baselines.find("tests/test_x.py::test_a[eagle3]")  # (RunFile, ResultRecord) or None
    """

    results_dir: Path
    run: results.RunFile | None = None
    paths: list[Path] = field(default_factory=list)
    _loaded: dict[Path, results.RunFile] = field(default_factory=dict)

    @classmethod
    def from_option(cls, ref: str | None, store: results.ResultStore) -> Baselines | None:
        """``--specdec-compare``'s value: ``"latest"`` (the option without a value), a run id or file, or None.

        :raises CompareError: the named run cannot be read (``ResultStore.load``).
        """
        if ref is None:
            return None
        if ref == "latest":
            return cls(store.root, paths=list(reversed(store.list())))
        return cls(store.root, run=store.load(ref))

    def find(self, test_id: str) -> tuple[results.RunFile, results.ResultRecord] | None:
        """The run and record to compare ``test_id`` with, or None (no stored run has it; with ``latest``, none in
        which it passed; runs of other profiles and unreadable files are skipped)."""
        if self.run is not None:
            record = self.run.find(test_id)
            return (self.run, record) if record is not None else None
        for path in self.paths:
            run = self._loaded.get(path)
            if run is None:
                try:
                    run = self._loaded[path] = results.read_run_file(path)
                except CompareError:
                    continue
            record = run.find(test_id)
            if record is not None and record.outcome in ("passed", ""):
                return run, record
        return None

    def where(self) -> str:
        """Where baselines come from, for "no baseline for ... in <where>": ``run <id>`` or the results directory."""
        return f"run {self.run.run_id}" if self.run is not None else f"{self.results_dir}"

    def header_line(self) -> str:
        """The ``pytest_report_header`` line saying what each test is compared with."""
        if self.run is not None:
            return f"specdec: comparing against run {self.run.run_id}"
        return (
            f"specdec: comparing each test against the newest of {len(self.paths)} stored run(s) in which it passed "
            f"({self.results_dir})"
        )
