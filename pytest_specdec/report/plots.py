"""PNG plots of results: a sweep (tok/s and accept length against the swept parameter), a trend across runs, and
acceptance per draft position.

matplotlib (the ``plot`` extra) is imported only when a plot is drawn, through its object API with the Agg canvas
(``matplotlib.figure.Figure`` + ``backend_agg.FigureCanvasAgg``): no pyplot, no global backend switch, so a user's
interactive backend is left alone and no display is needed.
"""

from __future__ import annotations

import dataclasses
import itertools
import typing
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any

from pytest_specdec.core.metric_table import METRICS
from pytest_specdec.core.records import RunMetrics
from pytest_specdec.judge.sweep import load_of, speedup, split_name
from pytest_specdec.measure.results import ResultRecord, RunFile

__all__ = [
    "DEFAULT_TREND_METRICS",
    "TrendPoint",
    "load_curve_series",
    "metric_label",
    "plot_load_curve",
    "plot_positions",
    "plot_sweep",
    "plot_trend",
    "trend_fields",
    "trend_points",
    "trend_title",
]

#: What ``python -m pytest_specdec plot`` draws without ``--metric``.
DEFAULT_TREND_METRICS = ("output_tok_s", "accept_length")


def trend_fields() -> list[str]:
    """The ``RunMetrics`` fields a trend may draw (``--metric`` of ``plot`` and ``merge --trend``), in field order:
    the numbers (int or float, possibly None); names, per-position tuples and per-category or tail mappings are not
    one number a run (a fresh-user trial drew ``--metric tails``: an empty plot, exit 0)."""
    hints = typing.get_type_hints(RunMetrics)
    numbers = {int, float, int | None, float | None}
    return [f.name for f in dataclasses.fields(RunMetrics) if hints[f.name] in numbers]


_AXIS_LABELS = {
    "num_steps": "speculative num_steps (draft steps per verify)",
    "num_draft_tokens": "speculative num_draft_tokens (tokens verified per step)",
    "eagle_topk": "speculative eagle_topk (branches per draft step)",
    "concurrency": "concurrency (requests in flight)",
    "request_rate": "request rate (requests/s arriving, open loop)",
}
_INSTALL = "matplotlib is needed for plots: pip install 'pytest-specdec[plot]'"


def _figure(width_in: float, height_in: float) -> Any:
    """A Figure on an Agg canvas. :raises ImportError: matplotlib missing, with the install command."""
    try:
        from matplotlib.backends.backend_agg import FigureCanvasAgg
        from matplotlib.figure import Figure
    except ImportError:
        raise ImportError(_INSTALL) from None
    fig = Figure(figsize=(width_in, height_in), dpi=100, layout="constrained")
    FigureCanvasAgg(fig)
    return fig


def metric_label(field: str) -> str:
    """Axis label of a ``RunMetrics`` field with its unit from ``metrics.METRICS``:
    ``output_tok_s`` -> ``output_tok_s (tok/s)``, ``ttft_ms_p50`` -> ``ttft_ms_p50 (ms)``."""
    for spec in METRICS.values():
        if field in spec.fields:
            return f"{field} ({spec.unit})"
    return field


def _save(fig: Any, path: Path) -> Path:
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, format="png")
    return path


def plot_sweep(
    records: Sequence[ResultRecord],
    path: str | Path,
    *,
    baselines: Sequence[ResultRecord] = (),
    best: Sequence[ResultRecord] = (),
    tied: Sequence[ResultRecord] = (),
    thresholds_ok: Mapping[str, bool] | None = None,
    title: str | None = None,
    accept_floor: float | None = None,
    accept_floors: Mapping[str, float] | None = None,
    note: str | None = None,
) -> Path:
    """Draw output tok/s (left axis, solid) and accept length (right axis, dashed) against the swept parameter,
    each point with its spread over repeats (min-max error bars, ``ResultRecord.values``).

    The x axis is the first swept key of the points (``sweep.split_name`` of each record's profile); every other
    combination (another base profile, or the values of further swept keys) is its own pair of lines. Baselines
    without speculation are dotted horizontal lines of their tok/s (a line over x when x is concurrency and the
    baseline was swept with it; coloured as the series of the same concurrency). Each best point is starred in gold
    and labelled with its tok/s and speedup, and so is every point tied with it (not separated by the measurements,
    ``sweep.RankedGroup.tied``): several stars mean the sweep cannot tell those points apart, and the leader among
    them is labelled ``highest``, not ``best`` (as the sweep table marks it ``<- highest``). Points whose tests
    failed are crossed out in red and labelled with the thresholds they missed (``ResultRecord.checks``, e.g.
    ``missed accept_length``). A ``min_accept_length`` floor is drawn as a purple dash-dot segment on the
    accept-length axis at each point where it applies, and nowhere else (a point whose check says ``n/a`` cannot be
    judged against it, so no line may make it look failed). ``note`` (e.g. "undecided: 1 repeat per point") is
    written in the top left corner.

    :param records: ``sweep.sweep_records`` (one per point), at least one.
    :param path: the PNG to write (parent directories are created).
    :param baselines: ``sweep.baseline_records``.
    :param best: ``sweep.best_points`` (one per concurrency), or empty (undecided: no star).
    :param tied: the points tied with a best point, starred too.
    :param thresholds_ok: ``sweep.thresholds_ok``; profiles mapped to False get a red cross (None: no crosses).
    :param accept_floor: one ``min_accept_length`` for every point (``accept_floors`` wins when given).
    :param accept_floors: profile -> its ``min_accept_length``, drawn where its check is not ``n/a``.
    :returns: ``path``.
    :raises ValueError: no record, or a record that is not a sweep point.
    :raises ImportError: matplotlib is not installed.
    """
    if not records:
        raise ValueError("plot_sweep: no sweep points to plot")
    points = []
    for record in records:
        base, point = split_name(record.profile)
        if not point:
            raise ValueError(f"plot_sweep: {record.profile!r} is not a sweep point (expected NAME@KEY=VALUE)")
        points.append((base, point, record))
    x_key = next(k for k in points[0][1])
    series: dict[str, list[tuple[float, ResultRecord]]] = {}
    for base, point, record in points:
        rest = ", ".join(f"{k}={v}" for k, v in point.items() if k != x_key)
        series.setdefault(f"{base}, {rest}" if rest else base, []).append((point.get(x_key, 0), record))

    fig = _figure(8.0, 4.8 + 0.25 * (len(series) * 2 + len(baselines) + 2) / 2)
    ax = fig.add_subplot()
    ax2 = ax.twinx()
    colors = [f"C{i}" for i in range(10)]
    handles = []
    xs_all: set[float] = set()
    single = len(series) == 1
    for i, (label, items) in enumerate(series.items()):
        items.sort(key=lambda t: t[0])
        xs = [x for x, _ in items]
        xs_all.update(xs)
        tok = [_num(r.metrics.get("output_tok_s")) for _, r in items]
        acc = [_num(r.metrics.get("accept_length")) for _, r in items]
        # One series: two colours (the axes are coloured to match); several: one colour per series, solid/dashed.
        color = colors[(2 * i) % len(colors)] if single else colors[i % len(colors)]
        color2 = colors[1] if single else color
        (h1,) = ax.plot(xs, tok, marker="o", color=color, linestyle="-", label=f"{label}: output tok/s")
        (h2,) = ax2.plot(xs, acc, marker="s", color=color2, linestyle="--", alpha=0.85,
                         label=f"{label}: accept length")  # fmt: skip
        for axis, field, mids, c in ((ax, "output_tok_s", tok, color), (ax2, "accept_length", acc, color2)):
            spreads = [r.values(field) for _, r in items]
            low = [m - min(v) if v and m == m else 0.0 for m, v in zip(mids, spreads, strict=True)]
            high = [max(v) - m if v and m == m else 0.0 for m, v in zip(mids, spreads, strict=True)]
            if any(low) or any(high):
                axis.errorbar(xs, mids, yerr=[low, high], fmt="none", ecolor=c, capsize=4, alpha=0.8)
        handles += [h1, h2]
        if single:
            ax.set_ylabel("output throughput (tok/s)", color=color)
            ax2.set_ylabel("accept length (tokens / verify step)", color=color2)
    handles += _draw_failed_points(ax, records, x_key, thresholds_ok)
    applies, floor_handles = _draw_accept_floors(ax2, records, x_key, xs_all, accept_floor, accept_floors)
    handles += floor_handles
    handles += _draw_baselines(ax, baselines, x_key, series, colors, single)
    handles += _draw_best_points(ax, best, tied, baselines, x_key, xs_all)
    if note:
        ax.text(0.01, 0.98, note, transform=ax.transAxes, ha="left", va="top", fontsize=8, color="0.25", wrap=True)
    ax.set_xlabel(_AXIS_LABELS.get(x_key, x_key))
    if not single:
        ax.set_ylabel("output throughput (tok/s)")
        ax2.set_ylabel("accept length (tokens / verify step)")
    ax.set_xticks(sorted(xs_all))
    tops = [_num(r.metrics.get("output_tok_s")) for r in [*records, *baselines]]
    ax.set_ylim(bottom=0, top=max([t for t in tops if t == t] + [1.0]) * 1.2)  # headroom for the best label
    acc_top = max([_num(r.metrics.get("accept_length")) for _, _, r in points] + [1.0, *(f for _, f in applies)])
    ax2.set_ylim(bottom=0, top=acc_top * 1.25)
    ax.grid(True, alpha=0.3)
    bases = sorted({b for b, _, _ in points})
    ax.set_title(title or f"specdec sweep of {', '.join(bases)} over {x_key}")
    # Below the x label, outside the data (constrained layout makes room for an axes legend, not a figure one here).
    ax.legend(handles=handles, loc="upper center", bbox_to_anchor=(0.5, -0.13), ncols=2, fontsize=8)
    return _save(fig, Path(path))


def _draw_failed_points(ax: Any, records: Sequence[ResultRecord], x_key: str,
                        thresholds_ok: Mapping[str, bool] | None) -> list[Any]:  # fmt: skip
    """Points whose tests failed: a red cross, labelled with the thresholds they missed. :returns: legend handles."""
    handles: list[Any] = []
    failed = [(split_name(r.profile)[1].get(x_key), _num(r.metrics.get("output_tok_s"))) for r in records
              if thresholds_ok is not None and not thresholds_ok.get(r.profile, False)]  # fmt: skip
    if failed:
        (h,) = ax.plot([x for x, _ in failed], [y for _, y in failed], marker="X", markersize=11, color="red",
                       linestyle="none", label="thresholds not met", zorder=4)  # fmt: skip
        handles.append(h)
        for r in records:
            missed = [k.removeprefix("min_") for k, v in r.checks.items() if v.startswith("FAILED")]
            if missed and thresholds_ok is not None and not thresholds_ok.get(r.profile, False):
                ax.annotate("missed " + ", ".join(missed), (split_name(r.profile)[1].get(x_key),
                            _num(r.metrics.get("output_tok_s"))), textcoords="offset points", xytext=(0, -16),
                            ha="center", fontsize=8, color="red")  # fmt: skip
    return handles


def _draw_accept_floors(
    ax2: Any, records: Sequence[ResultRecord], x_key: str, xs_all: set[float], accept_floor: float | None,
    accept_floors: Mapping[str, float] | None,
) -> tuple[list[tuple[float | None, float]], list[Any]]:  # fmt: skip
    """``min_accept_length`` as a dash-dot segment at each point where it applies (not where its check is ``n/a``).
    :returns: (x, floor) of those points, legend handles."""
    handles: list[Any] = []
    floors = dict(accept_floors) if accept_floors is not None else {}
    if accept_floors is None and accept_floor is not None:
        floors = {r.profile: accept_floor for r in records}
    applies = [
        (split_name(r.profile)[1].get(x_key), floors[r.profile])
        for r in records
        if r.profile in floors and not r.checks.get("min_accept_length", "").startswith("n/a")
    ]
    half = 0.4 * min((b - a for a, b in itertools.pairwise(sorted(xs_all))), default=1)
    for i, (x, floor) in enumerate(applies):
        if x is None:
            continue
        h = ax2.hlines(floor, x - half, x + half, color=(0.6, 0.0, 0.6), linestyle="-.", linewidth=1.6,
                       label=f"min_accept_length {floor:g} (where it applies)")  # fmt: skip
        if i == 0:
            handles.append(h)
    return applies, handles


def _draw_baselines(
    ax: Any, baselines: Sequence[ResultRecord], x_key: str, series: Mapping[str, list[tuple[float, ResultRecord]]],
    colors: Sequence[str], single: bool,
) -> list[Any]:  # fmt: skip
    """Profiles without speculation: a dotted line over concurrency when swept with it, else a horizontal line of
    their tok/s (in the colour of the series at the same concurrency). :returns: legend handles."""
    handles: list[Any] = []
    series_color = {label: (colors[0] if single else colors[i % len(colors)]) for i, label in enumerate(series)}
    series_conc = {label: {_conc(r) for _, r in items} for label, items in series.items()}
    if baselines:
        by_x = [(split_name(b.profile)[1].get(x_key), b) for b in baselines]
        if x_key == "concurrency" and all(x is not None for x, _ in by_x) and len(by_x) > 1:
            by_x.sort(key=lambda t: t[0] or 0)
            (h,) = ax.plot([x for x, _ in by_x], [_num(b.metrics.get("output_tok_s")) for _, b in by_x],
                           marker="x", color="0.35", linestyle=":", linewidth=1.5,
                           label=f"{split_name(by_x[0][1].profile)[0]} (no speculation): output tok/s")  # fmt: skip
            handles.append(h)
        else:
            for b in baselines:
                value = _num(b.metrics.get("output_tok_s"))
                owners = [label for label, conc in series_conc.items() if conc == {_conc(b)}]
                color = series_color[owners[0]] if len(series) > 1 and len(owners) == 1 else "0.35"
                h = ax.axhline(value, color=color, linestyle=":", linewidth=1.5,
                               label=f"{b.profile} (no speculation): {value:.1f} tok/s")  # fmt: skip
                handles.append(h)
    return handles


def _draw_best_points(
    ax: Any, best: Sequence[ResultRecord], tied: Sequence[ResultRecord], baselines: Sequence[ResultRecord],
    x_key: str, xs_all: set[float],
) -> list[Any]:  # fmt: skip
    """Gold stars on the best points (labelled with tok/s and speedup) and on those tied with them; a leader tied
    with a point of its load is labelled ``highest``, not ``best`` (the table's ``<- highest``). :returns: legend
    handles."""
    handles: list[Any] = []
    starred = [(r, "best") for r in best] + [(r, "tie") for r in tied]
    # The leaders with a tie at their load (tok/s of different loads are never ranked against each other).
    tied_loads = {load_of(r) for r in tied}
    for i, (record, kind) in enumerate(starred):
        bx = split_name(record.profile)[1].get(x_key)
        by = _num(record.metrics.get("output_tok_s"))
        up = speedup(record, baselines)
        word = "highest" if load_of(record) in tied_loads else "best"
        text = f"{word}: {by:.1f} tok/s" + (f", {up:.2f}x" if up is not None else "")
        if kind == "best" and len(best) > 1:
            label = "best points (per concurrency)" if not tied else "best or highest (tied) points (per concurrency)"
        elif kind == "best":
            label = f"{word} point: {record.profile}" + (" (not separated from the ties)" if tied else "")
        else:
            label = "tied with the highest (not separated)"
        (h,) = ax.plot([bx], [by], marker="*", markersize=16 if kind == "best" else 13, color="gold",
                       markeredgecolor="black", linestyle="none", label=label, zorder=5)  # fmt: skip
        right_half = bx is not None and len(xs_all) > 1 and bx > (min(xs_all) + max(xs_all)) / 2
        if kind == "tie":  # below its star: a tie sits next to the best, whose label is above
            ax.annotate("tie", (bx, by), textcoords="offset points", xytext=(0, -16), ha="center", fontsize=8)
        else:  # toward the middle so it never runs over the right-hand axis
            ax.annotate(text, (bx, by), textcoords="offset points", xytext=(-10, 8) if right_half else (10, 8),
                        ha="right" if right_half else "left", fontsize=9)  # fmt: skip
        if i == 0 or (kind == "tie" and starred[i - 1][1] == "best"):
            handles.append(h)
    return handles


def load_curve_series(records: Sequence[ResultRecord]) -> dict[str, list[tuple[float, float, float | None]]]:
    """The points of a load curve: per profile the record is derived from with the rate taken out
    (``eagle3@num_steps=3,request_rate=4`` -> ``eagle3@num_steps=3``), its (request rate, output tok/s, TTFT p99 ms)
    sorted by rate; only records of an open loop (``workload.request_rate``) with a throughput; one per profile.

    Example: records ``baseline@request_rate=2`` (180 tok/s) and ``baseline@request_rate=8`` (520 tok/s) ->
    ``{"baseline": [(2.0, 180.0, ...), (8.0, 520.0, ...)]}``.
    """
    out: dict[str, list[tuple[float, float, float | None]]] = {}
    seen: set[str] = set()
    for record in records:
        rate = record.workload.get("request_rate")
        tok_s = record.metrics.get("output_tok_s")
        if record.profile in seen or not isinstance(rate, int | float) or not isinstance(tok_s, int | float):
            continue
        seen.add(record.profile)
        base, point = split_name(record.profile)
        rest = ",".join(f"{k}={v:g}" for k, v in point.items() if k != "request_rate")
        p99 = record.metrics.get("ttft_ms_p99")
        out.setdefault(f"{base}@{rest}" if rest else base, []).append(
            (float(rate), float(tok_s), float(p99) if isinstance(p99, int | float) else None)
        )
    return {label: sorted(points) for label, points in out.items()}


def plot_load_curve(records: Sequence[ResultRecord], path: str | Path) -> Path | None:
    """The load curve of a ``request_rate`` sweep: output tok/s (left) and TTFT p99 (right) against the offered
    request rate, one line per profile (:func:`load_curve_series`): where the baseline and EAGLE-3 lines cross is
    where speculation stops paying, and where TTFT p99 turns up is where the server saturates.

    :returns: the PNG's path, or None when fewer than two rates were measured (nothing to draw).
    :raises ImportError: matplotlib is missing (the ``plot`` extra).
    """
    series = load_curve_series(records)
    if not any(len(points) >= 2 for points in series.values()):
        return None
    fig = _figure(10.0, 4.2)
    left, right = fig.subplots(1, 2)
    for i, (label, points) in enumerate(series.items()):
        rates = [r for r, _, _ in points]
        style = {"color": f"C{i % 10}", "marker": "o", "label": label}
        left.plot(rates, [t for _, t, _ in points], **style)
        ttft = [(r, p) for r, _, p in points if p is not None]
        if ttft:
            right.plot([r for r, _ in ttft], [p for _, p in ttft], **style)
    left.set_xlabel(_AXIS_LABELS["request_rate"])
    left.set_ylabel("output tok/s")
    right.set_xlabel(_AXIS_LABELS["request_rate"])
    right.set_ylabel("TTFT p99 (ms)")
    left.legend(fontsize="small")
    left.grid(alpha=0.3)
    right.grid(alpha=0.3)
    fig.suptitle("load curve: throughput and tail latency against the offered request rate")
    return _save(fig, Path(path))


def _conc(record: ResultRecord) -> Any:
    return record.workload.get("concurrency")


def _num(value: Any) -> float:
    """A metric value for plotting; NaN (a gap in the line) when not applicable."""
    return float(value) if isinstance(value, int | float) and not isinstance(value, bool) else float("nan")


@dataclass(frozen=True, slots=True)
class TrendPoint:
    """One profile in one run, for one metric field: what a trend plot draws at one x.

    ``value`` is the record's ``metrics[field]`` (the median over repeats); ``low``/``high`` the smallest and
    largest per-repeat value (``ResultRecord.values``; both ``value`` with a single repeat); ``failed`` is True when
    any test of the profile failed in that run; ``started`` is the run's start (``time.time()`` seconds).
    """

    run_id: str
    started: float
    profile: str
    value: float
    low: float
    high: float
    failed: bool


def trend_points(runs: Sequence[RunFile], field: str, profiles: Sequence[str] | None = None) -> list[TrendPoint]:
    """Per run (in start order) and profile (``profiles``, or every profile found), the point of ``field``.

    Every test of a profile in a run shares one measurement, so the first record gives the values; the run is
    ``failed`` for that profile when any of its records' ``outcome`` is ``failed``. A profile whose record has no
    number for ``field`` (accept length without speculation) gives no point.
    """
    points = []
    for run in sorted(runs, key=lambda r: (r.started, r.run_id)):
        by_profile: dict[str, list[ResultRecord]] = {}
        for record in run.results:
            if profiles is None or record.profile in profiles:
                by_profile.setdefault(record.profile, []).append(record)
        for name, records in by_profile.items():
            value = _num(records[0].metrics.get(field))
            if value != value:  # NaN: not applicable
                continue
            repeats = records[0].values(field) or [value]
            failed = any(r.outcome == "failed" for r in records)
            points.append(TrendPoint(run.run_id, run.started, name, value, min(repeats), max(repeats), failed))
    return points


def plot_trend(
    runs: Sequence[RunFile],
    path: str | Path,
    *,
    metrics: Sequence[str] = DEFAULT_TREND_METRICS,
    thresholds: Mapping[str, float] | None = None,
    profiles: Sequence[str] | None = None,
    title: str | None = None,
) -> Path:
    """Draw one panel per metric, x = each run's start time (runs a day apart sit a day apart), one line per profile
    (one legend, right of the panels): the median over repeats as the point, the repeats' min-max as a bar through
    it, a red X on runs in which a test of that profile failed (labelled with the run id's suffix); thresholds as
    labelled horizontal red dashed lines in their metric's panel.

    Only runs holding one of the plotted profiles are drawn and counted; the title names ``profiles`` when given.

    :param runs: run files (``results.read_run_file``), any order.
    :param path: the PNG to write.
    :param metrics: ``RunMetrics`` fields, e.g. ``output_tok_s``, ``accept_length``, ``ttft_ms_p50``.
    :param thresholds: metric field -> value; a field not in ``metrics`` gets its own panel.
    :param profiles: only these profiles (default: all found).
    :returns: ``path``.
    :raises ValueError: no runs, or no record of the requested profiles in any run.
    :raises ImportError: matplotlib is not installed.
    """
    if not runs:
        raise ValueError("plot_trend: no runs to plot")
    thresholds = dict(thresholds or {})
    fields = list(dict.fromkeys([*metrics, *thresholds]))
    shown = [run for run in runs if any(profiles is None or r.profile in profiles for r in run.results)]
    if not shown:
        wanted = f" of profile(s) {', '.join(profiles)}" if profiles else ""
        raise ValueError(f"plot_trend: no results{wanted} in {len(runs)} run(s)")
    names = list(dict.fromkeys(r.profile for run in sorted(shown, key=lambda r: r.started) for r in run.results
                               if profiles is None or r.profile in profiles))  # fmt: skip
    fig = _figure(11.0, 2.6 * len(fields) + 1.0)
    axes = fig.subplots(len(fields), 1, sharex=True, squeeze=False)[:, 0]
    handles: dict[str, Any] = {}
    for ax, field_name in zip(axes, fields, strict=True):
        points = trend_points(shown, field_name, names)
        for i, name in enumerate(names):
            mine = [p for p in points if p.profile == name]
            if not mine:
                continue
            color = f"C{i % 10}"
            xs = [_when(p.started) for p in mine]
            (line,) = ax.plot(xs, [p.value for p in mine], marker="o", color=color, label=name)
            handles.setdefault(name, line)
            ax.vlines(xs, [p.low for p in mine], [p.high for p in mine], color=color, alpha=0.45, linewidth=4)
            for p in mine:
                if p.failed:
                    cross = ax.scatter([_when(p.started)], [p.value], marker="X", s=90, color="red", zorder=4,
                                       label="a test failed in this run")  # fmt: skip
                    handles.setdefault("failed", cross)
                    ax.annotate(p.run_id.rsplit("-", 1)[-1], (_when(p.started), p.value), xytext=(5, 5),
                                textcoords="offset points", color="red", fontsize=7)  # fmt: skip
        if field_name in thresholds:
            value = thresholds[field_name]
            ax.axhline(value, color="red", linestyle="--", linewidth=1.2)
            ax.annotate(f"threshold {value:g}", (1.0, value), xycoords=("axes fraction", "data"), xytext=(-4, 3),
                        textcoords="offset points", ha="right", va="bottom", color="red", fontsize=8)  # fmt: skip
        ax.set_ylabel(metric_label(field_name))
        ax.grid(True, alpha=0.3)
    fig.legend(handles=list(handles.values()), loc="outside right upper", title="profile", fontsize=8)
    from matplotlib.dates import AutoDateLocator, ConciseDateFormatter

    locator = AutoDateLocator()
    axes[-1].xaxis.set_major_locator(locator)
    axes[-1].xaxis.set_major_formatter(ConciseDateFormatter(locator))
    starts = {run.started for run in shown}
    if len(starts) == 1:
        # One run (or runs of one second): matplotlib widens a zero-width date range by years (2025-2029).
        at = _when(starts.pop())
        axes[-1].set_xlim(at - timedelta(hours=1), at + timedelta(hours=1))
    axes[-1].set_xlabel("run start (UTC); bars: min-max over repeats, point: median")
    fig.suptitle(title or trend_title(names if profiles else None, len(shown)))
    return _save(fig, Path(path))


def trend_title(profiles: Sequence[str] | None, runs: int) -> str:
    """``specdec trend of eagle3 over 5 run(s)`` (``specdec trend over 5 run(s)`` without chosen profiles)."""
    return (
        f"specdec trend of {', '.join(profiles)} over {runs} run(s)"
        if profiles
        else (f"specdec trend over {runs} run(s)")
    )


def _when(started: float) -> datetime:
    return datetime.fromtimestamp(started, tz=timezone.utc)


def plot_positions(
    records: Sequence[ResultRecord],
    path: str | Path,
    *,
    floors: Mapping[str, Mapping[int, float]] | None = None,
    title: str | None = None,
) -> Path:
    """Draw acceptance per draft position: x = position k, y = rate; per record a solid line of the unconditional
    rate (``accept_rate_at``: accepted at k / verify steps) and a dashed line of the conditional one
    (``accept_rate_cond_at``: accepted at k / reached k), same colour; ``min_accept_rate_at`` floors as red ticks.

    :param records: result records; those without per-position data are skipped.
    :param path: the PNG to write (parent directories are created).
    :param floors: profile -> ``{position: floor}`` (a profile's ``thresholds.min_accept_rate_at``).
    :returns: ``path``.
    :raises ValueError: no record has per-position data.
    :raises ImportError: matplotlib is not installed.
    """
    rows = [r for r in records if r.metrics.get("accept_rate_at")]
    if not rows:
        raise ValueError("plot_positions: no result has per-position acceptance")
    seen: dict[str, ResultRecord] = {}
    for record in rows:  # every test of a profile shares one measurement: one line per profile
        seen.setdefault(record.profile, record)
    fig = _figure(7.5, 4.6)
    ax = fig.add_subplot()
    top = 1
    for i, (profile, record) in enumerate(seen.items()):
        rates = [_num(v) for v in record.metrics.get("accept_rate_at") or ()]
        cond = [_num(v) for v in record.metrics.get("accept_rate_cond_at") or ()]
        xs = list(range(1, len(rates) + 1))
        top = max(top, len(xs))
        color = f"C{i % 10}"
        ax.plot(xs, rates, marker="o", color=color, label=f"{profile}: accepted at k / verify steps")
        if len(cond) == len(xs):
            ax.plot(xs, cond, marker="s", color=color, linestyle="--", alpha=0.8,
                    label=f"{profile}: accepted at k / reached k")  # fmt: skip
        for k, floor in sorted((floors or {}).get(profile, {}).items()):
            ax.plot([k], [floor], marker="_", markersize=22, markeredgewidth=2.5, color="red", linestyle="none")
            ax.annotate(f"min {floor:g}", (k, floor), textcoords="offset points", xytext=(12, -3), color="red",
                        fontsize=8)  # fmt: skip
    ax.set_xticks(list(range(1, top + 1)))
    ax.set_xlabel("draft position k (1 = first draft token)")
    ax.set_ylabel("acceptance rate")
    ax.set_ylim(0, 1.05)
    ax.grid(True, alpha=0.3)
    ax.set_title(title or "specdec acceptance by draft position")
    ax.legend(loc="upper center", bbox_to_anchor=(0.5, -0.14), ncols=1, fontsize=8)
    return _save(fig, Path(path))
