"""Tests of pytest_specdec.judge.tails through thresholds.evaluate: percentile ceilings and the goodput floor are
passed, FAILED or undecided on the run's evidence (measure/metrics.tail_evidence), with hand-made requests."""

from __future__ import annotations

import dataclasses

from pytest_specdec.core.records import RequestRecord
from pytest_specdec.judge.thresholds import evaluate
from pytest_specdec.measure.metrics import good_requests, phase_metrics, tail_evidence
from pytest_specdec.profiles.schema import Thresholds
from tests.helpers import run_metrics


def request(ttft_s: float, gap_s: float = 0.01, tokens: int = 4, start_s: float = 0.0) -> RequestRecord:
    """One ok request: first token at ``ttft_s``, then one token every ``gap_s``."""
    times = tuple(start_s + ttft_s + i * gap_s for i in range(tokens))
    return RequestRecord(ok=True, error=None, start_s=start_s, end_s=times[-1], prompt_tokens=10,
                         completion_tokens=tokens, chunk_times_s=times, chunk_tokens=(1,) * tokens)  # fmt: skip


def metrics_of(records: list[RequestRecord], duration_s: float = 10.0, **slo: float) -> object:
    return dataclasses.replace(run_metrics(), tails=tail_evidence([(records, duration_s)], slo_ms=slo or None))


def test_a_generous_p90_ceiling_on_48_requests_passes() -> None:
    records = [request(0.1 + i * 0.001) for i in range(48)]  # TTFT 100..147 ms
    (check,) = evaluate(Thresholds(max_ttft_ms_p90=500), metrics_of(records), speculative=False).checks
    assert check.passed is True and not check.undecided
    assert check.line().startswith("ttft_ms p90 142.3 ms <= max 500 (margin -357.7, -71.5%) [passed: 99% ")
    assert "bounds of p90 from 48 requests: 137 ms to 147 ms]" in check.line()


def test_p99_of_48_requests_is_undecided_not_passed() -> None:
    records = [request(0.1) for _ in range(48)]
    verdict = evaluate(Thresholds(max_ttft_ms_p99=500), metrics_of(records), speculative=False)
    (check,) = verdict.checks
    assert check.undecided and check.passed is True and verdict.failed == ()
    assert check.line().endswith(
        "48 requests cannot bound p99 from above at 99%: 459 are needed with none over 500 ms]"
    )
    assert verdict.outcomes()["max_ttft_ms_p99"].startswith("undecided: ttft_ms p99 100 ms: undecided vs max 500")


def test_an_impossible_itl_ceiling_fails_naming_the_key() -> None:
    records = [request(0.1, gap_s=0.01, tokens=20) for _ in range(48)]  # 912 ITL values of 10 ms
    verdict = evaluate(Thresholds(max_itl_ms_p99=0.001), metrics_of(records), speculative=False)
    (check,) = verdict.failed
    assert "FAILED max_itl_ms_p99" in check.line()
    assert "from 912 values" in check.line() and "the lower bound is over the ceiling" in check.line()


def test_goodput_counts_requests_meeting_every_slo_as_vllm_does() -> None:
    slow_ttft = request(0.25, gap_s=0.010)
    slow_tpot = request(0.10, gap_s=0.025)
    good = request(0.15, gap_s=0.018)
    failed = RequestRecord(ok=False, error="x", start_s=0.0, end_s=1.0, prompt_tokens=0, completion_tokens=0)
    assert good_requests([slow_ttft, slow_tpot, good, failed], {"ttft_ms": 200, "tpot_ms": 20}) == 1
    one_token = request(0.1, tokens=1)  # TPOT 0 for a one-token response
    assert good_requests([one_token], {"tpot_ms": 1}) == 1
    run = phase_metrics([slow_ttft, good, failed], 2.0, num_steps=None, speculative=False, max_error_rate=1.0,
                    slo_ms={"ttft_ms": 200})  # fmt: skip
    assert (run.goodput_per_s, run.slo_attainment) == (0.5, 1 / 3)


def metrics_of_phases(phases: list[tuple[list[RequestRecord], float]], **slo: float) -> object:
    return dataclasses.replace(run_metrics(), tails=tail_evidence(phases, slo_ms=slo or None))


def test_goodput_floor_three_outcomes() -> None:
    # 3 repeats of 100 good requests in 9.9, 10 and 10.1 s: 10 req/s, bounds 9.46-10.4 (share x rate).
    phases = [([request(0.1) for _ in range(100)], d) for d in (9.9, 10.0, 10.1)]
    run = metrics_of_phases(phases, ttft_ms=200)
    check = evaluate(Thresholds(min_goodput=9), run, speculative=False).checks[0]
    assert check.passed is True and not check.undecided
    assert "300 of 300 requests met the SLO in 30.0 s over 3 repeats; 99% Clopper-Pearson bounds of the share x " \
           "t-bounds of the request rate: 9" in check.line()  # fmt: skip
    check = evaluate(Thresholds(min_goodput=9.9), run, speculative=False).checks[0]
    assert check.undecided and check.line().endswith("more requests or repeats would narrow them]")
    late = metrics_of_phases([([request(0.3) for _ in range(100)], d) for d in (9.9, 10.0, 10.1)], ttft_ms=200)
    (failed,) = evaluate(Thresholds(min_goodput=1), late, speculative=False).failed
    assert failed.line().startswith("goodput 0 req/s < min 1 ") and "FAILED min_goodput: 0 of 300" in failed.line()


def test_goodput_request_rate_is_an_interval_not_taken_as_measured() -> None:
    # An audit finding: goodput's bounds took the request rate as exact, so one fast phase passed a floor the server
    # misses. Repeats at 12, 10 and 8 req/s (all good): 10 req/s, but the rate's 99% t-bounds are wide.
    phases = [([request(0.1) for _ in range(60)], d) for d in (5.0, 6.0, 7.5)]
    run = metrics_of_phases(phases, ttft_ms=200)
    check = evaluate(Thresholds(min_goodput=8), run, speculative=False).checks[0]
    assert check.undecided, check.line()
    # One repeat: its rate has no interval, whatever its share says.
    one = metrics_of([request(0.1) for _ in range(100)], duration_s=10.0, ttft_ms=200)
    check = evaluate(Thresholds(min_goodput=1), one, speculative=False).checks[0]
    assert check.undecided and check.line().endswith("one repeat's request rate has no interval: 2 repeats would "
                                                     "bound it]")  # fmt: skip


def test_no_evidence_is_not_applicable() -> None:
    (check,) = evaluate(Thresholds(max_e2e_ms_p95=10), run_metrics(), speculative=False).checks
    assert check.passed is None
