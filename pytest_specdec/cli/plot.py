"""``python -m pytest_specdec plot``: a trend PNG of stored runs (``report.plots.plot_trend``)."""

from __future__ import annotations

import argparse
import difflib
import sys
from pathlib import Path

from pytest_specdec.cli.exits import EXIT_OK, EXIT_USAGE
from pytest_specdec.core.errors import CompareError
from pytest_specdec.measure.results import ResultStore, RunFile, read_run_file
from pytest_specdec.report.plots import DEFAULT_TREND_METRICS, plot_trend, trend_fields

__all__ = ["plot_command"]


def plot_command(args: argparse.Namespace) -> int:
    """``plot [RUN ...] -o PNG``: draws the runs' metrics, one line per profile, and prints ``wrote PNG (N runs)``;
    returns ``EXIT_USAGE`` on a bad option or an unreadable run, else ``EXIT_OK``."""
    fields = trend_fields()
    metrics = args.metric or list(DEFAULT_TREND_METRICS)
    for name in metrics:
        if name not in fields:
            print(f"error: --metric={name}: not a metric field (available: {', '.join(fields)})", file=sys.stderr)
            return EXIT_USAGE
    thresholds: dict[str, float] = {}
    for spec in args.threshold:
        name, sep, raw = spec.partition("=")
        try:
            value = float(raw)
        except ValueError:
            value = None
        if not sep or value is None or name not in fields:
            print(f"error: --threshold={spec}: expected FIELD=NUMBER with FIELD a metric field, "
                  "e.g. --threshold output_tok_s=80", file=sys.stderr)  # fmt: skip
            return EXIT_USAGE
        thresholds[name] = value
    store = ResultStore(Path(args.results_dir))
    runs: list[RunFile] = []
    try:
        for ref in args.runs or [args.results_dir]:
            path = Path(ref)
            if path.is_dir():
                files = ResultStore(path).list()
                if not files:
                    print(f"error: {ref}: no run files (*.json) in this directory", file=sys.stderr)
                    return EXIT_USAGE
                runs += [read_run_file(p) for p in files]
            else:
                runs.append(store.load(ref))
    except CompareError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return EXIT_USAGE
    unique = {run.run_id: run for run in runs}
    found = sorted({r.profile for run in unique.values() for r in run.results})
    for name in args.profile or ():
        if name not in found:
            close = difflib.get_close_matches(name, found, n=1)
            hint = f" (did you mean {close[0]!r}?)" if close else ""
            print(f"error: --profile={name}: no such profile in {len(unique)} run(s){hint} (available: "
                  f"{', '.join(found)})", file=sys.stderr)  # fmt: skip
            return EXIT_USAGE
    try:
        out = plot_trend(list(unique.values()), Path(args.output), metrics=metrics, thresholds=thresholds,
                         profiles=args.profile)  # fmt: skip
    except (ValueError, ImportError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return EXIT_USAGE
    shown = [run for run in unique.values() if any(not args.profile or r.profile in args.profile for r in run.results)]
    print(f"wrote {out} ({len(shown)} run{'s' if len(shown) != 1 else ''})")
    return EXIT_OK
