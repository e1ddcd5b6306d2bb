"""serve/sharing.py: one server per key across processes, refcounted, torn down once (also after a crash)."""

from __future__ import annotations

import contextlib
import json
import os
import re
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import httpx
import psutil
import pytest

from pytest_specdec.core.errors import ServerError, ServerStartError
from pytest_specdec.engines.base import LaunchSpec
from pytest_specdec.serve import server
from pytest_specdec.serve.ports import find_free_port
from pytest_specdec.serve.server import ServerProcess
from pytest_specdec.serve.sharing import shared_server, sweep_shared

FAKE = Path(__file__).with_name("fakeserver.py")
HOST = "127.0.0.1"


def gone(pid: int) -> bool:
    try:
        return psutil.Process(pid).status() == psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return True


def fake_start(log_dir: Path, *flags: str, starts: list[int] | None = None):  # type: ignore[no-untyped-def]
    def start(on_launch) -> ServerProcess:  # type: ignore[no-untyped-def]
        port = find_free_port(HOST)
        spec = LaunchSpec(
            argv=(sys.executable, str(FAKE), "--port", str(port), *flags),
            env={"PATH": os.environ["PATH"]},
            host=HOST,
            port=port,
        )
        proc = ServerProcess.start(spec, name="eagle3", log_path=log_dir / "eagle3.log", on_launch=on_launch)
        proc.wait_ready(lambda: httpx.get(spec.base_url + "/health", timeout=1.0).status_code == 200, timeout_s=60)
        if starts is not None:
            starts.append(proc.pid)
        return proc

    return start


@pytest.fixture(autouse=True)
def no_leftovers() -> Iterator[None]:
    yield
    assert server.leftovers() == []


def read_state(root: Path) -> dict:
    return json.loads((root / "specdec-server-eagle3.json").read_text())


# -- in one process -----------------------------------------------------------------------------------------------


def test_second_user_reuses_and_last_out_stops(tmp_path: Path) -> None:
    starts: list[int] = []
    start = fake_start(tmp_path, starts=starts)
    with shared_server("eagle3", tmp_path, start) as first:
        assert first.started_here
        with shared_server("eagle3", tmp_path, start) as second:
            assert not second.started_here
            assert (second.base_url, second.pid) == (first.base_url, first.pid)
            assert len(read_state(tmp_path)["users"]) == 2
        assert first.alive()  # one user left: still running
        assert httpx.get(first.base_url + "/health").status_code == 200
    assert starts == [first.pid]
    assert gone(first.pid)
    state = read_state(tmp_path)
    assert state["status"] == "stopped"
    assert state["users"] == []
    assert state["starts"] == 1
    assert state["stop"]["by"] == f"last user pid {os.getpid()}"


def test_failed_start_is_shared_not_retried(tmp_path: Path) -> None:
    starts: list[int] = []
    with pytest.raises(ServerStartError) as first:
        with shared_server("eagle3", tmp_path, fake_start(tmp_path, "--crash-at", "0")):
            pass
    assert first.value.cause == "out of memory"
    with pytest.raises(ServerStartError) as second:
        with shared_server("eagle3", tmp_path, fake_start(tmp_path, starts=starts)):
            pass
    assert starts == []  # not launched again
    assert str(second.value) == f"{first.value} [started by pid {os.getpid()}]"
    assert second.value.cause == "out of memory"
    assert second.value.log_path == tmp_path / "eagle3.log"
    assert "torch.OutOfMemoryError" in second.value.log_tail


def test_dead_server_with_live_users_is_an_error(tmp_path: Path) -> None:
    with shared_server("eagle3", tmp_path, fake_start(tmp_path)) as first:
        os.kill(first.pid, signal.SIGKILL)
        with contextlib.suppress(psutil.NoSuchProcess):  # its supervisor may have reaped it already
            psutil.Process(first.pid).wait(timeout=10)
        assert not first.alive()
        with pytest.raises(ServerError) as info:
            first.check_alive()
        assert str(info.value) == (
            f"shared server 'eagle3' (pid {first.pid}) died while running; log: {tmp_path / 'eagle3.log'}"
        )
        with pytest.raises(ServerError) as info:
            with shared_server("eagle3", tmp_path, fake_start(tmp_path)):
                pass
        assert str(info.value) == (
            f"shared server 'eagle3' (pid {first.pid}) died while 1 other worker(s) used it; "
            f"log: {tmp_path / 'eagle3.log'}"
        )


# -- across processes ---------------------------------------------------------------------------------------------

USER_SCRIPT = """
import os, sys, time
from pathlib import Path
sys.path.insert(0, {tests!r})
import httpx
from pytest_specdec.engines.base import LaunchSpec
from pytest_specdec.serve.ports import find_free_port
from pytest_specdec.serve.server import ServerProcess
from pytest_specdec.serve.sharing import shared_server

root, mode, count = Path(sys.argv[1]), sys.argv[2], int(sys.argv[3])

def start(on_launch):
    if mode == "sleep":
        port = find_free_port("127.0.0.1")
        spec = LaunchSpec(argv=(sys.executable, "-c", "import time; time.sleep(60)"),
                          env={{"PATH": os.environ["PATH"]}}, host="127.0.0.1", port=port)
        proc = ServerProcess.start(spec, name="eagle3", log_path=root / "eagle3.log", on_launch=on_launch)
    else:
        port = find_free_port("127.0.0.1")
        orphan = [] if mode == "die-starting" else ["--orphan", str(root / "gc.pid")]
        spec = LaunchSpec(argv=(sys.executable, {fake!r}, "--port", str(port), *orphan,
                                *(["--never-ready"] if mode == "die-starting" else [])),
                          env={{"PATH": os.environ["PATH"]}}, host="127.0.0.1", port=port)
        proc = ServerProcess.start(spec, name="eagle3", log_path=root / "eagle3.log", on_launch=on_launch)
        if mode == "die-starting":
            os._exit(1)  # a worker dying while it waits for the server it launched
        proc.wait_ready(lambda: httpx.get(spec.base_url + "/health", timeout=1).status_code == 200, timeout_s=60)
    with open(root / "launched.txt", "a") as f:
        f.write(f"{{proc.pid}}\\n")
    return proc

for _ in range(count):
    with shared_server("eagle3", root, start) as s:
        if mode == "crash":
            while not (root / "gc.pid").exists():
                time.sleep(0.05)
            time.sleep(0.5)  # let the descendant snapshot see the grandchild
            os._exit(1)      # a crashed worker: never leaves
"""


def run_users(tmp_path: Path, mode: str, count: int, processes: int) -> list[subprocess.CompletedProcess[bytes]]:
    script = tmp_path / "user.py"
    script.write_text(USER_SCRIPT.format(tests=str(Path(__file__).parent), fake=str(FAKE)))
    root = tmp_path / "share"
    root.mkdir(exist_ok=True)
    # As an xdist worker: its servers belong to its parent (here this test), so a crashed user leaves them running.
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).parents[1]), "PYTEST_XDIST_WORKER": "gw0"}
    procs = [
        subprocess.Popen([sys.executable, str(script), str(root), mode, str(count)], env=env, stderr=subprocess.PIPE)
        for _ in range(processes)
    ]
    results = []
    for proc in procs:
        _, err = proc.communicate(timeout=120)
        results.append(subprocess.CompletedProcess(proc.args, proc.returncode, None, err))
    return results


@pytest.mark.slow
def test_many_writers_keep_the_state_consistent(tmp_path: Path) -> None:
    results = run_users(tmp_path, "sleep", count=8, processes=5)
    assert [r.returncode for r in results] == [0] * 5, [r.stderr for r in results]
    root = tmp_path / "share"
    state = read_state(root)
    assert state["status"] == "stopped"
    assert state["users"] == []
    launched = [int(line) for line in (root / "launched.txt").read_text().split()]
    assert state["starts"] == len(launched)  # no start lost or double-counted
    assert all(gone(pid) for pid in launched)
    assert not list(root.glob("*.tmp"))


@pytest.mark.slow
def test_sweep_stops_the_server_of_a_crashed_last_user(tmp_path: Path) -> None:
    (result,) = run_users(tmp_path, "crash", count=1, processes=1)
    assert result.returncode == 1, result.stderr
    root = tmp_path / "share"
    state = read_state(root)
    assert state["status"] == "running"
    pid = state["pid"]
    grandchild = int((root / "gc.pid").read_text())
    assert not gone(pid) and not gone(grandchild)
    (line,) = sweep_shared(root, timeout_s=1.0)
    assert re.fullmatch(
        rf"shared server 'eagle3' \(pid {pid}\) was still running at session end \(1 of 1 recorded user\(s\) gone "
        rf"without leaving, e.g. a crashed worker\); server 'eagle3' \(pid {pid}\) stopped in \d+\.\d\d s; "
        rf"SIGKILL needed for pid {grandchild}",
        line,
    ), line
    assert gone(pid) and gone(grandchild)
    assert read_state(root)["status"] == "stopped"
    assert sweep_shared(root) == []


def test_server_of_a_worker_that_died_while_starting_is_replaced(tmp_path: Path) -> None:
    (result,) = run_users(tmp_path, "die-starting", count=1, processes=1)
    assert result.returncode == 1, result.stderr
    root = tmp_path / "share"
    state = read_state(root)
    assert state["status"] == "starting"
    orphan = state["pid"]
    assert not gone(orphan)
    starts: list[int] = []
    with shared_server("eagle3", root, fake_start(root, starts=starts), stop_timeout_s=1.0) as info:
        assert gone(orphan)  # cleaned up before the new launch
        assert info.started_here and info.pid == starts[0] != orphan
        assert read_state(root)["starts"] == 2
    assert gone(info.pid)


# -- under pytest-xdist -------------------------------------------------------------------------------------------

XDIST_CONFTEST = """
import os, sys
from pathlib import Path
import httpx, pytest
from pytest_specdec.engines.base import LaunchSpec
from pytest_specdec.serve.ports import find_free_port
from pytest_specdec.serve.server import ServerProcess
from pytest_specdec.serve.sharing import shared_server, sweep_shared

OUT = Path({out!r})

@pytest.fixture(scope="session")
def srv(tmp_path_factory):
    root = tmp_path_factory.getbasetemp().parent
    def start(on_launch):
        port = find_free_port("127.0.0.1")
        spec = LaunchSpec(
            argv=(sys.executable, {fake!r}, "--port", str(port), "--count-file", str(OUT / "starts.txt"),
                  "--orphan", str(OUT / "gc.pid")),
            env={{"PATH": os.environ["PATH"]}}, host="127.0.0.1", port=port)
        proc = ServerProcess.start(spec, name="eagle3", log_path=root / "eagle3.log", on_launch=on_launch)
        proc.wait_ready(lambda: httpx.get(spec.base_url + "/health", timeout=1).status_code == 200, timeout_s=60)
        return proc
    # the grandchild ignores SIGTERM: a short grace keeps the test fast
    with shared_server("eagle3", root, start, stop_timeout_s=1.0) as s:
        (OUT / f"user-{{os.getpid()}}").write_text(f"{{s.pid}} {{s.base_url}}")
        yield s

def pytest_sessionfinish(session):
    if not hasattr(session.config, "workerinput"):
        # the controller's basetemp is the workers' parent (xdist workermanage.py: basetemp / "gw0")
        lines = sweep_shared(session.config._tmp_path_factory.getbasetemp())
        (OUT / "sweep.txt").write_text("\\n".join(lines))
"""

XDIST_TESTS = """
import os, time, httpx, pytest

@pytest.mark.parametrize("i", range(12))
def test_use(srv, i):
    assert httpx.get(srv.base_url + "/health", timeout=5).status_code == 200
    time.sleep(0.4)
    if {crash} and i == 2:
        os._exit(1)
"""


@pytest.mark.slow
@pytest.mark.parametrize("crash", [False, True], ids=["clean", "worker-crash"])
def test_xdist_one_server_for_four_workers(
    pytester: pytest.Pytester, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, crash: bool
) -> None:
    monkeypatch.setenv("PYTHONPATH", str(Path(__file__).parents[1]))  # works before `pip install -e .` too
    out = tmp_path / "out"
    out.mkdir()
    pytester.makeconftest(XDIST_CONFTEST.format(out=str(out), fake=str(FAKE)))
    pytester.makepyfile(test_shared=XDIST_TESTS.format(crash=crash))
    args = ("-n", "4", "-p", "xdist", "-p", "no:cacheprovider")
    # The clean controller in process (its workers are subprocesses anyway): no fifth interpreter and plugin import.
    # A worker crash keeps its subprocess and timeout: an in-process controller that hung on it would hang the suite.
    result = pytester.runpytest_subprocess(*args, timeout=180) if crash else pytester.runpytest_inprocess(*args)
    if crash:
        result.assert_outcomes(passed=11, failed=1)
        result.stdout.fnmatch_lines(["*worker 'gw*' crashed while running 'test_shared.py::test_use[[]2[]]'*"])
    else:
        result.assert_outcomes(passed=12)
        assert result.ret == pytest.ExitCode.OK
    starts = (out / "starts.txt").read_text().split()
    assert len(starts) == 1, starts  # one server for every worker
    users = {p.name: p.read_text() for p in out.glob("user-*")}
    assert len(users) >= 4, users
    assert len(set(users.values())) == 1  # same pid and url everywhere
    server_pid = int(starts[0])
    grandchild = int((out / "gc.pid").read_text())
    assert gone(server_pid) and gone(grandchild)
    assert (out / "sweep.txt").read_text() == ""  # the last live worker tore it down, not the controller


def test_a_server_gone_before_its_state_is_written_is_recorded_as_not_running() -> None:
    # Flake hunt seed 224: a fake server crashing at 0 s was gone when the shared state read its start time, and
    # psutil.NoSuchProcess escaped instead of the start error the wait reports.
    from pytest_specdec.serve import sharing

    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()
    assert sharing._created(dead.pid) == 0.0
    assert sharing._created(os.getpid()) > 0.0
