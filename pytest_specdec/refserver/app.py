"""The reference server's HTTP API: SGLang 0.5.23's endpoints and response shapes over :class:`SpecEngine`.

Shapes follow ``python/sglang/srt/entrypoints/http_server.py`` (health, info, /generate, /flush_cache),
``entrypoints/openai/protocol.py`` (OpenAI endpoints), ``managers/tokenizer_manager.py`` (``meta_info``) and
``observability/metrics_collector.py`` (Prometheus names). ``/server_info`` reports ``version`` "0.5.23" (the SGLang
API version it mimics) and ``reference_server: true`` so a harness can tell it from a real SGLang.
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
import threading
import time
import uuid
from collections.abc import AsyncGenerator, AsyncIterator
from dataclasses import dataclass, field
from typing import Any

from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse, PlainTextResponse, Response, StreamingResponse

from pytest_specdec.refserver.args import ServerArgs
from pytest_specdec.refserver.decoding import (
    EngineListener,
    EngineStats,
    Models,
    SamplingParams,
    Sequence,
    SpecEngine,
    StepOutput,
)

__all__ = ["SGLANG_VERSION", "AppState", "MetricsCollector", "create_app"]

logger = logging.getLogger("pytest_specdec.refserver")

SGLANG_VERSION = "0.5.23"
UNAUTHENTICATED_PATHS = frozenset({"/health", "/health_generate", "/ready", "/metrics"})


class MetricsCollector(EngineListener):
    """Prometheus metrics in a private registry, SGLang names and labels (model_name, engine_type="unified")."""

    def __init__(self, args: ServerArgs, enabled: bool, on_measured_finish: Any = None) -> None:
        self.enabled = enabled
        self.on_measured_finish = on_measured_finish
        if not enabled:
            return
        from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, disable_created_metrics

        disable_created_metrics()
        self.registry = CollectorRegistry(auto_describe=True)
        labels = {"model_name": args.served_model_name, "engine_type": "unified"}
        names = list(labels)
        r = self.registry

        def counter(name: str, doc: str) -> Any:
            return Counter(name, doc, names, registry=r).labels(**labels)

        def gauge(name: str, doc: str) -> Any:
            return Gauge(name, doc, names, registry=r, multiprocess_mode="mostrecent").labels(**labels)

        self.prompt_tokens = counter("sglang:prompt_tokens_total", "Number of prefill tokens processed.")
        self.generation_tokens = counter("sglang:generation_tokens_total", "Number of generation tokens processed.")
        self.verify_calls = counter("sglang:spec_verify_calls_total", "Number of speculative verification calls.")
        self.num_requests = counter("sglang:num_requests_total", "Number of requests processed.")
        self.ttft = Histogram(
            "sglang:time_to_first_token_seconds", "Histogram of time to first token in seconds.", names, registry=r,
            buckets=[0.1, 0.2, 0.4, 0.6, 0.8, 1, 2, 4, 6, 8, 10, 20, 40, 60, 80, 100, 200, 400],
        ).labels(**labels)
        self.accept_length = gauge("sglang:spec_accept_length",
                                   "The average acceptance length of speculative decoding.")
        self.accept_rate = gauge("sglang:spec_accept_rate", "The average acceptance rate of speculative decoding.")
        self.gen_throughput = gauge("sglang:gen_throughput", "The generation throughput (token/s).")
        self.num_running = gauge("sglang:num_running_reqs", "The number of running requests.")
        self.num_queue = gauge("sglang:num_queue_reqs", "The number of requests in the waiting queue.")
        self.is_cuda_graph = gauge("sglang:is_cuda_graph", "Whether batch is using cuda graph.")
        self.is_cuda_graph.set(0)

    def on_first_token(self, seq: Sequence) -> None:
        if self.enabled and seq.first_token_time is not None:
            self.ttft.observe(seq.first_token_time - seq.created)

    def on_finish(self, seq: Sequence) -> None:
        if self.enabled:
            self.prompt_tokens.inc(len(seq.prompt_ids))
            self.generation_tokens.inc(len(seq.output_ids))
            self.verify_calls.inc(seq.verify_ct)
            self.num_requests.inc()
        if self.on_measured_finish is not None:
            self.on_measured_finish()

    def on_log_window(self, stats: EngineStats) -> None:
        if self.enabled:
            with stats.lock:
                self.accept_length.set(stats.last_accept_length)
                self.accept_rate.set(stats.last_accept_rate)
                self.gen_throughput.set(stats.last_gen_throughput)
                self.num_running.set(stats.num_running)
                self.num_queue.set(stats.num_queue)

    def render(self, stats: EngineStats) -> bytes:
        from prometheus_client import generate_latest

        with stats.lock:
            self.num_running.set(stats.num_running)
            self.num_queue.set(stats.num_queue)
        return generate_latest(self.registry)


@dataclass
class AppState:
    """Everything the endpoints share. ``status`` is SGLang's ServerStatus: "Starting" until warmup, then "Up"."""

    args: ServerArgs
    models: Models
    engine: SpecEngine
    metrics: MetricsCollector
    launch_command: str
    startup_time: float = field(default_factory=time.time)
    status: str = "Starting"


class _BadRequest(Exception):
    pass


def void(_: object) -> None:
    """Discard a value (the Handle of ``call_soon_threadsafe``)."""


def _error(status: int, message: str) -> JSONResponse:
    return JSONResponse({"error": {"message": message, "type": "BadRequestError" if status == 400 else "Error",
                                   "code": status}}, status_code=status)


def _sampling(raw: dict, max_tokens_key: str = "max_new_tokens", default_max: int = 128) -> SamplingParams:
    """Build SamplingParams from an SGLang ``sampling_params`` dict or an OpenAI body.

    :raises _BadRequest: on a negative/invalid value (SGLang ``sampling_params.py::verify`` texts).
    """
    max_new = raw.get(max_tokens_key)
    max_new = default_max if max_new is None else int(max_new)
    temperature = float(raw.get("temperature", 1.0) if raw.get("temperature") is not None else 1.0)
    top_p = float(raw.get("top_p", 1.0) if raw.get("top_p") is not None else 1.0)
    if temperature < 0.0:
        raise _BadRequest(f"temperature must be non-negative, got {temperature}.")
    if not 0.0 < top_p <= 1.0:
        raise _BadRequest(f"top_p must be in (0, 1], got {top_p}.")
    if max_new < 0:
        raise _BadRequest(f"max_new_tokens must be at least 0, got {max_new}.")
    stop = raw.get("stop") or ()
    if isinstance(stop, str):
        stop = (stop,)
    return SamplingParams(max_new_tokens=max_new, temperature=temperature, top_p=top_p,
                          ignore_eos=bool(raw.get("ignore_eos", False)), stop=tuple(stop))


def create_app(state: AppState) -> FastAPI:
    """The FastAPI app. ``state.status`` gates health; the caller runs the warmup and flips it to "Up"."""
    app = FastAPI()
    args, models, engine = state.args, state.models, state.engine
    tokenizer = models.tokenizer
    health_timeout_s = float(os.environ.get("SGLANG_HEALTH_CHECK_TIMEOUT", "20"))

    @app.middleware("http")
    async def _auth(request: Request, call_next: Any) -> Response:
        # SGLang utils/auth.py: every endpoint but /health*, /ready, /metrics needs the Bearer key.
        if args.api_key is not None and request.url.path not in UNAUTHENTICATED_PATHS:
            if request.headers.get("authorization", "") != f"Bearer {args.api_key}":
                return JSONResponse({"error": "Unauthorized"}, status_code=401)
        return await call_next(request)

    async def run(prompt_ids: list[int], params: SamplingParams, log_metrics: bool,
                  rid: str | None = None) -> AsyncGenerator[StepOutput, None]:
        """Submit one request; yield its latest cumulative output after each engine step."""
        loop = asyncio.get_running_loop()
        queue: asyncio.Queue[StepOutput] = asyncio.Queue()
        seq = Sequence(rid=rid or uuid.uuid4().hex, prompt_ids=prompt_ids, params=params,
                       emit=lambda out: void(loop.call_soon_threadsafe(queue.put_nowait, out)),
                       log_metrics=log_metrics)
        engine.submit(seq)
        try:
            while True:
                out = await queue.get()
                while not queue.empty():  # only the latest cumulative output is sent (tokenizer_manager.py)
                    out = queue.get_nowait()
                yield out
                if out.finished:
                    return
        finally:
            if not seq.finished:
                seq.aborted = True

    def meta_info(rid: str, out: StepOutput, created: float) -> dict:
        """SGLang tokenizer_manager.py meta_info; spec fields on the final chunk when spec_verify_ct > 0."""
        meta: dict[str, Any] = {
            "id": rid,
            "finish_reason": out.finish_reason,
            "prompt_tokens": out.prompt_tokens,
            "weight_version": "default",
            "num_retractions": 0,
            "completion_tokens": len(out.output_ids),
            "cached_tokens": 0,
            "reasoning_tokens": 0,
        }
        if out.finished:
            meta["e2e_latency"] = time.perf_counter() - created
            if args.speculative and out.spec_verify_ct > 0:
                proposed = out.spec_verify_ct * ((args.speculative_num_draft_tokens or 1) - 1)
                meta["spec_accept_rate"] = out.spec_num_correct_drafts / proposed
                meta["spec_accept_length"] = len(out.output_ids) / out.spec_verify_ct
                meta["spec_num_correct_drafts"] = out.spec_num_correct_drafts
                meta["spec_num_proposed_drafts"] = proposed
                meta["spec_verify_ct"] = out.spec_verify_ct
                meta["spec_correct_drafts_histogram"] = list(out.spec_correct_drafts_histogram)
        return meta

    def encode(text: str) -> list[int]:
        return list(tokenizer.encode(text, add_special_tokens=False))

    def check_len(prompt_ids: list[int], params: SamplingParams) -> None:
        if not prompt_ids:
            raise _BadRequest("The input_ids is empty.")
        if len(prompt_ids) >= models.context_len:
            raise _BadRequest(f"The input ({len(prompt_ids)} tokens) is longer than the model's context length "
                              f"({models.context_len} tokens).")
        if any(not 0 <= t < models.vocab_size for t in prompt_ids):
            raise _BadRequest(f"input_ids out of range [0, {models.vocab_size}).")

    # ---- health and info -------------------------------------------------------------------------------------
    @app.get("/health")
    @app.get("/health_generate")
    async def health() -> Response:
        if state.status != "Up":
            return Response(status_code=503)
        params = SamplingParams(max_new_tokens=1, temperature=0.0)
        gen = run([0], params, log_metrics=False, rid=f"HEALTH_CHECK_{uuid.uuid4().hex}")
        try:
            await asyncio.wait_for(gen.__anext__(), timeout=health_timeout_s)
        except (asyncio.TimeoutError, StopAsyncIteration):
            return Response(status_code=503)
        finally:
            await gen.aclose()
        return Response(status_code=200)

    @app.get("/ready")
    async def ready() -> Response:
        return Response(status_code=200 if state.status == "Up" else 503)

    def model_info_dict() -> dict:
        return {
            "model_path": args.model_path,
            "served_model_name": args.served_model_name,
            "tokenizer_path": args.tokenizer_path,
            "is_generation": True,
            "preferred_sampling_params": None,
            "weight_version": "default",
            "load_format": "auto",
            "reasoning_parser": None,
            "tool_call_parser": None,
            "disaggregation_mode": "null",
            "has_image_understanding": False,
            "has_audio_understanding": False,
            "model_type": models.model_type,
            "architectures": models.architectures,
        }

    @app.get("/model_info")
    async def model_info() -> dict:
        return model_info_dict()

    @app.get("/get_model_info")
    async def get_model_info() -> dict:
        logger.warning("Endpoint '/get_model_info' is deprecated and will be removed in a future version. "
                       "Please use '/model_info' instead.")
        return model_info_dict()

    def server_info_dict() -> dict:
        stats = engine.stats
        with stats.lock:
            internal: dict[str, Any] = {"last_gen_throughput": stats.last_gen_throughput}
            avg = stats.avg_spec_accept_length
        if avg is not None:
            internal["avg_spec_accept_length"] = avg
        return {
            **args.public_dict(),
            "launch_command": state.launch_command,
            "max_total_num_tokens": 65536,
            "context_len": models.context_len,
            "startup_time": state.startup_time,
            "internal_states": [internal],
            "version": SGLANG_VERSION,
            "frontend": "python",
            "reference_server": True,
        }

    @app.get("/server_info")
    async def server_info() -> dict:
        return server_info_dict()

    @app.get("/get_server_info")
    async def get_server_info() -> dict:
        logger.warning("Endpoint '/get_server_info' is deprecated and will be removed in a future version. "
                       "Please use '/server_info' instead.")
        return server_info_dict()

    @app.api_route("/flush_cache", methods=["GET", "POST"])
    async def flush_cache() -> Response:
        if engine.busy():
            logger.warning("Cache not flushed because there are pending requests.")
            return PlainTextResponse("Cache not flushed because there are pending requests.\n", status_code=400)
        engine.stats.reset()
        logger.info("Cache flushed successfully!")
        return PlainTextResponse("Cache flushed.\nPlease check backend logs for more details. (When there are "
                                 "running or waiting requests, the operation will not be performed.)\n")

    if args.enable_metrics:
        @app.get("/metrics")
        async def metrics() -> Response:
            return Response(state.metrics.render(engine.stats), media_type="text/plain; version=0.0.4; charset=utf-8")

    # ---- /generate -------------------------------------------------------------------------------------------
    @app.post("/generate")
    async def generate(request: Request) -> Response:
        try:
            body = await request.json()
            params = _sampling(body.get("sampling_params") or {})
            log_metrics = bool(body.get("log_metrics", True))
            if body.get("text") is not None:
                texts = body["text"]
                prompts = [encode(t) for t in texts] if isinstance(texts, list) else [encode(texts)]
                batch = isinstance(texts, list)
            elif body.get("input_ids") is not None:
                ids = body["input_ids"]
                batch = bool(ids) and isinstance(ids[0], list)
                prompts = [list(map(int, x)) for x in ids] if batch else [list(map(int, ids))]
            else:
                raise _BadRequest("Either text or input_ids should be provided.")
            for p in prompts:
                check_len(p, params)
        except _BadRequest as exc:
            return _error(400, str(exc))
        except (ValueError, TypeError, AttributeError) as exc:
            return _error(400, f"invalid request: {exc}")
        rid = body.get("rid") or uuid.uuid4().hex
        created = time.perf_counter()

        if body.get("stream"):
            if batch:
                return _error(400, "Streaming is not supported for batch requests by the reference server.")

            async def events() -> AsyncIterator[bytes]:
                async for out in run(prompts[0], params, log_metrics, rid):
                    chunk = {"text": out.text, "output_ids": list(out.output_ids),
                             "meta_info": meta_info(rid, out, created)}
                    yield b"data: " + json.dumps(chunk).encode() + b"\n\n"
                yield b"data: [DONE]\n\n"

            return StreamingResponse(events(), media_type="text/event-stream")

        async def one(prompt: list[int], r: str) -> dict:
            last = None
            async for out in run(prompt, params, log_metrics, r):
                last = out
            assert last is not None
            return {"text": last.text, "output_ids": list(last.output_ids), "meta_info": meta_info(r, last, created)}

        if batch:
            results = await asyncio.gather(*(one(p, f"{rid}_{i}") for i, p in enumerate(prompts)))
            return JSONResponse(list(results))
        return JSONResponse(await one(prompts[0], rid))

    # ---- OpenAI ----------------------------------------------------------------------------------------------
    @app.get("/v1/models")
    async def v1_models() -> dict:
        return {"object": "list", "data": [{
            "id": args.served_model_name, "object": "model", "created": int(state.startup_time),
            "owned_by": "sglang", "root": args.served_model_name, "parent": None,
            "max_model_len": models.context_len,
        }]}

    def spec_details(out: StepOutput) -> dict:
        proposed = out.spec_verify_ct * ((args.speculative_num_draft_tokens or 1) - 1)
        return {
            "spec_accept_rate": out.spec_num_correct_drafts / proposed if proposed else 0.0,
            "spec_accept_length": len(out.output_ids) / out.spec_verify_ct if out.spec_verify_ct else 0.0,
            "spec_cap_length": 0.0,
            "spec_block_accept_length": 0.0,
            "spec_num_correct_drafts": out.spec_num_correct_drafts,
            "spec_num_proposed_drafts": proposed,
            "spec_verify_ct": out.spec_verify_ct,
            "spec_correct_drafts_histogram": list(out.spec_correct_drafts_histogram),
            "spec_cap_lens_histogram": [],
        }

    def usage(out: StepOutput) -> dict:
        c = len(out.output_ids)
        return {"prompt_tokens": out.prompt_tokens, "total_tokens": out.prompt_tokens + c, "completion_tokens": c,
                "prompt_tokens_details": None, "reasoning_tokens": 0, "completion_tokens_details": None}

    async def openai(request: Request, chat: bool) -> Response:
        try:
            body = await request.json()
            if chat:
                messages = body.get("messages")
                if not isinstance(messages, list) or not messages:
                    raise _BadRequest("messages must be a non-empty list.")
                prompt_text = tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=True)
                prompt_ids = encode(prompt_text)
            else:
                prompt = body.get("prompt")
                if isinstance(prompt, list) and prompt and isinstance(prompt[0], int):
                    prompt_ids = [int(t) for t in prompt]
                elif isinstance(prompt, list) and len(prompt) == 1:
                    prompt_ids = encode(prompt[0])
                elif isinstance(prompt, str):
                    prompt_ids = encode(prompt)
                else:
                    raise _BadRequest("prompt must be a string, a one-element list, or a list of token ids.")
            key = "max_completion_tokens" if chat and body.get("max_completion_tokens") is not None else "max_tokens"
            params = _sampling(body, key, default_max=128 if not chat else models.context_len)
            check_len(prompt_ids, params)
        except _BadRequest as exc:
            return _error(400, str(exc))
        except (ValueError, TypeError, AttributeError) as exc:
            return _error(400, f"invalid request: {exc}")
        rid = ("chatcmpl-" if chat else "cmpl-") + uuid.uuid4().hex
        model = body.get("model") or args.served_model_name
        created = int(time.time())
        want_spec = bool(body.get("return_spec_tokens_details")) and args.speculative
        obj = "chat.completion" if chat else "text_completion"

        def finish(out: StepOutput) -> tuple[str | None, Any]:
            fr = out.finish_reason
            return (fr["type"], fr.get("matched")) if fr else (None, None)

        if body.get("stream"):
            include_usage = bool((body.get("stream_options") or {}).get("include_usage"))

            async def events() -> AsyncIterator[bytes]:
                sent = ""
                last: StepOutput | None = None
                first = True
                async for out in run(prompt_ids, params, True, rid):
                    last = out
                    delta_text = out.text[len(sent):] if out.text.startswith(sent) else out.text
                    sent = out.text
                    reason, matched = finish(out)
                    if chat:
                        delta: dict[str, Any] = {"role": "assistant"} if first else {}
                        delta.update({"content": delta_text, "reasoning_content": None})
                        choice = {"index": 0, "delta": delta, "logprobs": None, "finish_reason": reason,
                                  "matched_stop": matched}
                    else:
                        choice = {"index": 0, "text": delta_text, "logprobs": None, "finish_reason": reason,
                                  "matched_stop": matched}
                    first = False
                    chunk = {"id": rid, "object": obj + (".chunk" if chat else ""), "created": created,
                             "model": model, "choices": [choice], "usage": None}
                    yield b"data: " + json.dumps(chunk).encode() + b"\n\n"
                assert last is not None
                if want_spec:
                    chunk = {"id": rid, "object": obj + (".chunk" if chat else ""), "created": created,
                             "model": model, "choices": [], "usage": None,
                             "sglext": {"spec_tokens_details": spec_details(last)}}
                    yield b"data: " + json.dumps(chunk).encode() + b"\n\n"
                if include_usage:
                    chunk = {"id": rid, "object": obj + (".chunk" if chat else ""), "created": created,
                             "model": model, "choices": [], "usage": usage(last)}
                    yield b"data: " + json.dumps(chunk).encode() + b"\n\n"
                yield b"data: [DONE]\n\n"

            return StreamingResponse(events(), media_type="text/event-stream")

        last: StepOutput | None = None
        async for out in run(prompt_ids, params, True, rid):
            last = out
        assert last is not None
        reason, matched = finish(last)
        if chat:
            choice = {"index": 0, "message": {"role": "assistant", "content": last.text, "reasoning_content": None},
                      "logprobs": None, "finish_reason": reason, "matched_stop": matched}
        else:
            choice = {"index": 0, "text": last.text, "logprobs": None, "finish_reason": reason,
                      "matched_stop": matched}
        resp: dict[str, Any] = {"id": rid, "object": obj, "created": created, "model": model, "choices": [choice],
                                "usage": usage(last), "metadata": None}
        if want_spec:
            resp["sglext"] = {"spec_tokens_details": spec_details(last)}
        return JSONResponse(resp)

    @app.post("/v1/completions")
    async def v1_completions(request: Request) -> Response:
        return await openai(request, chat=False)

    @app.post("/v1/chat/completions")
    async def v1_chat_completions(request: Request) -> Response:
        return await openai(request, chat=True)

    return app


def exit_later(delay_s: float, message: str) -> None:
    """Log ``message`` and hard-exit with status 1 after ``delay_s`` (lets the last response flush)."""

    def _die() -> None:
        logger.error(message)
        os._exit(1)

    threading.Timer(delay_s, _die).start()
