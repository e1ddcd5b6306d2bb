"""OpenAI-compatible ``/v1/models``, ``/v1/completions`` and ``/v1/chat/completions``.

Shapes follow SGLang 0.5.23 ``entrypoints/openai/protocol.py``, ``serving_completions.py`` and ``serving_chat.py``;
spec stats only with ``return_spec_tokens_details`` (``sglext.spec_tokens_details``; streaming: an extra chunk with
``choices: []``).
"""

from __future__ import annotations

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

__all__ = ["parse_openai", "router", "spec_details", "usage"]

router = APIRouter()
State = Annotated[AppState, Depends(app_state)]


def spec_details(state: AppState, out: StepOutput) -> dict:
    """``SpecTokensDetails`` of one finished request (zeros where a ratio has no denominator)."""
    proposed = spec_proposed(state, out)
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
    """The OpenAI ``usage`` object (no spec fields, as SGLang)."""
    c = len(out.output_ids)
    return {"prompt_tokens": out.prompt_tokens, "total_tokens": out.prompt_tokens + c, "completion_tokens": c,
            "prompt_tokens_details": None, "reasoning_tokens": 0, "completion_tokens_details": None}


def parse_openai(state: AppState, body: dict, chat: bool) -> tuple[list[int], SamplingParams]:
    """Prompt token ids and sampling parameters of a completions (``chat`` False) or chat body.

    :raises BadRequest: no usable ``messages``/``prompt``, or a prompt ``check_prompt`` rejects.
    :raises ValueError, TypeError, AttributeError: a malformed body (answered 400 "invalid request").
    """
    if chat:
        messages = body.get("messages")
        if not isinstance(messages, list) or not messages:
            raise BadRequest("messages must be a non-empty list.")
        prompt_text = state.models.tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=True)
        prompt_ids = encode(state, prompt_text)
    else:
        prompt = body.get("prompt")
        if isinstance(prompt, list) and prompt and isinstance(prompt[0], int):
            prompt_ids = [int(t) for t in prompt]
        elif isinstance(prompt, list) and len(prompt) == 1:
            prompt_ids = encode(state, prompt[0])
        elif isinstance(prompt, str):
            prompt_ids = encode(state, prompt)
        else:
            raise BadRequest("prompt must be a string, a one-element list, or a list of token ids.")
    key = "max_completion_tokens" if chat and body.get("max_completion_tokens") is not None else "max_tokens"
    params = sampling_params(body, key, default_max=128 if not chat else state.models.context_len)
    check_prompt(state, prompt_ids)
    return prompt_ids, params


def _finish(out: StepOutput) -> tuple[str | None, Any]:
    fr = out.finish_reason
    return (fr["type"], fr.get("matched")) if fr else (None, None)


@router.get("/v1/models")
async def v1_models(state: State) -> dict:
    args = state.args
    return {"object": "list", "data": [{
        "id": args.served_model_name, "object": "model", "created": int(state.startup_time),
        "owned_by": "sglang", "root": args.served_model_name, "parent": None,
        "max_model_len": state.models.context_len,
    }]}


async def _openai(request: Request, state: AppState, chat: bool) -> Response:
    try:
        body = await request.json()
        prompt_ids, params = parse_openai(state, body, chat)
    except BadRequest as exc:
        return error_response(400, str(exc))
    except (ValueError, TypeError, AttributeError) as exc:
        return error_response(400, f"invalid request: {exc}")
    rid = ("chatcmpl-" if chat else "cmpl-") + uuid.uuid4().hex
    model = body.get("model") or state.args.served_model_name
    created = int(time.time())
    want_spec = bool(body.get("return_spec_tokens_details")) and state.args.speculative
    obj = "chat.completion" if chat else "text_completion"

    if body.get("stream"):
        include_usage = bool((body.get("stream_options") or {}).get("include_usage"))
        chunk_obj = obj + (".chunk" if chat else "")

        async def events() -> AsyncIterator[bytes]:
            sent = ""
            last: StepOutput | None = None
            first = True
            async for out in stream_outputs(state, prompt_ids, params, True, rid):
                last = out
                delta_text = out.text[len(sent):] if out.text.startswith(sent) else out.text
                sent = out.text
                reason, matched = _finish(out)
                if chat:
                    delta: dict[str, Any] = {"role": "assistant"} if first else {}
                    delta.update({"content": delta_text, "reasoning_content": None})
                    choice = {"index": 0, "delta": delta, "logprobs": None, "finish_reason": reason,
                              "matched_stop": matched}
                else:
                    choice = {"index": 0, "text": delta_text, "logprobs": None, "finish_reason": reason,
                              "matched_stop": matched}
                first = False
                chunk = {"id": rid, "object": chunk_obj, "created": created, "model": model, "choices": [choice],
                         "usage": None}
                yield b"data: " + json.dumps(chunk).encode() + b"\n\n"
            assert last is not None
            if want_spec:
                chunk = {"id": rid, "object": chunk_obj, "created": created, "model": model, "choices": [],
                         "usage": None, "sglext": {"spec_tokens_details": spec_details(state, last)}}
                yield b"data: " + json.dumps(chunk).encode() + b"\n\n"
            if include_usage:
                chunk = {"id": rid, "object": chunk_obj, "created": created, "model": model, "choices": [],
                         "usage": usage(last)}
                yield b"data: " + json.dumps(chunk).encode() + b"\n\n"
            yield b"data: [DONE]\n\n"

        return StreamingResponse(events(), media_type="text/event-stream")

    last: StepOutput | None = None
    async for out in stream_outputs(state, prompt_ids, params, True, rid):
        last = out
    assert last is not None
    reason, matched = _finish(last)
    if chat:
        choice = {"index": 0, "message": {"role": "assistant", "content": last.text, "reasoning_content": None},
                  "logprobs": None, "finish_reason": reason, "matched_stop": matched}
    else:
        choice = {"index": 0, "text": last.text, "logprobs": None, "finish_reason": reason, "matched_stop": matched}
    resp: dict[str, Any] = {"id": rid, "object": obj, "created": created, "model": model, "choices": [choice],
                            "usage": usage(last), "metadata": None}
    if want_spec:
        resp["sglext"] = {"spec_tokens_details": spec_details(state, last)}
    return JSONResponse(resp)


@router.post("/v1/completions")
async def v1_completions(request: Request, state: State) -> Response:
    return await _openai(request, state, chat=False)


@router.post("/v1/chat/completions")
async def v1_chat_completions(request: Request, state: State) -> Response:
    return await _openai(request, state, chat=True)
