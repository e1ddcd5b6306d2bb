"""``/model_info``, ``/server_info`` (+ deprecated aliases), ``/flush_cache`` and ``/metrics``.

Shapes follow SGLang 0.5.23 ``entrypoints/http_server.py``; ``/server_info`` reports ``version`` "0.5.23" (the SGLang
API version mimicked) and ``reference_server: true`` so a harness can tell it from a real SGLang.
"""

from __future__ import annotations

import logging
from typing import Annotated, Any

from fastapi import APIRouter, Depends
from fastapi.responses import PlainTextResponse, Response

from pytest_specdec.refserver.state import AppState, app_state

__all__ = ["SGLANG_VERSION", "metrics_router", "model_info_dict", "router", "server_info_dict"]

logger = logging.getLogger("pytest_specdec.refserver")

SGLANG_VERSION = "0.5.23"

router = APIRouter()
#: Mounted only with ``--enable-metrics`` (SGLang answers 404 on ``/metrics`` otherwise).
metrics_router = APIRouter()
State = Annotated[AppState, Depends(app_state)]


def model_info_dict(state: AppState) -> dict:
    """The ``/model_info`` body."""
    args, models = state.args, state.models
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


def server_info_dict(state: AppState) -> dict:
    """The ``/server_info`` body: resolved args at the top level, ``internal_states`` with the lifetime
    ``avg_spec_accept_length`` (absent while no verify step was folded in, as SGLang) and, reference server only,
    ``draft_ms_per_cycle`` / ``verify_ms_per_cycle`` / ``spec_cycles`` of measured requests since /flush_cache."""
    stats = state.engine.stats
    with stats.lock:
        internal: dict[str, Any] = {"last_gen_throughput": stats.last_gen_throughput}
        avg = stats.avg_spec_accept_length
        cycles, draft_s, verify_s = stats.spec_cycles, stats.spec_draft_s, stats.spec_verify_s
    if avg is not None:
        internal["avg_spec_accept_length"] = avg
    if cycles:
        # Reference server only: where a cycle's time goes, measured requests since the last /flush_cache.
        internal["draft_ms_per_cycle"] = draft_s / cycles * 1000.0
        internal["verify_ms_per_cycle"] = verify_s / cycles * 1000.0
        internal["spec_cycles"] = cycles
    return {
        **state.args.public_dict(),
        "launch_command": state.launch_command,
        "max_total_num_tokens": 65536,
        "context_len": state.models.context_len,
        "startup_time": state.startup_time,
        "internal_states": [internal],
        "version": SGLANG_VERSION,
        "frontend": "python",
        "reference_server": True,
    }


@router.get("/model_info")
async def model_info(state: State) -> dict:
    return model_info_dict(state)


@router.get("/get_model_info")
async def get_model_info(state: State) -> dict:
    logger.warning("Endpoint '/get_model_info' is deprecated and will be removed in a future version. "
                   "Please use '/model_info' instead.")
    return model_info_dict(state)


@router.get("/server_info")
async def server_info(state: State) -> dict:
    return server_info_dict(state)


@router.get("/get_server_info")
async def get_server_info(state: State) -> dict:
    logger.warning("Endpoint '/get_server_info' is deprecated and will be removed in a future version. "
                   "Please use '/server_info' instead.")
    return server_info_dict(state)


@router.api_route("/flush_cache", methods=["GET", "POST"])
async def flush_cache(state: State) -> Response:
    """Reset the lifetime spec totals (SGLang ``reset_metrics``); 400 while a measured request is pending."""
    engine = state.engine
    if engine.busy():
        logger.warning("Cache not flushed because there are pending requests.")
        return PlainTextResponse("Cache not flushed because there are pending requests.\n", status_code=400)
    engine.stats.reset()
    logger.info("Cache flushed successfully!")
    return PlainTextResponse("Cache flushed.\nPlease check backend logs for more details. (When there are "
                             "running or waiting requests, the operation will not be performed.)\n")


@metrics_router.get("/metrics")
async def metrics(state: State) -> Response:
    """Prometheus text format 0.0.4 (``MetricsCollector.render``)."""
    return Response(state.metrics.render(state.engine.stats), media_type="text/plain; version=0.0.4; charset=utf-8")
