"""``python -m pytest_specdec calibrate``: rerun a profile K times (separate server starts), or read stored runs, and
propose baseline-compare tolerances from the spread; the measured noise is written for ``--specdec-compare``."""

from __future__ import annotations

import argparse
import dataclasses
import json
import math
import statistics
import sys
import zlib
from collections import Counter
from collections.abc import Mapping, Sequence
from pathlib import Path

import numpy as np

from pytest_specdec.cli.exits import EXIT_BAD_PROFILE, EXIT_FINDINGS, EXIT_NO_PROPOSAL, EXIT_OK, EXIT_USAGE
from pytest_specdec.core import hoststate, stats
from pytest_specdec.core.errors import CompareError, ProfileError, ServerError, ServerStartError
from pytest_specdec.core.metric_table import EXACT_FIELDS, PAIRED_FIELDS
from pytest_specdec.core.table import Column, text_table
from pytest_specdec.core.tolerances import (
    CATEGORY_FIELDS,
    DEFAULT_TOLERANCES,
    Tolerance,
    Tolerances,
    field_specs,
    merge_tolerances,
)
from pytest_specdec.engines.rules import load_profiles
from pytest_specdec.judge import sequential
from pytest_specdec.judge.compare import (
    MIN_CATEGORY_REQUESTS,
    assumed_instance_sd,
    calibrated_history,
    design_of,
    measured_on_gpu,
    run_to_run_sd,
)
from pytest_specdec.judge.fingerprint import workload_differences
from pytest_specdec.judge.history import MAX_HISTORY_RUNS
from pytest_specdec.judge.noise import (
    MAX_NOISE_SD,
    OUTLIER_Z,
    PASS_PROBABILITY,
    TOLERANCE_CAP,
    CalibratedNoise,
    FieldNoise,
    GateSizing,
    OutlyingRun,
    calibrate_noise,
    measurements,
    outlying_runs,
    paired_arm,
    proposal_sds,
)
from pytest_specdec.judge.pair_ratios import paired_ratios
from pytest_specdec.judge.sequential import RunEffect
from pytest_specdec.judge.verdict import design_for
from pytest_specdec.measure import pairing, runner
from pytest_specdec.measure.results import ResultRecord, ResultStore
from pytest_specdec.profiles.schema import Profile, Workload

__all__ = ["calibrate_command", "night_row_probability"]

#: Server starts from which a run-to-run sd is not called rough (on one H100, 4 starts read 3.3 %, the next 6 14.8 %).
_FIRM_RUNS = 6
#: The stored runs the table of tolerances shows (with --stored-runs): the first night, the last that takes the
#: run-to-run sd as known (``sequential.ASSUMED_UP_TO_RUNS``), a history between, a full one (``MAX_HISTORY_RUNS``).
_TABLE_RUNS = (1, 3, 5, 10)
#: Runs from which the runs' tok/s are checked for a trend (:func:`_trend_line`): 4 unordered instances all step
#: one way 1 time in 12 (2 / 4!), 3 of them 1 time in 3.
_TREND_RUNS = 4
#: A drift from the first run's median tok/s to the last's beyond this many within-run sds (of one repeat) is a trend
#: (fresh-user trial: 116.5 -> 159.4 tok/s while the load average fell 4.5 -> 2.2, with a few % within a run).
_TREND_SDS = 3.0


def calibrate_command(args: argparse.Namespace) -> int:
    """``calibrate PROFILE_FILE --profile NAME [--runs K]`` or ``calibrate --from RUN ...``: prints each run's
    figures, writes the noise file (``noise.calibrate_noise``, and each category row's sds: :func:`_category_noise`)
    and prints an ini block of proposed tolerances sized for the night: the least at which an unchanged night passes
    every row the compare judges statistically (:func:`_judged_rows`: R of them) 90 % of the time, each row at
    ``1 - 0.1 / R`` (:func:`night_row_probability`; ``--per-row``: 0.9 each, as before), its figure from unchanged
    nights drawn from this noise and judged by the compare's own verdict against ``--stored-runs`` stored runs at the
    profile's budget (:meth:`_Row.needs`; from per-pair ratios where the compare judges those), counting
    measurements, not tests (``noise.measurements``: the tests of a profile in one run file share one). Each
    category row the compare judges (``tpot_ms_p50[code]``) is sized at its field's alpha / k, printed beside the
    field's, pasted as ``FIELD[CATEGORY]:X%`` where wider. A table gives every row's least tolerance against 1, 3, 5
    and 10 stored runs and the run-to-run sd a compare against 1-3 takes (:func:`_table_lines`); for a paired field,
    a comment says what its raw row needs at the ratio row's tolerance (:func:`_raw_line`); a line says how often the
    drawn nights pass every row at the proposal (:func:`_night_line`); under each field's proposal, the least loss a
    night at the budget fails 95% of the time at it (:func:`_caught_line`). A run whose tok/s is an outlier against
    the other runs' (``noise.outlying_runs``, from 3 runs) is named, with the load averages it recorded, and left out
    of the noise file and the proposal, the proposal with it pooled shown beside (:func:`_outlier_lines`);
    ``--keep-outliers`` pools it (and shows the proposal without it).

    No block under which the night seldom passes (a fresh-user trial pasted ``output_tok_s:67.2%`` under a night line of
    0%, and a 22% slowdown then read ok): a field with a row the proposal leaves undecided more than its share (none
    below ``noise.TOLERANCE_CAP`` decides it: :func:`_short_rows`) is left out of the block, named with each such row's
    figure, the cap and what would decide it (:func:`_left_out_lines`), and keeps the tolerance the user's ini or
    profile gives it; the night line counts the pasted fields' rows. Where no field is left (or, as a guard, the block's
    rows would pass an unchanged night less than the 90% sized for), no block is printed at all (:func:`_refusal_lines`,
    one ``error:`` line on stderr). The noise file is written either way: it is measurement, not a proposal. A paired
    field whose raw row needs more than its ratio row's figure is pasted at the raw row's, beside the ratio row's own
    (``output_tok_s:36.6%``, ``output_tok_s/baseline:3.4%``: :func:`_proposal`).

    No figure that gates nothing (a fresh-user trial's 2 runs x 2 repeats proposed ``output_tok_s:92.8%``, under a line
    saying it fails only losses >= 94.7%): a field with a row whose figure, below the cap, does not fail a 50% loss of
    tok/s or a 2x rise of a time on 95% of nights (:data:`BLUNT_FACTOR`, :func:`_blunt_rows`; a paired field's raw
    row excepted) is left out of the block the same way, the line saying what the figure catches and what would size
    it (more server starts, more repeats, a paired arm, a quieter runner).

    :returns: ``EXIT_NO_PROPOSAL`` when no block is printed; ``EXIT_FINDINGS`` when a server failed, a run was left
        out or a field was left out of the block; ``EXIT_USAGE``/``EXIT_BAD_PROFILE`` on bad input; else
        ``EXIT_OK``."""
    if not 1 <= args.stored_runs <= MAX_HISTORY_RUNS:
        print(f"error: --stored-runs={args.stored_runs}: expected the stored runs of the baseline a compare will pool, "
              f"1 to {MAX_HISTORY_RUNS} (it pools at most {MAX_HISTORY_RUNS}), e.g. --stored-runs {MAX_HISTORY_RUNS}",
              file=sys.stderr)  # fmt: skip
        return EXIT_USAGE
    records: list[ResultRecord] = []
    labels: list[str] = []  # per record: the run as the outlier line names it
    tests: Counter[int] = Counter()  # per record: the tests that share its measurement
    design: sequential.Design | None = None
    if args.from_runs:
        try:
            stored, refs = _stored_records(args.from_runs, args.profile, Path(args.results_dir))
        except CompareError as exc:
            print(f"error: {exc}", file=sys.stderr)
            return EXIT_USAGE
        kept = [(run_id, r) for run_id, r in stored if not _left_out(r)]
        if len(kept) < len(stored):
            why = Counter(_left_out(r) for _, r in stored if _left_out(r))
            shown = ", ".join(f"{n} {reason}" for reason, n in sorted(why.items()))
            print(f"# left out {len(stored) - len(kept)} test record(s) ({shown}): a failed or interrupted test's run "
                  "may not have measured normally (undecided ones are kept)")  # fmt: skip
        # Every test of a profile in one run reads one measurement: count (and pool) measurements, not tests.
        records = measurements(kept)
        run_of = {id(r): run_id for run_id, r in kept}
        labels = [_run_label(run_of[id(r)], refs.get(run_of[id(r)])) for r in records]
        # measurements() keeps one record of a (run, profile): the others are its tests.
        tests = Counter(next(i for i, m in enumerate(records) if run_of[id(m)] == run_id) for run_id, _ in kept)
        if len(records) < 2:
            runs = ", ".join(dict.fromkeys(run_id for run_id, _ in kept)) or "none"
            print(f"error: calibrate --from needs K >= 2 runs of the profile (separate server starts: a run-to-run "
                  f"sd needs 2 or more, as --runs K >= 2); got {len(records)} (runs: {runs})",
                  file=sys.stderr)  # fmt: skip
            return EXIT_USAGE
        # The budget the runs were judged with (a compare of stored runs reads it so), else the default profile's.
        design = next((d for d in map(design_of, records) if d is not None), None)
    else:
        if not args.profile_file or not args.profile or args.runs < 2:
            print("error: calibrate needs PROFILE_FILE, --profile NAME and --runs K >= 2 (or --from RUN ...)",
                  file=sys.stderr)  # fmt: skip
            return EXIT_USAGE
        try:
            profile = load_profiles(args.profile_file).get(args.profile, flag="--profile")
        except ProfileError as exc:
            print(f"error: {exc}", file=sys.stderr)
            return EXIT_BAD_PROFILE
        vs = profile.thresholds.min_speedup.vs if profile.thresholds.min_speedup is not None else None
        try:
            where = f"{args.profile}'s min_speedup.vs"
            reference = load_profiles(args.profile_file).get(vs, flag=where) if vs else None
        except ProfileError as exc:
            print(f"error: {exc}", file=sys.stderr)
            return EXIT_BAD_PROFILE
        design = design_for(profile, profile.workload.repeats)
        for i in range(args.runs):
            before = hoststate.snapshot()
            try:
                record = _calibration_run(profile, reference, Path(args.log_dir))
            except (ServerStartError, ServerError) as exc:
                print(f"error: run {i + 1}/{args.runs}: {exc}", file=sys.stderr)
                return EXIT_FINDINGS
            # The runner's state as a stored run's fingerprint has it: the trend line reads its load average.
            runner_state = hoststate.runner_entry(before, hoststate.snapshot())
            record = dataclasses.replace(record, fingerprint={**record.fingerprint, "runner": runner_state})
            records.append(record)
            labels.append(f"run {i + 1}/{args.runs}")
            ratios = paired_ratios(record, "output_tok_s")
            paired = f", {sorted(ratios)[len(ratios) // 2]:.3f}x {vs} (paired)" if ratios else ""
            length = record.metrics.get("accept_length")
            shown = f"{length:.3f}" if isinstance(length, int | float) else "n/a"
            print(f"run {i + 1}/{args.runs}: {record.metrics.get('output_tok_s', 0):.1f} tok/s, "
                  f"accept length {shown}{paired}")  # fmt: skip
    design = design or sequential.Design(Workload().repeats, sequential.DEFAULT_MAX_REPEATS)
    per_row = bool(args.per_row)
    # A run measured beside another job (load 5.5: 58 tok/s where the others read 111-129) widened every proposal
    # to 31-74% in a fresh-user trial; it is left out unless --keep-outliers keeps it (docs/ci.md says why).
    outliers = outlying_runs(records, instance_sd=assumed_instance_sd("output_tok_s", gpu=measured_on_gpu(*records)))
    odd = {o.index for o in outliers}
    without = [r for i, r in enumerate(records) if i not in odd]
    pooled, other = (records, without) if args.keep_outliers else (without, records)
    made = _size(pooled, design, args.stored_runs, per_row=per_row)
    if made is None:
        print("error: not enough values to propose tolerances: a metric needs 2 or more values above 0 across the "
              "runs", file=sys.stderr)  # fmt: skip
        return EXIT_USAGE
    found_sds, noise, vs, by_category, no_verdict = made.found, made.noise, made.vs, made.by_category, made.no_verdict
    sizing, judged, proposal, pasted, short = made.sizing, made.judged, made.proposal, made.pasted, made.short
    sds = [(f"{key}: sd {sd:.0%} {kind}") for kind, pairs in (
        ("within a run", [*noise.items(), *((n.key, n.within) for n in by_category.values())]),
        ("run to run", [*noise.run_to_run.items(), *((n.key, n.run_to_run) for n in by_category.values())]),
    ) for key, sd in pairs if sd > MAX_NOISE_SD]  # fmt: skip
    if sds:  # read_noise would refuse the file
        shown = "; ".join(sds)
        print(f"error: {shown} across {len(pooled)} measurement(s): beyond {MAX_NOISE_SD:.0%}, more than a steady "
              "server's noise (a slowed or broken run pooled?); calibrate from runs that measured normally (no noise "
              "file written)", file=sys.stderr)  # fmt: skip
        return EXIT_USAGE
    if outliers:
        alternate = _size(other, design, args.stored_runs, per_row=per_row)
        for line in _outlier_lines(outliers, records, labels, made, alternate, kept=bool(args.keep_outliers)):
            print(line)
    name = args.profile or (records[0].profile if records else "profile")
    out = Path(args.noise_out or Path(".specdec/noise") / f"{name}.json")
    out.parent.mkdir(parents=True, exist_ok=True)
    # The category rows' sds go in too: without them a compare against 1 stored run sized a category row from its
    # own few repeats, with a run-to-run sd of its own within-run spread (11-16% where calibrate printed 8.4%).
    sigma = {**noise, **{n.key: n.within for n in by_category.values()}}
    run_to_run = {**noise.run_to_run, **{n.key: n.run_to_run for n in by_category.values()}}
    out.write_text(json.dumps({"profile": name, "runs": noise.runs, "sigma_rel": sigma,
                               "run_to_run_rel": run_to_run}, indent=1) + "\n")  # fmt: skip
    counted = f"{len(pooled)} measurement(s)"
    shared = sum(n for i, n in tests.items() if records[i] in pooled)
    if shared > len(pooled):
        counted += f" ({shared} tests: the tests of a profile in one run share its measurement)"
    print(
        f"# noise from {counted} -> {out} (--specdec-compare reads it until 4 stored runs of the profile measure "
        "their own)"
    )
    for key, sd in noise.items():
        run = noise.run_to_run.get(key)
        print(f"#   {key}: sd {sd * 100:.2f}% within a run" + (f", {run * 100:.2f}% run to run" if run is not None
                                                                else ""))  # fmt: skip
    if by_category:
        within = [n.within for n in by_category.values()]
        between = [n.run_to_run for n in by_category.values()]
        print(f"#   {len(by_category)} category rows (FIELD[CATEGORY], in the file too): sd {_span(within)} within a "
              f"run, {_span(between)} run to run")  # fmt: skip
    raw_sd = f"{assumed_instance_sd('output_tok_s', gpu=sizing.gpu):.0%} raw" + (" on a GPU host" if sizing.gpu else "")
    print(
        f"# a compare takes each run-to-run sd where it is larger than its assumed one ({raw_sd} or the row's "
        f"within-run sd, {sequential.ASSUMED_RATIO_INSTANCE_SD:.0%} ratio): a few server starts size it poorly"
    )
    if len(pooled) < _FIRM_RUNS:
        print(f"# only {len(pooled)} server start(s): the run-to-run sds above are rough (a compare takes one only "
              f"where larger than its assumed {raw_sd}); {_FIRM_RUNS} or more size them better")  # fmt: skip
    trend = _trend_line(records, found_sds.get("output_tok_s"), given=bool(args.from_runs))
    if trend:
        print(trend)
    left = {row.field for row in short}
    decided = [row for row in judged if row.field not in left]
    rate = _night_rate(decided, pasted)
    # Each decided row passes its share of the drawn nights at its own figure, so the block's rows pass together at
    # least PASS_PROBABILITY of them (Bonferroni); --per-row asks each row's 90% alone, not the night's.
    refused = bool(judged) and (not decided or (not per_row and rate < PASS_PROBABILITY))
    if refused:
        print(f"# figures from {len(pooled)} measurement(s), for reading: no ini block is proposed (below)")
    else:
        print(f"# proposed from {len(pooled)} measurement(s); paste into pytest's ini (or a profile's tolerances:)")
    print(_assumes_line(sizing, len(judged), per_row=per_row))
    lines: list[str] = []
    for fname, found in found_sds.items():
        mine = [row for row in judged if row.field == fname]
        top = next((r for r in mine if r.category is None and r.noise.row == found.row), None)
        if fname not in proposal:
            print(f"#   {found.key}: not proposed: no spread (identical values: the compare judges it equal-or-not, "
                  f"and its tolerance, the default {DEFAULT_TOLERANCES[fname]}, is the drop that fails, which noise "
                  "does not size)")  # fmt: skip
            continue
        tol = proposal[fname]
        shown = top.shown(tol) if top is not None and tol is not None else (
            _percent(tol.rel) if tol is not None else f"none below {TOLERANCE_CAP:.1%}")  # fmt: skip
        if tol is not None and found.within > 0 and tol.rel == 0.01:
            shown += " (the 1% floor)"
        spread = f"sd {found.within * 100:.2f}% " + (
            f"within a run, {found.run_to_run * 100:.2f}% run to run"
            if found.key in noise
            else "of all values (one repeat per run)"
        )
        if found.within <= 0:
            print(f"#   {found.key}: {shown}, the floor: no spread (identical values decide exactly)")
        else:
            print(f"#   {found.key}: {shown} for {spread}")
            if top is not None and tol is not None:
                print(_caught_line(top, tol))
                if (wide := _wide_line(top, tol)) is not None:
                    print(wide)
        for row in mine:
            if row.category is None and row.noise.row == fname and row.shared and tol is not None and fname in pasted:
                lines.append(_raw_line(row, vs or "", tol.rel))
        categories = [row for row in mine if row.category is not None]
        if categories:
            # The compare judges a field's k category rows at alpha / k each (compare._category_rows).
            parts = []
            for row in categories:
                need = row.least()
                parts.append(f"{row.category} {row.shown(row.tolerance(need)) if need is not None else 'none'}")
            wider = [c for f, c in pasted.categories if f == fname]
            where = (f"each its own ({fname} holds its raw row's figure)" if any(f == fname for f, _ in pasted.ratios)
                     else f"where wider than {fname}'s")  # fmt: skip
            print(f"#     {fname} per category, each at alpha / {len(categories)}: {', '.join(parts)}"
                  + (f"; pasted below {where}: {', '.join(wider)}" if wider else ""))  # fmt: skip
    if no_verdict:
        print(f"#   no verdict per category, nothing to size: {'; '.join(no_verdict)}")
    if judged:
        print("\n".join(_table_lines(judged, sizing)))
    if vs:
        print(f"# {', '.join(f for f in PAIRED_FIELDS if f in proposal)}: from the per-pair ratios to {vs!r} (the "
              "ratio rows, e.g. output_tok_s / " f"{vs}; their raw spread includes the runner's load); the compare "
              "judges the raw rows at the field's tolerance (below)")  # fmt: skip
    if refused:
        for line in _refusal_lines(short or judged, judged, sizing, vs, out, rate if decided else None):
            print(line)
        causes = _causes(short or judged)
        them = "; ".join(f"{row.name} needs {_need_text(row)}" + (f" ({_blunt_text(row)})" if row.blunt else "")
                         for row in causes)  # fmt: skip
        print(f"error: no tolerances proposed: {them} (each row sized to end passed on {_chance(sizing.probability)} "
              "of unchanged nights); the lines above say what would "
              f"{'size' if all(row.blunt is not None for row in causes) else 'decide'} "
              f"{'it' if len(causes) == 1 else 'them'}; the noise file is written", file=sys.stderr)  # fmt: skip
        return EXIT_NO_PROPOSAL
    if short:
        for line in _left_out_lines(short, judged, sizing, vs):
            print(line)
    print(_night_line(decided, pasted, per_row=per_row, left_out=bool(short)))
    print("specdec_tolerances =")
    for name, tol in pasted.items():
        print(f"    {name}:{tol}")
    for (fname, category), tol in pasted.categories.items():  # one a line: a category may hold spaces
        print(f"    {fname}[{category}]:{tol}")
    for (fname, arm), tol in pasted.ratios.items():
        print(f"    {fname}/{arm}:{tol}")
    if lines:
        print("\n".join(lines))
    return EXIT_FINDINGS if short or (outliers and not args.keep_outliers) else EXIT_OK


@dataclasses.dataclass(frozen=True, slots=True)
class _Sized:
    """A proposal and what it is made of, for one set of runs (:func:`_size`): each field's noise (``found``,
    ``noise.proposal_sds``), the noise file's sds (``noise``), the paired arm (``vs``), the category rows' noise and
    why some get no verdict, the gate sizing with each row's pass chance, the rows judged, the proposal per field,
    the ini block it pastes (:func:`_proposal`, less every field with a row in ``short``) and the judged rows the
    proposal leaves undecided (:func:`_short_rows`)."""

    found: dict[str, FieldNoise]
    noise: CalibratedNoise
    vs: str | None
    by_category: dict[tuple[str, str], FieldNoise]
    no_verdict: list[str]
    sizing: GateSizing
    judged: list[_Row]
    proposal: dict[str, Tolerance | None]
    pasted: Tolerances
    short: list[_Row]


def _size(records: Sequence[ResultRecord], design: sequential.Design, stored_runs: int, *,
          per_row: bool) -> _Sized | None:  # fmt: skip
    """The proposal from ``records`` (each one server start), sized at ``design`` against ``stored_runs`` stored
    runs, each row at its share of the night (:func:`_row_probability`); None where no field has 2 values above 0."""
    found = proposal_sds(records)
    if not found:
        return None
    noise = calibrate_noise(records)
    vs = paired_arm(records)
    by_category, no_verdict = _category_noise(records, vs)
    sizing = GateSizing(design, stored_runs, gpu=measured_on_gpu(*records))
    judged = _judged_rows(found, noise, by_category, vs, sizing, _absolute_levels(records, found, by_category))
    sizing = dataclasses.replace(sizing, probability=_row_probability(len(judged), per_row=per_row))
    judged = [dataclasses.replace(row, sizing=sizing) for row in judged]
    proposal, full = _proposal(found, judged)
    blunt = {row.name: row for row in _blunt_rows(judged, full)}
    judged = [blunt.get(row.name, row) for row in judged]
    short = _short_rows(judged, full)
    left = {row.field for row in short}
    pasted = Tolerances({f: t for f, t in full.items() if f not in left},
                        {key: t for key, t in full.categories.items() if key[0] not in left},
                        {key: t for key, t in full.ratios.items() if key[0] not in left})  # fmt: skip
    return _Sized(found, noise, vs, by_category, no_verdict, sizing, judged, proposal, pasted, short)


def _short_rows(rows: Sequence[_Row], full: Tolerances) -> list[_Row]:
    """The judged ``rows`` the proposal ``full`` (every field's figure) leaves below their own figure: a row no
    tolerance below the cap decides (``_Row.least`` None: its field gets no figure, or a category row takes its
    field's; a paired field's raw row, whose field is pasted at its ratio row's figure), and the other rows of a field
    with no figure (they take its default).

    A field with any such row is left out of the pasted block (:func:`_size`), all its rows with it: whatever were
    pasted for the field, unchanged nights would end that row undecided all the same (a night passes only when every
    row does), and a wider figure would only widen what the field's other rows let through (a fresh-user trial
    pasted ``output_tok_s:67.2%`` under a night line of 0%: a 22% slowdown then read ok where the defaults failed
    it). The fields every row of which the block decides
    are still pasted: an unchanged night passes their rows as sized, and the rows left out keep the tolerance the
    user's ini or profile gives them, as before calibrate."""
    return [row for row in rows if not row.covered(full) or row.blunt is not None]


def _blunt_rows(rows: Sequence[_Row], full: Tolerances) -> list[_Row]:
    """The judged ``rows`` ``full`` decides (:meth:`_Row.covered`) at a figure that does not fail a change of
    :data:`BLUNT_FACTOR` on :data:`_CAUGHT` of the nights at the budget (:meth:`_Row.caught`: a tok/s row that lets a
    50% loss through, a TPOT row a doubling), each with ``blunt`` set: (the relative figure, the change it catches).
    Such a proposal is no gate, and its field is left out of the block as one no figure decides (:func:`_short_rows`):
    what would size it is more server starts, more repeats, a paired arm or a quieter runner, not a paste. A paired
    field's raw row is not held to it: the field's ratio row, held to it, fails the change (the raw row's figure is
    the runner's load spread, ``output_tok_s:60%`` beside ``output_tok_s/baseline:15%`` on one H100).
    """
    found = []
    for row in rows:
        if (row.category is None and row.shared and row.noise.row == row.field) or not row.covered(full):
            continue
        tol = row.given(full)
        rel = row.relative(tol) if tol is not None else math.inf
        factor = row.caught(rel)
        if factor is None or (factor < 1.0 / BLUNT_FACTOR if row.higher else factor > BLUNT_FACTOR):
            found.append(dataclasses.replace(row, blunt=(rel, factor)))
    return found


def night_row_probability(rows: int) -> float:
    """The chance with which each of a night's ``rows`` statistically judged rows must end passed for the night to
    pass them all with ``noise.PASS_PROBABILITY`` (0.9): ``1 - 0.1 / rows`` (Bonferroni: the night fails to pass
    only where a row does, at most ``rows x 0.1 / rows`` of the time).

    Example: 6 rows (tok/s and TPOT top rows, 4 TPOT categories) -> 0.98333 each (0.9 each passes about 0.9^6 =
    53 % of unchanged nights where the rows move independently; a fresh-user trial passed 1 of 6).
    """
    return 1.0 - (1.0 - PASS_PROBABILITY) / max(rows, 1)


def _row_probability(rows: int, *, per_row: bool) -> float:
    """Each row's pass chance: the night's share (:func:`night_row_probability`), or 90 % alone (``--per-row``)."""
    return PASS_PROBABILITY if per_row else night_row_probability(rows)


#: The chance with which a night fails a change, for the smallest change calibrate says a tolerance catches
#: (:meth:`_Row.caught`): the power a change-detection budget is usually sized for (95%, as 1 - beta in sample-size
#: tables), above the 90% an unchanged night passes at.
_CAUGHT = 0.95

#: The change a pasted row must fail on :data:`_CAUGHT` of the nights at its figure to be proposed, as a factor:
#: half the tok/s (a 50% loss, x0.5) for a row where higher is better, twice the TPOT or TTFT (x2) for one where lower
#: is. The same size on the log scale both ways, and a change a user sees with no gate at all: a row that cannot fail it
#: passes a night that lost most of what speculative decoding buys (a 2x speedup is a good one), so pasting it would
#: gate nothing (a fresh-user trial's 2 runs x 2 repeats proposed ``output_tok_s:92.8%``, catching only losses >=
#: 94.7%). A paired field's raw row is not held to it: its ratio row gates the field (:func:`_blunt_rows`).
BLUNT_FACTOR = 2.0

#: The fewest unchanged nights simulated per row and stored runs (:meth:`_Row.needs`); more where a row's chance
#: leaves fewer than 2 nights beyond it (``2 / (1 - p)``: 40 rows and up). Each costs one compare's history and
#: verdict, 0.1 ms against 1 stored run to 1 ms against 10 (their ANOVA and quantiles).
_NIGHTS = 400


@dataclasses.dataclass(frozen=True, slots=True)
class _Row:
    """One row an unchanged night's compare judges statistically (:func:`_judged_rows`): its name as the compare
    prints it, its noise, its direction, its field and category (None: a top row), how many category rows of its
    field share the field's alpha (``compare._category_rows``: ``alpha / k`` each; 1 for a top row), whether it
    shares the field's alpha with the field's other row (a paired field's raw and ratio rows: half each), and the
    gate it is sized for (``sizing.probability``: its chance of ending passed). ``level``: for a field whose default
    tolerance is absolute (accept_rate 0.02), the runs' median value, at which its relative figure is pasted as an
    absolute one (:meth:`tolerance`; the compare judges an absolute tolerance on the runs' difference, which the
    relative draws approximate for a spread of a few %); None for a relative field. Its simulated nights are kept
    per stored runs (``_drawn``). ``blunt``: set where the figure pasted for the row would not fail a change of
    :data:`BLUNT_FACTOR` (:func:`_blunt_rows`)."""

    name: str
    noise: FieldNoise
    higher: bool
    field: str
    category: str | None
    k: int
    shared: bool
    sizing: GateSizing
    level: float | None = None
    #: Where the row is left out as too blunt (:func:`_blunt_rows`): the relative tolerance it would be pasted at and
    #: the least change a night fails there on :data:`_CAUGHT` of the nights (``caught``; None: no change).
    blunt: tuple[float, float | None] | None = None
    _drawn: dict[int, np.ndarray] = dataclasses.field(default_factory=dict, compare=False, repr=False)

    @property
    def design(self) -> sequential.Design:
        """The design the compare judges the row at: the field's alpha, halved where shared, over k categories."""
        parts = self.k * (2 if self.shared else 1)
        return dataclasses.replace(self.sizing.design, alpha=self.sizing.design.alpha / parts)

    def needs(self, stored_runs: int) -> np.ndarray:
        """The least tolerance at which each of :data:`_NIGHTS` (or more) simulated unchanged nights passes the row,
        by the compare's own verdict (``sequential.decide_shift`` at the budget's last look, on the history the
        compare builds: ``compare._Judging.pooled``), against ``stored_runs`` stored runs of the profile's repeats,
        today measured to ``max_repeats``; each run one server instance, its log level off by the row's run-to-run
        sd, its repeats by its within-run sd (the calibrated ones). Drawn, not one exact case with the sds taken as
        known: the sds' estimates spread from night to night (a few stored runs' run effect, its F-test at 25%, the t
        quantile), and that spread sets the tail a night's many rows reach: sized on the exact case, rows at 98.3%
        passed 85-95% of these nights against 10 stored runs, and 6 of them together 52%. Seeded by the row's name
        and ``stored_runs``: the same noise proposes the same figures.

        :returns: per night the relative tolerance at which the interval's worse end is inside it (inf: none).
        """
        return self._draws(stored_runs)[0]

    def _draws(self, stored_runs: int) -> np.ndarray:
        """The nights :meth:`needs` draws, shape (3, nights): per night the tolerance it needs, the estimate
        (today / baseline) and the interval's better end (its high end where higher is better), NaN without one."""
        if stored_runs in self._drawn:
            return self._drawn[stored_runs]
        nights = max(_NIGHTS, math.ceil(2 / (1 - self.sizing.probability)))
        rng = np.random.default_rng([stored_runs, nights, zlib.crc32(self.name.encode())])
        w, r = math.log1p(self.noise.within), math.log1p(self.noise.run_to_run)
        n_base, n_today = max(self.design.start, 2), max(self.design.max_repeats, 2)
        out = np.full((3, nights), math.nan)
        for j in range(nights):
            runs = [list(100.0 * np.exp(rng.normal(0.0, r) + rng.normal(0.0, w, n_base))) for _ in range(stored_runs)]
            today = list(100.0 * np.exp(rng.normal(0.0, r) + rng.normal(0.0, w, n_today)))
            if stored_runs == 1:  # the noise file's sds around the baseline, taken as known
                assumed = run_to_run_sd(self.noise.row, self.noise.within, self.noise.run_to_run, gpu=self.sizing.gpu)
                history = calibrated_history(runs[0], self.noise.within, assumed)
            else:  # the stored runs pooled, with the run-to-run sd at least their own within-run sd
                own = math.expm1(stats.pooled_sd(*runs, log=True))
                assumed = run_to_run_sd(self.noise.row, own, self.noise.run_to_run, gpu=self.sizing.gpu)
                history = sequential.History.from_runs(runs, assumed)
            decision = sequential.decide_shift(runs[0], today, 0.0, self.design, higher_is_better=self.higher,
                                               history=history)  # fmt: skip
            if decision.low is None or decision.high is None:
                out[0, j] = math.inf
            else:
                out[0, j] = 1.0 - decision.low if self.higher else decision.high - 1.0
                out[1:, j] = decision.estimate, decision.high if self.higher else decision.low
        self._drawn[stored_runs] = out
        return out

    def caught(self, tol: float) -> float | None:
        """The least change the compare fails (REGRESSED) at relative tolerance ``tol`` on :data:`_CAUGHT` of the
        nights at the budget against the sizing's stored runs: a factor the worse way (x0.88 of tok/s, x1.12 of
        TPOT), None where no change is. From the unchanged nights :meth:`needs` draws, each moved by the change:
        today's values times ``c`` move the estimate and the interval by ``c`` and leave its width (the logs' sds are
        unchanged), and the compare fails a row whose interval's better end is worse than no change and whose
        estimate is beyond the tolerance (``sequential.decide_shift``: ``worse``). At the budget's last look: a night
        failed at an earlier one fails too, so the chance is at least this.

        Example: tok/s nights whose estimates spread 1% with intervals +-3% at a 5% tolerance: a night fails from
        about x0.95 of its estimate, and 95% of nights fail a change of x0.935 (x0.95 / 1.0165, the estimates' 95th
        percentile).
        """
        _, estimate, better = self._draws(self.sizing.stored_runs)
        with np.errstate(divide="ignore", invalid="ignore"):
            if self.higher:  # fails where c < 1 / better and c < (1 - tol) / estimate
                needed = -np.log(np.minimum(1.0 / better, (1.0 - tol) / estimate))
            else:  # fails where c > 1 / better and c > (1 + tol) / estimate
                needed = np.log(np.maximum(1.0 / better, (1.0 + tol) / estimate))
        found = np.sort(np.where(np.isnan(needed), math.inf, needed))
        rank = min(math.ceil(_CAUGHT * (found.size + 1)), found.size)
        shift = float(found[rank - 1])
        if not math.isfinite(shift):
            return None
        return math.exp(-shift) if self.higher else math.exp(shift)

    def least(self, stored_runs: int | None = None) -> float | None:
        """The least tolerance (rounded up to 0.1%, at least 1%) at which the row passes an unchanged night with
        ``sizing.probability`` against ``stored_runs`` (default: the sizing's) stored runs: the order statistic of
        :meth:`needs` whose expected coverage is that chance (rank ``ceil(p (n + 1))``); None where it is above
        :data:`TOLERANCE_CAP`."""
        need = self.figure(stored_runs)
        if not math.isfinite(need) or need > TOLERANCE_CAP:
            return None
        return max(math.ceil(round(need * 1000, 6)) / 1000, 0.01)

    def figure(self, stored_runs: int | None = None) -> float:
        """The least relative tolerance, unrounded and uncapped, at which the row passes an unchanged night with
        ``sizing.probability`` against ``stored_runs`` (default: the sizing's) stored runs (:meth:`least`'s order
        statistic); inf where the nights at that rank have no interval."""
        found = np.sort(self.needs(stored_runs or self.sizing.stored_runs))
        rank = min(math.ceil(self.sizing.probability * (found.size + 1)), found.size)
        return float(found[rank - 1])

    def tolerance(self, need: float) -> Tolerance:
        """The tolerance a relative figure ``need`` is pasted as: relative, or for an absolute field (``level``)
        absolute, its share of the level rounded up to 0.001 (``accept_rate:0.012``), as its default is written."""
        if self.level is None:
            return Tolerance(rel=need)
        return Tolerance(abs=math.ceil(round(need * self.level * 1000, 6)) / 1000)

    def relative(self, tol: Tolerance) -> float:
        """``tol`` as a share of the row's level (an absolute part over ``level``; a relative field's ``rel``)."""
        return tol.rel + (tol.abs / self.level if self.level else 0.0)

    def shown(self, tol: Tolerance) -> str:
        """``6.3%``, or for an absolute field ``0.012 (2.2% of 0.546)``: its share of the runs' median."""
        if self.level is None:
            return _percent(tol.rel)
        return f"{tol} ({self.relative(tol) * 100:.2g}% of {self.level:.3g})"

    def given(self, pasted: Tolerances) -> Tolerance | None:
        """What ``pasted`` gives the row, as the compare reads it: a category row's own or its field's
        (``Tolerances.row``), a paired field's ratio row its own or the field's (``Tolerances.ratio``), else the
        field's."""
        if self.category is not None:
            return pasted.row(self.field, self.category)
        if self.noise.row.endswith(" / "):
            return pasted.ratio(self.field, self.name.partition(" / ")[2])
        return pasted.get(self.field)

    def passes(self, pasted: Tolerances) -> np.ndarray:
        """Per simulated night (against the sizing's stored runs), whether the row passes at what ``pasted`` gives
        it (:meth:`given`)."""
        tol = self.given(pasted)
        needs = self.needs(self.sizing.stored_runs)
        return needs <= self.relative(tol) + 1e-9 if tol is not None else np.zeros(needs.size, dtype=bool)

    def covered(self, pasted: Tolerances) -> bool:
        """Whether ``pasted`` gives the row at least its own figure (:meth:`given`)."""
        tol = self.given(pasted)
        need = self.least()
        return need is not None and tol is not None and self.relative(tol) >= need - 1e-9

    def first_nights_sd(self) -> float:
        """The run-to-run sd a compare against 1-3 stored runs takes for the row, with this noise file
        (``compare.run_to_run_sd``: what ``compare._Judging`` gives the row's history; 2-3 runs' own estimate where
        larger)."""
        return run_to_run_sd(self.noise.row, self.noise.within, self.noise.run_to_run, gpu=self.sizing.gpu)


def _judged_rows(
    found: Mapping[str, FieldNoise],
    noise: CalibratedNoise,
    by_category: Mapping[tuple[str, str], FieldNoise],
    vs: str | None,
    sizing: GateSizing,
    levels: Mapping[str, float] | None = None,
) -> list[_Row]:
    """The rows an unchanged night's compare judges statistically, each of which must end passed for the night to
    pass, field by field: its top row with a spread (its ratio row where paired), a paired field's raw row beside it
    (``compare._paired_rows``), its category rows :func:`_category_noise` sizes. Exact rows (no spread: accept
    length at temperature 0) and category rows given no verdict (``n/a``) are decided without statistics and do not
    count. ``levels``: noise key -> the runs' median, for the rows of absolutely tolerated fields
    (:func:`_absolute_levels`)."""
    specs = field_specs()
    levels = levels or {}
    per_field = Counter(f for f, _ in by_category)
    rows: list[_Row] = []
    for fname in [*found, *(f for f in per_field if f not in found)]:
        higher = specs[fname].higher_is_better if fname in specs else True
        n = found.get(fname)
        if n is not None and n.within > 0:
            rows.append(_Row(_row_name(n.row, vs), n, higher, fname, None, 1, n.row != fname, sizing,
                             levels.get(n.key)))  # fmt: skip
        if n is not None and n.row != fname:
            raw = dataclasses.replace(n, key=fname, row=fname, within=noise.get(fname, n.within),
                                      run_to_run=noise.run_to_run.get(fname, 0.0))  # fmt: skip
            if raw.within > 0:
                rows.append(_Row(fname, raw, higher, fname, None, 1, True, sizing))
        rows += [_Row(_row_name(c.row, vs), c, higher, fname, category, per_field[fname], False, sizing,
                      levels.get(c.key)) for (f, category), c in by_category.items() if f == fname]  # fmt: skip
    return rows


def _proposal(found: Mapping[str, FieldNoise], rows: Sequence[_Row]) -> tuple[dict[str, Tolerance | None],
                                                                                Tolerances]:  # fmt: skip
    """The proposal per field and the ini block it would paste (before :func:`_size` leaves out the fields
    :func:`_short_rows` names).

    Per field its top row's least tolerance (its ratio row's where paired; absolute for a field whose default is,
    :meth:`_Row.tolerance`; 1% for a field with no spread; None where none below the cap); an exact field with no
    spread (accept length and rate: the compare judges them equal-or-not, their tolerance is the drop that fails,
    not noise) is not proposed and keeps its default. ``FIELD[CATEGORY]`` is pasted where a category row needs more
    than its field's proposal, and only beside one: a field with no figure stays at its default, which its category
    rows would otherwise pass under a figure of their own. A paired field whose raw row needs more than its ratio
    row's figure is pasted at the raw row's, its ratio row at its own (``output_tok_s/baseline:3.4%``, which the
    compare gives the ratio row alone), and each of its category rows at its own: one tolerance for both would leave
    the raw row undecided or let the ratio row lose as much as the raw row spreads.
    """
    proposal: dict[str, Tolerance | None] = {}
    for fname, n in found.items():
        if n.within <= 0 and fname in EXACT_FIELDS:
            continue
        top = next((r for r in rows if r.field == fname and r.category is None and r.noise.row == n.row), None)
        need = top.least() if top is not None else 0.01
        if need is not None:
            proposal[fname] = top.tolerance(need) if top is not None else Tolerance(rel=need)
        else:
            proposal[fname] = None
    pasted = Tolerances({f: t for f, t in proposal.items() if t is not None})
    raised = set()
    for raw in rows:
        tol = proposal.get(raw.field)
        need = raw.least()
        if not (raw.category is None and raw.shared and raw.noise.row == raw.field) or tol is None or need is None:
            continue
        ratio = next(r for r in rows if r.field == raw.field and r.category is None and r.noise.row != raw.field)
        if need > raw.relative(tol) + 1e-9:
            # The field's tolerance holds the raw row alone beside a ratio row's own (``FIELD/VS``): each its figure.
            pasted[raw.field] = raw.tolerance(need)
            pasted.ratios[(raw.field, ratio.name.partition(" / ")[2])] = tol
            raised.add(raw.field)
    for row in rows:
        if row.category is None:
            continue
        need, tol = row.least(), proposal.get(row.field)
        # A raised field's category rows would take its raw row's figure: each gets its own.
        if need is not None and tol is not None and (need > row.relative(tol) + 1e-9 or row.field in raised):
            pasted.categories[(row.field, row.category)] = row.tolerance(need)
    return proposal, pasted


def _causes(rows: Sequence[_Row]) -> list[_Row]:
    """Of the ``rows`` a proposal leaves short (:func:`_short_rows`), those that leave their field out: no tolerance
    below the cap decides them, or the figure that does fails no change of :data:`BLUNT_FACTOR` (``blunt``; the others
    are short only because their field is left out); all ``rows`` where none is."""
    return [row for row in rows if row.least() is None or row.blunt is not None] or list(rows)


def _blunt_text(row: _Row) -> str:
    """``at 75.1% a night fails only a loss of >= 85% (x0.15) 95% of the time, not a 50% loss (x0.5)``: why a
    ``blunt`` row (:func:`_blunt_rows`) is not proposed; "" for another row."""
    if row.blunt is None:
        return ""
    rel, factor = row.blunt
    change, bound = ("loss", f"a {1 - 1 / BLUNT_FACTOR:.0%} loss (x{1 / BLUNT_FACTOR:g})") if row.higher else (
        "rise", f"a {BLUNT_FACTOR - 1:.0%} rise (x{BLUNT_FACTOR:g})")  # fmt: skip
    at = row.shown(row.tolerance(rel))
    if factor is None:
        return f"at {at} a night fails no {change} {_chance(_CAUGHT)} of the time, not even {bound}"
    size = (1.0 - factor) if row.higher else (factor - 1.0)
    return (f"at {at} a night fails only a {change} of >= {size * 100:.3g}% (x{factor:.3g}) {_chance(_CAUGHT)} of "
            f"the time, not {bound}")  # fmt: skip


def _need_text(row: _Row) -> str:
    """``36.6%``, ``~134% (above the cap, 99.9%)`` or ``none at any tolerance (no interval at the budget)``: the least
    tolerance at which the row passes its share of unchanged nights against the sizing's stored runs."""
    need = row.least()
    if need is not None:
        return row.shown(row.tolerance(need))
    figure = row.figure()
    if math.isfinite(figure):
        return f"~{figure * 100:.3g}% (above the cap, {TOLERANCE_CAP:.1%})"
    return "none at any tolerance (no interval at the budget)"


def _cause_line(row: _Row, rows: Sequence[_Row]) -> str:
    """One line per row that leaves its field out (:func:`_causes`): its figure against the sizing's stored runs, and
    for a paired field's raw row, its ratio row's (which ``FIELD/VS:X%`` would paste alone, knowing the raw row stays
    undecided)."""
    sizing = row.sizing
    runs = f"{sizing.stored_runs} stored run{'s' if sizing.stored_runs != 1 else ''}"
    line = (f"#   {row.name}: needs {_need_text(row)} to end passed on {_chance(sizing.probability)} of unchanged "
            f"nights against {runs}")  # fmt: skip
    if row.blunt is not None:
        line += f"; {_blunt_text(row)}: no gate, not proposed"
    ratio = next((r for r in rows if r.field == row.field and r.category is None and r.noise.row != row.field), None)
    if ratio is not None and row.noise.row == row.field and row.shared:
        other = ratio.least()
        shown = ratio.shown(ratio.tolerance(other)) if other is not None else _need_text(ratio)
        line += (f"; its ratio row {ratio.name} needs {shown} ({row.field}/{ratio.name.partition(' / ')[2]}:X% "
                 "sets the ratio row alone)")  # fmt: skip
    return line


def _advice_line(rows: Sequence[_Row], vs: str | None) -> str:
    """What would decide the rows that leave their fields out (``rows``: :func:`_causes`)."""
    them = "it" if len(rows) == 1 else "them"
    parts = ["more repeats a night (raise workload.max_repeats; workload.repeats for the baseline)"]
    if any(row.blunt is not None for row in rows):
        # The run-to-run sd sets a blunt row's figure, and 2-3 server starts size it poorly (too high as often as low).
        parts.insert(0, "more server starts to calibrate from (--runs K, or more --from runs: the run-to-run sd "
                        f"that sets the figure is rough below {_FIRM_RUNS})")  # fmt: skip
    if any(row.category is not None and row.least() is None for row in rows):
        parts.append("more requests a repeat in a category")
    if vs is None and any(row.field in PAIRED_FIELDS for row in rows):
        parts.append("a paired reference arm (min_speedup: {vs: PROFILE}: the compare then judges the field on the "
                     "per-pair ratio, which a runner's load moves less than the raw figure)")  # fmt: skip
    parts.append("a quieter runner (calibrate there)")
    parts.append("another number of stored runs where the table above gives a figure in reach")
    if all(row.blunt is not None for row in rows):
        parts.append("or the figure above written yourself, knowing it lets a change of that size through")
    else:
        parts.append("or a wider tolerance you write yourself, knowing it lets a change of that size through (no "
                     "tolerance below the cap decides a row marked above it)")  # fmt: skip
    verb = "size" if all(row.blunt is not None for row in rows) else "decide"
    return (f"# what would {verb} {them}: {', '.join(parts)}; the compare cannot leave a default row out (its "
            "defaults are always checked)")  # fmt: skip


def _left_out_lines(short: Sequence[_Row], rows: Sequence[_Row], sizing: GateSizing, vs: str | None) -> list[str]:
    """The lines above a partial block: the fields left out of it, the rows that leave each out and what each needs
    (:func:`_cause_line`), what the field keeps, and what would decide them (:func:`_advice_line`)."""
    causes = _causes(short)
    undecided = [row for row in causes if row.blunt is None]
    fields = list(dict.fromkeys(row.field for row in undecided))
    blunt = list(dict.fromkeys(row.field for row in causes if row.field not in fields))
    heads = []
    if fields:
        kept = ", ".join(f"{f} (default {_default(f)})" for f in fields)
        heads.append(
            f"# left out of the block below (exit status 1): {', '.join(fields)}: a row of "
            f"{'it' if len(fields) == 1 else 'each'} ends undecided on more than its share of unchanged nights at the "
            f"figure calibrate would paste for the field (each row sized to end passed on "
            f"{_chance(sizing.probability)}; the cap: {TOLERANCE_CAP:.1%}), and a wider figure would only widen what "
            f"the field's other rows let through; {'it keeps' if len(fields) == 1 else 'they keep'} the tolerance your "
            f"ini or profile gives (here: {kept}), and unchanged nights end "
            f"{'that row' if len(undecided) == 1 else 'those rows'} undecided more often (--specdec-undecided=warn, "
            "the default, passes such a night with a warning; =fail fails it)"
        )
    if blunt:
        heads.append(f"# left out of the block below (exit status 1): {', '.join(blunt)}: {_blunt_why(sizing)}; "
                     f"{'it keeps' if len(blunt) == 1 else 'they keep'} the tolerance your ini or profile gives (here: "
                     f"{', '.join(f'{f} (default {_default(f)})' for f in blunt)})")  # fmt: skip
    return [*heads, *(_cause_line(row, rows) for row in causes), _advice_line(causes, vs)]


def _blunt_why(sizing: GateSizing) -> str:
    """Why a field with a ``blunt`` row (:func:`_blunt_rows`) is left out: the bound, :data:`BLUNT_FACTOR`."""
    return (f"the figure at which its row ends passed on its share of unchanged nights (each row sized to end passed "
            f"on {_chance(sizing.probability)}) is no gate: a night at it fails neither a {1 - 1 / BLUNT_FACTOR:.0%} "
            f"loss (x{1 / BLUNT_FACTOR:g}) of a rate such as tok/s nor a {BLUNT_FACTOR - 1:.0%} rise "
            f"(x{BLUNT_FACTOR:g}) of a time such as TPOT on {_chance(_CAUGHT)} of nights, the least change a proposed "
            "row must fail")  # fmt: skip


def _refusal_lines(short: Sequence[_Row], rows: Sequence[_Row], sizing: GateSizing, vs: str | None, out: Path,
                   rate: float | None) -> list[str]:  # fmt: skip
    """The lines that replace the ini block where no field's rows are all decided (or, ``rate``, where the block's
    rows would pass an unchanged night less often than calibrate sizes it for): no block, the rows and their figures
    (:func:`_cause_line`), what would decide them (:func:`_advice_line`), and that the noise file was written."""
    causes = _causes(short)
    fields = list(dict.fromkeys(row.field for row in rows))
    undecided = (f"every field judged statistically has a row that ends undecided on more than its share of unchanged "
                 f"nights at the figure calibrate would paste for the field (each row sized to end passed on "
                 f"{_chance(sizing.probability)}; the cap: {TOLERANCE_CAP:.1%}): under such a block unchanged nights "
                 "would rarely pass, and a wider figure would only widen what the field's other rows let "
                 "through")  # fmt: skip
    if rate is not None:
        why = (f"at the tolerances calibrate finds an unchanged night passes {rate:.0%} of the time, below the "
               f"{PASS_PROBABILITY:.0%} it sizes for")  # fmt: skip
    elif all(row.blunt is not None for row in causes):
        why = f"for every field judged statistically, {_blunt_why(sizing)}"
    elif any(row.blunt is not None for row in causes):
        why = f"{undecided}; or else {_blunt_why(sizing)}"
    else:
        why = undecided
    return [
        f"# no ini block proposed (exit status {EXIT_NO_PROPOSAL}): {why}; every field keeps the tolerance your ini or "
        f"profile gives it (here: {', '.join(f'{f} (default {_default(f)})' for f in fields)})",
        *(_cause_line(row, rows) for row in causes),
        _advice_line(causes, vs),
        f"# the noise file {out} is written all the same: it is measurement, not a proposal (--specdec-compare reads "
        "it)",
    ]


def _default(fname: str) -> Tolerance | None:
    """The tolerance a compare gives ``fname`` where no layer names it (``merge_tolerances`` of no layer)."""
    return merge_tolerances().get(fname)


def _absolute_levels(
    records: Sequence[ResultRecord], found: Mapping[str, FieldNoise], by_category: Mapping[tuple[str, str], FieldNoise]
) -> dict[str, float]:
    """Noise key -> the median of the runs' values, for the rows of a field whose default tolerance is absolute
    (``DEFAULT_TOLERANCES``: accept_rate 0.02) and its category rows: the level at which :meth:`_Row.tolerance`
    turns a relative figure into an absolute one."""
    absolute = {f for f, t in DEFAULT_TOLERANCES.items() if t.abs and not t.rel}
    keys = [n.key for f, n in found.items() if f in absolute and n.key == f]
    keys += [n.key for (f, _), n in by_category.items() if f in absolute and n.key == n.row]
    levels = {}
    for key in keys:
        values = [v for r in records for v in r.values(key)]
        if values and statistics.median(values) > 0:
            levels[key] = statistics.median(values)
    return levels


def _trend_line(records: Sequence[ResultRecord], found: FieldNoise | None, *, given: bool) -> str | None:
    """One line when the runs' median tok/s moved one way from each run to the next (with :data:`_TREND_RUNS` or
    more runs) and from the first to the last by more than :data:`_TREND_SDS` within-run sds of one repeat: a load
    that changed during calibration, not instance noise, which the run-to-run sd then includes. With the load
    averages the runs' runner state recorded (``fingerprint["runner"]``, ``hoststate.runner_entry``: each run's
    mean of before and after), where the first and last have them. The figures are left as they are.

    :param given: the records are stored runs in the order given (``--from``), not calibrate's own in order of start.
    """
    medians = [statistics.median(v) for r in records if (v := r.values("output_tok_s")) and min(v) > 0]
    if len(records) < _TREND_RUNS or len(medians) != len(records) or found is None:
        return None
    steps = [b - a for a, b in zip(medians, medians[1:], strict=False)]
    if not (all(d > 0 for d in steps) or all(d < 0 for d in steps)):
        return None
    if abs(math.log(medians[-1] / medians[0])) <= _TREND_SDS * math.log1p(found.within):
        return None
    loads = [_loads(r)[2] for r in (records[0], records[-1])]
    load = f" (load average {loads[0]:.1f} -> {loads[1]:.1f})" if None not in loads else ""
    moved = "rose" if steps[0] > 0 else "fell"
    order = "in the order given" if given else "in order of start"
    return (
        f"# the runs' tok/s {moved} {medians[0]:.0f} -> {medians[-1]:.0f} {order}{load}: the run-to-run sd "
        "includes a load trend; calibrate on a quiet or steady runner"
    )


def _loads(record: ResultRecord) -> tuple[float | None, float | None, float | None]:
    """The 1-minute load averages a run's runner state recorded before and after it (``fingerprint["runner"]``,
    ``hoststate.runner_entry``), and their mean (of those recorded); None where not recorded."""
    state = record.fingerprint.get("runner") or {}
    before, after = (v if isinstance(v, int | float) else None for v in (state.get("load1_before"),
                                                                          state.get("load1_after")))  # fmt: skip
    seen = [v for v in (before, after) if v is not None]
    return before, after, sum(seen) / len(seen) if seen else None


def _outlier_lines(outliers: Sequence[OutlyingRun], records: Sequence[ResultRecord], labels: Sequence[str],
                   made: _Sized, alternate: _Sized | None, *, kept: bool) -> list[str]:  # fmt: skip
    """The lines that name each outlying run (``noise.outlying_runs`` on tok/s): its level against the others', the
    load averages recorded, whether it was left out (the default) or pooled (``kept``: --keep-outliers), and one
    line with the proposal the other way (``alternate``: with it pooled, or without it)."""
    lines = []
    for o in outliers:
        before, after, _ = _loads(records[o.index])
        load = ""
        if before is not None and after is not None:
            load = f"; load average {before:.1f} -> {after:.1f} over it"
            rest = [_loads(r)[2] for i, r in enumerate(records) if i != o.index]
            if all(v is not None for v in rest):
                load += f", {_span_plain([v for v in rest if v is not None])} over the others"
        fate = ("pooled, as --keep-outliers asks" if kept else "left out of the noise file and the proposal below "
                "(exit status 1; --keep-outliers pools it)")  # fmt: skip
        lines.append(f"# {labels[o.index]}: {o.level:.1f} tok/s where the other {len(records) - 1} runs read "
                     f"{o.low:.1f}-{o.high:.1f} (median {o.others:.1f}): x{o.level / o.others:.3g}, {abs(o.z):.1f} "
                     f"robust sds ({o.sd:.1%} each) {'below' if o.z < 0 else 'above'} them, beyond {OUTLIER_Z:g}: "
                     f"an outlier{load}: {fate}")  # fmt: skip
    them = "it" if len(outliers) == 1 else "them"
    shown = (", ".join(_pasted_items(alternate.pasted)) or "nothing pasted") if alternate else "no proposal"
    head = f"#   without {them}: {shown}" if kept else f"#   with {them} pooled (--keep-outliers): {shown}"
    tok = made.found.get("output_tok_s")
    other = alternate.found.get("output_tok_s") if alternate else None
    if tok is not None and other is not None:
        head += (f" ({other.key} sd {other.run_to_run:.1%} run to run, {tok.run_to_run:.1%} "
                 f"{'with' if kept else 'without'} {them})")  # fmt: skip
    return [*lines, head]


def _pasted_items(pasted: Tolerances) -> list[str]:
    """``output_tok_s:4.2%``, ``tpot_ms_p50[code]:9%``: the ini block's lines, unindented."""
    return [f"{name}:{tol}" for name, tol in pasted.items()] + [
        f"{fname}[{category}]:{tol}" for (fname, category), tol in pasted.categories.items()] + [
        f"{fname}/{arm}:{tol}" for (fname, arm), tol in pasted.ratios.items()]  # fmt: skip


def _caught_line(top: _Row, tol: Tolerance) -> str:
    """The line under a field's proposal that says what it cannot see: the least change a night at the budget
    fails 95% of the time at the tolerance (:meth:`_Row.caught`), smaller ones beyond it left undecided more often."""
    sizing, rel = top.sizing, top.relative(tol)
    unit = "pairs" if top.noise.row.endswith(" / ") else "repeats"
    night = (f"a night of {top.design.max_repeats} {unit} against {sizing.stored_runs} stored "
             f"run{'s' if sizing.stored_runs != 1 else ''}")  # fmt: skip
    change = "loss" if top.higher else "rise"
    factor = top.caught(rel)
    if factor is None:
        return f"#     at {top.shown(tol)} {night} fails no {change} {_chance(_CAUGHT)} of the time"
    size = (1.0 - factor) if top.higher else (factor - 1.0)
    return (f"#     at {top.shown(tol)} {night} fails a {change} of >= {size * 100:.3g}% (x{factor:.3g}) "
            f"{_chance(_CAUGHT)} of the time; smaller ones beyond {top.shown(tol)} may read undecided")  # fmt: skip


#: A proposed tolerance from which calibrate says what it lets through as ok: a lost NCCL tuning on a real EAGLE-3
#: deployment cost 29% of tok/s (88.8 -> 62.9), a loss a nightly exists to catch.
_WIDE = 0.25


def _wide_line(top: _Row, tol: Tolerance) -> str | None:
    """``#     note: at 32.4% a night up to 32.4% slower passes this row as ok ...``: under a field's proposal wide
    enough (:data:`_WIDE`) to pass the size of regression a nightly is for (an adversarial trial pasted a 32.4%
    output_tok_s and asked what a -30% night would read); None for a narrower one."""
    rel = top.relative(tol)
    if rel < _WIDE:
        return None
    worse = "worse" if top.noise.row.startswith("accept") else "slower"
    # The incident in this row's terms: 29% of tok/s is +41% time per token (a trial read "29%" beside an ITL row).
    incident = "29% of tok/s" if top.higher else "29% of tok/s, +41% time per token"
    return (f"#     note: at {top.shown(tol)} a night up to {rel:.0%} {worse} passes this row as ok (a lost NCCL "
            f"tuning cost {incident}): a quieter runner, more repeats (workload.max_repeats) or a paired reference "
            "arm's ratio row (min_speedup: {vs: PROFILE}) would let a narrower tolerance decide")  # fmt: skip


def _night_passes(rows: Sequence[_Row], pasted: Tolerances) -> np.ndarray:
    """Per simulated night, whether it passes every one of ``rows`` at ``pasted`` (each row drawn on its own: the
    compare's noise model has no term between rows; the i-th of each row's nights makes the i-th night)."""
    nights = min(len(row.needs(row.sizing.stored_runs)) for row in rows)
    passed = np.ones(nights, dtype=bool)
    for row in rows:
        passed &= row.passes(pasted)[:nights]
    return passed


def _night_rate(rows: Sequence[_Row], pasted: Tolerances) -> float:
    """How often an unchanged night passes every one of ``rows`` at ``pasted`` (:func:`_night_passes`); 1 without
    rows."""
    return float(_night_passes(rows, pasted).mean()) if rows else 1.0


def _night_line(rows: Sequence[_Row], pasted: Tolerances, *, per_row: bool, left_out: bool = False) -> str:
    """The line above the ini block that says how often an unchanged night passes all its judged ``rows`` at the
    ``pasted`` tolerances, on the nights simulated to size them (:meth:`_Row.needs`, :func:`_night_passes`);
    ``left_out``: the rows of fields left out of the block (:func:`_short_rows`) are not among ``rows``, which it
    says."""
    if not rows:
        return "# no row is judged statistically (every row exact: decided equal-or-not): an unchanged night passes"
    sizing = rows[0].sizing
    passed = _night_passes(rows, pasted)
    stored = f"{sizing.stored_runs} stored run{'s' if sizing.stored_runs != 1 else ''}"
    if len(rows) == 1:
        them, sized = "its 1 row", f"the row sized to pass {_chance(sizing.probability)}"
    else:
        them = f"all {len(rows)} rows"
        sized = (f"--per-row: each row sized to pass {_chance(sizing.probability)} alone" if per_row else
                 f"each row sized to pass {_chance(sizing.probability)}, 1 - 10% / {_sizing_rows(sizing)}")  # fmt: skip
        sized += "; rows of one field that move together pass together more often"
    if left_out:
        them = them.replace("its 1 row", "the 1 row").replace("all ", "the ") + " of the fields pasted"
    line = (f"# an unchanged night passes {them} {passed.mean():.0%} of the time at these tolerances (of {passed.size} "
            f"unchanged nights drawn from the noise above, each row judged as the compare judges it at the budget "
            f"against {stored}; {sized})")  # fmt: skip
    if left_out:
        line += "; the rows of the fields left out (above) are not counted"
    return line


def _sizing_rows(sizing: GateSizing) -> int:
    """The rows a night's share was split over (``sizing.probability`` = 1 - 10% / R): R."""
    return max(round((1.0 - PASS_PROBABILITY) / max(1.0 - sizing.probability, 1e-12)), 1)


def _chance(probability: float) -> str:
    """``98.3%``, ``90%``: a pass chance as the lines print it."""
    return f"{probability * 100:.3g}%"


def _span_plain(values: Sequence[float]) -> str:
    """``1.2`` or ``1.1-2.3``: the range of some load averages."""
    low, high = f"{min(values):.1f}", f"{max(values):.1f}"
    return low if low == high else f"{low}-{high}"


def _span(values: Sequence[float]) -> str:
    """``2.1%`` or ``2.1-9.8%``: the range of some relative sds."""
    low, high = f"{min(values) * 100:.2g}", f"{max(values) * 100:.2g}"
    return f"{high}%" if low == high else f"{low}-{high}%"


def _row_name(row: str, vs: str | None) -> str:
    """A compare row's name as its table prints it: ``output_tok_s``, ``tpot_ms_p50[code] / baseline``."""
    return f"{row}{vs}" if row.endswith(" / ") and vs else row


def _category_noise(
    records: Sequence[ResultRecord], vs: str | None
) -> tuple[dict[tuple[str, str], FieldNoise], list[str]]:
    """The noise of each category row the compare judges statistically (``compare._category_rows``), from the
    records' per-category values (``by_category``): per field of ``CATEGORY_FIELDS`` and category every record has,
    the within-run and run-to-run sds (``sequential.RunEffect``, as ``noise.calibrate_noise``), of the per-pair
    ratios (``tpot_ms_p50[code]/baseline``) where the field's top row is paired. Rows the compare gives no verdict
    (fewer than ``MIN_CATEGORY_REQUESTS`` requests a repeat, no paired values per category) are said instead; rows
    with no spread (exact) are left out. None at all with one category (the compare shows no category rows then).

    :returns: (field, category) -> FieldNoise (key ``field[cat]`` or ``field[cat]/vs``), and why the rows left out
        get no verdict (``structured: 3 requests < 8 per repeat``).
    """
    every = sorted({c for r in records for c in r.categories})
    if len(every) <= 1:
        return {}, []
    common = [c for c in every if all(c in r.categories for r in records)]
    found: dict[tuple[str, str], FieldNoise] = {}
    skipped: list[str] = []
    for category in common:
        counts = [v for r in records for v in r.values(f"num_ok[{category}]")]
        fewest = int(min(counts)) if counts else None
        if fewest is not None and fewest < MIN_CATEGORY_REQUESTS:
            skipped.append(f"{category}: {fewest} request{'s' if fewest != 1 else ''} < {MIN_CATEGORY_REQUESTS} per "
                           "repeat")  # fmt: skip
            continue
        unpaired = []
        for fname in CATEGORY_FIELDS:
            name = f"{fname}[{category}]"
            paired = vs is not None and fname in PAIRED_FIELDS
            per_run = [paired_ratios(r, name) if paired else r.values(name) for r in records]
            if paired and not all(per_run) and any(r.values(name) for r in records):
                unpaired.append(fname)  # the compare: n/a (top row paired; no paired values per category)
                continue
            anova = RunEffect.of(per_run)
            if anova is None:
                continue
            within = round(math.expm1(math.sqrt(anova.var)), 5)
            if within <= 0:
                continue  # identical values: decided equal-or-not, at any tolerance
            between = round(math.expm1(math.sqrt(anova.between)), 5) if anova.runs >= 2 else 0.0
            key, row = (f"{name}/{vs}", f"{name} / ") if paired else (name, name)
            repeats = int(statistics.median_low([len(v) for v in per_run if v]))
            found[(fname, category)] = FieldNoise(key, row, within, between, repeats)
        if unpaired:
            skipped.append(f"{category}: {', '.join(unpaired)} (no paired values per category)")
    return found, skipped


def _table_lines(rows: Sequence[_Row], sizing: GateSizing) -> list[str]:
    """The least tolerance of every row against 1, 3, 5 and 10 stored runs (and ``--stored-runs``), with the
    run-to-run sd the first nights take: what a team gets from the first night to a full history."""
    runs = sorted({*_TABLE_RUNS, sizing.stored_runs})
    head = (f"# the least tolerance by stored runs of the baseline's fingerprint (proposed: {sizing.stored_runs}; "
            f"each row passing {_chance(sizing.probability)} of unchanged nights, as proposed; none: not below "
            f"{TOLERANCE_CAP:.1%}): against 1-{sequential.ASSUMED_UP_TO_RUNS} a compare takes the "
            "last column's run-to-run sd as known (2-3 runs' own estimate where larger), from "
            f"{sequential.ASSUMED_UP_TO_RUNS + 1} it estimates it from the runs, whose few degrees of freedom can "
            "widen the interval (the run-to-run spread sets it, which a quieter runner narrows, not fewer stored "
            "runs); below a row's figure unchanged nights stay undecided more often (--specdec-undecided=warn, the "
            "default, passes them with a warning); a night is stored as one of these runs when it passed, or ended "
            "undecided with no row's estimate beyond its tolerance (a regressed night is not)")  # fmt: skip
    columns = [Column("row"), *(Column(f"{k} stored", "right") for k in runs), Column("run-to-run sd, 1-3", "right")]
    cells = []
    for row in rows:
        needs = [row.least(k) for k in runs]
        cells.append([row.name, *(str(row.tolerance(n)) if n is not None else "none" for n in needs),
                      f"{row.first_nights_sd() * 100:.2g}%"])  # fmt: skip
    return [head, *(f"#   {line}" for line in text_table(columns, cells))]


def _assumes_line(sizing: GateSizing, rows: int, *, per_row: bool) -> str:
    """The line under the heading that says what every proposal assumes (each row's pass chance for the night's
    ``rows`` judged rows, the gate's repeats, budget, stored runs) and what a wider or narrower tolerance does."""
    base = max(sizing.design.start, 2)
    budget = f"today measured to the budget of {sizing.design.max_repeats} repeats (workload.max_repeats"
    if sizing.design.max_server_s is not None:
        budget += f"; max_server_s {sizing.design.max_server_s:g} may end it sooner, which needs more"
    stored = (f"{sizing.stored_runs} stored run{'s' if sizing.stored_runs != 1 else ''} of the baseline's "
              f"fingerprint (--stored-runs; a compare pools up to {MAX_HISTORY_RUNS})")  # fmt: skip
    if per_row:
        why = "each row alone (--per-row)"
    elif rows <= 1:
        why = "the night's one row the compare judges statistically"
    else:
        why = (f"1 - {1 - PASS_PROBABILITY:.0%} / {rows} for the {rows} rows the compare judges statistically, so "
               f"that an unchanged night passes all of them {PASS_PROBABILITY:.0%} of the time")  # fmt: skip
    return (f"# each the least tolerance at which an unchanged run of the noise above ends its row passed, not "
            f"undecided, {_chance(sizing.probability)} of the time by the compare's own verdict (at least 1%): {why}; "
            "it assumes a baseline "
            f"of {base} repeats (workload.repeats), {budget}), {stored}; a wider tolerance decides sooner (fewer "
            "repeats), a narrower one leaves more unchanged nights undecided")  # fmt: skip


def _percent(rel: float) -> str:
    return f"{rel * 100:g}%"


def _raw_line(raw: _Row, vs: str, tol: float) -> str:
    """The comment under the ini block for a paired field's raw row: ``tol`` is its ratio row's figure (``field /
    vs``); what the raw row, judged with the raw spread, needs against the same stored runs (against others: the
    table), and what is pasted for it: the ratio's figure where that decides it too, else its own beside the ratio
    row's (:func:`_proposal`)."""
    fname, sizing = raw.field, raw.sizing
    need = raw.least()
    runs = f"{sizing.stored_runs} stored run{'s' if sizing.stored_runs != 1 else ''}"
    shown = f"~{_percent(need)}" if need is not None else f"no tolerance below {TOLERANCE_CAP:.1%}"
    head = (f"# {fname}: {_percent(tol)} is proposed for the ratio row ({fname} / {vs}); the raw row {fname} is "
            f"judged with the raw spread (sd {raw.noise.within * 100:.2f}% within a run, "
            f"{raw.noise.run_to_run * 100:.2f}% run to run): against {runs} it takes {shown}")  # fmt: skip
    if need is not None and tol >= need:
        return f"{head}: {_percent(tol)} decides it too"
    return (f"{head}: pasted as {fname}:{_percent(need or tol)} (the raw row alone), the ratio row keeping its own, "
            f"{fname}/{vs}:{_percent(tol)}; one tolerance for both would leave the raw row undecided or let the ratio "
            "row lose as much")  # fmt: skip


def _stored_records(
    refs: Sequence[str], profile: str | None, results_dir: Path
) -> tuple[list[tuple[str, ResultRecord]], dict[str, str]]:
    """(run id, record) of every test of ``profile`` in the runs ``refs`` name: each a run file, a name, a run id or
    unique prefix in ``results_dir``, or ``latest`` (``ResultStore.load``, as ``compare`` reads BASE and CURRENT);
    and run id -> the ref that named it.

    :raises CompareError: a run cannot be loaded; ``profile`` is in none of the runs; no ``profile`` given and the
        runs hold more than one (pooling profiles measures their difference, not noise); the runs measured
        different workloads (``fingerprint.workload_differences``: the prompt set, tokens, requests, concurrency ...).
    """
    store = ResultStore(results_dir)
    runs = [store.load(ref) for ref in refs]
    found = sorted({r.profile for run in runs for r in run.results})
    if profile is None and len(found) > 1:
        raise CompareError(f"--from: the runs hold {len(found)} profiles ({', '.join(found)}); pooling them measures "
                           f"their difference, not noise: name one, e.g. --profile {found[0]}")  # fmt: skip
    if profile is not None and profile not in found:
        raise CompareError(f"--profile={profile}: no results of it in the runs given (profiles there: "
                           f"{', '.join(found) or 'none'})")  # fmt: skip
    named = {run.run_id: ref for run, ref in zip(runs, refs, strict=True)}
    found_records = [(run.run_id, r) for run in runs for r in run.results if profile is None or r.profile == profile]
    if found_records:
        # Runs of another workload measure the workloads' difference, not noise (a trial's 32- and 64-token runs
        # were pooled into a 68% proposal, and its noise file was written for the gate to read).
        first_id, first = found_records[0]
        for run_id, record in found_records[1:]:
            differences = workload_differences(first, record)
            if differences:
                raise CompareError(f"--from: run {named.get(run_id, run_id)} measured another workload than run "
                                   f"{named.get(first_id, first_id)} ({'; '.join(differences)}); pooling them measures "
                                   "the workloads' difference, not noise: give runs of one workload")  # fmt: skip
    return found_records, named


def _run_label(run_id: str, ref: str | None) -> str:
    """``run night-4`` or ``run 20260104T0100Z (.specdec/results/x.json)``: a stored run as calibrate names it, with
    the file or name it was given by where that is not its run id."""
    return f"run {run_id}" + (f" ({ref})" if ref and ref != run_id else "")


def _left_out(record: ResultRecord) -> str:
    """Why a stored record is not pooled (``"interrupted"``, ``"failed"``), or ``""`` when it is: a failed or
    interrupted test's run may have measured a broken or slowed server (a trial pooled runs slowed on purpose). An
    undecided one is pooled: its measurement was normal, only its verdict needed more."""
    if record.interrupted:
        return "interrupted"
    return "failed" if record.outcome == "failed" else ""


def _calibration_run(profile: Profile, reference: Profile | None, log_dir: Path) -> ResultRecord:
    """One calibration run: a fresh server of ``profile`` measured ``repeats`` times, paired with ``reference`` (its
    ``min_speedup.vs``) when given, so the noise of the paired ratio is measured too.

    :raises ServerStartError, ServerError: a server failed.
    """
    with runner.running_server(profile, log_dir=log_dir) as server:
        n = profile.workload.repeats
        if reference is None:
            measured = runner.measure_repeats(server, n).measurements
            return ResultRecord.from_measurements(f"calibrate[{profile.name}]", measured, {})
        if pairing.pairing_mode(profile) == "interleaved":
            with runner.running_server(reference, log_dir=log_dir, log_name=f"{reference.name}.paired") as ref:
                arms = pairing.measure_interleaved(server, ref, n)
        else:
            arms = pairing.measure_bracketed(
                server,
                n,
                start_reference=lambda: runner.start_server(reference, log_dir=log_dir),
                restart_target=server.restart,
            )
        return ResultRecord.from_measurements(
            f"calibrate[{profile.name}]", arms.target_measurements(), {}, paired=arms.to_dict()
        )
