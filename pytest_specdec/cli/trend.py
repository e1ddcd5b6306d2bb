"""``python -m pytest_specdec trend``: change points over a series of stored runs (``report.change_points``): where a
drift or a step began, over the whole series."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from pytest_specdec.cli.exits import EXIT_FINDINGS, EXIT_OK, EXIT_USAGE
from pytest_specdec.core.errors import CompareError
from pytest_specdec.measure.results import ResultStore, read_run_file
from pytest_specdec.report.change_points import DEFAULT_FIELDS, series_from_runs, trend_lines

__all__ = ["trend_command"]


def trend_command(args: argparse.Namespace) -> int:
    """``trend [RUN ...]``: one line per series and change point (``trend.trend_lines``); returns ``EXIT_FINDINGS``
    when a change point is in the worse direction, ``EXIT_USAGE`` on bad input, else ``EXIT_OK``."""
    runs = []
    try:
        for ref in args.runs or [args.results_dir]:
            path = Path(ref)
            files = ResultStore(path).list() if path.is_dir() else [path]
            runs += [read_run_file(p) for p in files]
    except CompareError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return EXIT_USAGE
    if len(runs) < 2 * args.min_size:
        print(f"error: {len(runs)} run(s) found; trend needs at least {2 * args.min_size} (--min-size {args.min_size} "
              "each side of a change)", file=sys.stderr)  # fmt: skip
        return EXIT_USAGE
    try:
        series = series_from_runs(runs, args.metric or DEFAULT_FIELDS, args.profile)
        lines, worse = trend_lines(series, max_pvalue=args.max_pvalue, min_size=args.min_size)
    except ValueError as exc:
        print(f"error: --metric: {exc}", file=sys.stderr)
        return EXIT_USAGE
    except ImportError as exc:
        print(f"error: {exc}; pip install 'pytest-specdec[trend]'", file=sys.stderr)
        return EXIT_USAGE
    for line in lines:
        print(line)
    return EXIT_FINDINGS if worse else EXIT_OK
