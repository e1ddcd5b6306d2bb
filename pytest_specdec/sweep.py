"""Parameter sweeps: parse ``--specdec-sweep``, derive one profile per point, and tabulate the measured points.

A sweep runs the selected profile once per point, one server per point, as if each derived profile had been named
with ``--server-profile``. Derived profiles are named ``<profile>@<key>=<value>[,<key>=<value>...]``, e.g.
``eagle3@num_steps=2`` or ``eagle3@num_steps=2,concurrency=8``; :func:`split_name` reads the point back from a
stored record's ``profile``. Usage::

    points = parse_sweep("num_steps=1..4")                       # [{"num_steps": 1}, ..., {"num_steps": 4}]
    profiles, names = expand_profiles(profile_set.profiles, ["baseline", "eagle3"], points)
    ...                                                          # run every name in ``names``
    table = sweep_table(sweep_records(records), baselines=baseline_records(records, None),
                        thresholds_ok=thresholds_ok(records))
"""

from __future__ import annotations

import difflib
import itertools
import re
import statistics
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from pytest_specdec.profiles import Profile
from pytest_specdec.results import ResultRecord
from pytest_specdec.table import Column, format_value, text_table

__all__ = [
    "SPECULATIVE_KEYS",
    "SWEEP_KEYS",
    "SweepSummary",
    "WORKLOAD_KEYS",
    "baseline_records",
    "best_point",
    "best_points",
    "check_cell",
    "configured_point_lines",
    "crossover_lines",
    "expand_profiles",
    "parse_sweep",
    "point_label",
    "speedup",
    "split_name",
    "summarize",
    "sweep_records",
    "sweep_table",
    "thresholds_ok",
    "tok_s_range",
    "ties",
]

#: Sweepable keys of the ``speculative:`` block (SGLang ``--speculative-num-steps`` etc.).
SPECULATIVE_KEYS = ("num_steps", "num_draft_tokens", "eagle_topk")
#: Sweepable keys of the ``workload:`` block.
WORKLOAD_KEYS = ("concurrency",)
SWEEP_KEYS = SPECULATIVE_KEYS + WORKLOAD_KEYS

_FORMAT = (
    "expected PARAM=VALUES joined by ';', with PARAM one of " + ", ".join(SWEEP_KEYS) + " and VALUES a range "
    '1..6 or a list 1,2,4 (integers >= 1), e.g. "num_steps=1..6" or "num_steps=1,2,4;concurrency=1,8"'
)
_RANGE = re.compile(r"^(\d+)\.\.(\d+)$")
_LIST = re.compile(r"^\d+(,\d+)*$")
#: Separates a profile name from its point in a derived profile's name.
_AT = "@"


def parse_sweep(spec: str) -> list[dict[str, int]]:
    """Parse a sweep specification into its points: the cartesian product of the axes, first axis outermost.

    ``"num_steps=1..3"`` -> ``[{"num_steps": 1}, {"num_steps": 2}, {"num_steps": 3}]`` (ranges are inclusive);
    ``"num_steps=1,2;concurrency=1,8"`` -> ``[{"num_steps": 1, "concurrency": 1}, {"num_steps": 1,
    "concurrency": 8}, {"num_steps": 2, "concurrency": 1}, {"num_steps": 2, "concurrency": 8}]``.

    :param spec: ``PARAM=VALUES[;PARAM=VALUES...]``; whitespace around tokens is ignored.
    :returns: one dict per point, key order as given.
    :raises ValueError: naming the bad token and the expected format, e.g. ``'num_step=1..6': unknown parameter
        'num_step' (did you mean 'num_steps'?); expected PARAM=VALUES ...``.
    """
    axes: list[tuple[str, list[int]]] = []
    tokens = [t.strip() for t in spec.split(";")]
    if not any(tokens):
        raise ValueError(f"empty sweep; {_FORMAT}")
    for token in tokens:
        if not token:
            continue
        key, sep, raw = (part.strip() for part in token.partition("="))
        if not sep or not key:
            raise ValueError(f"{token!r}: no PARAM=VALUES; {_FORMAT}")
        if key not in SWEEP_KEYS:
            close = difflib.get_close_matches(key, SWEEP_KEYS, n=1)
            hint = f" (did you mean {close[0]!r}?)" if close else ""
            raise ValueError(f"{token!r}: unknown parameter {key!r}{hint}; {_FORMAT}")
        if any(key == k for k, _ in axes):
            raise ValueError(f"{token!r}: parameter {key!r} given twice; {_FORMAT}")
        values_text = raw.replace(" ", "")
        match = _RANGE.match(values_text)
        if match:
            low, high = int(match.group(1)), int(match.group(2))
            if low > high:
                raise ValueError(f"{token!r}: range {low}..{high} is empty (write the smaller value first); {_FORMAT}")
            values = list(range(low, high + 1))
        elif _LIST.match(values_text):
            values = [int(v) for v in values_text.split(",")]
            if len(set(values)) != len(values):
                raise ValueError(f"{token!r}: a value is listed twice; {_FORMAT}")
        else:
            raise ValueError(f"{token!r}: cannot read values {raw!r}; {_FORMAT}")
        if min(values) < 1:
            raise ValueError(f"{token!r}: values must be >= 1; {_FORMAT}")
        axes.append((key, values))
    keys = [k for k, _ in axes]
    return [dict(zip(keys, combo, strict=True)) for combo in itertools.product(*(v for _, v in axes))]


def point_label(point: Mapping[str, int]) -> str:
    """``{"num_steps": 2, "concurrency": 8}`` -> ``num_steps=2,concurrency=8`` (the part after ``@``)."""
    return ",".join(f"{k}={v}" for k, v in point.items())


def split_name(profile_name: str) -> tuple[str, dict[str, int]]:
    """The base profile and the point of a derived profile's name; ``(name, {})`` for any other name.

    ``"eagle3@num_steps=2,concurrency=8"`` -> ``("eagle3", {"num_steps": 2, "concurrency": 8})``.
    """
    base, sep, label = profile_name.rpartition(_AT)
    if not sep:
        return profile_name, {}
    point: dict[str, int] = {}
    for pair in label.split(","):
        key, eq, value = pair.partition("=")
        if not eq or key not in SWEEP_KEYS or not value.isdigit():
            return profile_name, {}
        point[key] = int(value)
    return base, point


def _derive(profile: Profile, point: Mapping[str, int], name: str) -> Profile:
    """``profile`` at ``point``; steps/topk/draft tokens kept as the profile's engine will run them
    (``Engine.speculative_at``: at topk 1 a chain verifies num_steps + 1 draft tokens, so that pair moves together).

    :raises ValueError: see ``Engine.speculative_at``.
    """
    update: dict[str, Any] = {"name": name}
    spec_keys = {k: v for k, v in point.items() if k in SPECULATIVE_KEYS}
    if spec_keys:
        from pytest_specdec.engines import get_engine

        update["speculative"] = get_engine(profile).speculative_at(profile, spec_keys, label=point_label(point))
    if "concurrency" in point:
        update["workload"] = profile.workload.model_copy(update={"concurrency": point["concurrency"]})
    return profile.model_copy(update=update)


def expand_profiles(
    profiles: Mapping[str, Profile], selected: Sequence[str], points: Sequence[Mapping[str, int]]
) -> tuple[dict[str, Profile], list[str]]:
    """Derive one profile per sweep point from each selected profile.

    A speculative profile gets every point (``eagle3@num_steps=2``). A profile without speculation (the baseline)
    takes only the workload keys: one profile per distinct concurrency when concurrency is swept
    (``baseline@concurrency=8``; a derived point's ``min_speedup.vs`` is pointed at the baseline of its own
    concurrency), else it runs once under its own name. Derived profiles are plain ``Profile`` objects, validated by
    pydantic (``model_copy`` skips validation, so they are re-validated here).

    :param profiles: every profile of the file by name (``ProfileSet.profiles``).
    :param selected: the names to run (``--server-profile`` plus ``--specdec-sweep-baseline``), all in ``profiles``.
    :param points: from :func:`parse_sweep`, at least one.
    :returns: ``profiles`` plus the derived ones, and the names to run: profiles without speculation first (so
        ``min_speedup`` finds its reference already measured), then each speculative profile's points in sweep order.
    :raises ValueError: no selected profile runs speculative decoding while a speculative key is swept, a profile
        leaves steps/draft tokens to its engine, or a point is contradictory (topk 1 with draft tokens != steps + 1).
    """
    if not points:
        raise ValueError("no sweep points")
    swept = {k for p in points for k in p}
    speculative = [n for n in selected if profiles[n].is_speculative]
    plain = [n for n in selected if not profiles[n].is_speculative]
    if swept & set(SPECULATIVE_KEYS) and not speculative:
        keys = ", ".join(k for k in SPECULATIVE_KEYS if k in swept)
        raise ValueError(
            f"sweeps {keys} but no selected profile runs speculative decoding "
            f"(selected: {', '.join(selected)}); select one, e.g. --server-profile=eagle3"
        )
    out = dict(profiles)
    names: list[str] = []
    plain_by_concurrency: dict[str, dict[int, str]] = {}
    for name in plain:
        workload_points = _unique([{k: v for k, v in p.items() if k in WORKLOAD_KEYS} for p in points])
        if workload_points == [{}]:
            names.append(name)
            continue
        for wp in workload_points:
            derived = f"{name}{_AT}{point_label(wp)}"
            out[derived] = _validated(_derive(profiles[name], wp, derived))
            plain_by_concurrency.setdefault(name, {})[wp["concurrency"]] = derived
            names.append(derived)
    for name in speculative:
        for point in points:
            derived = f"{name}{_AT}{point_label(point)}"
            profile = _derive(profiles[name], point, derived)
            ms = profile.thresholds.min_speedup
            if ms is not None and "concurrency" in point and ms.vs in plain_by_concurrency:
                vs = plain_by_concurrency[ms.vs][point["concurrency"]]
                thresholds = profile.thresholds.model_copy(update={"min_speedup": ms.model_copy(update={"vs": vs})})
                profile = profile.model_copy(update={"thresholds": thresholds})
            out[derived] = _validated(profile)
            names.append(derived)
    return out, names


def _unique(items: Iterable[dict[str, int]]) -> list[dict[str, int]]:
    seen: list[dict[str, int]] = []
    for item in items:
        if item not in seen:
            seen.append(item)
    return seen


def _validated(profile: Profile) -> Profile:
    return Profile.model_validate(profile.model_dump())


# -- after the run ----------------------------------------------------------------------------------------------


def _one_per_profile(records: Iterable[ResultRecord]) -> list[ResultRecord]:
    """The first record of each profile, in run order (every test of a profile shares its measurement)."""
    seen: dict[str, ResultRecord] = {}
    for record in records:
        seen.setdefault(record.profile, record)
    return list(seen.values())


def sweep_records(records: Iterable[ResultRecord]) -> list[ResultRecord]:
    """One record per derived speculative profile (a sweep point), in run order."""
    return [
        r
        for r in _one_per_profile(records)
        if split_name(r.profile)[1] and r.fingerprint.get("speculative") is not None
    ]


def baseline_records(records: Iterable[ResultRecord], name: str | None) -> list[ResultRecord]:
    """The records speedups are computed against: one per profile named ``name`` or derived from it
    (``baseline@concurrency=8``); with ``name`` None, those of every profile without speculation
    (``fingerprint["speculative"]`` is None)."""
    out = []
    for record in _one_per_profile(records):
        base = split_name(record.profile)[0]
        if name is not None and base == name:
            out.append(record)
        elif name is None and record.fingerprint.get("speculative") is None:
            out.append(record)
    return out


def thresholds_ok(records: Iterable[ResultRecord]) -> dict[str, bool]:
    """Per profile: True when every specdec test of it passed (so its profile and marker thresholds, speedup and
    compare checks held), False when one failed or errored."""
    ok: dict[str, bool] = {}
    for record in records:
        ok[record.profile] = ok.get(record.profile, True) and record.outcome == "passed"
    return ok


def _concurrency(record: ResultRecord) -> int | None:
    value = record.workload.get("concurrency")
    return int(value) if isinstance(value, int) else None


def speedup(record: ResultRecord, baselines: Sequence[ResultRecord]) -> float | None:
    """``output_tok_s`` of ``record`` / that of the baseline with the same workload concurrency (the only baseline
    when there is one); None without a matching baseline or with a zero baseline throughput.

    Example: 94.0 tok/s over a baseline of 88.8 tok/s -> 1.0586.

    A point measured with a paired baseline arm (``record.paired``, ``pairing.py``) gives the median of its per-pair
    ratios instead: phases measured minutes apart on a shared runner do not make a speedup.
    """
    from pytest_specdec.compare import paired_ratios

    ratios = paired_ratios(record, "output_tok_s")
    if ratios:
        return statistics.median(ratios)
    baseline = _baseline_of(record, baselines)
    if baseline is None:
        return None
    base = baseline.metrics.get("output_tok_s")
    value = record.metrics.get("output_tok_s")
    if not isinstance(base, int | float) or not isinstance(value, int | float) or base <= 0:
        return None
    return float(value) / float(base)


def speedup_reference(record: ResultRecord, baselines: Sequence[ResultRecord]) -> str | None:
    """The profile :func:`speedup` divided by: the paired arm's (``record.paired["vs"]``, a point paired with its
    ``min_speedup.vs`` profile, which need not be among ``baselines``), else the baseline of the same concurrency (the
    only one when there is one); None when there is none."""
    from pytest_specdec.compare import paired_ratios

    vs = (record.paired or {}).get("vs")
    if vs and paired_ratios(record, "output_tok_s"):
        return str(vs)
    baseline = _baseline_of(record, baselines)
    return baseline.profile if baseline is not None else None


def _baseline_of(record: ResultRecord, baselines: Sequence[ResultRecord]) -> ResultRecord | None:
    """The baseline of ``record``'s workload concurrency, else the only baseline when there is one, else None."""
    match = [b for b in baselines if _concurrency(b) == _concurrency(record)]
    if not match and len(baselines) == 1:
        match = list(baselines)
    return match[0] if match else None


def best_point(records: Sequence[ResultRecord], *, thresholds_ok: Mapping[str, bool]) -> ResultRecord | None:
    """The point with the highest ``output_tok_s`` among those whose tests passed; the first one on a tie
    (the earlier, usually cheaper, point). None when no point met its thresholds.

    :param records: :func:`sweep_records`.
    :param thresholds_ok: :func:`thresholds_ok`; a profile missing from it counts as not ok.
    """
    best: ResultRecord | None = None
    for record in records:
        if not thresholds_ok.get(record.profile, False):
            continue
        value = record.metrics.get("output_tok_s")
        if not isinstance(value, int | float):
            continue
        if best is None or value > best.metrics["output_tok_s"]:
            best = record
    return best


def best_points(records: Sequence[ResultRecord], *, thresholds_ok: Mapping[str, bool]) -> list[ResultRecord]:
    """:func:`best_point` per workload concurrency (tok/s at different concurrencies are not comparable: more
    requests in flight always raise throughput), in order of concurrency; groups without an ok point are left out.
    Without a concurrency sweep this is ``[best_point(...)]`` or ``[]``."""
    groups: dict[int, list[ResultRecord]] = {}
    for record in records:
        groups.setdefault(_concurrency(record) or 0, []).append(record)
    out = []
    for _, group in sorted(groups.items()):
        best = best_point(group, thresholds_ok=thresholds_ok)
        if best is not None:
            out.append(best)
    return out


def tok_s_range(record: ResultRecord) -> tuple[float, float] | None:
    """(min, max) of the point's per-repeat output tok/s (``ResultRecord.values``); None when it has none."""
    values = record.values("output_tok_s")
    return (min(values), max(values)) if values else None


def ties(
    best: ResultRecord, records: Sequence[ResultRecord], *, thresholds_ok: Mapping[str, bool]
) -> list[ResultRecord]:
    """The other passing points of ``best``'s concurrency whose tok/s repeat range overlaps the best's: the repeats
    cannot tell them apart, so the table calls them a tie rather than crowning the fastest median (under noise the
    "best" of three overlapping points is a coin toss). With one repeat per point the ranges are points: only an
    equal median ties.

    :param records: :func:`sweep_records`; ``best`` is one of :func:`best_points`.
    """
    best_range = tok_s_range(best)
    if best_range is None:
        return []
    out = []
    for record in records:
        if record is best or not thresholds_ok.get(record.profile, False):
            continue
        if _concurrency(record) != _concurrency(best):
            continue
        other = tok_s_range(record)
        if other is not None and other[1] >= best_range[0] and other[0] <= best_range[1]:
            out.append(record)
    return out


def check_cell(record: ResultRecord, ok: bool) -> str:
    """The thresholds cell of a point: ``ok``, ``FAILED accept_length`` (the thresholds it missed, from
    ``ResultRecord.checks``), ``FAILED`` (a failure without a threshold miss: compare, error), and
    ``ok (min_accept_length n/a)`` when a threshold could not apply at the point (``thresholds.evaluate``)."""
    failed = [key.removeprefix("min_") for key, v in record.checks.items() if v.startswith("FAILED")]
    na = [key for key, v in record.checks.items() if v.startswith("n/a")]
    if not ok:
        return "FAILED " + ", ".join(failed) if failed else "FAILED"
    return f"ok ({', '.join(na)} n/a)" if na else "ok"


def _configured(profile: Profile, keys: Iterable[str]) -> dict[str, int] | None:
    point: dict[str, int] = {}
    for key in keys:
        if key == "concurrency":
            value: int | None = profile.workload.concurrency
        else:
            value = getattr(profile.speculative, key, None) if profile.speculative is not None else None
        if value is None:
            return None
        point[key] = int(value)
    return point


def configured_point_lines(
    records: Sequence[ResultRecord],
    profiles: Mapping[str, Profile],
    *,
    thresholds_ok: Mapping[str, bool],
    max_gap: float,
) -> tuple[list[str], list[str]]:
    """Is the profile's configured point (its own num_steps/topk/draft tokens/concurrency) within ``max_gap`` of the
    sweep's best? The check the original incident needed: 2 steps beat the 5 configured, and nothing said so.

    Per best point (:func:`best_points`): the configured point of its base profile, at the best's concurrency.
    A tie (:func:`ties`) with the best passes; otherwise gap = (best median tok/s - configured median) / best.

    :param profiles: the session's profiles by name (the base profiles, before sweep expansion).
    :param max_gap: the largest allowed gap as a fraction (0.05 = 5 %).
    :returns: (lines for the table, the failing ones among them), e.g. ``configured point eagle3@num_steps=5
        (92.1 tok/s) is 12.3% below the sweep's best eagle3@num_steps=2 (105.0 tok/s), more than the allowed 5%
        (--specdec-sweep-max-gap); set num_steps: 2 in profile eagle3``.
    """
    lines: list[str] = []
    failing: list[str] = []
    by_name = {r.profile: r for r in records}
    for best in best_points(records, thresholds_ok=thresholds_ok):
        base, point = split_name(best.profile)
        profile = profiles.get(base)
        configured = _configured(profile, point) if profile is not None else None
        if configured is None:
            continue
        if "concurrency" in point and configured["concurrency"] != point["concurrency"]:
            continue  # the configured point belongs to another concurrency's group
        name = f"{base}{_AT}{point_label(configured)}"
        conf = by_name.get(name)
        if conf is None:
            lines.append(f"configured point {name} was not swept; not compared with the best {best.profile}")
            continue
        if conf is best:
            lines.append(f"configured point {name} is the sweep's best")
            continue
        if conf in ties(best, records, thresholds_ok=thresholds_ok):
            lines.append(
                f"configured point {name} is tied with the sweep's best {best.profile} (repeat ranges overlap)"
            )
            continue
        b, c = best.metrics.get("output_tok_s"), conf.metrics.get("output_tok_s")
        if not isinstance(b, int | float) or not isinstance(c, int | float) or b <= 0:
            continue
        gap = (b - c) / b
        if gap > max_gap:
            better = ", ".join(f"{k}: {v}" for k, v in point.items() if configured.get(k) != v)
            line = (
                f"configured point {name} ({c:.1f} tok/s) is {gap:.1%} below the sweep's best {best.profile} "
                f"({b:.1f} tok/s), more than the allowed {max_gap:.0%} (--specdec-sweep-max-gap); set {better} in "
                f"profile {base}"
            )
            failing.append(line)
        else:
            line = f"configured point {name} is {gap:.1%} below the sweep's best {best.profile} (allowed {max_gap:.0%})"
        lines.append(line)
    return lines, failing


#: (header, metrics key, format) of the sweep table.
_COLUMNS: tuple[tuple[str, str, str], ...] = (
    ("accept_len", "accept_length", "{:.2f}"),
    ("accept_rate", "accept_rate", "{:.3f}"),
    ("tok/s", "output_tok_s", "{:.1f}"),
    ("TTFT p50 ms", "ttft_ms_p50", "{:.1f}"),
    ("ITL p50 ms", "itl_ms_p50", "{:.2f}"),
)


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
    thresholds (:func:`check_cell`). Each best point's row (:func:`best_points`) ends in ``<- best``, its ties'
    (:func:`ties`) in ``<- tie``. The closing lines are ``best: <point> (<tok/s> tok/s, repeats <min>-<max>[,
    <speedup>x vs <baseline>])`` plus ``; tied with <points> (repeat ranges overlap)`` (``best at concurrency N:
    ...`` per concurrency when concurrency is swept), or ``no point met the thresholds (<n> points)``.

    :param records: :func:`sweep_records` (one per point).
    :param baselines: :func:`baseline_records`; empty when no profile without speculation ran.
    :param thresholds_ok: :func:`thresholds_ok`.
    """
    bests = best_points(records, thresholds_ok=thresholds_ok)
    tied = {id(t): b for b in bests for t in ties(b, records, thresholds_ok=thresholds_ok)}
    columns = [
        Column("point"),
        *(Column(header, "right", fmt) for header, _, fmt in _COLUMNS),
        Column("tok/s range", "right"),
        Column("speedup", "right"),
        Column("thresholds"),
        Column(""),  # the best point's and its ties' mark
    ]
    rows: list[list[Any]] = []
    for record in records:
        up = speedup(record, baselines)
        spread = tok_s_range(record)
        if spread is None:
            shown_range = "n/a"
        else:
            shown_range = f"{spread[0]:.1f}-{spread[1]:.1f}" if spread[0] != spread[1] else f"{spread[0]:.1f}"
        mark = "<- best" if any(record is b for b in bests) else ("<- tie" if id(record) in tied else "")
        rows.append([
            record.profile,
            *(record.metrics.get(key) for _, key, _ in _COLUMNS),
            shown_range,
            f"{up:.2f}x" if up is not None else "n/a",
            check_cell(record, thresholds_ok.get(record.profile, False)),
            mark,
        ])  # fmt: skip
    lines = text_table(columns, rows)
    if not bests:
        lines.append(f"no point met the thresholds ({len(records)} points)")
    concurrencies = {_concurrency(r) for r in records}
    for best in bests:
        up = speedup(best, baselines)
        tok_s = format_value("{:.1f}", best.metrics.get("output_tok_s"))
        spread = tok_s_range(best)
        repeats = f", repeats {spread[0]:.1f}-{spread[1]:.1f}" if spread is not None and spread[0] != spread[1] else ""
        reference = speedup_reference(best, baselines)
        versus = f", {up:.2f}x vs {reference}" if up is not None and reference is not None else ""
        at = f" at concurrency {_concurrency(best)}" if len(concurrencies) > 1 else ""
        tie = [r.profile for r in ties(best, records, thresholds_ok=thresholds_ok)]
        tied_with = f"; tied with {', '.join(tie)} (repeat ranges overlap)" if tie else ""
        lines.append(f"best{at}: {best.profile} ({tok_s} tok/s{repeats}{versus}){tied_with}")
    return lines + crossover_lines(records, baselines)


def crossover_lines(records: Sequence[ResultRecord], baselines: Sequence[ResultRecord]) -> list[str]:
    """Speedup by concurrency and where speculation stops paying (issue 18.4), one line per speculative point
    swept over concurrency (the same point at two or more concurrencies, each with a speedup, :func:`speedup`).

    ``speedup by concurrency, eagle3@num_steps=3: 1: 1.38x, 8: 1.12x, 64: 0.84x; speculation stops paying between
    concurrency 8 and 64`` (or ``pays at every measured concurrency`` / ``pays at none``). Speculation trades spare
    compute for fewer forward passes: as the batch grows, verify stops being free and the plain arm catches up (real
    SGLang 0.5.17 on an H200, tiny model, concurrency 64: 3,752 tok/s with EAGLE-3 vs 8,796 without).
    """
    groups: dict[tuple[str, tuple[tuple[str, int], ...]], list[tuple[int, float]]] = {}
    for record in records:
        base, point = split_name(record.profile)
        conc = _concurrency(record)
        up = speedup(record, baselines)
        if "concurrency" not in point or conc is None or up is None:
            continue
        rest = tuple(sorted((k, v) for k, v in point.items() if k != "concurrency"))
        groups.setdefault((base, rest), []).append((conc, up))
    lines = []
    for (base, rest), series in groups.items():
        if len({c for c, _ in series}) < 2:
            continue
        series.sort()
        name = f"{base}@{point_label(dict(rest))}" if rest else base
        cells = ", ".join(f"{c}: {u:.2f}x" for c, u in series)
        paying = [u > 1.0 for _, u in series]
        if all(paying):
            verdict = "speculation pays at every measured concurrency"
        elif not any(paying):
            verdict = "speculation pays at none"
        else:
            # The first step from paying to not paying; None when it only starts paying further up.
            i = next((i for i in range(1, len(series)) if paying[i - 1] and not paying[i]), None)
            verdict = (
                f"speculation stops paying between concurrency {series[i - 1][0]} and {series[i][0]}"
                if i is not None
                else "speculation pays only at higher concurrency"
            )
        lines.append(f"speedup by concurrency, {name}: {cells}; {verdict}")
    return lines


@dataclass
class SweepSummary:
    """The end-of-run verdict of a sweep (``summarize``): what the table and plot show and which lines fail the run."""

    points: list[ResultRecord]
    baselines: list[ResultRecord]
    thresholds_ok: dict[str, bool]
    best: list[ResultRecord]
    #: The table (``sweep_table``) followed by the configured-point lines (``configured_point_lines``).
    table: list[str] = field(default_factory=list)
    #: Lines that fail the run: configured point too far below the best, or "no point ..." when none passed.
    red: list[str] = field(default_factory=list)
    #: ``min_accept_length`` shared by every point (a line in the plot), None when they differ.
    accept_floor: float | None = None


def summarize(
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
    best = best_points(points, thresholds_ok=ok)
    table = sweep_table(points, baselines=baselines, thresholds_ok=ok)
    gap_lines, red = configured_point_lines(points, profiles, thresholds_ok=ok, max_gap=max_gap)
    table += gap_lines
    floors = {profiles[r.profile].thresholds.min_accept_length for r in points}
    summary = SweepSummary(
        points, baselines, ok, best, table, red, accept_floor=floors.pop() if len(floors) == 1 else None
    )
    return summary
