"""Measured noise: the spread of repeated runs (separate server starts), as a proposal of tolerances
(``calibrate``) and as what a compare knows of a profile's spread before its stored runs can measure it: the
within-run sd of one repeat and the run-to-run sd of a server instance (``compare._Judging``)."""

from __future__ import annotations

import json
import math
from collections.abc import Mapping, Sequence
from pathlib import Path

from pytest_specdec.core import stats
from pytest_specdec.core.tolerances import DEFAULT_TOLERANCES, Tolerance
from pytest_specdec.judge.pair_ratios import paired_ratios
from pytest_specdec.judge.sequential import RunEffect
from pytest_specdec.measure.results import ResultRecord

__all__ = ["CalibratedNoise", "calibrate_noise", "calibrate_proposal", "measurements", "paired_arm", "read_noise"]


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


class CalibratedNoise(dict[str, float]):
    """What ``calibrate`` measured for one profile, as every compare reads it: key (``field``, or ``field/vs`` for
    the per-pair ratio to a paired arm ``vs``) -> the relative sd of one repeat within a run (a dict of those), plus
    :attr:`run_to_run` (key -> the relative sd of a server instance's mean beyond its repeats) and :attr:`runs` (the
    server starts they come from). A noise file written before the run-to-run part was measured reads with
    ``run_to_run`` empty: the compare then assumes one (``sequential.ASSUMED_INSTANCE_SD``).
    """

    def __init__(self, sigma: Mapping[str, float] | None = None, run_to_run: Mapping[str, float] | None = None,
                 runs: int = 0) -> None:  # fmt: skip
        super().__init__(sigma or {})
        self.run_to_run: dict[str, float] = dict(run_to_run or {})
        self.runs = runs


def calibrate_noise(records: Sequence[ResultRecord], fields: Sequence[str] | None = None) -> CalibratedNoise:
    """The noise of repeated runs (each record one server start), for ``compare.compare_results``'s ``noise``.

    Per key (each field; ``field/vs`` from the per-pair ratios of records with a paired arm ``vs``): the one-way
    random-effects ANOVA of the log values (``sequential.RunEffect``): the within-run sd of one repeat
    (``expm1`` of the pooled sd of the log) and the run-to-run sd (``expm1`` of the run effect's sd, 0 when the
    runs' means spread no more than their repeats explain). Each run is one server instance: a compare against one
    stored run adds the run-to-run part for the baseline's instance and today's.

    Example: tok/s runs [98, 100, 102] and [108, 110, 112] -> within 1.9 %, run-to-run 6.9 %.

    :returns: the sds with the number of runs; keys with at least 2 values in one run and every value > 0.
    """
    pools: dict[str, list[list[float]]] = {}
    for r in records:
        for fname in fields or list(DEFAULT_TOLERANCES):
            pools.setdefault(fname, []).append(r.values(fname))
        vs = (r.paired or {}).get("vs")
        if vs:
            from pytest_specdec.measure.pairing import PAIRED_FIELDS

            for fname in PAIRED_FIELDS:
                pools.setdefault(f"{fname}/{vs}", []).append(paired_ratios(r, fname))
    sigma: dict[str, float] = {}
    run_to_run: dict[str, float] = {}
    for key, runs in pools.items():
        anova = RunEffect.of(runs)
        if anova is None:
            continue
        sigma[key] = round(math.expm1(math.sqrt(anova.var)), 5)
        if anova.runs >= 2:
            run_to_run[key] = round(math.expm1(math.sqrt(anova.between)), 5)
    return CalibratedNoise(sigma, run_to_run, len(records))


def read_noise(path: Path) -> CalibratedNoise:
    """A noise file written by ``calibrate`` (``{"profile": ..., "runs": N, "sigma_rel": {key: x},
    "run_to_run_rel": {key: x}}``); empty when the file is absent or unreadable (a file without
    ``run_to_run_rel``, written before it was measured, reads with it empty)."""
    try:
        data = json.loads(Path(path).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return CalibratedNoise()
    if not isinstance(data, dict) or not isinstance(data.get("sigma_rel"), dict):
        return CalibratedNoise()

    def numbers(value: object) -> dict[str, float]:
        if not isinstance(value, dict):
            return {}
        return {str(k): float(v) for k, v in value.items() if isinstance(v, int | float) and not isinstance(v, bool)}

    runs = data.get("runs")
    return CalibratedNoise(numbers(data["sigma_rel"]), numbers(data.get("run_to_run_rel")),
                           runs if isinstance(runs, int) and not isinstance(runs, bool) else 0)  # fmt: skip
