"""The one ``Authorization`` header helper, for every layer (client, runner, engines, the reference server's warmup).

Standard library only, so anything may import it without pulling in the engines or pydantic.
"""

from __future__ import annotations

__all__ = ["bearer_headers"]


def bearer_headers(api_key: str | None) -> dict[str, str]:
    """``{"Authorization": "Bearer <api_key>"}``, or ``{}`` when ``api_key`` is None or empty.

    The scheme SGLang checks (``python/sglang/srt/utils/auth.py``), as vLLM's OpenAI server and the reference server
    (``refserver/app.py``) do.
    """
    return {"Authorization": f"Bearer {api_key}"} if api_key else {}
