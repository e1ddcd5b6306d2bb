"""Result lines for people, as the terminal summary prints them (the CLI prints the same lines): the summary table,
what its numbers are, the cost of a speculative cycle, accept length per prompt category, acceptance per draft
position."""

from __future__ import annotations

import math
import statistics
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from pytest_specdec.core.table import Column, format_value, text_table
from pytest_specdec.measure.results import ResultRecord
from pytest_specdec.measure.trace_split import CycleSplit

__all__ = [
    "POSITION_LEGEND",
    "SUMMARY_COLUMNS",
    "category_lines",
    "cycle_cost",
    "cycle_lines",
    "definition_lines",
    "position_lines",
    "serving_lines",
    "summary_lines",
    "undecided_count",
]

#: (RunMetrics field, header, format) of the summary table, in order.
SUMMARY_COLUMNS: tuple[tuple[str, str, str], ...] = (
    ("output_tok_s", "tok/s", "{:.1f}"),
    ("accept_length", "accept_len", "{:.2f}"),
    ("accept_rate", "accept_rate", "{:.3f}"),
    ("ttft_ms_p50", "TTFT p50 ms", "{:.1f}"),
    ("itl_ms_p50", "ITL p50 ms", "{:.2f}"),
    ("tpot_ms_p50", "TPOT p50 ms", "{:.2f}"),
    ("ttft_ms_p99", "TTFT p99 ms", "{:.1f}"),
    ("itl_ms_p99", "ITL p99 ms", "{:.2f}"),
    ("num_ok", "requests", "{:d}"),
)

#: (RunMetrics field, header, format) of the serving table (:func:`serving_lines`): what SGLang bench_serving and
#: vLLM bench serve print, the percentiles the summary table leaves out.
SERVING_COLUMNS: tuple[tuple[str, str, str], ...] = (
    ("requests_per_s", "req/s", "{:.2f}"),
    ("input_tok_s", "in tok/s", "{:.1f}"),
    ("total_tok_s", "total tok/s", "{:.1f}"),
    ("goodput_per_s", "goodput req/s", "{:.2f}"),
    *(
        (f"{metric}_ms_p{q}", f"{label} p{q}", "{:.1f}" if metric in ("ttft", "e2e") else "{:.2f}")
        for metric, label in (("ttft", "TTFT"), ("itl", "ITL"), ("tpot", "TPOT"), ("e2e", "E2E"))
        for q in (90, 95, 99)
    ),
)


def summary_lines(rows: Iterable[tuple[str, str, dict[str, Any], str]]) -> list[str]:
    """One fixed-width line per (test, profile) row plus a header.

    :param rows: (test node id, profile, metrics as a dict of ``RunMetrics`` fields, outcome) tuples.
    """
    columns = [
        Column("test"),
        Column("profile"),
        *(Column(header, "right", fmt) for _, header, fmt in SUMMARY_COLUMNS),
        Column("result"),
    ]
    table = [
        [nodeid.split("::", 1)[-1], profile, *(values.get(name) for name, _, _ in SUMMARY_COLUMNS), outcome]
        for nodeid, profile, values, outcome in rows
    ]
    return text_table(columns, table)


def serving_lines(rows: Iterable[tuple[str, str, dict[str, Any], str]], *, everything: bool = False) -> list[str]:
    """The serving table: per row, the offered request rate (``rate``: req/s of an open loop, ``closed`` for a closed
    loop), request, input and total token throughput, goodput, and the p90/p95/p99 of TTFT, ITL, TPOT and E2E (ms).

    :param rows: as :func:`summary_lines`, each ``values`` with the workload's ``request_rate`` under
        ``"request_rate"`` when known.
    :param everything: every row (``-v``); else only the open-loop rows (a ``request_rate`` set).
    :returns: no lines when no row is shown.
    """
    shown = [r for r in rows if everything or r[2].get("request_rate") is not None]
    if not shown:
        return []
    columns = [Column("test"), Column("rate", "right"),
               *(Column(header, "right", fmt) for _, header, fmt in SERVING_COLUMNS)]  # fmt: skip
    table = []
    for nodeid, _, values, _ in shown:
        rate = values.get("request_rate")
        shown_rate = "closed" if rate is None else ("inf" if rate == float("inf") else f"{rate:g}")
        table.append([nodeid.split("::", 1)[-1], shown_rate, *(values.get(name) for name, _, _ in SERVING_COLUMNS)])
    return text_table(columns, table)


def definition_lines(records: Sequence[ResultRecord]) -> list[str]:
    """What the summary's numbers are, printed under the table: the accept-length and accept-rate definitions
    (``metrics.ACCEPT_LENGTH_DEFINITION``), each profile's accept length in its engine's own definition beside it,
    the scheduler cross-check (``metrics.cross_check``: its figure, or "not available" when the phase was too short
    for one, as after a ``/flush_cache`` with fewer than ``decode_log_interval`` decode steps: sglang PR 29329's
    false failure), and what was done to the prefix cache before the measured phases (``RunMetrics.cache_reset``).

    Example::

        accept_len = 1 + accepted drafts / verify steps (prefill token excluded); accept_rate = ...
        accept_len in the engine's own definition: eagle3 2.68 (Σcompletion_tokens / Σspec_verify_ct)
        scheduler cross-check (avg_spec_accept_length vs accept_len): eagle3 2.61 vs 2.62, short not available (...)
        prefix cache before each measured phase: reset: POST /flush_cache (baseline, eagle3)

    :returns: no line for a kind of fact no record has.
    """
    out: list[str] = []
    first: dict[str, ResultRecord] = {}
    for record in records:
        first.setdefault(record.profile, record)
    if any(r.metrics.get("accept_length") is not None for r in first.values()):
        out.append(
            "accept_len = 1 + accepted drafts / verify steps (prefill token excluded); "
            "accept_rate = (accept_len - 1) / num_steps"
        )
        native = [
            f"{name} {r.metrics['accept_length_native']:.2f} ({r.fingerprint.get('accept_length_native') or '?'})"
            for name, r in first.items()
            if isinstance(r.metrics.get("accept_length_native"), int | float)
        ]
        if native:
            out.append("accept_len in the engine's own definition: " + ", ".join(native))
    checks = [_scheduler_check(name, r) for name, r in first.items()]
    if any(checks):
        line = "scheduler cross-check (avg_spec_accept_length vs accept_len): " + ", ".join(c for c in checks if c)
        if any(c.endswith("not available") for c in checks if c):
            from pytest_specdec.measure.runner import SCHEDULER_MIN_WINDOWS

            line += (
                " (SGLang folds it only every decode_log_interval (40) decode steps after /flush_cache; "
                f"phases under {SCHEDULER_MIN_WINDOWS} windows are not checked; the verdicts use accept_len)"
            )
        out.append(line)
    notes: dict[str, list[str]] = {}
    for name, r in first.items():
        for note in dict.fromkeys(str(v) for v in r.repeats.get("cache_reset", []) if v):
            notes.setdefault(note, []).append(name)
    for note, names in notes.items():
        out.append(f"prefix cache before each measured phase: {note} ({', '.join(names)})")
    return out


def _scheduler_check(name: str, record: ResultRecord) -> str | None:
    """``NAME 2.61 vs 2.62`` (the scheduler's figure vs the client's, medians over repeats), ``NAME not available``
    when the engine has such a figure but none was read, or None (no accept length, the client's figure came from
    the counters, or an engine without one: vLLM)."""
    m = record.metrics
    if m.get("accept_length") is None or m.get("accept_length_source", "client") != "client":
        return None
    if record.fingerprint.get("engine") not in ("sglang", "reference"):  # vLLM has no such figure
        return None
    scheduler = m.get("scheduler_accept_length")
    if isinstance(scheduler, int | float):
        return f"{name} {scheduler:.2f} vs {m['accept_length']:.2f}"
    return f"{name} not available"


def cycle_cost(record: ResultRecord) -> tuple[float, int] | None:
    """The cost of one speculative cycle in plain decode steps, from the paired baseline arm measured with it.

    ``accept_length / speedup``, the speedup being the geometric mean of the per-pair ratios target tok/s /
    reference tok/s (the ``min_speedup`` line's estimate, so the two lines agree: the cost is below the accept
    length exactly when the speedup is above 1); returns (cost, pairs). Why: a plain decode step makes 1 token, a
    cycle makes ``accept_length`` (bonus included), so tok/s = 1 / step_ms and accept_length / cycle_ms at equal
    concurrency, hence cycle_ms / step_ms = accept_length x baseline tok/s / spec tok/s. Prefill and queueing are in
    both arms' tok/s, so it is an upper estimate for long prompts.

    Worked example: accept length 2.6, pairs (baseline 100, spec 140) and (100, 130) -> speedup sqrt(1.4 x 1.3) =
    1.349 -> 1.93.

    :returns: None without paired arms or an accept length.
    """
    paired = record.paired or {}
    length = record.metrics.get("accept_length")
    target = (paired.get("target") or {}).get("output_tok_s") or []
    reference = (paired.get("reference") or {}).get("output_tok_s") or []
    if not isinstance(length, int | float) or not target:
        return None
    logs = [math.log(t / r) for t, r in zip(target, reference, strict=False) if t and r and t > 0 and r > 0]
    return (length / math.exp(statistics.fmean(logs)), len(logs)) if logs else None


def cycle_lines(records: Sequence[ResultRecord], splits: Mapping[str, CycleSplit] | None = None) -> list[str]:
    """One line per profile with paired arms: what a speculative cycle costs (:func:`cycle_cost`) and, when the
    server reports it (reference server), where the cycle's time goes; a profile with ``trace:`` adds the split its
    engine's profiler timed (``splits``, ``measure.trace_split``), with or without paired arms.

    Example: ``specdec eagle3: a speculative cycle costs 1.93 plain decode steps (accept_len 2.60 / the paired
    speedup over baseline, 2 pairs at concurrency 1); speculation pays while the accept length exceeds 1.93
    [server: draft 3.10 ms + verify 9.80 ms per cycle] [trace: verify 0.90 ms + draft 1.70 ms a cycle (medians of
    180 cycles): verify 35% of the two; cycle period 2.60 ms (GPU time of SGLang profiler spans in F)]``.

    :param splits: profile -> the cycle split of its traced phase.
    """
    out = []
    seen: set[str] = set()
    splits = splits or {}
    for record in records:
        found = cycle_cost(record)
        if record.profile in seen:
            continue
        if found is None:
            if record.profile in splits:
                seen.add(record.profile)
                out.append(f"specdec {record.profile}: where the cycle goes [trace: {splits[record.profile].text()}]")
            continue
        seen.add(record.profile)
        cost, pairs = found
        vs = (record.paired or {}).get("vs", "baseline")
        line = (
            f"specdec {record.profile}: a speculative cycle costs {cost:.2f} plain decode steps (accept_len "
            f"{record.metrics['accept_length']:.2f} / the paired speedup over {vs}, {pairs} pairs at concurrency "
            f"{record.workload.get('concurrency', '?')}); speculation pays while the accept length exceeds "
            f"{cost:.2f}"
        )
        draft, verify = record.metrics.get("draft_ms_per_cycle"), record.metrics.get("verify_ms_per_cycle")
        if isinstance(draft, int | float) and isinstance(verify, int | float):
            line += f" [server: draft {draft:.2f} ms + verify {verify:.2f} ms per cycle]"
        if record.profile in splits:
            line += f" [trace: {splits[record.profile].text()}]"
        out.append(line)
    return out


def category_lines(rows: Iterable[tuple[str, str, dict[str, Any], str]]) -> list[str]:
    """Accept length per prompt category: a header, then one fixed-width line per row with categories.

    A cell is ``accept_len (requests)`` of that category (``by_category``), ``n/a`` when that category's requests
    have none, ``-`` when the row has no request of that category; rows without any accept length (no speculation)
    are left out. Example line: ``test_x[eagle3]  eagle3  2.71 (15)  2.10 (1)``.

    :param rows: as :func:`summary_lines`.
    :returns: no lines when no row has categories with an accept length.
    """
    table = [
        (nodeid.split("::", 1)[-1], profile, values.get("by_category") or {}) for nodeid, profile, values, _ in rows
    ]
    # A row without speculation has no accept length in any category: no all-"n/a" row (and no table of only those).
    table = [t for t in table if any(isinstance(e, dict) and e.get("accept_length") is not None for e in t[2].values())]
    if not table:
        return []
    names = sorted({c for _, _, by in table for c in by})
    grid = []
    for test, profile, by in table:
        cells = []
        for name in names:
            entry = by.get(name)
            if not isinstance(entry, dict):
                cells.append("-")
                continue
            length = entry.get("accept_length")
            shown = f"{length:.2f}" if isinstance(length, int | float) else "n/a"
            cells.append(f"{shown} ({entry.get('num_ok', 0)})")
        grid.append([test, profile, *cells])
    return text_table([Column("test"), Column("profile"), *(Column(name, "right") for name in names)], grid)


#: Printed above the per-position table: what the two numbers of a cell are.
POSITION_LEGEND = (
    "rate/cond per draft position k: rate = steps accepting draft k / verify steps; "
    "cond = steps accepting draft k / steps that reached k"
)


def position_lines(rows: Iterable[tuple[str, str, dict[str, Any], str]]) -> list[str]:
    """The per-position acceptance table: a header, then one fixed-width line per row that has per-position data.

    A cell is ``rate/cond`` (``accept_rate_at[k-1]`` / ``accept_rate_cond_at[k-1]``), the last column the source.
    Example line: ``test_x[eagle3]  eagle3  0.718/0.718  0.512/0.713  meta_info.spec_correct_drafts_histogram``.

    :param rows: as :func:`summary_lines`.
    :returns: no lines when no row has per-position data.
    """
    table = []
    for nodeid, profile, values, _ in rows:
        rates = list(values.get("accept_rate_at") or ())
        if not rates:
            continue
        cond = list(values.get("accept_rate_cond_at") or ())
        cond += [None] * (len(rates) - len(cond))
        cells = [f"{format_value('{:.3f}', r)}/{format_value('{:.3f}', c)}" for r, c in zip(rates, cond, strict=True)]
        table.append((nodeid.split("::", 1)[-1], profile, cells, str(values.get("accept_position_source") or "")))
    if not table:
        return []
    n = max(len(cells) for _, _, cells, _ in table)
    positions = [Column(f"k={k}", "right") for k in range(1, n + 1)]
    columns = [Column("test"), Column("profile"), *positions, Column("source")]
    grid = [[test, profile, *cells, *([""] * (n - len(cells))), source] for test, profile, cells, source in table]
    return text_table(columns, grid)


def undecided_count(tests: int, profiles: Sequence[str], also: str = "") -> str:
    """How pytest's summary and the ``compare`` command count undecided verdicts: in tests (as pytest counts passed
    and failed; every test of a profile reads one measurement, so its tests share the profile's verdicts), then the
    profiles they belong to, each as the caller names it.

    Example: ``undecided_count(2, ["eagle3 on compare"])`` -> ``2 tests undecided (1 profile: eagle3 on compare)``.

    :param tests: the tests with a verdict undecided at its budget.
    :param profiles: one entry per profile of those tests (a name, or a name and its open verdicts).
    :param also: said after the profiles, inside the parentheses (``1 suspected: ...``).
    """
    k = len(profiles)
    inside = "; ".join([f"{k} profile{'s' if k != 1 else ''}: {', '.join(profiles)}", *filter(None, [also])])
    return f"{tests} test{'s' if tests != 1 else ''} undecided ({inside})"
