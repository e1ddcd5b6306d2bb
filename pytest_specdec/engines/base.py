"""The engine protocol: what differs between SGLang, vLLM and the reference server lives behind it."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Protocol

import httpx

from pytest_specdec.profiles import Profile

__all__ = ["EffectiveConfig", "Engine", "LaunchSpec", "SpecCounters"]


@dataclass(frozen=True, slots=True)
class LaunchSpec:
    """A fully built server command: ``argv`` run with exactly ``env`` (a clean base plus the profile's env)."""

    argv: tuple[str, ...]
    env: dict[str, str]
    host: str
    port: int
    #: Extra ports the engine derives from ``port`` (checked free before launch).
    derived_ports: tuple[int, ...] = ()
    #: The draft directory actually passed (an overlay when the profile sets aux ids), for fingerprints.
    draft_path: Path | None = None

    @property
    def base_url(self) -> str:
        return f"http://{self.host}:{self.port}"


@dataclass(frozen=True, slots=True)
class EffectiveConfig:
    """What the running server reports it runs (SGLang ``/server_info``; vLLM: from the launch args)."""

    version: str | None
    speculative_algorithm: str | None
    num_steps: int | None
    eagle_topk: int | None
    num_draft_tokens: int | None
    max_running_requests: int | None
    raw: dict = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class SpecCounters:
    """Engine-wide counters read from ``/metrics`` at one instant; None when the engine does not export one.

    SGLang: ``sglang:generation_tokens_total``, ``sglang:spec_verify_calls_total``.
    vLLM: ``vllm:generation_tokens_total``, ``vllm:spec_decode_num_drafts_total``,
    ``vllm:spec_decode_num_draft_tokens_total``, ``vllm:spec_decode_num_accepted_tokens_total``.
    """

    generation_tokens: float | None = None
    verify_calls: float | None = None
    drafts: float | None = None
    draft_tokens: float | None = None
    accepted_tokens: float | None = None
    accepted_per_position: tuple[float, ...] = ()


class Engine(Protocol):
    """One server kind. Implementations: ``engines/sglang.py``, ``engines/reference.py``, ``engines/vllm.py``."""

    name: str

    def launch_spec(self, profile: Profile, *, port: int, draft_path: Path | None) -> LaunchSpec:
        """Build argv and env for ``profile`` on ``port``; ``draft_path`` overrides the profile's draft (overlay)."""
        ...

    def probe_ready(self, client: httpx.Client, profile: Profile) -> bool:
        """One readiness probe: True only when the server answers health *and* really generates one token."""
        ...

    def effective_config(self, client: httpx.Client, profile: Profile) -> EffectiveConfig:
        """Read back what the server runs (for the readback check and the fingerprint)."""
        ...

    def counters(self, metrics_text: str) -> SpecCounters:
        """Parse Prometheus text from ``/metrics``."""
        ...
