"""TCP port checks before a launch and after a teardown: is it free, who holds it, pick a free one."""

from __future__ import annotations

import socket
import time

import psutil

__all__ = ["find_free_port", "port_holder", "port_is_free", "wait_port_free"]


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
    try:
        conns = psutil.net_connections(kind="inet")
    except (psutil.AccessDenied, OSError):
        conns = []
    bound = [c for c in conns if c.laddr and c.laddr.port == port]
    if not bound:
        return None
    bound.sort(key=lambda c: (c.status != psutil.CONN_LISTEN, c.pid is None))
    pid = bound[0].pid
    if pid is None:
        return "a process psutil cannot read (another user's?)"
    return _describe(pid)


def wait_port_free(host: str, port: int, timeout_s: float) -> bool:
    """Poll ``port_is_free`` every 0.05 s for up to ``timeout_s`` seconds; True once free."""
    deadline = time.monotonic() + timeout_s
    while True:
        if port_is_free(host, port):
            return True
        if time.monotonic() >= deadline:
            return False
        time.sleep(0.05)
