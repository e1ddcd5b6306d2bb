"""run/schedule.py: SpecdecScheduling after a worker crash: the crashed test is not run again, the rest of its work
unit runs on the replacement worker, and the units the dead worker had completed are not requeued."""

from __future__ import annotations

import collections
import json
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from pytest_specdec.engines.rules import BUNDLED_TARGET
from pytest_specdec.run import schedule
from tests.helpers import STRICT_INI

FAKE = Path(__file__).resolve().parent / "fakesglang"

#: One exclusive profile: its tests form the work unit ``specdec``. They ask for ``specdec_profile`` alone, so no
#: server starts.
PROFILES = f"""
profiles:
  eagle3:
    server: sglang
    model_path: {BUNDLED_TARGET}
    env: {json.dumps({"PYTHONPATH": str(FAKE)})}
"""

PLUGINS = ("-p", "xdist", "-p", "no:cacheprovider", "-p", "no:benchmark", "--server-profile=eagle3")


class _Node:
    """The part of xdist's ``WorkerController`` the scheduler uses: what it was sent, and whether it was shut down."""

    def __init__(self, name: str) -> None:
        self.gateway = SimpleNamespace(id=name)
        self.sent: list[int] = []
        self.shutting_down = False

    def send_runtest_some(self, indices: list[int]) -> None:
        self.sent.extend(indices)

    def shutdown(self) -> None:
        self.shutting_down = True


COLLECTION = ["t.py::test_1", "t.py::test_2", "t.py::test_3", "t.py::test_4", "t.py::test_5"]


def _scheduler(pytester: pytest.Pytester, tmp_path: Path, *nodes: _Node) -> Any:
    """SpecdecScheduling over COLLECTION (each test its own unit, as plain tests are), every node collected."""
    schedule.write_units(tmp_path, "gw0", {})
    config = pytester.parseconfig("-p", "xdist", f"--tx={len(nodes)}*popen")
    sched = schedule.scheduling_class()(config, root=tmp_path)
    for node in nodes:
        sched.add_node(node)
        sched.add_node_collection(node, COLLECTION)
    sched.schedule()
    return sched


def test_a_crashed_test_is_reported_and_neither_it_nor_a_completed_unit_is_requeued(
    pytester: pytest.Pytester, tmp_path: Path
) -> None:
    gw0 = _Node("gw0")
    sched = _scheduler(pytester, tmp_path, gw0)
    assert gw0.sent == [0, 1]  # test_1, and test_2 to hold as the next test
    sched.mark_test_complete(gw0, 0)
    assert gw0.sent == [0, 1, 2]
    assert sched.remove_node(gw0) == "t.py::test_2"
    # xdist 3.8 requeued test_1's unit (completed: sent to no worker, an empty unit) and test_2 (run again)
    assert dict(sched.workqueue) == {"t.py::test_4": {"t.py::test_4": False}, "t.py::test_5": {"t.py::test_5": False},
                                     "t.py::test_3": {"t.py::test_3": False}}  # fmt: skip
    # A replacement gets two tests (it starts one only once it holds the next), then the last one and a shutdown.
    gw1 = _Node("gw1")
    sched.add_node(gw1)
    sched.add_node_collection(gw1, COLLECTION)
    sched.schedule()
    assert gw1.sent == [3, 4] and not gw1.shutting_down
    sched.mark_test_complete(gw1, 3)
    sched.mark_test_complete(gw1, 4)
    assert gw1.sent == [3, 4, 2] and gw1.shutting_down
    sched.mark_test_complete(gw1, 2)
    assert sched.remove_node(gw1) is None  # finished: nothing crashed
    assert not sched.workqueue


def test_a_replacement_given_a_single_test_is_shut_down_so_it_runs_it(
    pytester: pytest.Pytester, tmp_path: Path
) -> None:
    gw0, gw1 = _Node("gw0"), _Node("gw1")
    sched = _scheduler(pytester, tmp_path, gw0, gw1)
    sched.mark_test_complete(gw1, 1)
    sched.mark_test_complete(gw1, 3)
    assert gw0.sent == [0, 2] and gw1.sent == [1, 3, 4] and gw1.shutting_down
    assert sched.remove_node(gw0) == "t.py::test_1"
    gw2 = _Node("gw2")
    sched.add_node(gw2)
    sched.add_node_collection(gw2, COLLECTION)
    sched.schedule()
    # xdist 3.8 sent test_3 alone and no shutdown: gw2 waited for a next test forever
    assert gw2.sent == [2] and gw2.shutting_down


def test_without_the_xdist_state_it_knows_the_scheduler_is_xdist_own(pytester: pytest.Pytester, tmp_path: Path) -> None:
    gw0 = _Node("gw0")
    sched = _scheduler(pytester, tmp_path, gw0)
    sched.assigned_work = collections.UserDict(sched.assigned_work)
    assert sched.remove_node(gw0) == "t.py::test_1"
    # xdist's own remove_node: the crashed test is requeued, still pending
    assert sched.workqueue["t.py::test_1"] == {"t.py::test_1": False}


CRASH_UNIT = """
import os

def test_crash(specdec_profile):
    with open("runs.txt", "a") as f:
        f.write("crash\\n")
    os._exit(1)

def test_after(specdec_profile):
    with open("runs.txt", "a") as f:
        f.write("after\\n")
"""


@pytest.mark.slow
@pytest.mark.parametrize(
    ("workers", "plain"), [("1", True), ("2", True), ("2", False)], ids=["n1", "n2", "n2-unit-alone"]
)
def test_a_crashed_specdec_test_runs_once_and_the_rest_of_its_unit_runs(
    pytester: pytest.Pytester, workers: str, plain: bool
) -> None:
    """xdist 3.8 put the crashed test back with its unit: each replacement worker ran it again, until
    --max-worker-restart was spent (the unit alone: 3 crashes here, 9 with -n 2's default of 8) or a replacement
    handed one test waited for a second forever (beside test_plain); test_after never ran."""
    pytester.makeini(STRICT_INI)
    pytester.makefile(".yaml", specdec=PROFILES)
    if plain:
        pytester.makepyfile(test_plain="def test_pass_1():\n    pass\n\ndef test_pass_2():\n    pass\n")
    pytester.makepyfile(test_unit=CRASH_UNIT)
    result = pytester.runpytest_subprocess("-n", workers, "--max-worker-restart=2", *PLUGINS, timeout=120)
    assert result.ret == pytest.ExitCode.TESTS_FAILED, result.stdout.str()
    result.assert_outcomes(passed=3 if plain else 1, failed=1)
    result.stdout.fnmatch_lines(["*worker 'gw*' crashed while running 'test_unit.py::test_crash[[]eagle3[]]'*"])
    assert (pytester.path / "runs.txt").read_text().split() == ["crash", "after"]
    assert result.stdout.str().count("replacing crashed worker") == 1


#: On the controller (the workers run no conftest hook here that matters): it handles one worker's events in order,
#: so test_2's start comes after test_1's completion, and the work that completion sent. test_2 crashes only then:
#: a worker that died before that send made the controller's send fail (INTERNALERROR, pytest-dev/pytest-xdist#204).
HANDLED_CONFTEST = """
import os
from pathlib import Path

def pytest_runtest_logstart(nodeid, location):
    if "PYTEST_XDIST_WORKER" not in os.environ and nodeid.endswith("::test_2"):
        Path("test_2-started").touch()
"""

SEVEN_PLAIN = """
import os, time
from pathlib import Path

def test_1():
    pass

def test_2():
    deadline = time.monotonic() + 60
    while not Path("test_2-started").exists() and time.monotonic() < deadline:
        time.sleep(0.05)
    os._exit(1)
""" + "".join(f"\ndef test_{i}():\n    pass\n" for i in range(3, 8))


@pytest.mark.slow
def test_a_worker_that_crashes_after_completing_a_unit_does_not_hang_the_run(pytester: pytest.Pytester) -> None:
    """The worker completes the specdec unit and test_1, then crashes in test_2. xdist 3.8 requeued both completed
    units, empty, behind test_5 to test_7: the replacement, given one of them at a completion, sat waiting for a
    test that never came (and, before that, was handed test_5 alone)."""
    pytester.makeini(STRICT_INI)
    pytester.makefile(".yaml", specdec=PROFILES)
    pytester.makeconftest(HANDLED_CONFTEST)
    pytester.makepyfile(
        test_a_unit="def test_m1(specdec_profile):\n    pass\n\ndef test_m2(specdec_profile):\n    pass\n"
    )
    pytester.makepyfile(test_plain=SEVEN_PLAIN)
    result = pytester.runpytest_subprocess("-n", "1", *PLUGINS, timeout=120)
    assert result.ret == pytest.ExitCode.TESTS_FAILED, result.stdout.str()
    result.assert_outcomes(passed=8, failed=1)
    result.stdout.fnmatch_lines(["*worker 'gw0' crashed while running 'test_plain.py::test_2'*"])
