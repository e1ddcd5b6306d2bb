"""PNG plots of results: a sweep (tok/s and accept length against the swept parameter) and a trend across runs.

matplotlib (the ``plot`` extra) is imported only when a plot is drawn, through its object API with the Agg canvas
(``matplotlib.figure.Figure`` + ``backend_agg.FigureCanvasAgg``): no pyplot, no global backend switch, so a user's
interactive backend is left alone and no display is needed.
"""

from __future__ import annotations

import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from pytest_specdec.metrics import METRICS
from pytest_specdec.results import ResultRecord, RunFile
from pytest_specdec.sweep import speedup, split_name

__all__ = ["DEFAULT_TREND_METRICS", "metric_label", "plot_sweep", "plot_trend"]

#: What ``python -m pytest_specdec plot`` draws without ``--metric``.
DEFAULT_TREND_METRICS = ("output_tok_s", "accept_length")

_AXIS_LABELS = {
    "num_steps": "speculative num_steps (draft steps per verify)",
    "num_draft_tokens": "speculative num_draft_tokens (tokens verified per step)",
    "eagle_topk": "speculative eagle_topk (branches per draft step)",
    "concurrency": "concurrency (requests in flight)",
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
    thresholds_ok: Mapping[str, bool] | None = None,
    title: str | None = None,
) -> Path:
    """Draw output tok/s (left axis, solid) and accept length (right axis, dashed) against the swept parameter.

    The x axis is the first swept key of the points (``sweep.split_name`` of each record's profile); every other
    combination (another base profile, or the values of further swept keys) is its own pair of lines. Baselines
    without speculation are dotted horizontal lines of their tok/s (a line over x when x is concurrency and the
    baseline was swept with it; coloured as the series of the same concurrency). Each best point is starred and
    labelled with its tok/s and speedup; points whose tests failed are crossed out in red.

    :param records: ``sweep.sweep_records`` (one per point), at least one.
    :param path: the PNG to write (parent directories are created).
    :param baselines: ``sweep.baseline_records``.
    :param best: ``sweep.best_points`` (one per concurrency), or empty.
    :param thresholds_ok: ``sweep.thresholds_ok``; profiles mapped to False get a red cross (None: no crosses).
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
    series: dict[str, list[tuple[int, ResultRecord]]] = {}
    for base, point, record in points:
        rest = ", ".join(f"{k}={v}" for k, v in point.items() if k != x_key)
        series.setdefault(f"{base}, {rest}" if rest else base, []).append((point.get(x_key, 0), record))

    fig = _figure(8.0, 4.8 + 0.25 * (len(series) * 2 + len(baselines) + 2) / 2)
    ax = fig.add_subplot()
    ax2 = ax.twinx()
    colors = [f"C{i}" for i in range(10)]
    handles = []
    xs_all: set[int] = set()
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
        handles += [h1, h2]
        if single:
            ax.set_ylabel("output throughput (tok/s)", color=color)
            ax2.set_ylabel("accept length (tokens / verify step)", color=color2)
    failed = [(split_name(r.profile)[1].get(x_key), _num(r.metrics.get("output_tok_s"))) for r in records
              if thresholds_ok is not None and not thresholds_ok.get(r.profile, False)]  # fmt: skip
    if failed:
        (h,) = ax.plot([x for x, _ in failed], [y for _, y in failed], marker="X", markersize=11, color="red",
                       linestyle="none", label="thresholds not met", zorder=4)  # fmt: skip
        handles.append(h)
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
    for i, record in enumerate(best):
        bx = split_name(record.profile)[1].get(x_key)
        by = _num(record.metrics.get("output_tok_s"))
        up = speedup(record, baselines)
        text = f"best: {by:.1f} tok/s" + (f", {up:.2f}x" if up is not None else "")
        (h,) = ax.plot([bx], [by], marker="*", markersize=16, color="gold", markeredgecolor="black", linestyle="none",
                       label="best point" + ("s (per concurrency)" if len(best) > 1 else f": {record.profile}"),
                       zorder=5)  # fmt: skip
        right_half = bx is not None and len(xs_all) > 1 and bx > (min(xs_all) + max(xs_all)) / 2
        # Label toward the middle so it never runs over the right-hand axis.
        ax.annotate(text, (bx, by), textcoords="offset points", xytext=(-10, 8) if right_half else (10, 8),
                    ha="right" if right_half else "left", fontsize=9)  # fmt: skip
        if i == 0:
            handles.append(h)
    ax.set_xlabel(_AXIS_LABELS.get(x_key, x_key))
    if not single:
        ax.set_ylabel("output throughput (tok/s)")
        ax2.set_ylabel("accept length (tokens / verify step)")
    ax.set_xticks(sorted(xs_all))
    tops = [_num(r.metrics.get("output_tok_s")) for r in [*records, *baselines]]
    ax.set_ylim(bottom=0, top=max([t for t in tops if t == t] + [1.0]) * 1.2)  # headroom for the best label
    ax2.set_ylim(bottom=0, top=max([_num(r.metrics.get("accept_length")) for _, _, r in points] + [1.0]) * 1.25)
    ax.grid(True, alpha=0.3)
    bases = sorted({b for b, _, _ in points})
    ax.set_title(title or f"specdec sweep of {', '.join(bases)} over {x_key}")
    # Below the x label, outside the data (constrained layout makes room for an axes legend, not a figure one here).
    ax.legend(handles=handles, loc="upper center", bbox_to_anchor=(0.5, -0.13), ncols=2, fontsize=8)
    return _save(fig, Path(path))


def _conc(record: ResultRecord) -> Any:
    return record.workload.get("concurrency")


def _num(value: Any) -> float:
    """A metric value for plotting; NaN (a gap in the line) when not applicable."""
    return float(value) if isinstance(value, int | float) and not isinstance(value, bool) else float("nan")


def _run_label(run: RunFile) -> str:
    """``11-30 13:48`` (UTC start) plus the id's random suffix, so runs started in the same minute differ."""
    stamp = time.strftime("%m-%d %H:%M", time.gmtime(run.started)) if run.started else run.run_id
    return f"{stamp}\n{run.run_id.rsplit('-', 1)[-1]}"


def plot_trend(
    runs: Sequence[RunFile],
    path: str | Path,
    *,
    metrics: Sequence[str] = DEFAULT_TREND_METRICS,
    thresholds: Mapping[str, float] | None = None,
    profiles: Sequence[str] | None = None,
    title: str | None = None,
) -> Path:
    """Draw one panel per metric, x = the runs in start order, one line per profile (one legend, right of the
    panels); thresholds as labelled horizontal red dashed lines in their metric's panel.

    A profile's value in a run is its first record's ``metrics[field]`` (every test of a profile in a run shares
    one measurement); a run without that profile leaves a gap.

    :param runs: run files (``results.read_run_file``), any order; sorted by ``started``.
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
    ordered = sorted(runs, key=lambda r: (r.started, r.run_id))
    thresholds = dict(thresholds or {})
    fields = list(dict.fromkeys([*metrics, *thresholds]))
    names: list[str] = []
    for run in ordered:
        for record in run.results:
            if record.profile not in names and (profiles is None or record.profile in profiles):
                names.append(record.profile)
    if not names:
        wanted = f" of profile(s) {', '.join(profiles)}" if profiles else ""
        raise ValueError(f"plot_trend: no results{wanted} in {len(ordered)} run(s)")
    fig = _figure(max(8.0, 1.1 * len(ordered) + 5.5), 2.6 * len(fields) + 1.0)
    axes = fig.subplots(len(fields), 1, sharex=True, squeeze=False)[:, 0]
    xs = list(range(len(ordered)))
    handles: dict[str, Any] = {}
    for ax, field_name in zip(axes, fields, strict=True):
        for i, name in enumerate(names):
            ys = []
            for run in ordered:
                found = next((r for r in run.results if r.profile == name), None)
                ys.append(_num(found.metrics.get(field_name)) if found is not None else float("nan"))
            (line,) = ax.plot(xs, ys, marker="o", color=f"C{i % 10}", label=name)
            if any(y == y for y in ys):  # NaN != NaN: a profile without this metric (no speculation) is not listed
                handles.setdefault(name, line)
        if field_name in thresholds:
            value = thresholds[field_name]
            ax.axhline(value, color="red", linestyle="--", linewidth=1.2)
            ax.annotate(f"threshold {value:g}", (1.0, value), xycoords=("axes fraction", "data"), xytext=(-4, 3),
                        textcoords="offset points", ha="right", va="bottom", color="red", fontsize=8)  # fmt: skip
        ax.set_ylabel(metric_label(field_name))
        ax.grid(True, alpha=0.3)
    fig.legend(handles=list(handles.values()), loc="outside right upper", title="profile", fontsize=8)
    axes[-1].set_xticks(xs)
    axes[-1].set_xticklabels([_run_label(r) for r in ordered], fontsize=8)
    axes[-1].set_xlabel("run (UTC start time, run id suffix)")
    fig.suptitle(title or f"specdec trend over {len(ordered)} run(s)")
    return _save(fig, Path(path))
