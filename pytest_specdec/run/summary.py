"""The end of a run: the result file, the sweep table and plots, ``--specdec-report`` and markdown outputs, and the
terminal summary (``specdec summary`` table, notes, where each file went).

The session's ``pytest_sessionfinish`` and ``pytest_terminal_summary`` hooks call :func:`finish` and
:func:`write_summary`; :func:`note_lines` and :func:`check_lines` take data only.
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

from pytest_specdec.judge import sweep
from pytest_specdec.measure import results
from pytest_specdec.report import markdown, plots
from pytest_specdec.report import terminal as report
from pytest_specdec.report.json_report import write_json_report

if TYPE_CHECKING:
    from pytest_specdec.run.session import SpecdecSession

__all__ = [
    "check_lines",
    "cost_lines",
    "fail_lines",
    "finish",
    "finish_outputs",
    "note_lines",
    "write_fail_lines",
    "write_notes",
    "write_summary",
]

#: One terminal line and its markup (``terminalreporter.write_line(text, **markup)``).
Line = tuple[str, dict[str, bool]]


def finish(session: SpecdecSession, pytest_session: pytest.Session) -> None:
    """Save the run's records as a result file (``results.ResultStore``), then :func:`finish_outputs`. Nothing
    when no test recorded a result."""
    if not session.records:
        return
    run = results.RunFile(
        run_id=session.run_id, started=session.started, machine=results.machine_info(), results=tuple(session.records)
    )
    session.saved_path = session.store().save(run)
    finish_outputs(session, pytest_session, run)


def finish_outputs(session: SpecdecSession, pytest_session: pytest.Session, run: results.RunFile) -> None:
    """Sweep table and plot, position plot, ``--specdec-report``, markdown summary. A sweep in which no point met
    its thresholds (or whose configured point is too far below the best) is a run-level failure."""
    option = session.settings
    if option.sweep:
        assert session.profile_set is not None
        summary = sweep.summarize(
            session.records,
            session.profile_set.profiles,
            baseline=option.sweep_baseline,
            max_gap=option.sweep_max_gap,
        )
        if summary is not None:
            session.sweep_table, session.sweep_red = summary.table, summary.red
            session.sweep_undecided = summary.undecided
            undecided = [line for line in summary.table if line.startswith("undecided")]
            plot_path = Path(option.sweep_plot or session.out_dir / f"sweep-{session.run_id}.png")
            try:
                session.sweep_plot = plots.plot_sweep(
                    summary.points,
                    plot_path,
                    baselines=summary.baselines,
                    best=summary.best,
                    tied=summary.tied,
                    thresholds_ok=summary.thresholds_ok,
                    accept_floors=summary.accept_floors,
                    note=undecided[0].split(";")[0] + "; no best point named" if undecided else None,
                )
            except ImportError as exc:
                session.sweep_table.append(f"no plot: {exc}")
            if session.sweep_red:
                session.sweep_failed = True
                pytest_session.exitstatus = pytest.ExitCode.TESTS_FAILED
    if option.position_plot and any(r.metrics.get("accept_rate_at") for r in session.records):
        profiles = session.profile_set.profiles if session.profile_set is not None else {}
        floors = {name: p.thresholds.min_accept_rate_at or {} for name, p in profiles.items()}
        try:
            session.position_plot = plots.plot_positions(session.records, option.position_plot, floors=floors)
        except ImportError as exc:
            session.position_plot_error = str(exc)
    if option.report:
        session.report_path = write_json_report(run, Path(option.report))
    targets = markdown.markdown_targets(option.markdown, os.environ)
    if targets:
        lines = markdown.markdown_summary(
            session.records, session.failures, results_path=session.saved_path, sweep_lines=session.sweep_table
        )
        for path, append in targets:
            markdown.write_markdown(lines, path, append=append)
        session.markdown_paths = [path for path, _ in targets]


#: Under the summary when pytest-benchmark's table follows: why its OPS differs from the summary's tok/s.
BENCHMARK_OPS_NOTE = (
    "tok/s is the median repeat's; pytest-benchmark's OPS (below) is 1 / the mean seconds per output token over the "
    "repeats, so the two differ when the repeats spread (its Median column matches tok/s)"
)


def speedup_lines(records: Sequence[results.ResultRecord]) -> list[str]:
    """One ``specdec PROFILE: speedup vs ...`` line per profile: its last test's verdict, which after a
    confirmation covers every pair (the profile's first tests recorded the first 3 pairs only)."""
    speedups = {r.profile: r.paired["speedup"] for r in records if r.paired.get("speedup")}
    return [f"specdec {profile}: {speedup}" for profile, speedup in speedups.items()]


def check_lines(checked: Sequence[tuple[str, list[str]]], failed: bool, profile_path: Path) -> list[Line]:
    """``--specdec-check``'s verdict line, after one section per profile (written by :func:`write_summary`)."""
    verdict = "FAILED" if failed else "passed"
    text = f"specdec check {verdict}: {len(checked)} profile(s) from {profile_path}; nothing launched"
    return [(text, {"red": failed, "green": not failed})]


def note_lines(
    preflight_notes: Iterable[str],
    overrides: Mapping[str, tuple[str, list[str]]],
    measured: set[str],
    traces: Iterable[tuple[str, str | None]],
) -> list[Line]:
    """Preflight warnings (also in the header, which scrolls away), marker overrides of profile thresholds, and
    where each ``trace:`` went.

    :param overrides: node id -> (profile, what its marker changed), shown only for tests in ``measured``.
    :param measured: node ids of the tests that recorded a result (a test whose setup failed checked nothing).
    :param traces: (profile, ``RunResult.trace``) of the profiles measured in this process.
    """
    lines: list[Line] = [(f"specdec preflight: {line}", {"yellow": True}) for line in preflight_notes]
    for nodeid, (profile, changed) in overrides.items():
        if nodeid in measured:
            test = nodeid.split("::", 1)[-1]
            lines.append((f"specdec: {test}: marker overrides profile {profile}: {', '.join(changed)}", {}))
    for profile, trace in traces:
        if trace is not None:
            lines.append((f"specdec {profile}: {trace}", {"yellow": trace.startswith("not")}))
    return lines


def cost_lines(records: Iterable[results.ResultRecord]) -> list[str]:
    """What each test's verdicts cost (``ResultRecord.cost``), one line per test that has it:
    ``specdec server time: test_run[eagle3]: 12.3 server-s, 4 repeats; min_tok_s passed after 2 repeats (6.1 s);
    compare FAILED after 4 repeats (12.3 s)``. Server-seconds include warmups and a paired reference arm."""
    lines = []
    for r in records:
        cost = r.cost
        if not cost or not isinstance(cost.get("server_s"), int | float):
            continue
        test = r.test_id.split("::", 1)[-1]
        parts = [f"{test}: {cost['server_s']:.1f} server-s, {cost.get('repeats', '?')} repeats"]
        for key, v in (cost.get("verdicts") or {}).items():
            unit = "pairs" if key == "min_speedup" else "repeats"
            spent = float(v.get("server_s", 0.0))
            parts.append(f"{key} {v.get('verdict')} after {v.get('repeats')} {unit} ({spent:.1f} s)")
        lines.append("specdec server time: " + "; ".join(parts))
    return lines


def write_notes(session: SpecdecSession, terminalreporter: Any) -> None:
    """:func:`note_lines` of the session (traces: not on xdist workers' behalf)."""
    measured = {r.test_id for r in session.records}
    traces = [(run.profile, run.trace) for run in session.runs.values()]
    for text, markup in note_lines(session.preflight_notes, session.overrides, measured, traces):
        terminalreporter.write_line(text, **markup)


def write_summary(session: SpecdecSession, terminalreporter: Any) -> None:
    """The terminal summary: ``--specdec-check`` sections, leftover shared servers, then (when tests recorded
    results) the ``specdec summary`` table, paired speedups, cycle costs, per-category and per-position acceptance,
    notes, compares, and where each output file went."""
    tr = terminalreporter
    if session.check_lines:
        for name, lines in session.check_lines:
            tr.write_sep("-", f"specdec check: {name}")
            for line in lines:
                tr.write_line(line)
        for text, markup in check_lines(session.check_lines, session.check_failed, session.profile_path):
            tr.write_line(text, **markup)
    for line in session.sweep_lines:
        tr.write_line(f"specdec: {line}", red=True)
    if not session.records:
        write_notes(session, tr)
        return
    tr.write_sep("=", "specdec summary")
    rows = [(r.test_id, r.profile, r.metrics, r.outcome) for r in session.records]
    for line in report.summary_lines(rows):
        tr.write_line(line)
    for line in speedup_lines(session.records):
        tr.write_line(line)
    for line in cost_lines(session.records):
        tr.write_line(line)
    for line in report.cycle_lines(session.records):
        tr.write_line(line)
    for line in report.definition_lines(session.records):
        tr.write_line(line)
    from pytest_specdec.report import benchmark

    if benchmark.enabled(session.config):
        tr.write_line(BENCHMARK_OPS_NOTE)
    by_category = report.category_lines(rows)
    if by_category:
        tr.write_sep("-", "specdec accept length by prompt category (requests)")
        for line in by_category:
            tr.write_line(line)
    by_position = report.position_lines(rows)
    if by_position:
        tr.write_sep("-", "specdec acceptance by draft position")
        tr.write_line(report.POSITION_LEGEND)
        for line in by_position:
            tr.write_line(line)
    write_notes(session, tr)
    for run_id, tests in session.compared.items():
        tr.write_line(f"specdec compare: {len(tests)} test(s) compared with stored run {run_id}")
    # A failed compare prints its table with the failure; a passing one shows its deltas here.
    for test_id, table in session.compare_tables.items():
        tr.write_sep("-", f"specdec compare: {test_id.split('::', 1)[-1]} (no regression)")
        for line in table:
            tr.write_line(line)
    for note in session.compare_notes:
        tr.write_line(f"specdec compare: {note}")
    if session.saved_path is not None:
        tr.write_sep("-", f"specdec results: {session.saved_path}")
    if session.sweep_table:
        tr.write_sep("=", "specdec sweep")
        for line in session.sweep_table:
            undecided = line in session.sweep_undecided or line.startswith("undecided")
            tr.write_line(line, red=line in session.sweep_red, yellow=undecided)
        if session.sweep_plot is not None:
            tr.write_sep("-", f"specdec sweep plot: {session.sweep_plot}")
    if session.position_plot is not None:
        tr.write_sep("-", f"specdec position plot: {session.position_plot}")
    elif session.position_plot_error:
        tr.write_line(f"specdec: no position plot: {session.position_plot_error}", red=True)
    if session.report_path is not None:
        tr.write_sep("-", f"specdec report: {session.report_path}")
    for path in session.markdown_paths:
        tr.write_sep("-", f"specdec markdown: {path}")


def fail_lines(red: Sequence[str]) -> list[Line]:
    """The run-level failures of a sweep, one ``FAIL specdec sweep: <reason>`` line each (red, bold), for the very
    end of the terminal summary: pytest's final line counts tests (``6 passed``), so the reason a run exits 1 goes
    right above it, as pytest-cov's ``--cov-fail-under`` writes ``FAIL Required test coverage of 90% not reached``
    (``pytest_cov/plugin.py::CovPlugin.pytest_terminal_summary``).

    :param red: ``SpecdecSession.sweep_red`` (``sweep.SweepSummary.red``).
    """
    return [(f"FAIL specdec sweep: {line}", {"red": True, "bold": True}) for line in red]


def write_fail_lines(session: SpecdecSession, terminalreporter: Any) -> None:
    """:func:`fail_lines` of the session, written by the plugin's ``trylast`` ``pytest_terminal_summary``."""
    for text, markup in fail_lines(session.sweep_red):
        terminalreporter.write_line(text, **markup)
