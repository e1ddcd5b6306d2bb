"""The engine protocol: what differs between SGLang, vLLM and the reference server lives behind it."""

from __future__ import annotations

import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal, Protocol

import httpx

from pytest_specdec.profiles.schema import Profile, SpeculativeConfig

__all__ = [
    "CACHE_RESET_RETRY_S",
    "AuxIdConvention",
    "EffectiveConfig",
    "Engine",
    "FlagIssue",
    "LaunchSpec",
    "PairingMode",
    "SpecCounters",
    "post_reset",
]

#: How an engine numbers EAGLE-3 aux layer ids: ``"sglang"``: id i = output of decoder layer i (-1 = embeddings;
#: SGLang 0.5.23 ``python/sglang/srt/models/llama.py::set_eagle3_layers_to_capture``); ``"vllm"``: id i = residual
#: stream entering layer i (0 = embeddings; vLLM 0.32 ``vllm/model_executor/models/interfaces.py``
#: ``::_maybe_add_hidden_state``). docs/vllm.md has the comparison.
AuxIdConvention = Literal["sglang", "vllm"]
#: How a profile and its ``min_speedup.vs`` reference are measured against each other (``pairing.py``).
PairingMode = Literal["interleaved", "bracketed"]

#: How long a cache reset refused because requests are still in flight is retried (SGLang answers 400 while busy).
CACHE_RESET_RETRY_S = 10.0


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
    ``accepted_per_position[i]``: verify steps whose draft token i + 1 was accepted (vLLM
    ``vllm:spec_decode_num_accepted_tokens_per_pos_total{position="i"}``; the reference server's
    ``refserver:spec_decode_num_accepted_tokens_per_pos_total``), named by ``per_position_series``.
    """

    generation_tokens: float | None = None
    verify_calls: float | None = None
    drafts: float | None = None
    draft_tokens: float | None = None
    accepted_tokens: float | None = None
    accepted_per_position: tuple[float, ...] = ()
    #: The Prometheus series ``accepted_per_position`` was read from; None when the engine exports none.
    per_position_series: str | None = None
    #: Seconds spent drafting / verifying in speculative cycles (reference server's
    #: ``refserver:spec_{draft,verify}_seconds_total``); None when the engine does not report them.
    draft_seconds: float | None = None
    verify_seconds: float | None = None


@dataclass(frozen=True, slots=True)
class FlagIssue:
    """A launch flag, env or speculative-parameter problem an engine knows about (preflight turns it into a
    ``Finding`` at ``profiles.<profile>.<key>`` of the profile file)."""

    severity: Literal["error", "warning", "note"]
    key: str
    value: Any
    why: str
    fix: str


class Engine(Protocol):
    """One server kind: everything callers need that differs between engines, so no caller tests ``profile.server``.

    Implementations: ``engines.sglang.SglangEngine``, ``engines.reference.ReferenceEngine``,
    ``engines.vllm.VllmEngine``; ``engines.get_engine`` picks one. Multi-node launch (``nodes:``) is a separate
    protocol, ``nodegroup.NodeEngine``, which only SGLang and the reference server implement.
    """

    #: ``profile.server``: ``"sglang"``, ``"reference"`` or ``"vllm"`` (the fingerprint's ``engine``).
    name: str
    #: How the engine itself states accept length, e.g. ``"Σcompletion_tokens / Σspec_verify_ct"``.
    native_accept_length: str
    #: How the engine numbers EAGLE-3 aux layer ids (preflight rules 2 and 7).
    aux_id_convention: AuxIdConvention
    #: Pairing when the profile sets none (``pairing.pairing_mode``): ``"interleaved"`` when the target and the
    #: reference server fit on the machine together, ``"bracketed"`` when each takes the accelerator.
    default_pairing: PairingMode
    #: Whether the stock engine crashes at the first forward when an aux id names the embedding output (preflight
    #: warns then even with ``speculative.allow_embedding_capture``).
    crashes_on_embedding_capture: bool

    # ------------------------------------------------------------------------------------------------ launch
    def python(self, profile: Profile) -> str:
        """The interpreter whose environment runs the server (for package versions in the fingerprint)."""
        ...

    def env(self, profile: Profile) -> dict[str, str]:
        """The server's whole environment: a clean base (``common.clean_env``) plus the profile's ``env:`` and what
        the engine adds; preflight checks ``required_env`` against it."""
        ...

    def prepare(self, profile: Profile, *, work_dir: Path, draft_path: Path | None) -> Path | None:
        """Write whatever files the server needs besides its argv, under ``work_dir`` (a directory the caller owns),
        before :meth:`launch_spec`; the only engine step with side effects on disk.

        :param draft_path: the draft directory chosen so far (an aux-id overlay), None for the profile's own.
        :returns: the draft directory to pass to :meth:`launch_spec` (``draft_path`` itself when nothing is needed).
        """
        ...

    def launch_spec(self, profile: Profile, *, port: int, draft_path: Path | None) -> LaunchSpec:
        """Build argv and env for ``profile`` on ``port``; ``draft_path`` overrides the profile's draft (overlay).
        Pure: reads the profile and probes the interpreter, writes nothing (see :meth:`prepare`)."""
        ...

    # ------------------------------------------------------------------------------------------------- preflight
    def flag_issues(self, profile: Profile) -> list[FlagIssue]:
        """Problems in ``extra_args``/``env``/``tp_size`` for the engine version that will run (preflight rule 7)."""
        ...

    def speculative_issues(self, profile: Profile, *, target_arch: str | None) -> list[FlagIssue]:
        """What the engine does with ``num_steps``/``eagle_topk``/``num_draft_tokens`` (preflight rule 4).

        :param target_arch: the target's ``config.json`` ``architectures[0]`` when known (engines pick defaults by it).
        """
        ...

    def max_tokens_per_step(self, profile: Profile) -> int | None:
        """The most tokens one verify step can emit (the deepest draft path plus the bonus token: num_steps + 1),
        or None when it is not known before launch (the engine chooses, or the profile runs no speculation)."""
        ...

    def speculative_at(self, profile: Profile, point: Mapping[str, int], *, label: str) -> SpeculativeConfig:
        """``profile.speculative`` at a sweep point (``point``: the swept ``num_steps``/``eagle_topk``/
        ``num_draft_tokens``), the other two kept as the engine will run them (``common.chain_speculative_at``).

        :param label: the point as named in messages (``sweep.point_label``).
        :raises ValueError: a point the engine cannot run as given (named with ``label`` and the profile).
        """
        ...

    # -------------------------------------------------------------------------------------------------- readback
    def expected_config(self, profile: Profile) -> dict[str, object]:
        """``EffectiveConfig`` field -> the value the server should report for ``profile``'s ``speculative:`` block
        (with the engine's own rewrites and aliases applied); ``{}`` without one. None values are not checked."""
        ...

    def log_warnings(self, profile: Profile, log_text: str) -> list[str]:
        """Warnings read from the server log after a measured run (e.g. SGLang decoding without CUDA graphs)."""
        ...

    # ------------------------------------------------------------------------------------------------- serving
    def probe_ready(self, client: httpx.Client, profile: Profile) -> bool:
        """One readiness probe: True only when the server answers health *and* really generates one token."""
        ...

    def effective_config(self, client: httpx.Client, profile: Profile) -> EffectiveConfig:
        """Read back what the server runs (for the readback check and the fingerprint)."""
        ...

    def counters(self, metrics_text: str) -> SpecCounters:
        """Parse Prometheus text from ``/metrics``."""
        ...

    def reset_prefix_cache(self, client: httpx.Client, profile: Profile) -> str:
        """Empty the server's prefix cache before a measured phase, so TTFT is not measured on cache hits.

        :returns: what happened, for the results: ``"reset: POST /flush_cache"`` or ``"not reset: <why>"``.
        """
        ...

    def scheduler_accept_length(self, client: httpx.Client, profile: Profile) -> float | None:
        """The engine's own accept length since the last cache reset, from a source independent of the per-request
        fields the client reads (SGLang: the scheduler's ``avg_spec_accept_length``); None when the engine has none."""
        ...

    def start_trace(self, client: httpx.Client, profile: Profile, out_dir: Path) -> str | None:
        """Start the engine's own profiler, writing its trace under ``out_dir`` (absolute) when stopped.

        :returns: None when started, else why not (recorded as ``"not traced: <why>"``).
        """
        ...

    def stop_trace(self, client: httpx.Client, profile: Profile) -> str | None:
        """Stop the profiler started by :meth:`start_trace`. :returns: None when stopped, else why not."""
        ...


def post_profiler(
    client: httpx.Client, path: str, headers: dict[str, str], body: dict[str, object] | None
) -> str | None:
    """``POST path`` (SGLang's ``/start_profile`` / ``/stop_profile``). :returns: None on HTTP 200, else why not."""
    try:
        resp = client.post(path, headers=headers, json=body, timeout=60.0)
    except httpx.HTTPError as exc:
        return f"POST {path}: {type(exc).__name__}: {exc}"
    if resp.status_code == 200:
        return None
    return f"POST {path} answered HTTP {resp.status_code} ({' '.join(resp.text.split())[:120]})"


def post_reset(
    client: httpx.Client,
    path: str,
    headers: dict[str, str],
    *,
    busy_status: int | None = 400,
    retry_s: float = CACHE_RESET_RETRY_S,
    timeout_s: float = 30.0,
) -> str:
    """``POST path`` until it answers 200, retrying every 0.2 s for ``retry_s`` while it answers ``busy_status``
    (SGLang's ``/flush_cache`` refuses with 400 while requests are in flight, e.g. the last warmup response is still
    being finalized).

    :returns: ``"reset: POST <path>"``, or ``"not reset: POST <path> answered HTTP <code> (<body>)[ for <s> s]"`` /
        ``"not reset: POST <path>: <error>"``; never raises (a failed reset is recorded and warned about, not fatal).
    """
    deadline = time.monotonic() + retry_s
    started = time.monotonic()
    while True:
        try:
            resp = client.post(path, headers=headers, timeout=timeout_s)
        except httpx.HTTPError as exc:
            return f"not reset: POST {path}: {type(exc).__name__}: {exc}"
        if resp.status_code == 200:
            return f"reset: POST {path}"
        if resp.status_code != busy_status or time.monotonic() >= deadline:
            waited = f" for {time.monotonic() - started:.0f} s" if resp.status_code == busy_status else ""
            body = " ".join(resp.text.split())[:120]
            return f"not reset: POST {path} answered HTTP {resp.status_code} ({body}){waited}"
        time.sleep(0.2)
