"""The end of a run as a report: the result file, the sweep table and plots, ``--specdec-report`` and markdown outputs
(:func:`finish`, at ``pytest_sessionfinish``), and the terminal summary (:func:`summary_report`: the ``specdec
summary`` table, notes, compares, where each file went), built from plain values and returned, never written here.

``run.session`` writes a :class:`SummaryReport` through the terminal reporter (one ``write_sep`` or
``write_line`` per :class:`Line`) and sets the exit status when :attr:`Outputs.fails_run`; ``cli`` can print the same
lines. :func:`note_lines`, :func:`check_lines`, :func:`cost_lines` take data only.
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from pytest_specdec.judge.baseline import shown
from pytest_specdec.judge.outcomes import Outcomes
from pytest_specdec.measure import results
from pytest_specdec.measure.trace_split import CycleSplit
from pytest_specdec.profiles.schema import Profile
from pytest_specdec.report import markdown, plots
from pytest_specdec.report import terminal as report
from pytest_specdec.report.json_report import write_json_report
from pytest_specdec.report.sweep_table import sweep_summary

__all__ = [
    "BENCHMARK_OPS_NOTE",
    "REPEATS_NOTE",
    "Line",
    "OutputOptions",
    "Outputs",
    "SummaryReport",
    "baseline_lines",
    "check_lines",
    "compare_lines",
    "cost_lines",
    "errored_lines",
    "fail_lines",
    "finish",
    "interrupted_lines",
    "note_lines",
    "nothing_compared",
    "speedup_lines",
    "summary_report",
    "undecided_lines",
]


@dataclass(frozen=True, slots=True)
class Line:
    """One line of the terminal summary: ``write_sep(sep, text, **markup)`` when ``sep`` is set, else
    ``write_line(text, **markup)`` (markup: ``red``, ``yellow``, ``green``, ``bold``)."""

    text: str
    markup: Mapping[str, bool] = field(default_factory=dict)
    sep: str | None = None


@dataclass(frozen=True, slots=True, kw_only=True)
class OutputOptions:
    """Where the end of the run writes its files (``RunSettings.output_options``; by keyword only, so that a field
    added to one side cannot shift the others)."""

    #: ``<specdec dir>``: results under ``results/``, the sweep plot's default place.
    out_dir: Path
    #: ``--specdec-sweep`` was given: the sweep table (and plot) is built.
    sweep: bool = False
    sweep_baseline: str | None = None
    sweep_max_gap: float = 0.05
    sweep_plot: str | None = None
    position_plot: str | None = None
    report: str | None = None
    markdown: str | None = None
    #: ``--specdec-save NAME``: name the run NAME when every test of it is clean.
    save_name: str | None = None
    #: ``--specdec-compare`` was given: a run in which no test was compared fails (:attr:`Outputs.compare_red`).
    compare: bool = False
    #: ``--specdec-compare-missing``: with ``warn`` the compared-none line says that it passes tests, not runs.
    compare_missing: str = "fail"
    #: ``--specdec-undecided``: with ``fail`` a sweep's undecided configured point fails the run, as an undecided
    #: verdict fails its test.
    undecided: str = "warn"


@dataclass(frozen=True, slots=True)
class Outputs:
    """What :func:`finish` wrote, and the sweep's lines for the summary."""

    saved_path: Path | None = None
    #: ``--specdec-save``: the name's file when the run was named, else None.
    name_path: Path | None = None
    #: ``--specdec-save``: why the run was not named (its tests that are not clean), else empty.
    name_refused: str = ""
    sweep_table: tuple[str, ...] = ()
    #: Sweep lines that fail the run (no passing point; configured point shown too far below the best).
    sweep_red: tuple[str, ...] = ()
    #: Configured-point lines the measurements could not decide (written yellow; they fail the run only under
    #: ``--specdec-undecided=fail``: :attr:`sweep_undecided_fails`).
    sweep_undecided: tuple[str, ...] = ()
    #: ``--specdec-undecided=fail``: the ``sweep_undecided`` lines are in ``sweep_red`` too, failing the run.
    sweep_undecided_fails: bool = False
    sweep_plot: Path | None = None
    #: A ``request_rate`` sweep's load curve (``plots.plot_load_curve``), beside the sweep plot.
    load_plot: Path | None = None
    position_plot: Path | None = None
    position_plot_error: str = ""
    report_path: Path | None = None
    markdown_paths: tuple[Path, ...] = ()

    #: ``--specdec-compare`` given but no test was compared with a stored run (the run fails: a gate that compared
    #: nothing is not green); empty otherwise.
    compare_red: str = ""

    @property
    def fails_run(self) -> bool:
        """A run-level failure: the session's exit status becomes ``TESTS_FAILED``."""
        return bool(self.sweep_red or self.compare_red)

    def final_lines(self) -> list[Line]:
        """The lines for the very end of the summary: run-level failures (:func:`fail_lines`), a sweep's undecided
        configured point not failed (yellow, bold: counted as the undecided tests are), then why the run was not
        saved under its ``--specdec-save`` name (yellow, bold)."""
        out = fail_lines(self.sweep_red)
        if self.sweep_undecided and not self.sweep_undecided_fails:
            # An adversarial trial: a configured point tied with the best said "not failed" in the sweep's table
            # and nothing counted it, also under --specdec-undecided=fail (which now fails the run: sweep_red).
            out.append(Line("specdec: the sweep's configured point undecided: not failed "
                            "(--specdec-undecided=warn); its line above says what would decide it",
                            {"yellow": True, "bold": True}))  # fmt: skip
        if self.compare_red:
            out.append(Line(f"FAIL specdec compare: {self.compare_red}", {"red": True, "bold": True}))
        if self.name_refused:
            out.append(Line(f"specdec: {self.name_refused}", {"yellow": True, "bold": True}))
        return out

    @property
    def written(self) -> tuple[Path, ...]:
        """Every file written, in the order the summary names them."""
        paths = [self.saved_path, self.sweep_plot, self.load_plot, self.position_plot, self.report_path,
                 *self.markdown_paths]  # fmt: skip
        return tuple(p for p in paths if p is not None)


@dataclass(frozen=True, slots=True)
class SummaryReport:
    """The terminal summary of a run: its lines, the files the run wrote, and whether the run fails on them."""

    lines: tuple[Line, ...]
    #: For the very end of the summary, right above pytest's final line (:func:`fail_lines`).
    final: tuple[Line, ...] = ()
    written: tuple[Path, ...] = ()
    fails_run: bool = False


def finish(
    records: Sequence[results.ResultRecord],
    failures: Mapping[str, str],
    *,
    run_id: str,
    started: float,
    profiles: Mapping[str, Profile],
    options: OutputOptions,
    errored: Sequence[results.ErroredTest] = (),
    interrupted: bool = False,
) -> Outputs:
    """Save the run's records and the tests that errored before they measured as a result file
    (``results.ResultStore`` under ``<out_dir>/results``), then the sweep table and plot, the position plot,
    ``--specdec-report``, the markdown summary. Nothing when no test recorded a result, none errored and the run was
    not interrupted; only the result file, ``--specdec-report`` and the markdown summary when no test measured:
    ``latest`` is then this run, which ``compare`` fails on, not the run before it. A sweep in which no point met its
    thresholds (or whose configured point is too far below the best) is a run-level failure
    (:attr:`Outputs.fails_run`).

    :param errored: the specdec tests of the run that errored or failed before they measured (``RunFile.errored``).
    :param interrupted: the session ended early (``RunFile.interrupted``): written even when nothing measured, so
        ``latest`` is this run (the caller passes it only when profiles were selected).
    """
    if not records and not errored and not interrupted:
        return Outputs()
    run = results.RunFile(run_id=run_id, started=started, machine=results.machine_info(), results=tuple(records),
                          errored=tuple(errored), interrupted=interrupted)  # fmt: skip
    store = results.ResultStore(options.out_dir / "results", current=run_id)
    saved_path = store.save(run)
    name_path, name_refused = _save_name(store, run, options.save_name)
    targets = markdown.markdown_targets(options.markdown, os.environ)
    if not records:
        # Nothing measured to tabulate, plot or compare (the errors fail the run already); the markdown summary
        # still says which tests were not judged (a CI page showed nothing of them).
        report_path = write_json_report(run, Path(options.report)) if options.report else None
        _write_markdown(targets, markdown.markdown_summary((), failures, results_path=saved_path, errored=errored,
                                                           interrupted=interrupted))  # fmt: skip
        return Outputs(saved_path=saved_path, name_path=name_path, name_refused=name_refused, report_path=report_path,
                       markdown_paths=tuple(path for path, _ in targets))  # fmt: skip
    compare_red = nothing_compared(records, options.compare_missing) if options.compare else ""
    sweep_table: list[str] = []
    sweep_red: tuple[str, ...] = ()
    sweep_undecided: tuple[str, ...] = ()
    sweep_plot = load_plot = position_plot = report_path = None
    position_plot_error = ""
    if options.sweep:
        summary = sweep_summary(records, profiles, baseline=options.sweep_baseline, max_gap=options.sweep_max_gap)
        if summary is not None:
            sweep_table, sweep_red = list(summary.table), tuple(summary.red)
            sweep_undecided = tuple(summary.undecided)
            if options.undecided == "fail":  # an undecided configured point fails the run, as a verdict its test
                failed = {line: f"{line.removesuffix('; not failed')}; failed by --specdec-undecided=fail"
                          for line in sweep_undecided}  # fmt: skip
                sweep_red += tuple(failed.values())
                sweep_table = [failed.get(line, line) for line in sweep_table]  # the table says it too
            undecided = [line for line in summary.table if line.startswith("undecided")]
            plot_path = Path(options.sweep_plot or options.out_dir / f"sweep-{run_id}.png")
            try:
                sweep_plot = plots.plot_sweep(
                    summary.points,
                    plot_path,
                    baselines=summary.baselines,
                    best=summary.best,
                    tied=summary.tied,
                    thresholds_ok=summary.thresholds_ok,
                    accept_floors=summary.accept_floors,
                    note=undecided[0].split(";")[0] + "; no best point named" if undecided else None,
                )
                load_path = plot_path.with_name(plot_path.stem + "-load" + plot_path.suffix)
                load_plot = plots.plot_load_curve(records, load_path)
            except ImportError as exc:
                sweep_table.append(f"no plot: {exc}")
    if options.position_plot and any(r.metrics.get("accept_rate_at") for r in records):
        floors = {name: p.thresholds.min_accept_rate_at or {} for name, p in profiles.items()}
        try:
            position_plot = plots.plot_positions(records, options.position_plot, floors=floors)
        except ImportError as exc:
            position_plot_error = str(exc)
    if options.report:
        report_path = write_json_report(run, Path(options.report))
    _write_markdown(targets, markdown.markdown_summary(records, failures, results_path=saved_path,
                                                       sweep_lines=sweep_table, errored=errored,
                                                       interrupted=interrupted,
                                                       sweep_undecided=sweep_undecided,
                                                       sweep_red=sweep_red))  # fmt: skip
    return Outputs(
        saved_path=saved_path,
        name_path=name_path,
        name_refused=name_refused,
        compare_red=compare_red,
        sweep_table=tuple(sweep_table),
        sweep_red=sweep_red,
        sweep_undecided=sweep_undecided,
        sweep_undecided_fails=bool(sweep_undecided) and options.undecided == "fail",
        sweep_plot=sweep_plot,
        load_plot=load_plot,
        position_plot=position_plot,
        position_plot_error=position_plot_error,
        report_path=report_path,
        markdown_paths=tuple(path for path, _ in targets),
    )


def _write_markdown(targets: Sequence[tuple[Path, bool]], lines: Sequence[str]) -> None:
    """``lines`` to each (path, append) of ``markdown.markdown_targets``."""
    for path, append in targets:
        markdown.write_markdown(lines, path, append=append)


def nothing_compared(records: Sequence[results.ResultRecord], missing: str = "fail") -> str:
    """Under ``--specdec-compare``: why the run fails when none of its tests was compared with a stored run (no
    record has a ``compare`` verdict in ``cost["verdicts"]``), else ``""``. Read from the records, so it holds on
    the xdist controller too. ``missing``: ``--specdec-compare-missing``; with ``warn`` the line says that it
    passes a test without a baseline, not a run that compared none (an adversarial trial read ``1 passed, 1
    warning`` and exit 1 as a contradiction)."""
    if any(r.compare_cost() is not None for r in records):
        return ""
    if not records:
        return (
            "--specdec-compare compared no test with a stored run: none measured (a bare @pytest.mark.specdec, or a "
            "test that uses only specdec_server, is not measured: give its marker thresholds or request specdec_run); "
            "a gate that compared nothing is not green"
        )
    # A skipped test has no verdict line of its own (an adversarial trial read "each one's line says why" and found
    # none): named here.
    skipped = _skipped_tests(records)
    why = "each one's line says why"
    if skipped:
        why = f"skipped after it measured, so not judged: {shown(skipped)}"
        why += "; each other one's line says why" if len(skipped) < len(records) else ""
    warn = (" (--specdec-compare-missing=warn passes a test without a baseline, not a run that compared none)"
            if missing == "warn" else "")  # fmt: skip
    return (
        f"--specdec-compare compared none of the {len(records)} test(s) with a stored run ({why}); a gate that "
        f"compared nothing is not green{warn}. On a first night, leave --specdec-compare out"
    )


def _save_name(store: results.ResultStore, run: results.RunFile, name: str | None) -> tuple[Path | None, str]:
    """``--specdec-save NAME``: name ``run`` NAME when every test of it is clean (a baseline must be: completed,
    passed, every verdict passed; a test that errored before it measured is not, nor an interrupted run); else leave
    the name where it was and say why.

    :returns: (the name's file, ""), or (None, why not) when the run is not clean; (None, "") without a name.
    """
    if not name:
        return None, ""
    unclean = [f"{r.test_id.split('::', 1)[-1]} ({p})" for r in run.results if (p := r.baseline_problem())]
    # A test that errored before it measured is missing from the run: a baseline without it compares nothing of it.
    unclean += [f"{e.test_id.split('::', 1)[-1]} (errored before it measured)" for e in run.errored]
    problem = f"{len(unclean)} test(s) not clean: {shown(unclean)}" if unclean else ""
    if not problem and run.interrupted:  # its records would say "interrupted": it has none
        problem = "the session was interrupted before any test measured"
    if problem:
        before = store.named(name)
        kept = f"{name} still names run {before}" if before else f"no run is named {name}"
        why = (
            f"not saved as {name}: {problem}; {kept}. Name it anyway: "
            f"python -m pytest_specdec save {run.run_id} {name} --force"
        )
        return None, why
    return store.save_name(name, run.run_id), ""


def baseline_lines(records: Iterable[results.ResultRecord]) -> list[Line]:
    """What the clean records just stored cannot decide as baselines (``ResultRecord.baseline_notes``), once per
    profile and note, yellow: ``specdec baseline note (profile eagle3): output_tok_s: repeats 236, 215, 117 tok/s:
    ...``. "note" and "profile" are spelled out: a fresh-user trial read ``specdec baseline: baseline: ...`` (the
    profile named baseline) as an error of the run."""
    notes: dict[str, None] = {}
    for record in records:
        if not record.baseline_problem():
            notes.update(dict.fromkeys(f"(profile {record.profile}): {note}" for note in record.baseline_notes))
    return [Line(f"specdec baseline note {note}", {"yellow": True}) for note in notes]


def compare_lines(outcomes: Outcomes) -> list[Line]:
    """One line per stored run compared with: how many tests, why that run (``Baseline.why``) and the newer runs
    passed over; then what its record said when it was stored (yellow), then each passing or undecided compare's
    table, once per measurement (``Outcomes.compare_sections``: ``specdec compare: test_a[eagle3], test_b[eagle3]
    (undecided)``, the first 3 tests named)."""
    out = []
    for run_id, tests in outcomes.compared.items():
        why, skipped, stored = outcomes.chosen.get(run_id, ("", {}, {}))
        text = f"specdec compare: {len(tests)} test(s) compared with stored run {run_id}"
        text += f": {why}" if why else ""
        text += f"; newer runs passed over: {shown(list(skipped))}" if skipped else ""
        out.append(Line(text))
        out.extend(Line(f"specdec compare: run {run_id} was stored with a warning {note}", {"yellow": True})
                   for note in stored)  # fmt: skip
    # A failed compare prints its table with the failure; a passing or undecided one shows its rows here (an
    # undecided one also warns, once per profile, a line per open row: the table shows which rows were decided and
    # which read n/a), once per measurement, headed by the tests that read it.
    for readers, outcome, table in outcomes.compare_sections:
        # "undecided" alone: whether it failed the test is --specdec-undecided's (a fresh-user trial read "not failed"
        # above a test that policy had failed); the count line at the end says which.
        label = {"undecided": "undecided", "not measured further": "not measured further, not failed"}.get(
            outcome, "no regression"
        )
        names = shown([test_id.split("::", 1)[-1] for test_id in readers])
        out.append(Line(f"specdec compare: {names} ({label})", sep="-"))
        out.extend(Line(line) for line in table)
    return out


#: Under the summary when pytest-benchmark's table follows: why its OPS differs from the summary's tok/s.
#: Under the summary when any test measured more than one repeat: the table's tok/s and a verdict's figure differ.
REPEATS_NOTE = (
    "each figure in the tables (tok/s, accept length and rate, per position, per category) is its median repeat's; "
    "a verdict's figure (a floor, speedup, compare) is the geometric mean of the repeats that verdict measured, so "
    "the two differ when the repeats spread"
)
BENCHMARK_OPS_NOTE = (
    "tok/s is the median repeat's; pytest-benchmark's OPS (below) is 1 / the mean seconds per output token over the "
    "repeats, so the two differ when the repeats spread (its Median column is tok/s's median repeat, inverted; with an "
    "even number of repeats the two middle ones are averaged in s/token there, in tok/s here)"
)


def speedup_lines(records: Sequence[results.ResultRecord]) -> list[str]:
    """One ``specdec PROFILE: speedup vs ...`` line per profile and ``min_speedup`` floor: the last test's verdict,
    which after a confirmation covers every pair (the profile's first tests recorded the first 3 pairs only). A
    marker's own floor on one test is a line of its own beside the profile's (``paired["limit"]``), not in its place."""
    speedups = {(r.profile, r.paired.get("limit")): r.paired["speedup"] for r in records if r.paired.get("speedup")}
    return [f"specdec {profile}: {speedup}" for (profile, _), speedup in speedups.items()]


def check_lines(
    checked: Sequence[tuple[str, Sequence[str]]], failed: bool, profile_path: Path, marked: int = 0
) -> list[Line]:
    """``--specdec-check``'s verdict line, after one section per profile and one for the markers
    (:func:`summary_report`).

    :param marked: how many collected tests have a ``specdec`` marker (named when any).
    """
    verdict = "FAILED" if failed else "passed"
    tests = f", {marked} marked test(s)" if marked else ""
    text = f"specdec check {verdict}: {len(checked)} profile(s) from {profile_path}{tests}; nothing launched"
    return [Line(text, {"red": failed, "green": not failed})]


def note_lines(
    preflight_notes: Iterable[str],
    overrides: Mapping[str, tuple[str, Sequence[str]]],
    measured: set[str],
    traces: Iterable[tuple[str, str | None]],
) -> list[Line]:
    """Preflight warnings (also in the header, which scrolls away), marker overrides of profile thresholds, and
    where each ``trace:`` went.

    :param overrides: node id -> (profile, what its marker changed), shown only for tests in ``measured``.
    :param measured: node ids of the tests that recorded a result (a test whose setup failed checked nothing).
    :param traces: (profile, ``RunResult.trace``) of the profiles measured in this process.
    """
    lines = [Line(f"specdec preflight: {line}", {"yellow": True}) for line in preflight_notes]
    for nodeid, (profile, changed) in overrides.items():
        if nodeid in measured:
            test = nodeid.split("::", 1)[-1]
            lines.append(Line(f"specdec: {test}: marker overrides profile {profile}: {', '.join(changed)}"))
    for profile, trace in traces:
        if trace is not None:
            lines.append(Line(f"specdec {profile}: {trace}", {"yellow": trace.startswith("not")}))
    return lines


def _count(n: object, unit: str) -> str:
    """``1 repeat``, ``3 repeats``, ``? repeats`` (a record without the count)."""
    return f"{n} {unit}" if n == 1 else f"{n if n is not None else '?'} {unit}s"


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
        parts = [f"{test}: {cost['server_s']:.1f} server-s, {_count(cost.get('repeats'), 'repeat')}"]
        for key, v in (cost.get("verdicts") or {}).items():
            unit = "pair" if key == "min_speedup" else "repeat"
            spent = float(v.get("server_s", 0.0))
            parts.append(f"{key} {v.get('verdict')} after {_count(v.get('repeats'), unit)} ({spent:.1f} s)")
        lines.append("specdec server time: " + "; ".join(parts))
    return lines


def summary_report(
    outcomes: Outcomes,
    outputs: Outputs,
    *,
    checked: Sequence[tuple[str, Sequence[str]]] = (),
    check_failed: bool = False,
    marker_errors: Sequence[str] = (),
    marked: int = 0,
    profile_path: Path = Path(),
    shared_leftovers: Sequence[str] = (),
    preflight_notes: Sequence[str] = (),
    traces: Iterable[tuple[str, str | None]] = (),
    splits: Mapping[str, CycleSplit] | None = None,
    benchmark_table: bool = False,
    verbose: bool = False,
    errored: Sequence[results.ErroredTest] = (),
    interrupted: bool = False,
) -> SummaryReport:
    """The terminal summary: ``--specdec-check`` sections, leftover shared servers, then (when tests recorded
    results) the ``specdec summary`` table, paired speedups, costs, per-category and per-position acceptance, notes,
    compares, and where each output file went.

    :param checked: ``--specdec-check``'s (profile, finding lines), one section each; empty otherwise.
    :param marker_errors: ``--specdec-check``'s ``error: NODEID: ...`` lines on the collected tests' markers.
    :param marked: how many collected tests have a ``specdec`` marker; a ``markers`` section follows the profiles'
        when this or ``marker_errors`` is non-empty.
    :param shared_leftovers: shared servers the xdist workers left (``sharing.sweep_shared``), one red line each.
    :param traces: (profile, ``RunResult.trace``) of the profiles measured in this process.
    :param splits: profile -> ``RunResult.cycle_split`` (a traced speculative profile), for the cycle lines.
    :param benchmark_table: pytest-benchmark's table follows (:data:`BENCHMARK_OPS_NOTE` explains its OPS).
    :param verbose: ``-v``: every latency percentile, the throughputs and goodput in a table of their own
        (``terminal.serving_lines``).
    :param errored: the specdec tests that errored before they measured (:func:`errored_lines`); when no test
        measured, the summary is their line and where the result file went.
    :param interrupted: the session ended early and its run file says so (:func:`interrupted_lines`).
    """
    out: list[Line] = []
    if checked:
        for name, found in checked:
            out.append(Line(f"specdec check: {name}", sep="-"))
            out.extend(Line(line) for line in found)
        if marked or marker_errors:
            out.append(Line("specdec check: markers", sep="-"))
            out.extend(Line(line) for line in marker_errors)
            if not marker_errors:
                out.append(Line(f"{marked} marked test(s): no findings"))
        out.extend(check_lines(checked, check_failed, profile_path, marked))
    out.extend(Line(f"specdec: {line}", {"red": True}) for line in shared_leftovers)
    records = outcomes.records
    measured = {r.test_id for r in records}
    notes = note_lines(preflight_notes, outcomes.overrides, measured, traces)
    if not records:
        unjudged = errored_lines(errored) + interrupted_lines(interrupted)
        return SummaryReport(tuple(out + notes + unjudged + _output_lines(outputs)))
    out.append(Line("specdec summary", sep="="))
    rows = [(r.test_id, r.profile, r.metrics, markdown.shown_outcome(r)) for r in records]
    plain = [
        *report.summary_lines(rows),
        *speedup_lines(records),
        *cost_lines(records),
        *report.cycle_lines(records, splits),
        *report.definition_lines(records),
        *([REPEATS_NOTE] if any(len(r.values("output_tok_s")) > 1 for r in records) else []),
        *([BENCHMARK_OPS_NOTE] if benchmark_table else []),
    ]
    out.extend(Line(line) for line in plain)
    with_rate = [(r.test_id, r.profile, {**r.metrics, "request_rate": r.workload.get("request_rate")}, r.outcome)
                 for r in records]  # fmt: skip
    serving = report.serving_lines(with_rate, everything=verbose)
    if serving:
        out.append(Line("specdec serving metrics" + ("" if verbose else " (open loop; -v for every test)"), sep="-"))
        out.extend(Line(line) for line in serving)
    by_category = report.category_lines(rows)
    if by_category:
        out.append(Line("specdec accept length by prompt category (requests)", sep="-"))
        out.extend(Line(line) for line in by_category)
    by_position = report.position_lines(rows)
    if by_position:
        out.append(Line("specdec acceptance by draft position", sep="-"))
        out.extend(Line(line) for line in [report.POSITION_LEGEND, *by_position])
    out.extend(notes)
    out.extend(errored_lines(errored))
    out.extend(skipped_lines(records))
    out.extend(interrupted_lines(interrupted))
    out.extend(compare_lines(outcomes))
    out.extend(Line(f"specdec compare: {note}") for note in outcomes.compare_notes)
    out.extend(_output_lines(outputs))
    out.extend(baseline_lines(records))
    return SummaryReport(tuple(out), tuple(outputs.final_lines()), outputs.written, outputs.fails_run)


def errored_lines(errored: Sequence[results.ErroredTest]) -> list[Line]:
    """One line naming the specdec tests that errored or failed before they measured, which the result file lists
    (``RunFile.errored``) and a ``compare`` of the run exits 1 on (pytest's own lines above say why each failed).
    Example: ``specdec: 2 tests errored before they measured (listed in the result file; compare exits 1 on them):
    test_run[eagle3], test_latency[eagle3]``."""
    if not errored:
        return []
    n = len(errored)
    tests = shown([e.test_id.split("::", 1)[-1] for e in errored])
    what, it, them = ("1 test", "it", "it") if n == 1 else (f"{n} tests", "they", "them")
    text = f"specdec: {what} errored before {it} measured (listed in the result file; compare exits 1 on {them})"
    return [Line(f"{text}: {tests}", {"yellow": True})]


def skipped_lines(records: Iterable[results.ResultRecord]) -> list[Line]:
    """One line naming the tests that measured and then skipped: their row shows the figures, but pytest judges no
    skipped test, so neither their thresholds nor their compare were (an adversarial trial's skipped row showed an
    accept length its compare would have called REGRESSED, and nothing said it was not judged). Example:
    ``specdec: 1 test measured, then skipped: not judged (no threshold or compare verdict): test_plain[e3-shift]``."""
    skipped = _skipped_tests(records)
    if not skipped:
        return []
    what = "1 test" if len(skipped) == 1 else f"{len(skipped)} tests"
    text = f"specdec: {what} measured, then skipped: not judged (no threshold or compare verdict): {shown(skipped)}"
    return [Line(text, {"yellow": True})]


def _skipped_tests(records: Iterable[results.ResultRecord]) -> list[str]:
    """The tests (``file::`` left out) whose records say they skipped after they measured."""
    return [r.test_id.split("::", 1)[-1] for r in records if r.outcome == "skipped"]


def interrupted_lines(interrupted: bool) -> list[Line]:
    """One line when the session ended early: its run file says ``interrupted: true`` (tests it selected may be in
    neither its results nor its errored list) and a ``compare`` of it exits 1."""
    if not interrupted:
        return []
    text = ("specdec: the session was interrupted: the result file says so (interrupted: true) and compare exits 1 "
            "on it; rerun it to judge the run")  # fmt: skip
    return [Line(text, {"yellow": True})]


def _output_lines(outputs: Outputs) -> list[Line]:
    """Where the result file went, the sweep table, and the other files written."""
    out = []
    if outputs.saved_path is not None:
        out.append(Line(f"specdec results: {outputs.saved_path}", sep="-"))
    if outputs.name_path is not None:
        out.append(Line(f"specdec: saved as {outputs.name_path.name}: {outputs.name_path} names this run"))
    if outputs.sweep_table:
        out.append(Line("specdec sweep", sep="="))
        for line in outputs.sweep_table:
            undecided = line in outputs.sweep_undecided or line.startswith("undecided")
            out.append(Line(line, {"red": line in outputs.sweep_red, "yellow": undecided}))
        if outputs.sweep_plot is not None:
            out.append(Line(f"specdec sweep plot: {outputs.sweep_plot}", sep="-"))
        if outputs.load_plot is not None:
            out.append(Line(f"specdec load curve: {outputs.load_plot}", sep="-"))
    if outputs.position_plot is not None:
        out.append(Line(f"specdec position plot: {outputs.position_plot}", sep="-"))
    elif outputs.position_plot_error:
        out.append(Line(f"specdec: no position plot: {outputs.position_plot_error}", {"red": True}))
    if outputs.report_path is not None:
        out.append(Line(f"specdec report: {outputs.report_path}", sep="-"))
    out.extend(Line(f"specdec markdown: {path}", sep="-") for path in outputs.markdown_paths)
    return out


def fail_lines(red: Sequence[str]) -> list[Line]:
    """The run-level failures of a sweep, one ``FAIL specdec sweep: <reason>`` line each (red, bold), for the very
    end of the terminal summary: pytest's final line counts tests (``6 passed``), so the reason a run exits 1 goes
    right above it, as pytest-cov's ``--cov-fail-under`` writes ``FAIL Required test coverage of 90% not reached``
    (``pytest_cov/plugin.py::CovPlugin.pytest_terminal_summary``).

    :param red: ``Outputs.sweep_red`` (``sweep_table.SweepSummary.red``).
    """
    return [Line(f"FAIL specdec sweep: {line}", {"red": True, "bold": True}) for line in red]


def uncompared_lines(records: Sequence[results.ResultRecord], missing: str) -> list[Line]:
    """Under ``--specdec-compare`` with ``--specdec-compare-missing=warn``: one line counting the tests passed without
    a baseline while others were compared (none compared: :func:`nothing_compared` fails the run instead), for the
    very end of the summary. Without it such a test read ``passed`` in the table and only a warning said it was never
    compared (an adversarial trial: a renamed profile's regressed first night; the ``compare`` command counts them
    as "without baseline").

    Example: ``specdec: 1 test not compared with a stored run, passed by --specdec-compare-missing=warn:
    test_night[eagle3b]; its warning above says why (a new test's first night, or a renamed profile)``.
    """
    if missing != "warn" or not any(r.compare_cost() is not None for r in records):
        return []
    skipped = set(_skipped_tests(records))
    tests = [name for r in records if r.compare_cost() is None
             if (name := r.test_id.split("::", 1)[-1]) not in skipped]  # fmt: skip
    if not tests:
        return []
    counted, whose = ("1 test", "its") if len(tests) == 1 else (f"{len(tests)} tests", "each one's")
    text = (f"specdec: {counted} not compared with a stored run, passed by --specdec-compare-missing=warn: "
            f"{shown(tests)}; {whose} warning above says why (a new test's first night, or a renamed profile)")
    return [Line(text, {"yellow": True, "bold": True})]


def undecided_lines(records: Iterable[results.ResultRecord], policy: str) -> list[Line]:
    """One line counting the tests with a verdict that stayed undecided at its budget, for the very end of the summary
    (right above pytest's final line, as :func:`fail_lines`): an undecided verdict is not "ok", whatever the policy
    made of the test. Counted in tests, as pytest counts outcomes and as the ``compare`` command counts its
    undecided tests (``terminal.undecided_count``), then the profiles and the verdicts open in each (every test of a
    profile shares its verdicts, ``Outcomes.once``; a fresh-user trial read "1 verdict undecided" here and "2
    undecided" from the command on the same two tests).

    Example: ``specdec: 2 tests undecided (1 profile: eagle3 on min_speedup, compare) at the budget: not failed
    (--specdec-undecided=warn); each profile's warning above says what would decide it`` (the warnings are given
    once per profile: a fresh-user trial read "each undecided line" above one warning for two tests). (Not always
    more repeats: a baseline known too loosely needs more stored runs; seen on an H200 night whose one line said
    "more repeats would decide them" below a warning that said they would not.)

    :param records: the run's records (``ResultRecord.undecided_keys``).
    :param policy: ``RunSettings.undecided``.
    """
    tests: dict[str, None] = {}
    by_profile: dict[str, dict[str, None]] = {}
    for record in records:
        for key in record.undecided_keys():
            tests[record.test_id] = None
            by_profile.setdefault(record.profile, {})[key] = None
    if not tests:
        return []
    named = [f"{p} on {', '.join(keys)}" for p, keys in by_profile.items()]
    what, where = ("failed", "each failure") if policy == "fail" else ("not failed", "each profile's warning")
    text = (
        f"specdec: {report.undecided_count(len(tests), named)} at the budget: {what} "
        f"(--specdec-undecided={policy}); {where} above says what would decide it"
    )
    return [Line(text, {"red" if policy == "fail" else "yellow": True, "bold": True})]
