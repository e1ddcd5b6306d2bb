"""``POST /generate``: SGLang's native API (text or input_ids, single or batch, SSE streaming with cumulative output).

Shapes follow SGLang 0.5.23 ``entrypoints/http_server.py`` and ``managers/tokenizer_manager.py`` (``meta_info``).
"""

from __future__ import annotations

import asyncio
import json
import time
import uuid
from collections.abc import AsyncIterator
from typing import Annotated, Any

from fastapi import APIRouter, Depends, Request
from fastapi.responses import JSONResponse, Response, StreamingResponse

from pytest_specdec.refserver.decoding import SamplingParams, StepOutput
from pytest_specdec.refserver.state import (
    AppState,
    BadRequest,
    app_state,
    check_prompt,
    encode,
    error_response,
    sampling_params,
    spec_proposed,
    stream_outputs,
)

__all__ = ["meta_info", "parse_generate", "router"]

router = APIRouter()
State = Annotated[AppState, Depends(app_state)]


def meta_info(state: AppState, rid: str, out: StepOutput, created: float) -> dict:
    """SGLang ``tokenizer_manager.py`` ``meta_info``; the spec fields and ``e2e_latency`` only on the final chunk,
    and the spec fields only when ``spec_verify_ct > 0``."""
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
        if state.args.speculative and out.spec_verify_ct > 0:
            proposed = spec_proposed(state, out)
            meta["spec_accept_rate"] = out.spec_num_correct_drafts / proposed
            meta["spec_accept_length"] = len(out.output_ids) / out.spec_verify_ct
            meta["spec_num_correct_drafts"] = out.spec_num_correct_drafts
            meta["spec_num_proposed_drafts"] = proposed
            meta["spec_verify_ct"] = out.spec_verify_ct
            meta["spec_correct_drafts_histogram"] = list(out.spec_correct_drafts_histogram)
    return meta


def parse_generate(state: AppState, body: dict) -> tuple[list[list[int]], bool, SamplingParams]:
    """Prompts (token ids), whether the body was a batch, and the sampling parameters of a ``/generate`` body.

    :raises BadRequest: neither ``text`` nor ``input_ids``, or a prompt ``check_prompt`` rejects.
    :raises ValueError, TypeError, AttributeError: a malformed body (answered 400 "invalid request").
    """
    params = sampling_params(body.get("sampling_params") or {})
    if body.get("text") is not None:
        texts = body["text"]
        batch = isinstance(texts, list)
        prompts = [encode(state, t) for t in texts] if batch else [encode(state, texts)]
    elif body.get("input_ids") is not None:
        ids = body["input_ids"]
        batch = bool(ids) and isinstance(ids[0], list)
        prompts = [list(map(int, x)) for x in ids] if batch else [list(map(int, ids))]
    else:
        raise BadRequest("Either text or input_ids should be provided.")
    for p in prompts:
        check_prompt(state, p)
    return prompts, batch, params


@router.post("/generate")
async def generate(request: Request, state: State) -> Response:
    try:
        body = await request.json()
        prompts, batch, params = parse_generate(state, body)
        log_metrics = bool(body.get("log_metrics", True))
    except BadRequest as exc:
        return error_response(400, str(exc))
    except (ValueError, TypeError, AttributeError) as exc:
        return error_response(400, f"invalid request: {exc}")
    rid = body.get("rid") or uuid.uuid4().hex
    created = time.perf_counter()

    if body.get("stream"):
        if batch:
            return error_response(400, "Streaming is not supported for batch requests by the reference server.")

        async def events() -> AsyncIterator[bytes]:
            async for out in stream_outputs(state, prompts[0], params, log_metrics, rid):
                chunk = {"text": out.text, "output_ids": list(out.output_ids),
                         "meta_info": meta_info(state, rid, out, created)}
                yield b"data: " + json.dumps(chunk).encode() + b"\n\n"
            yield b"data: [DONE]\n\n"

        return StreamingResponse(events(), media_type="text/event-stream")

    async def one(prompt: list[int], r: str) -> dict:
        last = None
        async for out in stream_outputs(state, prompt, params, log_metrics, r):
            last = out
        assert last is not None
        return {"text": last.text, "output_ids": list(last.output_ids), "meta_info": meta_info(state, r, last, created)}

    if batch:
        results = await asyncio.gather(*(one(p, f"{rid}_{i}") for i, p in enumerate(prompts)))
        return JSONResponse(list(results))
    return JSONResponse(await one(prompts[0], rid))
