"""Helpers every engine shares: the clean server environment and the API key (SGLang, vLLM, the reference server).

Imports only ``profiles``, ``errors`` and ``auth``, so any engine module may use it without importing another engine.
"""

from __future__ import annotations

import os
from collections.abc import Mapping

from pytest_specdec.auth import bearer_headers
from pytest_specdec.errors import ProfileError
from pytest_specdec.profiles import Profile

__all__ = ["BASE_ENV_KEYS", "auth_headers", "clean_env", "flag_name", "resolve_api_key"]

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


def flag_name(arg: str) -> str:
    """The flag of one ``extra_args`` word: ``"--tp-size=2"`` -> ``"--tp-size"``."""
    return arg.split("=", 1)[0]
