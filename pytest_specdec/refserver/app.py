"""The reference server's HTTP app: SGLang 0.5.23's endpoints and response shapes over :class:`SpecEngine`.

``create_app`` mounts one router per endpoint family (``refserver/routes/``: health, info, generate, openai) and
SGLang's api-key middleware; endpoints read the shared :class:`AppState` through a FastAPI dependency. Shapes follow
``python/sglang/srt/entrypoints/http_server.py`` (health, info, /generate, /flush_cache),
``entrypoints/openai/protocol.py`` (OpenAI endpoints), ``managers/tokenizer_manager.py`` (``meta_info``) and
``observability/metrics_collector.py`` (Prometheus names).
"""

from __future__ import annotations

import logging
import os
import threading
from typing import Any

from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse, Response

from pytest_specdec.refserver.metrics_collector import MetricsCollector
from pytest_specdec.refserver.routes import generate, health, info, openai, profile
from pytest_specdec.refserver.routes.info import SGLANG_VERSION
from pytest_specdec.refserver.state import AppState

__all__ = ["SGLANG_VERSION", "UNAUTHENTICATED_PATHS", "AppState", "MetricsCollector", "create_app", "exit_later"]

logger = logging.getLogger("pytest_specdec.refserver")

#: SGLang ``utils/auth.py``: every endpoint but these needs ``Authorization: Bearer <api key>``.
UNAUTHENTICATED_PATHS = frozenset({"/health", "/health_generate", "/ready", "/metrics"})


def create_app(state: AppState) -> FastAPI:
    """The FastAPI app. ``state.status`` gates health; the caller runs the warmup and flips it to "Up".

    ``/metrics`` is mounted only with ``--enable-metrics`` (404 otherwise, as SGLang).
    """
    app = FastAPI()
    app.state.ref = state
    api_key = state.args.api_key

    @app.middleware("http")
    async def _auth(request: Request, call_next: Any) -> Response:
        if api_key is not None and request.url.path not in UNAUTHENTICATED_PATHS:
            if request.headers.get("authorization", "") != f"Bearer {api_key}":
                return JSONResponse({"error": "Unauthorized"}, status_code=401)
        response: Response = await call_next(request)
        return response

    app.include_router(health.router)
    app.include_router(info.router)
    if state.args.enable_metrics:
        app.include_router(info.metrics_router)
    app.include_router(generate.router)
    app.include_router(openai.router)
    app.include_router(profile.router)
    return app


def exit_later(delay_s: float, message: str) -> None:
    """Log ``message`` and hard-exit with status 1 after ``delay_s`` (lets the last response flush)."""

    def _die() -> None:
        logger.error(message)
        os._exit(1)

    threading.Timer(delay_s, _die).start()
