"""``python -m pytest_specdec merge``: the run files of CI shards merged into one run in the results store, with one
markdown summary and one trend PNG (the merging and what is refused: ``report.merge``)."""

from __future__ import annotations

import os
import sys
from collections.abc import Sequence
from pathlib import Path

from pytest_specdec.cli.exits import EXIT_OK, EXIT_REFUSED, EXIT_USAGE
from pytest_specdec.core.errors import CompareError
from pytest_specdec.measure.results import ResultStore, read_run_file
from pytest_specdec.report.markdown import markdown_targets, shown_outcome, write_markdown
from pytest_specdec.report.merge import DEFAULT_TREND_RUNS, load_shards, merge_problems, merge_runs, merged_markdown
from pytest_specdec.report.plots import DEFAULT_TREND_METRICS, plot_trend, trend_fields
from pytest_specdec.report.terminal import summary_lines

__all__ = ["merge_command"]


def merge_command(
    paths: Sequence[str | Path],
    *,
    results_dir: str | Path = ".specdec/results",
    markdown: str | Path | None = None,
    trend: str | Path | None = None,
    trend_runs: int = DEFAULT_TREND_RUNS,
    metrics: Sequence[str] | None = None,
    force: bool = False,
) -> int:
    """``python -m pytest_specdec merge`` (its options are defined in ``cli.main``; ``report.merge`` says what is
    refused and how the merged run is named).

    :param paths: run files, or directories searched recursively for run files.
    :param results_dir: the results store the merged run is written to.
    :param markdown: also write the merged summary as markdown here (and append it to ``$GITHUB_STEP_SUMMARY`` when
        set).
    :param trend: draw the store's newest ``trend_runs`` runs (>= 1) into this PNG, plotting ``metrics``
        (``RunMetrics`` fields; None: ``plots.DEFAULT_TREND_METRICS``).
    :param force: merge even when the runs differ (recorded in the run).
    :returns: ``EXIT_OK``, ``EXIT_REFUSED`` (the runs differ, without ``force``) or ``EXIT_USAGE`` (``trend_runs``
        < 1, a ``metrics`` entry that is not a field, no run files, an unreadable file, the trend could not be drawn);
        messages go to stdout and errors to stderr.
    """
    if trend_runs < 1:
        print(f"error: --trend-runs={trend_runs}: expected an integer >= 1", file=sys.stderr)
        return EXIT_USAGE
    fields = trend_fields()
    for name in metrics or ():
        if name not in fields:
            print(f"error: --metric={name}: not a metric field (available: {', '.join(fields)})", file=sys.stderr)
            return EXIT_USAGE
    store = ResultStore(Path(results_dir))
    try:
        shards, skipped = load_shards(paths)
    except CompareError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return EXIT_USAGE
    store_root = store.root.resolve()
    history = [s for s in shards if s.path.resolve().parent == store_root]
    shards = [s for s in shards if s not in history]  # the store's runs are history, never merged again
    if not shards:
        where = ", ".join(map(str, paths))
        why = f"; the {len(history)} in {results_dir} are the store's history" if history else ""
        print(f"error: no run files to merge under {where}{why}; pass the shards' result directories (each shard "
              "writes <specdec dir>/results/<run id>.json)", file=sys.stderr)  # fmt: skip
        return EXIT_USAGE
    problems = merge_problems(shards)
    if problems and not force:
        print(f"error: cannot merge {len(shards)} run{'s' if len(shards) != 1 else ''}:", file=sys.stderr)
        for problem in problems:
            print(problem, file=sys.stderr)
        return EXIT_REFUSED
    run = merge_runs(shards, forced=problems)
    saved = store.save(run, compact=True)
    if skipped:
        print(f"skipped {len(skipped)} JSON file(s) that are not run files, e.g. {skipped[0]}")
    for problem in problems:
        print(f"WARNING (--force): {problem}")
    runs, results = len(shards), len(run.results)
    print(f"merged {runs} run{'s' if runs != 1 else ''} ({results} result{'s' if results != 1 else ''}) into {saved}")
    for line in summary_lines((r.test_id, r.profile, r.metrics, shown_outcome(r)) for r in run.results):
        print(line)
    for entry in run.errored:  # kept in the merged run: a compare of it exits 1 on them
        print(f"errored before it measured: {entry.test_id}: {entry.error}")
    stopped = [s.run.run_id for s in shards if s.run.interrupted]
    if stopped:  # the merged run is interrupted too: a compare of it exits 1
        print(f"interrupted: shard run(s) ended early (Ctrl-C): {', '.join(stopped)}")
    for path, append in markdown_targets(None if markdown is None else str(markdown), os.environ):
        write_markdown(merged_markdown(run, shards, saved), path, append=append)
        print(f"wrote {path}")
    if trend:
        drawn = [read_run_file(p) for p in store.list()[-trend_runs:]]
        try:
            out = plot_trend(drawn, Path(trend), metrics=list(metrics or DEFAULT_TREND_METRICS))
        except (ValueError, ImportError) as exc:
            print(f"error: --trend: {exc}", file=sys.stderr)
            return EXIT_USAGE
        print(f"wrote {out} ({len(drawn)} run{'s' if len(drawn) != 1 else ''})")
    return EXIT_OK
