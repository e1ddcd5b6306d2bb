"""Which servers exist: in this Python process (for the session-end sweep) and on disk (for ``reap``).

In-process: every ``ServerProcess`` registers itself at launch; ``leftovers()`` (session end, and ``atexit``)
stops and reports those not stopped. On disk: ``record(dir, ...)`` writes ``<dir>/<pid>.json`` at launch and the
teardown removes it; ``reap(dir)`` (``python -m pytest_specdec reap``, and each pytest run's start) stops the
recorded servers none of whose owners is alive any more (the supervisor normally did it already; this covers a
supervisor that was killed too). A server whose owner is alive is in use and never touched, whoever asks::

    {"pid": 4242, "create_time": 1764500000.1, "profile": "eagle3", "base_url": "http://127.0.0.1:30000",
     "owners": [[4200, 1764499990.2]], "owner_pid": 4200, "owner_create_time": 1764499990.2,
     "supervisor": [4241, 1764500000.0], "log_path": ".specdec/logs/eagle3.log"}
"""

from __future__ import annotations

import atexit
import contextlib
import json
import os
import threading
from collections.abc import Sequence
from pathlib import Path
from typing import Any, Protocol

import psutil

from pytest_specdec.serve.proctree import StopReport, alive, running, stop_process_tree

__all__ = ["disown", "leftovers", "reap", "record", "register"]


class _Server(Protocol):
    def processes(self) -> list[psutil.Process]: ...

    def seen_processes(self) -> list[psutil.Process]: ...

    @property
    def stop_report(self) -> StopReport | None: ...

    def stop(self, timeout_s: float = ...) -> StopReport: ...

    def release(self) -> None: ...


_registry: list[_Server] = []
_disowned: list[_Server] = []
_lock = threading.Lock()
_atexit_registered = False


def register(server: _Server) -> None:
    """Track ``server`` until it is stopped or disowned (``leftovers`` sweeps it otherwise)."""
    global _atexit_registered
    with _lock:
        _registry.append(server)
        if not _atexit_registered:
            atexit.register(leftovers)
            _atexit_registered = True


def disown(server: _Server) -> None:
    """Forget ``server`` without stopping it: another process (an xdist worker, see ``sharing``) owns its teardown."""
    with _lock:
        if server in _registry:
            _registry.remove(server)
        _disowned.append(server)  # keep its supervisor handle referenced, to reap it at the end


def leftovers(*, kill: bool = True, timeout_s: float = 5.0) -> list[psutil.Process]:
    """Session-end sweep over every server started (and not disowned) in this Python process.

    :param kill: stop each server not yet stopped (grace ``timeout_s`` s) and SIGKILL any process still alive.
    :returns: the processes that were still alive when called (empty after a clean session); the plugin reports
        them. Also registered with ``atexit`` as a fallback.
    """
    with _lock:
        servers = list(_registry)
        disowned = list(_disowned)
    for server in disowned:
        server.release()  # reap a disowned server's supervisor once another process stopped the server
    found: list[psutil.Process] = []
    for server in servers:
        if server.stop_report is None:
            found.extend(server.processes())
        else:
            found.extend(proc for proc in server.seen_processes() if alive(proc))
    if kill and found:
        for server in servers:
            server.stop(timeout_s=timeout_s)
        for proc in found:
            if alive(proc):
                with contextlib.suppress(psutil.Error):
                    proc.kill()
    return found


# -- on disk ------------------------------------------------------------------------------------------------------


def record(
    directory: Path,
    *,
    pid: int,
    profile: str,
    base_url: str,
    owners: Sequence[tuple[int, float]],
    supervisor: int | None = None,
    log_path: Path | None = None,
) -> Path | None:
    """Write ``<directory>/<pid>.json`` for a server just launched; returns its path (remove it after teardown), or
    None when the server is already gone (nothing to record)."""
    try:
        create_time = psutil.Process(pid).create_time()
    except psutil.NoSuchProcess:
        return None
    directory.mkdir(parents=True, exist_ok=True)
    entry: dict[str, Any] = {
        "pid": pid,
        "create_time": create_time,
        "profile": profile,
        "base_url": base_url,
        "owners": [list(o) for o in owners],
        # The first owner under the field names of earlier versions, which read only these.
        "owner_pid": owners[0][0],
        "owner_create_time": owners[0][1],
        "log_path": str(log_path) if log_path else None,
    }
    if supervisor is not None:
        with contextlib.suppress(psutil.Error):
            entry["supervisor"] = [supervisor, psutil.Process(supervisor).create_time()]
    path = directory / f"{pid}.json"
    tmp = path.with_name(f"{path.name}.{os.getpid()}.tmp")
    tmp.write_text(json.dumps(entry))
    os.replace(tmp, path)
    return path


def reap(directory: Path, *, timeout_s: float = 10.0) -> list[str]:
    """Stop the servers recorded in ``directory`` whose owners (the pytest that launched them) are all gone.

    Records of servers already gone are removed silently; servers with a live owner are left alone (in use, maybe
    by a concurrent session).

    :returns: one line per server stopped, e.g. ``"server 'eagle3' (pid 4242, http://127.0.0.1:30000) outlived its
        pytest (pid 4200): stopped"``, followed, when the teardown was not clean, by its notes
        (``StopReport.notes``: ``; pid 4242 left as a zombie (already dead, ...)``).
    """
    lines: list[str] = []
    for path in sorted(directory.glob("*.json")) if directory.is_dir() else []:
        try:
            entry = json.loads(path.read_text())
            owners = entry.get("owners") or [[entry["owner_pid"], entry["owner_create_time"]]]
            pid, create_time = int(entry["pid"]), float(entry["create_time"])
        except (OSError, ValueError, KeyError, TypeError):
            continue  # being written, or not ours
        if any(running(int(o[0]), float(o[1])) for o in owners):
            continue  # its pytest is alive: in use
        known: list[psutil.Process] = []
        supervisor = entry.get("supervisor")
        if supervisor and running(*supervisor):
            with contextlib.suppress(psutil.Error):
                known.append(psutil.Process(supervisor[0]))
        if running(pid, create_time):
            root = psutil.Process(pid)
            report = stop_process_tree(pid, root=root, known=known, timeout_s=timeout_s, name=entry.get("profile", ""))
            lines.append(
                "; ".join([
                    f"server {entry.get('profile')!r} (pid {pid}, {entry.get('base_url')}) outlived its pytest "
                    f"(pid {owners[0][0]}): stopped",
                    *(report.notes() if not report.clean else ()),
                ])
            )  # fmt: skip
        elif known:
            stop_process_tree(known[0].pid, root=known[0], timeout_s=1.0)
        path.unlink(missing_ok=True)
    return lines
