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
baselines keep the ids of a run without xdist).
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

    return SpecdecScheduling


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
