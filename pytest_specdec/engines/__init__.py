"""Engine dispatch: the only place that looks at ``profile.server``."""

from __future__ import annotations

from pytest_specdec.engines.base import EffectiveConfig, Engine, LaunchSpec, SpecCounters
from pytest_specdec.profiles.schema import Profile

__all__ = ["EffectiveConfig", "Engine", "LaunchSpec", "SpecCounters", "get_engine"]


def get_engine(profile: Profile) -> Engine:
    """The engine for ``profile.server``: ``SglangEngine``, ``ReferenceEngine`` or ``VllmEngine`` (imported lazily).

    :raises ProfileError: an unknown server kind (the schema already restricts it; kept for profiles built in code).
    """
    if profile.server == "sglang":
        from pytest_specdec.engines.sglang import SglangEngine

        return SglangEngine()
    if profile.server == "reference":
        from pytest_specdec.engines.reference import ReferenceEngine

        return ReferenceEngine()
    if profile.server == "vllm":
        from pytest_specdec.engines.vllm import VllmEngine

        return VllmEngine()
    from pytest_specdec.core.errors import ProfileError

    raise ProfileError(
        f"profiles.{profile.name}.server: unknown server {profile.server!r}; use reference, sglang or vllm",
        profile=profile.name,
    )
