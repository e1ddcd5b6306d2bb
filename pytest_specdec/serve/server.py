"""One launched server, engine-agnostic: ``ServerProcess`` ties together its launch (``launch``), readiness wait
(``readiness``), process tree (``proctree``) and registration (``registry``).

Typical use (the plugin's session fixture)::

    proc = ServerProcess.start(spec, name="eagle3", log_path=log_dir / "eagle3.log", on_launch=record_it)
    proc.wait_ready(probe, timeout_s=900, stall_s=120, on_progress=status_line)  # stops the server on any error
    try:
        ...                  # measured phase; proc.check_alive() after it
    finally:
        report = proc.stop() # SIGTERM group -> wait -> SIGKILL -> reaped -> confirm no survivor or zombie, port free

Every process the plugin starts goes through this module, so teardown has one place to be right. Each server runs
under a supervisor process that reaps its tree and stops it within about 1.2 s if this pytest dies, however it dies
(``supervisor.py``). Deadlines use ``time.monotonic()``.
"""

from __future__ import annotations

import dataclasses
import threading
import time
from collections.abc import Callable
from pathlib import Path
from types import TracebackType
from typing import Protocol

import psutil

from pytest_specdec.core.errors import ServerError
from pytest_specdec.core.redaction import launch_secrets, redact
from pytest_specdec.engines.base import LaunchSpec
from pytest_specdec.serve import registry
from pytest_specdec.serve.diagnosis import diagnose_exit
from pytest_specdec.serve.launch import Launched, launch, owners
from pytest_specdec.serve.ports import find_free_port, port_holder
from pytest_specdec.serve.process_exit import describe_exit, launch_command, read_tail
from pytest_specdec.serve.proctree import Descendants, StopReport, stop_process_tree, zombie
from pytest_specdec.serve.readiness import ProgressCallback
from pytest_specdec.serve.readiness import wait_ready as _wait_ready
from pytest_specdec.serve.registry import leftovers

__all__ = [
    "ProgressCallback",
    "ServerHandle",
    "ServerProcess",
    "StopReport",
    "find_free_port",
    "leftovers",
    "port_holder",
    "stop_process_tree",
]

_WATCH_INTERVAL_S = 0.2


class ServerHandle(Protocol):
    """What the runner and ``sharing`` use of a server we launched: a ``ServerProcess``, or a ``nodegroup.NodeGroup``
    (several ranks, rank 0's ``pid``/``spec``/``log_path``). Both satisfy it; a server given by URL has none."""

    @property
    def name(self) -> str: ...

    @property
    def pid(self) -> int: ...

    @property
    def spec(self) -> LaunchSpec: ...

    @property
    def base_url(self) -> str: ...

    @property
    def log_path(self) -> Path: ...

    @property
    def stop_report(self) -> StopReport | None:
        """The report of the first ``stop``, or None while running."""
        ...

    def alive(self) -> bool:
        """Whether the server's process(es) still run."""
        ...

    def check_alive(self, when: str = "while running") -> None:
        """:param when: what the server was doing, as the error says it (e.g. ``"while running, after 3 of 8
            measured requests succeeded"``).
        :raises ServerError: the server died during the run (its remaining processes are then stopped)."""
        ...

    def processes(self) -> list[psutil.Process]:
        """The server's live processes (what a teardown must end)."""
        ...

    def stop(self, timeout_s: float = ...) -> StopReport:
        """Stop the server and everything it started; idempotent (later calls return the first report)."""
        ...

    def disown(self) -> None:
        """Forget the server without stopping it: another process (an xdist worker) owns its teardown."""
        ...


class ServerProcess:
    """One launched server: its process, the psutil snapshot of its descendants, its log file, its supervisor.

    Attributes: ``pid``, ``name`` (the profile name), ``spec`` (the LaunchSpec), ``log_path``, ``base_url``,
    ``started`` (``time.monotonic()`` at launch), ``secrets`` (values redacted from messages and the kept log).
    Use ``start`` to create one; ``with ServerProcess.start(...) as proc:`` stops it on exit.
    """

    def __init__(self, spec: LaunchSpec, name: str, log_path: Path, launched: Launched, started: float) -> None:
        self.spec = spec
        self.name = name
        self.log_path = log_path
        self.pid = launched.pid
        self.base_url = spec.base_url
        self.secrets = launch_secrets(spec.argv, spec.env)
        self.started = started
        self.record_path: Path | None = None
        self._launched = launched
        root: psutil.Process | None = None
        try:
            root = psutil.Process(launched.pid)
        except psutil.NoSuchProcess:
            pass  # exited and reaped by its supervisor before we looked; poll() has its status
        self._tree = Descendants(root)
        self._stop_lock = threading.Lock()
        self._stop_report: StopReport | None = None
        #: The message of the first ``check_alive`` that found the server dead: every later call raises it again.
        self._death: str | None = None

    # -- launch -----------------------------------------------------------------------------------------------

    @classmethod
    def start(
        cls,
        spec: LaunchSpec,
        *,
        name: str,
        log_path: Path,
        on_launch: Callable[[ServerProcess], None] | None = None,
        record_dir: Path | None = None,
    ) -> ServerProcess:
        """Check the ports, then launch ``spec.argv`` with exactly ``spec.env`` in a new session, under a supervisor.

        stdout and stderr go to ``log_path`` (truncated; parent directories created); stdin is /dev/null. A
        background thread snapshots the process's descendants every 0.2 s (psutil), so that teardown also finds
        those that leave the process group with ``setsid``. ``record_dir``: also record the server there for
        ``registry.reap`` (removed at teardown). ``on_launch(proc)`` is called right after the launch, before any
        wait (``sharing`` records the pid then, so that a worker dying mid-startup leaves no unrecorded server); if
        it raises, the server is stopped.

        :raises ServerStartError: ``spec.port`` or one of ``spec.derived_ports`` is held (cause "port in use"; the
            message names the holder's pid and command line when psutil can read them; nothing is launched), or
            ``argv[0]`` cannot be executed (cause "unknown").
        """
        started = time.monotonic()
        owned_by = owners()
        launched = launch(spec, name=name, log_path=log_path, owned_by=owned_by)
        proc = cls(spec, name, log_path, launched, started)
        proc._tree.watch(_WATCH_INTERVAL_S, name=f"specdec-watch-{name}")
        registry.register(proc)
        try:
            if record_dir is not None and proc._tree.root is not None:
                proc.record_path = registry.record(
                    record_dir,
                    pid=proc.pid,
                    profile=name,
                    base_url=proc.base_url,
                    owners=owned_by,
                    supervisor=launched.supervisor.pid,
                    log_path=log_path,
                )
            if on_launch is not None:
                on_launch(proc)
        except BaseException:
            proc.stop()
            raise
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
        """Wait until ``probe()`` returns True; stop the server and raise if it cannot get there
        (``readiness.wait_ready``, which documents the arguments).

        :returns: seconds from launch to ready.
        :raises ServerStartError: exited (cause, exit status, last log lines, launch command), stalled, or timed
            out.
        """
        return _wait_ready(self, probe, timeout_s=timeout_s, stall_s=stall_s, on_progress=on_progress, poll_s=poll_s)

    # -- liveness ---------------------------------------------------------------------------------------------

    def returncode(self) -> int | None:
        """The main process's exit status (``Popen.returncode`` convention), None while it runs or when unknown."""
        return self._launched.poll()

    def exited_at(self) -> float | None:
        """``time.monotonic()`` at which the main process was reaped (the supervisor's report), None while it runs or
        when unknown (a supervisor that died without saying)."""
        self._launched.poll()
        return self._launched.exited_at

    def exited(self) -> bool:
        """Whether the main server process has ended."""
        return self._launched.exited()

    def alive(self) -> bool:
        """Whether the main server process is still running (not yet exited)."""
        return not self.exited()

    def check_alive(self, when: str = "while running") -> None:
        """Raise if the server died during the run (then its remaining processes are stopped).

        The cause comes from its log and exit status as for a death before ready (``diagnosis.diagnose_exit``);
        with none found, the message says what is known (exit status, ``when``, the log's last lines). Either way it
        quotes the log's last meaningful lines once and ends with the launch command to run by hand, as
        ``readiness.exit_error`` does; the 20-line tail is left to the log (every test of the measurement shows
        this message, and a trial read the tail twice). The first
        call that finds the server dead decides the message: later calls raise the same one, whatever their
        ``when`` (a second test of the same measurement saw "before any of 4 measured requests" where the first
        had seen "after 2 of 4": its requests all failed on the server already dead).

        :param when: what the server was doing, as the message says it; ``measure.runner.measure`` passes how many
            measured requests had succeeded, e.g. ``"while running, after 3 of 8 measured requests succeeded"``.
        :raises ServerError: "server 'eagle3' (pid 12) exited with code 3 while running, after 3 of 8 measured
            requests succeeded (cause: scheduler exception): TypeError: ... at sglang/srt/models/llama.py:437; its
            last lines besides that one: "...", "..."; log: ...; fix: run its launch command by hand to see why it
            exits: ..." (or "(no cause found in its log; its last line: "...")" in place of the cause).
        """
        if self._death is None:
            if not self.exited():
                return
            pids = self.known_pids()
            self.stop()
            returncode = self.returncode()
            found = diagnose_exit(read_tail(self.log_path), returncode, pids=pids)
            command = launch_command(self.spec.argv, self.spec.env)
            self._death = redact(
                f"server '{self.name}' (pid {self.pid}) {describe_exit(returncode)} {when} "
                f"{found.explain(returncode, quote=True)}; log: {self.log_path}; fix: run its launch command by hand "
                f"to see why it exits: {command}",
                self.secrets,
            )
        raise ServerError(self._death, profile=self.name, log_path=self.log_path)

    def known_pids(self) -> list[int]:
        """Every pid this server had (main and descendants seen), dead or alive: what dmesg may name."""
        return [self.pid, *(proc.pid for proc in self._tree.known() if proc.pid != self.pid)]

    def processes(self) -> list[psutil.Process]:
        """The live processes of this server: the main one, its descendants now, and those seen earlier."""
        self._tree.snapshot()
        return self._tree.alive()

    def seen_processes(self) -> list[psutil.Process]:
        """Every process of this server seen so far, alive or not."""
        return self._tree.known()

    # -- teardown ---------------------------------------------------------------------------------------------

    def stop(self, timeout_s: float = 30.0) -> StopReport:
        """Stop the server and everything it started; idempotent (later calls return the first report).

        See ``proctree.stop_process_tree`` for the steps; ``timeout_s`` is the grace period between SIGTERM and
        SIGKILL. The supervisor reaps the tree, then exits; the report's ``zombies`` lists any not reaped.

        :returns: which pids needed SIGKILL, which survived or stayed zombies, whether the port is free, and
            ``duration_s``.
        """
        with self._stop_lock:
            if self._stop_report is not None:
                return self._stop_report
            self._tree.snapshot()
            self._tree.stop_watching()
            report = stop_process_tree(
                self.pid,
                root=self._tree.root,
                known=self._tree.known(),
                returncode=self._launched.poll,
                host=self.spec.host,
                port=self.spec.port,
                timeout_s=timeout_s,
                name=self.name,
            )
            self._launched.close()  # after it, every status line of the supervisor has been read
            zombies = tuple(p.pid for p in self._tree.known() if p.pid in report.zombies and zombie(p))
            self._stop_report = dataclasses.replace(report, returncode=self._launched.poll(), zombies=zombies)
            if self.record_path is not None:
                self.record_path.unlink(missing_ok=True)
            if self.secrets:
                # The engine may print its own args (SGLang logs server_args with api_key); the log is ours to keep.
                try:
                    text = self.log_path.read_text(errors="replace")
                    self.log_path.write_text(redact(text, self.secrets))
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
        self._tree.stop_watching()
        registry.disown(self)

    def release(self) -> None:
        """Reap the supervisor of a disowned server once another process stopped the server (it then exits)."""
        self._launched.supervisor.poll()

    def __enter__(self) -> ServerProcess:
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.stop()

    def __repr__(self) -> str:
        state = "stopped" if self._stop_report else ("running" if self.alive() else "exited")
        return f"<ServerProcess {self.name!r} pid={self.pid} {self.base_url} {state}>"
