"""Prometheus text exposition -> totals per sample name, summed over label sets."""

from __future__ import annotations

from prometheus_client.parser import text_string_to_metric_families

__all__ = ["per_position", "sum_samples"]


def sum_samples(metrics_text: str) -> dict[str, float]:
    """Sum every sample of a ``/metrics`` payload over its label sets.

    Keys are *sample* names as exposed (``sglang:generation_tokens_total``, ``vllm:spec_decode_num_drafts_total``,
    ``..._bucket``/``..._sum``/``..._count`` for histograms), so a counter keeps its ``_total`` suffix. Histogram
    buckets are summed across ``le`` too, which is meaningless; read ``_sum``/``_count`` instead. ``_created``
    samples (timestamps) are dropped.

    :param metrics_text: Prometheus text format 0.0.4 (what SGLang and vLLM serve on ``/metrics``).
    :returns: sample name -> sum of values; empty for an empty payload.
    :raises ValueError: the text is not valid exposition format (from ``prometheus_client.parser``).
    """
    totals: dict[str, float] = {}
    for family in text_string_to_metric_families(metrics_text):
        for sample in family.samples:
            if sample.name.endswith("_created"):
                continue
            totals[sample.name] = totals.get(sample.name, 0.0) + float(sample.value)
    return totals


def per_position(metrics_text: str, sample_name: str) -> tuple[float, ...]:
    """Values of one counter split by its ``position`` label, summed over the other labels, in position order.

    For vLLM's ``vllm:spec_decode_num_accepted_tokens_per_pos_total{position="0".."n-1"}``
    (``vllm/v1/spec_decode/metrics.py::SpecDecodingProm``) and the reference server's copy of it.
    Example: ``...{engine="0",position="1"} 5`` and ``...{engine="0",position="0"} 9`` -> ``(9.0, 5.0)``.

    :returns: one value per position 0..max; a position missing in between counts 0; empty without the series.
    :raises ValueError: the text is not valid exposition format, or a ``position`` label is not an integer.
    """
    by_pos: dict[int, float] = {}
    for family in text_string_to_metric_families(metrics_text):
        for sample in family.samples:
            if sample.name == sample_name and "position" in sample.labels:
                pos = int(sample.labels["position"])
                by_pos[pos] = by_pos.get(pos, 0.0) + float(sample.value)
    if not by_pos:
        return ()
    return tuple(by_pos.get(p, 0.0) for p in range(max(by_pos) + 1))
