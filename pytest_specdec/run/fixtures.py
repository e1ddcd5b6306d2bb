"""The bodies of the ``specdec_server`` and ``specdec_run`` fixtures (``plugin.py`` declares them): start or share a
profile's server, measure it once (``measure.store``), attach the result record to the test, stop the server
after its profile's last test (:class:`ServerStop`); and the xdist lock every measurement runs under
(:func:`measure_lock`).

Imports nothing heavy at the top: ``run.session`` imports it in every pytest run.
"""

from __future__ import annotations

import contextlib
import json
import re
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

import pytest

from pytest_specdec.core import xdistnode
from pytest_specdec.core.errors import LoadWarning, SpecdecError, SpecdecWarning
from pytest_specdec.run import marker
from pytest_specdec.run.keys import RECORD_PROPERTY, record_key

if TYPE_CHECKING:
    from pytest_specdec.measure import runner
    from pytest_specdec.measure.store import MeasurementStore
    from pytest_specdec.profiles.schema import Profile

__all__ = ["ServerStop", "measure_for", "measure_lock", "or_fail", "same_failure", "serve"]

T = TypeVar("T")

#: profile -> (node id of the test its failed measurement failed in, that failure's message) (:func:`measure_for`).
_failed_measurements: pytest.StashKey[dict[str, tuple[str, str]]] = pytest.StashKey()


def measure_for(
    profile: Profile, request: pytest.FixtureRequest, store: MeasurementStore, profiles: Mapping[str, Profile] | None
) -> runner.RunResult:
    """The ``specdec_run`` fixture: the profile's measurement (made now when none exists yet in this session, under
    xdist in any worker), attached to the test as its result record, JUnit properties and benchmark entry.

    A measurement that failed (its server did not start, died, stalled, ...) is not made again for the next test of
    the profile: that test fails too, in the same phase, with a one-line reference to the first one's message
    (:func:`same_failure`). Measuring again sent the next test's requests to a server already dead, and its message
    said "before any of 4 measured requests succeeded" where the first said "after 2 of 4" (a fresh-user trial): one
    measurement, one answer; and the whole message, launch command included, repeated for every test of the
    measurement in the terminal, the markdown summary, the run file and ``compare`` (another trial): it is said once."""
    from pytest_specdec.measure import results
    from pytest_specdec.report import benchmark, junit

    item = request.node
    vs = marker.speedup_vs(item, profiles)
    if store.needs(profile.name, vs):
        store.adopt_shared(profile.name)
        if store.needs(profile.name, vs):
            failed = item.config.stash.setdefault(_failed_measurements, {})
            if profile.name in failed:
                pytest.fail(same_failure(profile.name, failed[profile.name][0]), pytrace=False)
            try:
                # A server that did not start fails here: pytest caches the fixture's failure for the session.
                specdec_server: runner.RunningServer = request.getfixturevalue("specdec_server")  # launch only now
                store.attach(specdec_server)
                or_fail(lambda: store.measure_once(specdec_server, vs))
            except pytest.fail.Exception as exc:
                failed[profile.name] = (item.nodeid, exc.msg)
                raise
        run = store.run(profile.name)
        for message in dict.fromkeys([*run.cross_checks, *run.log_warnings]):
            # Counters disagreeing with the client (a metrics bug, not a regression), or a log-level warning.
            item.warn(SpecdecWarning(f"profile {profile.name}: {message}"))
        for message in dict.fromkeys(run.client_checks):
            item.warn(LoadWarning(f"profile {profile.name}: {message}"))
    run = store.run(profile.name)
    if "specdec_server" in request.fixturenames:  # already set up for this test: no launch
        store.attach(request.getfixturevalue("specdec_server"))
    arms = store.arms(profile.name, vs) if vs else None
    fingerprint = store.fingerprint(profile.name)
    record = results.ResultRecord.from_measurements(
        item.nodeid, run.measurements, fingerprint, paired=arms.to_dict() if arms is not None else None
    )
    item.stash[record_key] = record
    item.user_properties.append((RECORD_PROPERTY, json.dumps(record.to_dict(), default=str)))
    item.user_properties.extend(junit.junit_properties(record.metrics))  # JUnit <property name="specdec_...">
    benchmark.record(request, run.measurements, fingerprint)
    return run


def same_failure(profile: str, first: str) -> str:
    """What a later test of a profile whose measurement failed says, in place of that failure's whole message (its
    cause, log and launch command, shown once, by ``first``): e.g. ``same failure as t.py::test_run[eagle3] (the
    tests of profile 'eagle3' share one measurement): see its message above``."""
    return f"same failure as {first} (the tests of profile '{profile}' share one measurement): see its message above"


def serve(
    profile: Profile,
    tmp_path_factory: pytest.TempPathFactory,
    *,
    config: pytest.Config,
    store: MeasurementStore,
    log_dir: Path,
    startup_timeout_s: float | None,
) -> Iterator[runner.RunningServer]:
    """The ``specdec_server`` fixture's body: start (or, under xdist, share through ``sharing.shared_server``) the
    profile's server, yield it, stop it (and the reference servers of its paired arms) afterwards.

    :raises pytest.fail.Exception: the server could not be started or attached (:func:`or_fail`).
    """
    from pytest_specdec.measure import runner
    from pytest_specdec.run.progress import StartupProgress
    from pytest_specdec.serve import sharing

    def start(on_launch: Callable[[Any], None] | None = None) -> runner.RunningServer:
        progress = StartupProgress(config, profile.name)
        try:
            with store.launching() as noted:

                def launched(process: Any) -> None:
                    noted(process)  # first: named if Ctrl-C comes during the sharing's on_launch
                    if on_launch is not None:
                        on_launch(process)

                return runner.start_server(
                    profile,
                    log_dir=log_dir,
                    startup_timeout_s=startup_timeout_s,
                    on_progress=progress,
                    on_launch=launched,
                )
        finally:
            progress.done()

    if not xdistnode.is_worker(config) or profile.url is not None:
        server = or_fail(start)
        try:
            yield server
        finally:
            store.detach(profile.name)
            store.stop_reference_servers()
            store.stop_server(server)
        return
    started: list[runner.RunningServer] = []

    def start_process(on_launch: Callable[[Any], None]) -> Any:
        started.append(start(on_launch))
        return started[0].process

    root = tmp_path_factory.getbasetemp().parent
    budget = startup_timeout_s or profile.startup_timeout_s
    sharer = sharing.shared_server(profile.name, root, start_process)
    shared = or_fail(sharer.__enter__)
    try:
        # The worker that launched it keeps its handle; the others attach by URL. Teardown is shared_server's job.
        yield started[0] if started else or_fail(lambda: runner.attach(profile, shared.base_url, budget_s=budget))
    finally:
        store.detach(profile.name)
        store.stop_reference_servers()
        sharer.__exit__(None, None, None)


class ServerStop:
    """Stops a profile's server right after its last test (in collection order), not at the end of the session: the
    tests that follow may not need it, and under xdist another worker may wait to start the next server."""

    def __init__(self) -> None:
        #: The live ``specdec_server`` fixture: (FixtureDef, its request, profile name).
        self._live: tuple[Any, Any, str] | None = None
        #: profile -> position of its last test in the collection, and node id -> position (:meth:`is_last_test_of`).
        self._last_of: dict[str, int] | None = None
        self._positions: dict[str, int] = {}

    def set_up(self, fixturedef: Any, request: Any, profile: str) -> None:
        """The ``specdec_server`` fixture of ``profile`` is live (``pytest_fixture_setup``)."""
        self._live = (fixturedef, request, profile)

    def after_teardown(self, item: pytest.Item, nextitem: pytest.Item | None) -> None:
        """After ``item``'s teardown: finish the live server fixture when no later test runs on its profile."""
        if self._live is None or nextitem is None:
            return
        fixturedef, request, name = self._live
        if fixturedef.cached_result is not None and self.is_last_test_of(item, name):
            self._live = None
            fixturedef.finish(request)

    def is_last_test_of(self, item: pytest.Item, profile: str) -> bool:
        """Whether no test after ``item`` in the session's collection order runs on ``profile``."""
        if self._last_of is None:  # computed once: the collection does not change during the run
            self._last_of = {}
            for i, other in enumerate(item.session.items):
                self._positions[other.nodeid] = i
                name = marker.item_profile(other)
                if name:
                    self._last_of[name] = i
        position = self._positions.get(item.nodeid)
        return position is not None and position >= self._last_of.get(profile, -1)


@contextlib.contextmanager
def measure_lock(config: pytest.Config, requests_out: Path | None = None) -> Iterator[Callable[[str], Path] | None]:
    """Under xdist, workers share servers: one measured phase at a time, and each profile is measured once for all
    workers (the first one measures, the others read its result). Yields the per-profile result file namer, or None
    without xdist. Every measurement goes through here (``MeasurementStore(lock=...)``), so it also shows the
    measured-phase status line and, with ``requests_out`` (``--specdec-requests-out``), appends each measured phase's
    requests there (``request_log.RequestLog``)."""
    from filelock import FileLock

    from pytest_specdec.measure import runner
    from pytest_specdec.run.progress import MeasureStatus

    status = MeasureStatus(config)
    token = runner.phase_watcher.set(status)
    recorder = None
    if requests_out is not None:
        recorder = runner.phase_recorder.set(_request_log(config, requests_out))
    try:
        root = xdistnode.shared_dir(config) if xdistnode.is_worker(config) else None
        if root is None:
            yield None
            return
        with FileLock(str(root / "specdec-measure.lock")):
            yield lambda name: root / f"specdec-run-{re.sub(r'[^A-Za-z0-9_.@=-]', '_', name)}.pickle"
    finally:
        runner.phase_watcher.reset(token)
        if recorder is not None:
            runner.phase_recorder.reset(recorder)
        status.done()


#: One ``RequestLog`` per config: its phase numbers run on across the measurements of the session.
_request_logs: pytest.StashKey[Any] = pytest.StashKey()


def _request_log(config: pytest.Config, path: Path) -> Any:
    from pytest_specdec.report.request_log import RequestLog

    log = config.stash.get(_request_logs, None)
    if log is None:
        log = config.stash[_request_logs] = RequestLog(path)
    return log


def or_fail(call: Callable[[], T]) -> T:
    """Run ``call``; our errors become one clean pytest failure (their message, which says what the log shows), not
    a traceback through the plugin. In a session fixture pytest caches it: one launch, every dependent test ERRORs.
    ``ServerStartError.log_tail`` is not added: a death's message quotes the log's last lines itself
    (``readiness.exit_error``), and the tail beside them said them twice."""
    message = None
    try:
        return call()
    except SpecdecError as exc:
        message = str(exc)
    pytest.fail(message, pytrace=False)
