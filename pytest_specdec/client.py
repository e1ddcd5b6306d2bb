"""Streaming HTTP clients for one measured phase (SGLang ``/generate``, OpenAI-compatible) -> per-request records.

All HTTP of a measurement goes through this module. The control plane (``GET /v1/models``, ``/metrics``) uses
httpx; the streams use aiohttp, whose C HTTP parser and ``StreamReader.readany`` cost about 4x less per SSE event
than httpx's line iteration here (``benchmarks/bench_client.py``; README "How the client measures").

The hot path does the least work per event: while a stream runs, the client only stamps each read of the socket
with :func:`pytest_specdec.clock.now` and keeps the bytes. An event's arrival time is the stamp of the read that
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
import json
import re
from collections.abc import AsyncIterator, Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal, Protocol

import httpx

from pytest_specdec import clock
from pytest_specdec.errors import ServerError
from pytest_specdec.records import RequestRecord
from pytest_specdec.workload import RequestSpec

__all__ = ["Api", "PhaseResult", "fetch_text", "run_phase", "run_requests"]

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

    @property
    def duration_s(self) -> float:
        """Phase wall time in seconds: first request sent to last response finished."""
        return self.end_s - self.start_s


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


def _auth_headers(api_key: str | None) -> dict[str, str]:
    return {"Authorization": f"Bearer {api_key}"} if api_key else {}


def _spec_fields(source: dict[str, Any]) -> dict[str, Any]:
    """Pick the spec fields out of a ``meta_info`` / ``spec_tokens_details`` dict, accepting older names."""
    out: dict[str, Any] = {}
    for name, candidates in _SPEC_FIELDS.items():
        for key in candidates:
            value = source.get(key)
            if isinstance(value, (int, float)) and not isinstance(value, bool):
                out[name] = value
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
        async with httpx.AsyncClient(transport=transport, timeout=timeout_s) as http:
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


async def run_requests(
    base_url: str,
    requests: Sequence[RequestSpec],
    *,
    api: Api = "generate",
    concurrency: int = 1,
    api_key: str | None = None,
    stall_timeout_s: float = 60.0,
    request_timeout_s: float = 600.0,
    model: str | None = None,
    transport: httpx.AsyncBaseTransport | None = None,
) -> PhaseResult:
    """Send ``requests`` as streams, at most ``concurrency`` in flight, issued strictly in list order.

    :param base_url: ``http://host:port`` of the server.
    :param api: ``generate`` (SGLang ``POST /generate``), ``completions`` (``/v1/completions``) or ``chat``
        (``/v1/chat/completions``).
    :param api_key: sent as ``Authorization: Bearer <key>`` when given.
    :param stall_timeout_s: seconds without any byte on one request before the whole phase is aborted.
    :param request_timeout_s: total seconds per request; exceeding it makes that request a failed record.
    :param model: the ``model`` field of OpenAI requests; None asks ``GET /v1/models`` (unused for ``generate``),
        before the phase's clock starts.
    :param transport: an httpx transport for every request instead of aiohttp and the network (tests:
        ``httpx.MockTransport``).
    :returns: the records, one per request in request order, and the phase bounds (:class:`PhaseResult`). Failed
        requests (connection error, HTTP status, error event, stream without ``[DONE]``, total timeout) are
        records with ``ok=False`` and ``error`` text.
    :raises ServerError: a stream stalled ("server stalled: no token for N s on request i ..."), or the model name
        could not be determined; in-flight requests are cancelled first.
    """
    headers = _auth_headers(api_key)
    if api != "generate" and model is None:
        model = await _resolve_model(base_url, headers, min(request_timeout_s, 30.0), transport)
    url = base_url.rstrip("/") + _PATHS[api]
    bodies = [json.dumps(_request_body(api, spec, model)).encode() for spec in requests]
    async with contextlib.AsyncExitStack() as stack:
        if transport is not None:
            # httpx's own timeout is a backstop only; the stall watchdog and total timeout decide.
            timeout = httpx.Timeout(request_timeout_s + stall_timeout_s, connect=min(request_timeout_s, 30.0))
            http = await stack.enter_async_context(httpx.AsyncClient(transport=transport, timeout=timeout))
            open_stream = _httpx_opener(http)
        else:
            import aiohttp

            connector = aiohttp.TCPConnector(limit=concurrency, limit_per_host=concurrency)
            session = await stack.enter_async_context(
                aiohttp.ClientSession(
                    connector=connector,
                    timeout=aiohttp.ClientTimeout(total=None, sock_connect=min(request_timeout_s, 30.0)),
                    headers={"Content-Type": "application/json"},
                )
            )

            def open_stream(url: str, body: bytes, headers: dict[str, str]) -> Any:
                return session.post(url, data=body, headers=headers)

        records = await _run_all(
            open_stream, url, bodies, headers, api, concurrency, stall_timeout_s, request_timeout_s
        )
    if records:
        start_s = min(r.start_s for r in records)
        end_s = max(r.end_s for r in records)
    else:
        start_s = end_s = clock.now()
    return PhaseResult(records=tuple(records), start_s=start_s, end_s=end_s)


async def _run_all(
    open_stream: _Opener,
    url: str,
    bodies: list[bytes],
    headers: dict[str, str],
    api: Api,
    concurrency: int,
    stall_timeout_s: float,
    request_timeout_s: float,
) -> list[RequestRecord]:
    """Issue ``bodies`` in order under a semaphore with the stall watchdog beside; records in request order."""
    records: list[RequestRecord | None] = [None] * len(bodies)
    in_flight: dict[int, _Progress] = {}
    semaphore = asyncio.Semaphore(concurrency)

    async def run(index: int, body: bytes) -> None:
        progress = _Progress(start_s=clock.now())
        in_flight[index] = progress
        try:
            records[index] = await asyncio.wait_for(
                _one_request(open_stream, url, body, headers, api, progress), request_timeout_s
            )
        except asyncio.TimeoutError:
            records[index] = _failed(
                progress,
                f"request {index} timed out after {request_timeout_s:g} s ({_tokens_so_far(api, progress)} tokens)",
                api,
            )
        finally:
            del in_flight[index]
            semaphore.release()

    tasks: list[asyncio.Task[None]] = []

    async def dispatch() -> None:
        for index, body in enumerate(bodies):
            # Acquire before creating the task, so requests start in list order.
            await semaphore.acquire()
            tasks.append(asyncio.create_task(run(index, body)))
        await asyncio.gather(*tasks)

    dispatcher = asyncio.create_task(dispatch())
    watchdog = asyncio.create_task(_watch(in_flight, stall_timeout_s, api, url))
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


def run_phase(
    base_url: str,
    requests: Sequence[RequestSpec],
    *,
    api: Api = "generate",
    concurrency: int = 1,
    api_key: str | None = None,
    stall_timeout_s: float = 60.0,
    request_timeout_s: float = 600.0,
    model: str | None = None,
    transport: httpx.AsyncBaseTransport | None = None,
) -> PhaseResult:
    """Synchronous :func:`run_requests` in a fresh event loop.

    Must not be called from inside a running event loop (``asyncio.run`` refuses).

    :returns: as :func:`run_requests`; the phase bounds exclude the event loop's creation and tear-down.
    :raises ServerError: as :func:`run_requests`.
    """
    out: list[PhaseResult] = []

    async def main() -> None:
        # Returns None: Python 3.11's asyncio.run formats the main task's repr (result included) when it restores
        # the SIGINT handler, which would repr every record (seconds for a large phase).
        out.append(
            await run_requests(
                base_url,
                requests,
                api=api,
                concurrency=concurrency,
                api_key=api_key,
                stall_timeout_s=stall_timeout_s,
                request_timeout_s=request_timeout_s,
                model=model,
                transport=transport,
            )
        )

    asyncio.run(main())
    return out[0]


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
        with httpx.Client(timeout=timeout, transport=transport) as client:
            resp = client.get(url, headers=_auth_headers(api_key))
    except httpx.HTTPError as exc:
        raise ServerError(f"GET {url} failed: {type(exc).__name__}: {exc}") from None
    if not resp.is_success:
        raise ServerError(f"GET {url} failed: HTTP {resp.status_code} {resp.reason_phrase}: {resp.text[:200]}")
    return resp.text
