"""Streaming HTTP clients for one measured phase (SGLang ``/generate``, OpenAI-compatible) -> per-request records.

All HTTP of a measurement goes through this module and the three below it: ``sse.py`` (request bodies, stream
parsing), ``streams.py`` (one process's streams, the stall watchdog, the client's load) and ``workers.py`` (a phase
spread over worker processes). The control plane (``GET /v1/models``, ``/metrics``) uses httpx; the streams use
aiohttp (``streams.py`` says why). Every phase records the client's own event-loop lag and CPU use
(:class:`ClientLoad`).
"""

from __future__ import annotations

import asyncio
import dataclasses
import math
import os
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import httpx

from pytest_specdec.core import clock
from pytest_specdec.core.auth import bearer_headers, tls_context
from pytest_specdec.core.errors import ServerError
from pytest_specdec.core.records import RequestRecord
from pytest_specdec.measure.sse import Api
from pytest_specdec.measure.streams import (
    LAG_PROBE_INTERVAL_S,
    ClientLoad,
    PhaseOptions,
    client_load,
    resolve_model,
    run_share,
)
from pytest_specdec.measure.workers import run_workers
from pytest_specdec.measure.workload import RequestSpec

__all__ = [
    "LAG_PROBE_INTERVAL_S",
    "STREAMS_PER_WORKER",
    "WORKER_CPU_TARGET",
    "Api",
    "ClientLoad",
    "PhaseOptions",
    "PhaseResult",
    "auto_workers",
    "fetch_text",
    "run_phase",
    "run_requests",
]


@dataclass(frozen=True, slots=True)
class PhaseResult:
    """The records of one phase, in request order, and the phase's ``clock.now()`` bounds in seconds.

    ``start_s`` is the first request's ``start_s`` (just before it was sent) and ``end_s`` the latest record's
    ``end_s`` (its ``[DONE]`` arrival, or its failure): client set-up (session, connections, ``GET /v1/models``) and
    tear-down are outside, as in SGLang ``bench_serving`` (``benchmark_start_time`` before the first request,
    duration after the last one finished).
    """

    records: tuple[RequestRecord, ...]
    start_s: float
    end_s: float
    #: How busy the client itself was during the phase (None when nothing was measured, e.g. no request).
    load: ClientLoad | None = None

    @property
    def duration_s(self) -> float:
        """Phase wall time in seconds: first request sent to last response finished."""
        return self.end_s - self.start_s


async def run_requests(
    base_url: str,
    requests: Sequence[RequestSpec],
    options: PhaseOptions | None = None,
    *,
    transport: httpx.AsyncBaseTransport | None = None,
    on_request_done: Callable[[RequestRecord], None] | None = None,
) -> PhaseResult:
    """Send ``requests`` as streams, at most ``options.concurrency`` in flight, issued strictly in list order.

    :param base_url: ``http://host:port`` of the server.
    :param options: API, concurrency, key, timeouts and model (:class:`PhaseOptions`; None: its defaults).
    :param transport: an httpx transport for every request instead of aiohttp and the network (tests:
        ``httpx.MockTransport``).
    :param on_request_done: called in the event loop with each request's record as it finishes (ok or failed; not
        for requests cancelled by a stall), once per request and never per stream event: a progress display.
    :returns: the records, one per request in request order, and the phase bounds (:class:`PhaseResult`). Failed
        requests (connection error, HTTP status, error event, stream without ``[DONE]``, total timeout) are
        records with ``ok=False`` and ``error`` text.
    :raises ServerError: a stream stalled ("server stalled: no token for N s on request i ..."), or the model name
        could not be determined; in-flight requests are cancelled first.
    """
    options = options or PhaseOptions()
    if options.api != "generate" and options.model is None:
        model = await resolve_model(base_url, options.headers, options.connect_timeout_s, transport)
        options = dataclasses.replace(options, model=model)
    raw = await run_share(
        base_url, requests, range(len(requests)), options, transport=transport, on_request_done=on_request_done
    )
    return _phase(raw.records, client_load(raw.lag_s, raw.cpu_s, raw.wall_s))


def _phase(records: Sequence[RequestRecord], load: ClientLoad | None) -> PhaseResult:
    if records:
        start_s = min(r.start_s for r in records)
        end_s = max(r.end_s for r in records)
    else:
        start_s = end_s = clock.now()
    return PhaseResult(records=tuple(records), start_s=start_s, end_s=end_s, load=load)


#: Concurrent streams one worker process takes before :func:`auto_workers` adds another. Measured 2026-12-02 on
#: the H200 (real SGLang with CUDA graphs, c64, one SSE event per token): one process fell behind the server at
#: 15.6-19.2k events/s (its event-loop lag over the overload limit in 4 of 4 passes, tok/s 0.67-0.95 of
#: bench_serving's) and kept up at 6.3k events/s; 16 streams a worker keeps each under ~6k events/s there.
STREAMS_PER_WORKER = 16
#: CPU (cores) one worker should stay under; a measured phase above it makes :func:`auto_workers` add workers.
WORKER_CPU_TARGET = 0.5


def auto_workers(concurrency: int, load: ClientLoad | None = None, *, cpus: int | None = None) -> int:
    """Worker processes for a phase of ``concurrency`` streams, given the client's load in an earlier phase.

    ``ceil(concurrency / STREAMS_PER_WORKER)`` up to half the cores (the server and its tokenizer processes need the
    rest when it is local), raised to ``ceil(load.cpu_cores / WORKER_CPU_TARGET)`` when a measured phase kept the
    client busier than that; at most ``cpus - 1`` and ``concurrency``; at least 1.

    Examples (16 cores): concurrency 1 -> 1; 64 -> 4; 256 -> 8; 64 after a phase that used 2.6 cores -> 6.
    """
    cpus = cpus or os.cpu_count() or 1
    want = min(math.ceil(concurrency / STREAMS_PER_WORKER), max(1, cpus // 2))
    if load is not None:
        want = max(want, math.ceil(load.cpu_cores / WORKER_CPU_TARGET))
    return max(1, min(want, concurrency, cpus - 1))


def run_phase(
    base_url: str,
    requests: Sequence[RequestSpec],
    options: PhaseOptions | None = None,
    *,
    workers: int = 1,
    transport: httpx.AsyncBaseTransport | None = None,
    on_request_done: Callable[[RequestRecord], None] | None = None,
) -> PhaseResult:
    """Synchronous :func:`run_requests` in a fresh event loop, or spread over ``workers`` processes.

    With ``workers > 1`` (and no ``transport``), request ``i`` goes to worker ``i % workers``, which sends its share
    in order with its share of ``concurrency`` (the first ``concurrency % workers`` workers one more), each in its
    own process and event loop. The workers start (spawn, imports, request bodies) before the first request; all
    begin together; their records come back merged in request order. Every time is ``perf_counter``, which is
    CLOCK_MONOTONIC on Linux: one clock for all processes. ``load`` pools the lag probes and sums the CPU.
    Must not be called from inside a running event loop (``asyncio.run`` refuses).

    :param options: as :func:`run_requests`.
    :param workers: processes to use, at most ``options.concurrency`` and the number of requests (see
        :func:`auto_workers`).
    :param transport: as :func:`run_requests` (one process then, whatever ``workers``).
    :param on_request_done: as :func:`run_requests`, in this process; with workers, each worker sends a small
        message per finished request and the callback gets a record with ``ok``, ``error``, ``start_s``, ``end_s``
        and ``completion_tokens`` only (no stream times).
    :returns: as :func:`run_requests`; the phase bounds exclude the event loop's creation and tear-down and the
        workers' start.
    :raises ServerError: as :func:`run_requests` (from any worker; the others are stopped).
    :raises SpecdecError: a worker process failed to start or died.
    """
    options = options or PhaseOptions()
    concurrency = options.concurrency
    n = max(1, min(workers, concurrency, len(requests)))
    if n == 1 or transport is not None:
        out: list[PhaseResult] = []

        async def main() -> None:
            # Returns None: Python 3.11's asyncio.run formats the main task's repr (result included) when it
            # restores the SIGINT handler, which would repr every record (seconds for a large phase).
            out.append(
                await run_requests(base_url, requests, options, transport=transport, on_request_done=on_request_done)
            )

        asyncio.run(main())
        return out[0]
    if options.api != "generate" and options.model is None:
        model = asyncio.run(resolve_model(base_url, options.headers, options.connect_timeout_s, None))
        options = dataclasses.replace(options, model=model)
    shares = [list(range(w, len(requests), n)) for w in range(n)]
    per_worker = [
        dataclasses.replace(options, concurrency=concurrency // n + (1 if w < concurrency % n else 0)) for w in range(n)
    ]
    raws = run_workers(base_url, requests, shares, per_worker, on_request_done)
    records: list[RequestRecord | None] = [None] * len(requests)
    for share, raw in zip(shares, raws, strict=True):
        for index, record in zip(share, raw.records, strict=True):
            records[index] = record
    merged = [r for r in records if r is not None]
    load = client_load(
        [lag for raw in raws for lag in raw.lag_s],
        sum(raw.cpu_s for raw in raws),
        max(raw.wall_s for raw in raws),
        workers=n,
    )
    return _phase(merged, load)


def fetch_text(
    base_url: str,
    path: str,
    api_key: str | None = None,
    timeout: float = 10.0,
    *,
    transport: httpx.BaseTransport | None = None,
) -> str:
    """``GET base_url + path`` and return the body text (e.g. Prometheus ``/metrics``, ``/server_info``).

    :raises ServerError: connection error, timeout or a non-2xx status; the message names the URL.
    """
    url = base_url.rstrip("/") + path
    try:
        with httpx.Client(timeout=timeout, transport=transport, verify=tls_context()) as client:
            resp = client.get(url, headers=bearer_headers(api_key))
    except httpx.HTTPError as exc:
        raise ServerError(f"GET {url} failed: {type(exc).__name__}: {exc}") from None
    if not resp.is_success:
        raise ServerError(f"GET {url} failed: HTTP {resp.status_code} {resp.reason_phrase}: {resp.text[:200]}")
    return resp.text
