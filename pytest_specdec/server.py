"""Engine-agnostic server process lifecycle: port check, launch, log file, readiness wait, liveness, teardown.

Typical use (the plugin's session fixture)::

    proc = ServerProcess.start(spec, name="eagle3", log_path=log_dir / "eagle3.log")
    proc.wait_ready(probe, timeout_s=900, stall_s=120, on_progress=status_line)  # stops the server on any error
    try:
        ...                  # measured phase; proc.check_alive() after it
    finally:
        report = proc.stop() # SIGTERM group -> wait -> SIGKILL -> reap -> confirm no survivor, port free

Every process the plugin starts goes through this module, so teardown has one place to be right. Deadlines use
``time.monotonic()`` (they are not measurements, and must not move when a test replaces ``clock.now``).
"""

from __future__ import annotations

import atexit
import contextlib
import os
import re
import signal
import subprocess
import threading
import time
from collections.abc import Callable, Iterable
from concurrent.futures import Future, ThreadPoolExecutor
from concurrent.futures import wait as wait_futures
from dataclasses import dataclass
from pathlib import Path
from types import TracebackType
from typing import BinaryIO

import psutil

from pytest_specdec.diagnosis import classify_exit, diagnose_exit
from pytest_specdec.engines.base import LaunchSpec
from pytest_specdec.errors import ServerError, ServerStartError
from pytest_specdec.ports import find_free_port, port_holder, port_is_free, wait_port_free

__all__ = [
    "ProgressCallback",
    "ServerProcess",
    "StopReport",
    "classify_exit",
    "find_free_port",
    "leftovers",
    "port_holder",
    "stop_process_tree",
]

#: ``on_progress(elapsed_s, budget_s, last_line)``: called while waiting, at most every 0.5 s.
ProgressCallback = Callable[[float, float, str], None]

TAIL_LINES = 20
_TAIL_BYTES = 64 * 1024
_WATCH_INTERVAL_S = 0.2
_PROGRESS_INTERVAL_S = 0.5
#: After SIGKILL, how long to wait for the kernel to finish the processes before calling them survivors.
_KILL_WAIT_S = 5.0
#: After the processes are gone, how long to wait for the port to become bindable.
_PORT_WAIT_S = 2.0

def _read_tail(path: Path, max_bytes: int = _TAIL_BYTES) -> str:
    try:
        with open(path, "rb") as f:
            f.seek(0, os.SEEK_END)
            size = f.tell()
            f.seek(max(0, size - max_bytes))
            data = f.read()
    except OSError:
        return ""
    return data.decode("utf-8", "replace")


def _display_lines(text: str) -> list[str]:
    """Non-empty lines as a terminal shows them: for a tqdm-style line, the part after its last carriage return."""
    out = []
    for raw in text.split("\n"):
        line = raw.rstrip("\r").rsplit("\r", 1)[-1].rstrip()
        if line:
            out.append(line)
    return out


def _tail_lines(path: Path, n: int = TAIL_LINES) -> str:
    return "\n".join(_display_lines(_read_tail(path))[-n:])


_SECRET_NAME_PARTS = ("TOKEN", "KEY", "SECRET", "PASSWORD")


def launch_secrets(spec: LaunchSpec) -> tuple[str, ...]:
    """Values that must never reach a message or a log we keep: the ``--api-key`` argument and env values whose
    names look secret (TOKEN, KEY, SECRET, PASSWORD)."""
    found: list[str] = []
    argv = list(spec.argv)
    for i, arg in enumerate(argv):
        if arg.endswith("api-key") and i + 1 < len(argv):
            found.append(argv[i + 1])
        elif "api-key=" in arg:
            found.append(arg.split("=", 1)[1])
    found += [v for k, v in spec.env.items() if set(re.split(r"[_\-]+", k.upper())) & set(_SECRET_NAME_PARTS)]
    return tuple(sorted({v for v in found if len(v) >= 4}, key=len, reverse=True))


def redact(text: str, secrets: tuple[str, ...]) -> str:
    """``text`` with every secret value replaced by ``<redacted>``."""
    for secret in secrets:
        text = text.replace(secret, "<redacted>")
    return text


def _describe_exit(returncode: int) -> str:
    if returncode < 0:
        try:
            name = signal.Signals(-returncode).name
        except ValueError:
            name = "unknown signal"
        return f"was killed by signal {-returncode} ({name})"
    return f"exited with code {returncode}"


def _alive(proc: psutil.Process) -> bool:
    """Running and not a zombie. A zombie holds no memory, GPU or port; its reaping is its parent's (or init's) job."""
    try:
        return proc.is_running() and proc.status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False
    except psutil.AccessDenied:
        return True


def _key(proc: psutil.Process) -> tuple[int, float]:
    try:
        return (proc.pid, proc.create_time())
    except psutil.Error:
        return (proc.pid, 0.0)


@dataclass(frozen=True, slots=True)
class StopReport:
    """What a teardown did. Pids are sorted; ``duration_s`` runs from the first SIGTERM to the confirmed end."""

    name: str
    pid: int
    #: The main process's exit status as ``Popen.returncode`` (negative: signal); None when it was not our child.
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

    @property
    def clean(self) -> bool:
        """No survivor and the port is free."""
        return not self.survivors and self.port_free

    def describe(self) -> str:
        """One line, e.g. ``server 'eagle3' (pid 12) stopped in 0.31 s; SIGKILL needed for pid 15``."""
        text = f"server '{self.name}' (pid {self.pid}) stopped in {self.duration_s:.2f} s"
        if self.killed_pids:
            text += "; SIGKILL needed for pid " + ", ".join(map(str, self.killed_pids))
        if self.survivors:
            text += "; still alive: pid " + ", ".join(map(str, self.survivors))
        if not self.port_free:
            text += "; port still in use"
        return text


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
    host: str | None = None,
    port: int | None = None,
    timeout_s: float = 30.0,
    name: str = "",
) -> StopReport:
    """Stop a server started in its own session (``start_new_session=True``) and everything it started.

    Targets: ``root`` (the server, if still running) and its current descendants, every process in process group or
    session ``pid``, and ``known`` (a psutil snapshot of descendants taken while the server ran, which catches those
    that escaped the group with ``setsid`` and were re-parented). Steps: SIGTERM to the group and to each target
    outside it; wait up to ``timeout_s`` seconds; SIGKILL whatever remains; wait up to 5 s more; reap ``popen``;
    wait up to 2 s for ``host:port`` to be bindable. Like SGLang's ``terminate_and_kill_process_tree``
    (``python/sglang/test/test_utils.py``), which snapshots pids, SIGTERMs, waits, then ``kill_process_tree``
    (``python/sglang/srt/utils/common.py``); here the wait ends as soon as everything is gone.

    :returns: the StopReport; it never raises for processes that are already gone.
    """
    started = time.monotonic()
    targets: dict[tuple[int, float], psutil.Process] = {}

    def add(procs: Iterable[psutil.Process]) -> None:
        for proc in procs:
            if _alive(proc):
                targets.setdefault(_key(proc), proc)

    if root is not None and _alive(root):
        add([root])
        with contextlib.suppress(psutil.Error):
            add(root.children(recursive=True))
    add(known)
    add(_group_members(pid))

    _signal_group(pid, signal.SIGTERM)
    for proc in list(targets.values()):
        if not _in_group(proc, pid):
            with contextlib.suppress(psutil.Error):
                proc.terminate()
    terminated = sorted({proc.pid for proc in targets.values()})

    def remaining() -> list[psutil.Process]:
        if popen is not None:
            popen.poll()  # reap our child as soon as it exits, so it does not linger as a zombie
        return [proc for proc in targets.values() if _alive(proc)]

    deadline = started + timeout_s
    alive = remaining()
    while alive and time.monotonic() < deadline:
        time.sleep(0.02)
        alive = remaining()

    killed: list[int] = []
    if alive:
        killed = sorted(proc.pid for proc in alive)
        _signal_group(pid, signal.SIGKILL)
        for proc in alive:
            with contextlib.suppress(psutil.Error):
                proc.kill()
        kill_deadline = time.monotonic() + _KILL_WAIT_S
        while alive and time.monotonic() < kill_deadline:
            time.sleep(0.02)
            alive = remaining()
    if popen is not None:
        with contextlib.suppress(subprocess.TimeoutExpired):
            popen.wait(timeout=1.0)
    survivors = sorted(proc.pid for proc in alive)
    port_free = True
    if host is not None and port is not None:
        port_free = wait_port_free(host, port, _PORT_WAIT_S)
    return StopReport(
        name=name,
        pid=pid,
        returncode=popen.returncode if popen is not None else None,
        terminated_pids=tuple(terminated),
        killed_pids=tuple(killed),
        survivors=tuple(survivors),
        port_free=port_free,
        duration_s=time.monotonic() - started,
    )


class _LogFollower:
    """Reads what the server appended to its log since the last poll; remembers the last line and when it grew."""

    def __init__(self, path: Path, since: float) -> None:
        self._path = path
        self._file: BinaryIO | None = None
        self._tail = ""
        self.last_line = ""
        self.last_growth = since

    def poll(self) -> None:
        if self._file is None:
            try:
                self._file = open(self._path, "rb")  # noqa: SIM115 (closed in close())
            except OSError:
                return
        data = self._file.read(1 << 20)
        if not data:
            return
        self.last_growth = time.monotonic()
        # Keep some text before the new chunk, so that a line cut between two reads is seen whole.
        self._tail = (self._tail + data.decode("utf-8", "replace"))[-8192:]
        lines = _display_lines(self._tail)
        if lines:
            self.last_line = lines[-1][:300]

    def close(self) -> None:
        if self._file is not None:
            self._file.close()
            self._file = None


def _safe_probe(probe: Callable[[], bool]) -> bool:
    try:
        return bool(probe())
    except Exception:  # connection refused, 503, read timeout: "not ready yet"
        return False


#: Called with each new ServerProcess right after its launch (``sharing`` records the pid before the wait, so that
#: a worker dying mid-startup does not leave an unrecorded server).
_launch_listeners: list[Callable[[ServerProcess], None]] = []
_registry: list[ServerProcess] = []
_disowned: list[ServerProcess] = []
_registry_lock = threading.Lock()
_atexit_registered = False


class ServerProcess:
    """One launched server: its process, the psutil snapshot of its descendants, its log file.

    Attributes: ``pid``, ``name`` (the profile name), ``spec`` (the LaunchSpec), ``log_path``, ``base_url``.
    Use ``start`` to create one; ``with ServerProcess.start(...) as proc:`` stops it on exit.
    """

    def __init__(self, spec: LaunchSpec, name: str, log_path: Path, popen: subprocess.Popen[bytes]) -> None:
        self.spec = spec
        self.name = name
        self.log_path = log_path
        self.pid = popen.pid
        self._secrets = launch_secrets(spec)
        self.base_url = spec.base_url
        self._popen = popen
        self._started = time.monotonic()
        self._root = psutil.Process(popen.pid)  # an unreaped child always exists, even if it already exited
        self._known: dict[tuple[int, float], psutil.Process] = {}
        self._lock = threading.Lock()
        self._stop_lock = threading.Lock()
        self._stop_report: StopReport | None = None
        self._watch_stop = threading.Event()
        self._watcher = threading.Thread(target=self._watch, name=f"specdec-watch-{name}", daemon=True)

    # -- launch -----------------------------------------------------------------------------------------------

    @classmethod
    def start(cls, spec: LaunchSpec, *, name: str, log_path: Path) -> ServerProcess:
        """Check the ports, then launch ``spec.argv`` with exactly ``spec.env`` in a new session.

        stdout and stderr go to ``log_path`` (truncated; parent directories created); stdin is /dev/null. A
        background thread snapshots the process's descendants every 0.2 s (psutil), so that teardown also finds
        those that leave the process group with ``setsid``.

        :raises ServerStartError: ``spec.port`` or one of ``spec.derived_ports`` is held (cause "port in use"; the
            message names the holder's pid and command line when psutil can read them; nothing is launched), or
            ``argv[0]`` cannot be executed (cause "unknown").
        """
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
        log_path.parent.mkdir(parents=True, exist_ok=True)
        with open(log_path, "wb") as log:
            try:
                popen = subprocess.Popen(
                    list(spec.argv),
                    env=dict(spec.env),
                    stdin=subprocess.DEVNULL,
                    stdout=log,
                    stderr=subprocess.STDOUT,
                    start_new_session=True,
                )
            except OSError as exc:
                raise ServerStartError(
                    f"server '{name}' not launched: cannot run {spec.argv[0]!r}: {exc.strerror or exc}",
                    profile=name,
                    log_path=log_path,
                    cause="unknown",
                ) from None
        proc = cls(spec, name, log_path, popen)
        proc._watcher.start()
        _register(proc)
        for listener in list(_launch_listeners):
            listener(proc)
        return proc

    # -- readiness --------------------------------------------------------------------------------------------

    def wait_ready(
        self,
        probe: Callable[[], bool],
        *,
        timeout_s: float,
        stall_s: float | None = None,
        on_progress: ProgressCallback | None = None,
        poll_s: float = 0.1,
    ) -> float:
        """Wait until ``probe()`` returns True; stop the server and raise if it cannot get there.

        ``probe`` runs in a helper thread, one call at a time, every ``poll_s`` s; an exception from it (connection
        refused, HTTP 503, read timeout) means "not yet". Each call must be bounded: give its HTTP client short
        timeouts (a few seconds; SGLang's ``/health_generate`` itself takes >= 1 s). Meanwhile the process is
        checked every ``poll_s`` s, so a crash is reported within about ``poll_s`` even while a probe hangs.
        ``on_progress(elapsed_s, budget_s, last_line)`` is called at most every 0.5 s (elapsed since launch, s).
        The budget ``timeout_s`` counts from the launch; ``stall_s`` (None: off) is the longest time the log may
        stay silent. On KeyboardInterrupt (or any other exception) the server is stopped before re-raising.

        :returns: seconds from launch to ready.
        :raises ServerStartError: the process exited (message: exit code or signal, classified cause, seconds,
            log path, then the last 20 log lines), the log stalled (cause "stalled", naming the last line), or the
            budget ran out (cause "timeout").
        """
        log = _LogFollower(self.log_path, since=self._started)
        executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix=f"specdec-probe-{self.name}")
        future: Future[bool] | None = None
        next_probe = 0.0
        last_report = -1.0
        try:
            while True:
                log.poll()
                now = time.monotonic()
                elapsed = now - self._started
                returncode = self._popen.poll()
                if returncode is not None:
                    self.stop()
                    raise self._exit_error(returncode, elapsed, when="before it was ready")
                last_line = redact(log.last_line, self._secrets)
                if stall_s is not None and now - log.last_growth > stall_s:
                    raise self._fail(
                        f"stalled before it was ready: no new log line for {stall_s:g} s (elapsed {elapsed:.1f} s "
                        f"of {timeout_s:g} s); last line: {last_line!r}; raise startup_stall_s if this phase is "
                        "legitimately silent",
                        cause="stalled",
                    )
                if elapsed > timeout_s:
                    raise self._fail(
                        f"was not ready after {timeout_s:g} s (startup_timeout_s); last line: {last_line!r}",
                        cause="timeout",
                    )
                if on_progress is not None and now - last_report >= _PROGRESS_INTERVAL_S:
                    last_report = now
                    on_progress(elapsed, timeout_s, last_line)
                if future is None and now >= next_probe:
                    future = executor.submit(_safe_probe, probe)
                if future is not None:
                    wait_futures([future], timeout=poll_s)
                    if future.done():
                        if future.result():
                            return time.monotonic() - self._started
                        future = None
                        next_probe = time.monotonic() + poll_s
                else:
                    time.sleep(max(0.0, min(poll_s, next_probe - time.monotonic())))
        except BaseException:
            self.stop()
            raise
        finally:
            log.close()
            # A probe still in flight finishes on its own (bounded by its HTTP timeout); never join it here.
            executor.shutdown(wait=False, cancel_futures=True)

    def _fail(self, what: str, *, cause: str) -> ServerStartError:
        self.stop()
        tail = redact(_tail_lines(self.log_path), self._secrets)
        return ServerStartError(
            f"server '{self.name}' {what}; log: {self.log_path}\n{tail}",
            profile=self.name,
            log_path=self.log_path,
            cause=cause,
            log_tail=tail,
        )

    def _exit_error(self, returncode: int, elapsed: float, *, when: str) -> ServerStartError:
        tail = redact(_tail_lines(self.log_path), self._secrets)
        found = diagnose_exit(_read_tail(self.log_path), returncode, pids=self._known_pids())
        cause = found.cause
        detail = redact(found.detail(returncode), self._secrets)
        return ServerStartError(
            f"server '{self.name}' {_describe_exit(returncode)} {when} (cause: {cause}) after {elapsed:.1f} s"
            f"{': ' + detail if detail else ''}; log: {self.log_path}\n{tail}",
            profile=self.name,
            log_path=self.log_path,
            cause=cause,
            log_tail=tail,
        )

    # -- liveness ---------------------------------------------------------------------------------------------

    def alive(self) -> bool:
        """Whether the main server process is still running (not yet exited)."""
        return self._popen.poll() is None

    def check_alive(self) -> None:
        """Raise if the server died during the run (then its remaining processes are stopped).

        :raises ServerError: "server 'eagle3' (pid 12) exited with code 3 while running (cause: ...); log: ..."
            followed by the last 20 log lines.
        """
        returncode = self._popen.poll()
        if returncode is None:
            return
        pids = self._known_pids()
        self.stop()
        tail = redact(_tail_lines(self.log_path), self._secrets)
        found = diagnose_exit(_read_tail(self.log_path), returncode, pids=pids)
        detail = redact(found.detail(returncode), self._secrets)
        raise ServerError(
            f"server '{self.name}' (pid {self.pid}) {_describe_exit(returncode)} while running (cause: {found.cause})"
            f"{': ' + detail if detail else ''}; log: {self.log_path}\n{tail}",
            profile=self.name,
            log_path=self.log_path,
        )

    def _known_pids(self) -> list[int]:
        """Every pid this server had (main and descendants seen), dead or alive: what dmesg may name."""
        with self._lock:
            return [self.pid, *(key[0] for key in self._known)]

    def processes(self) -> list[psutil.Process]:
        """The live processes of this server: the main one, its descendants now, and those seen earlier."""
        self._snapshot()
        with self._lock:
            procs = list(self._known.values())
        return [proc for proc in procs if _alive(proc)]

    # -- teardown ---------------------------------------------------------------------------------------------

    def stop(self, timeout_s: float = 30.0) -> StopReport:
        """Stop the server and everything it started; idempotent (later calls return the first report).

        See ``stop_process_tree`` for the steps; ``timeout_s`` is the grace period between SIGTERM and SIGKILL.

        :returns: which pids needed SIGKILL, which survived, whether the port is free, and ``duration_s``.
        """
        with self._stop_lock:
            if self._stop_report is not None:
                return self._stop_report
            self._snapshot()
            self._watch_stop.set()
            with self._lock:
                known = list(self._known.values())
            self._stop_report = stop_process_tree(
                self.pid,
                root=self._root,
                known=known,
                popen=self._popen,
                host=self.spec.host,
                port=self.spec.port,
                timeout_s=timeout_s,
                name=self.name,
            )
            if self._secrets:
                # The engine may print its own args (SGLang logs server_args with api_key); the log is ours to keep.
                try:
                    text = self.log_path.read_text(errors="replace")
                    self.log_path.write_text(redact(text, self._secrets))
                except OSError:
                    pass
            return self._stop_report

    @property
    def stop_report(self) -> StopReport | None:
        """The report of the first ``stop``, or None while running."""
        return self._stop_report

    def disown(self) -> None:
        """Stop watching and forget this server without stopping it: another process (an xdist worker, see
        ``sharing``) now owns its teardown. ``leftovers`` no longer reports it."""
        self._watch_stop.set()
        with _registry_lock:
            if self in _registry:
                _registry.remove(self)
            _disowned.append(self)  # keep the Popen referenced: its __del__ would warn "still running"

    def __enter__(self) -> ServerProcess:
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.stop()

    def __repr__(self) -> str:
        state = "stopped" if self._stop_report else ("running" if self.alive() else "exited")
        return f"<ServerProcess {self.name!r} pid={self.pid} {self.base_url} {state}>"

    # -- descendant snapshots ---------------------------------------------------------------------------------

    def _snapshot(self) -> None:
        with self._lock:
            roots = [self._root, *self._known.values()]
        found: list[psutil.Process] = []
        for proc in roots:
            if not _alive(proc):
                continue
            found.append(proc)
            with contextlib.suppress(psutil.Error):
                found.extend(proc.children(recursive=True))
        with self._lock:
            for proc in found:
                self._known.setdefault(_key(proc), proc)

    def _watch(self) -> None:
        while not self._watch_stop.wait(_WATCH_INTERVAL_S):
            try:
                self._snapshot()
            except Exception:  # a watcher error must never surface as an unhandled thread exception
                continue


def _register(proc: ServerProcess) -> None:
    global _atexit_registered
    with _registry_lock:
        _registry.append(proc)
        if not _atexit_registered:
            atexit.register(leftovers)
            _atexit_registered = True


def leftovers(*, kill: bool = True, timeout_s: float = 5.0) -> list[psutil.Process]:
    """Session-end sweep over every server started (and not disowned) in this Python process.

    :param kill: stop each server not yet stopped (grace ``timeout_s`` s) and SIGKILL any process still alive.
    :returns: the processes that were still alive when called (empty after a clean session); the plugin reports
        them. Also registered with ``atexit`` as a fallback.
    """
    with _registry_lock:
        servers = list(_registry)
        for proc in _disowned:
            proc._popen.poll()  # reap a disowned child that another process stopped
    found: list[psutil.Process] = []
    for server in servers:
        found.extend(server.processes() if server.stop_report is None else _alive_of(server))
    if kill and found:
        for server in servers:
            server.stop(timeout_s=timeout_s)
        for proc in found:
            if _alive(proc):
                with contextlib.suppress(psutil.Error):
                    proc.kill()
    return found


def _alive_of(server: ServerProcess) -> list[psutil.Process]:
    with server._lock:
        procs = [server._root, *server._known.values()]
    return [proc for proc in procs if _alive(proc)]
