"""Change points in a series of stored runs (``python -m pytest_specdec trend``): where a drift or a step began.

Each night's compare judges tonight against one reference run (``judge.baseline``): it says whether tonight is worse,
not when it became so, and a drift it leaves undecided night after night (a noisy runner) or one a re-saved named
baseline moved past is seen only over the series. A change-point search over the whole series sees it. The method
follows Apache Otava (formerly Hunter; the MongoDB E-divisive approach, Matteson & James 2014, with Otava's
significance test): split the series at the point that best separates it, keep the split when the two sides differ
significantly (Welch's t-test, p <= ``max_pvalue``), and recurse into both sides.

The split search is ruptures' binary segmentation with the kernel (RBF) cost, a nonparametric relative of
E-divisive's energy statistic (Truong, Oudre & Vayatis 2020, *Selective review of offline change point detection
methods*). Otava itself (0.8.0) and its predecessor ``signal-processing-algorithms`` pin exact numpy versions
(2.2.0 and 1.26.4) that would downgrade the numpy torch uses here, and Otava pulls BigQuery, Postgres and Slack
clients; ruptures needs only numpy and scipy.

Series: per test and metric field, one value per run (the record's median over repeats); for records with a paired
reference arm also ``field / vs``, the median of the per-pair ratios, which does not move with the runner's load.
"""

from __future__ import annotations

import math
import time
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from pytest_specdec.core.metric_table import METRICS
from pytest_specdec.judge.pair_ratios import paired_ratios
from pytest_specdec.measure.results import RunFile

__all__ = ["ChangePoint", "Series", "change_points", "detect", "series_from_runs", "trend_lines"]

#: Default fields followed (and their ratios to a paired arm when present).
DEFAULT_FIELDS = ("output_tok_s", "accept_length")
#: A split is kept when Welch's t-test between its sides gives p at most this (Otava's default). The best split is
#: chosen before it is tested, so the real false-alarm rate is higher than p: simulated on 20 runs of +-3 % normal
#: noise, 2 % of flat series show a change point, while a 10 % step after 8 runs is found in 89 % and a -1 %/run
#: drift over 10 runs (1.5 % noise) in 93 % (0.01: 10 %, 99.5 %, 99.5 %).
MAX_PVALUE = 0.001
#: Fewest points on each side of a split.
MIN_SIZE = 3


@dataclass(frozen=True, slots=True)
class Series:
    """One metric of one test over runs, oldest first. ``run_ids[i]`` / ``started[i]`` name point i."""

    test_id: str
    metric: str
    higher_is_better: bool
    run_ids: tuple[str, ...]
    started: tuple[float, ...]
    values: tuple[float, ...]


@dataclass(frozen=True, slots=True)
class ChangePoint:
    """A kept split: ``index`` is the first point after the change; means of the segments either side."""

    index: int
    run_id: str
    started: float
    before: float
    after: float
    p_value: float
    n_before: int
    n_after: int
    worse: bool

    @property
    def change_pct(self) -> float:
        return (self.after - self.before) / abs(self.before) * 100.0 if self.before else math.inf


def series_from_runs(
    runs: Sequence[RunFile], fields: Sequence[str] = DEFAULT_FIELDS, profiles: Sequence[str] | None = None
) -> list[Series]:
    """Build one series per (test id, field) from ``runs`` (sorted by start time), plus ``field / vs`` ratio series
    for tests whose records carry a paired arm. Points where the value is missing are skipped.

    :raises ValueError: a field that is not a ``RunMetrics`` metric field.
    """
    specs = {f: spec for spec in METRICS.values() for f in spec.fields}
    for name in fields:
        if name not in specs:
            raise ValueError(f"unknown metric field {name!r} (e.g. {', '.join(DEFAULT_FIELDS)}, ttft_ms_p50)")
    points: dict[tuple[str, str], list[tuple[str, float, float]]] = {}
    higher: dict[tuple[str, str], bool] = {}
    for run in sorted(runs, key=lambda r: r.started):
        for rec in run.results:
            if profiles and rec.profile not in profiles:
                continue
            for name in fields:
                vals = rec.values(name)
                if vals:
                    key = (rec.test_id, name)
                    points.setdefault(key, []).append((run.run_id, run.started, float(np.median(vals))))
                    higher[key] = specs[name].higher_is_better
                vs = (rec.paired or {}).get("vs")
                ratios = paired_ratios(rec, name) if vs else []
                if ratios:
                    key = (rec.test_id, f"{name} / {vs}")
                    points.setdefault(key, []).append((run.run_id, run.started, float(np.median(ratios))))
                    higher[key] = specs[name].higher_is_better
    out = []
    for (test_id, metric), pts in points.items():
        ids, started, values = zip(*pts, strict=True)
        out.append(Series(test_id, metric, higher[(test_id, metric)], ids, started, values))
    return out


def _welch_p(a: np.ndarray, b: np.ndarray) -> float:
    """Two-sided Welch t-test p (scipy ``stats.ttest_ind(equal_var=False)``); 0 for two distinct constants."""
    from scipy import stats as sps

    if np.ptp(a) == 0 and np.ptp(b) == 0:
        return 0.0 if a[0] != b[0] else 1.0
    return float(sps.ttest_ind(a, b, equal_var=False).pvalue)


def change_points(
    values: Sequence[float], *, max_pvalue: float = MAX_PVALUE, min_size: int = MIN_SIZE
) -> list[tuple[int, float]]:
    """Significant change points of ``values`` (see the module docstring): best split of each segment by
    ruptures ``Binseg(model="rbf")``, kept when Welch's p <= ``max_pvalue``, then recursion into both sides.

    Example: [100] * 6 + [90] * 6 (with small noise) -> [(6, p)]; a flat noisy series -> [].

    :returns: (index of the first point after the change, p-value), ascending by index.
    """
    import ruptures as rpt

    signal = np.asarray(values, dtype=float)
    found: list[tuple[int, float]] = []

    def split(lo: int, hi: int) -> None:
        segment = signal[lo:hi]
        if segment.size < 2 * min_size:
            return
        if np.ptp(segment) == 0:
            return
        try:
            algo = rpt.Binseg(model="rbf", min_size=min_size, jump=1).fit(segment.reshape(-1, 1))
            (bkp, _end) = algo.predict(n_bkps=1)
        except (rpt.exceptions.BadSegmentationParameters, ValueError):
            return
        p = _welch_p(segment[:bkp], segment[bkp:])
        if p > max_pvalue:
            return
        found.append((lo + bkp, p))
        split(lo, lo + bkp)
        split(lo + bkp, hi)

    split(0, signal.size)
    return sorted(found)


def detect(series: Series, *, max_pvalue: float = MAX_PVALUE, min_size: int = MIN_SIZE) -> list[ChangePoint]:
    """:func:`change_points` of a series, each with the means of its neighbouring segments and its direction."""
    values = np.asarray(series.values, dtype=float)
    cps = change_points(series.values, max_pvalue=max_pvalue, min_size=min_size)
    bounds = [0, *(i for i, _ in cps), values.size]
    out = []
    for k, (index, p) in enumerate(cps):
        before = values[bounds[k] : index]
        after = values[index : bounds[k + 2]]
        b, a = float(before.mean()), float(after.mean())
        worse = a < b if series.higher_is_better else a > b
        out.append(
            ChangePoint(index, series.run_ids[index], series.started[index], b, a, p, before.size, after.size, worse)
        )
    return out


def trend_lines(
    series: Sequence[Series], *, max_pvalue: float = MAX_PVALUE, min_size: int = MIN_SIZE
) -> tuple[list[str], int]:
    """The report: a header, then per series with change points one line for it and one per change point::

        test_specdec.py::test_x[eagle3] output_tok_s / baseline: 1 change point over 12 runs
          at run 20261125T030000Z-ab12cd (#6, 2026-11-25 03:00 UTC): 1.41 -> 1.27 (-9.9%, worse), p=0.0003
          (Welch t, 5 vs 7 runs)      [one line]

    :returns: (lines, number of change points in the worse direction).
    """
    lines: list[str] = []
    worse = 0
    runs = sorted({rid for s in series for rid in s.run_ids})
    lines.append(f"specdec trend: {len(runs)} runs, {len(series)} series; change points by binary segmentation "
                 f"(ruptures, rbf cost) kept at Welch p <= {max_pvalue:g}, >= {min_size} runs a side")  # fmt: skip
    flagged = 0
    for s in series:
        found = detect(s, max_pvalue=max_pvalue, min_size=min_size)
        if not found:
            continue
        flagged += 1
        plural = "s" if len(found) != 1 else ""
        lines.append(f"{s.test_id} {s.metric}: {len(found)} change point{plural} over {len(s.values)} runs")
        for cp in found:
            when = time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime(cp.started))
            direction = "worse" if cp.worse else "better"
            worse += cp.worse
            lines.append(
                f"  at run {cp.run_id} (#{cp.index + 1}, {when}): {cp.before:.4g} -> {cp.after:.4g} "
                f"({cp.change_pct:+.1f}%, {direction}), p={cp.p_value:.2g} "
                f"(Welch t, {cp.n_before} vs {cp.n_after} runs)"
            )
    if not flagged:
        lines.append("no change point")
    return lines, worse
