"""Tests of pytest_specdec.measure.metrics: every number below is computed by hand in the comment beside it."""

from __future__ import annotations

import dataclasses

import pytest

from pytest_specdec.core.errors import ServerError
from pytest_specdec.core.metric_table import METRICS, is_exact
from pytest_specdec.core.records import RequestRecord, RunMetrics
from pytest_specdec.engines.base import SpecCounters
from pytest_specdec.measure.metrics import (
    client_check,
    client_overloaded,
    cross_check,
    phase_metrics,
    position_acceptance,
    request_timing,
)


def ok_record(start: float, chunks: list[tuple[float, int]], end: float, **spec: float) -> RequestRecord:
    return RequestRecord(
        ok=True,
        error=None,
        start_s=start,
        end_s=end,
        prompt_tokens=5,
        completion_tokens=sum(n for _, n in chunks),
        chunk_times_s=tuple(t for t, _ in chunks),
        chunk_tokens=tuple(n for _, n in chunks),
        **spec,  # type: ignore[arg-type]
    )


def failed_record(error: str = "boom") -> RequestRecord:
    return RequestRecord(ok=False, error=error, start_s=0.0, end_s=0.5, prompt_tokens=0, completion_tokens=0)


# R1: start 0 s; 1 token at 100 ms, 3 at 130 ms, 4 at 170 ms; [DONE] 170 ms; 8 tokens, 4 verify steps.
R1 = ok_record(
    0.0,
    [(0.100, 1), (0.130, 3), (0.170, 4)],
    0.170,
    spec_verify_ct=4,
    spec_num_correct_drafts=3,
    spec_num_proposed_drafts=12,
)
# R2: start 1 s; 1 token at 1.200 s, 2 at 1.260 s, 1 at 1.300 s; [DONE] 1.300 s; 4 tokens, 2 verify steps.
R2 = ok_record(
    1.0,
    [(1.200, 1), (1.260, 2), (1.300, 1)],
    1.300,
    spec_verify_ct=2,
    spec_num_correct_drafts=1,
    spec_num_proposed_drafts=6,
)


def test_request_timing_worked_example() -> None:
    t = request_timing(R1)
    assert t.ttft_s == pytest.approx(0.100)  # 100 - 0 ms
    assert t.itl_s == pytest.approx([0.010] * 7)  # 30 ms / 3 x3, 40 ms / 4 x4
    assert t.e2e_s == pytest.approx(0.170)
    assert t.tpot_s == pytest.approx(0.010)  # (170 - 100) ms / 7
    assert t.decode_tok_s == pytest.approx(100.0)  # 7 / 0.070 s


def test_single_token_request_has_no_tpot_or_itl() -> None:
    t = request_timing(ok_record(0.0, [(0.05, 1)], 0.06))
    assert (t.ttft_s, t.itl_s, t.tpot_s, t.decode_tok_s) == (pytest.approx(0.05), (), None, None)


def test_summarize_exact_values_and_failed_requests_excluded() -> None:
    m = phase_metrics([R1, failed_record(), R2], 2.0, num_steps=3, speculative=True, max_error_rate=0.5)
    assert (m.num_requests, m.num_ok, m.num_errors, m.output_tokens) == (3, 2, 1, 12)
    assert m.output_tok_s == pytest.approx(6.0)  # 12 tokens / 2 s
    # TTFT [100, 200] ms: mean 150, p50 150, p90 100 + 0.9*100 = 190, p99 199.
    assert (m.ttft_ms_mean, m.ttft_ms_p50, m.ttft_ms_p90, m.ttft_ms_p99) == pytest.approx((150, 150, 190, 199))
    # ITL pooled: R1 10 x7; R2 60 ms / 2 = 30 x2, 40 ms / 1 = 40 -> sorted 10 x7, 30, 30, 40.
    # mean 170/10 = 17; p50 at rank 4.5 -> 10; p90 at 8.1 -> 30 + 0.1*10 = 31; p99 at 8.91 -> 39.1.
    assert (m.itl_ms_mean, m.itl_ms_p50, m.itl_ms_p90, m.itl_ms_p99) == pytest.approx((17, 10, 31, 39.1))
    # TPOT [70/7 = 10, 100/3 = 33.333] ms: p90 10 + 0.9*23.333 = 31, p99 33.1.
    assert (m.tpot_ms_mean, m.tpot_ms_p50, m.tpot_ms_p90, m.tpot_ms_p99) == pytest.approx((65 / 3, 65 / 3, 31, 33.1))
    # e2e [170, 300] ms: p90 170 + 0.9*130 = 287, p99 298.7.
    assert (m.e2e_ms_mean, m.e2e_ms_p50, m.e2e_ms_p90, m.e2e_ms_p99) == pytest.approx((235, 235, 287, 298.7))
    assert m.decode_tok_s_p50 == pytest.approx(65.0)  # median(7/0.07 = 100, 3/0.1 = 30)
    assert m.accept_length == pytest.approx(1 + 4 / 6)  # 1 + accepted drafts (3 + 1) / verify steps (4 + 2)
    assert m.accept_length_native == pytest.approx(2.0)  # SGLang's meta_info convention (8 + 4) / (4 + 2)
    assert m.accept_rate == pytest.approx((10 / 6 - 1) / 3)  # accepted drafts per step / num_steps
    assert m.accept_length_source == "client"
    assert (m.server_accept_length, m.scheduler_accept_length, m.cache_reset) == (None, None, None)


def test_not_speculative_has_no_accept_metrics() -> None:
    m = phase_metrics([R1, R2], 2.0, num_steps=3, speculative=False)
    assert (m.accept_length, m.accept_rate, m.accept_length_source) == (None, None, None)


def test_accept_rate_is_per_drafted_position_not_per_tree_node() -> None:
    """Issue 14.8: one accept-rate definition; with topk > 1 (8 draft tokens for 3 steps) it divides by the 3 drafted
    positions, not by the 7 non-root tree nodes as SGLang's spec_accept_rate does."""
    # 3 verify steps accepting 6 drafts -> accept length 1 + 6 / 3 = 3; (3 - 1) / 3 steps = 0.667, not 6 / 21.
    r = ok_record(0.0, [(0.1, 1), (0.2, 5), (0.3, 4)], 0.3, spec_verify_ct=3, spec_num_correct_drafts=6,
                  spec_num_proposed_drafts=21)  # fmt: skip
    m = phase_metrics([r], 1.0, num_steps=3, speculative=True)
    assert (m.accept_length, m.accept_rate) == pytest.approx((3.0, 2 / 3))
    assert phase_metrics([r], 1.0, num_steps=None, speculative=True).accept_rate is None


def test_error_rate_above_limit_raises() -> None:
    with pytest.raises(ServerError) as excinfo:
        phase_metrics([R1, failed_record("HTTP 500"), R2], 2.0, num_steps=3, speculative=True, max_error_rate=0.2)
    assert str(excinfo.value) == (
        "1 of 3 requests failed (error rate 0.33 > max_error_rate 0.2); first error: HTTP 500"
    )


def test_zero_successful_requests_raises() -> None:
    with pytest.raises(ServerError) as excinfo:
        phase_metrics(
            [failed_record("ConnectError"), failed_record()],
            1.0,
            num_steps=None,
            speculative=False,
            max_error_rate=1.0,
        )
    assert str(excinfo.value) == "no successful requests: 2 of 2 failed; first error: ConnectError"
    with pytest.raises(ServerError, match=r"^no successful requests: 0 of 0 failed$"):
        phase_metrics([], 1.0, num_steps=None, speculative=False)


def test_nonpositive_duration_is_a_bug() -> None:
    with pytest.raises(ValueError, match=r"^phase_metrics: duration_s must be > 0, got 0.0$"):
        phase_metrics([R1], 0.0, num_steps=None, speculative=False)


def test_sglang_counters_and_cross_check() -> None:
    before = SpecCounters(generation_tokens=100.0, verify_calls=50.0)
    # Δgeneration 12 / Δverify 6 = 2.0: agrees with the client's native (8 + 4) / (4 + 2).
    m = phase_metrics(
        [R1, R2],
        2.0,
        num_steps=3,
        speculative=True,
        counters_before=before,
        counters_after=SpecCounters(generation_tokens=112.0, verify_calls=56.0),
    )
    assert m.server_accept_length == pytest.approx(2.0)
    assert cross_check(m) is None
    # Δgeneration 40 / Δverify 10 = 4.0 vs client 2.0: -50 %.
    m = phase_metrics(
        [R1, R2],
        2.0,
        num_steps=3,
        speculative=True,
        counters_before=before,
        counters_after=SpecCounters(generation_tokens=140.0, verify_calls=60.0),
    )
    assert m.server_accept_length == pytest.approx(4.0)
    assert cross_check(m) == (
        "accept length disagrees: client 2.00 (Σcompletion_tokens/Σspec_verify_ct) vs engine counters 4.00 (-50.0%, "
        "tolerance 2%): metrics bug, not a regression"
    )


def test_older_sglang_without_drafts_field_counts_emitted_tokens() -> None:
    old = [dataclasses.replace(r, spec_num_correct_drafts=None) for r in (R1, R2)]
    m = phase_metrics(old, 2.0, num_steps=3, speculative=True)
    assert m.accept_length == pytest.approx(1 + (12 - 2 - 6) / 6)  # 1 + (Σ(completion - 1) - Σverify) / Σverify


def test_cross_check_tolerances() -> None:
    base = phase_metrics([R1, R2], 2.0, num_steps=3, speculative=True)  # client 1.667, native 2.0
    assert cross_check(dataclasses.replace(base, server_accept_length=1.97)) is None  # +1.5 %
    assert cross_check(dataclasses.replace(base, server_accept_length=1.95)) is not None  # +2.6 %
    # The scheduler's own figure (independent, folded every 40 iterations) gets 5 %.
    assert cross_check(dataclasses.replace(base, scheduler_accept_length=1.60)) is None  # +4.2 %
    assert cross_check(dataclasses.replace(base, scheduler_accept_length=2.0)) == (
        "accept length disagrees: client 1.67 (1 + accepted/verify steps) vs scheduler avg_spec_accept_length "
        "2.00 (-16.7%, tolerance 5%): metrics bug, not a regression"
    )


def test_vllm_counters_give_accept_length_and_rate() -> None:
    # No per-request spec fields (vLLM): 1 + Δaccepted 15 / Δdrafts 10 = 2.5; rate 1.5 / 3 steps = 0.5.
    plain = [dataclasses.replace(R1, spec_verify_ct=None, spec_num_correct_drafts=None, spec_num_proposed_drafts=None)]
    m = phase_metrics(
        plain,
        1.0,
        num_steps=3,
        speculative=True,
        counters_before=SpecCounters(drafts=10.0, draft_tokens=30.0, accepted_tokens=15.0),
        counters_after=SpecCounters(drafts=20.0, draft_tokens=60.0, accepted_tokens=30.0),
    )
    assert (m.accept_length, m.accept_rate, m.accept_length_native) == pytest.approx((2.5, 0.5, 2.5))
    assert m.server_accept_length == pytest.approx(2.5)
    assert m.accept_length_source == "counters"
    assert cross_check(m) is None


def test_metrics_table_matches_run_metrics_fields() -> None:
    assert list(METRICS) == [
        "output_tok_s",
        "accept_length",
        "accept_rate",
        "ttft_ms",
        "itl_ms",
        "tpot_ms",
        "e2e_ms",
        "input_tok_s",
        "total_tok_s",
        "requests_per_s",
        "goodput_per_s",
        "slo_attainment",
        "decode_tok_s",
    ]
    run_fields = {f.name for f in dataclasses.fields(RunMetrics)}
    for spec in METRICS.values():
        assert set(spec.fields) <= run_fields, spec.name
        assert spec.formula and spec.source and spec.unit
    assert METRICS["ttft_ms"].fields == ("ttft_ms_mean", "ttft_ms_p50", "ttft_ms_p90", "ttft_ms_p95", "ttft_ms_p99")
    assert [n for n, s in METRICS.items() if s.higher_is_better] == [
        "output_tok_s",
        "accept_length",
        "accept_rate",
        "input_tok_s",
        "total_tok_s",
        "requests_per_s",
        "goodput_per_s",
        "slo_attainment",
        "decode_tok_s",
    ]


def test_real_sglang_0_5_17_batch_in_the_convention_and_natively() -> None:
    """Issue 12.4 on what real SGLang 0.5.17 returned (tests/data/sglang/0.5.17/eagle3.batch.json, 16 requests x 64
    tokens): the accept length is 1 + Σspec_num_correct_drafts / Σspec_verify_ct (the scheduler's convention; the
    last step's drafts past max_new_tokens are counted, as the histogram shows), the native figure is SGLang's
    meta_info spec_accept_length convention, and the scheduler's own lifetime average read after the batch
    (/server_info, which also holds three earlier requests) agrees within the scheduler tolerance."""
    import json
    from pathlib import Path

    data = Path(__file__).parent / "data" / "sglang" / "0.5.17"
    batch = json.loads((data / "eagle3.batch.json").read_text())["requests"]
    records = []
    for response in batch:
        meta = response["meta_info"]
        histogram = meta["spec_correct_drafts_histogram"]
        assert sum(k * n for k, n in enumerate(histogram)) == meta["spec_num_correct_drafts"]
        records.append(
            RequestRecord(ok=True, error=None, start_s=0.0, end_s=1.0, prompt_tokens=meta["prompt_tokens"],
                          completion_tokens=meta["completion_tokens"], spec_verify_ct=meta["spec_verify_ct"],
                          spec_num_correct_drafts=meta["spec_num_correct_drafts"])  # fmt: skip
        )
    endpoints = json.loads((data / "eagle3.endpoints.json").read_text())
    info = json.loads(endpoints["/server_info (after batch)"]["body"])
    scheduler = info["internal_states"][0]["avg_spec_accept_length"]
    m = phase_metrics(records, 1.0, num_steps=3, speculative=True, scheduler_accept_length=scheduler)
    assert (m.accept_length, m.accept_length_native) == pytest.approx((1 + 664 / 368, 1024 / 368))  # 2.804, 2.783
    assert m.accept_rate == pytest.approx(664 / 368 / 3)  # 0.601
    assert scheduler == pytest.approx(2.8337, abs=1e-4)
    assert cross_check(m) is None


def test_client_check_reports_lag_above_a_tenth_of_the_itl() -> None:
    # ITL p50 10 ms (R1/R2 above): lag p99 0.9 ms is under 1.0 ms, 1.5 ms over it; TPOT stands in without ITL.
    base = phase_metrics([R1, R2], 2.0, num_steps=3, speculative=True)
    itl = base.itl_ms_p50
    assert itl is not None
    calm = dataclasses.replace(base, itl_ms_p50=10.0, client_lag_ms_p99=0.9, client_cpu_cores=0.9, client_workers=1)
    assert client_check(calm) is None and not client_overloaded(calm)
    lagging = dataclasses.replace(calm, client_lag_ms_p99=1.5)
    assert client_check(lagging) == (
        "client overloaded: event-loop lag p99 1.50 ms > 10% of ITL p50 10.00 ms (client CPU 0.90 cores, 1 worker "
        "process); TTFT and ITL include the client's own delay; fix: raise workload.client_workers or lower "
        "workload.concurrency"
    )
    assert client_overloaded(lagging)
    # 1.2 cores over 2 workers: 0.6 each, at or above half a core per worker.
    no_itl = dataclasses.replace(calm, itl_ms_p50=None, tpot_ms_p50=4.0, client_lag_ms_p99=0.5, client_cpu_cores=1.2,
                                 client_workers=2)  # fmt: skip
    assert client_check(no_itl) == (
        "client overloaded: event-loop lag p99 0.50 ms > 10% of TPOT p50 4.00 ms (client CPU 1.20 cores, 2 worker "
        "processes); TTFT and ITL include the client's own delay; fix: raise workload.client_workers or lower "
        "workload.concurrency"
    )
    assert client_check(dataclasses.replace(calm, client_lag_ms_p99=None)) is None  # not measured
    unknown_cpu = dataclasses.replace(lagging, client_cpu_cores=None)  # CPU not recorded: as before, the client's
    assert client_overloaded(unknown_cpu)
    assert client_check(unknown_cpu) == (
        "client overloaded: event-loop lag p99 1.50 ms > 10% of ITL p50 10.00 ms (1 worker process); TTFT and ITL "
        "include the client's own delay; fix: raise workload.client_workers or lower workload.concurrency"
    )


def test_lag_with_an_idle_client_is_a_busy_machine_not_an_overloaded_client() -> None:
    # Seen on the 2-core machine: lag p99 2.7 ms against ITL p50 20 ms (limit 2.0 ms) while the client used 0.07
    # cores: the lag is the wait for a core the server and other processes held.
    base = phase_metrics([R1, R2], 2.0, num_steps=3, speculative=True)
    busy = dataclasses.replace(base, itl_ms_p50=20.0, client_lag_ms_p99=2.7, client_cpu_cores=0.07, client_workers=1)
    assert not client_overloaded(busy)
    assert client_check(busy) == (
        "machine busy: event-loop lag p99 2.70 ms > 10% of ITL p50 20.00 ms while the client used 0.07 cores (1 "
        "worker process); the server or other processes took the CPU, so TTFT and ITL include waits for a free "
        "core; fix: run fewer jobs beside the benchmark, or the server on another machine"
    )
    # 0.9 cores over 2 workers is 0.45 each: under half a core per worker, still the machine.
    spread = dataclasses.replace(busy, client_cpu_cores=0.9, client_workers=2)
    assert not client_overloaded(spread)
    assert (client_check(spread) or "").startswith("machine busy: event-loop lag p99 2.70 ms")
    # The same lag with the client near a full core is the client's own.
    own = dataclasses.replace(busy, client_cpu_cores=0.95)
    assert client_overloaded(own)
    assert client_check(own) == (
        "client overloaded: event-loop lag p99 2.70 ms > 10% of ITL p50 20.00 ms (client CPU 0.95 cores, 1 worker "
        "process); TTFT and ITL include the client's own delay; fix: raise workload.client_workers or lower "
        "workload.concurrency"
    )


def hist_record(hist: tuple[int, ...], completion: int = 8) -> RequestRecord:
    return ok_record(0.0, [(0.1, 1), (0.2, completion - 1)], 0.2, spec_verify_ct=sum(hist),
                     spec_correct_drafts_histogram=hist)  # type: ignore[arg-type]


def test_position_acceptance_from_histograms_worked_example() -> None:
    # [1, 2, 1] + [0, 1, 0, 1] = [1, 3, 1, 1] over 6 steps; accepted at 1, 2, 3 = 5, 2, 1.
    pos = position_acceptance([hist_record((1, 2, 1)), hist_record((0, 1, 0, 1))], num_positions=3)
    assert pos is not None and pos.source == "meta_info.spec_correct_drafts_histogram"
    assert (pos.verify_steps, pos.accepted_at) == (6.0, (5.0, 2.0, 1.0))
    assert pos.rates == pytest.approx((5 / 6, 2 / 6, 1 / 6))
    assert pos.conditional_rates == pytest.approx((5 / 6, 2 / 5, 1 / 2))


def test_position_acceptance_pads_positions_never_reached_and_conditional_none() -> None:
    pos = position_acceptance([hist_record((2, 1))], num_positions=3)
    assert pos is not None and pos.rates == pytest.approx((1 / 3, 0.0, 0.0))
    assert pos.conditional_rates[1:] == (0.0, None)  # position 2 reached once, never accepted; 3 never reached


def test_position_acceptance_needs_every_request_histogram_else_counters() -> None:
    without = ok_record(0.0, [(0.1, 4)], 0.2, spec_verify_ct=2)
    assert position_acceptance([hist_record((1, 1)), without], num_positions=2) is None
    before = SpecCounters(verify_calls=10.0, accepted_per_position=(5.0, 2.0, 0.0),
                          per_position_series="refserver:spec_decode_num_accepted_tokens_per_pos_total")
    after = dataclasses.replace(before, verify_calls=20.0, accepted_per_position=(13.0, 6.0, 1.0))
    pos = position_acceptance([without], num_positions=3, counters_before=before, counters_after=after)
    assert pos is not None and pos.accepted_at == (8.0, 4.0, 1.0) and pos.verify_steps == 10.0
    assert pos.source == "counters refserver:spec_decode_num_accepted_tokens_per_pos_total"


def test_position_acceptance_from_vllm_counters_uses_drafts() -> None:
    # vLLM: per_pos / drafts (vllm/v1/spec_decode/metrics.py); 10 drafts, positions accepted 9, 5.
    before = SpecCounters(drafts=0.0, accepted_per_position=(0.0, 0.0), per_position_series="vllm:x")
    after = SpecCounters(drafts=10.0, accepted_per_position=(9.0, 5.0), per_position_series="vllm:x")
    pos = position_acceptance([], num_positions=None, counters_before=before, counters_after=after)
    assert pos is not None and pos.rates == pytest.approx((0.9, 0.5))
    assert pos.conditional_rates == pytest.approx((0.9, 5 / 9))


def test_summarize_fills_positions_only_when_speculative() -> None:
    records = [hist_record((1, 2, 1)), hist_record((0, 1, 0, 1))]
    spec = phase_metrics(records, 1.0, num_steps=3, speculative=True)
    assert spec.accept_rate_at == pytest.approx((5 / 6, 2 / 6, 1 / 6))
    assert spec.accept_rate_cond_at == pytest.approx((5 / 6, 2 / 5, 1 / 2))
    assert spec.accept_position_source == "meta_info.spec_correct_drafts_histogram"
    plain = phase_metrics(records, 1.0, num_steps=None, speculative=False)
    assert (plain.accept_rate_at, plain.accept_rate_cond_at, plain.accept_position_source) == ((), (), None)


def test_category_metrics_per_category_with_the_runs_definitions() -> None:
    # code: 2 requests, 8 + 8 tokens, correct drafts 3 + 1 over 2 + 2 verify steps -> 1 + 4 / 4 = 2.0.
    # prose: 1 request, 0 correct drafts over 3 steps -> 1.0; one failed request counted, not measured.
    code_a = hist_record((0, 1, 1), completion=8)
    code_a = dataclasses.replace(code_a, spec_num_correct_drafts=3)
    code_b = dataclasses.replace(hist_record((1, 1), completion=8), spec_num_correct_drafts=1)
    prose = dataclasses.replace(hist_record((3,), completion=4), spec_num_correct_drafts=0)
    records = [code_a, prose, code_b, failed_record()]
    run = phase_metrics(records, 1.0, num_steps=3, speculative=True, max_error_rate=0.5,
                    categories=["code", "prose", "code", None])
    assert set(run.by_category) == {"code", "prose", "uncategorized"}
    code = run.by_category["code"]
    assert (code["num_requests"], code["num_ok"]) == (2, 2)
    assert code["accept_length"] == pytest.approx(2.0) and code["accept_rate"] == pytest.approx(1 / 3)
    assert code["accept_rate_at"] == pytest.approx((3 / 4, 1 / 4, 0.0))
    assert run.by_category["prose"]["accept_length"] == pytest.approx(1.0)
    assert run.by_category["uncategorized"] == {"num_requests": 1, "num_ok": 0}
    assert phase_metrics(records, 1.0, num_steps=3, speculative=True, max_error_rate=0.5).by_category == {}


def test_serving_throughputs_and_p95_as_bench_serving() -> None:
    """``calculate_metrics``' input_throughput, total_throughput, request_throughput over the phase; p95 by numpy's
    linear percentile: TTFTs 100, 110, ..., 190 ms -> p95 185.5 ms."""
    records = [
        RequestRecord(ok=True, error=None, start_s=0.0, end_s=0.3, prompt_tokens=20, completion_tokens=4,
                      chunk_times_s=(0.1 + i * 0.01, 0.3), chunk_tokens=(1, 3))
        for i in range(10)
    ]  # fmt: skip
    run = phase_metrics(records, 2.0, num_steps=None, speculative=False)
    assert (run.input_tokens, run.input_tok_s, run.total_tok_s, run.requests_per_s) == (200, 100.0, 120.0, 5.0)
    assert run.ttft_ms_p95 == pytest.approx(185.5)
    assert run.goodput_per_s is None and set(run.tails) >= {"ttft_ms_p99", "itl_ms_p90", "e2e_ms_p95"}
    assert run.tails["ttft_ms_p90"]["n"] == 10 and run.tails["itl_ms_p90"]["n"] == 30


@pytest.mark.parametrize(
    ("field", "runs", "temperature", "expected"),
    [
        ("accept_length", ([2.5, 2.5], [2.1]), 0, True),  # each run agrees with itself; the runs may differ
        ("accept_rate", ([0.5],), 0.0, True),
        ("accept_length", ([2.5, 2.4],), 0, False),  # a batch-variant engine: judged statistically
        ("accept_length", ([2.5], []), 0, False),  # a run without the field decides nothing exactly
        ("accept_length", ([2.5, 2.5],), 0.7, False),  # sampling: equal repeats are luck, not exactness
        ("output_tok_s", ([90.0, 90.0],), 0, False),  # timing is never exact
    ],
)
def test_is_exact_is_one_rule_for_floors_halt_and_compare(
    field: str, runs: tuple[list[float], ...], temperature: float, expected: bool
) -> None:
    assert is_exact(field, *runs, temperature=temperature) is expected
