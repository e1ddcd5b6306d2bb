"""Tests of pytest_specdec.core.table: one column model, rendered as fixed-width text and as a markdown table."""

from __future__ import annotations

import pytest

from pytest_specdec.core.table import Column, format_value, markdown_table, text_table

COLUMNS = [Column("test"), Column("tok/s", "right", "{:.1f}"), Column("n", "right", "{:d}"), Column("result")]


@pytest.mark.parametrize(
    ("fmt", "value", "shown"),
    [
        ("{:.1f}", 94.04, "94.0"),
        ("{:.3f}", 1, "1.000"),
        ("{:d}", 16.0, "16"),
        ("{:.1f}", None, "n/a"),
        ("{:.1f}", True, "n/a"),
        ("{:.1f}", "fast", "n/a"),
    ],
)
def test_format_value(fmt: str, value: object, shown: str) -> None:
    assert format_value(fmt, value) == shown


def test_text_table_pads_aligns_and_strips() -> None:
    rows = [["test_x[eagle3]", 94.04, 16, "passed"], ["t", None, None, ""]]
    assert text_table(COLUMNS, rows) == [
        "test            tok/s    n  result",
        "test_x[eagle3]   94.0   16  passed",
        "t                 n/a  n/a",  # an empty last cell leaves no trailing spaces
    ]


def test_text_table_left_column_after_the_last_filled_one_is_padded_only_when_filled() -> None:
    columns = [Column("point"), Column("checks"), Column("")]
    assert text_table(columns, [["a", "ok", "<- best"], ["bb", "missed x", ""]]) == [
        "point  checks",
        "a      ok        <- best",
        "bb     missed x",
    ]


def test_markdown_table_aligns_and_escapes() -> None:
    rows = [["`test_x[eagle3]`", 94.04, 16, "❌ failed | see\nbelow"]]
    assert markdown_table(COLUMNS, rows) == [
        "| test | tok/s | n | result |",
        "|---|---:|---:|---|",
        "| `test_x[eagle3]` | 94.0 | 16 | ❌ failed \\| see below |",
    ]


def test_a_row_of_the_wrong_length_is_an_error() -> None:
    with pytest.raises(ValueError, match=r"table row has 2 cells, expected 4"):
        text_table(COLUMNS, [["a", 1.0]])
