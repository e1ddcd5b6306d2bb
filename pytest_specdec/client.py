"""Streaming HTTP clients for one measured phase (SGLang ``/generate``, OpenAI-compatible) -> per-request records.

All HTTP of a measurement goes through this module. Times come from :func:`pytest_specdec.clock.now`; the stall
watchdog uses the event loop's own clock, so a test that replaces ``clock.now`` does not disturb it.

Token counting never assumes one token per chunk: SGLang ``/generate`` events carry the cumulative
``meta_info.completion_tokens``; OpenAI streams carry token counts only in ``usage`` (per chunk when the server
honours ``stream_options.continuous_usage_stats`` — vLLM does, SGLang does not — else once at the end).
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncGenerator, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

import httpx

from pytest_specdec import clock
from pytest_specdec.errors import ServerError
from pytest_specdec.records import RequestRecord
from pytest_specdec.workload import RequestSpec

__all__ = ["Api", "PhaseResult", "fetch_text", "run_phase", "run_requests"]

Api = Literal["generate", "completions", "chat"]

#: ``(arrival_s, payload)`` per SSE ``data:`` line; payload None is ``[DONE]``.
_Events = AsyncGenerator[tuple[float, dict[str, Any] | None], None]

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


@dataclass(frozen=True, slots=True)
class PhaseResult:
    """The records of one phase, in request order, and the phase's ``clock.now()`` bounds in seconds."""

    records: tuple[RequestRecord, ...]
    start_s: float
    end_s: float

    @property
    def duration_s(self) -> float:
        """Phase wall time in seconds: first request issued to last request finished."""
        return self.end_s - self.start_s


class _RequestFailed(Exception):
    """One request failed (HTTP status, error event, bad stream); becomes a record with ``ok=False``."""


@dataclass(slots=True)
class _Progress:
    """Mutable state of one in-flight request, kept outside the coroutine so a timeout can still report it."""

    start_s: float = 0.0
    tokens: int = 0
    prompt_tokens: int = 0
    chunk_times_s: list[float] = field(default_factory=list)
    chunk_tokens: list[int] = field(default_factory=list)
    text: str = ""
    spec: dict[str, Any] = field(default_factory=dict)


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
        return {
            "text": spec.prompt,
            "sampling_params": {
                "max_new_tokens": spec.max_new_tokens,
                "temperature": spec.temperature,
                "ignore_eos": spec.ignore_eos,
            },
            "stream": True,
        }
    body: dict[str, Any] = {
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


async def _events(
    response: httpx.Response, stall_timeout_s: float, index: int, url: str, progress: _Progress
) -> _Events:
    """Yield ``(arrival_s, payload)`` per SSE ``data:`` line; payload is ``None`` for ``[DONE]``.

    :raises ServerError: no line at all for ``stall_timeout_s`` seconds (the whole phase aborts).
    :raises _RequestFailed: a ``data:`` line that is not JSON.
    """
    lines = response.aiter_lines()
    while True:
        try:
            line = await asyncio.wait_for(lines.__anext__(), stall_timeout_s)
        except StopAsyncIteration:
            return
        except asyncio.TimeoutError:
            raise ServerError(
                f"server stalled: no token for {stall_timeout_s:g} s on request {index} "
                f"({progress.tokens} tokens received so far) at {url}"
            ) from None
        arrival_s = clock.now()
        line = line.strip()
        # SSE framing: blank lines separate events, ':' lines are comments, 'event:'/'id:' carry nothing we use.
        if not line.startswith("data:"):
            continue
        payload = line[len("data:") :].strip()
        if payload == "[DONE]":
            yield arrival_s, None
            continue
        try:
            data = json.loads(payload)
        except json.JSONDecodeError:
            raise _RequestFailed(f"malformed SSE event (not JSON): {payload[:200]!r}") from None
        if not isinstance(data, dict):
            raise _RequestFailed(f"malformed SSE event (not an object): {payload[:200]!r}")
        yield arrival_s, data


async def _stream_generate(progress: _Progress, events: _Events) -> float:
    """Consume an SGLang ``/generate`` stream into ``progress``; return the ``[DONE]`` arrival time.

    Each event's ``text`` is cumulative (default ``--incremental-streaming-output`` off) and
    ``meta_info.completion_tokens`` is cumulative; an event's tokens = Δcompletion_tokens, and an event adding
    none records nothing (as ``async_request_sglang_generate`` in SGLang ``benchmark/serving.py``). The spec
    fields are read from the last ``meta_info`` carrying them (SGLang sends them on the final event only).
    One difference from bench_serving: the first token event is the first with new tokens even if its ``text``
    is still empty (a token can decode to "" mid UTF-8 sequence); bench_serving waits for non-empty text.
    """
    async for arrival_s, data in events:
        if data is None:
            return arrival_s
        if "error" in data:
            raise _RequestFailed(f"server error event: {_error_text(data)}")
        meta = data.get("meta_info") or {}
        completion = meta.get("completion_tokens")
        if completion is None and isinstance(data.get("output_ids"), list):
            completion = len(data["output_ids"])
        if not isinstance(completion, int):
            raise _RequestFailed("event without meta_info.completion_tokens: cannot count tokens")
        if isinstance(meta.get("prompt_tokens"), int):
            progress.prompt_tokens = meta["prompt_tokens"]
        if isinstance(data.get("text"), str):
            progress.text = data["text"]
        progress.spec.update(_spec_fields(meta))
        new_tokens = completion - progress.tokens
        if new_tokens > 0:
            progress.chunk_times_s.append(arrival_s)
            progress.chunk_tokens.append(new_tokens)
            progress.tokens = completion
    raise _RequestFailed(f"stream ended without data: [DONE] after {progress.tokens} tokens")


async def _stream_openai(progress: _Progress, events: _Events) -> float:
    """Consume an OpenAI completions/chat stream into ``progress``; return the ``[DONE]`` arrival time.

    With continuous usage (a chunk that has choices also has ``usage``; vLLM) each chunk's tokens are
    Δ``usage.completion_tokens``. Otherwise (SGLang sends usage once, on a final ``choices: []`` chunk) the
    per-chunk token counts are unknown: the arrivals of chunks with non-empty text are kept, ``chunk_tokens`` is
    left empty (so per-token ITL is None for this request) and the final usage gives the totals. Spec fields come
    from ``sglext.spec_tokens_details`` (SGLang, on ``return_spec_tokens_details``; a list when n > 1).
    """
    usage_chunks: list[tuple[float, int]] = []
    text_times: list[float] = []
    continuous = False
    last_usage_total = 0
    saw_usage = False
    async for arrival_s, data in events:
        if data is None:
            if not saw_usage:
                raise _RequestFailed(
                    "stream has no usage: cannot count tokens (the server ignored stream_options.include_usage)"
                )
            if continuous:
                progress.chunk_times_s = [t for t, _ in usage_chunks]
                progress.chunk_tokens = [n for _, n in usage_chunks]
            else:
                progress.chunk_times_s = text_times
                progress.chunk_tokens = []
            return arrival_s
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
            progress.text += piece
            text_times.append(arrival_s)
        usage = data.get("usage")
        if isinstance(usage, dict) and isinstance(usage.get("completion_tokens"), int):
            saw_usage = True
            if choices:
                continuous = True
            if isinstance(usage.get("prompt_tokens"), int):
                progress.prompt_tokens = usage["prompt_tokens"]
            new_tokens = usage["completion_tokens"] - last_usage_total
            if new_tokens > 0:
                usage_chunks.append((arrival_s, new_tokens))
            last_usage_total = usage["completion_tokens"]
            progress.tokens = last_usage_total
        sglext = data.get("sglext")
        details = sglext.get("spec_tokens_details") if isinstance(sglext, dict) else None
        if isinstance(details, list):
            details = details[0] if details else None
        if isinstance(details, dict):
            progress.spec.update(_spec_fields(details))
    raise _RequestFailed(f"stream ended without data: [DONE] after {progress.tokens} tokens")


async def _one_request(
    client: httpx.AsyncClient,
    index: int,
    spec: RequestSpec,
    *,
    api: Api,
    model: str | None,
    headers: dict[str, str],
    stall_timeout_s: float,
    progress: _Progress,
) -> RequestRecord:
    url = str(client.base_url).rstrip("/") + _PATHS[api]
    request = client.build_request("POST", _PATHS[api], json=_request_body(api, spec, model), headers=headers)
    progress.start_s = clock.now()
    try:
        try:
            resp = await asyncio.wait_for(client.send(request, stream=True), stall_timeout_s)
        except asyncio.TimeoutError:
            raise ServerError(
                f"server stalled: no token for {stall_timeout_s:g} s on request {index} (no response headers) at {url}"
            ) from None
        try:
            if resp.status_code != 200:
                body = (await resp.aread()).decode("utf-8", "replace").strip()
                raise _RequestFailed(f"HTTP {resp.status_code} {resp.reason_phrase} from {url}: {body[:300]}")
            events = _events(resp, stall_timeout_s, index, url, progress)
            try:
                if api == "generate":
                    end_s = await _stream_generate(progress, events)
                else:
                    end_s = await _stream_openai(progress, events)
            finally:
                await events.aclose()
        finally:
            await resp.aclose()
    except _RequestFailed as exc:
        return _failed(progress, str(exc))
    except httpx.HTTPError as exc:
        return _failed(progress, f"{type(exc).__name__} on {url}: {exc}")
    return RequestRecord(
        ok=True,
        error=None,
        start_s=progress.start_s,
        end_s=end_s,
        prompt_tokens=progress.prompt_tokens,
        completion_tokens=progress.tokens,
        chunk_times_s=tuple(progress.chunk_times_s),
        chunk_tokens=tuple(progress.chunk_tokens),
        output_text=progress.text,
        **progress.spec,
    )


def _failed(progress: _Progress, error: str) -> RequestRecord:
    return RequestRecord(
        ok=False,
        error=error,
        start_s=progress.start_s,
        end_s=clock.now(),
        prompt_tokens=progress.prompt_tokens,
        completion_tokens=progress.tokens,
        chunk_times_s=tuple(progress.chunk_times_s),
        chunk_tokens=tuple(progress.chunk_tokens),
        output_text=progress.text,
    )


async def _resolve_model(client: httpx.AsyncClient, headers: dict[str, str], timeout_s: float) -> str:
    """The first id of ``GET /v1/models`` (the name OpenAI endpoints expect in ``model``).

    :raises ServerError: the request failed or the answer has no ``data[0].id``.
    """
    url = str(client.base_url).rstrip("/") + "/v1/models"
    try:
        resp = await asyncio.wait_for(client.get("/v1/models", headers=headers), timeout_s)
    except (httpx.HTTPError, asyncio.TimeoutError) as exc:
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
) -> list[RequestRecord]:
    """Send ``requests`` as streams, at most ``concurrency`` in flight, issued strictly in list order.

    :param base_url: ``http://host:port`` of the server.
    :param api: ``generate`` (SGLang ``POST /generate``), ``completions`` (``/v1/completions``) or ``chat``
        (``/v1/chat/completions``).
    :param api_key: sent as ``Authorization: Bearer <key>`` when given.
    :param stall_timeout_s: seconds without any SSE line on one request before the whole phase is aborted.
    :param request_timeout_s: total seconds per request; exceeding it makes that request a failed record.
    :param model: the ``model`` field of OpenAI requests; None asks ``GET /v1/models`` (unused for ``generate``).
    :param transport: an httpx transport to use instead of the network (tests: ``httpx.MockTransport``).
    :returns: one record per request, in request order. Failed requests (connection error, HTTP status, error
        event, stream without ``[DONE]``, total timeout) are records with ``ok=False`` and ``error`` text.
    :raises ServerError: a stream stalled ("server stalled: no token for N s on request i ..."), or the model name
        could not be determined; in-flight requests are cancelled first.
    """
    headers = _auth_headers(api_key)
    # httpx's own timeout is a backstop only; the stall watchdog and total timeout below decide.
    timeout = httpx.Timeout(request_timeout_s + stall_timeout_s, connect=min(request_timeout_s, 30.0))
    limits = httpx.Limits(max_connections=concurrency, max_keepalive_connections=concurrency)
    records: list[RequestRecord | None] = [None] * len(requests)
    async with httpx.AsyncClient(base_url=base_url, timeout=timeout, limits=limits, transport=transport) as client:
        if api != "generate" and model is None:
            model = await _resolve_model(client, headers, min(request_timeout_s, 30.0))
        semaphore = asyncio.Semaphore(concurrency)

        async def run(index: int, spec: RequestSpec) -> None:
            progress = _Progress(start_s=clock.now())
            try:
                records[index] = await asyncio.wait_for(
                    _one_request(
                        client,
                        index,
                        spec,
                        api=api,
                        model=model,
                        headers=headers,
                        stall_timeout_s=stall_timeout_s,
                        progress=progress,
                    ),
                    request_timeout_s,
                )
            except asyncio.TimeoutError:
                records[index] = _failed(
                    progress, f"request {index} timed out after {request_timeout_s:g} s ({progress.tokens} tokens)"
                )
            finally:
                semaphore.release()

        tasks: list[asyncio.Task[None]] = []
        try:
            for index, spec in enumerate(requests):
                # Acquire before creating the task, so requests start in list order.
                await semaphore.acquire()
                failed = [t for t in tasks if t.done() and t.exception() is not None]
                if failed:
                    semaphore.release()
                    break
                tasks.append(asyncio.create_task(run(index, spec)))
            if tasks:
                await asyncio.wait(tasks, return_when=asyncio.FIRST_EXCEPTION)
            for task in tasks:
                if task.done() and task.exception() is not None:
                    raise task.exception()  # type: ignore[misc]
        finally:
            for task in tasks:
                task.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)
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
    """Synchronous :func:`run_requests` in a fresh event loop, timed with ``clock.now()``.

    Must not be called from inside a running event loop (``asyncio.run`` refuses).

    :returns: the records plus ``start_s`` (before the first request) and ``end_s`` (after the last finished).
    :raises ServerError: as :func:`run_requests`.
    """
    start_s = clock.now()
    records = asyncio.run(
        run_requests(
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
    return PhaseResult(records=tuple(records), start_s=start_s, end_s=clock.now())


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
