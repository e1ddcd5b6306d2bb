"""TCP port checks before a launch and after a teardown: is it free, who holds it, pick a free one and hold it
until the server has bound it."""

from __future__ import annotations

import os
import socket
import tempfile
import time
from collections.abc import Collection
from pathlib import Path
from types import TracebackType
from typing import Any

import psutil
from filelock import FileLock, Timeout

__all__ = ["PortReservation", "find_free_port", "port_holder", "port_is_free", "reserve_free_port", "wait_port_free"]


def _family(host: str) -> socket.AddressFamily:
    return socket.AF_INET6 if ":" in host else socket.AF_INET


def port_is_free(host: str, port: int) -> bool:
    """Whether a server could bind ``host:port`` now.

    Binds with ``SO_REUSEADDR`` like uvicorn and SGLang's ``is_port_available``
    (``python/sglang/srt/utils/common.py``), so a port in TIME_WAIT after a teardown counts as free and only a live
    socket counts as held.
    """
    with socket.socket(_family(host), socket.SOCK_STREAM) as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind((host, port))
        except OSError:
            return False
    return True


def find_free_port(host: str = "127.0.0.1") -> int:
    """A port the OS reports free on ``host`` right now (bind to port 0). Another process may take it before the
    server binds it; ``ServerProcess.start`` checks again just before the launch."""
    with socket.socket(_family(host), socket.SOCK_STREAM) as sock:
        sock.bind((host, 0))
        return int(sock.getsockname()[1])


class PortReservation:
    """A free port picked for a server about to be launched, held against every other pytest-specdec process of this
    user on this machine until :meth:`release` (or the process's death: an OS file lock).

    Why: a server binds its port only after loading its model (seconds for the reference server, up to 15 minutes
    for SGLang with CUDA graphs). A port picked by binding port 0 is free again in that window, and another launch
    (an xdist worker, a second CI job) picked the very same one: its server answered the first one's health checks
    and the first one exited on ``address already in use``. Other programs' sockets are not held off; for those,
    ``startup.start_server`` relaunches once on a new port.

    Use as a context manager or call :meth:`release` once the server listens (its own socket holds the port then).
    """

    def __init__(self, port: int, lock: FileLock) -> None:
        self.port = port
        self._lock = lock

    def release(self) -> None:
        """Let other pytest-specdec processes pick this port again; idempotent."""
        self._lock.release()

    def __enter__(self) -> int:
        return self.port

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:  # fmt: skip
        self.release()


def _lock_dir() -> Path:
    user = os.getuid() if hasattr(os, "getuid") else "user"
    path = Path(tempfile.gettempdir()) / f"pytest-specdec-ports-{user}"
    path.mkdir(mode=0o700, exist_ok=True)
    return path


def reserve_free_port(host: str = "127.0.0.1", *, tries: int = 100) -> PortReservation:
    """:func:`find_free_port`, skipping ports another pytest-specdec process of this user holds for a server that is
    still starting (one empty lock file per port handed out, ``<tempdir>/pytest-specdec-ports-<uid>/<port>.lock``).

    :raises RuntimeError: ``tries`` free ports in a row were all held (not seen in practice: the OS hands out
        ports from a range of ~28000).
    """
    lock_dir = _lock_dir()
    for _ in range(tries):
        port = find_free_port(host)
        lock = FileLock(str(lock_dir / f"{port}.lock"))
        try:
            lock.acquire(blocking=False)
        except Timeout:
            continue
        if port_is_free(host, port):  # its last holder's server may have bound it since find_free_port looked
            return PortReservation(port, lock)
        lock.release()
    raise RuntimeError(f"no free port on {host} that no other pytest-specdec launch holds after {tries} tries")


def _describe(pid: int) -> str:
    try:
        proc = psutil.Process(pid)
        cmdline = " ".join(proc.cmdline()) or proc.name()
    except (psutil.Error, OSError):
        return f"pid {pid}"
    if len(cmdline) > 200:
        cmdline = cmdline[:197] + "..."
    return f"pid {pid} ({cmdline})"


def port_holder(host: str, port: int) -> str | None:
    """Who holds ``port``, as ``"pid 123 (python -m http.server 8000)"``.

    Uses ``psutil.net_connections``: a listening socket on ``port`` is preferred over any other socket bound to it.
    Returns ``"a process psutil cannot read (another user's?)"`` when a socket holds the port but psutil cannot map
    it to a pid, and None when no socket holds it. ``host`` is accepted for symmetry; any address on ``port`` counts,
    since a wildcard listener blocks every host.
    """
    del host
    bound = _bound_sockets(port)
    if not bound:
        return None
    pid = bound[0].pid
    if pid is None:
        return "a process psutil cannot read (another user's?)"
    return _describe(pid)


def _bound_sockets(port: int) -> list[Any]:
    """The sockets bound to ``port`` (``psutil.net_connections``, any address), listening ones first, then those
    psutil maps to a pid; empty when none or psutil may not look."""
    try:
        conns = psutil.net_connections(kind="inet")
    except (psutil.AccessDenied, OSError):
        return []
    bound = [c for c in conns if c.laddr and c.laddr.port == port]
    bound.sort(key=lambda c: (c.status != psutil.CONN_LISTEN, c.pid is None))
    return bound


def wait_port_free(host: str, port: int, timeout_s: float, *, ours: Collection[int] = ()) -> bool:
    """Poll ``port_is_free`` every 0.05 s for up to ``timeout_s`` seconds; True once free.

    :param ours: the pids of the stopped server's processes. When a process outside them listens on the port, False
        at once: the port was never the server's to free (another program took it and the server died of "port in
        use"), and waiting for it only delayed that report, by ``timeout_s`` a launch.
    """
    deadline = time.monotonic() + timeout_s
    if port_is_free(host, port):
        return True
    listening = next((c.pid for c in _bound_sockets(port) if c.status == psutil.CONN_LISTEN), None) if ours else None
    if listening is not None and listening not in ours:
        return False
    while True:
        if port_is_free(host, port):
            return True
        if time.monotonic() >= deadline:
            return False
        time.sleep(0.05)
