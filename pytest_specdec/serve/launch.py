"""Launch a server: check its ports, start it under its supervisor (``supervisor.py``), follow its exit status.

``launch(spec, name=..., log_path=...)`` returns a ``Launched``: the server's pid, and ``poll()`` for its exit status,
which the supervisor (its parent and subreaper) reports.
"""

from __future__ import annotations

import contextlib
import json
import os
import select
import subprocess
import sys
import time
import weakref
from pathlib import Path

import psutil

from pytest_specdec.core.errors import ServerStartError
from pytest_specdec.engines.base import LaunchSpec
from pytest_specdec.serve.ports import port_holder, port_is_free
from pytest_specdec.serve.proctree import running

__all__ = ["ORPHAN_GRACE_S", "Launched", "check_ports", "launch", "owners"]

#: When pytest dies, the supervisor's SIGTERM -> SIGKILL grace: the server is gone within about this + 0.2 s.
ORPHAN_GRACE_S = 1.0
#: How long the supervisor may take to start the server and report its pid (a Python start on a loaded runner).
_SUPERVISOR_START_S = 60.0
_SUPERVISOR = Path(__file__).with_name("supervisor.py")

def check_ports(spec: LaunchSpec, name: str) -> None:
    """:raises ServerStartError: ``spec.port`` or one of ``spec.derived_ports`` is held (cause "port in use"; the
    message names the holder's pid and command line when psutil can read them)."""
    for port in (spec.port, *spec.derived_ports):
        if not port_is_free(spec.host, port):
            holder = port_holder(spec.host, port) or "an unknown process"
            what = f"port {port}" if port == spec.port else f"port {port} (derived from {spec.port})"
            raise ServerStartError(
                f"server '{name}' not launched: {what} on {spec.host} is in use by {holder}; "
                f"stop that process or choose another port",
                profile=name,
                cause="port in use",
            )


def owners() -> list[tuple[int, float]]:
    """The processes a server must not outlive, as (pid, create_time): this pytest process, or under pytest-xdist
    (``PYTEST_XDIST_WORKER`` set) the controller, the worker's parent. Not the worker: other workers may still use a
    server the launching worker started (``sharing``), and the controller's session end stops what is left."""
    me = psutil.Process()
    if os.environ.get("PYTEST_XDIST_WORKER"):
        with contextlib.suppress(psutil.Error):
            parent = me.parent()
            if parent is not None:
                return [(parent.pid, parent.create_time())]
    return [(me.pid, me.create_time())]


class Launched:
    """A server started by its supervisor. ``pid``: the server's main process (its process group and session id).

    ``poll()`` returns the server's exit status once the supervisor reported it (``Popen.returncode`` convention),
    else None; ``exited()`` looks at the process itself (exited, or a zombie), so it also covers a supervisor that
    died (then the status stays unknown: None). It looks through a pidfd (Linux 5.3+, ``os.pidfd_open``: readable
    once the process has exited) where there is one, else through psutil.
    """

    def __init__(self, supervisor: subprocess.Popen[bytes], pid: int, buffer: bytes) -> None:
        self.supervisor = supervisor
        self.pid = pid
        self._buffer = buffer
        self._returncode: int | None = None
        #: ``time.monotonic()`` at which the supervisor reaped the server (None until then, or when unknown).
        self.exited_at: float | None = None
        self._eof = False
        self._create_time = 0.0
        with contextlib.suppress(psutil.Error):
            self._create_time = psutil.Process(pid).create_time()
        # A readiness or measuring loop asks exited() every 0.1 s in pytest's main thread, where a Ctrl-C lands.
        # psutil opens /proc/PID/stat and /proc/PID/status for each answer; a Ctrl-C landing between such an open and
        # its `with` leaves the file to the garbage collector, whose ResourceWarning a project with
        # `filterwarnings = error` gets as an error at exit: exit status 1 and a traceback instead of "interrupted"
        # (flake hunt 28, tests/test_interrupt.py). A pidfd is opened once and polled.
        self._pidfd: int | None = None
        if hasattr(os, "pidfd_open"):
            with contextlib.suppress(OSError):  # ESRCH: already gone (then psutil says so); ENOSYS: an old kernel
                self._pidfd = os.pidfd_open(pid)
                weakref.finalize(self, os.close, self._pidfd)  # with this object: exited() after close() asks it too
        assert supervisor.stdout is not None
        os.set_blocking(supervisor.stdout.fileno(), False)
        self._parse()

    def _parse(self) -> None:
        while b"\n" in self._buffer:
            line, self._buffer = self._buffer.split(b"\n", 1)
            word, _, rest = line.decode(errors="replace").partition(" ")
            if word == "exited":
                code, _, when = rest.partition(" ")
                self._returncode = int(code)
                self.exited_at = float(when) if when else None

    def _read(self) -> None:
        stdout = self.supervisor.stdout
        if self._eof or stdout is None or stdout.closed:
            return
        while True:
            try:
                chunk = os.read(stdout.fileno(), 4096)
            except BlockingIOError:
                break
            except OSError:
                chunk = b""
            if not chunk:
                self._eof = True
                self.supervisor.poll()  # reap the supervisor once it is done
                break
            self._buffer += chunk
        self._parse()

    def poll(self) -> int | None:
        """The server's exit status, or None while it runs (or when its supervisor died without saying)."""
        if self._returncode is None:
            self._read()
        return self._returncode

    def exited(self) -> bool:
        """Whether the server's main process has ended (status reported, or supervisor gone and it not running)."""
        if self.poll() is not None:
            return True
        # The process itself, not the supervisor's line: that comes a scheduler wake-up later (the status is read
        # when the message needs it, after the teardown closed the supervisor).
        if self._pidfd is not None:
            # A poll object per call: one shared between threads raises on concurrent poll(); not select.select,
            # which fails on a descriptor numbered 1024 or more.
            waiter = select.poll()
            waiter.register(self._pidfd, select.POLLIN)
            return bool(waiter.poll(0))
        return not running(self.pid, self._create_time)

    def close(self, timeout_s: float = 5.0) -> None:
        """After the teardown: let the supervisor exit (it does once the tree is gone and reaped); if it is still
        there after 0.5 s, SIGTERM it (it then stops what it still sees of the tree) and SIGKILL it after
        ``timeout_s``. Idempotent."""
        if self.supervisor.poll() is None:
            try:
                self.supervisor.wait(timeout=0.5)
            except subprocess.TimeoutExpired:
                self.supervisor.terminate()
                try:
                    self.supervisor.wait(timeout=timeout_s)
                except subprocess.TimeoutExpired:
                    self.supervisor.kill()
                    self.supervisor.wait()
        if self.supervisor.stdout is not None and not self.supervisor.stdout.closed:
            self._read()
            self._eof = True
            self.supervisor.stdout.close()


def launch(
    spec: LaunchSpec,
    *,
    name: str,
    log_path: Path,
    owned_by: list[tuple[int, float]] | None = None,
    grace_s: float = ORPHAN_GRACE_S,
) -> Launched:
    """Check the ports, then start ``spec.argv`` with exactly ``spec.env`` in a new session, under a supervisor.

    stdout and stderr go to ``log_path`` (truncated; parent directories created); stdin is /dev/null. The supervisor
    (``supervisor.py``) runs in a session of its own; it reaps the server's tree and stops it within ``grace_s`` +
    about 0.2 s when one of ``owned_by`` (default: ``owners()``) dies.

    :raises ServerStartError: a port is held (cause "port in use"; nothing is launched), or ``argv[0]`` cannot be
        executed, or the supervisor did not start (cause "unknown").
    """
    check_ports(spec, name)
    log_path.parent.mkdir(parents=True, exist_ok=True)
    with open(log_path, "wb") as log:
        config = {
            "argv": list(spec.argv),
            "env": dict(spec.env),
            "log_fd": log.fileno(),
            "owners": [list(o) for o in (owned_by if owned_by is not None else owners())],
            "grace_s": grace_s,
            "name": name,
        }
        supervisor = subprocess.Popen(
            [sys.executable, str(_SUPERVISOR)],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=log,  # its own traceback, if any, lands in the server log
            pass_fds=(log.fileno(),),
            start_new_session=True,
        )
    assert supervisor.stdin is not None and supervisor.stdout is not None
    with contextlib.suppress(BrokenPipeError):
        supervisor.stdin.write(json.dumps(config).encode() + b"\n")
    with contextlib.suppress(BrokenPipeError):
        supervisor.stdin.close()
    line, rest = _first_line(supervisor)
    word, _, detail = line.partition(" ")
    if word == "started":
        return Launched(supervisor, int(detail), rest)
    with contextlib.suppress(subprocess.TimeoutExpired):
        supervisor.wait(timeout=5.0)
    supervisor.stdout.close()
    if word == "failed":
        message = detail.partition(" ")[2]
        raise ServerStartError(
            f"server '{name}' not launched: cannot run {spec.argv[0]!r}: {message}",
            profile=name,
            log_path=log_path,
            cause="unknown",
        )
    raise ServerStartError(
        f"server '{name}' not launched: its supervisor ({_SUPERVISOR}) did not start it (exit status "
        f"{supervisor.returncode}); see the log {log_path}",
        profile=name,
        log_path=log_path,
        cause="unknown",
    )


def _first_line(supervisor: subprocess.Popen[bytes]) -> tuple[str, bytes]:
    """The supervisor's first line ("" when it exited or stayed silent for ``_SUPERVISOR_START_S``) and any bytes
    after it."""
    assert supervisor.stdout is not None
    fd = supervisor.stdout.fileno()
    buffer = b""
    deadline = time.monotonic() + _SUPERVISOR_START_S
    while b"\n" not in buffer:
        left = deadline - time.monotonic()
        if left <= 0:
            supervisor.kill()
            return "", b""
        ready, _, _ = select.select([fd], [], [], left)
        if not ready:
            continue
        chunk = os.read(fd, 4096)
        if not chunk:
            return "", b""
        buffer += chunk
    line, rest = buffer.split(b"\n", 1)
    return line.decode(errors="replace"), rest
