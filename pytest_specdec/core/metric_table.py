"""The metrics table: every metric's name, unit, direction, formula and source, one row each.

On the ground floor because every floor reads it: the summary (``measure.metrics``), thresholds, compare, the
run files and the plots. Standard library only.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from types import MappingProxyType

__all__ = [
    "ACCEPT_LENGTH_DEFINITION",
    "ACCEPT_RATE_DEFINITION",
    "EXACT_FIELDS",
    "METRICS",
    "PAIRED_FIELDS",
    "TAIL_PERCENTILES",
    "MetricSpec",
    "is_exact",
    "tail_samples_needed",
]

#: The accept length every engine is reported in (named in the summary and in each results file).
ACCEPT_LENGTH_DEFINITION = (
    "1 + accepted draft tokens / verify steps (the bonus token of each step counted, each request's prefill-sampled "
    "first token not): SGLang's server-side avg_spec_accept_length; per request (SGLang, reference) "
    "1 + Σspec_num_correct_drafts / Σspec_verify_ct (older SGLang: Σ(completion_tokens - 1) / Σspec_verify_ct); "
    "vLLM counters 1 + Δaccepted / Δdrafts"
)
#: The accept rate every engine is reported in.
ACCEPT_RATE_DEFINITION = "accepted draft tokens / (verify steps * num_steps) = (accept_length - 1) / num_steps"


@dataclass(frozen=True, slots=True)
class MetricSpec:
    """One metric: how it is named, measured and judged. ``stats`` lists the ``RunMetrics`` suffixes it has
    (``("mean", "p50", "p90", "p95", "p99")`` -> ``ttft_ms_mean`` ...); empty means the field is ``name`` itself.
    ``exact``: deterministic at temperature 0 (greedy decoding on a fixed prompt set), compared equal-or-not.
    ``paired``: the fields judged on their ratio to a paired reference arm measured in the same minutes. A compare
    row of any of these fields (a tolerance naming it, e.g. ``ttft_ms_p99:20%`` or ``goodput_per_s:10%``) regresses
    in the direction ``higher_is_better`` gives."""

    name: str
    unit: str
    higher_is_better: bool
    formula: str
    source: str
    stats: tuple[str, ...] = ()
    exact: bool = False
    paired: tuple[str, ...] = ()

    @property
    def fields(self) -> tuple[str, ...]:
        """The ``RunMetrics`` attribute names holding this metric."""
        return tuple(f"{self.name}_{stat}" for stat in self.stats) or (self.name,)


_LATENCY_STATS = ("mean", "p50", "p90", "p95", "p99")
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
                paired=("output_tok_s",),
            ),
            MetricSpec(
                "accept_length",
                "tokens/verify step",
                True,
                ACCEPT_LENGTH_DEFINITION,
                "SGLang scheduler_components/metrics_reporter.py (spec_num_accept_tokens += num_correct_drafts + bs "
                "per verify forward: avg_spec_accept_length); vLLM v1/spec_decode/metrics.py (1 + accepted / drafts)",
                exact=True,
            ),
            MetricSpec(
                "accept_rate",
                "fraction of drafted positions",
                True,
                ACCEPT_RATE_DEFINITION,
                "vLLM v1/spec_decode/metrics.py (accepted / draft tokens, draft tokens = drafts * k); SGLang's "
                "spec_accept_rate for eagle_topk 1 (for topk > 1 SGLang divides by num_draft_tokens - 1, the tree)",
                exact=True,
            ),
            MetricSpec(
                "ttft_ms",
                "ms",
                False,
                "first token-carrying event arrival - request start",
                f"{_SERVING}; backends/sglang_client.py (ttft)",
                _LATENCY_STATS,
                paired=("ttft_ms_p50",),
            ),
            MetricSpec(
                "itl_ms",
                "ms",
                False,
                "each later event's gap / its new tokens, once per token; pooled over requests",
                "SGLang benchmark/backends/sglang_client.py (adjust_itl)",
                _LATENCY_STATS,
                paired=("itl_ms_p50",),
            ),
            MetricSpec(
                "tpot_ms",
                "ms",
                False,
                "(e2e - ttft) / (completion_tokens - 1), per request with > 1 token",
                f"{_SERVING} (tpot)",
                _LATENCY_STATS,
                paired=("tpot_ms_p50",),
            ),
            MetricSpec(
                "e2e_ms",
                "ms",
                False,
                "data: [DONE] arrival - request start",
                f"{_SERVING} (e2e_latency)",
                _LATENCY_STATS,
                paired=("e2e_ms_p50",),
            ),
            MetricSpec(
                "input_tok_s",
                "tok/s",
                True,
                "sum(prompt_tokens of ok requests, as the server counts them) / phase duration_s",
                f"{_SERVING} (input_throughput)",
            ),
            MetricSpec(
                "total_tok_s",
                "tok/s",
                True,
                "(input + output tokens of ok requests) / phase duration_s",
                f"{_SERVING} (total_throughput)",
            ),
            MetricSpec(
                "requests_per_s",
                "req/s",
                True,
                "ok requests / phase duration_s",
                f"{_SERVING} (request_throughput)",
            ),
            MetricSpec(
                "goodput_per_s",
                "req/s",
                True,
                "ok requests meeting every workload.slo limit (TTFT, TPOT (0 for one token), E2E) / phase duration_s",
                "vLLM benchmarks/serve.py::calculate_metrics (request_goodput); SGLang benchmark/goodput.py",
            ),
            MetricSpec(
                "slo_attainment",
                "fraction of requests sent",
                True,
                "requests meeting every workload.slo limit / requests sent",
                "SGLang benchmark/goodput.py::calculate_goodput (slo_attainment)",
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

#: Fields compared equal-or-not at temperature 0 when every repeat of both runs agrees: any difference is real.
EXACT_FIELDS: tuple[str, ...] = tuple(spec.name for spec in METRICS.values() if spec.exact)
#: Fields measured on both arms of a pairing and judged on their per-pair ratio (``measure.pairing``).
PAIRED_FIELDS: tuple[str, ...] = tuple(f for spec in METRICS.values() for f in spec.paired)


def is_exact(field: str, *runs: Sequence[float], temperature: float | None) -> bool:
    """Whether ``field`` is decided equal-or-not, without statistics: an exact field (:data:`EXACT_FIELDS`) at
    ``temperature`` 0 whose every run (one sequence of per-repeat values each) was measured and agrees with itself.
    The one rule of the floors (``judge.verdict``), the halt (``judge.verdict.exact_failure``) and the compare.

    >>> is_exact("accept_length", [2.5, 2.5], [2.1], temperature=0)
    True
    >>> is_exact("accept_length", [2.5, 2.4], temperature=0), is_exact("output_tok_s", [90.0], temperature=0)
    (False, False)
    """
    return temperature == 0 and field in EXACT_FIELDS and all(len(r) > 0 and max(r) == min(r) for r in runs)


#: Tail percentiles (``ttft_ms_p90`` ... ``itl_ms_p99``) get a compare verdict only when every repeat of both runs
#: has at least 1 / (1 - q) samples (p90: 10, p95: 20, p99: 100): with fewer, the percentile is the repeat's largest
#: sample, and one stall of a busy runner in each repeat "regresses" it (an unchanged compare of 2 requests x 8 tokens
#: once read itl_ms_p99 x14.3, CI 7.61-26.9). ITL pools each request's tokens after its first, TTFT/TPOT/e2e hold one
#: sample per ok request. Read by the compare (``judge.compare``) and the preflight's tolerance rule.
TAIL_PERCENTILES: Mapping[str, float] = MappingProxyType({"p90": 0.90, "p95": 0.95, "p99": 0.99})


def tail_samples_needed(fname: str) -> int | None:
    """Samples per repeat a tail percentile field needs for a compare verdict (``itl_ms_p99`` -> 100), None for the
    rest (``ttft_ms_p50``, ``ttft_ms``, ``output_tok_s``)."""
    q = TAIL_PERCENTILES.get(fname.rpartition("_")[2])
    return None if q is None else round(1.0 / (1.0 - q))
