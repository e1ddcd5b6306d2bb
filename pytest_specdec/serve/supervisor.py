"""The supervisor: one small process per launch that starts the server, reaps its tree, and stops it when pytest dies.

``launch.py`` runs this file as a script (``python .../supervisor.py``; the package ``__init__`` would cost seconds)
in a session of its own, so that neither a Ctrl-C nor a CI runner's kill of pytest's process group reaches it::

    pytest ──► supervisor (child subreaper; own session) ──► server (own session, pgid = its pid) ──► engine children

Protocol. stdin, one JSON line: ``{"argv": [...], "env": {...}, "log_fd": 5, "owners": [[pid, create_time], ...],
"grace_s": 1.0, "name": "eagle3"}`` (``log_fd`` is inherited: the server's stdout and stderr). stdout, one line
each: ``started PID`` (or ``failed ERRNO MESSAGE`` when the server cannot be executed, then exit), later
``exited RETURNCODE MONOTONIC`` (``Popen.returncode`` convention: negative for a signal; ``time.monotonic()`` when
it was reaped, one system-wide clock on Linux, so a group of ranks can tell which died first).

What it does:
- ``prctl(PR_SET_CHILD_SUBREAPER)``: every process of the server's tree whose parent dies is re-parented here
  instead of to init, and reaped; so a ``<defunct>`` engine child (SGLang's ``sglang::detoken`` after SGLang kills its
  own tree) cannot outlive the teardown, even in a container whose PID 1 does not reap.
- Watches each owner (the pytest process; under xdist also the controller) with a pidfd (``pidfd_open``, Linux >= 5.3;
  a 0.1 s psutil poll elsewhere). When one dies however it died (SIGKILL, the OOM killer, a CI timeout), it stops
  the server's tree (``proctree.stop_process_tree``: SIGTERM, ``grace_s``, SIGKILL), writes one line saying so to the
  server log, and exits: the server is gone within ``grace_s`` + about 0.2 s of pytest.
- SIGTERM / SIGINT / SIGHUP to the supervisor itself do the same.
- Exits on its own once the server and every descendant it has seen are gone (the normal teardown, done by pytest).
"""

from __future__ import annotations

import sys

if __name__ == "__main__" and not __package__:
    del sys.path[0]  # this package's directory: none of its modules may shadow the standard library's

import contextlib
import ctypes
import json
import os
import select
import signal
import subprocess
import time
from types import ModuleType
from typing import Any

PR_SET_CHILD_SUBREAPER = 36  # linux/prctl.h
_SNAPSHOT_S = 0.2
_POLL_S = 0.1


def _load_proctree() -> ModuleType:
    if __package__:
        from pytest_specdec.serve import proctree

        return proctree
    import importlib.util

    # Run as a script: load the sibling module by path, not through the package (its __init__ is slow).
    path = os.path.join(os.path.dirname(os.path.abspath(__file__)), "proctree.py")
    spec = importlib.util.spec_from_file_location("_specdec_proctree", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses resolve annotations through sys.modules
    spec.loader.exec_module(module)
    return module


def _say(line: str) -> None:
    with contextlib.suppress(OSError):  # pytest is gone: nobody reads any more
        os.write(1, (line + "\n").encode())


def _set_subreaper() -> None:
    with contextlib.suppress(OSError, AttributeError):
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0)


class _Owners:
    """The processes whose death stops the server: pidfds where the kernel has them, else polling."""

    def __init__(self, owners: list[list[Any]], running: Any) -> None:
        self._owners = [(int(pid), float(ct)) for pid, ct in owners]
        self._running = running
        self.fds: list[int] = []
        self.dead = False
        for pid, create_time in self._owners:
            try:
                fd = os.pidfd_open(pid)
            except (AttributeError, OSError):
                continue  # no pidfd (old kernel/Python) or already gone: polling below decides
            if self._running(pid, create_time):
                self.fds.append(fd)
            else:
                os.close(fd)  # the pid was reused: the owner is already gone
        self.check()

    def check(self) -> bool:
        """Whether an owner is gone (sets ``dead``)."""
        if not self.dead:
            self.dead = not all(self._running(pid, ct) for pid, ct in self._owners)
        return self.dead


def main() -> int:
    """Run the protocol of the module docstring: read the config line, start the server, then one event loop (owner
    deaths, stop signals, child exits) until the server's tree is gone. Kept as one function on purpose: it is one
    loop over one set of file descriptors, read top to bottom in the order the events are handled.

    :returns: 0 once the server's tree is gone (its own status is reported on stdout), 1 when it could not start.
    """
    config = json.loads(sys.stdin.readline())
    _set_subreaper()
    wake_r, wake_w = os.pipe()
    os.set_blocking(wake_r, False)
    os.set_blocking(wake_w, False)
    signal.set_wakeup_fd(wake_w)
    stop_signal: list[int] = []
    signal.signal(signal.SIGCHLD, lambda signum, frame: None)  # wakes the poll through the wakeup fd
    for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
        signal.signal(sig, lambda signum, frame: stop_signal.append(signum))
    log_fd = int(config["log_fd"])
    try:
        child = subprocess.Popen(
            list(config["argv"]),
            env=dict(config["env"]),
            stdin=subprocess.DEVNULL,
            stdout=log_fd,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
    except OSError as exc:
        _say(f"failed {exc.errno or 0} {exc.strerror or exc}")
        return 1
    _say(f"started {child.pid}")
    # psutil is imported only now: pytest waits for the line above, not for this import.
    proctree = _load_proctree()
    owners = _Owners(config.get("owners", []), proctree.running)  # an owner already gone: stopped at once below
    tree = proctree.Descendants(proctree.psutil.Process(child.pid))
    me = proctree.psutil.Process()

    def everything() -> list[Any]:
        # As a subreaper, every orphan of the tree is now our child: the snapshot plus our children is the tree.
        with contextlib.suppress(proctree.psutil.Error):
            return [*tree.known(), *me.children(recursive=True)]
        return tree.known()

    returncode: list[int] = []

    def reap() -> None:
        while True:
            try:
                pid, status = os.waitpid(-1, os.WNOHANG)
            except ChildProcessError:
                return
            if pid == 0:
                return
            if pid == child.pid:
                code = os.waitstatus_to_exitcode(status)
                child.returncode = code  # so Popen never waits for it again
                returncode.append(code)
                _say(f"exited {code} {time.monotonic():.6f}")

    poller = select.poll()
    poller.register(wake_r, select.POLLIN)
    for fd in owners.fds:
        poller.register(fd, select.POLLIN)
    # Without a pidfd for every owner, poll their liveness every _POLL_S instead of waiting for the pidfd.
    timeout_ms = int((_SNAPSHOT_S if len(owners.fds) == len(config.get("owners", [])) else _POLL_S) * 1000)
    next_snapshot = 0.0
    while True:
        events = poller.poll(timeout_ms)
        with contextlib.suppress(BlockingIOError):
            os.read(wake_r, 4096)
        reap()
        now = time.monotonic()
        if now >= next_snapshot:
            tree.snapshot()
            next_snapshot = now + _SNAPSHOT_S
        owner_event = any(fd != wake_r for fd, _ in events)
        if stop_signal or owners.dead or ((owner_event or not owners.fds) and owners.check()):
            report = proctree.stop_process_tree(
                child.pid,
                root=tree.root,
                known=everything(),
                reap=reap,
                returncode=lambda: returncode[0] if returncode else None,
                timeout_s=float(config.get("grace_s", 1.0)),
                name=str(config.get("name", "")),
            )
            if report.terminated_pids:
                why = f"signal {stop_signal[0]}" if stop_signal else "the pytest that launched it is gone"
                with contextlib.suppress(OSError):
                    os.write(log_fd, f"\n[pytest-specdec supervisor] {why}: {report.describe()}\n".encode())
            reap()
            return 0
        if returncode and not any(proctree.alive(proc) for proc in everything()):
            reap()
            return 0


if __name__ == "__main__":
    # os._exit: no interpreter shutdown (module teardown costs ~0.1 s on a loaded runner, and pytest waits for it).
    os._exit(main())
