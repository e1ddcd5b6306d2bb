"""One server per key (profile) across pytest-xdist workers: a file lock, a JSON state file, last one out tears down.

The pattern is pytest-xdist's "execute only once" (``docs/how-to.rst``): workers meet in the directory
``tmp_path_factory.getbasetemp().parent``; on the controller that same directory is ``getbasetemp()``.
For key ``eagle3`` it holds ``specdec-server-eagle3.lock`` (a ``filelock.FileLock``; the OS releases it when its
holder dies) and ``specdec-server-eagle3.json``::

    {"key": "eagle3", "status": "running", "pid": 4242, "create_time": 1764500000.1,
     "base_url": "http://127.0.0.1:30000", "host": "127.0.0.1", "port": 30000, "log_path": ".specdec/logs/eagle3.log",
     "users": [[pid, create_time, token], ...], "procs": [[pid, create_time], ...], "starts": 1, "error": null}

``status`` is starting (launched, not ready yet; written before the wait so that a worker dying mid-startup
leaves a record) | running | failed | stopped. ``users`` are the worker processes inside ``shared_server``; a user whose
process is gone (a crashed worker) is dropped whenever the file is touched. The first worker starts the server
while holding the lock (the others wait on it); a failed start is recorded, so that the other workers raise the same
ServerStartError instead of each waiting out its own budget. The last live user to leave stops the server by pid
(using ``procs``, the descendant snapshot, for those that escaped with setsid). ``sweep_shared`` on the controller
stops whatever is left after the workers finished (e.g. the last user crashed). Every write is a temp file plus
``os.replace`` under the lock, so readers never see a half-written file.

Wiring (plugin)::

    # session fixture, on an xdist worker only (xdistnode.is_worker(config))
    root = xdistnode.shared_dir(config)  # tmp_path_factory.getbasetemp().parent
    start = lambda on_launch: startup.start_server(profile, ..., on_launch=on_launch).process
    with shared_server(profile.name, root, start) as shared:
        yield ...  # a client of shared.base_url; shared.check_alive() after each measured phase
    # controller, pytest_sessionfinish (not on workers): report what had to be stopped
    for line in sweep_shared(xdistnode.shared_dir(config)):  # the controller's basetemp
        terminalreporter.write_line(line)
"""

from __future__ import annotations

import contextlib
import json
import os
import pickle
import re
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import psutil
from filelock import FileLock

from pytest_specdec.core.errors import ServerError, ServerStartError
from pytest_specdec.serve.proctree import StopReport, running, stop_process_tree
from pytest_specdec.serve.server import ServerHandle

__all__ = ["SharedServer", "shared_server", "stopped_shared", "sweep_shared"]

_PREFIX = "specdec-server-"


@dataclass(frozen=True, slots=True)
class SharedServer:
    """The shared server as one worker sees it. ``started_here``: this worker launched it."""

    key: str
    base_url: str
    pid: int
    create_time: float
    log_path: Path | None
    started_here: bool

    def alive(self) -> bool:
        """Whether the server's main process is still running (pid and start time match, not a zombie)."""
        return running(self.pid, self.create_time)

    def check_alive(self) -> None:
        """:raises ServerError: the shared server's main process is gone."""
        if not self.alive():
            raise ServerError(
                f"shared server '{self.key}' (pid {self.pid}) died while running; log: {self.log_path}",
                profile=self.key,
                log_path=self.log_path,
            )


def _paths(root: Path, key: str) -> tuple[Path, Path]:
    safe = re.sub(r"[^A-Za-z0-9_.-]", "_", key)
    return root / f"{_PREFIX}{safe}.json", root / f"{_PREFIX}{safe}.lock"


def _me() -> list[Any]:
    """A user entry: pid and start time (liveness, safe from pid reuse), plus a token per ``shared_server`` call."""
    return [os.getpid(), psutil.Process().create_time(), uuid.uuid4().hex[:12]]


def _read(path: Path) -> dict[str, Any]:
    try:
        return dict(json.loads(path.read_text(encoding="utf-8")))
    except FileNotFoundError:
        return {}


def _write(path: Path, state: dict[str, Any]) -> None:
    tmp = path.with_name(f"{path.name}.{os.getpid()}.tmp")
    tmp.write_text(json.dumps(state, indent=1), encoding="utf-8")
    os.replace(tmp, path)


def _merge_procs(state: dict[str, Any], procs: list[psutil.Process]) -> None:
    seen = {tuple(p) for p in state.get("procs", [])}
    for proc in procs:
        with contextlib.suppress(psutil.Error):
            seen.add((proc.pid, proc.create_time()))
    state["procs"] = sorted([list(p) for p in seen if running(*p)])


def _stop_by_state(state: dict[str, Any], timeout_s: float) -> StopReport:
    """Stop a server this process did not launch, from what the state file recorded."""
    root = None
    if running(state["pid"], state["create_time"]):
        root = psutil.Process(state["pid"])
    known = []
    for pid, create_time in state.get("procs", []):
        if running(pid, create_time):
            with contextlib.suppress(psutil.Error):
                known.append(psutil.Process(pid))
    return stop_process_tree(
        state["pid"],
        root=root,
        known=known,
        host=state.get("host"),
        port=state.get("port"),
        timeout_s=timeout_s,
        name=state.get("key", ""),
    )


def _record_stop(state: dict[str, Any], report: StopReport, by: str) -> None:
    state["status"] = "stopped"
    state["users"] = []
    state["stop"] = {"by": by, "describe": report.describe(), "killed_pids": list(report.killed_pids)}
    state["procs"] = [list(p) for p in state.get("procs", []) if running(*p)]


def _created(pid: int) -> float:
    """The process's start time (psutil's epoch s); 0.0 when it is already gone: a server that dies at once (seen
    in a flake hunt: ``--crash-at 0`` raised psutil.NoSuchProcess here instead of the start error) is then recorded
    as not running, and the wait for it reports why it stopped."""
    try:
        return psutil.Process(pid).create_time()
    except psutil.NoSuchProcess:
        return 0.0


def _running_state(key: str, proc: ServerHandle, starts: int) -> dict[str, Any]:
    return {
        "key": key,
        "status": "running",
        "pid": proc.pid,
        "create_time": _created(proc.pid),
        "base_url": proc.base_url,
        "host": proc.spec.host,
        "port": proc.spec.port,
        "log_path": str(proc.log_path),
        "starts": starts,
        "procs": [],
        "error": None,
    }


def _start_error(state: dict[str, Any]) -> ServerStartError:
    error = state["error"]
    log_path = Path(error["log_path"]) if error.get("log_path") else None
    return ServerStartError(
        error["message"], profile=state["key"], log_path=log_path, cause=error["cause"], log_tail=error["log_tail"]
    )


@contextlib.contextmanager
def shared_server(
    key: str,
    root: Path,
    start: Callable[[Callable[[ServerHandle], None]], ServerHandle],
    *,
    stop_timeout_s: float = 30.0,
) -> Iterator[SharedServer]:
    """Use the one server for ``key`` shared by every process that passes the same ``root``; start it if needed.

    :param key: the profile name (file-name-safe characters are kept, others become ``_``).
    :param root: the shared directory (workers: ``tmp_path_factory.getbasetemp().parent``).
    :param start: ``start(on_launch)`` launches the server and waits until it is ready (``ServerProcess.start(...,
        on_launch=on_launch)`` + ``wait_ready``); ``on_launch`` records the pid before the wait, so that a worker
        dying mid-startup leaves a record. Called at most once per key while a server is running, under the lock.
    :param stop_timeout_s: grace between SIGTERM and SIGKILL when this process is the last one out.
    :raises ServerStartError: ``start`` raised it here or in another worker (same message, cause and log tail).
    :raises ServerError: the recorded server died while other live workers still use it.
    """
    root.mkdir(parents=True, exist_ok=True)
    state_path, lock_path = _paths(root, key)
    lock = FileLock(str(lock_path))
    me = _me()
    own: ServerHandle | None = None
    with lock:
        state = _read(state_path)
        users = [u for u in state.get("users", []) if running(u[0], u[1])]
        status = state.get("status")
        if status == "failed":
            raise _start_error(state)
        if status != "running" or not running(state["pid"], state["create_time"]):
            if status == "running":
                if users:
                    raise ServerError(
                        f"shared server '{key}' (pid {state['pid']}) died while {len(users)} other worker(s) used "
                        f"it; log: {state.get('log_path')}",
                        profile=key,
                        log_path=Path(state["log_path"]) if state.get("log_path") else None,
                    )
                _stop_by_state(state, stop_timeout_s)  # leftovers of a dead server, and its port
            if status == "starting":
                _stop_by_state(state, stop_timeout_s)  # launched by a worker that died while waiting for it
            starts = int(state.get("starts", 0)) + 1

            def record_launch(proc: ServerHandle) -> None:
                _write(state_path, {**_running_state(key, proc, starts), "status": "starting", "users": [me]})

            try:
                own = start(record_launch)
            except ServerStartError as exc:
                state = {
                    "key": key,
                    "status": "failed",
                    "starts": starts,
                    "users": [],
                    "error": {
                        "message": f"{exc} [started by pid {os.getpid()}]",
                        "cause": exc.cause,
                        "log_path": str(exc.log_path) if exc.log_path else None,
                        "log_tail": exc.log_tail,
                    },
                }
                _write(state_path, state)
                raise
            state = _running_state(key, own, starts)
            _merge_procs(state, own.processes())
        state["users"] = [*users, me]
        _write(state_path, state)
        info = SharedServer(
            key=key,
            base_url=state["base_url"],
            pid=state["pid"],
            create_time=state["create_time"],
            log_path=Path(state["log_path"]) if state.get("log_path") else None,
            started_here=own is not None,
        )
    try:
        yield info
    finally:
        _leave(state_path, lock, info, own, me, stop_timeout_s)


def _leave(
    state_path: Path,
    lock: FileLock,
    info: SharedServer,
    own: ServerHandle | None,
    me: list[Any],
    stop_timeout_s: float,
) -> None:
    with lock:
        state = _read(state_path)
        same = state.get("status") == "running" and state.get("pid") == info.pid
        if not same:
            # Someone else already stopped (or replaced) it; just make sure our own launch is not left behind.
            if own is not None and own.stop_report is None and not own.alive():
                own.stop(stop_timeout_s)
            return
        if own is not None:
            _merge_procs(state, own.processes())
        users = [u for u in state.get("users", []) if u != me and running(u[0], u[1])]
        if users:
            state["users"] = users
            if own is not None:
                own.disown()
        else:
            report = own.stop(stop_timeout_s) if own is not None else _stop_by_state(state, stop_timeout_s)
            _record_stop(state, report, by=f"last user pid {os.getpid()}")
        _write(state_path, state)


def sweep_shared(root: Path, *, timeout_s: float = 30.0) -> list[str]:
    """Controller side, at session end (after every worker finished): stop every shared server still running.

    :param root: the shared directory (controller: ``tmp_path_factory.getbasetemp()``).
    :returns: one line per server it had to stop, e.g. ``"shared server 'eagle3' (pid 4242) was still running at
        session end (1 of 1 recorded user(s) gone without leaving, e.g. a crashed worker); server 'eagle3'
        (pid 4242) stopped in 0.21 s"``; empty when nothing was left.
    """
    lines: list[str] = []
    if not root.is_dir():
        return lines
    for state_path in sorted(root.glob(f"{_PREFIX}*.json")):
        lock = FileLock(str(state_path.with_suffix(".lock")))
        with lock:
            state = _read(state_path)
            if state.get("status") not in ("running", "starting"):
                continue
            alive = running(state["pid"], state["create_time"]) or any(running(*p) for p in state.get("procs", []))
            if not alive:
                state["status"] = "stopped"
                _write(state_path, state)
                continue
            users = state.get("users", [])
            gone = len([u for u in users if not running(u[0], u[1])])
            report = _stop_by_state(state, timeout_s)
            lines.append(
                f"shared server '{state['key']}' (pid {state['pid']}) was still running at session end "
                f"({gone} of {len(users)} recorded user(s) gone without leaving, e.g. a crashed worker); "
                f"{report.describe()}"
            )
            _record_stop(state, report, by="controller sweep")
            _write(state_path, state)
    return lines


def stopped_shared(root: Path) -> list[str]:
    """Controller side, at session end: the shared servers of this run that were launched and are stopped now (by
    their last user or :func:`sweep_shared`), for the interrupted-run line, as a run without xdist names the servers
    it stopped.

    :param root: the shared directory (controller: ``tmp_path_factory.getbasetemp()``).
    :returns: ``["eagle3 (pid 4242)", ...]`` in key order; empty when none.
    """
    if not root.is_dir():
        return []
    found = [_read(path) for path in sorted(root.glob(f"{_PREFIX}*.json"))]
    return [f"{s['key']} (pid {s['pid']})" for s in found if s.get("status") == "stopped" and s.get("pid")]


def load_run(path: Path) -> Any:
    """What a sibling xdist worker measured for a profile (``save_run``), or None when not yet written.

    The file is a pickle of the plugin's own run state, written by a worker of the same pytest session
    (``SpecdecSession.save_shared``), never one from elsewhere.
    """
    if not path.is_file():
        return None
    with path.open("rb") as fh:
        return pickle.load(fh)  # written by a sibling worker, save_run


def save_run(path: Path, data: object) -> None:
    """Write ``data`` for the sibling workers (``load_run``), atomically (a temporary file, then a rename)."""
    tmp = path.with_suffix(".tmp")
    with tmp.open("wb") as fh:
        pickle.dump(data, fh)
    os.replace(tmp, path)
