"""The plugin's SGLang parsers and client against what real SGLang 0.5.17 said on an H200 (tests/data/sglang/0.5.17,
recorded by benchmarks/gpu/capture_sglang.py; its README says how). CI has no GPU: these keep the plugin honest to
the real engine's output rather than to our reference server's imitation of it."""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import httpx
import pytest

from pytest_specdec.engines.prometheus import sum_samples
from pytest_specdec.engines.sglang import SglangEngine, parse_decode_line
from pytest_specdec.measure import client
from pytest_specdec.measure.workload import RequestSpec
from pytest_specdec.profiles.schema import Profile

DATA = Path(__file__).resolve().parents[1] / "data" / "sglang" / "0.5.17"


def endpoints(config: str) -> dict[str, dict[str, object]]:
    return json.loads((DATA / f"{config}.endpoints.json").read_text())


def body(config: str, path: str) -> str:
    entry = endpoints(config)[path]
    assert entry["status"] == 200, entry
    return str(entry["body"])


def test_decode_batch_lines_of_a_real_log() -> None:
    lines = [parse_decode_line(line) for line in (DATA / "eagle3.log").read_text().splitlines()]
    parsed = [p for p in lines if p is not None]
    assert len(parsed) >= 10
    assert all(p.accept_length is not None and 1.0 <= p.accept_length <= 4.0 for p in parsed)
    assert all(p.accept_rate is not None and 0.0 <= p.accept_rate <= 1.0 for p in parsed)
    assert all(p.cuda_graph is False for p in parsed)  # launched with --disable-cuda-graph
    first = parsed[0]
    assert (first.accept_length, first.accept_rate, first.gen_tok_s) == (2.90, 0.63, 3.91)
    plain = [parse_decode_line(line) for line in (DATA / "baseline.log").read_text().splitlines()]
    plain_parsed = [p for p in plain if p is not None]
    assert plain_parsed and all(p.accept_length is None and p.accept_rate is None for p in plain_parsed)


def test_eagle_algorithm_on_an_eagle3_draft_shows_in_the_decode_lines() -> None:
    """What the original incident looked like from the log: EAGLE serves an EAGLE-3 draft with accept len ~1."""
    parsed = [p for line in (DATA / "eagle-algo-on-eagle3-draft.log").read_text().splitlines()
              if (p := parse_decode_line(line)) is not None]  # fmt: skip
    lengths = sorted(p.accept_length or 0 for p in parsed)
    assert lengths and lengths[len(lengths) // 2] < 1.3  # median window; single windows reach 2.0


def _profile() -> Profile:
    return Profile(
        name="eagle3",
        server="sglang",
        url="http://sglang",
        model_path="m",
        speculative={"algorithm": "EAGLE3", "num_steps": 3, "eagle_topk": 1, "num_draft_tokens": 4},
    )


def test_server_info_read_back_of_real_sglang() -> None:
    info = body("eagle3", "/server_info")

    def handler(request: httpx.Request) -> httpx.Response:
        if request.url.path in ("/server_info", "/get_server_info"):
            return httpx.Response(200, text=info)
        return httpx.Response(404)

    with httpx.Client(base_url="http://sglang", transport=httpx.MockTransport(handler)) as http:
        effective = SglangEngine().effective_config(http, _profile())
    assert (effective.version, effective.speculative_algorithm) == ("0.5.17", "EAGLE3")
    assert (effective.num_steps, effective.eagle_topk, effective.num_draft_tokens) == (3, 1, 4)
    assert effective.max_running_requests == 48


def test_counters_of_real_metrics_agree_with_the_servers_own_average() -> None:
    """Counter accept length over the batch vs the scheduler's avg_spec_accept_length (an independent source)."""
    before = SglangEngine().counters(body("eagle3", "/metrics"))
    after = SglangEngine().counters(body("eagle3", "/metrics (after batch)"))
    # Before the first request SGLang exposes neither counter (read as None, "not reported yet").
    assert (before.generation_tokens, before.verify_calls) == (None, None)
    assert after.generation_tokens is not None and after.verify_calls is not None
    assert after.generation_tokens / after.verify_calls > 2.5
    info = json.loads(body("eagle3", "/server_info (after batch)"))
    server_avg = info["internal_states"][0]["avg_spec_accept_length"]
    batch = json.loads((DATA / "eagle3.batch.json").read_text())["requests"]
    tokens = sum(r["meta_info"]["completion_tokens"] for r in batch)
    verify = sum(r["meta_info"]["spec_verify_ct"] for r in batch)
    assert 2.5 < server_avg < 3.2
    # Per-request completion_tokens / spec_verify_ct counts the prefill token; the scheduler's average does not
    # fold it the same way: both land within 5% on 64-token outputs.
    assert abs(tokens / verify - server_avg) / server_avg < 0.05
    totals = sum_samples(body("eagle3", "/metrics (after batch)"))
    assert totals["sglang:spec_accept_length"] > 1.0


def test_flush_cache_answers_200() -> None:
    assert endpoints("eagle3")["POST /flush_cache"]["status"] == 200


# -- the measuring client, fed the recorded SSE bytes by a replay server -----------------------------------------


class _Replay(BaseHTTPRequestHandler):
    streams: dict[str, bytes] = {}

    def do_POST(self) -> None:  # noqa: N802 (http.server's name)
        self.rfile.read(int(self.headers.get("Content-Length", 0)))
        raw = self.streams.get(self.path)
        if raw is None:
            self.send_error(404)
            return
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream")
        self.send_header("Content-Length", str(len(raw)))
        self.end_headers()
        self.wfile.write(raw)

    def do_GET(self) -> None:  # noqa: N802
        raw = body("eagle3", "/v1/models").encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(raw)))
        self.end_headers()
        self.wfile.write(raw)

    def log_message(self, *args: object) -> None:
        pass


@pytest.fixture
def replay() -> Iterator[str]:
    _Replay.streams = {
        "/generate": (DATA / "eagle3.generate.sse").read_bytes(),
        "/v1/completions": (DATA / "eagle3.completions.sse").read_bytes(),
        "/v1/chat/completions": (DATA / "eagle3.chat.sse").read_bytes(),
    }
    server = ThreadingHTTPServer(("127.0.0.1", 0), _Replay)
    # shutdown() waits for serve_forever to look at its flag, every poll_interval (0.5 s by default) at most.
    thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.02}, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()


def test_client_reads_a_real_generate_stream(replay: str) -> None:
    raw = (DATA / "eagle3.generate.sse").read_text()
    events = [json.loads(line[6:]) for line in raw.splitlines() if line.startswith("data: {")]
    final = events[-1]["meta_info"]
    phase = client.run_phase(replay, [RequestSpec("x", 64, 0.0, True)], client.PhaseOptions(api="generate"))
    (record,) = phase.records
    assert record.ok, record.error
    assert record.completion_tokens == final["completion_tokens"] == 64
    assert record.spec_verify_ct == final["spec_verify_ct"]
    assert record.spec_accept_length == final["spec_accept_length"]
    # One SSE event per verify step: each carries the tokens that step emitted (summing to the output).
    assert sum(record.chunk_tokens) == 64
    assert record.output_text == events[-1]["text"]


@pytest.mark.parametrize(("api", "stream"), [("completions", "eagle3.completions.sse"), ("chat", "eagle3.chat.sse")])
def test_client_reads_real_openai_streams(replay: str, api: str, stream: str) -> None:
    raw = (DATA / stream).read_text()
    usage = [json.loads(line[6:]).get("usage") for line in raw.splitlines() if line.startswith("data: {")]
    completion_tokens = [u for u in usage if u][-1]["completion_tokens"]
    phase = client.run_phase(replay, [RequestSpec("x", 32, 0.0, True)], client.PhaseOptions(api=api, model="default"))  # type: ignore[arg-type]
    (record,) = phase.records
    assert record.ok, record.error
    assert record.completion_tokens == completion_tokens == 32
    assert record.chunk_times_s  # arrivals of the chunks that carried text
