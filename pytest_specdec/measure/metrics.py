"""Per-request records -> the aggregate metrics of one phase (formulas, units, sources: ``core.metric_table``).

Timing formulas follow SGLang ``python/sglang/benchmark/serving.py::calculate_metrics`` and its ``sglang``
backend request function (``async_request_sglang_generate``, now ``benchmark/backends/sglang_client.py``);
failed requests are kept out of every statistic, as guidellm ``schemas/statistics.py`` does.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from pytest_specdec.core.errors import ServerError
from pytest_specdec.core.order_stats import TAIL_CONFIDENCE, quantile_bounds, share_bounds
from pytest_specdec.core.records import RequestRecord, RunMetrics
from pytest_specdec.engines.base import SpecCounters

__all__ = [
    "CLIENT_LAG_FRACTION",
    "CROSS_CHECK_TOLERANCE",
    "CATEGORY_FIELDS",
    "HISTOGRAM_SOURCE",
    "SCHEDULER_CHECK_TOLERANCE",
    "PositionAcceptance",
    "RequestTiming",
    "UNCATEGORIZED",
    "category_metrics",
    "client_check",
    "good_requests",
    "pooled_tails",
    "client_overloaded",
    "cross_check",
    "position_acceptance",
    "request_timing",
    "phase_metrics",
    "tail_evidence",
]

#: Relative difference between client and counter accept lengths above which :func:`cross_check` reports.
CROSS_CHECK_TOLERANCE = 0.02
#: The same for the scheduler's own figure (``avg_spec_accept_length``): it misses the decode iterations after its
#: last fold (< ``--decode-log-interval``, 40) and counts drafts accepted past ``max_new_tokens``, so it is looser.
SCHEDULER_CHECK_TOLERANCE = 0.05

_PERCENTILES = (50, 90, 95, 99)
#: The latency percentiles that have tail evidence (``Thresholds``' ``max_<metric>_ms_p<q>`` ceilings).
TAIL_PERCENTILES = (90, 95, 99)


#: ``accept_position_source`` when per-position acceptance comes from the per-request histograms.
HISTOGRAM_SOURCE = "meta_info.spec_correct_drafts_histogram"


@dataclass(frozen=True, slots=True)
class PositionAcceptance:
    """Acceptance per draft position k = 1..n over one phase (n = draft tokens per verify step - 1 on a chain).

    ``accepted_at[k - 1]`` = verify steps that accepted draft token k (and so every token before it);
    ``verify_steps`` = all verify steps. ``source`` names where the counts came from.
    """

    verify_steps: float
    accepted_at: tuple[float, ...]
    source: str

    @property
    def rates(self) -> tuple[float, ...]:
        """Unconditional rate per position: accepted at k / verify steps (vLLM's "per-position acceptance rate",
        ``vllm/v1/spec_decode/metrics.py``: ``num_accepted_tokens_per_pos / num_drafts``). Non-increasing in k."""
        return tuple(a / self.verify_steps for a in self.accepted_at)

    @property
    def conditional_rates(self) -> tuple[float | None, ...]:
        """Conditional rate per position: accepted at k / reached k, where reached 1 = verify steps and reached k =
        accepted at k - 1. None where no step reached k."""
        reached = (self.verify_steps, *self.accepted_at[:-1])
        return tuple(a / r if r > 0 else None for a, r in zip(self.accepted_at, reached, strict=True))


def position_acceptance(
    records: Sequence[RequestRecord],
    *,
    num_positions: int | None,
    counters_before: SpecCounters | None = None,
    counters_after: SpecCounters | None = None,
) -> PositionAcceptance | None:
    """Acceptance per draft position of one phase, from the first source that has it:

    1. the requests' ``meta_info.spec_correct_drafts_histogram`` (SGLang 0.5.17 and 0.5.23 send it on the final
       chunk; the reference server too): summed over the ok requests, accepted at k = Σ_{i >= k} histogram[i],
       verify steps = Σ histogram. Used only when every ok request with ``spec_verify_ct > 0`` has one.
    2. engine counters: Δ``accepted_per_position`` (vLLM ``vllm:spec_decode_num_accepted_tokens_per_pos_total``,
       the reference server's ``refserver:`` copy) over Δverify steps (``verify_calls``, else vLLM's ``drafts``).

    Worked example: histograms [1, 2, 1] and [0, 1, 0, 1] (n = 3) sum to [1, 3, 1, 1] over 6 steps -> accepted at
    1, 2, 3 = 5, 2, 1 -> rates 0.833, 0.333, 0.167; conditional 5/6 = 0.833, 2/5 = 0.4, 1/2 = 0.5.

    :param num_positions: draft tokens per verify step - 1 (the server's ``num_draft_tokens - 1`` on a chain);
        None: as many as the source reports.
    :returns: None when no source reports it or no verify step happened.
    """
    ok = [r for r in records if r.ok and r.spec_verify_ct]
    if ok and all(r.spec_correct_drafts_histogram for r in ok):
        width = max(len(r.spec_correct_drafts_histogram) for r in ok)
        total = [0] * width
        for r in ok:
            for i, n in enumerate(r.spec_correct_drafts_histogram):
                total[i] += n
        steps = sum(total)
        n_pos = max(num_positions or 0, width - 1)
        accepted = tuple(float(sum(total[k:])) for k in range(1, n_pos + 1))
        return PositionAcceptance(float(steps), accepted, HISTOGRAM_SOURCE) if steps > 0 else None
    if counters_before is None or counters_after is None or not counters_after.accepted_per_position:
        return None
    steps_delta = _delta(counters_after.verify_calls, counters_before.verify_calls)
    if steps_delta is None:
        steps_delta = _delta(counters_after.drafts, counters_before.drafts)
    if not steps_delta or steps_delta <= 0:
        return None
    before = counters_before.accepted_per_position
    after = counters_after.accepted_per_position
    n_pos = num_positions if num_positions is not None else len(after)
    accepted = tuple(
        (after[k] if k < len(after) else 0.0) - (before[k] if k < len(before) else 0.0) for k in range(n_pos)
    )
    return PositionAcceptance(steps_delta, accepted, f"counters {counters_after.per_position_series or 'per position'}")


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


def _stats_ms(values_s: Sequence[float]) -> tuple[float | None, ...]:
    """(mean, p50, p90, p95, p99) in ms with numpy's default linear interpolation, as bench_serving's
    ``np.percentile``; all None for no values."""
    if not values_s:
        return None, None, None, None, None
    arr = np.asarray(values_s, dtype=float) * 1000.0
    p50, p90, p95, p99 = (float(v) for v in np.percentile(arr, _PERCENTILES))
    return float(arr.mean()), p50, p90, p95, p99


def _latencies_ms(timings: Sequence[RequestTiming]) -> dict[str, list[float]]:
    """Per metric, the values its percentiles are taken over, in ms: TTFT, TPOT and E2E one per request (TPOT only
    for requests with > 1 token), ITL every per-token gap of every request pooled."""
    return {
        "ttft_ms": [t.ttft_s * 1000.0 for t in timings if t.ttft_s is not None],
        "itl_ms": [gap * 1000.0 for t in timings for gap in t.itl_s],
        "tpot_ms": [t.tpot_s * 1000.0 for t in timings if t.tpot_s is not None],
        "e2e_ms": [t.e2e_s * 1000.0 for t in timings],
    }


def good_requests(records: Sequence[RequestRecord], slo_ms: Mapping[str, float]) -> int:
    """How many of ``records`` succeeded and met every SLO (``ttft_ms``, ``tpot_ms``, ``e2e_ms``; a limit is met at
    or below it), as vLLM ``benchmarks/serve.py::calculate_metrics`` counts ``good_completed`` and SGLang 0.5.23
    ``benchmark/goodput.py::calculate_goodput`` its good requests: TPOT of a one-token response counts as 0; a
    request without a first token misses a TTFT limit.

    Worked example: SLO {ttft_ms: 200, tpot_ms: 20}; requests (TTFT 150, TPOT 18), (TTFT 250, TPOT 10), (TTFT 100,
    TPOT 25), one failed -> 1 good.
    """
    good = 0
    for record in records:
        if not record.ok:
            continue
        t = request_timing(record)
        observed = {
            "ttft_ms": t.ttft_s * 1000.0 if t.ttft_s is not None else float("inf"),
            "tpot_ms": (t.tpot_s or 0.0) * 1000.0,
            "e2e_ms": t.e2e_s * 1000.0,
        }
        if all(observed[key] <= limit for key, limit in slo_ms.items()):
            good += 1
    return good


def tail_evidence(
    phases: Sequence[tuple[Sequence[RequestRecord], float]],
    *,
    slo_ms: Mapping[str, float] | None = None,
    confidence: float = TAIL_CONFIDENCE,
) -> dict[str, dict[str, Any]]:
    """The evidence of the tail verdicts over one or more phases, their requests pooled (``RunMetrics.tails``).

    - ``<metric>_p<q>`` for TTFT, ITL, TPOT, E2E and q in 90, 95, 99: ``n`` values (requests; ITL: per-token gaps),
      ``estimate`` (numpy linear percentile of the pooled values), ``low`` / ``high`` the order-statistics bounds of
      the percentile at ``confidence`` each side (``core.order_stats``; None where n values cannot show one),
      ``confidence``.
    - ``goodput_per_s`` with ``slo_ms``: ``n`` requests sent, ``good`` (:func:`good_requests`), ``duration_s`` (the
      phases' summed wall time), ``phases``, ``estimate`` good / duration, ``low`` / ``high`` the Clopper-Pearson
      bounds of the good share times the t-bounds of the request rate (:func:`_goodput_evidence`; None with one
      phase: its rate has no interval), ``confidence``.

    The bounds treat the values as independent: requests in one phase share the server's load, and one request's
    ITL gaps are correlated (a speculative step's tokens share one gap), so for ITL they are optimistic; repeats and
    longer phases narrow them honestly.

    :param phases: (records, duration_s) per phase; failed records are left out of the latencies and count as not
        good.
    """
    out = _latency_evidence([r for records, _ in phases for r in records], confidence)
    if slo_ms:
        counts = [(len(records), good_requests(records, slo_ms), d) for records, d in phases]
        out.update(_goodput_evidence(counts, confidence))
    return out


def pooled_tails(
    phases: Sequence[tuple[Sequence[RequestRecord], Mapping[str, Any] | None]], confidence: float = TAIL_CONFIDENCE
) -> dict[str, dict[str, Any]]:
    """:func:`tail_evidence` over several measured phases, their requests pooled, from each phase's records and its
    own ``RunMetrics.tails`` (whose ``goodput_per_s`` entry carries the phase's good and sent requests and duration,
    so the SLO need not be known again). Goodput is pooled only when every phase has it.

    :param phases: (records, that phase's ``tails``) per phase.
    """
    out = _latency_evidence([r for records, _ in phases for r in records], confidence)
    goods = [(tails or {}).get("goodput_per_s") for _, tails in phases]
    if goods and all(isinstance(g, Mapping) for g in goods):
        counts = [(int(g["n"]), int(g["good"]), float(g["duration_s"])) for g in goods if g is not None]
        out.update(_goodput_evidence(counts, confidence))
    return out


def _latency_evidence(records: Sequence[RequestRecord], confidence: float) -> dict[str, dict[str, Any]]:
    timings = [request_timing(r) for r in records if r.ok]
    out: dict[str, dict[str, Any]] = {}
    for metric, values in _latencies_ms(timings).items():
        for q in TAIL_PERCENTILES:
            b = quantile_bounds(values, q / 100, confidence)
            out[f"{metric}_p{q}"] = {
                "n": b.n, "estimate": b.estimate, "low": b.low, "high": b.high, "confidence": confidence,
            }  # fmt: skip
    return out


def _goodput_evidence(phases: Sequence[tuple[int, int, float]], confidence: float) -> dict[str, dict[str, Any]]:
    """Goodput over the phases and its bounds: the Clopper-Pearson bounds of the pooled good share times the
    one-sided t-bounds of the request rate (the geometric mean of the phases' requests / s, on log values), each at
    ``confidence``, so the product holds at ``2 * confidence - 1`` or better (Bonferroni; 98 % at 99 %). The rate
    moves with the runner's load phase to phase; taken as exact, one lucky phase passed a floor the server misses.
    One phase has no rate interval: ``low`` / ``high`` None (the verdict is undecided; 2 repeats bound it).

    :param phases: (requests sent, good requests, duration s) per phase.
    """
    n = sum(sent for sent, _, _ in phases)
    good = sum(g for _, g, _ in phases)
    duration_s = sum(d for _, _, d in phases)
    if not n or duration_s <= 0:
        return {}
    share_low, share_high = share_bounds(good, n, confidence)
    rates = [sent / d for sent, _, d in phases if sent and d > 0]
    low = high = None
    if len(rates) >= 2:
        from scipy.stats import t

        logs = np.log(rates)
        half = float(t.ppf(confidence, len(rates) - 1)) * float(logs.std(ddof=1)) / np.sqrt(len(rates))
        centre = float(logs.mean())
        low, high = share_low * float(np.exp(centre - half)), share_high * float(np.exp(centre + half))
    return {
        "goodput_per_s": {
            "n": n, "good": good, "duration_s": duration_s, "phases": len(rates), "estimate": good / duration_s,
            "low": low, "high": high, "confidence": confidence,
        }
    }  # fmt: skip


def _delta(after: float | None, before: float | None) -> float | None:
    if after is None or before is None:
        return None
    return after - before


def _server_accept(before: SpecCounters | None, after: SpecCounters | None) -> float | None:
    """Accept length from counter deltas in the engine's own definition (``RunMetrics.accept_length_native``); None
    where a counter is missing or did not move.

    SGLang: Δ``sglang:generation_tokens_total`` / Δ``sglang:spec_verify_calls_total`` (counts each request's prefill
    token, like ``meta_info.spec_accept_length``). vLLM: 1 + Δaccepted_tokens / Δdrafts
    (``vllm/v1/spec_decode/metrics.py``), which is also ``metric_table.ACCEPT_LENGTH_DEFINITION``.
    """
    if before is None or after is None:
        return None
    verify = _delta(after.verify_calls, before.verify_calls)
    generated = _delta(after.generation_tokens, before.generation_tokens)
    drafts = _delta(after.drafts, before.drafts)
    accepted = _delta(after.accepted_tokens, before.accepted_tokens)
    if verify is not None and generated is not None and verify > 0:
        return generated / verify
    if drafts is not None and accepted is not None and drafts > 0:
        return 1.0 + accepted / drafts
    return None


def phase_metrics(
    records: Sequence[RequestRecord],
    duration_s: float,
    *,
    num_steps: int | None,
    speculative: bool,
    counters_before: SpecCounters | None = None,
    counters_after: SpecCounters | None = None,
    max_error_rate: float = 0.0,
    scheduler_accept_length: float | None = None,
    cache_reset: str | None = None,
    categories: Sequence[str | None] | None = None,
    slo_ms: Mapping[str, float] | None = None,
) -> RunMetrics:
    """Aggregate one measured phase.

    - output_tok_s = Σ completion_tokens of ok requests / ``duration_s`` (SGLang ``output_throughput``).
    - TTFT, TPOT, e2e: per ok request (:func:`request_timing`), then mean / p50 / p90 / p95 / p99 in ms (numpy
      linear percentiles). ITL: all per-token gaps of all ok requests pooled, as ``calculate_metrics`` pools
      ``itls``. decode tok/s: median over ok requests. ``tails``: :func:`tail_evidence` of this phase.
    - input_tok_s = Σprompt_tokens of ok requests / ``duration_s`` (the server's prompt counts; bench_serving sums
      its dataset's prompt lengths), total_tok_s = (input + output tokens) / ``duration_s``, requests_per_s = ok
      requests / ``duration_s`` (``calculate_metrics``' ``input_throughput``, ``total_throughput``,
      ``request_throughput``).
    - goodput_per_s (with ``slo_ms``) = :func:`good_requests` / ``duration_s``; slo_attainment = good / all
      requests sent.
    - accept_length (None unless ``speculative``), ``metric_table.ACCEPT_LENGTH_DEFINITION``:
      1 + Σspec_num_correct_drafts / Σspec_verify_ct over ok requests that report ``spec_verify_ct > 0`` (only this
      phase, not the server's lifetime; Σ(completion_tokens - 1) / Σspec_verify_ct when a request lacks the drafts
      field); when no request reports it, the counters' value (``accept_length_source`` says which).
      ``accept_length_native`` is the engine's own figure beside it: SGLang's and the reference server's per-request
      ``spec_accept_length`` convention Σcompletion_tokens / Σspec_verify_ct (counts the prefill token), vLLM's
      1 + accepted / drafts (the same as ``accept_length``).
    - accept_rate (None unless ``speculative`` and ``num_steps`` is known), ``metric_table.ACCEPT_RATE_DEFINITION``.
    - server_accept_length from ``counters_after - counters_before`` in the native definition
      (:func:`_server_accept`), and ``scheduler_accept_length`` as given (the engine's independent figure, in the
      convention), both for :func:`cross_check`.
    - accept_rate_at / accept_rate_cond_at (empty unless ``speculative``): :func:`position_acceptance` over
      ``num_steps`` positions (the most drafts one verify step can accept, on a chain and on a tree).

    Worked example: two ok requests, 8 and 4 tokens, spec_verify_ct 4 and 2, spec_num_correct_drafts 3 and 1,
    phase 0.5 s, num_steps 3 -> output_tok_s 12 / 0.5 = 24; accept_length 1 + 4 / 6 = 1.667; native 12 / 6 = 2.0;
    accept_rate 0.667 / 3 = 0.222.

    :param records: the measured phase's records (warmup excluded), failed ones included.
    :param duration_s: phase wall time in seconds (``PhaseResult.duration_s``), > 0.
    :param num_steps: the server's effective ``speculative_num_steps`` (draft depth; None if unknown).
    :param max_error_rate: the workload's ``max_error_rate``; the fraction of failed requests may not exceed it.
    :param scheduler_accept_length: ``Engine.scheduler_accept_length`` read after the phase, when the prefix cache
        (and with it the scheduler's totals) was reset before it; else None.
    :param cache_reset: ``Engine.reset_prefix_cache``'s note, recorded as is.
    :param categories: each record's prompt category (``RequestSpec.category``), aligned with ``records``; gives
        ``by_category`` (:func:`category_metrics`).
    :param slo_ms: ``workload.slo`` (``Slo.as_ms``): gives ``goodput_per_s`` and ``slo_attainment``.
    :raises ServerError: no successful request, or failed/total > ``max_error_rate``; the message gives the counts
        and the first error.
    :raises ValueError: ``duration_s <= 0``.
    """
    if duration_s <= 0:
        raise ValueError(f"phase_metrics: duration_s must be > 0, got {duration_s}")
    ok, failed = _ok_within_error_rate(records, max_error_rate)
    total = len(records)
    timings = [request_timing(r) for r in ok]
    decode = [t.decode_tok_s for t in timings if t.decode_tok_s is not None]
    output_tokens = sum(r.completion_tokens for r in ok)
    input_tokens = sum(r.prompt_tokens for r in ok)
    good = good_requests(records, slo_ms) if slo_ms else None
    server_length = _server_accept(counters_before, counters_after)
    accept = _AcceptFigures.of(ok, server_length, num_steps) if speculative else _AcceptFigures()
    positions = (
        position_acceptance(
            ok, num_positions=num_steps, counters_before=counters_before, counters_after=counters_after
        )
        if speculative
        else None
    )

    return RunMetrics(
        num_requests=total,
        num_ok=len(ok),
        num_errors=len(failed),
        duration_s=duration_s,
        output_tokens=output_tokens,
        output_tok_s=output_tokens / duration_s,
        accept_length=accept.length,
        accept_rate=accept.rate,
        **_latency_fields(timings),
        input_tokens=input_tokens,
        input_tok_s=input_tokens / duration_s,
        total_tok_s=(input_tokens + output_tokens) / duration_s,
        requests_per_s=len(ok) / duration_s,
        goodput_per_s=good / duration_s if good is not None else None,
        slo_attainment=good / total if good is not None else None,
        tails=tail_evidence([(records, duration_s)], slo_ms=slo_ms),
        decode_tok_s_p50=float(np.median(decode)) if decode else None,
        server_accept_length=server_length,
        accept_length_source=accept.source,
        accept_length_native=accept.native,
        scheduler_accept_length=scheduler_accept_length if speculative else None,
        cache_reset=cache_reset,
        by_category=category_metrics(
            records, categories, duration_s=duration_s, num_steps=num_steps, speculative=speculative
        ),
        draft_ms_per_cycle=_per_cycle_ms(counters_before, counters_after, "draft_seconds"),
        verify_ms_per_cycle=_per_cycle_ms(counters_before, counters_after, "verify_seconds"),
        accept_rate_at=positions.rates if positions else (),
        accept_rate_cond_at=positions.conditional_rates if positions else (),
        accept_position_source=positions.source if positions else None,
    )


#: Event-loop lag p99 above this fraction of the ITL p50 (TPOT p50 when ITL is unknown) makes
#: :func:`client_check` report: arrivals then wait for the client long enough to bend TTFT and ITL.
CLIENT_LAG_FRACTION = 0.10
#: Client CPU per worker process (cores) from which that lag is put down to the client itself; below it the client
#: was mostly idle and waited for a core that the server or other processes held. The same half core per worker
#: above which ``client.auto_workers`` adds a worker (``client.WORKER_CPU_TARGET``).
CLIENT_BUSY_CORES = 0.5


def _ok_within_error_rate(
    records: Sequence[RequestRecord], max_error_rate: float
) -> tuple[list[RequestRecord], list[RequestRecord]]:
    """(ok records, failed records) of a phase.

    :raises ServerError: none succeeded, or failed/total > ``max_error_rate`` (the counts and the first error).
    """
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
    return ok, failed


def _latency_fields(timings: Sequence[RequestTiming]) -> dict[str, Any]:
    """``RunMetrics`` fields ``ttft_ms_mean`` ... ``e2e_ms_p99`` (mean, p50, p90, p95, p99 in ms, float or None) of the
    ok requests' timings; ITL pools every per-token gap of every request, as ``calculate_metrics`` pools ``itls``."""
    samples = {
        "ttft": [t.ttft_s for t in timings if t.ttft_s is not None],
        "itl": [gap for t in timings for gap in t.itl_s],
        "tpot": [t.tpot_s for t in timings if t.tpot_s is not None],
        "e2e": [t.e2e_s for t in timings],
    }
    fields: dict[str, Any] = {}
    for name, values in samples.items():
        for stat, value in zip(("mean", "p50", "p90", "p95", "p99"), _stats_ms(values), strict=True):
            fields[f"{name}_ms_{stat}"] = value
    return fields


@dataclass(frozen=True, slots=True)
class _AcceptFigures:
    """A speculative phase's accept length (ours), the engine's own (``native``), the accept rate, and where they
    came from (``client``: per-request fields; ``counters``: the server's counters); all None without speculation."""

    length: float | None = None
    native: float | None = None
    rate: float | None = None
    source: str | None = None

    @classmethod
    def of(cls, ok: Sequence[RequestRecord], server_length: float | None, num_steps: int | None) -> _AcceptFigures:
        """From the ok requests that report ``spec_verify_ct``, else ``server_length`` (:func:`phase_metrics`'
        definitions)."""
        verified = [r for r in ok if r.spec_verify_ct]
        if verified:
            steps = sum(r.spec_verify_ct or 0 for r in verified)
            emitted = sum(r.completion_tokens for r in verified)
            if all(r.spec_num_correct_drafts is not None for r in verified):
                accepted = sum(r.spec_num_correct_drafts or 0 for r in verified)
            else:  # older SGLang: every token after the prefill one came out of a verify step
                accepted = emitted - len(verified) - steps
            length, native, source = 1.0 + accepted / steps, emitted / steps, "client"
        elif server_length is not None:
            # vLLM: no per-request fields; its counters' figure is already in the convention.
            length, native, source = server_length, server_length, "counters"
        else:
            return cls()
        return cls(length, native, (length - 1.0) / num_steps if num_steps else None, source)


def _lag_over(metrics: RunMetrics) -> tuple[float, str, float] | None:
    """(lag p99 ms, "ITL" or "TPOT", its p50 ms) when the lag is above ``CLIENT_LAG_FRACTION`` of it, else None."""
    lag = metrics.client_lag_ms_p99
    ref_name, ref = ("ITL", metrics.itl_ms_p50) if metrics.itl_ms_p50 else ("TPOT", metrics.tpot_ms_p50)
    if lag is None or not ref or lag <= CLIENT_LAG_FRACTION * ref:
        return None
    return lag, ref_name, ref


def client_overloaded(metrics: RunMetrics) -> bool:
    """Whether the client itself was too busy: the event-loop lag is over the limit (:func:`client_check`) and the
    client used at least ``CLIENT_BUSY_CORES`` per worker process (or its CPU was not recorded).

    Worked example: lag p99 2.7 ms, ITL p50 20 ms (limit 2.0 ms): 0.95 cores in 1 worker -> True; 0.07 cores ->
    False (the machine was busy, not the client).
    """
    if _lag_over(metrics) is None:
        return False
    cpu = metrics.client_cpu_cores
    return cpu is None or cpu / (metrics.client_workers or 1) >= CLIENT_BUSY_CORES


def client_check(metrics: RunMetrics) -> str | None:
    """Whether the measuring client's TTFT/ITL can be trusted: its event loop must not lag behind the stream.

    :returns: None when ``client_lag_ms_p99 <= CLIENT_LAG_FRACTION * itl_ms_p50`` (``tpot_ms_p50`` when ITL is
        unknown) or either is missing; else one line. When the client itself was busy (:func:`client_overloaded`):
        ``client overloaded: event-loop lag p99 1.20 ms > 10% of ITL p50 5.00 ms (client CPU 0.97 cores, 1 worker
        process); TTFT and ITL include the client's own delay; fix: raise workload.client_workers or lower
        workload.concurrency``. When it was mostly idle, the CPU went elsewhere: ``machine busy: event-loop lag p99
        2.70 ms > 10% of ITL p50 20.00 ms while the client used 0.07 cores (1 worker process); the server or other
        processes took the CPU, so TTFT and ITL include waits for a free core; fix: ...``.

    Worked example: lag p99 0.8 ms, ITL p50 5.0 ms -> 0.8 > 0.5, reported (as "client overloaded" at 0.9 client
    cores, "machine busy" at 0.1); lag p99 0.3 ms -> None.
    """
    over = _lag_over(metrics)
    if over is None:
        return None
    lag, ref_name, ref = over
    workers = metrics.client_workers or 1
    procs = f"{workers} worker process{'es' if workers > 1 else ''}"
    head = f"event-loop lag p99 {lag:.2f} ms > {CLIENT_LAG_FRACTION:.0%} of {ref_name} p50 {ref:.2f} ms"
    cpu = metrics.client_cpu_cores
    if not client_overloaded(metrics) and cpu is not None:
        return (
            f"machine busy: {head} while the client used {cpu:.2f} cores ({procs}); the server or other processes "
            "took the CPU, so TTFT and ITL include waits for a free core; fix: run fewer jobs beside the benchmark, "
            "or the server on another machine"
        )
    shown = f"client CPU {cpu:.2f} cores, " if cpu is not None else ""
    return (
        f"client overloaded: {head} ({shown}{procs}); TTFT and ITL include the client's own delay; fix: raise "
        "workload.client_workers or lower workload.concurrency"
    )


def _per_cycle_ms(before: SpecCounters | None, after: SpecCounters | None, name: str) -> float | None:
    """Δ``name`` seconds / Δverify calls, in ms (None when either is missing or no cycle ran)."""
    if before is None or after is None:
        return None
    seconds = _delta(getattr(after, name), getattr(before, name))
    cycles = _delta(after.verify_calls, before.verify_calls)
    if seconds is None or not cycles or cycles <= 0:
        return None
    return seconds / cycles * 1000.0


#: The figures ``RunMetrics.by_category`` holds per category: the per-request ones (throughput belongs to the
#: whole phase, whose requests of all categories share the server).
CATEGORY_FIELDS = (
    "num_requests",
    "num_ok",
    "accept_length",
    "accept_rate",
    "ttft_ms_p50",
    "itl_ms_p50",
    "tpot_ms_p50",
    "decode_tok_s_p50",
    "accept_rate_at",
)
#: The category of prompts without one, in a workload where other prompts have one.
UNCATEGORIZED = "uncategorized"


def category_metrics(
    records: Sequence[RequestRecord],
    categories: Sequence[str | None] | None,
    *,
    duration_s: float,
    num_steps: int | None,
    speculative: bool,
) -> dict[str, dict[str, Any]]:
    """:data:`CATEGORY_FIELDS` per prompt category, each from :func:`phase_metrics` over that category's requests (so
    every definition is the run's own, e.g. accept length = 1 + Σaccepted drafts / Σverify steps of the category).

    Example: records of categories ["code", "prose", "code"] -> ``{"code": {...2 requests...}, "prose": {...}}``.

    :param categories: aligned with ``records``; None or all None -> ``{}``.
    :returns: category -> field -> value (sorted by category); a category whose requests all failed has only
        ``num_requests`` and ``num_ok`` 0.
    """
    if not categories or all(c is None for c in categories):
        return {}
    groups: dict[str, list[RequestRecord]] = {}
    for record, category in zip(records, categories, strict=True):
        groups.setdefault(category or UNCATEGORIZED, []).append(record)
    out: dict[str, dict[str, Any]] = {}
    for category in sorted(groups):
        group = groups[category]
        if not any(r.ok for r in group):
            out[category] = {"num_requests": len(group), "num_ok": 0}
            continue
        run = phase_metrics(group, duration_s, num_steps=num_steps, speculative=speculative, max_error_rate=1.0)
        out[category] = {name: getattr(run, name) for name in CATEGORY_FIELDS}
    return out


def cross_check(metrics: RunMetrics) -> str | None:
    """Compare the client-side accept length with the engine's other figures.

    - engine counters (``server_accept_length``, native definition) against ``accept_length_native``, within
      :data:`CROSS_CHECK_TOLERANCE`: on SGLang they are summed from the same per-request fields, so this catches a
      client that misread a response, not a server that miscounts;
    - the scheduler's own average (``scheduler_accept_length``, SGLang's ``avg_spec_accept_length`` after the
      ``/flush_cache``) against ``accept_length``, within :data:`SCHEDULER_CHECK_TOLERANCE`: counted by the
      scheduler, an independent source.

    :returns: None when every available figure agrees (or the client value itself came from the counters); else
        one line per disagreement joined by ``"; "``, e.g. ``accept length disagrees: client 2.00
        (Σcompletion_tokens/Σspec_verify_ct) vs engine counters 2.50 (-20.0%, tolerance 2%): metrics bug, not a
        regression``.
    """
    if metrics.accept_length_source != "client":
        return None
    problems = []
    for label, client, other, tolerance in (
        ("Σcompletion_tokens/Σspec_verify_ct", metrics.accept_length_native, metrics.server_accept_length,
         ("engine counters", CROSS_CHECK_TOLERANCE)),
        ("1 + accepted/verify steps", metrics.accept_length, metrics.scheduler_accept_length,
         ("scheduler avg_spec_accept_length", SCHEDULER_CHECK_TOLERANCE)),
    ):  # fmt: skip
        if client is None or other is None or other <= 0:
            continue
        diff = (client - other) / other
        if abs(diff) > tolerance[1]:
            problems.append(
                f"accept length disagrees: client {client:.2f} ({label}) vs {tolerance[0]} {other:.2f} "
                f"({diff:+.1%}, tolerance {tolerance[1]:.0%}): metrics bug, not a regression"
            )
    return "; ".join(problems) or None
