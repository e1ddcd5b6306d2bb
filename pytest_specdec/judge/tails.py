"""Tail verdicts: the percentile ceilings (``max_ttft_ms_p99`` ...) and the goodput floor (``min_goodput``) of a
profile, each passed, FAILED or undecided on the evidence of the run's requests (``RunMetrics.tails``).

Method: an order-statistics interval (binomial; ``core.order_stats``), one-sided at
``order_stats.TAIL_CONFIDENCE`` (99 %) each side, over every request of every repeat pooled. A ceiling C on the
p-quantile passes when the interval's upper bound is at or under C (at most ``n - u`` values exceed C: the quantile is
shown to be under C), fails when its lower bound is over C (shown to be over), and is undecided otherwise: so p99 of
48 requests never passes (459 are needed with none over C, the count MLPerf LoadGen's early stopping asks,
``loadgen/early_stopping.cc``), but fails when enough of them are over. Goodput: the Clopper-Pearson bounds of the
share of requests that met every SLO, times the t-bounds of the request rate over the repeats
(``measure.metrics.tail_evidence``); passes when the lower bound is at or over the floor, fails when the upper bound is
under it, and one repeat (no rate interval) is undecided. The median rule of the other thresholds (``thresholds.py``)
would call p99 of 16 requests a verdict; these do not.

Usage (``thresholds.evaluate`` adds these to its checks)::

    for t in tail_checks(thresholds, metrics):
        print(t.text)   # "ttft_ms p99 412.0 ms: undecided vs max 500 [...]"
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from pytest_specdec.core.order_stats import TAIL_CONFIDENCE, min_samples
from pytest_specdec.core.records import RunMetrics
from pytest_specdec.profiles.schema import TAIL_KEYS, Thresholds

__all__ = ["TailCheck", "requests_needed", "tail_checks"]


@dataclass(frozen=True, slots=True)
class TailCheck:
    """One tail verdict, in the fields of ``thresholds.Check`` (which ``thresholds.evaluate`` builds from it).
    ``passed`` is True for passed and undecided (``undecided`` True), False for FAILED, None when not applicable."""

    key: str
    label: str
    op: str
    threshold: float
    measured: float | None
    unit: str
    passed: bool | None
    note: str = ""
    text: str = ""
    undecided: bool = False


def requests_needed(percentile: float, confidence: float = TAIL_CONFIDENCE) -> int:
    """Values a ``max_..._p<q>`` ceiling needs before it can pass (all of them under it): p99 459, p95 90, p90 44
    at 99 % (``order_stats.min_samples``)."""
    return min_samples(percentile, confidence)


def _unit_of(field: str) -> str:
    return "values" if field.startswith("itl_") else "requests"


def _latency_check(key: str, field: str, p: float, ceiling: float, evidence: Mapping[str, Any] | None) -> TailCheck:
    metric, _, q = field.rpartition("_p")
    label = f"{metric} p{q}"
    if not evidence or not evidence.get("n"):
        return TailCheck(key, label, "<=", ceiling, None, "ms", None, "no request with this latency in the run")
    n = int(evidence["n"])
    estimate = evidence.get("estimate")
    low, high = evidence.get("low"), evidence.get("high")
    conf = float(evidence.get("confidence", TAIL_CONFIDENCE))
    what = f"{n} {_unit_of(field)}"
    shown = f"{label} {estimate:.4g} ms" if isinstance(estimate, int | float) else label
    interval = f"{conf:.0%} order-statistics bounds of p{q} from {what}: {_ms(low)} to {_ms(high)}"
    margin = ""
    if isinstance(estimate, int | float):
        diff = estimate - ceiling
        margin = f" (margin {diff:+.4g}, {diff / ceiling * 100:+.1f}%)"
    if high is not None and high <= ceiling:
        text = f"{shown} <= max {ceiling:g}{margin} [passed: {interval}]"
        return TailCheck(key, label, "<=", ceiling, estimate, "ms", True, text=text)
    if low is not None and low > ceiling:
        text = f"{shown} > max {ceiling:g}{margin} [FAILED {key}: {interval}; the lower bound is over the ceiling]"
        return TailCheck(key, label, "<=", ceiling, estimate, "ms", False, text=text)
    need = requests_needed(p, conf)
    if high is None:
        why = f"{what} cannot bound p{q} from above at {conf:.0%}: {need} are needed with none over {ceiling:g} ms"
    else:
        why = f"the ceiling lies between the bounds; more {_unit_of(field)} would narrow them"
    text = f"{shown}: undecided vs max {ceiling:g} [{key}: {interval}; {why}]"
    return TailCheck(key, label, "<=", ceiling, estimate, "ms", True, text=text, undecided=True)


def _goodput_check(floor: float, evidence: Mapping[str, Any] | None) -> TailCheck:
    key, label, unit = "min_goodput", "goodput", "req/s"
    if not evidence or not evidence.get("n"):
        note = "no goodput measured: set workload.slo (the SLOs a request must meet to count)"
        return TailCheck(key, label, ">=", floor, None, unit, None, note)
    n, good, estimate = int(evidence["n"]), int(evidence["good"]), float(evidence["estimate"])
    low, high = evidence.get("low"), evidence.get("high")
    conf = float(evidence.get("confidence", TAIL_CONFIDENCE))
    phases = evidence.get("phases")
    diff = estimate - floor
    margin = f" (margin {diff:+.4g}, {diff / floor * 100:+.1f}%)"
    over = f" over {phases} repeats" if phases else ""
    shown = f"{label} {estimate:.4g} req/s"
    if low is None or high is None:
        text = (
            f"{shown}: undecided vs min {floor:g} [{key}: {good} of {n} requests met the SLO in "
            f"{float(evidence['duration_s']):.1f} s; one repeat's request rate has no interval: 2 repeats would "
            "bound it]"
        )
        return TailCheck(key, label, ">=", floor, estimate, unit, True, text=text, undecided=True)
    low, high = float(low), float(high)
    # Records stored before the request rate had an interval carry no "phases": their bounds took it as exact.
    rate = "t-bounds of the request rate" if phases else "the request rate as measured"
    interval = (
        f"{good} of {n} requests met the SLO in {float(evidence['duration_s']):.1f} s{over}; {conf:.0%} "
        f"Clopper-Pearson bounds of the share x {rate}: {low:.3g} to {high:.3g} req/s"
    )
    if low >= floor:
        return TailCheck(key, label, ">=", floor, estimate, unit, True, text=f"{shown} >= min {floor:g}{margin} "
                         f"[passed: {interval}]")  # fmt: skip
    if high < floor:
        return TailCheck(key, label, ">=", floor, estimate, unit, False, text=f"{shown} < min {floor:g}{margin} "
                         f"[FAILED {key}: {interval}; the upper bound is under the floor]")  # fmt: skip
    text = f"{shown}: undecided vs min {floor:g} [{key}: {interval}; more requests or repeats would narrow them]"
    return TailCheck(key, label, ">=", floor, estimate, unit, True, text=text, undecided=True)


def _ms(value: Any) -> str:
    return f"{value:.4g} ms" if isinstance(value, int | float) else "none"


def tail_checks(thresholds: Thresholds, metrics: RunMetrics) -> list[TailCheck]:
    """One :class:`TailCheck` per set percentile ceiling (``schema.TAIL_KEYS`` order) and ``min_goodput``, judged
    on ``metrics.tails`` (``measure/metrics.tail_evidence``).

    Lines (examples): ``ttft_ms p90 212.4 ms <= max 500 (margin -287.6, -57.5%) [passed: 99% order-statistics
    bounds of p90 from 48 requests: 190.1 ms to 240.3 ms]``; ``itl_ms p99 3.21 ms > max 0.001 (...) [FAILED
    max_itl_ms_p99: ...; the lower bound is over the ceiling]``; ``ttft_ms p99 250 ms: undecided vs max 500
    [max_ttft_ms_p99: ...: 48 requests cannot bound p99 from above at 99%: 459 are needed with none over 500 ms]``.
    A run without the evidence (an old record, no request with that latency) gets a not-applicable check.
    """
    tails = metrics.tails or {}
    out = []
    for key, (field, p) in TAIL_KEYS.items():
        ceiling = getattr(thresholds, key)
        if ceiling is not None:
            out.append(_latency_check(key, field, p, float(ceiling), tails.get(field)))
    if thresholds.min_goodput is not None:
        out.append(_goodput_check(float(thresholds.min_goodput), tails.get("goodput_per_s")))
    return out
