"""The sweep as people read it: the table of points with their ranking marks and closing verdict lines, speedup by
concurrency (where speculation stops paying), and the run's :class:`SweepSummary` (table, best points, the lines that
fail the run) that ``report.summary`` prints and plots. The ranking itself is ``judge.sweep``'s.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from pytest_specdec.core.sweep_names import point_label, split_name
from pytest_specdec.core.table import Column, format_value, text_table
from pytest_specdec.judge import ranking, sequential
from pytest_specdec.judge.pair_ratios import paired_ratios
from pytest_specdec.judge.sweep import (
    RankedGroup,
    baseline_records,
    concurrency_of,
    configured_point_lines,
    instances_note,
    load_label,
    method_note,
    rank_points,
    rate_of,
    repeats_note,
    speedup,
    speedup_reference,
    spread_note,
    sweep_records,
    thresholds_ok,
    tok_s_range,
    would_note,
)
from pytest_specdec.measure.results import ResultRecord
from pytest_specdec.profiles.schema import Profile

__all__ = ["SweepSummary", "check_cell", "crossover_lines", "draft_token_lines", "sweep_summary", "sweep_table"]


def check_cell(record: ResultRecord, ok: bool) -> str:
    """The thresholds cell of a point: ``ok``, ``FAILED accept_length`` (the thresholds it missed, from
    ``ResultRecord.checks``), ``FAILED`` (a failure without a threshold miss: compare, error), and
    ``ok (min_accept_length n/a)`` when a threshold could not apply at the point (``thresholds.evaluate``), ``undecided
    (min_tok_s)`` when one was not decided on the point's repeats (not failed, not shown to hold)."""
    failed = [key.removeprefix("min_") for key, v in record.checks.items() if v.startswith("FAILED")]
    if not ok:
        return "FAILED " + ", ".join(failed) if failed else "FAILED"
    undecided = [key for key, v in record.checks.items() if v.startswith("undecided")]
    na = [key for key, v in record.checks.items() if v.startswith("n/a")]
    notes = "; ".join(filter(None, [", ".join(undecided), f"{', '.join(na)} n/a" if na else ""]))
    # Not "ok" while a threshold is open: the point is ranked (it failed nothing), but nothing showed it holds.
    head = "undecided" if undecided else "ok"
    return f"{head} ({notes})" if notes else head


#: (header, metrics key, format) of the sweep table.
_COLUMNS: tuple[tuple[str, str, str], ...] = (
    ("accept_len", "accept_length", "{:.2f}"),
    ("accept_rate", "accept_rate", "{:.3f}"),
    ("tok/s", "output_tok_s", "{:.1f}"),
    ("TTFT p50 ms", "ttft_ms_p50", "{:.1f}"),
    ("ITL p50 ms", "itl_ms_p50", "{:.2f}"),
)


def _paired_interval(ratios: Sequence[float]) -> str:
    """``, CI 1.31-1.45 (90.0%, geometric mean of 3 paired ratios)``: the interval the point's ``min_speedup``
    verdict uses, a single look at the sweep's pairs (``sequential.decide_floor``, ``Design(n, n)``: two-sided 90%,
    a one-sided test at 5%, the level of the ranking's Welch tests too), written as the compare writes its intervals;
    ``""`` with fewer than 2 ratios or no spread in them (no interval). The median's order-statistic interval
    (``stats.repeat_summary``) shown before was the pairs' min-max at whatever coverage that had: 50% at 2 pairs, 75%
    at 3, beside verdicts at 90%/95% (an adversarial trial)."""
    if len(ratios) < 2:
        return ""
    decision = sequential.decide_floor(list(ratios), 1.0, sequential.Design(len(ratios), len(ratios)))
    if decision.low is None or decision.high is None:
        return ""
    return (f", CI {decision.low:.4g}-{decision.high:.4g} ({decision.confidence:.1%}, geometric mean of "
            f"{decision.n} paired ratios)")  # fmt: skip


def _closing_line(group: RankedGroup, baselines: Sequence[ResultRecord], at: str) -> str:
    """``best[ at concurrency N]: ...; separated from every other point``, ``highest[ at ...]: ...; tied with ...``
    (a leader not separated from every other point) or ``undecided[ at ...]: ...`` of one group."""
    best = group.best
    if best is None:
        r = group.ranking
        second = min(r.separations, key=lambda s: s.gap, default=None)  # the runner-up: the gap a ranking needs
        what = (
            f"the {second.gap:.1%} gap between {r.leader} and {second.other}" if second is not None else "the points"
        )
        need = r.need(second.gap) if second is not None else None
        would = would_note(need, what, r.min_values,
                           instances=instances_note(group, second.gap) if second is not None else "")  # fmt: skip
        return f"undecided{at}: {repeats_note(group)}; {would} ({spread_note(group)}); no best point named"
    up = speedup(best, baselines)
    tok_s = format_value("{:.1f}", best.metrics.get("output_tok_s"))
    spread = tok_s_range(best)
    repeats = f", repeats {spread[0]:.1f}-{spread[1]:.1f}" if spread is not None and spread[0] != spread[1] else ""
    reference = speedup_reference(best, baselines)
    versus = f", {up:.2f}x vs {reference}" if up is not None and reference is not None else ""
    if group.basis == "paired speedup" and reference is not None:
        # The interval's own estimate, the geometric mean, not the median beside "geometric mean of 3 paired ratios"
        # (helper-81 read 1.35x there and 1.37x for the same point in the configured-point line).
        ratios = paired_ratios(best, "output_tok_s")
        center = ranking.Sample(best.profile, tuple(ratios)).center if ratios else None
        interval = _paired_interval(ratios)
        if center is not None and interval:
            versus = f", {center:.2f}x vs {reference}{interval}"
    # "best" only for a leader separated from every other point; one tied with others is "the highest", as the
    # configured-point lines call it (a trial read "best:" beside "the highest" for the same point).
    head = "highest" if group.tied else "best"
    line = f"{head}{at}: {best.profile} ({tok_s} tok/s{repeats}{versus})"
    if len(group.ranked) == 1:
        return line + " (the only point that met the thresholds)"
    by_name = {s.other: s for s in group.ranking.separations}
    tie = [f"{r.profile} ({by_name[r.profile].describe()})" for r in group.tied]
    line += f"; tied with {', '.join(tie)} (not separated)" if tie else "; separated from every other point"
    return f"{line} [{method_note(group, instances=True)}]"


def sweep_table(
    records: Sequence[ResultRecord],
    *,
    baselines: Sequence[ResultRecord] = (),
    thresholds_ok: Mapping[str, bool],
) -> list[str]:
    """The sweep as fixed-width lines: a header, one row per point, then closing verdict lines.

    Columns: point (derived profile name), accept length (tokens per verify step), accept rate (fraction of drafted
    positions), output tok/s (median of repeats) and its repeat range (min-max, :func:`tok_s_range`), TTFT p50 ms,
    ITL p50 ms, speedup (``n.nnx`` vs the baseline of the same concurrency, :func:`speedup`; ``n/a`` without one),
    thresholds (:func:`check_cell`). Points are ranked per concurrency by :func:`rank_points` (paired speedup when
    every point has one, else tok/s; ``ranking.py``): when decided, the leader's row ends in ``<- best`` when it is
    separated from every other point, else in ``<- highest`` with the rows of the points not separated from it in
    ``<- tie``, and the closing line is ``best: <point> (<tok/s> tok/s, repeats <min>-<max>[, <speedup>x vs
    <baseline>[, CI <lo>-<hi> (90.0%, geometric mean of <n> paired ratios)]]); separated from every other point
    [<method>]`` or ``highest: <point> (...); tied with <point> (p=<p>) (not separated) [<method>]``; with fewer than
    2 repeats at a point nothing is ranked: ``undecided: 1 repeat per point; <n> repeats per point would separate the
    <g>% gap between <highest> and <next> at this spread (σ ...); no best point named``. ``... at concurrency N`` per
    concurrency when concurrency is swept; ``no point met the thresholds (<n> points)`` when none passed.

    :param records: :func:`sweep_records` (one per point).
    :param baselines: :func:`baseline_records`; empty when no profile without speculation ran.
    :param thresholds_ok: :func:`thresholds_ok`.
    """
    groups = rank_points(records, thresholds_ok=thresholds_ok, baselines=baselines)
    marks: dict[str, str] = {}
    for group in groups:
        if group.best is not None:
            # A leader tied with other points is only the highest: the measurements did not separate it.
            marks[group.best.profile] = "<- highest" if group.tied else "<- best"
            marks.update((t.profile, "<- tie") for t in group.tied)
    columns = [
        Column("point"),
        *(Column(header, "right", fmt) for header, _, fmt in _COLUMNS),
        Column("tok/s range", "right"),
        Column("speedup", "right"),
        Column("thresholds"),
        Column(""),  # the leader's and its ties' mark
    ]
    rows: list[list[Any]] = []
    for record in records:
        up = speedup(record, baselines)
        spread = tok_s_range(record)
        if spread is None:
            shown_range = "n/a"
        else:
            shown_range = f"{spread[0]:.1f}-{spread[1]:.1f}" if spread[0] != spread[1] else f"{spread[0]:.1f}"
        rows.append([
            record.profile,
            *(record.metrics.get(key) for _, key, _ in _COLUMNS),
            shown_range,
            f"{up:.2f}x" if up is not None else "n/a",
            check_cell(record, thresholds_ok.get(record.profile, False)),
            marks.get(record.profile, ""),
        ])  # fmt: skip
    lines = text_table(columns, rows)
    if not any(g.ranked for g in groups):
        lines.append(f"no point met the thresholds ({len(records)} points)")
    for group in groups:
        if group.ranked:
            at = load_label(group, groups)
            lines.append(_closing_line(group, baselines, at))
    return lines + crossover_lines(records, baselines)


def crossover_lines(records: Sequence[ResultRecord], baselines: Sequence[ResultRecord]) -> list[str]:
    """Speedup by concurrency and where speculation stops paying, one line per speculative point
    swept over concurrency (the same point at two or more concurrencies, each with a speedup, :func:`speedup`).

    ``speedup by concurrency, eagle3@num_steps=3: 1: 1.38x, 8: 1.12x, 64: 0.84x; speculation stops paying between
    concurrency 8 and 64`` (or ``pays at every measured concurrency`` / ``pays at none``). Speculation trades spare
    compute for fewer forward passes: as the batch grows, verify stops being free and the plain arm catches up (real
    SGLang 0.5.17 on an H200, tiny model, concurrency 64: 3,752 tok/s with EAGLE-3 vs 8,796 without). The same per
    ``request_rate`` of an open loop (``speedup by request_rate, eagle3: 1: 1.30x, 4: 1.05x, 16: 0.92x; ...``).
    """
    lines = []
    for axis in ("concurrency", "request_rate"):
        groups: dict[tuple[str, tuple[tuple[str, float], ...]], list[tuple[float, float]]] = {}
        for record in records:
            base, point = split_name(record.profile)
            at = concurrency_of(record) if axis == "concurrency" else rate_of(record)
            up = speedup(record, baselines)
            if axis not in point or at is None or up is None:
                continue
            rest = tuple(sorted((k, v) for k, v in point.items() if k != axis))
            groups.setdefault((base, rest), []).append((at, up))
        for (base, rest), series in groups.items():
            if len({c for c, _ in series}) < 2:
                continue
            series.sort()
            name = f"{base}@{point_label(dict(rest))}" if rest else base
            cells = ", ".join(f"{c:g}: {u:.2f}x" for c, u in series)
            paying = [u > 1.0 for _, u in series]
            if all(paying):
                verdict = f"speculation pays at every measured {axis}"
            elif not any(paying):
                verdict = "speculation pays at none"
            else:
                # The first step from paying to not paying; None when it only starts paying further up.
                i = next((i for i in range(1, len(series)) if paying[i - 1] and not paying[i]), None)
                verdict = (
                    f"speculation stops paying between {axis} {series[i - 1][0]:g} and {series[i][0]:g}"
                    if i is not None
                    else f"speculation pays only at higher {axis}"
                )
            lines.append(f"speedup by {axis}, {name}: {cells}; {verdict}")
    return lines


def draft_token_lines(points: Sequence[ResultRecord], profiles: Mapping[str, Profile]) -> list[str]:
    """One line per point swept on ``num_draft_tokens`` alone at ``eagle_topk`` 1 that ran other ``num_steps`` than
    its profile's: ``eagle3@num_draft_tokens=3 ran num_steps 2, not profile eagle3's 3 (eagle_topk 1: ...)``.

    A chain verifies num_steps + 1 draft tokens (SGLang's server_args: at ``speculative_eagle_topk == 1`` it sets
    ``speculative_num_draft_tokens = speculative_num_steps + 1``), so such a point is run at num_steps = its draft
    tokens - 1 (``engines.common.chain_speculative_at``), which its name does not say (an adversarial trial: the row
    ``num_draft_tokens=3`` measured 2 steps on a profile of 3, silently).

    :param points: :func:`sweep_records`; the steps run are read from each one's ``fingerprint["speculative"]``.
    :param profiles: the session's profiles by name (the base profiles, for their own ``num_steps``).
    """
    lines = []
    for record in points:
        base, point = split_name(record.profile)
        profile = profiles.get(base)
        ran = record.fingerprint.get("speculative") or {}
        if "num_draft_tokens" not in point or "num_steps" in point or ran.get("eagle_topk") != 1:
            continue
        own = profile.speculative.num_steps if profile is not None and profile.speculative is not None else None
        steps = ran.get("num_steps")
        if steps is None or steps == own:
            continue
        lines.append(
            f"{record.profile} ran num_steps {steps}, not profile {base}'s {own} (eagle_topk 1: a chain verifies "
            f"num_steps + 1 draft tokens, as SGLang sets num_draft_tokens = num_steps + 1); sweep num_steps to name "
            "the points by the steps they run"
        )
    return lines


@dataclass
class SweepSummary:
    """The end-of-run verdict of a sweep (``sweep_summary``): what the table and plot show and which lines fail
    the run."""

    points: list[ResultRecord]
    baselines: list[ResultRecord]
    thresholds_ok: dict[str, bool]
    #: The best point per concurrency (decided rankings only, :attr:`RankedGroup.best`).
    best: list[ResultRecord]
    #: The table (``sweep_table``), the points that ran other num_steps than their names say
    #: (``draft_token_lines``), then the configured-point lines (``configured_point_lines``).
    table: list[str] = field(default_factory=list)
    #: Lines that fail the run: configured point shown to be too far below the best, or "no point ..." when none
    #: passed.
    red: list[str] = field(default_factory=list)
    #: ``min_accept_length`` per point that has one (the plot draws it over the points where it applies).
    accept_floors: dict[str, float] = field(default_factory=dict)
    #: The points tied with a best point (not separated from it), for the plot.
    tied: list[ResultRecord] = field(default_factory=list)
    #: Configured-point lines that could not decide (tied, not shown beyond the allowance, 1 repeat per point).
    undecided: list[str] = field(default_factory=list)


def sweep_summary(
    records: Sequence[ResultRecord],
    profiles: Mapping[str, Profile],
    *,
    baseline: str | None,
    max_gap: float,
) -> SweepSummary | None:
    """The sweep's table, best points and failing lines from the run's records; None when no record is a sweep point.

    :param profiles: the session's profiles by name (sweep points included, for their thresholds).
    :param baseline: ``--specdec-sweep-baseline`` (``baseline_records``).
    :param max_gap: the largest allowed gap of the configured point below the best, a fraction
        (``configured_point_lines``).
    """
    points = sweep_records(records)
    if not points:
        return None
    baselines = baseline_records(records, baseline)
    ok = thresholds_ok(records)
    groups = rank_points(points, thresholds_ok=ok, baselines=baselines)
    best = [g.best for g in groups if g.best is not None]
    tied = [t for g in groups for t in g.tied]
    table = sweep_table(points, baselines=baselines, thresholds_ok=ok) + draft_token_lines(points, profiles)
    gap_lines, red, undecided = configured_point_lines(
        points, profiles, thresholds_ok=ok, max_gap=max_gap, baselines=baselines
    )
    table += gap_lines
    red += [line for line in table if line.startswith("no point met the thresholds")]
    floors = {
        r.profile: float(floor)
        for r in points
        if r.profile in profiles and (floor := profiles[r.profile].thresholds.min_accept_length) is not None
    }
    return SweepSummary(points, baselines, ok, best, table, red, floors, tied, undecided)
