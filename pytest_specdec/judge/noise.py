"""Measured noise: the spread of repeated runs, as a proposal of tolerances (``calibrate``) and as the noise limit
a compare applies (a shift must exceed ``NOISE_K`` sigma as well as its tolerance)."""

from __future__ import annotations

import json
import math
from collections.abc import Sequence
from pathlib import Path

from pytest_specdec.core import stats
from pytest_specdec.core.tolerances import DEFAULT_TOLERANCES, Tolerance
from pytest_specdec.judge.pair_ratios import paired_ratios
from pytest_specdec.measure.results import ResultRecord

__all__ = ["NOISE_K", "calibrate_noise", "calibrate_proposal", "measurements", "paired_arm", "read_noise"]

#: A shift must exceed ``NOISE_K`` times the measured noise (sigma), as well as the tolerance, to regress.
NOISE_K = 3.0


def measurements(records: Sequence[tuple[str, ResultRecord]]) -> list[ResultRecord]:
    """One record per measurement: every test of a profile in one run reads the same measurement, so records of
    one (run id, profile) are one measurement, kept as the record with the most repeats (a later test of the profile
    may show repeats that a sequential verdict added). Order: first appearance.

    :param records: (run id, record) pairs, e.g. every record of every run file given to ``calibrate --from``.
    """
    kept: dict[tuple[str, str], ResultRecord] = {}
    for run_id, record in records:
        key = (run_id, record.profile)
        if key not in kept or len(record.values("output_tok_s")) > len(kept[key].values("output_tok_s")):
            kept[key] = record
    return list(kept.values())


def paired_arm(records: Sequence[ResultRecord]) -> str | None:
    """The paired reference arm every record was measured with (``paired["vs"]``), or None when one has none or
    they differ: then the compare judges throughput and latency on their ratio to it (``compare._paired_rows``)."""
    arms = {(r.paired or {}).get("vs") for r in records}
    if len(arms) != 1:
        return None
    (vs,) = arms
    return str(vs) if vs else None


def calibrate_proposal(
    records: Sequence[ResultRecord], fields: Sequence[str] | None = None, *, k: float = 3.0, floor: float = 0.01
) -> dict[str, Tolerance]:
    """Propose relative tolerances from the spread of repeated runs of one test on one machine.

    Per field: pool the per-repeat values of all ``records``; sigma = 1.4826 * MAD (``stats.mad_sigma``);
    proposal = ``max(k * sigma / |median|, floor)``, rounded up to 0.1 %. With k = 3 a normal run-to-run spread
    passes 99.7 % of the time before the significance test is even applied. Give records of separate runs
    (separate server starts): within-run repeats underestimate the spread between nights; and one record per
    measurement (:func:`measurements`). Where the compare judges a field on its ratio to a paired arm (every record
    paired with the same arm, :func:`paired_arm`, and the field paired), the proposal comes from the per-pair ratios'
    spread, which is what that tolerance bounds.

    Example: tok/s 98, 100, 101, 103, 100 -> median 100, MAD 1, sigma 1.48 -> 3 * 1.48 % = 4.5 %.

    :param fields: metric fields to propose for (default: the keys of :data:`DEFAULT_TOLERANCES`).
    :returns: field -> Tolerance(rel=...), only for fields with at least 2 values and a non-zero median.
    """
    from pytest_specdec.core.metric_table import PAIRED_FIELDS

    paired = paired_arm(records) is not None
    out: dict[str, Tolerance] = {}
    for fname in fields or list(DEFAULT_TOLERANCES):
        if paired and fname in PAIRED_FIELDS:
            values = [v for r in records for v in paired_ratios(r, fname)]
        else:
            values = [v for r in records for v in r.values(fname)]
        if len(values) < 2:
            continue
        summary = stats.repeat_summary(values)
        if summary is None or summary.median == 0:
            continue
        rel = max(k * summary.sigma / abs(summary.median), floor)
        out[fname] = Tolerance(rel=math.ceil(round(rel * 1000, 6)) / 1000)
    return out


def calibrate_noise(records: Sequence[ResultRecord], fields: Sequence[str] | None = None) -> dict[str, float]:
    """Relative noise (sigma / |median|) per field from repeated runs, for ``compare.compare_results``'s ``noise``.

    Per field: the per-repeat values of all ``records`` pooled (so the spread between separate runs counts, not
    only the repeats within one), sigma = 1.4826 x MAD (``stats.mad_sigma``). Records with a paired reference arm
    add ``field/vs`` keys from their per-pair ratios (:func:`paired_ratios`).

    Example: tok/s 98, 100, 101, 103, 100 -> median 100, sigma 1.48 -> 0.0148.

    :returns: key -> relative sigma, for keys with at least 2 values and a non-zero median.
    """
    pools: dict[str, list[float]] = {}
    for r in records:
        for fname in fields or list(DEFAULT_TOLERANCES):
            pools.setdefault(fname, []).extend(r.values(fname))
        vs = (r.paired or {}).get("vs")
        if vs:
            from pytest_specdec.measure.pairing import PAIRED_FIELDS

            for fname in PAIRED_FIELDS:
                pools.setdefault(f"{fname}/{vs}", []).extend(paired_ratios(r, fname))
    out: dict[str, float] = {}
    for key, values in pools.items():
        summary = stats.repeat_summary(values) if len(values) >= 2 else None
        if summary is not None and summary.median != 0:
            out[key] = round(summary.sigma / abs(summary.median), 5)
    return out


def read_noise(path: Path) -> dict[str, float]:
    """The ``sigma_rel`` mapping of a noise file written by ``calibrate`` (``{"profile": ..., "runs": N,
    "sigma_rel": {field: x}}``); empty when the file is absent or unreadable."""
    try:
        data = json.loads(Path(path).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}
    sigma = data.get("sigma_rel") if isinstance(data, dict) else None
    if not isinstance(sigma, dict):
        return {}
    return {str(k): float(v) for k, v in sigma.items() if isinstance(v, int | float) and not isinstance(v, bool)}
