"""Typed records passed between stages: one streamed request, and the aggregate of a measured phase."""

from __future__ import annotations

import dataclasses
import statistics
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

__all__ = ["RequestRecord", "RunMetrics", "median_metrics", "median_of_repeats"]


@dataclass(frozen=True, slots=True)
class RequestRecord:
    """One request as the client saw it. Times are ``time.perf_counter()`` seconds.

    ``chunk_times_s[i]`` is the arrival of the i-th SSE event that carried new tokens, ``chunk_tokens[i]`` how many
    (from Δ``meta_info.completion_tokens`` or usage deltas, never 1 per chunk). Spec fields are the final
    ``meta_info`` values (SGLang ``tokenizer_manager.py``); None when the server does not report them.

    OpenAI streams without per-chunk usage (SGLang ignores ``continuous_usage_stats``): ``chunk_times_s`` holds the
    arrivals of chunks with non-empty text, ``chunk_tokens`` is empty (per-chunk counts unknown, see
    :attr:`itl_available`), and ``completion_tokens`` is the final ``usage.completion_tokens``.
    ``start_s`` is just before the request is sent; ``end_s`` the arrival of ``data: [DONE]`` (or the failure). In an
    open loop ``arrival_s`` is when the request arrived (its scheduled time): ``start_s - arrival_s`` is its wait for a
    free ``concurrency`` slot, outside TTFT and E2E as in SGLang ``bench_serving`` (whose request function starts its
    clock inside the ``--max-concurrency`` semaphore).
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
    #: ``meta_info.spec_correct_drafts_histogram`` (SGLang 0.5.17+; 0.5.17 also sends it as
    #: ``spec_accept_histogram``): entry i = verify steps of this request that accepted exactly i draft tokens.
    #: Empty when the server does not report it.
    spec_correct_drafts_histogram: tuple[int, ...] = ()
    #: Open loop: ``time.perf_counter()`` seconds when the request arrived (was due to be sent); None in a closed
    #: loop.
    arrival_s: float | None = None

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
    #: Accept length from engine counters in the engine's own definition (as ``accept_length_native``).
    server_accept_length: float | None = None
    #: Where ``accept_length`` came from: "client" (per-request meta_info), "counters", or None.
    accept_length_source: str | None = None
    #: The engine's own accept-length figure (SGLang/reference: Σcompletion_tokens / Σspec_verify_ct, which counts
    #: the prefill token; vLLM: 1 + accepted / drafts), reported beside ``accept_length``.
    accept_length_native: float | None = None
    #: The scheduler's accept length since the cache reset (SGLang ``avg_spec_accept_length``): an independent check.
    scheduler_accept_length: float | None = None
    #: What was done to the prefix cache before this phase (``Engine.reset_prefix_cache``), e.g. "reset: POST
    #: /flush_cache" or "not reset: ...".
    cache_reset: str | None = None
    #: The measuring client's event-loop lag p99 and CPU use (cores) during the phase, and its worker processes
    #: (``client.ClientLoad``); None when not measured.
    client_lag_ms_p99: float | None = None
    client_cpu_cores: float | None = None
    client_workers: int | None = None
    #: Per draft position k = 1..n (index k - 1): verify steps that accepted draft token k / verify steps
    #: (vLLM's per-position acceptance rate). Empty when not speculative or not reported (``metrics.positions``).
    accept_rate_at: tuple[float, ...] = ()
    #: Per draft position k: verify steps that accepted draft token k / those that accepted token k - 1 (all verify
    #: steps for k = 1): the chance draft k survives once it is reached. None where no step reached k.
    accept_rate_cond_at: tuple[float | None, ...] = ()
    #: Where the per-position figures came from (``meta_info.spec_correct_drafts_histogram`` or a counter name).
    accept_position_source: str | None = None
    #: Per prompt category (the workload's JSONL ``category``; "uncategorized" for prompts without one when others
    #: have one): the ``metrics.CATEGORY_FIELDS`` of that category's requests. Empty when no prompt has a category.
    by_category: dict[str, dict[str, Any]] = field(default_factory=dict)
    #: Milliseconds per speculative cycle spent drafting / verifying, from the engine's counters over this phase
    #: (the reference server reports them; SGLang and vLLM do not: None).
    draft_ms_per_cycle: float | None = None
    verify_ms_per_cycle: float | None = None
    #: p95 of the latencies (the other percentiles are above; after them to keep old positional use working).
    ttft_ms_p95: float | None = None
    itl_ms_p95: float | None = None
    tpot_ms_p95: float | None = None
    e2e_ms_p95: float | None = None
    #: Σprompt_tokens of the ok requests (the server's count) and the phase's throughputs, as SGLang bench_serving's
    #: ``input_throughput``, ``total_throughput`` and ``request_throughput`` (ok requests per second).
    input_tokens: int | None = None
    input_tok_s: float | None = None
    total_tok_s: float | None = None
    requests_per_s: float | None = None
    #: With ``workload.slo``: ok requests meeting every SLO per second (vLLM ``request_goodput``), and their share
    #: of all requests sent (SGLang ``slo_attainment``); None without an SLO.
    goodput_per_s: float | None = None
    slo_attainment: float | None = None
    #: The evidence of the tail verdicts (``metrics.tail_evidence``): ``"ttft_ms_p99" -> {"n", "estimate", "low",
    #: "high", "confidence"}`` per latency percentile, ``"goodput_per_s" -> {"n", "good", "duration_s", ...}``. In a
    #: run's metrics (``runner.RunResult.metrics``) every repeat's requests are pooled; per repeat, that phase's own.
    tails: dict[str, dict[str, Any]] = field(default_factory=dict)

    def as_dict(self) -> dict[str, Any]:
        """Field -> value, JSON-safe: per-position tuples as lists (what they read back as from JSON)."""
        return {k: _json_safe(v) for k, v in asdict(self).items()}


def _json_safe(value: Any) -> Any:
    if isinstance(value, tuple | list):
        return [_json_safe(v) for v in value]
    if isinstance(value, dict):
        return {k: _json_safe(v) for k, v in value.items()}
    return value


def median_of_repeats(values: Sequence[Any]) -> Any:
    """The one median of per-repeat values used everywhere (``RunResult.metrics``, ``ResultRecord.metrics``).

    Numbers (None and bools skipped): when every value is an int (a count: ``num_ok``, ``output_tokens``) the
    *lower* median, ``statistics.median_low``, so a count stays a count that some repeat really had; otherwise the
    ordinary median (mean of the middle two for an even number). No number: the first non-None value (a string
    such as ``accept_length_source``), else None.

    Per-position values (tuples or lists of one length, ``accept_rate_at``): element by element, as a tuple.

    Per-category values (dicts, ``by_category``): key by key, for the keys of the first value.

    Examples: [15, 16] -> 15 (not 15.5); [15, 16, 17] -> 16; [2.0, 2.5] -> 2.25; [None, 3] -> 3;
    [(0.8, 0.5), (0.9, None)] -> (0.85, 0.5); [{"a": 1.0}, {"a": 2.0}] -> {"a": 1.5}.
    """
    dicts = [v for v in values if isinstance(v, dict)]
    if dicts and len(dicts) == len(values):
        return {k: median_of_repeats([d.get(k) for d in dicts]) for k in dicts[0]}
    seqs = [v for v in values if isinstance(v, list | tuple)]
    if seqs and len(seqs) == len(values) and len({len(v) for v in seqs}) == 1:
        return tuple(median_of_repeats(list(column)) for column in zip(*seqs, strict=True))
    numbers = [v for v in values if isinstance(v, int | float) and not isinstance(v, bool)]
    if not numbers:
        return next((v for v in values if v is not None), None)
    if all(isinstance(v, int) for v in numbers):
        return int(statistics.median_low(numbers))
    return float(statistics.median(float(v) for v in numbers))


def median_metrics(runs: Sequence[RunMetrics]) -> RunMetrics:
    """Per-field :func:`median_of_repeats` of several ``RunMetrics``.

    :raises ValueError: ``runs`` is empty.
    """
    if not runs:
        raise ValueError("median_metrics: no repeat to take the median of")
    merged = {f.name: median_of_repeats([getattr(r, f.name) for r in runs]) for f in dataclasses.fields(RunMetrics)}
    return RunMetrics(**merged)
