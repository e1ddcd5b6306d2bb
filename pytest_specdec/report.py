"""Result lines for people: the terminal summary table (the CLI prints the same lines)."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any

from pytest_specdec.records import RunMetrics

__all__ = ["SUMMARY_COLUMNS", "row_values", "summary_lines"]

#: (RunMetrics field, header, format) of the summary table, in order.
SUMMARY_COLUMNS: tuple[tuple[str, str, str], ...] = (
    ("output_tok_s", "tok/s", "{:.1f}"),
    ("accept_length", "accept_len", "{:.2f}"),
    ("accept_rate", "accept_rate", "{:.3f}"),
    ("ttft_ms_p50", "TTFT p50 ms", "{:.1f}"),
    ("itl_ms_p50", "ITL p50 ms", "{:.2f}"),
    ("tpot_ms_p50", "TPOT p50 ms", "{:.2f}"),
    ("num_ok", "requests", "{:d}"),
)


def row_values(metrics: RunMetrics) -> dict[str, Any]:
    """The JSON-safe subset of ``metrics`` shown in the summary and carried in ``item.user_properties``."""
    data = metrics.as_dict()
    keep = {name for name, _, _ in SUMMARY_COLUMNS} | {
        "num_errors",
        "duration_s",
        "output_tokens",
        "ttft_ms_p99",
        "itl_ms_p99",
        "e2e_ms_p50",
        "server_accept_length",
    }
    return {k: data[k] for k in sorted(keep) if k in data}


def _cell(fmt: str, value: Any) -> str:
    if value is None:
        return "n/a"
    if fmt == "{:d}":
        return str(int(value))
    return fmt.format(value)


def summary_lines(rows: Iterable[tuple[str, str, dict[str, Any], str]]) -> list[str]:
    """One fixed-width line per (test, profile) row plus a header.

    :param rows: (test node id, profile, row_values(...), outcome) tuples.
    """
    rows = list(rows)
    headers: Sequence[str] = ["test", "profile", *(h for _, h, _ in SUMMARY_COLUMNS), "result"]
    table = []
    for nodeid, profile, values, outcome in rows:
        test = nodeid.split("::", 1)[-1]
        cells = [_cell(fmt, values.get(name)) for name, _, fmt in SUMMARY_COLUMNS]
        table.append([test, profile, *cells, outcome])
    widths = [max(len(str(r[i])) for r in [list(headers), *table]) for i in range(len(headers))]
    out = []
    for r in [list(headers), *table]:
        first = [str(r[0]).ljust(widths[0]), str(r[1]).ljust(widths[1])]
        rest = [str(c).rjust(w) for c, w in zip(r[2:-1], widths[2:-1])]
        out.append("  ".join([*first, *rest, str(r[-1])]))
    return out
