"""Tests of pytest_specdec.measure.client against scripted SSE streams (httpx.MockTransport, no sockets).

Times: ``clock.now`` is replaced by a fake whose value each scripted event sets just before it is delivered, so
every arrival time below is exact.
"""

from __future__ import annotations

import asyncio
import dataclasses
import json
import time
from collections.abc import AsyncIterator, Callable
from typing import Any

import httpx
import pytest

from pytest_specdec.core import clock
from pytest_specdec.core.errors import ServerError
from pytest_specdec.core.records import RequestRecord
from pytest_specdec.measure.client import ClientLoad, PhaseOptions, auto_workers, fetch_text, run_phase
from pytest_specdec.measure.metrics import phase_metrics, request_timing
from tests.helpers import BASE, GENERATE_SCRIPT, FakeClock, Script, free_port, gen_event, req, sse


@pytest.fixture
def fake_clock(monkeypatch: pytest.MonkeyPatch) -> FakeClock:
    fake = FakeClock()
    monkeypatch.setattr(clock, "now", fake.now)
    return fake


def test_generate_stream_records_exact_chunks_and_spec_fields(fake_clock: FakeClock) -> None:
    seen: list[httpx.Request] = []

    async def handler(request: httpx.Request) -> httpx.Response:
        seen.append(request)
        return httpx.Response(
            200, content=sse(fake_clock, GENERATE_SCRIPT)(), headers={"content-type": "text/event-stream"}
        )

    result = run_phase(BASE, [req("hello", 8)], PhaseOptions(api_key="sk-1"), transport=httpx.MockTransport(handler))

    assert seen[0].url.path == "/generate"
    assert seen[0].headers["authorization"] == "Bearer sk-1"
    assert json.loads(seen[0].content) == {
        "text": "hello",
        "sampling_params": {"max_new_tokens": 8, "temperature": 0.0, "ignore_eos": True},
        "stream": True,
    }
    (rec,) = result.records
    assert rec.ok and rec.error is None
    assert (rec.start_s, rec.end_s) == (0.0, 0.200)
    assert rec.chunk_times_s == (0.100, 0.130, 0.190)  # the 0.140 event added no token
    assert rec.chunk_tokens == (1, 3, 4)
    assert (rec.completion_tokens, rec.prompt_tokens, rec.output_text) == (8, 5, "abcdefgh")
    assert (rec.spec_verify_ct, rec.spec_num_correct_drafts, rec.spec_num_proposed_drafts) == (3, 5, 9)
    assert rec.spec_accept_rate == 0.5
    assert (result.start_s, result.end_s) == (0.0, 0.200)

    timing = request_timing(rec)
    # TTFT = 0.100 - 0.0 = 100 ms.
    assert timing.ttft_s == pytest.approx(0.100)
    # ITL: 30 ms / 3 tokens = 10 ms x3; 60 ms / 4 tokens = 15 ms x4 (bench_serving's adjust_itl).
    assert timing.itl_s == pytest.approx([0.010] * 3 + [0.015] * 4)
    # TPOT = (200 - 100) ms / (8 - 1) = 14.2857 ms; decode = 7 tokens / 0.100 s = 70 tok/s.
    assert timing.tpot_s == pytest.approx(0.100 / 7)
    assert timing.decode_tok_s == pytest.approx(70.0)

    m = phase_metrics(result.records, result.duration_s, num_steps=3, speculative=True)
    assert m.output_tok_s == pytest.approx(8 / 0.200)  # 40 tok/s
    assert m.accept_length == pytest.approx(1 + 5 / 3)  # 1 + Σspec_num_correct_drafts / Σspec_verify_ct
    assert m.accept_length_native == pytest.approx(8 / 3)  # SGLang's meta_info convention
    assert m.accept_rate == pytest.approx(5 / 9)  # (accept_length - 1) / 3 steps
    assert m.itl_ms_mean == pytest.approx((3 * 10 + 4 * 15) / 7)


def test_older_sglang_spec_field_names_are_accepted(fake_clock: FakeClock) -> None:
    script: Script = [
        (0.1, gen_event("ab", 2, spec_verify_ct=1, spec_accept_token_num=1, spec_draft_token_num=3)),
        (0.2, "[DONE]"),
    ]

    def handler(request: httpx.Request) -> httpx.Response:
        return httpx.Response(200, content=sse(fake_clock, script)())

    (rec,) = run_phase(BASE, [req()], transport=httpx.MockTransport(handler)).records
    assert (rec.spec_verify_ct, rec.spec_num_correct_drafts, rec.spec_num_proposed_drafts) == (1, 1, 3)
    assert rec.spec_accept_length is None


def test_error_event_makes_a_failed_record(fake_clock: FakeClock) -> None:
    script: Script = [
        (0.1, gen_event("a", 1)),
        (0.2, {"error": {"message": "CUDA out of memory", "type": "InternalError", "code": 500}}),
    ]

    def handler(request: httpx.Request) -> httpx.Response:
        return httpx.Response(200, content=sse(fake_clock, script)())

    (rec,) = run_phase(BASE, [req()], transport=httpx.MockTransport(handler)).records
    assert not rec.ok
    assert rec.error == "server error event: CUDA out of memory"
    assert rec.completion_tokens == 1


def test_stream_without_done_is_a_failed_record(fake_clock: FakeClock) -> None:
    def handler(request: httpx.Request) -> httpx.Response:
        return httpx.Response(200, content=sse(fake_clock, [(0.1, gen_event("ab", 2))])())

    (rec,) = run_phase(BASE, [req()], transport=httpx.MockTransport(handler)).records
    assert (rec.ok, rec.error) == (False, "stream ended without data: [DONE] after 2 tokens")


def test_http_status_and_connection_errors_are_failed_records(fake_clock: FakeClock) -> None:
    calls = 0

    def handler(request: httpx.Request) -> httpx.Response:
        nonlocal calls
        calls += 1
        if calls == 1:
            return httpx.Response(401, json={"error": "Unauthorized"})
        raise httpx.ConnectError("connection refused", request=request)

    records = run_phase(BASE, [req("a"), req("b")], transport=httpx.MockTransport(handler)).records
    assert [r.ok for r in records] == [False, False]
    assert records[0].error == 'HTTP 401 Unauthorized from http://testserver/generate: {"error":"Unauthorized"}'
    assert records[1].error == "ConnectError on http://testserver/generate: connection refused"
    with pytest.raises(ServerError, match=r"^no successful requests: 2 of 2 failed; first error: HTTP 401"):
        phase_metrics(records, 1.0, num_steps=None, speculative=False)


def test_stalled_stream_aborts_the_phase(fake_clock: FakeClock) -> None:
    script: Script = [(0.1, gen_event("a", 1)), (0.0, ("sleep", 30.0)), (9.0, "[DONE]")]

    def handler(request: httpx.Request) -> httpx.Response:
        return httpx.Response(200, content=sse(fake_clock, script)())

    began = time.monotonic()
    with pytest.raises(ServerError) as excinfo:
        run_phase(
            BASE,
            [req(), req()],
            PhaseOptions(concurrency=2, stall_timeout_s=0.2),
            transport=httpx.MockTransport(handler),
        )
    assert time.monotonic() - began < 10.0  # generous: the stream itself would take 30 s
    assert str(excinfo.value) == (
        "server stalled: no token for 0.2 s on request 0 (1 tokens received so far) at http://testserver/generate"
    )


def test_request_timeout_is_a_failed_record_not_a_hang(fake_clock: FakeClock) -> None:
    # Events keep coming every 50 ms (no stall) but the request never finishes within 0.3 s.
    script: Script = [(0.1 * i, gen_event("a" * i, i)) if i % 2 else (0.0, ("sleep", 0.05)) for i in range(1, 200)]

    def handler(request: httpx.Request) -> httpx.Response:
        return httpx.Response(200, content=sse(fake_clock, script)())

    began = time.monotonic()
    (rec,) = run_phase(
        BASE, [req()], PhaseOptions(stall_timeout_s=5.0, request_timeout_s=0.3), transport=httpx.MockTransport(handler)
    ).records
    assert time.monotonic() - began < 10.0
    assert not rec.ok
    assert rec.error is not None and rec.error.startswith("request 0 timed out after 0.3 s (")


def test_concurrency_limit_and_issue_order(fake_clock: FakeClock) -> None:
    in_flight = 0
    peak = 0
    order: list[str] = []

    async def handler(request: httpx.Request) -> httpx.Response:
        nonlocal in_flight, peak
        order.append(json.loads(request.content)["text"])
        in_flight += 1
        peak = max(peak, in_flight)

        async def body() -> AsyncIterator[bytes]:
            nonlocal in_flight
            await asyncio.sleep(0.02)
            yield f"data: {json.dumps(gen_event('x', 1))}\n\n".encode()
            in_flight -= 1
            yield b"data: [DONE]\n\n"

        return httpx.Response(200, content=body())

    prompts = [f"p{i}" for i in range(5)]
    records = run_phase(
        BASE, [req(p) for p in prompts], PhaseOptions(concurrency=2), transport=httpx.MockTransport(handler)
    ).records
    assert order == prompts
    assert peak == 2
    assert [r.ok for r in records] == [True] * 5


def openai_chunk(text: str | None, usage: int | None = None, *, chat: bool = False, **extra: Any) -> dict[str, Any]:
    choices: list[dict[str, Any]] = []
    if text is not None:
        choices = [{"index": 0, "delta": {"content": text}} if chat else {"index": 0, "text": text}]
    chunk: dict[str, Any] = {"id": "c1", "choices": choices, **extra}
    if usage is not None:
        chunk["usage"] = {"prompt_tokens": 5, "completion_tokens": usage, "total_tokens": 5 + usage}
    return chunk


def test_openai_continuous_usage_counts_tokens_from_usage_deltas(fake_clock: FakeClock) -> None:
    # vLLM with continuous_usage_stats: every chunk has cumulative usage; the first chunk is role-only.
    script: Script = [
        (0.050, openai_chunk("", 0, chat=True)),
        (0.100, openai_chunk("a", 1, chat=True)),
        (0.130, openai_chunk("bcd", 4, chat=True)),  # 3 tokens in one chunk: counted 3, not 1
        (0.140, openai_chunk("", 4, chat=True)),  # finish chunk, no new token
        (0.150, openai_chunk(None, 4)),  # final usage-only chunk
        (0.160, "[DONE]"),
    ]
    bodies: list[dict[str, Any]] = []

    def handler(request: httpx.Request) -> httpx.Response:
        if request.url.path == "/v1/models":
            return httpx.Response(200, json={"data": [{"id": "tiny-llama"}]})
        bodies.append(json.loads(request.content))
        return httpx.Response(200, content=sse(fake_clock, script)())

    (rec,) = run_phase(
        BASE, [req("hello", 4)], PhaseOptions(api="chat"), transport=httpx.MockTransport(handler)
    ).records
    assert bodies == [
        {
            "model": "tiny-llama",
            "max_tokens": 4,
            "temperature": 0.0,
            "ignore_eos": True,
            "stream": True,
            "stream_options": {"include_usage": True, "continuous_usage_stats": True},
            "return_spec_tokens_details": True,
            "messages": [{"role": "user", "content": "hello"}],
        }
    ]
    assert rec.ok
    assert rec.chunk_times_s == (0.100, 0.130)
    assert rec.chunk_tokens == (1, 3)
    assert (rec.completion_tokens, rec.prompt_tokens, rec.output_text) == (4, 5, "abcd")
    # ITL: (130 - 100) ms / 3 = 10 ms, three times.
    assert request_timing(rec).itl_s == pytest.approx([0.010] * 3)


def test_openai_final_usage_only_never_counts_chunks_as_tokens(fake_clock: FakeClock) -> None:
    # SGLang ignores continuous_usage_stats: usage only on the last chunk, spec details in sglext.
    details = {
        "spec_verify_ct": 4,
        "spec_accept_length": 2.0,
        "spec_accept_rate": 0.33,
        "spec_num_correct_drafts": 4,
        "spec_num_proposed_drafts": 12,
    }
    script: Script = [
        (0.100, openai_chunk("ab")),
        (0.130, openai_chunk("cdef")),
        (0.170, openai_chunk("gh")),
        (0.180, openai_chunk(None, 8, sglext={"spec_tokens_details": details})),
        (0.190, "[DONE]"),
    ]
    bodies: list[dict[str, Any]] = []

    def handler(request: httpx.Request) -> httpx.Response:
        bodies.append(json.loads(request.content))
        return httpx.Response(200, content=sse(fake_clock, script)())

    (rec,) = run_phase(
        BASE, [req("hello", 8)], PhaseOptions(api="completions", model="m"), transport=httpx.MockTransport(handler)
    ).records
    assert bodies[0]["prompt"] == "hello" and bodies[0]["model"] == "m" and "messages" not in bodies[0]
    assert rec.ok
    assert rec.chunk_times_s == (0.100, 0.130, 0.170)
    assert rec.chunk_tokens == ()
    assert not rec.itl_available
    assert rec.completion_tokens == 8
    assert (rec.spec_verify_ct, rec.spec_num_correct_drafts, rec.spec_num_proposed_drafts) == (4, 4, 12)
    timing = request_timing(rec)
    assert timing.itl_s == ()
    assert timing.ttft_s == pytest.approx(0.100)
    assert timing.tpot_s == pytest.approx(0.090 / 7)  # (190 - 100) ms / (8 - 1)
    m = phase_metrics([rec], 0.190, num_steps=3, speculative=True)
    assert m.itl_ms_mean is None and m.itl_ms_p50 is None
    assert m.accept_length == pytest.approx(2.0)  # 1 + 4 accepted drafts / 4 verify steps
    assert m.accept_rate == pytest.approx(1 / 3)


def test_openai_stream_without_usage_is_a_failed_record(fake_clock: FakeClock) -> None:
    script: Script = [(0.1, openai_chunk("ab")), (0.2, "[DONE]")]

    def handler(request: httpx.Request) -> httpx.Response:
        return httpx.Response(200, content=sse(fake_clock, script)())

    (rec,) = run_phase(
        BASE, [req()], PhaseOptions(api="completions", model="m"), transport=httpx.MockTransport(handler)
    ).records
    assert rec.error == ("stream has no usage: cannot count tokens (the server ignored stream_options.include_usage)")


def test_model_name_lookup_failure_raises(fake_clock: FakeClock) -> None:
    def handler(request: httpx.Request) -> httpx.Response:
        return httpx.Response(404, text="not found")

    with pytest.raises(
        ServerError,
        match=r"^cannot determine the model name from GET http://testserver/v1/models "
        r"\(HTTP 404 Not Found\); fix: pass model explicitly$",
    ):
        run_phase(BASE, [req()], PhaseOptions(api="completions"), transport=httpx.MockTransport(handler))


def test_fetch_text() -> None:
    def handler(request: httpx.Request) -> httpx.Response:
        if request.url.path == "/metrics":
            assert request.headers["authorization"] == "Bearer k"
            return httpx.Response(200, text="sglang:spec_verify_calls_total 3.0\n")
        return httpx.Response(503, text="starting")

    transport = httpx.MockTransport(handler)
    assert fetch_text(BASE, "/metrics", "k", transport=transport) == "sglang:spec_verify_calls_total 3.0\n"
    with pytest.raises(ServerError) as excinfo:
        fetch_text(BASE, "/health", None, transport=transport)
    assert str(excinfo.value) == "GET http://testserver/health failed: HTTP 503 Service Unavailable: starting"


def test_phase_runs_from_first_request_sent_to_last_response_finished(fake_clock: FakeClock) -> None:
    # Issue 14.3: GET /v1/models "takes" 5 s and the stream's tear-down 4 s more; neither belongs to the phase
    # (SGLang bench_serving times from the first request sent to the last response finished).
    async def body() -> AsyncIterator[bytes]:
        for t, chunk in [(5.1, openai_chunk("ab")), (5.2, openai_chunk(None, 2)), (5.3, "[DONE]")]:
            fake_clock.t = t
            yield f"data: {chunk if isinstance(chunk, str) else json.dumps(chunk)}\n\n".encode()
        fake_clock.t = 9.3

    def handler(request: httpx.Request) -> httpx.Response:
        if request.url.path == "/v1/models":
            fake_clock.t = 5.0
            return httpx.Response(200, json={"data": [{"id": "m"}]})
        return httpx.Response(200, content=body())

    result = run_phase(BASE, [req()], PhaseOptions(api="completions"), transport=httpx.MockTransport(handler))
    (rec,) = result.records
    assert (rec.start_s, rec.end_s) == (5.0, 5.3)
    assert (result.start_s, result.end_s) == (5.0, 5.3)
    assert result.duration_s == pytest.approx(0.3)  # the old client said 9.3 s
    assert phase_metrics(result.records, result.duration_s, num_steps=None, speculative=False).output_tok_s == (
        pytest.approx(2 / 0.3)
    )


def test_phase_bounds_span_all_requests(fake_clock: FakeClock) -> None:
    # Two requests in flight: the phase starts with the first sent and ends with the last [DONE].
    scripts = {
        "a": [(0.1, gen_event("a", 1)), (0.5, "[DONE]")],
        "b": [(0.2, gen_event("b", 1)), (0.3, "[DONE]")],
    }

    def handler(request: httpx.Request) -> httpx.Response:
        return httpx.Response(200, content=sse(fake_clock, scripts[json.loads(request.content)["text"]])())

    result = run_phase(BASE, [req("a"), req("b")], PhaseOptions(concurrency=2), transport=httpx.MockTransport(handler))
    assert [r.end_s for r in result.records] == [0.5, 0.3]
    assert (result.start_s, result.end_s) == (0.0, 0.5)


def _split_reads(fake: FakeClock, reads: list[tuple[float, bytes]]) -> Callable[[], AsyncIterator[bytes]]:
    async def body() -> AsyncIterator[bytes]:
        for t, data in reads:
            fake.t = t
            yield data

    return body


def test_event_arrives_with_the_read_that_completes_its_line(fake_clock: FakeClock) -> None:
    # Reads split events anywhere: mid-line, several events in one read. An event's arrival is the read that
    # delivered its newline; the parse happens after the stream ended, on the fast path and the full one alike.
    events = [gen_event("a", 1), gen_event("abc", 3), gen_event("abcd", 4), gen_event("abcdef", 6, spec_verify_ct=3)]
    stream = b"".join(f"data: {json.dumps(e)}\n\n".encode() for e in events) + b"data: [DONE]\n\n"
    first_end = stream.index(b"\n\n") + 2
    second_end = stream.index(b"\n\n", first_end) + 2
    fourth_end = stream.index(b"data: [DONE]")
    reads = [
        (0.10, stream[:10]),  # the first event, cut inside its JSON
        (0.12, stream[10:first_end]),  # ...completed here
        (0.20, stream[first_end : second_end - 1]),  # the second event without its blank line: newline included
        (0.30, stream[second_end - 1 : fourth_end - 1]),  # third and fourth together (the last newline held back)
        (0.40, stream[fourth_end - 1 :]),
    ]

    def handler(request: httpx.Request) -> httpx.Response:
        return httpx.Response(200, content=_split_reads(fake_clock, reads)())

    (rec,) = run_phase(BASE, [req()], transport=httpx.MockTransport(handler)).records
    assert rec.ok
    assert rec.chunk_times_s == (0.12, 0.20, 0.30, 0.30)
    assert rec.chunk_tokens == (1, 2, 1, 2)
    assert (rec.completion_tokens, rec.output_text, rec.spec_verify_ct, rec.end_s) == (6, "abcdef", 3, 0.40)

    # The full parse (every event decoded) agrees with the fast one.
    from pytest_specdec.measure import sse

    times, data = [t for t, _ in reads], [d for _, d in reads]
    fast = sse.parse_generate_fast(times, data)
    full = sse.Parsed()
    sse.parse("generate", times, data, full)
    assert fast is not None
    assert (fast.chunk_times_s, fast.chunk_tokens, fast.tokens, fast.text, fast.spec, fast.done_s) == (
        full.chunk_times_s,
        full.chunk_tokens,
        full.tokens,
        full.text,
        full.spec,
        full.done_s,
    )


def test_fast_path_steps_aside_when_text_mimics_a_key(fake_clock: FakeClock) -> None:
    # A generated text holding 'completion_tokens": 99' is escaped in JSON and must not count; an event lacking
    # the key falls back to output_ids; both go through the full parse.
    tricky = 'say "completion_tokens": 99'
    script: Script = [
        (0.1, gen_event(tricky, 2)),
        (0.2, {"text": tricky + "!", "output_ids": [1, 2, 3], "meta_info": {"prompt_tokens": 5}}),
        (0.3, "[DONE]"),
    ]

    def handler(request: httpx.Request) -> httpx.Response:
        return httpx.Response(200, content=sse(fake_clock, script)())

    (rec,) = run_phase(BASE, [req()], transport=httpx.MockTransport(handler)).records
    assert (rec.ok, rec.chunk_times_s, rec.chunk_tokens, rec.completion_tokens) == (True, (0.1, 0.2), (2, 1), 3)
    assert rec.output_text == tricky + "!"


def test_malformed_event_is_a_failed_record_keeping_earlier_tokens(fake_clock: FakeClock) -> None:
    script: Script = [(0.1, gen_event("ab", 2)), (0.2, "{not json"), (0.3, "[DONE]")]

    def handler(request: httpx.Request) -> httpx.Response:
        return httpx.Response(200, content=sse(fake_clock, script)())

    (rec,) = run_phase(BASE, [req()], transport=httpx.MockTransport(handler)).records
    assert (rec.ok, rec.error) == (False, "malformed SSE event (not JSON): '{not json'")
    assert (rec.completion_tokens, rec.chunk_tokens) == (2, (2,))


# --- the real streaming path (aiohttp over sockets) against benchmarks/sse_server.py -----------------------------

@pytest.mark.parametrize("api", ["generate", "completions", "chat"])
def test_aiohttp_streams_count_tokens_per_event(sse_url: str, api: str) -> None:
    result = run_phase(sse_url, [req(f"p{i}", 10) for i in range(6)], PhaseOptions(api=api, concurrency=3))  # type: ignore[arg-type]
    assert [r.error for r in result.records] == [None] * 6
    for rec in result.records:
        assert (rec.completion_tokens, rec.prompt_tokens, rec.output_text) == (10, 8, "tok " * 10)
        assert rec.spec_verify_ct == 4  # events of 3, 3, 3, 1 tokens
        assert rec.start_s < rec.chunk_times_s[0] <= rec.chunk_times_s[-1] <= rec.end_s
        if api == "generate":
            assert rec.chunk_tokens == (3, 3, 3, 1)
        else:  # SGLang-like OpenAI stream: usage only at the end, per-chunk counts unknown
            assert (len(rec.chunk_times_s), rec.chunk_tokens) == (4, ())
    assert result.start_s == result.records[0].start_s
    assert result.end_s == max(r.end_s for r in result.records)


def test_aiohttp_http_error_and_refused_connection_are_failed_records(sse_url: str) -> None:
    # /v1/completions with a bad path: the server answers 404; a closed port refuses the connection.
    (rec,) = run_phase(sse_url + "/nope", [req()]).records
    assert rec.error == f'HTTP 404 Not Found from {sse_url}/nope/generate: {{"detail": "Not Found"}}'
    port = free_port()
    (rec,) = run_phase(f"http://127.0.0.1:{port}", [req()]).records
    assert rec.error is not None
    assert rec.error.startswith(f"ClientConnectorError on http://127.0.0.1:{port}/generate: Cannot connect to host")


def test_phase_records_the_clients_own_load(sse_url: str) -> None:
    result = run_phase(sse_url, [req(f"p{i}", 30) for i in range(4)], PhaseOptions(concurrency=2))
    load = result.load
    assert load is not None
    assert load.workers == 1 and load.probes >= 1  # ~30 ms per request, a probe every 10 ms
    assert 0.0 <= load.lag_ms_p50 <= load.lag_ms_p99 <= load.lag_ms_max
    assert 0.0 < load.cpu_cores <= 1.5


def test_workers_send_every_request_once_and_merge_records_in_request_order(sse_url: str) -> None:
    # One phase of worker processes for both: the merge here, and the progress callback each worker's finished
    # request reaches in this process (tests/test_progress.py tests the callback without workers).
    specs = [req(f"w{i}", 3 + i) for i in range(7)]
    done: list[RequestRecord] = []
    result = run_phase(sse_url, specs, PhaseOptions(api="completions", concurrency=4), workers=2,
                       on_request_done=done.append)  # fmt: skip
    assert [r.completion_tokens for r in result.records] == [3 + i for i in range(7)]
    assert all(r.ok for r in result.records)
    assert result.load is not None and result.load.workers == 2
    assert result.start_s == min(r.start_s for r in result.records)
    assert result.end_s == max(r.end_s for r in result.records)
    assert sorted(r.completion_tokens for r in done) == [3 + i for i in range(7)]  # each finished request, once
    assert all(r.ok for r in done)
    assert sorted(r.start_s for r in done) == sorted(r.start_s for r in result.records)


def test_a_stall_in_a_worker_aborts_the_phase_naming_the_request(sse_url: str) -> None:
    specs = [req(f"w{i}", 12) for i in range(3)] + [req("stall-me", 12)]
    began = time.monotonic()
    with pytest.raises(ServerError) as excinfo:
        run_phase(sse_url, specs, PhaseOptions(concurrency=4, stall_timeout_s=0.5), workers=2)
    assert time.monotonic() - began < 60.0
    # Request 3 (worker 1's second) got its first event of 3 tokens, then nothing.
    assert str(excinfo.value) == (
        f"server stalled: no token for 0.5 s on request 3 (3 tokens received so far) at {sse_url}/generate"
    )


def test_auto_workers_from_concurrency_and_measured_load() -> None:
    busy = ClientLoad(lag_ms_p50=0.1, lag_ms_p99=3.0, lag_ms_max=9.0, cpu_cores=1.3)
    very_busy = dataclasses.replace(busy, cpu_cores=2.6)
    assert auto_workers(1, cpus=16) == 1
    assert auto_workers(64, cpus=16) == 4  # one per 16 streams
    assert auto_workers(256, cpus=16) == 8  # at most half the cores from the concurrency alone
    assert auto_workers(64, busy, cpus=16) == 4  # ceil(1.3 cores / 0.5 per worker) = 3 is fewer
    assert auto_workers(64, very_busy, cpus=16) == 6  # ceil(2.6 / 0.5)
    assert auto_workers(1024, very_busy, cpus=4) == 3  # one core left over
    assert auto_workers(64, cpus=2) == 1
    assert auto_workers(2, busy, cpus=16) == 2  # never more than the streams
    assert auto_workers(1024, busy, cpus=2) == 1


@pytest.mark.parametrize("name", ["spec_correct_drafts_histogram", "spec_accept_histogram"])
def test_acceptance_histogram_is_read_under_both_sglang_names(fake_clock: FakeClock, name: str) -> None:
    # SGLang 0.5.23 sends spec_correct_drafts_histogram; 0.5.17 also the alias spec_accept_histogram.
    script: Script = [(0.1, gen_event("abcd", 4, spec_verify_ct=2, **{name: [1, 0, 1]})), (0.2, "[DONE]")]

    def handler(request: httpx.Request) -> httpx.Response:
        return httpx.Response(200, content=sse(fake_clock, script)())

    (rec,) = run_phase(BASE, [req()], transport=httpx.MockTransport(handler)).records
    assert rec.spec_correct_drafts_histogram == (1, 0, 1)


def test_clients_load_the_ca_bundle_once_per_process(sse_url: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """httpx builds a TLS context (loading certifi's CA bundle, ~45 ms of CPU) for every client unless given one;
    the plugin opens several clients per measured phase (``/metrics`` twice, ``/flush_cache``, ...)."""
    import ssl

    from pytest_specdec.core import auth

    built: list[int] = []
    real = ssl.create_default_context

    def counting(*args: Any, **kwargs: Any) -> ssl.SSLContext:
        built.append(1)
        return real(*args, **kwargs)

    monkeypatch.setattr(ssl, "create_default_context", counting)
    auth.tls_context.cache_clear()
    for _ in range(3):
        assert fetch_text(sse_url, "/health") == "{}"
    assert len(built) == 1


def test_open_loop_sends_each_request_at_its_arrival_then_waits_for_a_slot() -> None:
    """Arrival times are absolute from the phase's start (never early); the concurrency cap queues arrivals in order,
    and TTFT counts from the send, not the arrival (as bench_serving's request function inside its semaphore)."""
    body = b'data: {"text": "a", "meta_info": {"prompt_tokens": 1, "completion_tokens": 1}}\n\ndata: [DONE]\n\n'

    async def stream() -> AsyncIterator[bytes]:
        await asyncio.sleep(0.03)
        yield body

    async def handler(request: httpx.Request) -> httpx.Response:
        return httpx.Response(200, content=stream())

    due = [0.0, 0.01, 0.08]
    specs = [dataclasses.replace(req(), arrival_s=at) for at in due]
    records = run_phase(BASE, specs, PhaseOptions(concurrency=1), transport=httpx.MockTransport(handler)).records
    assert all(r.ok and r.arrival_s is not None for r in records)
    first = records[0].arrival_s
    assert first is not None
    for r, at in zip(records, due, strict=True):
        assert r.arrival_s is not None and r.arrival_s - first >= at - 0.002  # asyncio may wake < 1 ms early
        assert r.start_s >= r.arrival_s
    # Request 1 arrived while request 0 held the only slot: it waited (request 0 takes >= 30 ms).
    assert records[1].start_s >= records[0].end_s > records[1].arrival_s
