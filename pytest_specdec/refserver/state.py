"""What every reference-server endpoint shares: the app state, request validation, and one request's output stream.

Endpoints (``refserver/routes/*``) receive the :class:`AppState` through the FastAPI dependency :func:`app_state`, so
a test can build an app around a fake engine and call one endpoint alone (``tests/refserver/test_routes.py``).
"""

from __future__ import annotations

import asyncio
import os
import time
import uuid
from collections.abc import AsyncGenerator
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from fastapi import Request
from fastapi.responses import JSONResponse

from pytest_specdec.refserver.args import ServerArgs
from pytest_specdec.refserver.decoding import Models, SamplingParams, Sequence, SpecEngine, StepOutput

if TYPE_CHECKING:
    from pytest_specdec.refserver.metrics_collector import MetricsCollector

__all__ = [
    "AppState",
    "BadRequest",
    "app_state",
    "check_prompt",
    "encode",
    "error_response",
    "sampling_params",
    "spec_proposed",
    "stream_outputs",
    "void",
]


def _health_timeout_s() -> float:
    # SGLang http_server.py reads SGLANG_HEALTH_CHECK_TIMEOUT (default 20 s).
    return float(os.environ.get("SGLANG_HEALTH_CHECK_TIMEOUT", "20"))


@dataclass
class AppState:
    """Everything the endpoints share. ``status`` is SGLang's ServerStatus: "Starting" until warmup, then "Up".

    ``engine`` is a :class:`SpecEngine` (tests pass any object with ``submit``, ``busy`` and ``stats``).
    """

    args: ServerArgs
    models: Models
    engine: SpecEngine
    metrics: MetricsCollector
    launch_command: str
    startup_time: float = field(default_factory=time.time)
    status: str = "Starting"
    #: Seconds ``/health`` waits for its 1-token generate before answering 503.
    health_timeout_s: float = field(default_factory=_health_timeout_s)
    #: (output_dir, file prefix) of the running /start_profile recording; None when none runs.
    trace_target: tuple[str, str] | None = None


def app_state(request: Request) -> AppState:
    """FastAPI dependency: the :class:`AppState` that ``create_app`` stored on ``app.state.ref``."""
    state: AppState = request.app.state.ref
    return state


class BadRequest(Exception):
    """A request the server answers with HTTP 400 and SGLang's error body (:func:`error_response`)."""


def void(_: object) -> None:
    """Discard a value (the Handle of ``call_soon_threadsafe``)."""


def error_response(status: int, message: str) -> JSONResponse:
    """SGLang's error body: ``{"error": {"message", "type", "code"}}`` with ``type`` BadRequestError for 400."""
    return JSONResponse(
        {"error": {"message": message, "type": "BadRequestError" if status == 400 else "Error", "code": status}},
        status_code=status,
    )


def sampling_params(raw: dict, max_tokens_key: str = "max_new_tokens", default_max: int = 128) -> SamplingParams:
    """Build SamplingParams from an SGLang ``sampling_params`` dict or an OpenAI body.

    :raises BadRequest: on a negative/invalid value (SGLang ``sampling_params.py::verify`` texts).
    :raises ValueError, TypeError: a value that is not a number (the caller answers 400 "invalid request").
    """
    max_new = raw.get(max_tokens_key)
    max_new = default_max if max_new is None else int(max_new)
    temperature = float(raw.get("temperature", 1.0) if raw.get("temperature") is not None else 1.0)
    top_p = float(raw.get("top_p", 1.0) if raw.get("top_p") is not None else 1.0)
    if temperature < 0.0:
        raise BadRequest(f"temperature must be non-negative, got {temperature}.")
    if not 0.0 < top_p <= 1.0:
        raise BadRequest(f"top_p must be in (0, 1], got {top_p}.")
    if max_new < 0:
        raise BadRequest(f"max_new_tokens must be at least 0, got {max_new}.")
    stop = raw.get("stop") or ()
    if isinstance(stop, str):
        stop = (stop,)
    return SamplingParams(
        max_new_tokens=max_new,
        temperature=temperature,
        top_p=top_p,
        ignore_eos=bool(raw.get("ignore_eos", False)),
        stop=tuple(stop),
    )


def encode(state: AppState, text: str) -> list[int]:
    """Token ids of ``text`` without special tokens (SGLang tokenizes ``text`` inputs the same way)."""
    return list(state.models.tokenizer.encode(text, add_special_tokens=False))


def check_prompt(state: AppState, prompt_ids: list[int]) -> None:
    """:raises BadRequest: empty input, input at or over the context length, or an id outside the vocabulary."""
    models = state.models
    if not prompt_ids:
        raise BadRequest("The input_ids is empty.")
    if len(prompt_ids) >= models.context_len:
        raise BadRequest(
            f"The input ({len(prompt_ids)} tokens) is longer than the model's context length "
            f"({models.context_len} tokens)."
        )
    if any(not 0 <= t < models.vocab_size for t in prompt_ids):
        raise BadRequest(f"input_ids out of range [0, {models.vocab_size}).")


async def stream_outputs(
    state: AppState, prompt_ids: list[int], params: SamplingParams, log_metrics: bool, rid: str | None = None
) -> AsyncGenerator[StepOutput, None]:
    """Submit one request to the engine; yield its latest cumulative output after each engine step.

    Only the latest queued output is yielded when several are waiting (SGLang ``tokenizer_manager.py`` does the
    same with cumulative outputs). Closing the generator before the request finished aborts it.
    """
    loop = asyncio.get_running_loop()
    queue: asyncio.Queue[StepOutput] = asyncio.Queue()
    seq = Sequence(
        rid=rid or uuid.uuid4().hex,
        prompt_ids=prompt_ids,
        params=params,
        emit=lambda out: void(loop.call_soon_threadsafe(queue.put_nowait, out)),
        log_metrics=log_metrics,
    )
    state.engine.submit(seq)
    try:
        while True:
            out = await queue.get()
            while not queue.empty():
                out = queue.get_nowait()
            yield out
            if out.finished:
                return
    finally:
        if not seq.finished:
            seq.aborted = True


def spec_proposed(state: AppState, out: StepOutput) -> int:
    """Draft tokens proposed for one request: verify steps x (num_draft_tokens - 1), SGLang's
    ``spec_num_proposed_drafts``."""
    return out.spec_verify_ct * ((state.args.speculative_num_draft_tokens or 1) - 1)
