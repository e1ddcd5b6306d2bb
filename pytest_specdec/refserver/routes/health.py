"""``/health``, ``/health_generate`` and ``/ready`` (SGLang 0.5.23 ``entrypoints/http_server.py``)."""

from __future__ import annotations

import asyncio
import uuid
from typing import Annotated

from fastapi import APIRouter, Depends
from fastapi.responses import Response

from pytest_specdec.refserver.decoding import SamplingParams
from pytest_specdec.refserver.state import AppState, app_state, stream_outputs

__all__ = ["router"]

router = APIRouter()
State = Annotated[AppState, Depends(app_state)]


@router.get("/health")
@router.get("/health_generate")
async def health(state: State) -> Response:
    """503 until warmup ends; then 200 once a 1-token generate (``input_ids=[0]``, not counted in metrics) produced
    output within ``state.health_timeout_s``, else 503."""
    if state.status != "Up":
        return Response(status_code=503)
    params = SamplingParams(max_new_tokens=1, temperature=0.0)
    gen = stream_outputs(state, [0], params, log_metrics=False, rid=f"HEALTH_CHECK_{uuid.uuid4().hex}")
    try:
        await asyncio.wait_for(gen.__anext__(), timeout=state.health_timeout_s)
    except (asyncio.TimeoutError, StopAsyncIteration):
        return Response(status_code=503)
    finally:
        await gen.aclose()
    return Response(status_code=200)


@router.get("/ready")
async def ready(state: State) -> Response:
    """200 when the server is Up, else 503 (no generation)."""
    return Response(status_code=200 if state.status == "Up" else 503)
