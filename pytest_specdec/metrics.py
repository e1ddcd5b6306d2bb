"""Per-request records -> the aggregate metrics of one phase; every metric's formula, unit and source in one table.

Timing formulas follow SGLang ``python/sglang/benchmark/serving.py::calculate_metrics`` and its ``sglang``
backend request function (``async_request_sglang_generate``, now ``benchmark/backends/sglang_client.py``);
failed requests are kept out of every statistic, as guidellm ``schemas/statistics.py`` does.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from types import MappingProxyType

import numpy as np

from pytest_specdec.engines.base import SpecCounters
from pytest_specdec.errors import ServerError
from pytest_specdec.records import RequestRecord, RunMetrics

__all__ = [
    "CROSS_CHECK_TOLERANCE",
    "METRICS",
    "MetricSpec",
    "RequestTiming",
    "cross_check",
    "request_timing",
    "summarize",
]

#: Relative difference between client and counter accept lengths above which :func:`cross_check` reports.
CROSS_CHECK_TOLERANCE = 0.02

_PERCENTILES = (50, 90, 99)


@dataclass(frozen=True, slots=True)
class MetricSpec:
    """One metric: how it is named, measured and judged. ``stats`` lists the ``RunMetrics`` suffixes it has
    (``("mean", "p50", "p90", "p99")`` -> ``ttft_ms_mean`` ...); empty means the field is ``name`` itself."""

    name: str
    unit: str
    higher_is_better: bool
    formula: str
    source: str
    stats: tuple[str, ...] = ()

    @property
    def fields(self) -> tuple[str, ...]:
        """The ``RunMetrics`` attribute names holding this metric."""
        return tuple(f"{self.name}_{stat}" for stat in self.stats) or (self.name,)


_LATENCY_STATS = ("mean", "p50", "p90", "p99")
_SERVING = "SGLang python/sglang/benchmark/serving.py::calculate_metrics"

METRICS: Mapping[str, MetricSpec] = MappingProxyType(
    {
        spec.name: spec
        for spec in (
            MetricSpec(
                "output_tok_s",
                "tok/s",
                True,
                "sum(completion_tokens of ok requests) / phase duration_s",
                f"{_SERVING} (output_throughput)",
            ),
            MetricSpec(
                "accept_length",
                "tokens/verify step",
                True,
                "sum(completion_tokens) / sum(meta_info.spec_verify_ct) over measured ok requests; "
                "else engine counters",
                "SGLang benchmark/mtbench/bench_sglang_eagle.py; test/kits/spec_server_kits.py::test_acc_length",
            ),
            MetricSpec(
                "accept_rate",
                "fraction of draft tokens",
                True,
                "sum(spec_num_correct_drafts) / sum(spec_num_proposed_drafts); else counters accepted/draft_tokens; "
                "else (accept_length - 1) / (num_draft_tokens - 1)",
                "SGLang managers/tokenizer_manager.py (spec_accept_rate); vLLM v1/spec_decode/metrics.py",
            ),
            MetricSpec(
                "ttft_ms",
                "ms",
                False,
                "first token-carrying event arrival - request start",
                f"{_SERVING}; backends/sglang_client.py (ttft)",
                _LATENCY_STATS,
            ),
            MetricSpec(
                "itl_ms",
                "ms",
                False,
                "each later event's gap / its new tokens, once per token; pooled over requests",
                "SGLang benchmark/backends/sglang_client.py (adjust_itl)",
                _LATENCY_STATS,
            ),
            MetricSpec(
                "tpot_ms",
                "ms",
                False,
                "(e2e - ttft) / (completion_tokens - 1), per request with > 1 token",
                f"{_SERVING} (tpot)",
                _LATENCY_STATS,
            ),
            MetricSpec(
                "e2e_ms",
                "ms",
                False,
                "data: [DONE] arrival - request start",
                f"{_SERVING} (e2e_latency)",
                _LATENCY_STATS,
            ),
            MetricSpec(
                "decode_tok_s",
                "tok/s",
                True,
                "(completion_tokens - 1) / (e2e - ttft), per request; median",
                "1 / tpot of SGLang calculate_metrics, per request",
                ("p50",),
            ),
        )
    }
)


@dataclass(frozen=True, slots=True)
class RequestTiming:
    """Derived timings of one successful request, in seconds; None when not applicable (see each field)."""

    #: None when no token arrived.
    ttft_s: float | None
    e2e_s: float
    #: Per-token gaps after the first event; empty when per-chunk token counts are unknown.
    itl_s: tuple[float, ...]
    #: None when completion_tokens <= 1 or no token arrived.
    tpot_s: float | None
    #: None when completion_tokens <= 1, no token arrived, or e2e == ttft.
    decode_tok_s: float | None


def request_timing(record: RequestRecord) -> RequestTiming:
    """Timings of one request, as SGLang ``bench_serving``'s ``sglang`` backend computes them.

    - TTFT = ``chunk_times_s[0] - start_s``.
    - ITL: for each later event i, ``(chunk_times_s[i] - chunk_times_s[i-1]) / chunk_tokens[i]`` repeated
      ``chunk_tokens[i]`` times (``adjust_itl`` in ``benchmark/backends/sglang_client.py``); the first event's
      tokens get no ITL. Empty when ``record.itl_available`` is False.
    - TPOT = ``(e2e - ttft) / (completion_tokens - 1)`` (``calculate_metrics``).
    - decode tok/s = ``(completion_tokens - 1) / (e2e - ttft)``.

    Worked example: start 0.0 s, events at 0.100 s (1 token), 0.130 s (3 tokens), 0.170 s (4 tokens),
    ``[DONE]`` at 0.170 s, 8 tokens -> TTFT 100 ms; ITL 10, 10, 10, 10, 10, 10, 10 ms (30 ms / 3, 40 ms / 4);
    e2e 170 ms; TPOT (170 - 100) / 7 = 10 ms; decode 7 / 0.070 s = 100 tok/s.
    """
    e2e_s = record.end_s - record.start_s
    if not record.chunk_times_s:
        return RequestTiming(ttft_s=None, e2e_s=e2e_s, itl_s=(), tpot_s=None, decode_tok_s=None)
    ttft_s = record.chunk_times_s[0] - record.start_s
    itl: list[float] = []
    if record.itl_available:
        times, tokens = record.chunk_times_s, record.chunk_tokens
        for i in range(1, len(times)):
            itl.extend([(times[i] - times[i - 1]) / tokens[i]] * tokens[i])
    decode_s = e2e_s - ttft_s
    n = record.completion_tokens
    tpot_s = decode_s / (n - 1) if n > 1 else None
    decode_tok_s = (n - 1) / decode_s if n > 1 and decode_s > 0 else None
    return RequestTiming(ttft_s=ttft_s, e2e_s=e2e_s, itl_s=tuple(itl), tpot_s=tpot_s, decode_tok_s=decode_tok_s)


def _stats_ms(values_s: Sequence[float]) -> tuple[float | None, float | None, float | None, float | None]:
    """(mean, p50, p90, p99) in ms with numpy's default linear interpolation; all None for no values."""
    if not values_s:
        return None, None, None, None
    arr = np.asarray(values_s, dtype=float) * 1000.0
    p50, p90, p99 = (float(v) for v in np.percentile(arr, _PERCENTILES))
    return float(arr.mean()), p50, p90, p99


def _delta(after: float | None, before: float | None) -> float | None:
    if after is None or before is None:
        return None
    return after - before


def _server_accept(before: SpecCounters | None, after: SpecCounters | None) -> tuple[float | None, float | None]:
    """(accept length, accept rate) from counter deltas; None where a counter is missing or did not move.

    SGLang: length = Δ``sglang:generation_tokens_total`` / Δ``sglang:spec_verify_calls_total``.
    vLLM: length = 1 + Δaccepted_tokens / Δdrafts, rate = Δaccepted_tokens / Δdraft_tokens
    (``vllm/v1/spec_decode/metrics.py``).
    """
    if before is None or after is None:
        return None, None
    length: float | None = None
    rate: float | None = None
    verify = _delta(after.verify_calls, before.verify_calls)
    generated = _delta(after.generation_tokens, before.generation_tokens)
    drafts = _delta(after.drafts, before.drafts)
    accepted = _delta(after.accepted_tokens, before.accepted_tokens)
    draft_tokens = _delta(after.draft_tokens, before.draft_tokens)
    if verify is not None and generated is not None and verify > 0:
        length = generated / verify
    elif drafts is not None and accepted is not None and drafts > 0:
        length = 1.0 + accepted / drafts
    if draft_tokens is not None and accepted is not None and draft_tokens > 0:
        rate = accepted / draft_tokens
    return length, rate


def summarize(
    records: Sequence[RequestRecord],
    duration_s: float,
    *,
    num_draft_tokens: int | None,
    speculative: bool,
    counters_before: SpecCounters | None = None,
    counters_after: SpecCounters | None = None,
    max_error_rate: float = 0.0,
) -> RunMetrics:
    """Aggregate one measured phase.

    - output_tok_s = Σ completion_tokens of ok requests / ``duration_s`` (SGLang ``output_throughput``).
    - TTFT, TPOT, e2e: per ok request (:func:`request_timing`), then mean / p50 / p90 / p99 in ms (numpy linear
      percentiles). ITL: all per-token gaps of all ok requests pooled, as ``calculate_metrics`` pools ``itls``.
      decode tok/s: median over ok requests.
    - accept_length (None unless ``speculative``) = Σ completion_tokens / Σ spec_verify_ct over ok requests that
      report ``spec_verify_ct > 0`` — only this phase, not the server's lifetime ``avg_spec_accept_length``;
      when no request reports it, the counter-derived value (``accept_length_source`` says which).
    - accept_rate (None unless ``speculative``) = Σ spec_num_correct_drafts / Σ spec_num_proposed_drafts when
      reported; else the vLLM counters' Δaccepted / Δdraft_tokens; else (accept_length - 1) / (num_draft_tokens - 1)
      when ``num_draft_tokens > 1``.
    - server_accept_length / server_accept_rate from ``counters_after - counters_before`` (see
      :func:`cross_check`); also computed when not ``speculative`` if counters are given.

    Worked example: two ok requests, 8 and 4 tokens, spec_verify_ct 4 and 2, spec_num_correct_drafts 6 and 2,
    spec_num_proposed_drafts 12 and 6, phase 0.5 s -> output_tok_s 12 / 0.5 = 24; accept_length 12 / 6 = 2.0;
    accept_rate 8 / 18 = 0.444.

    :param records: the measured phase's records (warmup excluded), failed ones included.
    :param duration_s: phase wall time in seconds (``PhaseResult.duration_s``), > 0.
    :param num_draft_tokens: the server's effective ``speculative_num_draft_tokens`` (None if unknown).
    :param max_error_rate: the workload's ``max_error_rate``; the fraction of failed requests may not exceed it.
    :raises ServerError: no successful request, or failed/total > ``max_error_rate``; the message gives the counts
        and the first error.
    :raises ValueError: ``duration_s <= 0``.
    """
    if duration_s <= 0:
        raise ValueError(f"summarize: duration_s must be > 0, got {duration_s}")
    ok = [r for r in records if r.ok]
    failed = [r for r in records if not r.ok]
    total = len(records)
    first_error = f"; first error: {failed[0].error}" if failed else ""
    if not ok:
        raise ServerError(f"no successful requests: {len(failed)} of {total} failed{first_error}")
    if len(failed) / total > max_error_rate:
        raise ServerError(
            f"{len(failed)} of {total} requests failed (error rate {len(failed) / total:.2f} > "
            f"max_error_rate {max_error_rate:g}){first_error}"
        )

    timings = [request_timing(r) for r in ok]
    ttft = _stats_ms([t.ttft_s for t in timings if t.ttft_s is not None])
    itl = _stats_ms([gap for t in timings for gap in t.itl_s])
    tpot = _stats_ms([t.tpot_s for t in timings if t.tpot_s is not None])
    e2e = _stats_ms([t.e2e_s for t in timings])
    decode = [t.decode_tok_s for t in timings if t.decode_tok_s is not None]
    output_tokens = sum(r.completion_tokens for r in ok)

    server_length, server_rate = _server_accept(counters_before, counters_after)
    accept_length: float | None = None
    accept_rate: float | None = None
    source: str | None = None
    if speculative:
        verified = [r for r in ok if r.spec_verify_ct]
        if verified:
            accept_length = sum(r.completion_tokens for r in verified) / sum(r.spec_verify_ct or 0 for r in verified)
            source = "client"
        elif server_length is not None:
            accept_length, source = server_length, "counters"
        drafted = [r for r in ok if r.spec_num_proposed_drafts and r.spec_num_correct_drafts is not None]
        if drafted:
            accept_rate = sum(r.spec_num_correct_drafts or 0 for r in drafted) / sum(
                r.spec_num_proposed_drafts or 0 for r in drafted
            )
        elif server_rate is not None:
            accept_rate = server_rate
        elif accept_length is not None and num_draft_tokens is not None and num_draft_tokens > 1:
            accept_rate = (accept_length - 1.0) / (num_draft_tokens - 1)

    return RunMetrics(
        num_requests=total,
        num_ok=len(ok),
        num_errors=len(failed),
        duration_s=duration_s,
        output_tokens=output_tokens,
        output_tok_s=output_tokens / duration_s,
        accept_length=accept_length,
        accept_rate=accept_rate,
        ttft_ms_mean=ttft[0],
        ttft_ms_p50=ttft[1],
        ttft_ms_p90=ttft[2],
        ttft_ms_p99=ttft[3],
        itl_ms_mean=itl[0],
        itl_ms_p50=itl[1],
        itl_ms_p90=itl[2],
        itl_ms_p99=itl[3],
        tpot_ms_mean=tpot[0],
        tpot_ms_p50=tpot[1],
        tpot_ms_p90=tpot[2],
        tpot_ms_p99=tpot[3],
        e2e_ms_mean=e2e[0],
        e2e_ms_p50=e2e[1],
        e2e_ms_p90=e2e[2],
        e2e_ms_p99=e2e[3],
        decode_tok_s_p50=float(np.median(decode)) if decode else None,
        server_accept_length=server_length,
        server_accept_rate=server_rate,
        accept_length_source=source,
    )


def cross_check(metrics: RunMetrics) -> str | None:
    """Compare the client-side accept length with the engine counters' one.

    :returns: None when they agree within :data:`CROSS_CHECK_TOLERANCE` (relative to the counter value) or
        either is missing or the client value itself came from the counters; else one line such as
        ``accept length disagrees: client 2.00 (Σcompletion_tokens/Σspec_verify_ct) vs engine counters 2.50
        (-20.0%): metrics bug, not a regression``.
    """
    client, server = metrics.accept_length, metrics.server_accept_length
    if metrics.accept_length_source != "client" or client is None or server is None or server <= 0:
        return None
    diff = (client - server) / server
    if abs(diff) <= CROSS_CHECK_TOLERANCE:
        return None
    return (
        f"accept length disagrees: client {client:.2f} (Σcompletion_tokens/Σspec_verify_ct) vs engine counters "
        f"{server:.2f} ({diff:+.1%}): metrics bug, not a regression"
    )
