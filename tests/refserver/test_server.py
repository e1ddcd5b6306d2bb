"""The reference server's HTTP surface against sglang_api.md §3–§5, and losslessness (spec vs no-spec, temp 0).

Two servers per module: EAGLE-3 (3 steps, topk 1, api key, metrics, decode-log-interval 1) and no speculation.
"""

from __future__ import annotations

import json
import re
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import httpx
import pytest

pytest.importorskip("torch", reason="the reference server needs the reference extra (torch)")
from refhelpers import RunningServer, asset_dir, load_prompts, running_server, spec_flags

from pytest_specdec.engines.reference import ReferenceEngine

pytestmark = pytest.mark.slow

KEY = "sekrit"
MAX_NEW = 24


@pytest.fixture(scope="module")
def spec_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RunningServer]:
    log = tmp_path_factory.mktemp("spec") / "server.log"
    extra = [*spec_flags(asset_dir()), "--enable-metrics", "--decode-log-interval", "1"]
    with running_server(log, extra, api_key=KEY) as srv:
        yield srv


@pytest.fixture(scope="module")
def plain_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RunningServer]:
    log = tmp_path_factory.mktemp("plain") / "server.log"
    with running_server(log, ["--decode-log-interval", "1"]) as srv:
        yield srv


def generate(c: httpx.Client, text: str, **sampling: object) -> dict:
    params = {"max_new_tokens": MAX_NEW, "temperature": 0, "ignore_eos": True, **sampling}
    r = c.post("/generate", json={"text": text, "sampling_params": params})
    assert r.status_code == 200, r.text
    return r.json()


def sse(lines: Iterator[str]) -> list[str]:
    """``data:`` payloads of an SSE stream, checking the blank-line framing."""
    return [line[len("data: "):] for line in lines if line.startswith("data: ")]


def test_startup_log_and_warmup(spec_server: RunningServer) -> None:
    log = spec_server.log()
    assert re.search(r"^\[\d{4}-\d\d-\d\d \d\d:\d\d:\d\d\] The server is fired up and ready to roll!$", log, re.M)
    assert "Max running requests is reset to 48 for speculative decoding." in log
    assert log.index("Load weight end.") < log.index("Uvicorn running on")


def test_api_key(spec_server: RunningServer) -> None:
    with spec_server.client(auth=False) as anon:
        for path in ("/health", "/health_generate", "/ready", "/metrics"):
            assert anon.get(path).status_code == 200, path
        r = anon.get("/server_info")
        assert (r.status_code, r.json()) == (401, {"error": "Unauthorized"})
        assert anon.post("/generate", json={"text": "x"}).status_code == 401
        wrong = anon.get("/model_info", headers={"Authorization": "Bearer nope"})
        assert wrong.status_code == 401


def test_model_info_shape(spec_server: RunningServer) -> None:
    with spec_server.client() as c:
        info = c.get("/model_info").json()
        assert c.get("/get_model_info").json() == info
    assert set(info) == {"model_path", "served_model_name", "tokenizer_path", "is_generation",
                         "preferred_sampling_params", "weight_version", "load_format", "reasoning_parser",
                         "tool_call_parser", "disaggregation_mode", "has_image_understanding",
                         "has_audio_understanding", "model_type", "architectures"}
    assert info["architectures"] == ["LlamaForCausalLM"] and info["is_generation"] is True
    assert "is deprecated" in spec_server.log()


def test_server_info_fields(spec_server: RunningServer) -> None:
    with spec_server.client() as c:
        info = c.get("/server_info").json()
        assert set(c.get("/get_server_info").json()) == set(info)
    assert info["version"] == "0.5.23" and info["reference_server"] is True
    assert info["speculative_algorithm"] == "EAGLE3"
    assert (info["speculative_num_steps"], info["speculative_eagle_topk"], info["speculative_num_draft_tokens"]) \
        == (3, 1, 4)
    assert info["speculative_draft_model_path"].endswith("draft-eagle3")
    assert info["max_running_requests"] == 48 and info["random_seed"] == 0
    assert info["model_path"].endswith("target")
    assert KEY not in json.dumps(info) and KEY not in spec_server.log()
    assert isinstance(info["internal_states"], list) and len(info["internal_states"]) == 1
    assert "last_gen_throughput" in info["internal_states"][0]


def test_generate_meta_info(spec_server: RunningServer) -> None:
    with spec_server.client() as c:
        out = generate(c, load_prompts()[0])
    meta = out["meta_info"]
    assert len(out["output_ids"]) == MAX_NEW and isinstance(out["text"], str)
    assert meta["finish_reason"] == {"type": "length", "length": MAX_NEW}
    assert meta["completion_tokens"] == MAX_NEW and meta["cached_tokens"] == 0 and meta["prompt_tokens"] > 0
    assert meta["e2e_latency"] > 0
    v = meta["spec_verify_ct"]
    assert 1 <= v <= MAX_NEW
    assert meta["spec_accept_length"] == pytest.approx(MAX_NEW / v)
    assert meta["spec_num_proposed_drafts"] == v * 3
    assert meta["spec_accept_rate"] == pytest.approx(meta["spec_num_correct_drafts"] / (v * 3))
    assert sum(meta["spec_correct_drafts_histogram"]) == v
    assert sum(i * n for i, n in enumerate(meta["spec_correct_drafts_histogram"])) == meta["spec_num_correct_drafts"]


def test_generate_streaming_is_cumulative(spec_server: RunningServer) -> None:
    body = {"text": load_prompts()[1], "stream": True,
            "sampling_params": {"max_new_tokens": MAX_NEW, "temperature": 0, "ignore_eos": True}}
    with spec_server.client() as c, c.stream("POST", "/generate", json=body) as r:
        assert r.headers["content-type"].startswith("text/event-stream")
        raw = r.read().decode()
    assert raw.endswith("data: [DONE]\n\n")
    events = [json.loads(p) for p in sse(iter(raw.split("\n\n"))) if p != "[DONE]"]
    assert len(events) >= 2
    for prev, cur in zip(events, events[1:], strict=False):
        assert cur["output_ids"][: len(prev["output_ids"])] == prev["output_ids"]
        assert cur["text"].startswith(prev["text"])
        assert cur["meta_info"]["completion_tokens"] == len(cur["output_ids"])
    assert all("e2e_latency" not in e["meta_info"] and "spec_verify_ct" not in e["meta_info"] for e in events[:-1])
    final = events[-1]["meta_info"]
    assert final["finish_reason"]["type"] == "length" and "spec_verify_ct" in final and "e2e_latency" in final
    # spec chunks can carry several tokens: the chunk count is the verify count + 1 (the prefill token)
    # One event per verify step plus the first token; a client that falls behind gets merged (cumulative) events.
    assert 2 <= len(events) <= final["spec_verify_ct"] + 1


def test_openai_completions_stream_usage_and_spec_details(spec_server: RunningServer) -> None:
    body = {"model": "x", "prompt": load_prompts()[2], "max_tokens": 16, "temperature": 0, "stream": True,
            "stream_options": {"include_usage": True}, "return_spec_tokens_details": True, "ignore_eos": True}
    with spec_server.client() as c, c.stream("POST", "/v1/completions", json=body) as r:
        payloads = sse(r.iter_lines())
        plain = c.post("/v1/completions", json={**body, "stream": False}).json()
    assert payloads[-1] == "[DONE]"
    chunks = [json.loads(p) for p in payloads[:-1]]
    text_chunks = [ch for ch in chunks if ch["choices"]]
    assert all(ch["object"] == "text_completion" for ch in chunks)
    streamed = "".join(ch["choices"][0]["text"] for ch in text_chunks)
    assert streamed == plain["choices"][0]["text"]  # incremental deltas add up to the full text
    assert text_chunks[-1]["choices"][0]["finish_reason"] == "length"
    spec = [ch for ch in chunks if "sglext" in ch]
    assert len(spec) == 1 and spec[0]["choices"] == []
    details = spec[0]["sglext"]["spec_tokens_details"]
    assert details["spec_verify_ct"] >= 1 and details["spec_num_proposed_drafts"] == 3 * details["spec_verify_ct"]
    assert chunks[-1]["choices"] == [] and chunks[-1]["usage"]["completion_tokens"] == 16
    assert plain["usage"]["total_tokens"] == plain["usage"]["prompt_tokens"] + 16
    assert plain["object"] == "text_completion" and "sglext" in plain


def test_openai_chat_and_models(spec_server: RunningServer) -> None:
    with spec_server.client() as c:
        models = c.get("/v1/models").json()
        chat = c.post("/v1/chat/completions", json={
            "model": "x", "messages": [{"role": "user", "content": "def f(x):"}], "max_tokens": 8, "temperature": 0,
            "ignore_eos": True}).json()
        with c.stream("POST", "/v1/chat/completions", json={
                "model": "x", "messages": [{"role": "user", "content": "def f(x):"}], "max_tokens": 8,
                "temperature": 0, "ignore_eos": True, "stream": True}) as r:
            chunks = [json.loads(p) for p in sse(r.iter_lines()) if p != "[DONE]"]
    assert models["object"] == "list" and models["data"][0]["owned_by"] == "sglang"
    assert chat["object"] == "chat.completion" and chat["choices"][0]["message"]["role"] == "assistant"
    assert chat["usage"]["completion_tokens"] == 8 and "sglext" not in chat
    assert chunks[0]["object"] == "chat.completion.chunk" and chunks[0]["choices"][0]["delta"]["role"] == "assistant"
    assert "".join(ch["choices"][0]["delta"]["content"] for ch in chunks) == chat["choices"][0]["message"]["content"]


def test_flush_cache_resets_lifetime_accept_length(spec_server: RunningServer) -> None:
    with spec_server.client() as c:
        generate(c, load_prompts()[3])
        before = c.get("/server_info").json()["internal_states"][0]
        assert before["avg_spec_accept_length"] >= 1.0  # folded every iteration (--decode-log-interval 1)
        r = c.post("/flush_cache")
        assert r.status_code == 200 and r.text.startswith("Cache flushed.")
        after = c.get("/server_info").json()["internal_states"][0]
        assert "avg_spec_accept_length" not in after
        out = generate(c, load_prompts()[4])
        hist = out["meta_info"]["spec_correct_drafts_histogram"]
        # lifetime value = accepted tokens incl. bonus per verify (SGLang metrics_reporter), not counting the
        # prefill token that meta_info's completion_tokens/spec_verify_ct includes
        expected = sum((i + 1) * n for i, n in enumerate(hist)) / sum(hist)
        deadline = time.monotonic() + 10
        while True:  # the last iteration is folded just after the response is sent
            again = c.get("/server_info").json()["internal_states"][0]
            if again.get("avg_spec_accept_length") == pytest.approx(expected) or time.monotonic() > deadline:
                break
            time.sleep(0.05)
    assert again["avg_spec_accept_length"] == pytest.approx(expected)


def test_flush_cache_refused_while_busy(spec_server: RunningServer) -> None:
    body = {"text": load_prompts()[5], "stream": True,
            "sampling_params": {"max_new_tokens": 1800, "temperature": 0, "ignore_eos": True}}
    with spec_server.client() as c, c.stream("POST", "/generate", json=body) as r:
        lines = r.iter_lines()
        # Keep the iterator: a discarded one is closed at once, which closes the connection (httpcore), and the
        # server then aborts the request, racing the flush below (issue 16.4: the 4-in-10 failures).
        next(lines)  # the request is running
        busy = c.post("/flush_cache")
    assert busy.status_code == 400
    assert busy.text == "Cache not flushed because there are pending requests.\n"


def test_metrics_counts_measured_requests_only(spec_server: RunningServer) -> None:
    def sample(text: str, name: str) -> float:
        m = re.search(rf"^{re.escape(name)}\{{[^}}]*\}} ([0-9.e+]+)$", text, re.M)
        assert m, name
        return float(m.group(1))

    with spec_server.client() as c:
        t0 = c.get("/metrics").text
        assert c.get("/health").status_code == 200
        out = generate(c, load_prompts()[6])
        t1 = c.get("/metrics").text
    meta = out["meta_info"]
    assert sample(t1, "sglang:num_requests_total") - sample(t0, "sglang:num_requests_total") == 1
    assert sample(t1, "sglang:generation_tokens_total") - sample(t0, "sglang:generation_tokens_total") == MAX_NEW
    assert (sample(t1, "sglang:spec_verify_calls_total") - sample(t0, "sglang:spec_verify_calls_total")
            == meta["spec_verify_ct"])
    # vLLM's per-position semantics: position i counts the steps that accepted more than i drafts.
    hist = meta["spec_correct_drafts_histogram"]
    before, after = ReferenceEngine().counters(t0), ReferenceEngine().counters(t1)
    deltas = [a - b for a, b in zip(after.accepted_per_position, before.accepted_per_position, strict=True)]
    assert deltas == [sum(hist[i + 1:]) for i in range(3)]
    for name in ("sglang:prompt_tokens_total", "sglang:spec_accept_length", "sglang:spec_accept_rate",
                 "sglang:gen_throughput", "sglang:num_running_reqs", "sglang:num_queue_reqs", "sglang:is_cuda_graph",
                 "sglang:time_to_first_token_seconds_count"):
        sample(t1, name)
    assert 'model_name="' in t1 and 'engine_type="unified"' in t1


def test_decode_log_line_format(spec_server: RunningServer) -> None:
    pat = (r"^\[[\d\- :]+\] Decode batch, #running-req: \d+, #token: \d+, token usage: \d+\.\d\d, accept len: "
           r"\d+\.\d\d, accept rate: \d+\.\d\d, cuda graph: False, gen throughput \(token/s\): \d+\.\d\d, "
           r"#queue-req: \d+$")
    assert re.search(pat, spec_server.log(), re.M)
    prefill = r"^\[[\d\- :]+\] Prefill batch, #new-seq: 1, #new-token: \d+, #cached-token: 0, "
    assert re.search(prefill, spec_server.log(), re.M)


def test_concurrent_requests_match_sequential(spec_server: RunningServer) -> None:
    prompts = load_prompts()[8:12]
    with spec_server.client() as c:
        sequential = [generate(c, p)["output_ids"] for p in prompts]
        with ThreadPoolExecutor(4) as pool:
            parallel = list(pool.map(lambda p: generate(c, p)["output_ids"], prompts))
    assert parallel == sequential


def test_sampling_temperature_runs_and_respects_length(spec_server: RunningServer) -> None:
    with spec_server.client() as c:
        outs = [generate(c, load_prompts()[7], temperature=0.8, top_p=0.9) for _ in range(2)]
    for out in outs:
        assert out["meta_info"]["completion_tokens"] == MAX_NEW
        assert out["meta_info"]["spec_verify_ct"] >= 1


def test_lossless_spec_equals_plain_greedy(spec_server: RunningServer, plain_server: RunningServer) -> None:
    prompts = load_prompts()[:6]
    with spec_server.client() as s, plain_server.client() as p:
        for prompt in prompts:
            spec = generate(s, prompt, max_new_tokens=48)
            plain = generate(p, prompt, max_new_tokens=48)
            assert spec["output_ids"] == plain["output_ids"], prompt
            assert "spec_verify_ct" not in plain["meta_info"]


def test_bad_request_is_400(plain_server: RunningServer) -> None:
    with plain_server.client() as c:
        r = c.post("/generate", json={"sampling_params": {"max_new_tokens": 2}})
        t = c.post("/generate", json={"text": "x", "sampling_params": {"temperature": -1}})
    assert r.status_code == 400 and r.json()["error"]["message"] == "Either text or input_ids should be provided."
    assert t.status_code == 400 and t.json()["error"]["message"] == "temperature must be non-negative, got -1.0."


def test_plain_server_info_has_no_spec(plain_server: RunningServer, tmp_path: Path) -> None:
    with plain_server.client() as c:
        info = c.get("/server_info").json()
        assert c.get("/metrics").status_code == 404  # metrics only with --enable-metrics
    assert info["speculative_algorithm"] is None and info["max_running_requests"] is None
    assert "avg_spec_accept_length" not in info["internal_states"][0]
