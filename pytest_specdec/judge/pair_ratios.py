"""Per-pair ratios of a stored result's paired reference arm: what throughput and latency are judged on when the
runner's load moves the raw values (compare, speedup, sweep, trend)."""

from __future__ import annotations

from pytest_specdec.measure.results import ResultRecord

__all__ = ["paired_ratios"]


def paired_ratios(record: ResultRecord, fname: str) -> list[float]:
    """Per pair, the target's value of ``fname`` over the paired reference arm's (``record.paired``, written by
    ``pairing.PairedArms.to_dict``); empty without a paired arm."""
    paired = record.paired or {}
    t = (paired.get("target") or {}).get(fname) or []
    r = (paired.get("reference") or {}).get(fname) or []
    return [
        float(a) / float(b)
        for a, b in zip(t, r, strict=False)
        if isinstance(a, int | float) and isinstance(b, int | float) and b != 0
    ]
