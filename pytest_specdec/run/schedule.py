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
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import pytest

from pytest_specdec.core import xdistnode

__all__ = ["XdistSchedule", "read_units", "scheduling_class", "unit_of", "write_units"]

_PREFIX = "specdec-units-"


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
    """Registered on the xdist controller (only when xdist is installed): picks ``SpecdecScheduling``."""

    def __init__(self, config: pytest.Config) -> None:
        self.config = config

    @pytest.hookimpl(tryfirst=True)
    def pytest_xdist_make_scheduler(self, config: pytest.Config, log: Any) -> Any:
        if config.getvalue("dist") != "load":
            return None  # an explicit --dist mode other than load is the user's choice
        root = xdistnode.shared_dir(config)  # the workers' basetemp parent
        assert root is not None  # xdist itself needs pytest's tmp_path plugin
        return scheduling_class()(config, log, root=root)
