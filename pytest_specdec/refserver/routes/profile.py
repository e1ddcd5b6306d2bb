"""``/start_profile`` and ``/stop_profile`` (SGLang 0.5.17/0.5.23 ``entrypoints/http_server.py``; body
``managers/io_struct.py::ProfileReq``): the reference server records each speculative cycle's draft and verify as
Chrome trace spans and writes them on stop, where SGLang writes its PyTorch profiler trace."""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Annotated, Any

from fastapi import APIRouter, Body, Depends
from fastapi.responses import Response

from pytest_specdec.refserver.state import AppState, app_state

__all__ = ["router"]

router = APIRouter()
State = Annotated[AppState, Depends(app_state)]
#: Where a trace goes when the request names no ``output_dir`` (SGLang: ``SGLANG_TORCH_PROFILER_DIR``, else /tmp).
_DEFAULT_DIR = "/tmp"


@router.api_route("/start_profile", methods=["GET", "POST"])
async def start_profile(state: State, obj: Annotated[dict[str, Any] | None, Body()] = None) -> Response:
    """Start recording; ``output_dir`` and ``profile_prefix`` of the body are used, the other ProfileReq fields
    (``num_steps``, ``activities``, ...) are accepted and ignored. 400 when a recording is already running."""
    req = obj or {}
    if state.engine.trace_events is not None:
        return Response("Profiling is already in progress. Call /stop_profile first.\n", status_code=400)
    state.trace_target = (str(req.get("output_dir") or _DEFAULT_DIR), str(req.get("profile_prefix") or "refserver"))
    state.engine.trace_events = []
    return Response("Start profiling.\n", status_code=200)


@router.api_route("/stop_profile", methods=["GET", "POST"])
async def stop_profile(state: State) -> Response:
    """Write ``<output_dir>/<prefix>-<unix time>.trace.json`` (``{"traceEvents": [...]}``, open in Perfetto or
    chrome://tracing) and stop recording. 400 when no recording is running."""
    events = state.engine.trace_events
    if events is None or state.trace_target is None:
        return Response("Profiling is not in progress. Call /start_profile first.\n", status_code=400)
    state.engine.trace_events = None
    out_dir, prefix = state.trace_target
    state.trace_target = None
    path = Path(out_dir) / f"{prefix}-{int(time.time())}.trace.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps({"traceEvents": list(events), "displayTimeUnit": "ms"}))
    return Response("Stop profiling. This will take some time.\n", status_code=200)
