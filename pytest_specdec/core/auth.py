"""What every HTTP client of the plugin authenticates and verifies with: the ``Authorization`` header and the TLS
context, for every layer (client, runner, engines, the reference server's warmup).

Standard library only at import (httpx is imported when :func:`tls_context` is first called), so anything may import
it without pulling in the engines, httpx or pydantic.
"""

from __future__ import annotations

import functools
import ssl

__all__ = ["bearer_headers", "tls_context"]


def bearer_headers(api_key: str | None) -> dict[str, str]:
    """``{"Authorization": "Bearer <api_key>"}``, or ``{}`` when ``api_key`` is None or empty.

    The scheme SGLang checks (``python/sglang/srt/utils/auth.py``), as vLLM's OpenAI server and the reference server
    (``refserver.app``) do.
    """
    return {"Authorization": f"Bearer {api_key}"} if api_key else {}


@functools.cache
def tls_context() -> ssl.SSLContext:
    """The TLS context every httpx client of the plugin verifies with: httpx's default
    (``httpx.create_ssl_context()``: certifi's CA bundle, or ``SSL_CERT_FILE``/``SSL_CERT_DIR`` as set when first
    called), built once per process. httpx builds a new one for each client otherwise, loading the CA bundle each
    time: about 45 ms of CPU per client, several clients per measured phase."""
    import httpx

    return httpx.create_ssl_context()
