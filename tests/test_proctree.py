"""Tests of pytest_specdec.serve.proctree's liveness check: pid plus start time, a zombie counts as gone."""

from __future__ import annotations

import subprocess
import sys
import time

import psutil

from pytest_specdec.serve.proctree import alive, running, zombie


def _wait_zombie(proc: psutil.Process, timeout_s: float = 10.0) -> None:
    deadline = time.monotonic() + timeout_s
    while not zombie(proc) and time.monotonic() < deadline:
        time.sleep(0.01)
    assert zombie(proc)


def test_running_process_with_its_start_time() -> None:
    me = psutil.Process()
    assert running(me.pid, me.create_time())
    assert alive(me)
    assert not zombie(me)


def test_another_start_time_is_another_process() -> None:
    # the pid reused by a later process: the recorded start time no longer matches
    me = psutil.Process()
    assert not running(me.pid, me.create_time() - 3600.0)
    assert not running(me.pid, 0.0)


def test_zombie_is_dead_and_reaped_is_gone() -> None:
    child = subprocess.Popen([sys.executable, "-c", "pass"])
    proc = psutil.Process(child.pid)
    create_time = proc.create_time()
    _wait_zombie(proc)  # exited, not yet waited for
    assert not running(child.pid, create_time)
    assert not alive(proc)
    child.wait()
    assert not running(child.pid, create_time)
    assert not alive(proc)
    assert not zombie(proc)  # gone: not a zombie either


def test_a_process_that_never_existed() -> None:
    pid = 2**22 + 12345  # above the largest pid_max Linux allows (2**22)
    assert not running(pid, 1.0)
