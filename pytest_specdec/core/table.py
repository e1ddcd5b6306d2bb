"""Tables for people: columns with a header, an alignment and a number format, rendered as fixed-width text (the
terminal summary, sweep and compare tables) or as a GitHub-flavoured markdown table (``--specdec-markdown``).

Usage::

    columns = [Column("test"), Column("tok/s", "right", "{:.1f}"), Column("result")]
    text_table(columns, [["test_x[eagle3]", 94.04, "passed"], ["test_y[base]", None, "failed"]])
    # ['test            tok/s  result',
    #  'test_x[eagle3]   94.0  passed',
    #  'test_y[base]      n/a  failed']
    markdown_table(columns, [["test_x[eagle3]", 94.04, "passed"]])
    # ['| test | tok/s | result |', '|---|---:|---|', '| test_x[eagle3] | 94.0 | passed |']
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any, Literal

__all__ = ["Column", "format_value", "markdown_table", "text_table"]

#: Between two columns of a text table.
_GAP = "  "


def format_value(fmt: str, value: Any, missing: str = "n/a") -> str:
    """A number formatted with ``fmt`` (``"{:.2f}"``; ``"{:d}"`` takes the integer part of a float), or ``missing``
    for anything that is not a number (None: not applicable; a bool is not a number here)."""
    if not isinstance(value, int | float) or isinstance(value, bool):
        return missing
    return str(int(value)) if fmt == "{:d}" else fmt.format(value)


@dataclass(frozen=True, slots=True)
class Column:
    """One column: its ``header``, its alignment (``left`` or ``right``), and ``fmt``, the format of its numbers
    (:func:`format_value`); without ``fmt`` a cell is ``str(value)``, and None is ``missing`` either way."""

    header: str
    align: Literal["left", "right"] = "left"
    fmt: str | None = None
    missing: str = "n/a"

    def cell(self, value: Any) -> str:
        """``value`` as this column shows it."""
        if value is None:
            return self.missing
        if self.fmt is None:
            return str(value)
        return format_value(self.fmt, value, self.missing)


def _cells(columns: Sequence[Column], rows: Iterable[Sequence[Any]]) -> list[list[str]]:
    out = []
    for row in rows:
        if len(row) != len(columns):
            raise ValueError(f"table row has {len(row)} cells, expected {len(columns)} ({row!r})")
        out.append([column.cell(value) for column, value in zip(columns, row, strict=True)])
    return out


def text_table(columns: Sequence[Column], rows: Iterable[Sequence[Any]]) -> list[str]:
    """Fixed-width lines: the header line, then one line per row. Each column is as wide as its widest cell
    (header included) and aligned per ``Column.align``; columns are separated by two spaces; trailing spaces are
    stripped, so a left-aligned last column (or an empty one) adds no padding.

    :raises ValueError: a row does not have one value per column.
    """
    grid = [[c.header for c in columns], *_cells(columns, rows)]
    widths = [max(len(row[i]) for row in grid) for i in range(len(columns))]
    lines = []
    for row in grid:
        cells = [
            text.rjust(width) if column.align == "right" else text.ljust(width)
            for column, text, width in zip(columns, row, widths, strict=True)
        ]
        lines.append(_GAP.join(cells).rstrip())
    return lines


def _markdown_cell(text: str) -> str:
    """``|`` escaped, newlines flattened (a GFM table row is one line)."""
    return text.replace("|", "\\|").replace("\n", " ")


def markdown_table(columns: Sequence[Column], rows: Iterable[Sequence[Any]]) -> list[str]:
    """GitHub-flavoured markdown lines: ``| header | ... |``, the delimiter row (``---`` left, ``---:`` right),
    then one line per row, cells escaped (``|`` -> ``\\|``, newlines -> spaces).

    :raises ValueError: a row does not have one value per column.
    """
    lines = ["| " + " | ".join(_markdown_cell(c.header) for c in columns) + " |"]
    lines.append("|" + "|".join("---:" if c.align == "right" else "---" for c in columns) + "|")
    lines += ["| " + " | ".join(_markdown_cell(text) for text in row) + " |" for row in _cells(columns, rows)]
    return lines
