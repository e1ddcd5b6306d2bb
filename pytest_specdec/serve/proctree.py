"""A server's process tree: liveness, descendant snapshots, and teardown (SIGTERM group -> wait -> SIGKILL -> reap).

Imports only the standard library and psutil: the supervisor (``supervisor.py``) runs this module without the
package's ``__init__`` (pydantic, yaml), so that a launch does not wait seconds for it to start.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import threading
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass

import psutil

__all__ = ["Descendants", "StopReport", "alive", "running", "stop_process_tree", "zombie"]

#: After SIGKILL, how long to wait for the kernel to finish the processes before calling them survivors.
_KILL_WAIT_S = 5.0
#: After the processes are gone, how long to wait for the port to become bindable.
_PORT_WAIT_S = 2.0
#: After the processes are gone, how long to wait for their parent (the supervisor, a subreaper) to reap them.
_REAP_WAIT_S = 1.0
#: psutil derives create_time from boot time + ticks: equal within this many seconds means the same process.
_SAME_PROCESS_S = 1.0


def running(pid: int, create_time: float) -> bool:
    """Whether process ``pid`` started at ``create_time`` (epoch s, psutil's) is still running and not a zombie.

    The one liveness check of the package (owners, users of a shared server, recorded servers, the tree at
    teardown). The start time guards against pid reuse; a zombie counts as gone (it holds no memory, GPU or port;
    its reaping is its parent's job); a process we may not inspect (another user) counts as running.
    """
    try:
        proc = psutil.Process(pid)
        return abs(proc.create_time() - create_time) < _SAME_PROCESS_S and proc.status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False
    except psutil.AccessDenied:
        return True


def alive(proc: psutil.Process) -> bool:
    """:func:`running` for a process already looked up (its pid and the start time psutil recorded then)."""
    return running(*_key(proc))


def zombie(proc: psutil.Process) -> bool:
    """Whether ``proc`` has exited but is not reaped yet (False when it is gone or cannot be read)."""
    try:
        return proc.status() == psutil.STATUS_ZOMBIE
    except psutil.Error:
        return False


def _key(proc: psutil.Process) -> tuple[int, float]:
    try:
        return (proc.pid, proc.create_time())
    except psutil.Error:
        return (proc.pid, 0.0)


class Descendants:
    """Every process seen under a root (the root, its descendants, theirs after re-parenting), snapshot by snapshot.

    ``root`` is None for a server already gone (and reaped) when we looked. A snapshot taken while the server runs
    is the only way to find later a descendant that left the process group with ``setsid`` and was re-parented
    when its parent died. Thread-safe. ``watch(interval_s)`` snapshots in a
    daemon thread until ``stop_watching()``.
    """

    def __init__(self, root: psutil.Process | None) -> None:
        self.root = root
        self._known: dict[tuple[int, float], psutil.Process] = {_key(root): root} if root is not None else {}
        self._lock = threading.Lock()
        self._stop = threading.Event()

    def snapshot(self) -> None:
        """Add the current descendants of every live process seen so far."""
        with self._lock:
            roots = list(self._known.values())
        found: list[psutil.Process] = []
        for proc in roots:
            if not alive(proc):
                continue
            with contextlib.suppress(psutil.Error):
                found.extend(proc.children(recursive=True))
        with self._lock:
            for proc in found:
                self._known.setdefault(_key(proc), proc)

    def known(self) -> list[psutil.Process]:
        """Every process seen, alive or not (the root first)."""
        with self._lock:
            return list(self._known.values())

    def alive(self) -> list[psutil.Process]:
        """Those still running (zombies excluded)."""
        return [proc for proc in self.known() if alive(proc)]

    def watch(self, interval_s: float, name: str) -> None:
        """Snapshot every ``interval_s`` s in a daemon thread named ``name``."""

        def loop() -> None:
            while not self._stop.wait(interval_s):
                try:
                    self.snapshot()
                except Exception:  # a watcher error must never surface as an unhandled thread exception
                    continue

        threading.Thread(target=loop, name=name, daemon=True).start()

    def stop_watching(self) -> None:
        self._stop.set()


@dataclass(frozen=True, slots=True)
class StopReport:
    """What a teardown did. Pids are sorted; ``duration_s`` runs from the first SIGTERM to the confirmed end."""

    name: str
    pid: int
    #: The main process's exit status as ``Popen.returncode`` (negative: signal); None when not known to us.
    returncode: int | None
    #: Every process that was sent SIGTERM (the group, plus descendants that left it with setsid).
    terminated_pids: tuple[int, ...]
    #: Those still alive after the grace period, sent SIGKILL.
    killed_pids: tuple[int, ...]
    #: Those still alive after SIGKILL and ``_KILL_WAIT_S`` (should be empty: uninterruptible sleep, another user).
    survivors: tuple[int, ...]
    #: Whether the server's port was bindable again at the end (True when no port was known).
    port_free: bool
    duration_s: float
    #: Processes of the tree left as zombies (exited, not reaped by their parent) at the end; should be empty.
    zombies: tuple[int, ...] = ()

    @property
    def clean(self) -> bool:
        """No survivor, no zombie, and the port is free."""
        return not self.survivors and not self.zombies and self.port_free

    def describe(self) -> str:
        """One line, e.g. ``server 'eagle3' (pid 12) stopped in 0.31 s; SIGKILL needed for pid 15``."""
        return "; ".join([f"server '{self.name}' (pid {self.pid}) stopped in {self.duration_s:.2f} s", *self.notes()])

    def notes(self) -> list[str]:
        """What the teardown needed or left, one phrase each (empty for a plain stop): ``SIGKILL needed for pid
        15``, ``still alive: pid 16``, ``pid 17 left as a zombie (already dead, ...)``, ``port still in use``."""
        notes = []
        if self.killed_pids:
            notes.append("SIGKILL needed for pid " + ", ".join(map(str, self.killed_pids)))
        if self.survivors:
            notes.append("still alive: pid " + ", ".join(map(str, self.survivors)))
        if self.zombies:
            # Only a process's parent can reap it; when that parent is PID 1 of a container that never reaps, the
            # entry stays. Nothing is held: no memory, GPU or port.
            pids = ", ".join(map(str, self.zombies))
            notes.append(
                f"pid {pids} left as a zombie (already dead, holding no memory, GPU or port: only its exit status "
                "remains, for its parent to collect)"
                if len(self.zombies) == 1
                else f"pids {pids} left as zombies (already dead, holding no memory, GPU or port: only their exit "
                "status remains, for their parent to collect)"
            )
        if not self.port_free:
            notes.append("port still in use")
        return notes


def _signal_group(pgid: int, sig: signal.Signals) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pgid, sig)


def _in_group(proc: psutil.Process, pgid: int) -> bool:
    try:
        return os.getpgid(proc.pid) == pgid
    except OSError:
        return False


def _group_members(pgid: int) -> list[psutil.Process]:
    """Processes in process group or session ``pgid`` (children re-parented to init keep both)."""
    found = []
    for proc in psutil.process_iter():
        with contextlib.suppress(OSError):
            if os.getpgid(proc.pid) == pgid or os.getsid(proc.pid) == pgid:
                found.append(proc)
    return found


def stop_process_tree(
    pid: int,
    *,
    root: psutil.Process | None = None,
    known: Iterable[psutil.Process] = (),
    popen: subprocess.Popen[bytes] | None = None,
    reap: Callable[[], None] | None = None,
    returncode: Callable[[], int | None] | None = None,
    host: str | None = None,
    port: int | None = None,
    timeout_s: float = 30.0,
    name: str = "",
) -> StopReport:
    """Stop a server started in its own session (``start_new_session=True``) and everything it started.

    Targets: ``root`` (the server, if still running) and its current descendants, every process in process group or
    session ``pid``, and ``known`` (a psutil snapshot of descendants taken while the server ran, which catches those
    that escaped the group with ``setsid`` and were re-parented). Steps: SIGTERM to the group and to each target
    outside it; wait up to ``timeout_s`` seconds; SIGKILL whatever remains; wait up to 5 s more; reap (``popen``
    when the server is our child, ``reap()`` when we are its subreaper); wait up to 1 s for the parent to reap the
    targets (those still zombies are reported); wait up to 2 s for ``host:port`` to be bindable (not when
    another program listens on it: ``ports.wait_port_free``). Like SGLang's
    ``terminate_and_kill_process_tree`` (``python/sglang/test/test_utils.py``), which snapshots pids, SIGTERMs,
    waits, then ``kill_process_tree`` (``python/sglang/srt/utils/common.py``); here the wait ends as soon as
    everything is gone.

    :param returncode: reads the main process's exit status when ``popen`` is not ours (e.g. from the supervisor).
    :returns: the StopReport; it never raises for processes that are already gone.
    """
    started = time.monotonic()
    targets, seen = _stop_targets(pid, root, known)
    _signal_group(pid, signal.SIGTERM)
    for proc in targets:
        if not _in_group(proc, pid):
            with contextlib.suppress(psutil.Error):
                proc.terminate()
    terminated = sorted({proc.pid for proc in targets})

    def remaining() -> list[psutil.Process]:
        if popen is not None:
            popen.poll()  # reap our child as soon as it exits, so it does not linger as a zombie
        if reap is not None:
            reap()
        return [proc for proc in targets if alive(proc)]

    left = _wait_until_gone(remaining, started + timeout_s)
    killed = sorted(proc.pid for proc in left)
    if left:
        _signal_group(pid, signal.SIGKILL)
        for proc in left:
            with contextlib.suppress(psutil.Error):
                proc.kill()
        left = _wait_until_gone(remaining, time.monotonic() + _KILL_WAIT_S)
    if popen is not None:
        with contextlib.suppress(subprocess.TimeoutExpired):
            popen.wait(timeout=1.0)
    survivors = sorted(proc.pid for proc in left)
    zombies = _await_reaped(seen, reap)
    port_free = True
    if host is not None and port is not None:
        from pytest_specdec.serve.ports import wait_port_free  # not needed (nor importable) in the supervisor

        port_free = wait_port_free(host, port, _PORT_WAIT_S, ours={pid, *(proc.pid for proc in seen)})
    status = popen.returncode if popen is not None else (returncode() if returncode is not None else None)
    return StopReport(
        name=name,
        pid=pid,
        returncode=status,
        terminated_pids=tuple(terminated),
        killed_pids=tuple(killed),
        survivors=tuple(survivors),
        port_free=port_free,
        duration_s=time.monotonic() - started,
        zombies=tuple(sorted(proc.pid for proc in zombies)),
    )


def _stop_targets(
    pid: int, root: psutil.Process | None, known: Iterable[psutil.Process]
) -> tuple[list[psutil.Process], list[psutil.Process]]:
    """(the live processes to stop: ``root`` and its descendants, ``known``, the members of group/session ``pid``;
    those plus the zombies among them, whose reaping is checked at the end), each process once."""
    targets: dict[tuple[int, float], psutil.Process] = {}
    seen: dict[tuple[int, float], psutil.Process] = {}
    candidates: list[psutil.Process] = []
    if root is not None and alive(root):
        candidates.append(root)
        with contextlib.suppress(psutil.Error):
            candidates.extend(root.children(recursive=True))
    candidates.extend(known)
    candidates.extend(_group_members(pid))
    for proc in candidates:
        if alive(proc):
            targets.setdefault(_key(proc), proc)
            seen.setdefault(_key(proc), proc)
        elif zombie(proc):
            seen.setdefault(_key(proc), proc)
    return list(targets.values()), list(seen.values())


def _wait_until_gone(remaining: Callable[[], list[psutil.Process]], deadline: float) -> list[psutil.Process]:
    """Poll ``remaining()`` every 20 ms until it is empty or ``deadline`` (``time.monotonic``) passes; its last
    answer."""
    left = remaining()
    while left and time.monotonic() < deadline:
        time.sleep(0.02)
        left = remaining()
    return left


def _await_reaped(seen: Iterable[psutil.Process], reap: Callable[[], None] | None) -> list[psutil.Process]:
    """Wait up to ``_REAP_WAIT_S`` for the parent (or ``reap()``, when we are the subreaper) to reap the stopped
    processes; those still zombies then."""
    deadline = time.monotonic() + _REAP_WAIT_S
    zombies = [proc for proc in seen if zombie(proc)]
    while zombies and time.monotonic() < deadline:
        time.sleep(0.02)
        if reap is not None:
            reap()
        zombies = [proc for proc in zombies if zombie(proc)]
    return zombies
