"""``python -m pytest_specdec calibrate``: rerun a profile K times (separate server starts), or read stored runs, and
propose baseline-compare tolerances from the spread; the measured noise is written for ``--specdec-compare``."""

from __future__ import annotations

import argparse
import dataclasses
import json
import math
import statistics
import sys
from collections import Counter
from collections.abc import Mapping, Sequence
from pathlib import Path

from pytest_specdec.cli.exits import EXIT_BAD_PROFILE, EXIT_FINDINGS, EXIT_OK, EXIT_USAGE
from pytest_specdec.core.errors import CompareError, ProfileError, ServerError, ServerStartError
from pytest_specdec.core.metric_table import PAIRED_FIELDS
from pytest_specdec.core.table import Column, text_table
from pytest_specdec.core.tolerances import CATEGORY_FIELDS, Tolerance, Tolerances, field_specs
from pytest_specdec.engines.rules import load_profiles
from pytest_specdec.judge import sequential
from pytest_specdec.judge.compare import MIN_CATEGORY_REQUESTS, design_of, run_to_run_sd
from pytest_specdec.judge.history import MAX_HISTORY_RUNS
from pytest_specdec.judge.noise import (
    MAX_NOISE_SD,
    TOLERANCE_CAP,
    FieldNoise,
    GateSizing,
    calibrate_noise,
    calibrate_proposal,
    gate_tolerance,
    measurements,
    paired_arm,
    proposal_sds,
)
from pytest_specdec.judge.pair_ratios import paired_ratios
from pytest_specdec.judge.sequential import RunEffect
from pytest_specdec.judge.verdict import design_for
from pytest_specdec.measure import pairing, runner
from pytest_specdec.measure.results import ResultRecord, ResultStore
from pytest_specdec.profiles.schema import Profile, Workload

__all__ = ["calibrate_command"]

#: Server starts from which a run-to-run sd is not called rough (on one H100, 4 starts read 3.3 %, the next 6 14.8 %).
_FIRM_RUNS = 6
#: The stored runs the table of tolerances shows (with --stored-runs): the first night, the last that takes the
#: run-to-run sd as known (``sequential.ASSUMED_UP_TO_RUNS``), a history between, a full one (``MAX_HISTORY_RUNS``).
_TABLE_RUNS = (1, 3, 5, 10)


def calibrate_command(args: argparse.Namespace) -> int:
    """``calibrate PROFILE_FILE --profile NAME [--runs K]`` or ``calibrate --from RUN ...``: prints each run's
    figures, writes the noise file (``noise.calibrate_noise``, and each category row's sds: :func:`_category_noise`)
    and prints an ini block of proposed tolerances (``noise.calibrate_proposal``: per field the least tolerance at
    which the compare passes an unchanged run of this noise 90 % of the time, ``noise.gate_tolerance``, against
    ``--stored-runs`` stored runs at the profile's budget; from per-pair ratios where the compare judges those),
    counting measurements, not tests (``noise.measurements``: the tests of a profile in one run file share one).
    Each category row the compare judges (``tpot_ms_p50[code]``) is sized the same way at its field's alpha / k and
    printed beside the field's, pasted as ``FIELD[CATEGORY]:X%`` where wider. A table gives every row's least
    tolerance against 1, 3, 5 and 10 stored runs and the run-to-run sd a compare against 1-3 takes
    (:func:`_table_lines`); for a paired field, a comment says what its raw row needs at the ratio row's tolerance
    (:func:`_raw_line`). Returns ``EXIT_FINDINGS`` when a server failed, ``EXIT_USAGE``/``EXIT_BAD_PROFILE`` on bad
    input, else ``EXIT_OK``."""
    if not 1 <= args.stored_runs <= MAX_HISTORY_RUNS:
        print(f"error: --stored-runs={args.stored_runs}: expected the stored runs of the baseline a compare will pool, "
              f"1 to {MAX_HISTORY_RUNS} (it pools at most {MAX_HISTORY_RUNS}), e.g. --stored-runs {MAX_HISTORY_RUNS}",
              file=sys.stderr)  # fmt: skip
        return EXIT_USAGE
    records: list[ResultRecord] = []
    tests = 0
    design: sequential.Design | None = None
    if args.from_runs:
        try:
            stored = _stored_records(args.from_runs, args.profile, Path(args.results_dir))
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
        records, tests = measurements(kept), len(kept)
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
            try:
                record = _calibration_run(profile, reference, Path(args.log_dir))
            except (ServerStartError, ServerError) as exc:
                print(f"error: run {i + 1}/{args.runs}: {exc}", file=sys.stderr)
                return EXIT_FINDINGS
            records.append(record)
            ratios = paired_ratios(record, "output_tok_s")
            paired = f", {sorted(ratios)[len(ratios) // 2]:.3f}x {vs} (paired)" if ratios else ""
            length = record.metrics.get("accept_length")
            shown = f"{length:.3f}" if isinstance(length, int | float) else "n/a"
            print(f"run {i + 1}/{args.runs}: {record.metrics.get('output_tok_s', 0):.1f} tok/s, "
                  f"accept length {shown}{paired}")  # fmt: skip
    design = design or sequential.Design(Workload().repeats, sequential.DEFAULT_MAX_REPEATS)
    sizing = GateSizing(design, args.stored_runs)
    proposal = calibrate_proposal(records, sizing)
    if not proposal:
        print("error: not enough values to propose tolerances: a metric needs 2 or more values above 0 across the "
              "runs", file=sys.stderr)  # fmt: skip
        return EXIT_USAGE
    noise = calibrate_noise(records)
    vs = paired_arm(records)
    by_category, no_verdict = _category_noise(records, vs)
    sds = [(f"{key}: sd {sd:.0%} {kind}") for kind, pairs in (
        ("within a run", [*noise.items(), *((n.key, n.within) for n in by_category.values())]),
        ("run to run", [*noise.run_to_run.items(), *((n.key, n.run_to_run) for n in by_category.values())]),
    ) for key, sd in pairs if sd > MAX_NOISE_SD]  # fmt: skip
    if sds:  # read_noise would refuse the file
        shown = "; ".join(sds)
        print(f"error: {shown} across {len(records)} measurement(s): beyond {MAX_NOISE_SD:.0%}, more than a steady "
              "server's noise (a slowed or broken run pooled?); calibrate from runs that measured normally (no noise "
              "file written)", file=sys.stderr)  # fmt: skip
        return EXIT_USAGE
    name = args.profile or (records[0].profile if records else "profile")
    out = Path(args.noise_out or Path(".specdec/noise") / f"{name}.json")
    out.parent.mkdir(parents=True, exist_ok=True)
    # The category rows' sds go in too: without them a compare against 1 stored run sized a category row from its
    # own few repeats, with a run-to-run sd of its own within-run spread (11-16% where calibrate printed 8.4%).
    sigma = {**noise, **{n.key: n.within for n in by_category.values()}}
    run_to_run = {**noise.run_to_run, **{n.key: n.run_to_run for n in by_category.values()}}
    out.write_text(json.dumps({"profile": name, "runs": noise.runs, "sigma_rel": sigma,
                               "run_to_run_rel": run_to_run}, indent=1) + "\n")  # fmt: skip
    counted = f"{len(records)} measurement(s)"
    if tests > len(records):
        counted += f" ({tests} tests: the tests of a profile in one run share its measurement)"
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
    print(
        "# a compare takes each run-to-run sd where it is larger than its assumed one (7% raw or the row's "
        "within-run sd, 2% ratio): a few server starts size it poorly"
    )
    if len(records) < _FIRM_RUNS:
        print(f"# only {len(records)} server start(s): the run-to-run sds above are rough (a compare takes one only "
              f"where larger than its assumed 7%); {_FIRM_RUNS} or more size them better")  # fmt: skip
    print(f"# proposed from {len(records)} measurement(s); paste into pytest's ini (or a profile's tolerances:)")
    print(_assumes_line(sizing, proposal_sds(records)))
    specs = field_specs()
    lines: list[str] = []
    table: list[_TableRow] = []
    pasted = Tolerances({f: t for f, t in proposal.items() if t is not None})
    for fname, found in proposal_sds(records).items():
        tol = proposal[fname]
        higher = specs[fname].higher_is_better if fname in specs else True
        is_paired = found.row != fname
        shown = _percent(tol.rel) if tol is not None else f"none below {TOLERANCE_CAP:.1%}"
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
            table.append(_TableRow(_row_name(found.row, vs), found, higher, sizing, is_paired))
        if is_paired and tol is not None:
            raw = dataclasses.replace(found, key=fname, row=fname, within=noise.get(fname, found.within),
                                      run_to_run=noise.run_to_run.get(fname, 0.0))  # fmt: skip
            lines.append(_raw_line(raw, vs or "", tol.rel, sizing, higher))
            table.append(_TableRow(fname, raw, higher, sizing, True))
        rows = {category: n for (f, category), n in by_category.items() if f == fname}
        if rows:
            # The compare judges a field's k category rows at alpha / k each (compare._category_rows).
            split = dataclasses.replace(sizing.design, alpha=sizing.design.alpha / len(rows))
            share = dataclasses.replace(sizing, design=split)
            parts = []
            for category, n in rows.items():
                row = _TableRow(_row_name(n.row, vs), n, higher, share, False)
                need = row.least(sizing.stored_runs)
                parts.append(f"{category} {_percent(need) if need is not None else 'none'}")
                table.append(row)
                if need is not None and (tol is None or need > tol.rel):
                    pasted.categories[(fname, category)] = Tolerance(rel=need)
            wider = [c for f, c in pasted.categories if f == fname]
            print(f"#     {fname} per category, each at alpha / {len(rows)}: {', '.join(parts)}"
                  + (f"; pasted below where wider than {fname}'s: {', '.join(wider)}" if wider else ""))  # fmt: skip
    if no_verdict:
        print(f"#   no verdict per category, nothing to size: {'; '.join(no_verdict)}")
    if table:
        print("\n".join(_table_lines(table, sizing)))
    if vs:
        print(f"# {', '.join(f for f in PAIRED_FIELDS if f in proposal)}: from the per-pair ratios to {vs!r} (the "
              "ratio rows, e.g. output_tok_s / " f"{vs}; their raw spread includes the runner's load); the compare "
              "judges the raw rows at the same tolerances too (below)")  # fmt: skip
    print("specdec_tolerances =")
    for name, tol in pasted.items():
        print(f"    {name}:{tol}")
    for (fname, category), tol in pasted.categories.items():  # one a line: a category may hold spaces
        print(f"    {fname}[{category}]:{tol}")
    if lines:
        print("\n".join(lines))
    return EXIT_OK


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


@dataclasses.dataclass(frozen=True, slots=True)
class _TableRow:
    """One compare row of :func:`_table_lines`: its name, its noise, its direction, and the gate it is judged at
    (``sizing``: a category row's at its field's alpha / k; ``shared``: a paired field's two rows, half each)."""

    name: str
    noise: FieldNoise
    higher: bool
    sizing: GateSizing
    shared: bool

    def least(self, stored_runs: int) -> float | None:
        """The least tolerance (at least 1%) at which this row passes an unchanged run (``noise.gate_tolerance``)
        against ``stored_runs`` stored runs; None where none below ``TOLERANCE_CAP`` does."""
        sizing = dataclasses.replace(self.sizing, stored_runs=stored_runs)
        need = gate_tolerance(self.noise, sizing, higher_is_better=self.higher, shared=self.shared)
        return max(need, 0.01) if need is not None else None

    def first_nights_sd(self) -> float:
        """The run-to-run sd a compare against 1-3 stored runs takes for the row, with this noise file
        (``compare.run_to_run_sd``: what ``compare._Judging`` gives the row's history; 2-3 runs' own estimate where
        larger)."""
        return run_to_run_sd(self.noise.row, self.noise.within, self.noise.run_to_run)


def _table_lines(rows: Sequence[_TableRow], sizing: GateSizing) -> list[str]:
    """The least tolerance of every row against 1, 3, 5 and 10 stored runs (and ``--stored-runs``), with the
    run-to-run sd the first nights take: what a team gets from the first night to a full history."""
    runs = sorted({*_TABLE_RUNS, sizing.stored_runs})
    head = (f"# the least tolerance by stored runs of the baseline's fingerprint (proposed: {sizing.stored_runs}; "
            f"none: not below {TOLERANCE_CAP:.1%}): against 1-{sequential.ASSUMED_UP_TO_RUNS} a compare takes the "
            "last column's run-to-run sd as known (2-3 runs' own estimate where larger), from "
            f"{sequential.ASSUMED_UP_TO_RUNS + 1} it estimates it from the runs, whose few degrees of freedom can "
            "widen the interval (the run-to-run spread sets it, which a quieter runner narrows, not fewer stored "
            "runs); below a row's figure unchanged nights stay undecided more often (--specdec-undecided=warn, the "
            "default, passes them with a warning)")  # fmt: skip
    columns = [Column("row"), *(Column(f"{k} stored", "right") for k in runs), Column("run-to-run sd, 1-3", "right")]
    cells = []
    for row in rows:
        needs = [row.least(k) for k in runs]
        cells.append([row.name, *(_percent(n) if n is not None else "none" for n in needs),
                      f"{row.first_nights_sd() * 100:.2g}%"])  # fmt: skip
    return [head, *(f"#   {line}" for line in text_table(columns, cells))]


def _assumes_line(sizing: GateSizing, found: Mapping[str, FieldNoise]) -> str:
    """The line under the heading that says what every proposal assumes (the gate's repeats, budget, stored runs)
    and what a wider or narrower tolerance does."""
    base = max(sizing.design.start, 2)
    budget = f"today measured to the budget of {sizing.design.max_repeats} repeats (workload.max_repeats"
    if sizing.design.max_server_s is not None:
        budget += f"; max_server_s {sizing.design.max_server_s:g} may end it sooner, which needs more"
    stored = (f"{sizing.stored_runs} stored run{'s' if sizing.stored_runs != 1 else ''} of the baseline's "
              f"fingerprint (--stored-runs; a compare pools up to {MAX_HISTORY_RUNS})")  # fmt: skip
    return (f"# each the least tolerance at which an unchanged run of the noise above ends passed, not undecided, "
            f"{sizing.probability:.0%} of the time by the compare's own verdict (at least 1%); it assumes a baseline "
            f"of {base} repeats (workload.repeats), {budget}), {stored}; a wider tolerance decides sooner (fewer "
            "repeats), a narrower one leaves more unchanged nights undecided")  # fmt: skip


def _percent(rel: float) -> str:
    return f"{rel * 100:g}%"


def _raw_line(raw: FieldNoise, vs: str, tol: float, sizing: GateSizing, higher: bool) -> str:
    """The comment under the ini block for a paired field's raw row: the proposal ``tol`` is its ratio row's
    (``field / vs``); what the raw row, judged at the same tolerance with the raw spread, needs against the same
    stored runs (against others: the table)."""
    fname = raw.row
    need = gate_tolerance(raw, sizing, higher_is_better=higher, shared=True)
    runs = f"{sizing.stored_runs} stored run{'s' if sizing.stored_runs != 1 else ''}"
    shown = f"~{_percent(need)}" if need is not None else f"no tolerance below {TOLERANCE_CAP:.1%}"
    head = (f"# {fname}: {_percent(tol)} is proposed for the ratio row ({fname} / {vs}); the raw row {fname} is "
            f"judged at it too, with the raw spread (sd {raw.within * 100:.2f}% within a run, "
            f"{raw.run_to_run * 100:.2f}% run to run): against {runs} it takes {shown}")  # fmt: skip
    warn = "--specdec-undecided=warn, the default, passes such a night with a warning; =fail fails it"
    if need is not None and tol >= need:
        return f"{head}: {_percent(tol)} decides it too"
    wider = (f"{fname}:{_percent(need)} decides it, and bounds the ratio row that loosely too" if need is not None
             else f"no tolerance below {TOLERANCE_CAP:.1%} decides it")  # fmt: skip
    return (
        f"{head}: at {_percent(tol)} the raw row leaves more than 1 unchanged night in 10 undecided ({warn}); {wider}"
    )


def _stored_records(refs: Sequence[str], profile: str | None, results_dir: Path) -> list[tuple[str, ResultRecord]]:
    """(run id, record) of every test of ``profile`` in the runs ``refs`` name: each a run file, a name, a run id or
    unique prefix in ``results_dir``, or ``latest`` (``ResultStore.load``, as ``compare`` reads BASE and CURRENT).

    :raises CompareError: a run cannot be loaded; ``profile`` is in none of the runs; no ``profile`` given and the
        runs hold more than one (pooling profiles measures their difference, not noise).
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
    return [(run.run_id, r) for run in runs for r in run.results if profile is None or r.profile == profile]


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
