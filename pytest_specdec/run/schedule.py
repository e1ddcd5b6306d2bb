"""The xdist schedule of specdec tests: which tests share a server, so each server starts once, one at a time.

Collection decides it. Each worker collects every test; ``write_units`` (the worker's
``pytest_collection_modifyitems``) writes ``specdec-units-<worker>.json`` into the directory the workers share
(``tmp_path_factory.getbasetemp().parent``, the controller's basetemp), mapping each specdec test's node id to its
work unit:

- ``specdec``: every test of an exclusive profile (the default, ``exclusive: true``). One unit means one worker
  runs them all, in collection order, where pytest has grouped them by profile: each profile's server starts once,
  stops after its last test (``plugin.pytest_runtest_teardown``), and no two run at once.
- ``specdec:<profile>``: the tests of a profile with ``exclusive: false`` (or given by ``url:``): one worker per
  profile, beside the others.

On the controller, ``SpecdecScheduling`` (pytest-xdist's ``LoadScopeScheduling`` with these units; any other test
is its own unit, as under ``--dist load``) is what ``pytest_xdist_make_scheduler`` returns for ``-n N`` (``--dist
load``) when profiles are selected. As xdist's own ``loadgroup``, but without rewriting node ids (result records and
baselines keep the ids of a run without xdist). When a worker crashes, the test it crashed on (which xdist reports
failed) is not run again and the rest of its unit goes to the replacement worker, where xdist 3.8's load-scope
scheduling ran the crashed test again on every replacement (``SpecdecScheduling.remove_node``).

A KeyboardInterrupt in the controller (SIGINT to its pid alone: a CI cancel, ``timeout -s INT``) ends xdist's loop
while the workers run on, holding their servers; ``XdistSchedule.pytest_runtestloop`` then interrupts every worker
the signal did not reach (``interrupt_workers``) and takes their last reports, so the session ends as after a Ctrl-C
at a terminal, which reaches the whole process group.
"""

from __future__ import annotations

import contextlib
import json
import os
import queue
import signal
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path
from types import FrameType
from typing import Any

import pytest

from pytest_specdec.core import xdistnode

__all__ = [
    "XdistSchedule",
    "interrupt_workers",
    "mark_interrupted",
    "mark_interrupts",
    "read_units",
    "scheduling_class",
    "unit_of",
    "write_units",
]

_PREFIX = "specdec-units-"
#: ``specdec-interrupted-<worker>``: an empty file a worker writes when a KeyboardInterrupt reached it.
_INTERRUPTED_PREFIX = "specdec-interrupted-"
#: Seconds the controller waits for its workers to say a Ctrl-C reached them too (a terminal's Ctrl-C signals the
#: whole process group; a worker's SIGINT handler writes its file, ``mark_interrupts``) before it interrupts the
#: others itself: a second SIGINT would cut short the teardown that stops a worker's servers.
GROUP_GRACE_S = 1.0
#: Seconds the interrupted workers get to tear down (stop their servers) and send their last reports; then the
#: controller goes on, and xdist's own teardown ends them (``sharing.sweep_shared`` stops what they left).
WORKER_STOP_S = 60.0
#: The worker events taken after an interrupt, each handed to xdist's ``DSession.worker_<event>``: reports, logs and
#: warnings. Scheduling events are dropped (nothing more runs) and a finished or lost worker is only counted down:
#: xdist's own handling of a worker's KeyboardInterrupt starts a replacement worker.
_EVENTS_AFTER_INTERRUPT = ("testreport", "collectreport", "logstart", "logfinish", "warning_recorded", "internal_error")


def unit_of(profile: str, *, exclusive: bool) -> str:
    """The work unit of a test of ``profile``: ``"specdec"`` when exclusive, else ``"specdec:<profile>"``."""
    return "specdec" if exclusive else f"specdec:{profile}"


def write_units(root: Path, worker: str, units: dict[str, str]) -> None:
    """Write a worker's node id -> unit map where the controller's scheduler reads it (atomically)."""
    root.mkdir(parents=True, exist_ok=True)
    path = root / f"{_PREFIX}{worker}.json"
    tmp = path.with_name(f"{path.name}.tmp")
    tmp.write_text(json.dumps(units), encoding="utf-8")
    os.replace(tmp, path)


def read_units(root: Path) -> dict[str, str]:
    """The node id -> unit map (every worker collected the same tests, so any worker's file will do)."""
    for path in sorted(root.glob(f"{_PREFIX}*.json")):
        try:
            return dict(json.loads(path.read_text(encoding="utf-8")))
        except (OSError, ValueError):
            continue
    return {}


def mark_interrupted(root: Path, worker: str) -> None:
    """On a worker that a KeyboardInterrupt reached: say so to the controller (``interrupt_workers``)."""
    with contextlib.suppress(OSError):
        (root / f"{_INTERRUPTED_PREFIX}{worker}").touch()


def mark_interrupts(root: Path, worker: str) -> Callable[[], None] | None:
    """On a worker: from now on a SIGINT first writes :func:`mark_interrupted`'s file, then raises
    KeyboardInterrupt as Python's own handler does. In the handler, not where pytest reports the interrupt: the
    KeyboardInterrupt reaches that hook only after pytest formatted its traceback (over a second on a busy machine),
    and a second SIGINT there ended the worker with exit status 0 and no teardown.

    :returns: what puts Python's handler back; None where SIGINT has another handler (left alone) or this is not
        the main thread.
    """
    if threading.current_thread() is not threading.main_thread():
        return None
    if signal.getsignal(signal.SIGINT) is not signal.default_int_handler:
        return None

    def on_sigint(signum: int, frame: FrameType | None) -> None:
        mark_interrupted(root, worker)
        signal.default_int_handler(signum, frame)

    signal.signal(signal.SIGINT, on_sigint)

    def restore() -> None:
        if signal.getsignal(signal.SIGINT) is on_sigint:
            signal.signal(signal.SIGINT, signal.default_int_handler)

    return restore


def _interrupted(root: Path) -> set[str]:
    """The ids of the workers that wrote :func:`mark_interrupted`'s file."""
    return {path.name[len(_INTERRUPTED_PREFIX) :] for path in root.glob(f"{_INTERRUPTED_PREFIX}*")}


def interrupt_workers(
    dsession: Any, root: Path, *, grace_s: float = GROUP_GRACE_S, stop_s: float = WORKER_STOP_S
) -> list[str]:
    """On the controller, after a KeyboardInterrupt ended xdist's loop: interrupt each worker still running that a
    Ctrl-C did not reach, then hand on the reports the workers send until they finished (their teardown stops their
    servers first), as xdist's loop would have.

    A SIGINT to the controller's pid alone (a CI cancel, ``timeout -s INT``) left the workers running their tests
    and holding their shared servers: the controller's session end found the servers still running, failed the run
    with exit 1 and stored no interrupted run (a fresh-user trial). A Ctrl-C at a terminal reaches the workers too,
    yet the controller did not wait for their teardown either.

    :param dsession: pytest-xdist's controller plugin (``DSession``); its ``queue`` holds the workers' events and
        ``_active_nodes`` the workers not finished.
    :param root: the directory the workers share (their :func:`mark_interrupted` files).
    :param grace_s: seconds to wait for every worker's file before interrupting the others (:data:`GROUP_GRACE_S`).
    :param stop_s: seconds to wait, in all, for the workers to finish (:data:`WORKER_STOP_S`).
    :returns: the ids of the workers this interrupted (``["gw0", "gw1"]``); empty when the Ctrl-C reached them all,
        or xdist lacks what this reads (then xdist's teardown ends the workers, as before).
    """
    active = getattr(dsession, "_active_nodes", None)
    events = getattr(dsession, "queue", None)
    if not isinstance(active, set) or not isinstance(events, queue.Queue):
        return []
    signalled: list[str] | None = None
    start = time.monotonic()
    while active and time.monotonic() - start < stop_s:
        if signalled is None:
            marked = _interrupted(root)
            pending = [node for node in active if node.gateway.id not in marked]
            if not pending or time.monotonic() - start >= grace_s:
                signalled = [node.gateway.id for node in pending if _send_sigint(node)]
        try:
            name, kwargs = events.get(timeout=0.05)
        except queue.Empty:
            continue
        if name in ("workerfinished", "errordown"):
            dsession.config.hook.pytest_testnodedown(node=kwargs["node"], error=kwargs.get("error"))
            active.discard(kwargs["node"])
        elif name in _EVENTS_AFTER_INTERRUPT:
            getattr(dsession, f"worker_{name}")(**kwargs)
    return signalled or []


def _send_sigint(node: Any) -> bool:
    """SIGINT to a local worker's process (execnet's popen gateway keeps its ``Popen`` as ``gateway._io.popen``);
    False when the worker is not a local process still running, or on Windows, where ``os.kill`` would terminate
    it without a KeyboardInterrupt."""
    popen = getattr(getattr(getattr(node, "gateway", None), "_io", None), "popen", None)
    if sys.platform == "win32" or popen is None or not hasattr(popen, "poll") or popen.poll() is not None:
        return False
    try:
        os.kill(popen.pid, signal.SIGINT)
    except OSError:
        return False
    return True


def scheduling_class() -> type:
    """``SpecdecScheduling`` (built on call: xdist is imported only when it is used)."""
    from xdist.scheduler import LoadScopeScheduling

    class SpecdecScheduling(LoadScopeScheduling):  # type: ignore[misc,valid-type]
        """``--dist load`` except that the tests of one work unit (see the module docstring) go to one worker."""

        def __init__(self, config: pytest.Config, log: Any = None, *, root: Path) -> None:
            super().__init__(config, log)
            self._root = root
            self._units: dict[str, str] | None = None

        def _split_scope(self, nodeid: str) -> str:
            if self._units is None:
                self._units = read_units(self._root)  # the workers wrote it before reporting their collection
            return self._units.get(nodeid, nodeid)

        def remove_node(self, node: Any) -> str | None:
            """xdist's, except after a crash: the test the worker died on is not run again, and only the work units
            with tests left to run go back on the queue.

            :returns: the node id of the test the worker crashed on (xdist reports it failed), or None when the
                worker had nothing left to run (a normal shutdown).
            """
            # Drop this override (and schedule's) once pytest-xdist ships both fixes. xdist 3.8 requeues the whole
            # workload: the crashed test stays pending, so every replacement worker runs it again until
            # --max-worker-restart is spent and the rest of its unit never runs (pytest-dev/pytest-xdist#1371), and
            # the units the worker had completed come back empty, which can deadlock the end of the run (#1378, #1363).
            if not _has_xdist_state(self):
                return super().remove_node(node)  # type: ignore[no-any-return]
            workload: dict[str, dict[str, bool]] = self.assigned_work.pop(node)
            crashed = next(
                ((scope, nodeid) for scope, tests in workload.items() for nodeid, done in tests.items() if not done),
                None,
            )
            if crashed is None:
                return None
            scope, crashitem = crashed
            workload[scope][crashitem] = True  # xdist's handle_crashitem reports it failed
            self.workqueue.update((s, tests) for s, tests in workload.items() if not all(tests.values()))
            for other in self.assigned_work:
                self._reschedule(other)
            return crashitem

        def schedule(self) -> None:
            """xdist's; when a replacement worker joins, each worker is then given at least two tests or shut down."""
            rejoined = getattr(self, "collection", None) is not None
            super().schedule()
            if not (rejoined and _has_xdist_state(self)):
                return
            # xdist 3.8 hands a replacement worker one work unit, and a worker starts a test only once it holds the
            # next one or a shutdown: a unit of one test (as remove_node now leaves) waited forever
            # (pytest-dev/pytest-xdist#1327, fixed after 3.8 by #1328). Each pass takes a unit or shuts down.
            for node in self.nodes:
                while not getattr(node, "shutting_down", True) and self._pending_of(self.assigned_work[node]) < 2:
                    self._reschedule(node)

    return SpecdecScheduling


#: What SpecdecScheduling.remove_node and .schedule use of pytest-xdist 3.8's LoadScopeScheduling; without any of
#: them they leave it to xdist's own.
_XDIST_STATE = ("assigned_work", "workqueue", "collection", "nodes", "_pending_of", "_reschedule")


def _has_xdist_state(scheduler: Any) -> bool:
    """Whether ``scheduler`` still has the attributes (of the types) SpecdecScheduling's overrides rely on."""
    if not all(hasattr(scheduler, name) for name in _XDIST_STATE):
        return False
    return isinstance(scheduler.assigned_work, dict) and isinstance(scheduler.workqueue, dict)


class XdistSchedule:
    """Registered on the xdist controller (only when xdist is installed): picks ``SpecdecScheduling``, and after a
    KeyboardInterrupt in the controller brings its workers down (``interrupt_workers``)."""

    def __init__(self, config: pytest.Config) -> None:
        self.config = config

    @pytest.hookimpl(wrapper=True)
    def pytest_runtestloop(self, session: pytest.Session) -> Any:
        try:
            return (yield)
        except KeyboardInterrupt:
            # xdist's Interrupted (a worker's KeyboardInterrupt) ends the loop once every worker finished; a
            # KeyboardInterrupt in the controller itself ends it at once.
            dsession = self.config.pluginmanager.get_plugin("dsession")
            root = xdistnode.shared_dir(self.config)
            if dsession is not None and root is not None and not getattr(dsession, "session_finished", True):
                interrupt_workers(dsession, root)
            raise

    @pytest.hookimpl(tryfirst=True)
    def pytest_xdist_make_scheduler(self, config: pytest.Config, log: Any) -> Any:
        if config.getvalue("dist") != "load":
            return None  # an explicit --dist mode other than load is the user's choice
        root = xdistnode.shared_dir(config)  # the workers' basetemp parent
        assert root is not None  # xdist itself needs pytest's tmp_path plugin
        return scheduling_class()(config, log, root=root)
