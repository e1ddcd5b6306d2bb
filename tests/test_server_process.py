"""Fault matrix for pytest_specdec.serve.server, against tests/fakeserver.py (one flag per fault, no torch)."""

from __future__ import annotations

import fnmatch
import os
import re
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import psutil
import pytest

from pytest_specdec.core.errors import ServerError, ServerStartError
from pytest_specdec.engines.base import LaunchSpec
from pytest_specdec.serve import readiness, server
from pytest_specdec.serve.diagnosis import diagnose_exit
from pytest_specdec.serve.ports import find_free_port, port_holder, port_is_free
from pytest_specdec.serve.server import ServerProcess

FAKE = Path(__file__).with_name("fakeserver.py")
HOST = "127.0.0.1"


def make_spec(
    *flags: str, port: int | None = None, env: dict[str, str] | None = None, derived: tuple[int, ...] = ()
) -> LaunchSpec:
    port = port or find_free_port(HOST)
    argv = (sys.executable, str(FAKE), "--port", str(port), *flags)
    return LaunchSpec(argv=argv, env=env or {"PATH": os.environ["PATH"]}, host=HOST, port=port, derived_ports=derived)


def health(base_url: str):  # type: ignore[no-untyped-def]
    def probe() -> bool:
        return httpx.get(base_url + "/health", timeout=1.0).status_code == 200

    return probe


def gone(pid: int) -> bool:
    try:
        return psutil.Process(pid).status() == psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return True


def wait_file(path: Path, timeout_s: float = 10.0) -> str:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if path.exists() and path.read_text():
            return path.read_text()
        time.sleep(0.02)
    raise AssertionError(f"{path} not written within {timeout_s} s")


@pytest.fixture(autouse=True)
def no_leftovers() -> Iterator[None]:
    """Every test must leave no server process behind."""
    yield
    left = server.leftovers()
    assert left == [], f"leftover processes: {left}"


def start(spec: LaunchSpec, tmp_path: Path) -> ServerProcess:
    return ServerProcess.start(spec, name="eagle3", log_path=tmp_path / "logs" / "eagle3.log")


# -- the happy path -----------------------------------------------------------------------------------------------


def test_ready_then_stop(tmp_path: Path) -> None:
    spec = make_spec()
    proc = start(spec, tmp_path)
    ready_s = proc.wait_ready(health(proc.base_url), timeout_s=60)
    assert 0 < ready_s < 60
    assert proc.alive()
    assert proc.base_url == f"http://{HOST}:{spec.port}"
    assert httpx.get(proc.base_url + "/health").status_code == 200
    report = proc.stop()
    assert report.clean, report
    assert report.killed_pids == ()
    assert report.returncode == 0  # the fake exits 0 on SIGTERM
    assert proc.pid in report.terminated_pids
    assert gone(proc.pid)
    assert port_is_free(HOST, spec.port)
    assert proc.stop() is report  # idempotent
    assert re.fullmatch(rf"server 'eagle3' \(pid {proc.pid}\) stopped in \d+\.\d\d s", report.describe())


def test_context_manager_stops(tmp_path: Path) -> None:
    with start(make_spec(), tmp_path) as proc:
        proc.wait_ready(health(proc.base_url), timeout_s=60)
    assert proc.stop_report is not None and proc.stop_report.clean
    assert gone(proc.pid)


def test_env_is_exactly_the_spec_env(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("NCCL_CUMEM_ENABLE", "0")
    spec = make_spec("--print-env", env={"PATH": os.environ["PATH"], "SPECDEC_PROFILE_VAR": "1"})
    with start(spec, tmp_path) as proc:
        proc.wait_ready(health(proc.base_url), timeout_s=60)
    env_line = next(line for line in proc.log_path.read_text().splitlines() if line.startswith("ENV "))
    assert "SPECDEC_PROFILE_VAR" in env_line.split()
    assert "NCCL_CUMEM_ENABLE" not in env_line.split()


def test_probe_exceptions_mean_not_yet(tmp_path: Path) -> None:
    calls = []

    def probe() -> bool:
        calls.append(1)
        if len(calls) < 4:
            raise httpx.ConnectError("connection refused")
        return True

    with start(make_spec(), tmp_path) as proc:
        proc.wait_ready(probe, timeout_s=60, poll_s=0.01)
    assert len(calls) == 4


def test_slow_start_reports_progress(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # Reports every 0.1 s instead of 0.5 s: a 0.6 s slow start then spans several, as 1.5 s did at 0.5 s.
    monkeypatch.setattr(readiness, "_PROGRESS_INTERVAL_S", 0.1)
    seen: list[tuple[float, float, str]] = []
    with start(make_spec("--slow-start", "0.6"), tmp_path) as proc:
        proc.wait_ready(
            health(proc.base_url), timeout_s=60, stall_s=5, on_progress=lambda e, b, line: seen.append((e, b, line))
        )
    assert len(seen) >= 2
    assert all(budget == 60 for _, budget, _ in seen)
    assert [e for e, _, _ in seen] == sorted(e for e, _, _ in seen)
    assert any(line.startswith("Capturing batches (bs=") for _, _, line in seen)


# -- startup faults -----------------------------------------------------------------------------------------------


def test_oom_at_startup(tmp_path: Path) -> None:
    proc = start(make_spec("--crash-at", "0.3"), tmp_path)
    t0 = time.monotonic()
    with pytest.raises(ServerStartError) as info:
        proc.wait_ready(health(proc.base_url), timeout_s=600)
    assert time.monotonic() - t0 < 30  # fails fast, not after the 600 s budget
    err = info.value
    log = tmp_path / "logs" / "eagle3.log"
    # One line, as a death with no cause found: cause, exit code, the log's last lines once, launch command (a
    # fresh-user trial read no command here, and the 20-line tail appended to the message twice, once per test).
    command = f"{sys.executable} {FAKE} --port {proc.spec.port} --crash-at 0.3"
    assert re.fullmatch(
        rf"server 'eagle3' exited with code 1 before it was ready \(cause: out of memory\) after \d+\.\d s: "
        rf"torch.OutOfMemoryError: CUDA out of memory\..* at sglang/srt/model_executor/cuda_graph_runner.py:391; "
        r'its last lines besides that one: "File "[^"]+cuda_graph_runner.py", line 391, in capture", '
        r'"out = self.capture_one_batch_size\(bs, forward\)"; '
        rf"log: {re.escape(str(log))}; fix: run its launch command by hand to see why it exits: {re.escape(command)}",
        str(err),
    ), str(err)
    assert err.cause == "out of memory"
    assert err.profile == "eagle3"
    assert err.log_path == log
    assert "torch.OutOfMemoryError" in err.log_tail
    assert gone(proc.pid)


@pytest.mark.parametrize(
    ("flags", "cause", "code", "needle"),
    [
        (("--no-such-flag",), "bad flag", 2, "unrecognized arguments: --no-such-flag"),
        (("--model-path", "/nonexistent/model"), "missing model path", 1, "No such file or directory"),
        (
            ("--crash-at", "0", "--crash-text", "RuntimeError: NCCL error in: nccl.cpp:12, unhandled cuda error"),
            "CUDA/NCCL error",
            1,
            "NCCL error",
        ),
    ],
)
def test_exit_before_ready_is_classified(
    tmp_path: Path, flags: tuple[str, ...], cause: str, code: int, needle: str
) -> None:
    proc = start(make_spec(*flags), tmp_path)
    with pytest.raises(
        ServerStartError, match=rf"exited with code {code} before it was ready \(cause: {cause}\)"
    ) as info:
        proc.wait_ready(health(proc.base_url), timeout_s=600)
    assert info.value.cause == cause
    assert needle in str(info.value)
    assert gone(proc.pid)


def test_exit_before_ready_with_no_cause_in_the_log_says_what_is_known(tmp_path: Path) -> None:
    """A log no cause matches: the message gave "(cause: unknown)" (a fresh-user trial). It says what is known
    instead: the exit code, the log's last lines, its path, and the launch command to run by hand, with the
    variables the shell lacks."""
    env = {"PATH": os.environ["PATH"], "SPECDEC_TEST_KNOB": "a b"}
    spec = make_spec("--crash-at", "0", "--crash-text", "segfault somewhere", "--crash-code", "139", env=env)
    proc = start(spec, tmp_path)
    with pytest.raises(ServerStartError) as info:
        proc.wait_ready(health(proc.base_url), timeout_s=600)
    first = str(info.value).splitlines()[0]
    command = f"SPECDEC_TEST_KNOB='a b' {sys.executable} {FAKE} --port {spec.port} --crash-at 0 --crash-text " \
        "'segfault somewhere' --crash-code 139"  # fmt: skip
    seconds = re.fullmatch(r"server 'eagle3' exited with code 139 before it was ready after (\d+\.\d) s \(.*", first)
    assert seconds is not None, first
    assert first == (
        f"server 'eagle3' exited with code 139 before it was ready after {seconds[1]} s (no cause found in its log; "
        f'its last 2 lines: "fake server pid {proc.pid} starting on port {spec.port}", "segfault somewhere"); '
        f"log: {proc.log_path}; fix: run its launch command by hand to see why it exits: {command}"
    )
    assert info.value.cause == "unknown"
    assert info.value.log_tail.splitlines()[-1] == "segfault somewhere"
    assert gone(proc.pid)


def test_port_taken_at_bind_is_classified(tmp_path: Path) -> None:
    with socket.socket() as held:
        held.bind((HOST, 0))
        held.listen()
        proc = start(make_spec("--bind-also", str(held.getsockname()[1])), tmp_path)
        with pytest.raises(ServerStartError, match=r"exited with code 1 before it was ready \(cause: port in use\)"):
            proc.wait_ready(health(proc.base_url), timeout_s=600)
    assert "Address already in use" in proc.log_path.read_text()


def test_killed_by_signal_before_ready(tmp_path: Path) -> None:
    proc = start(make_spec("--never-ready"), tmp_path)

    def kill_it(elapsed_s: float, budget_s: float, line: str) -> None:
        if line == "still loading":
            os.kill(proc.pid, signal.SIGKILL)

    with pytest.raises(ServerStartError) as info:
        proc.wait_ready(health(proc.base_url), timeout_s=600, on_progress=kill_it)
    assert re.match(
        r"server 'eagle3' was killed by signal 9 \(SIGKILL\) before it was ready after \d+\.\d s \(no cause found in "
        r'its log; its last [23] lines: ("fake server pid \d+ starting on port \d+", )?"still loading"'
        r'(, "still loading")*\): '
        r"something outside killed it \(the kernel OOM killer would say so in dmesg, which could not be read or had no "
        r"line for this server\); log: .*; fix: run its launch command by hand to see why it exits: ",
        str(info.value),
    ), str(info.value)


def test_never_ready_times_out(tmp_path: Path) -> None:
    proc = start(make_spec("--never-ready"), tmp_path)
    with pytest.raises(ServerStartError) as info:
        proc.wait_ready(health(proc.base_url), timeout_s=1.5)
    first = str(info.value).splitlines()[0]
    assert first == (
        f"server 'eagle3' was not ready after 1.5 s (startup_timeout_s); last line: 'still loading'; "
        f"log: {proc.log_path}"
    )
    assert info.value.cause == "timeout"
    assert gone(proc.pid)


def test_silent_log_stalls(tmp_path: Path) -> None:
    proc = start(make_spec("--silent-start", "60"), tmp_path)
    with pytest.raises(ServerStartError) as info:
        proc.wait_ready(health(proc.base_url), timeout_s=600, stall_s=1.0)
    first = str(info.value).splitlines()[0]
    assert re.fullmatch(
        rf"server 'eagle3' stalled before it was ready: no new log line for 1 s \(elapsed \d+\.\d s of 600 s\); "
        rf"last line: 'fake server pid {proc.pid} starting on port {proc.spec.port}'; raise startup_stall_s if this "
        rf"phase is legitimately silent; log: {re.escape(str(proc.log_path))}",
        first,
    ), first
    assert info.value.cause == "stalled"
    assert gone(proc.pid)


def test_port_held_by_another_process(tmp_path: Path) -> None:
    port = find_free_port(HOST)
    code = (
        f"import socket,time; s=socket.socket(); s.bind(('{HOST}',{port})); s.listen(); "
        "print('up',flush=True); time.sleep(60)"
    )
    holder = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE)
    try:
        assert holder.stdout is not None and holder.stdout.readline() == b"up\n"
        with pytest.raises(ServerStartError) as info:
            start(make_spec(port=port), tmp_path)
    finally:
        holder.kill()
        holder.wait()
        holder.stdout.close()  # type: ignore[union-attr]
    assert str(info.value) == (
        f"server 'eagle3' not launched: port {port} on {HOST} is in use by pid {holder.pid} ({sys.executable} -c "
        f"{code}); stop that process or choose another port"
    )
    assert info.value.cause == "port in use"
    assert not (tmp_path / "logs").exists()  # nothing was launched


def test_derived_port_held(tmp_path: Path) -> None:
    with socket.socket() as held:
        held.bind((HOST, 0))
        held.listen()
        derived = held.getsockname()[1]
        spec = make_spec(derived=(derived,))
        with pytest.raises(
            ServerStartError,
            match=rf"port {derived} \(derived from {spec.port}\) on {HOST} is in use by pid {os.getpid()} \(",
        ):
            start(spec, tmp_path)


def test_cannot_execute(tmp_path: Path) -> None:
    spec = LaunchSpec(argv=("/nonexistent/python", "-m", "sglang"), env={}, host=HOST, port=find_free_port(HOST))
    with pytest.raises(ServerStartError) as info:
        start(spec, tmp_path)
    assert (
        str(info.value) == "server 'eagle3' not launched: cannot run '/nonexistent/python': No such file or directory"
    )


def test_keyboard_interrupt_tears_down(tmp_path: Path) -> None:
    proc = start(make_spec("--never-ready"), tmp_path)

    def interrupt(elapsed_s: float, budget_s: float, line: str) -> None:
        if line:
            raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        proc.wait_ready(health(proc.base_url), timeout_s=600, on_progress=interrupt)
    assert proc.stop_report is not None
    assert gone(proc.pid)


def test_waiting_asks_a_pidfd_whether_the_server_exited_not_proc_files(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Flake hunt 28: a Ctrl-C landed inside psutil's open of /proc/PID/stat, which the start loop asked every 0.1 s
    in pytest's main thread; the file was left to the garbage collector, and under ``filterwarnings = error`` pytest
    exited 1 with a traceback instead of "interrupted" (tests/test_interrupt.py). The loop now polls a pidfd opened
    at launch: no file is opened per poll, while it runs or once it has exited."""
    if not hasattr(os, "pidfd_open"):
        pytest.skip("no pidfd_open here (Linux 5.3+ only): psutil answers")
    from pytest_specdec.serve import launch

    proc = start(make_spec("--never-ready"), tmp_path)
    try:
        def no_proc_files(pid: int, create_time: float) -> bool:
            raise AssertionError("exited() read /proc through psutil")

        monkeypatch.setattr(launch, "running", no_proc_files)
        polls = []

        def interrupt_after_a_while(elapsed_s: float, budget_s: float, line: str) -> None:
            polls.append(elapsed_s)
            if len(polls) > 3:
                raise KeyboardInterrupt

        with pytest.raises(KeyboardInterrupt):  # not AssertionError: no poll asked psutil
            proc.wait_ready(health(proc.base_url), timeout_s=600, on_progress=interrupt_after_a_while, poll_s=0.05)
        assert proc.exited()  # the pidfd says so after the teardown too
    finally:
        proc.stop()
    assert gone(proc.pid)


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="PR_SET_PDEATHSIG is Linux's")
def test_a_child_started_by_a_test_ends_with_the_test_process(tmp_path: Path) -> None:
    """``tests.helpers.dies_with_this_process``: an xdist worker ended by its controller's Ctrl-C runs no ``finally``,
    and a bisect a test had started went on as an orphan (a contributor trial). Here the parent ends without one."""
    script = (
        "import os, subprocess, sys\n"
        "from tests.helpers import dies_with_this_process\n"
        "child = subprocess.Popen(['sleep', '60'], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,\n"
        "                         preexec_fn=dies_with_this_process())\n"
        "print(child.pid, flush=True)\n"
        "os._exit(0)\n"
    )
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=60,
                          cwd=Path(__file__).resolve().parents[1])  # fmt: skip
    assert done.returncode == 0, done.stderr
    child = int(done.stdout)
    deadline = time.monotonic() + 10
    while not gone(child) and time.monotonic() < deadline:
        time.sleep(0.05)
    if not gone(child):
        os.kill(child, signal.SIGKILL)
        raise AssertionError(f"sleep (pid {child}) outlived the process that started it")


# -- running and teardown faults ----------------------------------------------------------------------------------


@pytest.mark.slow
def test_check_alive_after_death(tmp_path: Path) -> None:
    # 2 s between ready and death: on a loaded runner the 0.1 s health probe can miss a shorter window
    proc = start(make_spec("--die-after", "2.0"), tmp_path)
    proc.wait_ready(health(proc.base_url), timeout_s=60)
    proc.check_alive()  # still up
    deadline = time.monotonic() + 20
    while proc.alive() and time.monotonic() < deadline:
        time.sleep(0.05)
    with pytest.raises(ServerError) as info:
        proc.check_alive()
    # One line: the log's last lines quoted once (no 20-line tail under them), then the launch command.
    assert str(info.value) == (
        f"server 'eagle3' (pid {proc.pid}) exited with code 3 while running (cause: exception): "
        f'RuntimeError: scheduler died; its last lines besides that one: "fake server pid {proc.pid} starting on port '
        f'{proc.spec.port}", "The server is fired up and ready to roll!"; '
        f"log: {proc.log_path}; fix: run its launch command by hand to see why it exits: {sys.executable} {FAKE} "
        f"--port {proc.spec.port} --die-after 2.0"
    )
    assert info.value.log_path == proc.log_path


def test_setsid_grandchild_ignoring_sigterm_is_killed(tmp_path: Path) -> None:
    pid_file = tmp_path / "grandchild.pid"
    proc = start(make_spec("--orphan", str(pid_file)), tmp_path)
    proc.wait_ready(health(proc.base_url), timeout_s=60)
    grandchild = int(wait_file(pid_file))
    assert os.getsid(grandchild) != proc.pid  # it really left the server's session
    # Still the server's child: stop()'s own snapshot finds it (one found only by the watcher's earlier snapshots:
    # test_grandchild_reparented_after_server_death_is_still_killed).
    report = proc.stop(timeout_s=0.5)
    assert report.killed_pids == (grandchild,)
    assert grandchild in report.terminated_pids
    assert report.survivors == ()
    assert report.clean
    assert gone(grandchild) and gone(proc.pid)
    assert f"SIGKILL needed for pid {grandchild}" in report.describe()


def test_grandchild_reparented_after_server_death_is_still_killed(tmp_path: Path) -> None:
    """Only the snapshot taken while the server ran can find a setsid grandchild once its parent is gone."""
    pid_file = tmp_path / "grandchild.pid"
    proc = start(make_spec("--orphan", str(pid_file), "--die-after", "1.0"), tmp_path)
    proc.wait_ready(health(proc.base_url), timeout_s=60)
    grandchild = int(wait_file(pid_file))
    deadline = time.monotonic() + 20
    while proc.alive() and time.monotonic() < deadline:
        time.sleep(0.05)
    # The kernel re-parents the grandchild when its parent's exit completes, which a busy runner may show a moment
    # after the parent reads as exited: wait for that condition (bounded), then the test proper begins.
    while psutil.Process(grandchild).ppid() == proc.pid and time.monotonic() < deadline:
        time.sleep(0.05)
    assert psutil.Process(grandchild).ppid() != proc.pid  # re-parented: no longer a descendant
    report = proc.stop(timeout_s=0.1)  # the server is gone, the grandchild ignores SIGTERM: any grace ends in SIGKILL
    assert report.killed_pids == (grandchild,)
    assert report.returncode == 3
    assert gone(grandchild)


def test_sigterm_ignored_needs_sigkill(tmp_path: Path) -> None:
    proc = start(make_spec("--ignore-term"), tmp_path)
    proc.wait_ready(health(proc.base_url), timeout_s=60)
    report = proc.stop(timeout_s=0.1)  # it ignores SIGTERM: any grace ends in SIGKILL
    assert report.killed_pids == (proc.pid,)
    assert report.returncode == -signal.SIGKILL
    assert report.clean


def test_slow_graceful_shutdown_is_waited_for(tmp_path: Path) -> None:
    proc = start(make_spec("--term-delay", "0.2"), tmp_path)
    proc.wait_ready(health(proc.base_url), timeout_s=60)
    report = proc.stop(timeout_s=20)
    assert report.killed_pids == ()
    assert report.returncode == 0
    assert report.duration_s >= 0.2


def test_zombie_child_is_reaped_at_teardown(tmp_path: Path) -> None:
    """Issue 12: a <defunct> engine child was left after a real SGLang teardown. PID 1 of a container (and of this
    sandbox) may never reap the orphans it inherits; the supervisor, a child subreaper, reaps them."""
    pid_file = tmp_path / "zombie.pid"
    proc = start(make_spec("--zombie-child", str(pid_file)), tmp_path)
    proc.wait_ready(health(proc.base_url), timeout_s=60)
    child = int(wait_file(pid_file))
    assert psutil.Process(child).status() == psutil.STATUS_ZOMBIE  # the server never waits for it
    report = proc.stop()
    assert report.zombies == () and report.clean, report
    assert not psutil.pid_exists(child), psutil.Process(child).status()


def test_orphaned_grandchild_is_adopted_reaped_and_stopped(tmp_path: Path) -> None:
    pid_file = tmp_path / "grandchild.pid"
    proc = start(make_spec("--adopted-grandchild", str(pid_file)), tmp_path)
    proc.wait_ready(health(proc.base_url), timeout_s=60)
    grandchild = int(wait_file(pid_file))
    supervisor = psutil.Process(proc.pid).ppid()
    assert supervisor != os.getpid()  # the server's parent is its supervisor, not pytest
    deadline = time.monotonic() + 10
    while psutil.Process(grandchild).ppid() != supervisor and time.monotonic() < deadline:
        time.sleep(0.02)
    assert psutil.Process(grandchild).ppid() == supervisor  # adopted by the subreaper, not by PID 1
    report = proc.stop()
    assert grandchild in report.terminated_pids and report.clean, report
    assert not psutil.pid_exists(grandchild)
    assert not psutil.pid_exists(supervisor)  # it exits once the tree is gone, and we reaped it


OWNER_SCRIPT = """
import sys, time
from pathlib import Path
sys.path.insert(0, {tests!r})
from test_server_process import health, make_spec
from pytest_specdec.serve.server import ServerProcess

out = Path(sys.argv[1])
proc = ServerProcess.start(make_spec(*sys.argv[2:]), name="eagle3", log_path=out / "eagle3.log")
proc.wait_ready(health(proc.base_url), timeout_s=120)
(out / "server.txt").write_text(f"{{proc.pid}} {{proc.spec.port}}")
time.sleep(600)
"""


@pytest.mark.parametrize("flags", [(), ("--ignore-term",)], ids=["sigterm", "sigterm-ignored"])
def test_server_dies_with_its_sigkilled_owner(tmp_path: Path, flags: tuple[str, ...]) -> None:
    """Issue 16.1: however the launching process dies (here SIGKILL: no teardown code runs), its supervisor stops
    the server (SIGTERM, 1 s grace, SIGKILL) without waiting for a next run. Seconds: benchmarks/bench_lifecycle.py."""
    script = tmp_path / "owner.py"
    script.write_text(OWNER_SCRIPT.format(tests=str(Path(__file__).parent)))
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).parents[1])}
    owner = subprocess.Popen([sys.executable, str(script), str(tmp_path), *flags], env=env)
    try:
        pid, port = map(int, wait_file(tmp_path / "server.txt", timeout_s=120).split())
    finally:
        owner.kill()
        owner.wait()
    log = tmp_path / "eagle3.log"

    def said() -> bool:  # the supervisor writes its line after the server is reaped: on a busy runner, later
        return "[pytest-specdec supervisor]" in log.read_text()

    deadline = time.monotonic() + 10
    while (psutil.pid_exists(pid) or not port_is_free(HOST, port) or not said()) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not psutil.pid_exists(pid)  # stopped and reaped (not a zombie)
    assert port_is_free(HOST, port)
    last = log.read_text().splitlines()[-1]
    assert re.fullmatch(
        rf"\[pytest-specdec supervisor\] the pytest that launched it is gone: server 'eagle3' \(pid {pid}\) "
        rf"stopped in \d+\.\d\d s" + ("; SIGKILL needed for pid " + str(pid) if flags else ""),
        last,
    ), last


def test_leftovers_sweeps_unstopped_servers(tmp_path: Path) -> None:
    proc = start(make_spec(), tmp_path)
    proc.wait_ready(health(proc.base_url), timeout_s=60)
    found = server.leftovers()
    assert proc.pid in [p.pid for p in found]
    assert gone(proc.pid)
    assert server.leftovers() == []


# -- helpers ------------------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "cause"),
    [
        ("torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB", "out of memory"),
        ("RuntimeError: CUDA error: out of memory", "out of memory"),
        ("OSError: [Errno 98] Address already in use", "port in use"),
        ("Port 30000 is already in use", "port in use"),
        ("torch.distributed.DistBackendError: NCCL error in: ProcessGroupNCCL.cpp:1970", "CUDA/NCCL error"),
        ("RuntimeError: CUDA error: an illegal memory access was encountered", "CUDA/NCCL error"),
        ("huggingface_hub.errors.HFValidationError: Repo id must be in the form 'repo_name'", "missing model path"),
        ("OSError: /m does not appear to have a file named config.json", "missing model path"),
        ("OSError: foo is not a local folder and is not a valid model identifier listed on", "missing model path"),
        ("serve: error: unrecognized arguments: --speculative-num-step 3", "bad flag"),
        ("serve: error: argument --tp-size: invalid int value: 'x'", "bad flag"),
        ("error: argument --speculative-algorithm: invalid choice: 'EAGEL3'", "bad flag"),
        ("refserver: error: unsupported flag --enable-dp-attention: the reference server implements", "bad flag"),
        (
            "[2026-12-05 21:11:01] ref fault: --ref-fault-die-after-requests 3 reached; exiting with status 1",
            "reference server fault",
        ),
        ("[2026-12-05 21:11:01] ref fault: spawned orphan-prone child pid 12 (ignores SIGTERM)", "unknown"),
        ("Killed", "unknown"),
    ],
)
def test_diagnosed_cause(text: str, cause: str) -> None:
    assert diagnose_exit(f"INFO loading\n{text}\n").cause == cause


def test_port_helpers() -> None:
    port = find_free_port(HOST)
    assert port_is_free(HOST, port)
    assert port_holder(HOST, port) is None
    with socket.socket() as held:
        held.bind((HOST, port))
        held.listen()
        assert not port_is_free(HOST, port)
        holder = port_holder(HOST, port)
    assert holder is not None and holder.startswith(f"pid {os.getpid()} (")


# -- the bundled reference server's own fault knobs (imports torch: seconds per launch) ----------------------------

ASSETS = Path(__file__).parents[1] / "pytest_specdec" / "refserver" / "assets"


def ref_spec(*flags: str) -> LaunchSpec:
    port = find_free_port(HOST)
    argv = (sys.executable, "-m", "pytest_specdec.refserver", "--model-path", str(ASSETS / "target"), "--host", HOST,
            "--port", str(port), *flags)  # fmt: skip
    env = {"PATH": os.environ["PATH"], "PYTHONPATH": str(Path(__file__).parents[1])}
    return LaunchSpec(argv=argv, env=env, host=HOST, port=port)


@pytest.mark.slow
def test_reference_server_oom_fault(tmp_path: Path) -> None:
    proc = ServerProcess.start(ref_spec("--ref-fault-oom-at-startup", "0.5"), name="ref", log_path=tmp_path / "r.log")
    with pytest.raises(ServerStartError, match=r"exited with code 1 before it was ready \(cause: out of memory\)"):
        proc.wait_ready(health(proc.base_url), timeout_s=300)
    assert gone(proc.pid)


@pytest.mark.slow
def test_reference_server_dying_after_requests_is_named_by_its_fault(tmp_path: Path) -> None:
    """``--ref-fault-die-after-requests`` (docs/ci.md): the death mid-run read "(cause: unknown)" above a log tail
    whose last line said why."""
    proc = ServerProcess.start(
        ref_spec("--ref-fault-die-after-requests", "2", "--skip-server-warmup"), name="ref", log_path=tmp_path / "r.log"
    )
    proc.wait_ready(health(proc.base_url), timeout_s=300)
    gen = {"text": "x = 1\n", "sampling_params": {"max_new_tokens": 4, "temperature": 0}}
    for _ in range(2):
        assert httpx.post(proc.base_url + "/generate", json=gen, timeout=60).status_code == 200
    deadline = time.monotonic() + 30
    while proc.alive() and time.monotonic() < deadline:
        time.sleep(0.05)
    with pytest.raises(ServerError) as info:
        proc.check_alive("while running, after 2 of 4 measured requests succeeded")
    expected = (
        f"server 'ref' (pid {proc.pid}) exited with code 1 while running, after 2 of 4 measured requests succeeded "
        "(cause: reference server fault): ref fault: --ref-fault-die-after-requests 2 reached; exiting with status 1; "
        'its last lines besides that one: "Prefill batch, *", "Prefill batch, *"; log: '
        f"{proc.log_path}; fix: run its launch command by hand to see why it exits: *"
    )
    assert fnmatch.fnmatchcase(str(info.value), expected), str(info.value)
    assert "\n" not in str(info.value)
    # A later check (a second measurement on the dead server: its requests all failed) repeats the first diagnosis.
    with pytest.raises(ServerError) as again:
        proc.check_alive("while running, before any of 4 measured requests succeeded")
    assert str(again.value) == str(info.value)


@pytest.mark.slow
def test_reference_server_orphan_fault(tmp_path: Path) -> None:
    proc = ServerProcess.start(ref_spec("--ref-fault-orphan"), name="ref", log_path=tmp_path / "r.log")
    proc.wait_ready(health(proc.base_url), timeout_s=300)
    children = [p.pid for p in psutil.Process(proc.pid).children(recursive=True)]
    report = proc.stop(timeout_s=1.0)
    assert len(report.killed_pids) == 1 and report.killed_pids[0] in children  # the SIGTERM-ignoring grandchild
    assert report.clean
    assert all(gone(pid) for pid in children)


def test_api_key_never_reaches_the_error_or_the_kept_log(tmp_path: Path) -> None:
    # An engine that prints its own args, key included (SGLang logs server_args), then dies before ready.
    script = "import sys; print('server_args', sys.argv[1:], flush=True); sys.exit(3)"
    port = find_free_port("127.0.0.1")
    spec = LaunchSpec(
        argv=(sys.executable, "-c", script, "--api-key", "sk-live-123456"),
        env={"PATH": os.environ["PATH"], "HF_TOKEN": "hf_secret_token"},
        host="127.0.0.1",
        port=port,
    )
    log = tmp_path / "s.log"
    proc = ServerProcess.start(spec, name="keyed", log_path=log)
    with pytest.raises(ServerStartError) as excinfo:
        proc.wait_ready(lambda: False, timeout_s=30)
    message = str(excinfo.value) + excinfo.value.log_tail
    assert "sk-live-123456" not in message and "<redacted>" in message
    assert "sk-live-123456" not in log.read_text()


# -- what real SGLang 0.5.17 logged (tests/data/sglang/0.5.17, recorded on an H200) -------------------------------

SGLANG_DATA = Path(__file__).parent / "data" / "sglang" / "0.5.17"


def test_real_scheduler_crash_is_named_not_blamed_on_oom() -> None:
    """Aux layer id -1: SGLang's scheduler raises on the first forward, then SGLang SIGKILLs its own tree."""
    from pytest_specdec.serve.diagnosis import diagnose_exit

    log = (SGLANG_DATA / "eagle3-aux-minus1.log").read_text()
    found = diagnose_exit(log, -signal.SIGKILL, pids=[1811], kernel_log="")
    assert found.cause == "scheduler exception"
    assert found.exception == "TypeError: unsupported operand type(s) for +: 'Tensor' and 'NoneType'"
    assert found.location == "sglang/srt/models/llama.py:437"
    assert found.self_killed
    assert found.detail(-signal.SIGKILL) == (
        "TypeError: unsupported operand type(s) for +: 'Tensor' and 'NoneType' at sglang/srt/models/llama.py:437; "
        "the server then stopped its own process tree (signal 9)"
    )


def test_real_scheduler_crash_mid_run_is_named() -> None:
    """The recorded -1 crash (traceback, SIGQUIT, ``kill_process_tree``) after a served run's Decode batch lines, as a
    scheduler that fails on a later forward logs it: the run's lines before it change nothing."""
    from pytest_specdec.serve.diagnosis import diagnose_exit

    served = (SGLANG_DATA / "eagle3.log").read_text()
    served = served[: served.index("SIGTERM received")].rsplit("\n", 1)[0]  # the run, up to its teardown
    crashed = (SGLANG_DATA / "eagle3-aux-minus1.log").read_text()
    crash = crashed[crashed.index("[2026-12-01 12:25:47] Scheduler hit an exception") :]
    found = diagnose_exit(served + "\n" + crash, -signal.SIGKILL, pids=[1325], kernel_log="")
    assert found.explain(-signal.SIGKILL) == (
        "(cause: scheduler exception): TypeError: unsupported operand type(s) for +: 'Tensor' and 'NoneType' at "
        "sglang/srt/models/llama.py:437; the server then stopped its own process tree (signal 9)"
    )


def test_a_death_with_no_cause_in_the_log_says_what_is_known() -> None:
    """No pattern, traceback or dmesg line: the last log line is quoted (no "cause: unknown"); a SIGKILL adds that
    something outside killed it."""
    decode = (
        "[2026-12-05 21:11:01] Decode batch, #running-req: 1, #token: 38, token usage: 0.00, cuda graph: False, gen "
        "throughput (token/s): 127.47, #queue-req: 0"
    )
    found = diagnose_exit(f"[2026-12-05 21:10:58] Load weight end.\n{decode}\n", 1, kernel_log="")
    assert found.cause == "unknown"
    last = decode.split("] ", 1)[1]
    assert found.explain(1) == f'(no cause found in its log; its last 2 lines: "Load weight end.", "{last}")'
    # At most 3 lines; progress bars, rules, warnings.warn( echoes and the supervisor's line are no reason to quote.
    noisy = (
        "a\nb\nc\n[2026-12-05 21:10:58] Capturing batches (bs=4 avail_mem=70.0 GB):  45%|####5     | 9/20\n"
        "========\n  warnings.warn(\n[pytest-specdec supervisor] signal 15: stopped pid 12\nd\n"
    )
    assert diagnose_exit(noisy, 1).explain(1) == '(no cause found in its log; its last 3 lines: "b", "c", "d")'
    assert diagnose_exit("==\n", 1).explain(1) == '(no cause found in its log; its last line: "==")'
    killed = diagnose_exit(decode + "\n", -signal.SIGKILL, pids=[7], kernel_log="")
    assert killed.explain(-signal.SIGKILL) == (
        f'(no cause found in its log; its last line: "{last}"): something outside killed it (the kernel OOM killer '
        "would say so in dmesg, which could not be read or had no line for this server)"
    )
    assert diagnose_exit("\n\n", 1).explain(1) == "(no cause found in its log, which is empty)"
    long = diagnose_exit("x" * 500, 1).explain(1)
    assert long == '(no cause found in its log; its last line: "' + "x" * 197 + '...")'


def test_a_cause_found_in_the_log_is_explained_with_its_line_without_the_time_prefix() -> None:
    found = diagnose_exit(
        "[2026-12-05 21:11:00] Decode batch, #running-req: 1\n"
        "[2026-12-05 21:11:01] ref fault: --ref-fault-die-after-requests 3 reached; exiting with status 1\n",
        1,
    )
    assert found.explain(1) == (
        "(cause: reference server fault): ref fault: --ref-fault-die-after-requests 3 reached; exiting with status 1"
    )


def test_an_argparse_death_quotes_its_error_line_once_without_the_usage_lines(tmp_path: Path) -> None:
    """A fresh-user trial: the reference server's argparse death said its error in the cause, then "its last 3
    lines" quoted two usage continuation lines and the error line again. The usage block is no meaningful line, and
    a line the cause already says is not quoted again (here none is left)."""
    proc = ServerProcess.start(ref_spec("--random-seed", "abc"), name="ref", log_path=tmp_path / "r.log")
    with pytest.raises(ServerStartError) as info:
        proc.wait_ready(health(proc.base_url), timeout_s=60)
    error = "python -m pytest_specdec.refserver: error: argument --random-seed: invalid int value: 'abc'"
    expected = (
        f"server 'ref' exited with code 2 before it was ready (cause: bad flag) after * s: {error}; "
        f"log: {proc.log_path}; fix: run its launch command by hand to see why it exits: *--random-seed abc"
    )
    assert fnmatch.fnmatchcase(str(info.value), expected), str(info.value)
    assert str(info.value).count("invalid int value") == 1 and "[--" not in str(info.value)
    # SGLang's recorded argparse death: its usage block (420 lines) is skipped, the lines above it are quoted.
    flag = diagnose_exit((SGLANG_DATA / "bad-flag.log").read_text(), 2)
    error = "sglang serve: error: unrecognized arguments: --speculative-aux-layer-ids 1,3,5"
    assert flag.last_lines[0] == "Example: sglang serve --model-path <model> [options]"
    assert "is deprecated" in flag.last_lines[1] and flag.last_lines[2] == error
    assert flag.explain(2, quote=True).startswith(
        f'(cause: bad flag): {error}; its last lines besides that one: "Example: sglang serve --model-path <model> '
        '[options]", "'
    )


def test_a_quoted_line_the_cause_already_says_is_left_out() -> None:
    found = diagnose_exit(
        "[2026-12-05 21:11:00] Decode batch, #running-req: 1\n"
        "[2026-12-05 21:11:01] ref fault: --ref-fault-die-after-requests 3 reached; exiting with status 1\n",
        1,
    )
    assert found.explain(1, quote=True) == (
        "(cause: reference server fault): ref fault: --ref-fault-die-after-requests 3 reached; exiting with status 1; "
        'its last line besides that one: "Decode batch, #running-req: 1"'
    )


def test_real_bad_flag_and_jit_failure() -> None:
    from pytest_specdec.serve.diagnosis import diagnose_exit

    flag = diagnose_exit((SGLANG_DATA / "bad-flag.log").read_text(), 2)
    assert (flag.cause, flag.exception) == (
        "bad flag",
        "sglang serve: error: unrecognized arguments: --speculative-aux-layer-ids 1,3,5",
    )
    jit = diagnose_exit((SGLANG_DATA / "plugin" / "plugin_jit-build-failure.txt").read_text(), -signal.SIGKILL)
    assert jit.cause == "kernel build failed"
    assert jit.self_killed


def test_real_clean_run_has_no_error() -> None:
    from pytest_specdec.serve.diagnosis import last_exception

    assert last_exception((SGLANG_DATA / "eagle3.log").read_text()) is None


def test_oom_killer_blamed_only_with_dmesg_evidence() -> None:
    from pytest_specdec.serve.diagnosis import diagnose_exit

    dmesg = "[12.3] Out of memory: Killed process 4242 (python3) total-vm:1kB, anon-rss:1kB\n"
    found = diagnose_exit("INFO loading weights\n", -signal.SIGKILL, pids=[4242], kernel_log=dmesg)
    assert found.cause == "killed by the OOM killer"
    assert found.detail(-signal.SIGKILL) == "kernel log: " + dmesg.strip()
    other = diagnose_exit("INFO loading weights\n", -signal.SIGKILL, pids=[7], kernel_log=dmesg)
    assert other.cause == "unknown"
    assert "OOM killer would say so in dmesg" in other.detail(-signal.SIGKILL)


def test_sglang_subprocess_sigkilled_mid_run_is_named() -> None:
    """SGLang's scheduler SIGKILLed from outside mid-run: no traceback, only the watchdog's line (the recorded
    teardown of eagle3.log with the incident's exit code -9). It was "(cause: unknown)"."""
    from pytest_specdec.serve.diagnosis import diagnose_exit

    recorded = (SGLANG_DATA / "eagle3.log").read_text()
    head = recorded[: recorded.index("SIGTERM received")].rsplit("\n", 1)[0]  # the run, up to its teardown
    log = head + (
        "\n[2026-12-01 12:23:55] Subprocess scheduler_0 (pid=4184) crashed with exit code -9. Triggering SIGQUIT for "
        "cleanup...\n[2026-12-01 12:23:55] SIGQUIT received. signum=None, frame=None. It usually means one child "
        "failed.\n[2026-12-01 12:24:00] kill_process_tree called: parent_pid=4130, include_parent=True, pid=4130\n"
    )
    found = diagnose_exit(log, -signal.SIGKILL, pids=[4130], kernel_log="")
    assert found.cause == "subprocess crashed"
    assert found.detail(-signal.SIGKILL) == (
        "SGLang subprocess scheduler_0 (pid 4184) killed by signal 9 (SIGKILL); the server then stopped its own "
        "process tree (signal 9)"
    )
    # dmesg naming the scheduler's pid (not the launcher's): the OOM killer, with the same subprocess line.
    dmesg = "[9.1] Out of memory: Killed process 4184 (sglang::schedu) total-vm:1kB, anon-rss:1kB\n"
    oom = diagnose_exit(log, -signal.SIGKILL, pids=[4130], kernel_log=dmesg)
    assert (oom.cause, oom.exception) == (
        "killed by the OOM killer",
        "SGLang subprocess scheduler_0 (pid 4184) killed by signal 9 (SIGKILL)",
    )
