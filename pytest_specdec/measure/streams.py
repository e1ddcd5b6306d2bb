"""The requests of one phase sent from one process: streams issued in order under a concurrency limit, a stall
watchdog beside them, and the client's own load measured (:class:`ClientLoad`).

The hot path does the least work per event: while a stream runs, the client only stamps each read of the socket
with :func:`pytest_specdec.core.clock.now` and keeps the bytes. An event's arrival time is the stamp of the read that
completed its ``data:`` line. The events are parsed (``sse.py``) when the request has ended. There is no per-line
timeout: one watchdog task per phase checks every request's read count on the event loop's own clock (so a test that
replaces ``clock.now`` does not disturb it) and aborts the phase when a stream stalls.

The streams use aiohttp, whose C HTTP parser and ``StreamReader.readany`` let a client read 2-4x more SSE events per
second than httpx's ``aiter_lines``/``aiter_raw`` (``benchmarks/bench_client.py``); a given httpx transport (tests)
replaces it.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import time
from collections.abc import AsyncIterator, Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

import httpx
import numpy as np

from pytest_specdec.core import clock
from pytest_specdec.core.auth import bearer_headers, tls_context
from pytest_specdec.core.errors import ServerError
from pytest_specdec.core.records import RequestRecord
from pytest_specdec.measure.sse import PATHS, Api, Parsed, RequestFailed, parse, request_body, tokens_so_far
from pytest_specdec.measure.workload import RequestSpec

__all__ = [
    "LAG_PROBE_INTERVAL_S",
    "ClientLoad",
    "PhaseOptions",
    "RawPhase",
    "client_load",
    "resolve_model",
    "run_share",
]

#: Seconds between two looks of the stall watchdog, at most (a quarter of the stall timeout when that is shorter).
_WATCH_TICK_S = 0.5


@dataclass(frozen=True, slots=True)
class PhaseOptions:
    """How the requests of one phase are sent, as httpx groups its settings in ``Timeout`` and ``Limits``.

    Usage::

        opts = PhaseOptions(api="chat", concurrency=64, api_key="sk-1")
        result = run_phase("http://127.0.0.1:30000", specs, opts, workers=2)
        slower = dataclasses.replace(opts, stall_timeout_s=120.0)

    The same object reaches every worker process of a phase (it pickles); each worker gets a copy with its share of
    ``concurrency`` (see ``client.run_phase``).
    """

    #: ``generate`` (SGLang ``POST /generate``), ``completions`` (``/v1/completions``) or ``chat``
    #: (``/v1/chat/completions``).
    api: Api = "generate"
    #: Requests in flight at most; they are issued strictly in list order.
    concurrency: int = 1
    #: Sent as ``Authorization: Bearer <key>`` when given.
    api_key: str | None = None
    #: Seconds without any byte on one request before the whole phase is aborted.
    stall_timeout_s: float = 60.0
    #: Total seconds per request; exceeding it makes that request a failed record.
    request_timeout_s: float = 600.0
    #: The ``model`` field of OpenAI requests; None asks ``GET /v1/models`` (unused for ``generate``), before the
    #: phase's clock starts.
    model: str | None = None

    @property
    def headers(self) -> dict[str, str]:
        """The headers every request carries (the bearer token, when ``api_key`` is set)."""
        return bearer_headers(self.api_key)

    @property
    def connect_timeout_s(self) -> float:
        """Seconds to open a connection (and for ``GET /v1/models``): ``request_timeout_s``, at most 30."""
        return min(self.request_timeout_s, 30.0)


@dataclass(frozen=True, slots=True)
class ClientLoad:
    """The measuring client's own load during one phase, to tell when it, not the server, set TTFT and ITL.

    Event-loop lag: every :data:`LAG_PROBE_INTERVAL_S` a callback is queued with ``loop.call_soon`` and the time
    until it runs is taken (``perf_counter``): the wait an SSE read arriving then would have had before being
    stamped. Percentiles are numpy's linear ones over all probes (of all workers). CPU: process CPU seconds
    (``time.process_time``, user + system) of every worker over the phase, divided by its wall time, so 1.0 is one
    core busy all the time.

    Worked example: probes of 0.02, 0.03 and 2.0 ms, 0.45 CPU s over a 0.5 s phase -> lag p50 0.03 ms, max 2.0 ms,
    cpu_cores 0.9 (the client had almost a whole core busy: arrivals wait for it).
    """

    lag_ms_p50: float
    lag_ms_p99: float
    lag_ms_max: float
    #: CPU seconds of the client processes / phase seconds (summed over workers).
    cpu_cores: float
    #: Worker processes that ran the phase's requests.
    workers: int = 1
    #: Lag probes taken.
    probes: int = 0


class _Body(Protocol):
    """What the hot loop needs of a response body: aiohttp ``StreamReader.readany`` (``b""`` at the end)."""

    async def readany(self) -> bytes: ...


class _Response(Protocol):
    """The part of ``aiohttp.ClientResponse`` the client uses (httpx responses are adapted to it for tests)."""

    @property
    def status(self) -> int: ...

    @property
    def reason(self) -> str | None: ...

    @property
    def content(self) -> _Body: ...

    async def read(self) -> bytes: ...


#: ``opener(url, body, headers)`` -> async context manager giving a :class:`_Response`.
_Opener = Callable[[str, bytes, dict[str, str]], contextlib.AbstractAsyncContextManager[_Response]]


@dataclass(slots=True)
class _Progress:
    """One in-flight request: its raw reads (kept outside the coroutine so a timeout can still report them)."""

    start_s: float = 0.0
    times: list[float] = field(default_factory=list)
    data: list[bytes] = field(default_factory=list)
    #: Read count and loop time when the watchdog last saw it change (the watchdog's own bookkeeping).
    seen_reads: int = -1
    seen_at: float = 0.0


def _tokens_so_far(api: Api, progress: _Progress) -> int:
    """Tokens received by an unfinished request (for stall and timeout messages); 0 when they cannot be told."""
    return tokens_so_far(api, progress.times, progress.data)


# --- one request -------------------------------------------------------------------------------------------------


async def _one_request(
    open_stream: _Opener,
    url: str,
    body: bytes,
    headers: dict[str, str],
    api: Api,
    progress: _Progress,
    arrival_s: float | None = None,
) -> RequestRecord:
    now = clock.now
    times = progress.times
    data = progress.data
    progress.start_s = now()
    try:
        async with open_stream(url, body, headers) as resp:
            if resp.status != 200:
                text = (await resp.read()).decode("utf-8", "replace").strip()
                status = f"{resp.status} {resp.reason}" if resp.reason else str(resp.status)
                raise RequestFailed(f"HTTP {status} from {url}: {text[:300]}")
            # The hot loop: a stamp and the bytes per read, nothing else (see the module docstring).
            readany = resp.content.readany
            while chunk := await readany():
                times.append(now())
                data.append(chunk)
        parsed = parse(api, times, data)
        if parsed.done_s is None:
            raise RequestFailed(f"stream ended without data: [DONE] after {parsed.tokens} tokens")
    except RequestFailed as exc:
        return _failed(progress, str(exc), api, arrival_s)
    except (httpx.HTTPError, OSError, _aiohttp_errors()) as exc:
        return _failed(progress, f"{type(exc).__name__} on {url}: {exc}", api, arrival_s)
    return RequestRecord(
        ok=True,
        error=None,
        start_s=progress.start_s,
        end_s=parsed.done_s,
        prompt_tokens=parsed.prompt_tokens,
        completion_tokens=parsed.tokens,
        chunk_times_s=tuple(parsed.chunk_times_s),
        chunk_tokens=tuple(parsed.chunk_tokens),
        output_text=parsed.text,
        arrival_s=arrival_s,
        **parsed.spec,
    )


def _aiohttp_errors() -> type[Exception]:
    import aiohttp

    return aiohttp.ClientError


def _failed(progress: _Progress, error: str, api: Api, arrival_s: float | None = None) -> RequestRecord:
    """A failed record keeping what arrived (parsed leniently: a broken stream may not parse at all)."""
    parsed = Parsed()
    with contextlib.suppress(RequestFailed):
        parse(api, progress.times, progress.data, parsed)
    return RequestRecord(
        ok=False,
        error=error,
        start_s=progress.start_s,
        end_s=clock.now(),
        prompt_tokens=parsed.prompt_tokens,
        completion_tokens=parsed.tokens,
        chunk_times_s=tuple(parsed.chunk_times_s),
        chunk_tokens=tuple(parsed.chunk_tokens),
        output_text=parsed.text,
        arrival_s=arrival_s,
    )


# --- openers: aiohttp for real streams, httpx for a given transport (tests) -------------------------------------


class _HttpxBody:
    def __init__(self, response: httpx.Response) -> None:
        self._iter = response.aiter_raw()

    async def readany(self) -> bytes:
        try:
            return await self._iter.__anext__()
        except StopAsyncIteration:
            return b""


class _HttpxResponse:
    """An httpx streaming response seen through :class:`_Response`."""

    def __init__(self, response: httpx.Response) -> None:
        self._response = response
        self.status = response.status_code
        self.reason: str | None = response.reason_phrase
        self.content = _HttpxBody(response)

    async def read(self) -> bytes:
        return await self._response.aread()


def _httpx_opener(client: httpx.AsyncClient) -> _Opener:
    @contextlib.asynccontextmanager
    async def open_stream(url: str, body: bytes, headers: dict[str, str]) -> AsyncIterator[_Response]:
        request = client.build_request(
            "POST", url, content=body, headers={**headers, "Content-Type": "application/json"}
        )
        response = await client.send(request, stream=True)
        try:
            yield _HttpxResponse(response)
        finally:
            await response.aclose()

    return open_stream


# --- the phase in this process -----------------------------------------------------------------------------------


async def resolve_model(
    base_url: str, headers: dict[str, str], timeout_s: float, transport: httpx.AsyncBaseTransport | None
) -> str:
    """The first id of ``GET /v1/models`` (the name OpenAI endpoints expect in ``model``).

    :raises ServerError: the request failed or the answer has no ``data[0].id``.
    """
    url = base_url.rstrip("/") + "/v1/models"
    try:
        async with httpx.AsyncClient(transport=transport, timeout=timeout_s, verify=tls_context()) as http:
            resp = await http.get(url, headers=headers)
    except httpx.HTTPError as exc:
        problem = f"{type(exc).__name__}: {exc}"
    else:
        if resp.status_code != 200:
            problem = f"HTTP {resp.status_code} {resp.reason_phrase}"
        else:
            try:
                return str(resp.json()["data"][0]["id"])
            except (KeyError, IndexError, TypeError, ValueError):
                problem = f"no data[0].id in {resp.text[:200]!r}"
    raise ServerError(f"cannot determine the model name from GET {url} ({problem}); fix: pass model explicitly")


async def _watch(in_flight: dict[int, _Progress], stall_timeout_s: float, api: Api, url: str) -> None:
    """Raise :class:`ServerError` when a request got no bytes (headers or body) for ``stall_timeout_s`` seconds.

    Runs for the whole phase; the lowest stalled request index is named. Detection comes within
    ``stall_timeout_s`` plus one tick (at most :data:`_WATCH_TICK_S`).
    """
    loop = asyncio.get_running_loop()
    tick = min(_WATCH_TICK_S, stall_timeout_s / 4)
    while True:
        await asyncio.sleep(tick)
        now = loop.time()
        for index in sorted(in_flight):
            progress = in_flight[index]
            reads = len(progress.times)
            if reads != progress.seen_reads:
                progress.seen_reads, progress.seen_at = reads, now
            elif now - progress.seen_at >= stall_timeout_s:
                where = f"({_tokens_so_far(api, progress)} tokens received so far)" if reads else "(no response yet)"
                raise ServerError(
                    f"server stalled: no token for {stall_timeout_s:g} s on request {index} {where} at {url}"
                )


#: Seconds between two event-loop lag probes (:class:`ClientLoad`).
LAG_PROBE_INTERVAL_S = 0.01


async def _probe_lag(samples: list[float]) -> None:
    """Append one event-loop lag sample (seconds) every :data:`LAG_PROBE_INTERVAL_S` until cancelled."""
    loop = asyncio.get_running_loop()
    append = samples.append
    perf = time.perf_counter  # not clock.now: a test's fake clock must not turn into lag
    while True:
        await asyncio.sleep(LAG_PROBE_INTERVAL_S)
        loop.call_soon(_lag_sample, append, perf, perf())


def _lag_sample(append: Callable[[float], None], perf: Callable[[], float], queued: float) -> None:
    append(perf() - queued)


def client_load(lag_s: Sequence[float], cpu_s: float, wall_s: float, workers: int = 1) -> ClientLoad | None:
    """A :class:`ClientLoad` from raw probes and CPU seconds; None without probes or wall time."""
    if not lag_s or wall_s <= 0:
        return None
    p50, p99 = (float(v) for v in np.percentile(np.asarray(lag_s) * 1000.0, (50, 99)))
    return ClientLoad(
        lag_ms_p50=p50,
        lag_ms_p99=p99,
        lag_ms_max=float(max(lag_s)) * 1000.0,
        cpu_cores=cpu_s / wall_s,
        workers=workers,
        probes=len(lag_s),
    )


@dataclass(frozen=True, slots=True)
class RawPhase:
    """What one process measured: its records (request order), lag probes (s), CPU and wall seconds."""

    records: list[RequestRecord]
    lag_s: list[float]
    cpu_s: float
    wall_s: float


async def run_share(
    base_url: str,
    requests: Sequence[RequestSpec],
    numbers: Sequence[int],
    options: PhaseOptions,
    *,
    transport: httpx.AsyncBaseTransport | None = None,
    on_request_done: Callable[[RequestRecord], None] | None = None,
    start_at: float | None = None,
) -> RawPhase:
    """``client.run_requests`` in one process once the model is known (``options.model`` set for OpenAI APIs);
    ``numbers[i]`` names request i in messages. Requests with an ``arrival_s`` are sent at ``start_at`` (a
    ``time.perf_counter()`` time, one clock for every worker process; default: when sending begins) plus it."""
    api = options.api
    concurrency = options.concurrency
    url = base_url.rstrip("/") + PATHS[api]
    bodies = [json.dumps(request_body(api, spec, options.model)).encode() for spec in requests]
    arrivals = [spec.arrival_s for spec in requests]
    async with contextlib.AsyncExitStack() as stack:
        if transport is not None:
            # httpx's own timeout is a backstop only; the stall watchdog and total timeout decide.
            timeout = httpx.Timeout(
                options.request_timeout_s + options.stall_timeout_s, connect=options.connect_timeout_s
            )
            http = await stack.enter_async_context(httpx.AsyncClient(transport=transport, timeout=timeout))
            open_stream = _httpx_opener(http)
        else:
            import aiohttp

            connector = aiohttp.TCPConnector(limit=concurrency, limit_per_host=concurrency)
            session = await stack.enter_async_context(
                aiohttp.ClientSession(
                    connector=connector,
                    timeout=aiohttp.ClientTimeout(total=None, sock_connect=options.connect_timeout_s),
                    headers={"Content-Type": "application/json"},
                )
            )

            def open_stream(url: str, body: bytes, headers: dict[str, str]) -> Any:
                return session.post(url, data=body, headers=headers)

        lag_s: list[float] = []
        prober = asyncio.create_task(_probe_lag(lag_s))
        cpu_start_s, wall_start_s = time.process_time(), time.perf_counter()
        try:
            records = await _run_all(open_stream, url, bodies, numbers, options, on_request_done, arrivals, start_at)
        finally:
            cpu_s, wall_s = time.process_time() - cpu_start_s, time.perf_counter() - wall_start_s
            prober.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await prober
    return RawPhase(records, lag_s, cpu_s, wall_s)


async def _run_all(
    open_stream: _Opener,
    url: str,
    bodies: list[bytes],
    numbers: Sequence[int],
    options: PhaseOptions,
    on_request_done: Callable[[RequestRecord], None] | None = None,
    arrivals: Sequence[float | None] = (),
    start_at: float | None = None,
) -> list[RequestRecord]:
    """Issue ``bodies`` in order under a semaphore with the stall watchdog beside; records in request order.

    Open loop: request i is due at ``start_at + arrivals[i]`` (``perf_counter`` seconds; ``start_at`` default now).
    The dispatcher sleeps until it is due, stamps its arrival, then waits for a free ``concurrency`` slot: the
    requests queue in arrival order behind the cap, as behind bench_serving's ``--max-concurrency`` semaphore (its
    tasks are created at arrival and wait there in creation order). Due times are absolute, so one late wake-up
    does not delay the requests after it (bench_serving sleeps each interval after the previous send)."""
    api, headers, request_timeout_s = options.api, options.headers, options.request_timeout_s
    records: list[RequestRecord | None] = [None] * len(bodies)
    in_flight: dict[int, _Progress] = {}
    semaphore = asyncio.Semaphore(options.concurrency)

    async def run(local: int, body: bytes, arrived: float | None) -> None:
        index = numbers[local]
        progress = _Progress(start_s=clock.now())
        in_flight[index] = progress
        try:
            records[local] = await asyncio.wait_for(
                _one_request(open_stream, url, body, headers, api, progress, arrived), request_timeout_s
            )
        except asyncio.TimeoutError:
            records[local] = _failed(
                progress,
                f"request {index} timed out after {request_timeout_s:g} s ({_tokens_so_far(api, progress)} tokens)",
                api,
                arrived,
            )
        finally:
            del in_flight[index]
            semaphore.release()
        done = records[local]
        if on_request_done is not None and done is not None:
            on_request_done(done)

    tasks: list[asyncio.Task[None]] = []

    async def dispatch() -> None:
        start = time.perf_counter() if start_at is None else start_at  # not clock.now: a fake clock cannot sleep
        for local, body in enumerate(bodies):
            due = arrivals[local] if local < len(arrivals) else None
            arrived = None
            if due is not None:
                wait = start + due - time.perf_counter()
                if wait > 0:
                    await asyncio.sleep(wait)
                arrived = clock.now()
            # Acquire before creating the task, so requests start in list order.
            await semaphore.acquire()
            tasks.append(asyncio.create_task(run(local, body, arrived)))
        await asyncio.gather(*tasks)

    dispatcher = asyncio.create_task(dispatch())
    watchdog = asyncio.create_task(_watch(in_flight, options.stall_timeout_s, api, url))
    try:
        await asyncio.wait({dispatcher, watchdog}, return_when=asyncio.FIRST_COMPLETED)
        if watchdog.done():
            watchdog.result()  # raises the stall
        dispatcher.result()
    finally:
        for task in (dispatcher, watchdog, *tasks):
            task.cancel()
        await asyncio.gather(dispatcher, watchdog, *tasks, return_exceptions=True)
    return [record for record in records if record is not None]
