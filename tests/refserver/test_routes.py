"""Each reference-server endpoint alone, on an app around a fake engine (no model, no process): fast."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest

pytest.importorskip("torch", reason="the reference server needs the reference extra (torch)")
from fastapi.testclient import TestClient

from pytest_specdec.refserver.app import create_app
from pytest_specdec.refserver.args import parse_args, resolve_args
from pytest_specdec.refserver.decoding import EngineStats, Models, SamplingParams, Sequence, StepOutput
from pytest_specdec.refserver.metrics_collector import MetricsCollector
from pytest_specdec.refserver.state import AppState

SPEC = [
    "--speculative-algorithm",
    "EAGLE3",
    "--speculative-draft-model-path",
    "d",
    "--speculative-num-steps",
    "3",
    "--speculative-eagle-topk",
    "1",
    "--speculative-num-draft-tokens",
    "4",
]


class FakeTokenizer:
    def encode(self, text: str, add_special_tokens: bool = False) -> list[int]:
        return [ord(c) % 200 for c in text]

    def apply_chat_template(self, messages: list[dict], tokenize: bool, add_generation_prompt: bool) -> str:
        return "".join(m["content"] for m in messages) + ">"


class FakeEngine:
    """Answers every request with two steps: 1 token (prefill), then 3 more in one verify step (2 drafts
    accepted), or never answers when ``silent``."""

    def __init__(self) -> None:
        self.stats = EngineStats()
        self.pending = False
        self.silent = False
        self.submitted: list[Sequence] = []
        self.trace_events: list[dict] | None = None

    def busy(self) -> bool:
        return self.pending

    def submit(self, seq: Sequence) -> None:
        self.submitted.append(seq)
        if self.silent:
            return
        n = min(4, seq.params.max_new_tokens)
        for ids, verify, hist in (((7,), 0, ()), (tuple(range(7, 7 + n)), 1, (0, 0, 1))):
            done = len(ids) >= n
            seq.emit(
                StepOutput(
                    output_ids=ids[:n],
                    text="x" * len(ids[:n]),
                    finished=done,
                    finish_reason={"type": "length", "length": n} if done else None,
                    prompt_tokens=len(seq.prompt_ids),
                    spec_verify_ct=verify,
                    spec_num_correct_drafts=2 * verify,
                    spec_correct_drafts_histogram=hist,
                    first_token_time=0.0,
                )
            )
            if done:
                seq.finished = True
                return


def make_state(*flags: str) -> AppState:
    args = resolve_args(parse_args(["--model-path", "m", "--random-seed", "0", *flags]))
    models = Models(
        target=None,
        tokenizer=FakeTokenizer(),
        num_layers=8,
        vocab_size=200,
        eos_token_id=None,
        context_len=64,
        architectures=["LlamaForCausalLM"],
        model_type="llama",
    )
    engine = FakeEngine()
    return AppState(
        args=args,
        models=models,
        engine=engine,  # type: ignore[arg-type]
        metrics=MetricsCollector(args, args.enable_metrics),
        launch_command="refserver",
        status="Up",
    )


@pytest.fixture
def spec() -> Iterator[tuple[AppState, TestClient]]:
    state = make_state(*SPEC, "--enable-metrics")
    with TestClient(create_app(state)) as client:
        yield state, client


def test_health_is_503_until_up_then_generates_one_token_not_counted(spec: tuple[AppState, TestClient]) -> None:
    state, client = spec
    state.status = "Starting"
    assert client.get("/health").status_code == 503
    assert client.get("/ready").status_code == 503
    state.status = "Up"
    assert client.get("/health_generate").status_code == 200
    assert client.get("/ready").status_code == 200
    seq = state.engine.submitted[-1]  # type: ignore[attr-defined]
    assert (seq.prompt_ids, seq.params.max_new_tokens, seq.log_metrics) == ([0], 1, False)
    assert seq.rid.startswith("HEALTH_CHECK_")


def test_health_is_503_when_the_engine_does_not_answer(spec: tuple[AppState, TestClient]) -> None:
    state, client = spec
    state.engine.silent = True  # type: ignore[attr-defined]
    state.health_timeout_s = 0.05
    assert client.get("/health").status_code == 503
    assert state.engine.submitted[-1].aborted  # type: ignore[attr-defined]


def test_api_key_guards_all_but_health_ready_metrics() -> None:
    state = make_state("--api-key", "k", "--enable-metrics")
    with TestClient(create_app(state)) as client:
        for path in ("/health", "/ready", "/metrics"):
            assert client.get(path).status_code == 200, path
        r = client.get("/server_info")
        assert (r.status_code, r.json()) == (401, {"error": "Unauthorized"})
        assert client.get("/server_info", headers={"Authorization": "Bearer k"}).status_code == 200


def test_server_info_reports_lifetime_accept_length_only_when_folded(spec: tuple[AppState, TestClient]) -> None:
    state, client = spec
    info = client.get("/server_info").json()
    assert info["version"] == "0.5.23" and info["reference_server"] is True
    assert info["speculative_num_draft_tokens"] == 4 and info["launch_command"] == "refserver"
    assert info["internal_states"] == [{"last_gen_throughput": 0.0}]
    state.engine.stats.spec_total_accept_tokens, state.engine.stats.spec_total_forward_ct = 10, 4
    assert client.get("/get_server_info").json()["internal_states"][0]["avg_spec_accept_length"] == 2.5


def test_model_info(spec: tuple[AppState, TestClient]) -> None:
    _, client = spec
    info = client.get("/model_info").json()
    assert info["model_path"] == "m" and info["architectures"] == ["LlamaForCausalLM"]
    assert client.get("/get_model_info").json() == info


def test_flush_cache_refused_while_busy_else_resets(spec: tuple[AppState, TestClient]) -> None:
    state, client = spec
    state.engine.stats.spec_total_forward_ct = 4
    state.engine.pending = True  # type: ignore[attr-defined]
    busy = client.post("/flush_cache")
    assert (busy.status_code, busy.text) == (400, "Cache not flushed because there are pending requests.\n")
    state.engine.pending = False  # type: ignore[attr-defined]
    assert client.get("/flush_cache").text.startswith("Cache flushed.")
    assert state.engine.stats.spec_total_forward_ct == 0


def test_metrics_only_with_enable_metrics() -> None:
    with TestClient(create_app(make_state())) as client:
        assert client.get("/metrics").status_code == 404


def test_generate_final_meta_info_has_spec_fields_and_histogram(spec: tuple[AppState, TestClient]) -> None:
    _, client = spec
    out = client.post("/generate", json={"text": "hi", "sampling_params": {"max_new_tokens": 4}}).json()
    meta = out["meta_info"]
    assert out["output_ids"] == [7, 8, 9, 10] and meta["completion_tokens"] == 4 and meta["prompt_tokens"] == 2
    assert (meta["spec_verify_ct"], meta["spec_num_correct_drafts"], meta["spec_num_proposed_drafts"]) == (1, 2, 3)
    assert meta["spec_accept_length"] == 4.0 and meta["spec_correct_drafts_histogram"] == [0, 0, 1]


def test_generate_batch_and_stream(spec: tuple[AppState, TestClient]) -> None:
    _, client = spec
    batch = client.post("/generate", json={"input_ids": [[1, 2], [3]], "rid": "r"}).json()
    assert [b["meta_info"]["id"] for b in batch] == ["r_0", "r_1"]
    with client.stream("POST", "/generate", json={"text": "hi", "stream": True}) as r:
        raw = r.read().decode()
    events = [json.loads(p[6:]) for p in raw.split("\n\n") if p.startswith("data: {")]
    assert raw.endswith("data: [DONE]\n\n")
    # Both steps were queued before the stream read them: only the latest cumulative output is sent.
    assert [e["meta_info"]["completion_tokens"] for e in events] == [4]
    assert events[0]["output_ids"] == [7, 8, 9, 10] and events[0]["meta_info"]["spec_verify_ct"] == 1


@pytest.mark.parametrize(
    ("body", "message"),
    [
        ({"sampling_params": {}}, "Either text or input_ids should be provided."),
        ({"text": "x", "sampling_params": {"temperature": -1}}, "temperature must be non-negative, got -1.0."),
        ({"input_ids": [999]}, "input_ids out of range [0, 200)."),
        ({"text": "x" * 64}, "The input (64 tokens) is longer than the model's context length (64 tokens)."),
        (
            {"text": "x", "sampling_params": {"max_new_tokens": "many"}},
            "invalid request: invalid literal for int() with base 10: 'many'",
        ),
        (
            {"text": ["a", "b"], "stream": True},
            "Streaming is not supported for batch requests by the reference server.",
        ),
    ],
)
def test_generate_bad_request(spec: tuple[AppState, TestClient], body: dict, message: str) -> None:
    _, client = spec
    r = client.post("/generate", json=body)
    assert r.status_code == 400 and r.json()["error"] == {"message": message, "type": "BadRequestError", "code": 400}


def test_openai_completions_stream_with_spec_details_and_usage(spec: tuple[AppState, TestClient]) -> None:
    _, client = spec
    body = {
        "prompt": "hi",
        "max_tokens": 4,
        "stream": True,
        "stream_options": {"include_usage": True},
        "return_spec_tokens_details": True,
    }
    with client.stream("POST", "/v1/completions", json=body) as r:
        chunks = [json.loads(p[6:]) for p in r.read().decode().split("\n\n") if p.startswith("data: {")]
    assert "".join(c["choices"][0]["text"] for c in chunks if c["choices"]) == "xxxx"
    details = [c["sglext"]["spec_tokens_details"] for c in chunks if "sglext" in c]
    assert details[0]["spec_correct_drafts_histogram"] == [0, 0, 1] and details[0]["spec_num_proposed_drafts"] == 3
    assert chunks[-1]["usage"]["completion_tokens"] == 4


def test_openai_chat_and_models(spec: tuple[AppState, TestClient]) -> None:
    state, client = spec
    chat = client.post(
        "/v1/chat/completions", json={"messages": [{"role": "user", "content": "q"}], "max_tokens": 4}
    ).json()
    assert chat["object"] == "chat.completion" and chat["choices"][0]["message"]["content"] == "xxxx"
    assert state.engine.submitted[-1].prompt_ids == [ord("q"), ord(">")]  # type: ignore[attr-defined]
    assert client.get("/v1/models").json()["data"][0]["owned_by"] == "sglang"
    bad = client.post("/v1/chat/completions", json={"messages": []})
    assert bad.json()["error"]["message"] == "messages must be a non-empty list."


def test_metrics_per_position_counter_as_vllm_counts_it() -> None:
    from pytest_specdec.engines.reference import ReferenceEngine

    state = make_state(*SPEC, "--enable-metrics")
    seq = Sequence(rid="r", prompt_ids=[1], params=SamplingParams(), emit=lambda out: None)
    seq.output_ids, seq.verify_ct, seq.histogram = [1] * 9, 4, [1, 2, 1]  # accepted 0, 1, 1, 2 drafts
    state.metrics.on_finish(seq)
    with TestClient(create_app(state)) as client:
        counters = ReferenceEngine().counters(client.get("/metrics").text)
    # position 0 (draft 1) accepted in 3 of 4 steps, position 1 in 1, position 2 never: vLLM's per_pos semantics.
    assert counters.accepted_per_position == (3.0, 1.0, 0.0)
    assert (counters.verify_calls, counters.generation_tokens) == (4.0, 9.0)


def test_start_and_stop_profile_write_a_chrome_trace(spec: tuple[AppState, TestClient], tmp_path: Path) -> None:
    """SGLang's /start_profile + /stop_profile (ProfileReq body): the reference server writes its spans on stop."""
    state, client = spec
    assert client.post("/stop_profile").status_code == 400  # nothing running
    start = client.post("/start_profile", json={"output_dir": str(tmp_path), "profile_prefix": "eagle3",
                                                "activities": ["CPU", "GPU"], "num_steps": None})  # fmt: skip
    assert (start.status_code, start.text) == (200, "Start profiling.\n")
    assert client.post("/start_profile", json={}).status_code == 400  # already running
    state.engine.trace_events.append({"name": "verify", "ph": "X", "ts": 1.0, "dur": 2.0, "pid": 1, "tid": 1})
    stop = client.post("/stop_profile")
    assert stop.status_code == 200
    (trace,) = tmp_path.glob("eagle3-*.trace.json")
    assert json.loads(trace.read_text())["traceEvents"][0]["name"] == "verify"
    assert state.engine.trace_events is None
