"""Helpers every engine shares: the clean server environment, the API key, the interpreter and the two-step
readiness probe (SGLang, vLLM, the reference server).

Imports only ``profiles``, ``errors`` and ``auth``, so any engine module may use it without importing another engine.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any

from pytest_specdec.core.auth import bearer_headers
from pytest_specdec.core.errors import ProfileError
from pytest_specdec.profiles.schema import Profile, SpeculativeConfig

if TYPE_CHECKING:
    import httpx

    from pytest_specdec.engines.base import PairingMode

__all__ = [
    "BASE_ENV_KEYS",
    "GpuEngine",
    "GENERATE_TIMEOUT_S",
    "HEALTH_TIMEOUT_S",
    "auth_headers",
    "chain_speculative_at",
    "clean_env",
    "flag_name",
    "probe_health_then_generate",
    "resolve_api_key",
    "server_python",
]

#: Seconds per health probe (SGLang's own launcher uses 5, ``python/sglang/test/test_utils.py``).
HEALTH_TIMEOUT_S = 5.0
#: Seconds for the one-token generation that proves the server really generates (and for small read-backs).
GENERATE_TIMEOUT_S = 30.0

#: Caller variables a launched server inherits; everything else comes from ``profile.env``.
BASE_ENV_KEYS: tuple[str, ...] = (
    "PATH",
    "HOME",
    "USER",
    "LANG",
    "TMPDIR",
    "HF_HOME",
    "HF_HUB_CACHE",
    "HF_HUB_OFFLINE",
    "TRANSFORMERS_OFFLINE",
    "CUDA_VISIBLE_DEVICES",
    "LD_LIBRARY_PATH",
    "VIRTUAL_ENV",
)


def clean_env(extra: Mapping[str, str] | None = None, *, source: Mapping[str, str] | None = None) -> dict[str, str]:
    """A server environment: ``BASE_ENV_KEYS`` copied from ``source`` when set there, then ``extra`` on top.

    The caller's shell is never passed whole, so a stray ``CUDA_LAUNCH_BLOCKING`` or ``SGLANG_*`` in a developer's
    shell cannot change what is measured; the profile's ``env:`` is the one place to add variables.

    :param extra: variables to add or override (``profile.env``).
    :param source: where base values come from (default ``os.environ``).
    :returns: a new dict.
    """
    src = os.environ if source is None else source
    env = {key: src[key] for key in BASE_ENV_KEYS if key in src}
    env.update(extra or {})
    return env


def resolve_api_key(profile: Profile, *, source: Mapping[str, str] | None = None) -> str | None:
    """``profile.api_key``, else the value of the caller's variable ``profile.api_key_env``, else None.

    :raises ProfileError: ``api_key_env`` names a variable that is not set.
    """
    if profile.api_key is not None:
        return profile.api_key
    if profile.api_key_env is None:
        return None
    src = os.environ if source is None else source
    if profile.api_key_env not in src:
        raise ProfileError(
            f"{profile.source or '<profile>'}: profiles.{profile.name}.api_key_env: variable "
            f"{profile.api_key_env!r} is not set; export it or give api_key:",
            path=profile.source or None,
            profile=profile.name,
        )
    return src[profile.api_key_env]


def auth_headers(profile: Profile) -> dict[str, str]:
    """``auth.bearer_headers`` of the profile's API key (:func:`resolve_api_key`).

    :raises ProfileError: see :func:`resolve_api_key`.
    """
    return bearer_headers(resolve_api_key(profile))


def server_python(profile: Profile) -> str:
    """The interpreter whose environment runs the server: ``profile.python``, else the one running pytest."""
    return profile.python or sys.executable


def probe_health_then_generate(
    client: httpx.Client,
    profile: Profile,
    *,
    health_path: str,
    generate_path: str,
    body: Mapping[str, Any],
    generated: Callable[[Any], bool],
) -> bool:
    """One readiness probe: ``GET health_path`` answers 200, then ``POST generate_path`` with ``body`` (one token at
    temperature 0) answers 200 with a JSON body that ``generated`` accepts. A health endpoint alone can answer
    before the model has run a forward (vLLM's ``/health``), so readiness is a token, not a status code.

    :param client: an ``httpx.Client`` whose ``base_url`` is the server's; the profile's API key is sent.
    :returns: True when both succeed; False on any HTTP error, timeout or unexpected body (the caller polls again).
    :raises ProfileError: the profile's ``api_key_env`` is not set (:func:`resolve_api_key`).
    """
    import httpx

    headers = auth_headers(profile)
    try:
        health = client.get(health_path, headers=headers, timeout=HEALTH_TIMEOUT_S)
        if health.status_code != 200:
            return False
        gen = client.post(generate_path, json=dict(body), headers=headers, timeout=GENERATE_TIMEOUT_S)
        return gen.status_code == 200 and generated(gen.json())
    except (httpx.HTTPError, ValueError):
        return False


def flag_name(arg: str) -> str:
    """The flag of one ``extra_args`` word: ``"--tp-size=2"`` -> ``"--tp-size"``."""
    return arg.split("=", 1)[0]


def chain_speculative_at(
    profile: Profile, point: Mapping[str, int], *, label: str, engine: str
) -> SpeculativeConfig:
    """``profile.speculative`` with the sweep ``point``'s ``num_steps``/``eagle_topk``/``num_draft_tokens`` applied,
    for an engine whose chain (``eagle_topk`` 1) verifies exactly ``num_steps + 1`` draft tokens: SGLang and the
    reference server overwrite ``num_draft_tokens`` with that (``speculative_hook.py::_handle_eagle_family``), vLLM
    accepts nothing else. So at topk 1 that pair moves together: sweeping ``num_steps`` sets draft tokens to
    steps + 1, sweeping ``num_draft_tokens`` sets steps to tokens - 1. With topk > 1 the profile's other values are
    kept (preflight then checks ``num_draft_tokens <= topk * steps + 1``).

    :param point: the swept speculative keys only, e.g. ``{"num_steps": 2}``.
    :param label: the point as named in messages (``sweep.point_label``).
    :param engine: the engine as named in messages, e.g. ``"SGLang"``.
    :raises ValueError: the profile has no ``speculative:`` block (a caller's bug); both ``num_steps`` and
        ``num_draft_tokens`` swept at topk 1 with tokens != steps + 1; ``num_draft_tokens`` < 2 at topk 1; the profile
        leaves steps/draft tokens to the engine.
    """
    spec = profile.speculative
    if spec is None:
        raise ValueError(f"profile {profile.name!r} has no speculative: block to sweep")
    steps: int | None = point.get("num_steps", spec.num_steps)
    topk = point.get("eagle_topk", spec.eagle_topk if spec.eagle_topk is not None else 1)
    tokens: int | None = point.get("num_draft_tokens", spec.num_draft_tokens)
    if topk == 1:
        if "num_steps" in point and "num_draft_tokens" in point:
            swept_steps, swept_tokens = point["num_steps"], point["num_draft_tokens"]
            if swept_tokens != swept_steps + 1:
                raise ValueError(
                    f"point {label} of profile {profile.name!r}: with eagle_topk 1 {engine} runs "
                    f"num_steps + 1 = {swept_steps + 1} draft tokens, not {swept_tokens}; sweep num_steps or "
                    "num_draft_tokens, not both"
                )
        elif "num_draft_tokens" in point:
            if point["num_draft_tokens"] < 2:
                raise ValueError(
                    f"point {label} of profile {profile.name!r}: with eagle_topk 1 num_draft_tokens "
                    "is num_steps + 1, so it must be >= 2"
                )
            steps = point["num_draft_tokens"] - 1
        if steps is not None:
            tokens = steps + 1
    if steps is None or tokens is None:
        raise ValueError(
            f"point {label} of profile {profile.name!r}: the profile leaves num_steps/"
            f"num_draft_tokens to {engine}; set all three of num_steps, eagle_topk, num_draft_tokens in its "
            "speculative: block to sweep one of them"
        )
    return spec.model_copy(update={"num_steps": steps, "eagle_topk": topk, "num_draft_tokens": tokens})


class GpuEngine:
    """What SGLang and vLLM share as engines (``engines.base.Engine``): the server runs on the interpreter of
    ``profile.python`` (:func:`server_python`), and it takes the GPU(s) it is launched on, so a paired reference
    arm is measured in brackets around it, never beside it."""

    default_pairing: PairingMode = "bracketed"

    def python(self, profile: Profile) -> str:
        """:func:`server_python`: ``profile.python``, else the interpreter running pytest."""
        return server_python(profile)
