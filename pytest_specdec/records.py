"""Typed records passed between stages: one streamed request, and the aggregate of a measured phase."""

from __future__ import annotations

from dataclasses import asdict, dataclass

__all__ = ["RequestRecord", "RunMetrics"]


@dataclass(frozen=True, slots=True)
class RequestRecord:
    """One request as the client saw it. Times are ``time.perf_counter()`` seconds.

    ``chunk_times_s[i]`` is the arrival of the i-th SSE event that carried new tokens, ``chunk_tokens[i]`` how many
    (from Δ``meta_info.completion_tokens`` or usage deltas, never 1 per chunk). Spec fields are the final
    ``meta_info`` values (SGLang ``tokenizer_manager.py``); None when the server does not report them.

    OpenAI streams without per-chunk usage (SGLang ignores ``continuous_usage_stats``): ``chunk_times_s`` holds the
    arrivals of chunks with non-empty text, ``chunk_tokens`` is empty (per-chunk counts unknown, see
    :attr:`itl_available`), and ``completion_tokens`` is the final ``usage.completion_tokens``.
    ``start_s`` is just before the request is sent; ``end_s`` the arrival of ``data: [DONE]`` (or the failure).
    """

    ok: bool
    error: str | None
    start_s: float
    end_s: float
    prompt_tokens: int
    completion_tokens: int
    chunk_times_s: tuple[float, ...] = ()
    chunk_tokens: tuple[int, ...] = ()
    spec_verify_ct: int | None = None
    spec_num_correct_drafts: int | None = None
    spec_num_proposed_drafts: int | None = None
    spec_accept_length: float | None = None
    spec_accept_rate: float | None = None
    output_text: str = ""

    @property
    def itl_available(self) -> bool:
        """True when every chunk's token count is known, so per-token ITL can be computed."""
        return len(self.chunk_tokens) == len(self.chunk_times_s)


@dataclass(frozen=True, slots=True)
class RunMetrics:
    """Aggregate of one measured phase. Units in names; None = not applicable (see ``metrics.METRICS``)."""

    num_requests: int
    num_ok: int
    num_errors: int
    duration_s: float
    output_tokens: int
    output_tok_s: float
    accept_length: float | None
    accept_rate: float | None
    ttft_ms_mean: float | None
    ttft_ms_p50: float | None
    ttft_ms_p90: float | None
    ttft_ms_p99: float | None
    itl_ms_mean: float | None
    itl_ms_p50: float | None
    itl_ms_p90: float | None
    itl_ms_p99: float | None
    tpot_ms_mean: float | None
    tpot_ms_p50: float | None
    tpot_ms_p90: float | None
    tpot_ms_p99: float | None
    e2e_ms_mean: float | None
    e2e_ms_p50: float | None
    e2e_ms_p90: float | None
    e2e_ms_p99: float | None
    decode_tok_s_p50: float | None
    #: Accept length from engine counters (Δgeneration_tokens / Δverify_calls), for the cross-check.
    server_accept_length: float | None = None
    server_accept_rate: float | None = None
    #: Where ``accept_length`` came from: "client" (Σcompletion_tokens/Σspec_verify_ct), "counters", or None.
    accept_length_source: str | None = None

    def as_dict(self) -> dict[str, float | int | str | None]:
        return asdict(self)
