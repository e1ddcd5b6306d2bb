"""Client worker processes: one phase's requests spread over several processes, each with its own event loop
(:func:`~pytest_specdec.measure.client.run_phase` ``workers``): their start, the "ready"/"go" handshake, progress
messages, and their results or errors sent back.
"""

from __future__ import annotations

import asyncio
import os
from collections.abc import Callable, Sequence
from typing import Any

from pytest_specdec.core.errors import ServerError
from pytest_specdec.core.records import RequestRecord
from pytest_specdec.measure.streams import PhaseOptions, RawPhase, run_share
from pytest_specdec.measure.workload import RequestSpec

__all__ = ["run_workers", "worker_main"]

#: Seconds a worker process may take to start (interpreter, imports) before the phase is abandoned.
_WORKER_START_S = 120.0


def run_workers(
    base_url: str,
    requests: Sequence[RequestSpec],
    shares: list[list[int]],
    options: list[PhaseOptions],
    on_request_done: Callable[[RequestRecord], None] | None = None,
) -> list[RawPhase]:
    """Start one process per share, wait until all are ready, start them together, collect their results.

    ``options[w]`` is worker ``w``'s (its share of the concurrency, the model already resolved); with
    ``on_request_done`` each worker reports every finished request.

    Workers are ``python -c`` subprocesses talking pickles over a socket pair (``multiprocessing.connection``),
    not ``multiprocessing.Process``: spawn would re-run the caller's ``__main__`` (a script without a main guard
    breaks), and fork is unsafe in a process that may hold threads (xdist, connection pools).

    The "go" message carries one start time (``time.perf_counter()``, CLOCK_MONOTONIC on Linux: one clock for every
    process) that every worker's open-loop arrival times count from, so the shares keep one schedule.
    """
    import multiprocessing.connection
    import socket
    import subprocess
    import sys
    import time

    procs: list[subprocess.Popen[bytes]] = []
    conns: list[multiprocessing.connection.Connection] = []
    try:
        for share, share_options in zip(shares, options, strict=True):
            mine, theirs = socket.socketpair()
            with mine, theirs:
                fd = theirs.fileno()
                procs.append(
                    subprocess.Popen(
                        [sys.executable, "-c", _WORKER_CODE, str(fd), _PACKAGE_ROOT],
                        pass_fds=[fd],
                        stdin=subprocess.DEVNULL,
                    )
                )
                conn = multiprocessing.connection.Connection(mine.detach())
            conns.append(conn)
            conn.send((base_url, [requests[i] for i in share], share, share_options, on_request_done is not None))
        for w, conn in enumerate(conns):
            _expect(conn, procs[w], w, "ready", _WORKER_START_S)
        start_at = time.perf_counter() + _GO_MARGIN_S
        for conn in conns:
            conn.send(("go", start_at))
        raws: list[RawPhase | None] = [None] * len(conns)
        pending = dict(enumerate(conns))
        while pending:
            for ready in multiprocessing.connection.wait(list(pending.values())):
                w = next(k for k, c in pending.items() if c is ready)
                got = _expect(ready, procs[w], w, "done", None, on_tick=on_request_done)
                if got is not _TICK:
                    raws[w] = got
                    del pending[w]
        return [raw for raw in raws if raw is not None]
    finally:
        for conn in conns:
            conn.close()
        for proc in procs:
            if proc.poll() is None:
                proc.terminate()
        for proc in procs:
            try:
                proc.wait(10)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()


#: Seconds between the "go" messages and the shared start time: every worker has its message by then.
_GO_MARGIN_S = 0.02
#: The worker imports this copy of the package even when it is not installed (a source checkout on sys.path only).
_PACKAGE_ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
_WORKER_CODE = (
    "import sys; sys.path.insert(0, sys.argv[2]); "
    "from pytest_specdec.measure.workers import worker_main; worker_main(int(sys.argv[1]))"
)


#: What :func:`_expect` returns for a worker's per-request progress message.
_TICK = object()


def _expect(
    conn: Any,
    proc: Any,
    w: int,
    what: str,
    timeout_s: float | None,
    on_tick: Callable[[RequestRecord], None] | None = None,
) -> Any:
    """The next message of worker ``w``, which must be ``(what, payload)``; an error it sent is raised here. With
    ``on_tick``, a ``("tick", (ok, error, start_s, end_s, completion_tokens))`` message (one finished request) goes to
    it as a record and ``_TICK`` is returned.

    :raises SpecdecError: the worker died or did not answer within ``timeout_s``.
    """
    from pytest_specdec.core.errors import SpecdecError

    if timeout_s is not None and not conn.poll(timeout_s):
        raise SpecdecError(f"client worker {w} (pid {proc.pid}) did not start within {timeout_s:g} s")
    try:
        kind, payload = conn.recv()
    except (EOFError, OSError):
        code = proc.wait(5)
        raise SpecdecError(f"client worker {w} (pid {proc.pid}) died (exit code {code})") from None
    if kind == "tick" and on_tick is not None:
        ok, error, start_s, end_s, tokens = payload
        on_tick(RequestRecord(ok=ok, error=error, start_s=start_s, end_s=end_s, prompt_tokens=0,
                              completion_tokens=tokens))  # fmt: skip
        return _TICK
    if kind == "error":
        raise payload
    if kind != what:
        raise SpecdecError(f"client worker {w} (pid {proc.pid}) sent {kind!r}, expected {what!r}")
    return payload


def worker_main(fd: int) -> None:
    """One worker process: read its share, report ready, wait for "go", run, send back a :class:`RawPhase` or the
    error (see :func:`run_workers`)."""
    import multiprocessing.connection

    conn = multiprocessing.connection.Connection(fd)
    try:
        base_url, requests, numbers, options, progress = conn.recv()
        conn.send(("ready", None))
        go = conn.recv()
        if not (isinstance(go, tuple) and go[0] == "go"):
            return
        start_at: float = go[1]
        out: list[RawPhase] = []

        def tick(r: RequestRecord) -> None:
            conn.send(("tick", (r.ok, r.error, r.start_s, r.end_s, r.completion_tokens)))

        on_done = tick if progress else None

        async def main() -> None:
            out.append(
                await run_share(base_url, requests, numbers, options, on_request_done=on_done, start_at=start_at)
            )

        asyncio.run(main())
        conn.send(("done", out[0]))
    except (EOFError, KeyboardInterrupt):
        pass  # the parent went away or stopped us
    except Exception as exc:  # noqa: BLE001 - every failure goes to the parent, which raises it
        try:
            conn.send(("error", exc))
        except Exception:  # noqa: BLE001 - an exception that does not pickle
            conn.send(("error", ServerError(f"client worker failed: {type(exc).__name__}: {exc}")))
    finally:
        conn.close()
