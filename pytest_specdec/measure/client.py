"""Streaming HTTP clients for one measured phase (SGLang ``/generate``, OpenAI-compatible) -> per-request records.

All HTTP of a measurement goes through this module. The control plane (``GET /v1/models``, ``/metrics``) uses
httpx; the streams use aiohttp, whose C HTTP parser and ``StreamReader.readany`` let a client read 2-4x more SSE
events per second than httpx's ``aiter_lines``/``aiter_raw`` (``benchmarks/bench_client.py``; README "How the
client keeps up"). A phase can be spread over worker processes (:func:`run_phase` ``workers``), and every phase
records the client's own event-loop lag and CPU use (:class:`ClientLoad`).

The hot path does the least work per event: while a stream runs, the client only stamps each read of the socket
with :func:`pytest_specdec.core.clock.now` and keeps the bytes. An event's arrival time is the stamp of the read that
completed its ``data:`` line. The events are parsed when the request has ended. There is no per-line timeout: one
watchdog task per phase checks every request's read count on the event loop's own clock (so a test that replaces
``clock.now`` does not disturb it) and aborts the phase when a stream stalls.

Token counting never assumes one token per chunk: SGLang ``/generate`` events carry the cumulative
``meta_info.completion_tokens``; OpenAI streams carry token counts only in ``usage`` (per chunk when the server
honours ``stream_options.continuous_usage_stats`` — vLLM does, SGLang does not — else once at the end).
"""

from __future__ import annotations

import asyncio
import bisect
import contextlib
import dataclasses
import json
import math
import os
import re
import time
from collections.abc import AsyncIterator, Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal, Protocol

import httpx
import numpy as np

from pytest_specdec.core import clock
from pytest_specdec.core.auth import bearer_headers, tls_context
from pytest_specdec.core.errors import ServerError
from pytest_specdec.core.records import RequestRecord
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

Api = Literal["generate", "completions", "chat"]

#: ``(arrival_s, payload)`` per SSE ``data:`` line; payload None is ``[DONE]``.
_Event = tuple[float, "dict[str, Any] | None"]

_PATHS: dict[str, str] = {"generate": "/generate", "completions": "/v1/completions", "chat": "/v1/chat/completions"}

#: Per-request spec fields, newest SGLang name first, then the names older releases used
#: (sglang_api.md §4: ``spec_accept_token_num``/``spec_draft_token_num``, then ``spec_accepted_drafts``/
#: ``spec_proposed_drafts``).
_SPEC_FIELDS: dict[str, tuple[str, ...]] = {
    "spec_verify_ct": ("spec_verify_ct",),
    "spec_num_correct_drafts": ("spec_num_correct_drafts", "spec_accepted_drafts", "spec_accept_token_num"),
    "spec_num_proposed_drafts": ("spec_num_proposed_drafts", "spec_proposed_drafts", "spec_draft_token_num"),
    "spec_accept_length": ("spec_accept_length",),
    "spec_accept_rate": ("spec_accept_rate",),
}

#: ``"completion_tokens": N`` as JSON syntax: inside a JSON string a quote is always escaped, so ``tokens":`` can only
#: be a key. Used by the fast /generate path; any doubt (count mismatch, two per line) falls back to full parsing.
_COMPLETION_RE = re.compile(rb'"completion_tokens"\s*:\s*(\d+)')

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
    ``concurrency`` (see :func:`run_phase`).
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


class _RequestFailed(Exception):
    """One request failed (HTTP status, error event, bad stream); becomes a record with ``ok=False``."""


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


@dataclass(slots=True)
class _Parsed:
    """A finished stream, parsed: token events, totals, and the ``[DONE]`` arrival (None when missing)."""

    chunk_times_s: list[float] = field(default_factory=list)
    chunk_tokens: list[int] = field(default_factory=list)
    tokens: int = 0
    prompt_tokens: int = 0
    text: str = ""
    spec: dict[str, Any] = field(default_factory=dict)
    done_s: float | None = None
    #: Why the stream cannot be read past some event (a malformed payload), else None.
    error: str | None = None


#: The per-request acceptance histogram, newest name first (SGLang 0.5.17 also sends ``spec_accept_histogram``).
_HISTOGRAM_FIELDS = ("spec_correct_drafts_histogram", "spec_accept_histogram")


def _spec_fields(source: dict[str, Any]) -> dict[str, Any]:
    """Pick the spec fields out of a ``meta_info`` / ``spec_tokens_details`` dict, accepting older names."""
    out: dict[str, Any] = {}
    for name, candidates in _SPEC_FIELDS.items():
        for key in candidates:
            value = source.get(key)
            if isinstance(value, (int, float)) and not isinstance(value, bool):
                out[name] = value
                break
    for key in _HISTOGRAM_FIELDS:
        hist = source.get(key)
        if isinstance(hist, list) and hist and all(isinstance(n, int) and not isinstance(n, bool) for n in hist):
            out["spec_correct_drafts_histogram"] = tuple(hist)
            break
    return out


def _error_text(data: dict[str, Any]) -> str:
    error = data["error"]
    if isinstance(error, dict):
        return str(error.get("message") or error)
    return str(error)


def _request_body(api: Api, spec: RequestSpec, model: str | None) -> dict[str, Any]:
    """The JSON body; field names as in SGLang ``bench_serving`` / the OpenAI API (sglang_api.md §4-5)."""
    if api == "generate":
        body: dict[str, Any] = (
            {"input_ids": list(spec.input_ids)} if spec.input_ids is not None else {"text": spec.prompt}
        )
        body["sampling_params"] = {
            "max_new_tokens": spec.max_new_tokens,
            "temperature": spec.temperature,
            "ignore_eos": spec.ignore_eos,
        }
        body["stream"] = True
        return body
    body = {
        "model": model,
        "max_tokens": spec.max_new_tokens,
        "temperature": spec.temperature,
        "ignore_eos": spec.ignore_eos,
        "stream": True,
        "stream_options": {"include_usage": True, "continuous_usage_stats": True},
        "return_spec_tokens_details": True,
    }
    if api == "chat":
        body["messages"] = [{"role": "user", "content": spec.prompt}]
    else:
        body["prompt"] = spec.prompt
    return body


# --- parsing, after the stream ended -----------------------------------------------------------------------------


def _data_lines(times: Sequence[float], data: Sequence[bytes]) -> list[tuple[float, bytes]]:
    """``(arrival_s, payload)`` per SSE ``data:`` line; a line arrives with the read that holds its newline.

    SSE framing: blank lines separate events, ``:`` lines are comments, ``event:``/``id:`` carry nothing we use.
    A last line without a newline counts (with the last read's time), as a line iterator would yield it.
    """
    out: list[tuple[float, bytes]] = []
    rest = b""
    for t, chunk in zip(times, data, strict=True):
        if rest:
            chunk = rest + chunk
        lines = chunk.split(b"\n")
        rest = lines.pop()
        for line in lines:
            line = line.strip()
            if line.startswith(b"data:"):
                out.append((t, line[5:].strip()))
    rest = rest.strip()
    if rest.startswith(b"data:") and times:
        out.append((times[-1], rest[5:].strip()))
    return out


def _decode_events(lines: list[tuple[float, bytes]], parsed: _Parsed) -> list[_Event]:
    """JSON-decode each ``data:`` payload; ``[DONE]`` becomes None. Stops at the first payload that is not a JSON
    object (a later ``[DONE]`` does not make a broken stream whole); ``parsed.error`` then says why."""
    out: list[_Event] = []
    for t, payload in lines:
        if payload == b"[DONE]":
            out.append((t, None))
            continue
        try:
            data = json.loads(payload)
        except ValueError:
            data = None
        if not isinstance(data, dict):
            what = "not an object" if data is not None else "not JSON"
            parsed.error = f"malformed SSE event ({what}): {payload[:200].decode('utf-8', 'replace')!r}"
            break
        out.append((t, data))
    return out


def _parse_generate(events: list[_Event], parsed: _Parsed) -> None:
    """An SGLang ``/generate`` stream into ``parsed`` (``done_s`` None when ``[DONE]`` never came).

    Each event's ``text`` is cumulative (default ``--incremental-streaming-output`` off) and
    ``meta_info.completion_tokens`` is cumulative; an event's tokens = Δcompletion_tokens, and an event adding
    none records nothing (as ``async_request_sglang_generate`` in SGLang ``benchmark/serving.py``). The spec
    fields are read from the last ``meta_info`` carrying them (SGLang sends them on the final event only).
    One difference from bench_serving: the first token event is the first with new tokens even if its ``text``
    is still empty (a token can decode to "" mid UTF-8 sequence); bench_serving waits for non-empty text.

    :raises _RequestFailed: an error event, or an event without a token count.
    """
    for arrival_s, data in events:
        if data is None:
            parsed.done_s = arrival_s
            return
        if "error" in data:
            raise _RequestFailed(f"server error event: {_error_text(data)}")
        meta = data.get("meta_info") or {}
        completion = meta.get("completion_tokens")
        if completion is None and isinstance(data.get("output_ids"), list):
            completion = len(data["output_ids"])
        if not isinstance(completion, int):
            raise _RequestFailed("event without meta_info.completion_tokens: cannot count tokens")
        if isinstance(meta.get("prompt_tokens"), int):
            parsed.prompt_tokens = meta["prompt_tokens"]
        if isinstance(data.get("text"), str):
            parsed.text = data["text"]
        parsed.spec.update(_spec_fields(meta))
        new_tokens = completion - parsed.tokens
        if new_tokens > 0:
            parsed.chunk_times_s.append(arrival_s)
            parsed.chunk_tokens.append(new_tokens)
            parsed.tokens = completion


def _parse_generate_fast(times: Sequence[float], data: Sequence[bytes]) -> _Parsed | None:
    """The common case of :func:`_parse_generate` without decoding every event, or None when in any doubt.

    SGLang's cumulative events grow with the output (256 tokens: ~390 kB per request); JSON-decoding all of them
    costs more than reading them. Here the token counts are found with one regular-expression pass over the bytes
    and only the last event is decoded (text, prompt_tokens, spec fields, and a check of its count); the spec
    fields are the last event's (SGLang's cumulative values). None (the caller then decodes every event) when the
    number of counts differs from the number of data lines (an error event, a line without a count), a line holds
    two counts, or the last event is not a well-formed token event agreeing with the count found.
    """
    joined = b"".join(data)
    ends = _cumulative(data)
    done = joined.rfind(b"[DONE]")
    done_s: float | None = None
    n_lines = joined.count(b"\ndata:") + joined.startswith(b"data:")
    if done >= 0:
        line_start = joined.rfind(b"\n", 0, done) + 1
        if joined[line_start:done].strip() != b"data:":
            return None
        done_s = times[bisect.bisect_right(ends, done)]
        n_lines -= 1
    parsed = _Parsed(done_s=done_s)
    chunk_times_s = parsed.chunk_times_s
    chunk_tokens = parsed.chunk_tokens
    find = joined.find
    tokens = 0
    last_value = -1
    last_end = -1
    last_match_start = 0
    for match in _COMPLETION_RE.finditer(joined):
        line_end = find(b"\n", match.end())
        if line_end <= last_end:  # no newline (-1), or a second count on one line
            return None
        last_end = line_end
        last_match_start = match.start()
        n_lines -= 1
        last_value = int(match.group(1))
        if last_value > tokens:
            chunk_times_s.append(times[bisect.bisect_right(ends, line_end)])
            chunk_tokens.append(last_value - tokens)
            tokens = last_value
    if n_lines != 0 or last_end < 0:
        return None
    line = joined[joined.rfind(b"\n", 0, last_match_start) + 1 : last_end].strip()
    try:
        last = json.loads(line[5:]) if line.startswith(b"data:") else None
    except ValueError:
        return None
    if not isinstance(last, dict) or "error" in last or not isinstance(last.get("text"), str):
        return None
    meta = last.get("meta_info")
    if not isinstance(meta, dict) or meta.get("completion_tokens") != last_value:
        return None
    if not isinstance(meta.get("prompt_tokens"), int):
        return None
    parsed.tokens = tokens
    parsed.prompt_tokens = meta["prompt_tokens"]
    parsed.text = last["text"]
    parsed.spec = _spec_fields(meta)
    return parsed


def _cumulative(data: Sequence[bytes]) -> list[int]:
    """End offset (exclusive) of each read in the joined bytes."""
    out = []
    total = 0
    for chunk in data:
        total += len(chunk)
        out.append(total)
    return out


def _parse_openai(events: list[_Event], parsed: _Parsed) -> None:
    """An OpenAI completions/chat stream into ``parsed`` (``done_s`` None when ``[DONE]`` never came).

    With continuous usage (a chunk that has choices also has ``usage``; vLLM) each chunk's tokens are
    Δ``usage.completion_tokens``. Otherwise (SGLang sends usage once, on a final ``choices: []`` chunk) the
    per-chunk token counts are unknown: the arrivals of chunks with non-empty text are kept, ``chunk_tokens`` is
    left empty (so per-token ITL is None for this request) and the final usage gives the totals. Spec fields come
    from ``sglext.spec_tokens_details`` (SGLang, on ``return_spec_tokens_details``; a list when n > 1).

    :raises _RequestFailed: an error event, or ``[DONE]`` without any usage.
    """
    usage_chunks: list[tuple[float, int]] = []
    text_times: list[float] = []
    pieces: list[str] = []
    continuous = False
    saw_usage = False
    for arrival_s, data in events:
        if data is None:
            if not saw_usage:
                raise _RequestFailed(
                    "stream has no usage: cannot count tokens (the server ignored stream_options.include_usage)"
                )
            parsed.done_s = arrival_s
            break
        if "error" in data:
            raise _RequestFailed(f"server error event: {_error_text(data)}")
        choices = data.get("choices") or []
        piece = ""
        for choice in choices:
            if not isinstance(choice, dict):
                continue
            delta = choice.get("delta") or {}
            piece += choice.get("text") or delta.get("content") or delta.get("reasoning_content") or ""
        if piece:
            pieces.append(piece)
            text_times.append(arrival_s)
        usage = data.get("usage")
        if isinstance(usage, dict) and isinstance(usage.get("completion_tokens"), int):
            saw_usage = True
            if choices:
                continuous = True
            if isinstance(usage.get("prompt_tokens"), int):
                parsed.prompt_tokens = usage["prompt_tokens"]
            new_tokens = usage["completion_tokens"] - parsed.tokens
            if new_tokens > 0:
                usage_chunks.append((arrival_s, new_tokens))
            parsed.tokens = usage["completion_tokens"]
        sglext = data.get("sglext")
        details = sglext.get("spec_tokens_details") if isinstance(sglext, dict) else None
        if isinstance(details, list):
            details = details[0] if details else None
        if isinstance(details, dict):
            parsed.spec.update(_spec_fields(details))
    parsed.text = "".join(pieces)
    if continuous:
        parsed.chunk_times_s = [t for t, _ in usage_chunks]
        parsed.chunk_tokens = [n for _, n in usage_chunks]
    else:
        parsed.chunk_times_s = text_times
        parsed.chunk_tokens = []


def _parse(api: Api, times: Sequence[float], data: Sequence[bytes], parsed: _Parsed | None = None) -> _Parsed:
    """Parse a stream's reads; ``done_s`` None when it ended without ``[DONE]``.

    :param parsed: filled in place when given, so a caller catching the error keeps what was parsed before it.
    :raises _RequestFailed: a malformed event, an error event, or tokens that cannot be counted.
    """
    if api == "generate" and parsed is None:
        fast = _parse_generate_fast(times, data)
        if fast is not None:
            return fast
    parsed = parsed if parsed is not None else _Parsed()
    events = _decode_events(_data_lines(times, data), parsed)
    if api == "generate":
        _parse_generate(events, parsed)
    else:
        _parse_openai(events, parsed)
    if parsed.error is not None:
        raise _RequestFailed(parsed.error)
    return parsed


def _tokens_so_far(api: Api, progress: _Progress) -> int:
    """Tokens received by an unfinished request (for stall and timeout messages); 0 when they cannot be told."""
    parsed = _Parsed()
    with contextlib.suppress(_RequestFailed):
        _parse(api, list(progress.times), list(progress.data), parsed)
    return parsed.tokens


# --- one request -------------------------------------------------------------------------------------------------


async def _one_request(
    open_stream: _Opener,
    url: str,
    body: bytes,
    headers: dict[str, str],
    api: Api,
    progress: _Progress,
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
                raise _RequestFailed(f"HTTP {status} from {url}: {text[:300]}")
            # The hot loop: a stamp and the bytes per read, nothing else (see the module docstring).
            readany = resp.content.readany
            while chunk := await readany():
                times.append(now())
                data.append(chunk)
        parsed = _parse(api, times, data)
        if parsed.done_s is None:
            raise _RequestFailed(f"stream ended without data: [DONE] after {parsed.tokens} tokens")
    except _RequestFailed as exc:
        return _failed(progress, str(exc), api)
    except (httpx.HTTPError, OSError, _aiohttp_errors()) as exc:
        return _failed(progress, f"{type(exc).__name__} on {url}: {exc}", api)
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
        **parsed.spec,
    )


def _aiohttp_errors() -> type[Exception]:
    import aiohttp

    return aiohttp.ClientError


def _failed(progress: _Progress, error: str, api: Api) -> RequestRecord:
    """A failed record keeping what arrived (parsed leniently: a broken stream may not parse at all)."""
    parsed = _Parsed()
    with contextlib.suppress(_RequestFailed):
        _parse(api, progress.times, progress.data, parsed)
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


# --- the phase ---------------------------------------------------------------------------------------------------


async def _resolve_model(
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


def _load(lag_s: Sequence[float], cpu_s: float, wall_s: float, workers: int = 1) -> ClientLoad | None:
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
        model = await _resolve_model(base_url, options.headers, options.connect_timeout_s, transport)
        options = dataclasses.replace(options, model=model)
    raw = await _run_requests_raw(
        base_url, requests, range(len(requests)), options, transport=transport, on_request_done=on_request_done
    )
    return _phase(raw.records, _load(raw.lag_s, raw.cpu_s, raw.wall_s))


def _phase(records: Sequence[RequestRecord], load: ClientLoad | None) -> PhaseResult:
    if records:
        start_s = min(r.start_s for r in records)
        end_s = max(r.end_s for r in records)
    else:
        start_s = end_s = clock.now()
    return PhaseResult(records=tuple(records), start_s=start_s, end_s=end_s, load=load)


@dataclass(frozen=True, slots=True)
class _Raw:
    """What one process measured: its records (request order), lag probes (s), CPU and wall seconds."""

    records: list[RequestRecord]
    lag_s: list[float]
    cpu_s: float
    wall_s: float


async def _run_requests_raw(
    base_url: str,
    requests: Sequence[RequestSpec],
    numbers: Sequence[int],
    options: PhaseOptions,
    *,
    transport: httpx.AsyncBaseTransport | None = None,
    on_request_done: Callable[[RequestRecord], None] | None = None,
) -> _Raw:
    """:func:`run_requests` in one process once the model is known (``options.model`` set for OpenAI APIs);
    ``numbers[i]`` names request i in messages."""
    api = options.api
    concurrency = options.concurrency
    url = base_url.rstrip("/") + _PATHS[api]
    bodies = [json.dumps(_request_body(api, spec, options.model)).encode() for spec in requests]
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
            records = await _run_all(open_stream, url, bodies, numbers, options, on_request_done)
        finally:
            cpu_s, wall_s = time.process_time() - cpu_start_s, time.perf_counter() - wall_start_s
            prober.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await prober
    return _Raw(records, lag_s, cpu_s, wall_s)


async def _run_all(
    open_stream: _Opener,
    url: str,
    bodies: list[bytes],
    numbers: Sequence[int],
    options: PhaseOptions,
    on_request_done: Callable[[RequestRecord], None] | None = None,
) -> list[RequestRecord]:
    """Issue ``bodies`` in order under a semaphore with the stall watchdog beside; records in request order."""
    api, headers, request_timeout_s = options.api, options.headers, options.request_timeout_s
    records: list[RequestRecord | None] = [None] * len(bodies)
    in_flight: dict[int, _Progress] = {}
    semaphore = asyncio.Semaphore(options.concurrency)

    async def run(local: int, body: bytes) -> None:
        index = numbers[local]
        progress = _Progress(start_s=clock.now())
        in_flight[index] = progress
        try:
            records[local] = await asyncio.wait_for(
                _one_request(open_stream, url, body, headers, api, progress), request_timeout_s
            )
        except asyncio.TimeoutError:
            records[local] = _failed(
                progress,
                f"request {index} timed out after {request_timeout_s:g} s ({_tokens_so_far(api, progress)} tokens)",
                api,
            )
        finally:
            del in_flight[index]
            semaphore.release()
        done = records[local]
        if on_request_done is not None and done is not None:
            on_request_done(done)

    tasks: list[asyncio.Task[None]] = []

    async def dispatch() -> None:
        for local, body in enumerate(bodies):
            # Acquire before creating the task, so requests start in list order.
            await semaphore.acquire()
            tasks.append(asyncio.create_task(run(local, body)))
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


#: Concurrent streams one worker process takes before :func:`auto_workers` adds another.
STREAMS_PER_WORKER = 128
#: CPU (cores) one worker should stay under; a measured phase above it makes :func:`auto_workers` add workers.
WORKER_CPU_TARGET = 0.5
#: Seconds a worker process may take to start (interpreter, imports) before the phase is abandoned.
_WORKER_START_S = 120.0


def auto_workers(concurrency: int, load: ClientLoad | None = None, *, cpus: int | None = None) -> int:
    """Worker processes for a phase of ``concurrency`` streams, given the client's load in an earlier phase.

    ``ceil(concurrency / STREAMS_PER_WORKER)``, raised to ``ceil(load.cpu_cores / WORKER_CPU_TARGET)`` when a
    measured phase kept the client busier than that; at most ``cpus - 1`` (one core left to the rest of the
    process and the server when it is local) and ``concurrency``; at least 1.

    Examples (16 cores): concurrency 64 -> 1; 256 -> 2; 64 after a phase that used 1.3 cores -> 3.
    """
    cpus = cpus or os.cpu_count() or 1
    want = math.ceil(concurrency / STREAMS_PER_WORKER)
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
        model = asyncio.run(_resolve_model(base_url, options.headers, options.connect_timeout_s, None))
        options = dataclasses.replace(options, model=model)
    shares = [list(range(w, len(requests), n)) for w in range(n)]
    per_worker = [
        dataclasses.replace(options, concurrency=concurrency // n + (1 if w < concurrency % n else 0)) for w in range(n)
    ]
    raws = _run_workers(base_url, requests, shares, per_worker, on_request_done)
    records: list[RequestRecord | None] = [None] * len(requests)
    for share, raw in zip(shares, raws, strict=True):
        for index, record in zip(share, raw.records, strict=True):
            records[index] = record
    merged = [r for r in records if r is not None]
    load = _load(
        [lag for raw in raws for lag in raw.lag_s],
        sum(raw.cpu_s for raw in raws),
        max(raw.wall_s for raw in raws),
        workers=n,
    )
    return _phase(merged, load)


def _run_workers(
    base_url: str,
    requests: Sequence[RequestSpec],
    shares: list[list[int]],
    options: list[PhaseOptions],
    on_request_done: Callable[[RequestRecord], None] | None = None,
) -> list[_Raw]:
    """Start one process per share, wait until all are ready, start them together, collect their results.

    ``options[w]`` is worker ``w``'s (its share of the concurrency, the model already resolved); with
    ``on_request_done`` each worker reports every finished request.

    Workers are ``python -c`` subprocesses talking pickles over a socket pair (``multiprocessing.connection``),
    not ``multiprocessing.Process``: spawn would re-run the caller's ``__main__`` (a script without a main guard
    breaks), and fork is unsafe in a process that may hold threads (xdist, connection pools).
    """
    import multiprocessing.connection
    import socket
    import subprocess
    import sys

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
        for conn in conns:
            conn.send("go")
        raws: list[_Raw | None] = [None] * len(conns)
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


#: The worker imports this copy of the package even when it is not installed (a source checkout on sys.path only).
_PACKAGE_ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
_WORKER_CODE = (
    "import sys; sys.path.insert(0, sys.argv[2]); "
    "from pytest_specdec.measure.client import _worker_main; _worker_main(int(sys.argv[1]))"
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


def _worker_main(fd: int) -> None:
    """One worker process: read its share, report ready, wait for "go", run, send back a :class:`_Raw` or the
    error (see :func:`_run_workers`)."""
    import multiprocessing.connection

    conn = multiprocessing.connection.Connection(fd)
    try:
        base_url, requests, numbers, options, progress = conn.recv()
        conn.send(("ready", None))
        if conn.recv() != "go":
            return
        out: list[_Raw] = []

        def tick(r: RequestRecord) -> None:
            conn.send(("tick", (r.ok, r.error, r.start_s, r.end_s, r.completion_tokens)))

        on_done = tick if progress else None

        async def main() -> None:
            out.append(await _run_requests_raw(base_url, requests, numbers, options, on_request_done=on_done))

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
