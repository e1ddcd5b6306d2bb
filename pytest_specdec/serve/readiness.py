"""Wait until a launched server is ready: probe it in a helper thread, follow its log, notice a crash or a stall.

``wait_ready(server, probe, timeout_s=...)`` is what ``ServerProcess.wait_ready`` runs; it stops the server on any
error. Deadlines use ``time.monotonic()`` (they are not measurements, and must not move when a test replaces
``clock.now``).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from concurrent.futures import wait as wait_futures
from pathlib import Path
from typing import TYPE_CHECKING, BinaryIO, Protocol

from pytest_specdec.core.errors import ServerStartError
from pytest_specdec.core.redaction import redact
from pytest_specdec.serve.diagnosis import diagnose_exit
from pytest_specdec.serve.process_exit import describe_exit, display_lines, launch_command, read_tail, tail_lines

if TYPE_CHECKING:
    from pytest_specdec.engines.base import LaunchSpec

__all__ = ["ProgressCallback", "exit_error", "wait_ready"]

#: ``on_progress(elapsed_s, budget_s, last_line)``: called while waiting, at most every 0.5 s.
ProgressCallback = Callable[[float, float, str], None]

_PROGRESS_INTERVAL_S = 0.5


class Waitable(Protocol):
    """What ``wait_ready`` needs of a launched server (``ServerProcess`` is one)."""

    name: str
    log_path: Path
    spec: LaunchSpec
    #: ``time.monotonic()`` at launch.
    started: float
    secrets: tuple[str, ...]

    def returncode(self) -> int | None: ...

    def exited(self) -> bool: ...

    def known_pids(self) -> list[int]: ...

    def stop(self) -> object: ...


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
        lines = display_lines(self._tail)
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


def exit_error(server: Waitable, elapsed: float, *, when: str) -> ServerStartError:
    """The error for a server that ended ``when`` (e.g. "before it was ready"), one message whether or not its log
    names a cause: the diagnosed cause and its detail (``diagnosis.diagnose_exit``) or, with none found, what is
    known instead of "cause: unknown"; the exit status and seconds since launch; the log's last meaningful lines,
    once (``ExitDiagnosis.quoted``: not the line the cause says, nor argparse's usage lines); the log's path; and the
    fix to try: the launch command, to run by hand, e.g.
    ``server 'eagle3' exited with code 1 before it was ready (cause: out of memory) after 2.1 s:
    torch.OutOfMemoryError: CUDA out of memory; its last line besides that one: "Capturing batches"; log: ...; fix: run
    its launch command by hand to see why it exits: PYTHONPATH=/src /venv/bin/python -m sglang.launch_server ...``
    or ``server 'eagle3' exited with code 1 before it was ready after 2.1 s (no cause found in its log; its last
    line: "Load weight begin"); log: ...; fix: ...``. Secrets are redacted. The log's 20-line tail is kept in
    ``ServerStartError.log_tail``, not in the message: every test of the profile shows the message, and a trial
    read the tail twice in it. ``ServerStartError.cause`` is ``"unknown"`` when no cause was found."""
    returncode = server.returncode()
    tail = redact(tail_lines(server.log_path), server.secrets)
    found = diagnose_exit(read_tail(server.log_path), returncode, pids=server.known_pids())
    status = f"server '{server.name}' {describe_exit(returncode)} {when}"
    if found.cause == "unknown":
        said = f"{status} after {elapsed:.1f} s {found.explain(returncode)}"
    else:
        detail = found.detail(returncode)
        said = f"{status} (cause: {found.cause}) after {elapsed:.1f} s" + (f": {detail}" if detail else "")
        quoted = found.quoted()
        said += f"; {quoted}" if quoted else ""
    command = launch_command(server.spec.argv, server.spec.env)
    text = f"{said}; log: {server.log_path}; fix: run its launch command by hand to see why it exits: {command}"
    return ServerStartError(
        redact(text, server.secrets),
        profile=server.name,
        log_path=server.log_path,
        cause=found.cause,
        log_tail=tail,
    )


def _fail(server: Waitable, what: str, *, cause: str) -> ServerStartError:
    server.stop()
    tail = redact(tail_lines(server.log_path), server.secrets)
    return ServerStartError(
        f"server '{server.name}' {what}; log: {server.log_path}\n{tail}",
        profile=server.name,
        log_path=server.log_path,
        cause=cause,
        log_tail=tail,
    )


def wait_ready(
    server: Waitable,
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
    :raises ServerStartError: the process exited (message: :func:`exit_error`), the log stalled (cause "stalled",
        naming the last line, then the last 20 log lines), or the budget ran out (cause "timeout").
    """
    log = _LogFollower(server.log_path, since=server.started)
    executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix=f"specdec-probe-{server.name}")
    future: Future[bool] | None = None
    next_probe = 0.0
    last_report = -1.0
    try:
        while True:
            log.poll()
            now = time.monotonic()
            elapsed = now - server.started
            if server.exited():
                server.stop()
                raise exit_error(server, elapsed, when="before it was ready")
            last_line = redact(log.last_line, server.secrets)
            if stall_s is not None and now - log.last_growth > stall_s:
                raise _fail(
                    server,
                    f"stalled before it was ready: no new log line for {stall_s:g} s (elapsed {elapsed:.1f} s "
                    f"of {timeout_s:g} s); last line: {last_line!r}; raise startup_stall_s if this phase is "
                    "legitimately silent",
                    cause="stalled",
                )
            if elapsed > timeout_s:
                raise _fail(
                    server,
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
                        return time.monotonic() - server.started
                    future = None
                    next_probe = time.monotonic() + poll_s
            else:
                time.sleep(max(0.0, min(poll_s, next_probe - time.monotonic())))
    except BaseException:
        server.stop()
        raise
    finally:
        log.close()
        # A probe still in flight finishes on its own (bounded by its HTTP timeout); never join it here.
        executor.shutdown(wait=False, cancel_futures=True)
