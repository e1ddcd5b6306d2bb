"""The run's wiring, one object per pytest session (as pytest's ``junitxml.LogXML``): built once in
``pytest_configure`` from :class:`~pytest_specdec.run.settings.RunSettings`, it holds the settings, the selected
profiles (``selection``), the measurements (``measure.store``), the verdicts' outcomes (``judge.outcomes``) and
the baselines, and forwards pytest's hooks and the fixtures to the modules that own each job: ``fixtures``
(start, share and measure servers), ``judge.verdict`` (a test's verdict), ``report.summary`` (the end of the
run, returned as a report and written here).

Every pytest run builds this object, profiles selected or not, so the modules behind measuring and loading (runner:
aiohttp, httpx, numpy; profiles: pydantic) are imported in the methods that use them (``tests/test_plugin_import.py``).
"""

from __future__ import annotations

import dataclasses
import json
import os
import time
from collections.abc import Generator, Iterable, Iterator, Mapping
from typing import TYPE_CHECKING, Any

import pytest

from pytest_specdec.core import xdistnode
from pytest_specdec.core.errors import SpecdecError, SpecdecWarning
from pytest_specdec.core.tolerances import Tolerance, merge_tolerances
from pytest_specdec.judge.outcomes import Outcomes
from pytest_specdec.measure.store import MeasurementStore
from pytest_specdec.run import fixtures, marker, schedule, selection
from pytest_specdec.run.keys import (
    CHECKS_PROPERTY,
    COMPARE_PROPERTY,
    OVERRIDES_PROPERTY,
    RECORD_PROPERTY,
    record_key,
    thresholds_key,
    tolerances_key,
)
from pytest_specdec.run.settings import RunSettings

if TYPE_CHECKING:
    from pytest_specdec.measure import runner
    from pytest_specdec.measure.results import ErroredTest, ResultRecord
    from pytest_specdec.profiles.schema import Profile
    from pytest_specdec.report.summary import Outputs, SummaryReport

__all__ = ["SpecdecSession", "XdistCrashes", "session_key", "shell_knobs_left_out"]

#: A failed setup or call report's ``user_properties`` entry: the test errored before it measured
#: (``ErroredTest.to_dict`` as JSON). Added where the report is made, which has the item (an xdist worker), and read
#: where reports are logged (the controller); only the teardown report's properties reach JUnit XML.
_ERRORED_PROPERTY = "specdec_errored"
#: An errored test's first error line is cut here, unless it is ours (``SpecdecError``, the plugin's ``pytest.fail``):
#: a server death's line ends with its launch command, kept whole for the run file, markdown and compare (the
#: profile's later tests say only ``fixtures.same_failure``, so it is written once per measurement).
_ERROR_CHARS = 500


class SpecdecSession:
    """The run's settings, profiles, measurements and outcomes, and the hooks that wire them to pytest."""

    @classmethod
    def from_config(cls, config: pytest.Config) -> SpecdecSession:
        """Read the settings (``RunSettings.from_config``), then build the session from them.

        :raises pytest.UsageError: as ``RunSettings.from_config`` and the constructor.
        """
        return cls(config, RunSettings.from_config(config))

    def __init__(self, config: pytest.Config, settings: RunSettings) -> None:
        """:raises pytest.UsageError: unknown profile, broken profile file, preflight errors, unreadable baseline."""
        self.config, self.settings = config, settings
        self.started = time.time()
        #: Leftover servers of earlier runs stopped at start (``registry.reap``), named in the header.
        self.reaped: list[str] = []
        if not xdistnode.is_worker(config) and (settings.out_dir / "servers").is_dir():
            from pytest_specdec.serve import registry

            self.reaped = registry.reap(settings.out_dir / "servers")
        from pytest_specdec.measure.results import new_run_id

        self.run_id = new_run_id(self.started)
        if settings.requests_out is not None and not xdistnode.is_worker(config) and not settings.check:
            from pytest_specdec.report.request_log import RequestLog

            RequestLog.start(settings.requests_out)
        self.selection = selection.check_only(settings) if settings.check else selection.select(settings)
        if self.selected and self.profiles and not xdistnode.is_worker(config):
            # Once, at configure: a knob exported in the shell is dropped by the servers' clean environment.
            for text in shell_knobs_left_out(self.profiles[name] for name in self.selected):
                config.issue_config_time_warning(SpecdecWarning(text), stacklevel=2)
        self.store = MeasurementStore(
            log_dir=settings.out_dir / "logs",
            startup_timeout_s=settings.startup_timeout_s,
            repeats=settings.repeats_of,
            profiles=self.profiles or {},
            lock=lambda: fixtures.measure_lock(config, settings.requests_out),
        )
        self.outcomes = Outcomes(settings.out_dir / "noise")
        self.compare = None if settings.check else selection.compare_setup(settings, self.run_id, self.profiles)
        if self.compare is not None:
            self._read_noise()
        #: Shared servers the xdist workers left behind (``sharing.sweep_shared``), red in the summary.
        self.shared_leftovers: list[str] = []
        #: Under xdist, an interrupted run's shared servers that are stopped at its end (``sharing.stopped_shared``):
        #: the workers launched and stopped them, so the controller's ``store.stopped`` is empty.
        self.shared_stopped: list[str] = []
        self.outputs: Outputs | None = None
        #: Stops a profile's server after its last test (``plugin.py``'s fixture-setup and teardown hooks).
        self.server_stop = fixtures.ServerStop()
        #: (profile, text) of the verdict warnings already given: each is given to the first test that reads it.
        self.warned: set[tuple[str, str]] = set()
        #: Node id -> the specdec test that errored or failed before it measured (``_ERRORED_PROPERTY``), stored in
        #: the run file's ``errored`` (a server that died at startup left no trace there, and a session in which no
        #: test measured wrote no run file: ``compare ... latest`` then read the run before it, exit 0).
        self.errored: dict[str, ErroredTest] = {}
        #: The session ended early (Ctrl-C; under xdist also a worker's KeyboardInterrupt) with profiles selected:
        #: the run file says so (``RunFile.interrupted``), since the tests never run are in neither of its lists.
        self.interrupted = False
        #: ``--specdec-save NAME`` given and the run not named NAME (:meth:`_save_failure`): the red line above
        #: pytest's last and a failed session; empty otherwise.
        self.save_red = ""

    def _read_noise(self) -> None:
        """Read every selected profile's calibrated noise now (``Outcomes.noise`` keeps it): a broken noise file is
        a usage error before any server starts, not a traceback in the first compare after the whole measurement.

        :raises pytest.UsageError: a selected profile's noise file is present but unusable (``noise.read_noise``).
        """
        from pytest_specdec.core.errors import NoiseFileError

        for name in self.selected:
            try:
                self.outcomes.noise(name)
            except NoiseFileError as exc:
                raise pytest.UsageError(f"--specdec-compare: calibrated noise of profile {name!r}: {exc}") from None

    @property
    def selected(self) -> tuple[str, ...]:
        return self.selection.selected

    @property
    def profiles(self) -> dict[str, Profile] | None:
        return self.selection.profiles

    def profile(self, name: str) -> Profile:
        assert self.selection.profile_set is not None
        return self.selection.profile_set.profiles[name]

    # -- fixtures and per-test hooks (plugin.py forwards here) --

    def serve(self, profile: Profile, tmp_path_factory: pytest.TempPathFactory) -> Iterator[runner.RunningServer]:
        s = self.settings
        return fixtures.serve(profile, tmp_path_factory, config=self.config, store=self.store,
                              log_dir=s.out_dir / "logs", startup_timeout_s=s.startup_timeout_s)  # fmt: skip

    def measure_for(self, profile: Profile, request: pytest.FixtureRequest) -> runner.RunResult:
        return fixtures.measure_for(profile, request, self.store, self.profiles)

    def judge(self, item: pytest.Item) -> None:
        """After a test body: its verdict (``verdict.judge_item``) applied to the test (record, checks, warnings).

        :raises pytest.fail.Exception: a threshold missed or a confirmed regression (one message, no traceback).
        """
        from pytest_specdec.judge import verdict

        record = item.stash[record_key]
        profile = self.profile(record.profile)
        # The test's tolerances, merged once from their layers: ini, profile, marker (each parsed where it was read).
        tolerances = merge_tolerances(
            self.settings.tolerances, profile.tolerance_layer, item.stash.get(tolerances_key, None)
        )
        judged = verdict.judge_item(
            record, nodeid=item.nodeid, profile=profile,
            thresholds=item.stash.get(thresholds_key, None) or profile.thresholds, profiles=self.profiles or {},
            repeats=self.settings.repeats_of(profile), measurements=self.store, outcomes=self.outcomes,
            compare_setup=self.compare, tolerances=tolerances, undecided=self.settings.undecided,
        )  # fmt: skip
        # The verdicts may have measured more repeats: the pytest-benchmark entry gets them too.
        from pytest_specdec.report import benchmark

        benchmark.extend(item.config, self.store.run(profile.name).measurements)
        record = dataclasses.replace(
            judged.record, baseline_notes=self._baseline_notes(judged.record, profile, tolerances)
        )
        item.stash[record_key] = record
        value = json.dumps(record.to_dict(), default=str)
        item.user_properties[:] = [(k, value if k == RECORD_PROPERTY else v) for k, v in item.user_properties]
        item.user_properties.append((CHECKS_PROPERTY, json.dumps(judged.checks)))
        if xdistnode.is_worker(self.config) and (compared := self.outcomes.compare_of(item.nodeid)) is not None:
            # The controller prints the compare lines (which run, why, the tables): it judged nothing itself.
            item.user_properties.append((COMPARE_PROPERTY, json.dumps(compared)))
        for text in judged.warnings:
            # Once per profile and text: every test of a profile reads one measurement and shares its verdicts, and
            # pytest lists a warning of each test function apart (a fresh-user trial read an undecided compare's
            # rows once per test).
            if (profile.name, text) not in self.warned:
                self.warned.add((profile.name, text))
                item.warn(SpecdecWarning(text))
        if judged.failure is not None:
            # What preflight said of the profile is likely the cause (a "fixed" aux-id list): name it in the failure.
            found = self.selection.findings_of.get(profile.name, ())
            said = ["preflight said before the launch:", *(f"  {finding}" for finding in found)] if found else []
            pytest.fail("\n".join([judged.failure, *said]), pytrace=False)

    def _baseline_notes(
        self, record: ResultRecord, profile: Profile, tolerances: Mapping[str, Tolerance]
    ) -> tuple[str, ...]:
        """What the record cannot decide as a baseline (``baseline.baseline_notes``), at the tolerances and design
        a later ``--specdec-compare`` judges it with; stored with it and said at the end of the run."""
        from pytest_specdec.judge import verdict
        from pytest_specdec.judge.baseline import baseline_notes

        design = verdict.design_for(profile, self.settings.repeats_of(profile))
        return tuple(baseline_notes(record, tolerances, design))

    # -- hooks (this object is registered as a plugin) --

    def pytest_report_header(self, config: pytest.Config) -> list[str] | None:
        reaped = [f"specdec: {line}" for line in self.reaped]
        if not self.selected:
            return reaped or None
        s = self.settings
        lines = [
            *reaped,
            f"specdec: profiles {', '.join(self.selected)} from {s.profile_path}; logs/results in {s.out_dir}",
        ]
        if self.compare is not None:
            lines.append(self.compare.baselines.header_line())
        return lines + [f"specdec preflight: {line}" for line in self.selection.preflight_notes]

    @pytest.hookimpl(tryfirst=True)
    def pytest_collection(self, session: pytest.Session) -> bool | None:
        if not self.settings.check:
            return None
        # --specdec-check collects (imports the test files, runs nothing) to read each test's marker as its setup
        # would: a broken marker (a fresh-user trial: tolerances=["output_tok_s:5"], min_tok_sec=5) passed the
        # check, then errored the test in the real run.
        session.perform_collect()
        self.selection = selection.check_markers(
            self.selection, session.items, self.settings, collect_errors=session.testsfailed
        )
        return True

    @pytest.hookimpl(tryfirst=True)
    def pytest_runtestloop(self, session: pytest.Session) -> bool | None:
        return True if self.settings.check else None

    @pytest.hookimpl(wrapper=True)
    def pytest_runtest_makereport(
        self, item: pytest.Item, call: pytest.CallInfo[None]
    ) -> Generator[None, pytest.TestReport, pytest.TestReport]:
        # A test that measures (specdec_run, which measures in its setup) and failed with no record yet errored
        # before it measured: said on its report, for the run file (pytest_runtest_logreport, on the controller).
        report = yield
        if not report.failed or call.when not in ("setup", "call") or record_key in item.stash:
            return report
        profile = marker.item_profile(item)
        if profile is None or not marker.measures(item):
            return report
        entry = {"test_id": item.nodeid, "profile": profile, "when": call.when, "error": _first_line(call, report)}
        report.user_properties.append((_ERRORED_PROPERTY, json.dumps(entry)))
        return report

    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        # Runs on the controller under xdist too: records travel in user_properties.
        if report.when != "call" and not (report.when == "setup" and report.outcome != "passed"):
            return
        for name, value in report.user_properties:
            if name == _ERRORED_PROPERTY:
                from pytest_specdec.measure.results import ErroredTest

                self.errored[report.nodeid] = ErroredTest.from_dict(json.loads(str(value)))
        checks = {
            str(k): str(v)
            for name, value in report.user_properties
            if name == CHECKS_PROPERTY
            for k, v in json.loads(str(value)).items()
        }
        for name, value in report.user_properties:
            if name == RECORD_PROPERTY:
                from pytest_specdec.measure import results

                record = results.ResultRecord.from_dict(json.loads(str(value)))
                # An xfail test that failed is reported "skipped" by pytest: said as xfailed, not as a test skipped
                # unjudged (an adversarial trial read XFAIL, "skipped" and "not judged" of one test judged FAILED).
                xfailed = report.skipped and hasattr(report, "wasxfail")
                record = dataclasses.replace(record, outcome="xfailed" if xfailed else report.outcome, checks=checks)
                self.outcomes.add_record(report.nodeid, record, report.longreprtext if report.failed else None)
            elif name == OVERRIDES_PROPERTY:
                profile, changed = json.loads(str(value))
                self.outcomes.add_override(report.nodeid, str(profile), [str(c) for c in changed])
            elif name == COMPARE_PROPERTY and not xdistnode.is_worker(self.config):  # a worker's, on the controller
                self.outcomes.add_compare_of(json.loads(str(value)))

    def pytest_sessionstart(self, session: pytest.Session) -> None:
        # On an xdist worker: a SIGINT tells the controller it reached this worker, so that the controller sends no
        # second one into the teardown that stops the worker's servers (schedule.interrupt_workers).
        root = xdistnode.shared_dir(self.config) if self.selected else None
        worker = xdistnode.worker_id(self.config)
        if root is not None and worker is not None:
            restore = schedule.mark_interrupts(root, worker)
            if restore is not None:
                self.config.add_cleanup(restore)  # after teardown: a Ctrl-C during it is marked too

    @pytest.hookimpl(tryfirst=True)
    def pytest_sessionfinish(self, session: pytest.Session) -> None:
        if self.settings.check:
            if self.selection.check_failed:
                session.exitstatus = pytest.ExitCode.TESTS_FAILED
            elif session.exitstatus == pytest.ExitCode.NO_TESTS_COLLECTED:
                session.exitstatus = pytest.ExitCode.OK  # a check of the profile file alone
            return
        if xdistnode.is_worker(self.config):
            return
        # An interrupted run is stored even when nothing measured: else 'latest' is the night before, and a compare
        # of it reads a clean night.
        self.interrupted = session.exitstatus == pytest.ExitCode.INTERRUPTED and bool(self.selected)
        xdist = self.selected and self.config.pluginmanager.hasplugin("xdist")
        root = xdistnode.shared_dir(self.config) if xdist else None
        if root is not None:
            # Shared servers exist only when profiles ran (worker options are the controller's).
            from pytest_specdec.serve import sharing

            self.shared_leftovers = sharing.sweep_shared(root)
            if self.interrupted:
                self.shared_stopped = sharing.stopped_shared(root)
            elif self.shared_leftovers:
                # An interrupted run keeps pytest's exit status 2: its leftovers are said, and stopped, all the same.
                session.exitstatus = pytest.ExitCode.TESTS_FAILED
        errored = self.errored_tests()
        if self.outcomes.records or errored or self.interrupted:
            from pytest_specdec.report import summary

            if session.exitstatus == pytest.ExitCode.INTERRUPTED:
                # Its records are kept, but an interrupted run never becomes a baseline (nor takes a name).
                self.outcomes.mark_interrupted()
            self.outputs = summary.finish(self.outcomes.records, self.outcomes.failures, run_id=self.run_id,
                                          started=self.started, profiles=self.profiles or {},
                                          options=self.settings.output_options(), errored=errored,
                                          interrupted=self.interrupted)  # fmt: skip
            if self.outputs.fails_run:
                session.exitstatus = pytest.ExitCode.TESTS_FAILED
        elif self.settings.compare is not None and self.selected and session.testscollected:
            # A compare gate whose tests measured nothing is not green (an adversarial trial: a bare marker's test,
            # or one using only specdec_server, under --specdec-compare passed, exit 0, and no line said so).
            from pytest_specdec.report import summary

            self.outputs = summary.Outputs(compare_red=summary.nothing_compared((), self.settings.compare_missing))
            if session.exitstatus == pytest.ExitCode.OK:
                session.exitstatus = pytest.ExitCode.TESTS_FAILED
        self.save_red = self._save_failure()
        if self.save_red and session.exitstatus == pytest.ExitCode.OK:
            # A nightly that stores its baseline with --specdec-save learnt only the next day that nothing was named
            # (fresh-user trial): a name asked for and not given fails the session. A status already non-zero
            # (tests failed, none collected, interrupted) says so already and is kept.
            session.exitstatus = pytest.ExitCode.TESTS_FAILED

    def _save_failure(self) -> str:
        """Under ``--specdec-save NAME``, why the run was not named NAME, with the fix; ``""`` when it was, or
        without the option. Two cases: the run was stored but is not clean (``summary.finish``'s refusal:
        ``not saved as NAME: 1 test(s) not clean: ...``), or no specdec test measured, errored or was interrupted,
        so no run was stored at all (no profile selected, every specdec test deselected or skipped): ``--specdec-save=
        night-1: nothing saved: no specdec test ran in this session (no --server-profile given) ...``."""
        name = self.settings.save
        if not name:
            return ""
        if self.outputs is not None and self.outputs.name_path is not None:
            return ""
        if self.outputs is not None and self.outputs.name_refused:
            return self.outputs.name_refused
        from pytest_specdec.measure.results import ResultStore

        before = ResultStore(self.settings.out_dir / "results").named(name)
        kept = f"{name} still names run {before}" if before else f"no run is named {name}"
        if not self.selected:
            why = "no --server-profile given, so every specdec test was skipped"
            fix = f"add --server-profile=NAME (e.g. pytest -m specdec --server-profile=eagle3 --specdec-save={name})"
        else:
            why = (f"none of the tests of profile(s) {', '.join(self.selected)} ran (deselected by -m/-k, skipped, "
                   "or none collected)")  # fmt: skip
            fix = "select tests that use specdec_run (e.g. -m specdec)"
        return (f"--specdec-save={name}: nothing saved: {why}, so no run was stored; {kept}. Fix: {fix}, or name a "
                f"stored run: python -m pytest_specdec save RUN {name}")  # fmt: skip

    def pytest_terminal_summary(self, terminalreporter: Any, exitstatus: int) -> None:
        stopped = [*self.store.stopped, *self.shared_stopped]
        if exitstatus == pytest.ExitCode.INTERRUPTED and stopped:
            # Teardown already ran (pytest_sessionfinish precedes the summary): say so, not just "KeyboardInterrupt".
            names = ", ".join(dict.fromkeys(stopped))
            terminalreporter.write_line(f"specdec: interrupted; stopped the servers this run launched: {names}",
                                        yellow=True)  # fmt: skip
        report = self.summary()
        if report is not None:
            _write(terminalreporter, report.lines)

    def summary(self) -> SummaryReport | None:
        """The terminal summary (``summary.summary_report``); None when there is nothing to print (a run without
        specdec tests does not import the summary's modules)."""
        sel = self.selection
        errored = self.errored_tests()
        if not (
            sel.checked
            or self.shared_leftovers
            or self.outcomes.records
            or sel.preflight_notes
            or self.store.runs
            or errored
            or self.interrupted
        ):
            return None
        from pytest_specdec.report import benchmark, summary

        benchmark_table = bool(self.outcomes.records) and benchmark.enabled(self.config)
        traces = [(run.profile, run.trace) for run in self.store.runs.values()]
        splits = {run.profile: run.cycle_split for run in self.store.runs.values() if run.cycle_split is not None}
        return summary.summary_report(
            self.outcomes, self.outputs or summary.Outputs(), checked=sel.checked, check_failed=sel.check_failed,
            marker_errors=sel.marker_errors, marked=sel.marked,
            profile_path=self.settings.profile_path, shared_leftovers=self.shared_leftovers,
            preflight_notes=sel.preflight_notes, traces=traces, splits=splits, benchmark_table=benchmark_table,
            verbose=self.config.get_verbosity() > 0, errored=errored, interrupted=self.interrupted,
        )  # fmt: skip

    def crashed(self, report: pytest.TestReport) -> None:
        """Under xdist, on the controller: a worker crashed while running the test ``report`` names (a segfault,
        ``os._exit``), so the worker sent no report of it, and pytest-xdist made this one (``worker 'gw0' crashed
        while running '...'``). A specdec test (one the workers put in a work unit, ``schedule.write_units``) is
        listed as errored before it measured, with that line: else the run file read as a shorter clean night."""
        root = xdistnode.shared_dir(self.config)
        unit = schedule.read_units(root).get(report.nodeid) if root is not None else None
        if unit is None:
            return
        from pytest_specdec.measure.results import ErroredTest

        # str(longrepr): xdist's message alone (longreprtext starts with the worker's "[gw0] linux -- Python" line).
        first = next((line.strip() for line in str(report.longrepr).splitlines() if line.strip()), "")
        profile = _profile_of(report.nodeid, unit, self.selected)
        self.errored[report.nodeid] = ErroredTest(report.nodeid, profile, "crash", first[:_ERROR_CHARS])

    def errored_tests(self) -> list[ErroredTest]:
        """The specdec tests that errored or failed before they measured, in the order they were reported; a test
        that recorded a result after all (a rerun) is not one."""
        measured = {r.test_id for r in self.outcomes.records}
        return [e for test_id, e in self.errored.items() if test_id not in measured]

    def write_final_lines(self, terminalreporter: Any) -> None:
        """The run-level failure lines and the count of undecided verdicts, right above pytest's final line
        (``plugin.py``'s trylast summary hook)."""
        if self.outputs is not None:
            # A refused name fails the run (save_red): said once, red, below; not also as finish's yellow note.
            outputs = dataclasses.replace(self.outputs, name_refused="") if self.save_red else self.outputs
            _write(terminalreporter, outputs.final_lines())
        if self.save_red:
            from pytest_specdec.report.summary import Line

            _write(terminalreporter, [Line(f"FAIL specdec save: {self.save_red}", {"red": True, "bold": True})])
        if self.outcomes.records:
            from pytest_specdec.report import summary

            if self.settings.compare is not None:
                _write(terminalreporter, summary.uncompared_lines(self.outcomes.records, self.settings.compare_missing))
            _write(terminalreporter, summary.undecided_lines(self.outcomes.records, self.settings.undecided))


class XdistCrashes:
    """Registered on the xdist controller only (``pytest_handlecrashitem`` is a pytest-xdist hook): hands each test
    a crashed worker was running to :meth:`SpecdecSession.crashed`."""

    def __init__(self, session: SpecdecSession) -> None:
        self.session = session

    @pytest.hookimpl(trylast=True, optionalhook=True)
    def pytest_handlecrashitem(self, crashitem: str, report: pytest.TestReport, sched: Any) -> None:
        # Last, so a plugin that reschedules the test (report.outcome = "rerun") has done so: then it is not errored.
        if report.failed:
            self.session.crashed(report)


def _profile_of(nodeid: str, unit: str, selected: tuple[str, ...]) -> str | None:
    """The profile of a specdec test known by node id only (the controller has no items): its work unit's
    (``specdec:<profile>``), else the longest selected profile whose name is a run of the dash-joined parameter ids
    (``test_x[eagle3-wrong-layers]``: ``eagle3-wrong-layers``, not ``eagle3``); None when none is."""
    if unit.startswith("specdec:"):
        return unit.split(":", 1)[1]
    ids = nodeid.rpartition("[")[2][:-1].split("-") if nodeid.endswith("]") else []
    found = [name for name in selected if _is_run_of(name.split("-"), ids)]
    return max(found, key=len) if found else None


def _is_run_of(part: list[str], whole: list[str]) -> bool:
    """``part`` occurs in ``whole`` as consecutive items."""
    n = len(part)
    return any(whole[i : i + n] == part for i in range(len(whole) - n + 1))


def _first_line(call: pytest.CallInfo[None], report: pytest.TestReport) -> str:
    """The first non-blank line of a failed phase's error: the message of ours (``SpecdecError``) or of pytest's
    ``fail`` (the plugin turns a server that did not start into one), whole, else ``Type: message`` cut to
    :data:`_ERROR_CHARS`."""
    exc = call.excinfo.value if call.excinfo is not None else None
    text = str(exc) if exc is not None else report.longreprtext
    first = next((line.strip() for line in text.splitlines() if line.strip()), "")
    if isinstance(exc, SpecdecError | pytest.fail.Exception):
        return first
    if exc is not None:
        first = f"{type(exc).__name__}: {first}" if first else type(exc).__name__
    return first if len(first) <= _ERROR_CHARS else first[: _ERROR_CHARS - 3] + "..."


def _write(terminalreporter: Any, lines: Any) -> None:
    """Each ``summary.Line`` through the terminal reporter: a separator or a line, with its markup."""
    for line in lines:
        if line.sep:
            terminalreporter.write_sep(line.sep, line.text, **line.markup)
        else:
            terminalreporter.write_line(line.text, **line.markup)


#: ``config.stash``: the run's :class:`SpecdecSession` (``plugin.pytest_configure``).
session_key: pytest.StashKey[SpecdecSession] = pytest.StashKey()


def shell_knobs_left_out(profiles: Iterable[Profile], source: Mapping[str, str] | None = None) -> list[str]:
    """One warning text per reference-server knob (``engines.reference.ENV_KNOBS``) set in the caller's shell but not
    in the ``env:`` of a profile that launches the reference server: the server gets a clean environment
    (``ReferenceEngine.env``), so such a knob never reaches it (an adversarial trial:
    ``SPECDEC_REF_FORWARD_SLOWDOWN=2 pytest ...`` measured an unslowed server, silently).

    Example: ``SPECDEC_REF_FORWARD_SLOWDOWN=2 is set in the shell, but the reference server of profile eagle3 never
    sees it (servers start with a clean environment); set it under the profile's env:
    (env: {SPECDEC_REF_FORWARD_SLOWDOWN: "2"}), or unset it in the shell``.

    :param profiles: the run's selected profiles (sweep points named once, by their base profile).
    :param source: the caller's environment (default ``os.environ``).
    """
    from pytest_specdec.core.sweep_names import split_name
    from pytest_specdec.engines import get_engine
    from pytest_specdec.engines.reference import ENV_KNOBS, ReferenceEngine

    src = os.environ if source is None else source
    knobs = [key for key in ENV_KNOBS if key in src]
    launched = [p for p in profiles if p.url is None and isinstance(get_engine(p), ReferenceEngine)]
    out = []
    for key in knobs:
        names = list(dict.fromkeys(split_name(p.name)[0] for p in launched if key not in p.env))
        if not names:
            continue
        which = f"profile {names[0]}" if len(names) == 1 else f"profiles {', '.join(names)}"
        out.append(
            f"{key}={src[key]} is set in the shell, but the reference server of {which} never sees it (servers start "
            f"with a clean environment); set it under the profile's env: (env: {{{key}: \"{src[key]}\"}}), or unset "
            "it in the shell"
        )
    return out
