"""A cheap local SSE server speaking SGLang's ``/generate`` and the OpenAI streaming shapes (a script, not a test).

It exists to measure the plugin's client, not a model: every request streams ``max_new_tokens`` (``max_tokens``)
tokens, one SSE event per ``--tokens-per-event`` tokens, as fast as it can (``--itl-ms 0``) or paced on an absolute
schedule (first event ``--ttft-ms`` after the request arrived, then one every ``--itl-ms``). Event shapes follow
SGLang (sglang_api.md §5): ``/generate`` events carry cumulative ``text``/``output_ids`` and ``meta_info`` with
cumulative ``completion_tokens`` (spec fields on the last event); OpenAI chunks carry incremental text and usage
once, on a final ``choices: []`` chunk.

Truth for benchmarks: with ``--record`` the server keeps, per request, the ``time.perf_counter()`` instant just
after each event was handed to the socket (system-wide CLOCK_MONOTONIC on Linux, so comparable with the client's
stamps) and ``GET /send_times`` returns ``{"<prompt text>": [t0, t1, ...], ...}`` (and clears them).

Usage: ``python benchmarks/sse_server.py --port 31001 [--itl-ms 5 --ttft-ms 20] [--record] [--tokens-per-event 1]
[--spec] [--stall-prompt TEXT]``
Standard library only (raw ``asyncio`` protocol, HTTP/1.1 keep-alive, chunked transfer encoding).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import signal
import time
from typing import Any

HEAD_SSE = (
    b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream; charset=utf-8\r\ncache-control: no-cache\r\n"
    b"transfer-encoding: chunked\r\n\r\n"
)
DONE = b"data: [DONE]\n\n"
WORD = "tok "


def chunk(data: bytes) -> bytes:
    return b"%x\r\n%s\r\n" % (len(data), data)


def json_response(status: str, obj: Any) -> bytes:
    body = json.dumps(obj).encode()
    return b"HTTP/1.1 %s\r\ncontent-type: application/json\r\ncontent-length: %d\r\n\r\n%s" % (
        status.encode(),
        len(body),
        body,
    )


class Events:
    """Pre-encoded event payloads per (api, tokens, tokens_per_event), so serving costs a write per event."""

    def __init__(self, tokens_per_event: int, spec: bool) -> None:
        self.tpe = tokens_per_event
        self.spec = spec
        self.cache: dict[tuple[str, int], list[bytes]] = {}

    def get(self, api: str, n: int) -> list[bytes]:
        key = (api, n)
        if key not in self.cache:
            self.cache[key] = self._build(api, n)
        return self.cache[key]

    def _counts(self, n: int) -> list[int]:
        counts = list(range(self.tpe, n + 1, self.tpe)) if n >= self.tpe else []
        if not counts or counts[-1] != n:
            counts.append(n)
        return counts

    def _build(self, api: str, n: int) -> list[bytes]:
        out: list[bytes] = []
        counts = self._counts(n)
        prev = 0
        for k, c in enumerate(counts):
            last = k == len(counts) - 1
            if api == "generate":
                meta: dict[str, Any] = {
                    "id": "0123456789abcdef0123456789abcdef",
                    "finish_reason": {"type": "length", "length": n} if last else None,
                    "prompt_tokens": 8,
                    "weight_version": "default",
                    "completion_tokens": c,
                    "cached_tokens": 0,
                    "e2e_latency": 0.123456,
                }
                if last and self.spec:
                    verify = len(counts)
                    meta.update(
                        spec_verify_ct=verify,
                        spec_accept_length=n / verify,
                        spec_num_correct_drafts=n - verify,
                        spec_num_proposed_drafts=verify * (self.tpe + 1),
                    )
                event = {"text": WORD * c, "output_ids": [1000 + i for i in range(c)], "meta_info": meta}
                out.append(b"data: " + json.dumps(event).encode() + b"\n\n")
            else:
                piece = WORD * (c - prev)
                choice = (
                    {"index": 0, "text": piece} if api == "completions" else {"index": 0, "delta": {"content": piece}}
                )
                choice["finish_reason"] = "length" if last else None
                event = {"id": "cmpl-0", "object": "text_completion", "created": 0, "model": "m", "choices": [choice]}
                out.append(b"data: " + json.dumps(event).encode() + b"\n\n")
            prev = c
        if api != "generate":
            usage = {"prompt_tokens": 8, "completion_tokens": n, "total_tokens": 8 + n}
            final: dict[str, Any] = {"id": "cmpl-0", "choices": [], "usage": usage}
            if self.spec:
                verify = len(counts)
                final["sglext"] = {"spec_tokens_details": {"spec_verify_ct": verify, "spec_accept_length": n / verify}}
            out.append(b"data: " + json.dumps(final).encode() + b"\n\n")
        return out


class Server(asyncio.Protocol):
    def __init__(self, args: argparse.Namespace, events: Events, times: dict[str, list[float]]) -> None:
        self.args = args
        self.events = events
        self.times = times
        self.buf = b""
        self.transport: asyncio.Transport | None = None
        self.busy = False
        self.closed = False
        self.can_write: asyncio.Event = asyncio.Event()
        self.can_write.set()

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]

    def connection_lost(self, exc: Exception | None) -> None:
        self.closed = True
        self.can_write.set()

    def pause_writing(self) -> None:
        self.can_write.clear()

    def resume_writing(self) -> None:
        self.can_write.set()

    def data_received(self, data: bytes) -> None:
        self.buf += data
        if not self.busy:
            self._next()

    def _next(self) -> None:
        head_end = self.buf.find(b"\r\n\r\n")
        if head_end < 0:
            return
        head = self.buf[:head_end].decode("latin-1")
        lines = head.split("\r\n")
        method, path, _ = lines[0].split(" ", 2)
        length = 0
        for line in lines[1:]:
            name, _, value = line.partition(":")
            if name.strip().lower() == "content-length":
                length = int(value)
        if len(self.buf) < head_end + 4 + length:
            return
        body = self.buf[head_end + 4 : head_end + 4 + length]
        self.buf = self.buf[head_end + 4 + length :]
        self.busy = True
        asyncio.get_running_loop().create_task(self._serve(method, path, body, time.perf_counter()))

    async def _serve(self, method: str, path: str, body: bytes, received_s: float) -> None:
        assert self.transport is not None
        try:
            if method == "GET":
                if path == "/v1/models":
                    self.transport.write(json_response("200 OK", {"object": "list", "data": [{"id": "sse-model"}]}))
                elif path == "/send_times":
                    self.transport.write(json_response("200 OK", self.times))
                    self.times.clear()
                elif path in ("/health", "/health_generate", "/model_info"):
                    self.transport.write(json_response("200 OK", {}))
                else:
                    self.transport.write(json_response("404 Not Found", {"detail": "Not Found"}))
                return
            api = {"/generate": "generate", "/v1/completions": "completions", "/v1/chat/completions": "chat"}.get(path)
            if api is None:
                self.transport.write(json_response("404 Not Found", {"detail": "Not Found"}))
                return
            req = json.loads(body)
            if api == "generate":
                n = int(req.get("sampling_params", {}).get("max_new_tokens", 16))
                prompt = req.get("text") or json.dumps(req.get("input_ids"))
            else:
                n = int(req.get("max_tokens", 16))
                prompt = req.get("prompt") or req.get("messages", [{}])[-1].get("content", "")
            await self._stream(api, n, str(prompt), received_s)
        finally:
            self.busy = False
            if self.buf and not self.closed:
                self._next()

    async def _stream(self, api: str, n: int, prompt: str, received_s: float) -> None:
        transport = self.transport
        assert transport is not None
        payloads = self.events.get(api, n)
        record = self.args.record
        sent: list[float] = []
        transport.write(HEAD_SSE)
        itl = self.args.itl_ms / 1000.0
        ttft = self.args.ttft_ms / 1000.0
        loop = asyncio.get_running_loop()
        # Loop time and perf_counter share CLOCK_MONOTONIC on Linux; an absolute schedule: lateness does not add up.
        origin = loop.time() - (time.perf_counter() - received_s)
        k = 0
        stall = self.args.stall_prompt is not None and self.args.stall_prompt in prompt
        for payload in payloads:
            if self.closed:
                return
            if stall and k == 1:
                await asyncio.sleep(3600)  # a stalled stream: one event, then silence
            if itl > 0 or ttft > 0:
                delay = origin + ttft + k * itl - loop.time()
                if delay > 0:
                    await asyncio.sleep(delay)
            else:
                await asyncio.sleep(0)
            if not self.can_write.is_set():
                await self.can_write.wait()
            transport.write(chunk(payload))
            if record:
                sent.append(time.perf_counter())
            k += 1
        transport.write(chunk(DONE) + b"0\r\n\r\n")
        if record:
            self.times[prompt] = sent


async def serve(args: argparse.Namespace) -> None:
    events = Events(args.tokens_per_event, args.spec)
    times: dict[str, list[float]] = {}
    loop = asyncio.get_running_loop()
    server = await loop.create_server(lambda: Server(args, events, times), args.host, args.port, backlog=4096)
    stop = asyncio.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    print(f"sse_server listening on http://{args.host}:{args.port}", flush=True)
    async with server:
        await stop.wait()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--itl-ms", type=float, default=0.0, help="gap between events of one stream (0: flat out)")
    parser.add_argument("--ttft-ms", type=float, default=0.0, help="delay of the first event after the request")
    parser.add_argument("--tokens-per-event", type=int, default=1)
    parser.add_argument("--spec", action="store_true", help="add spec_* fields to the last meta_info")
    parser.add_argument("--record", action="store_true", help="keep per-event send times for GET /send_times")
    parser.add_argument("--stall-prompt", default=None, help="requests whose prompt holds this stop after one event")
    asyncio.run(serve(parser.parse_args()))


if __name__ == "__main__":
    main()
