"""``python -m pytest_specdec calibrate``: rerun a profile K times (separate server starts), or read stored runs, and
propose baseline-compare tolerances from the spread; the measured noise is written for ``--specdec-compare``."""

from __future__ import annotations

import argparse
import dataclasses
import json
import sys
from collections import Counter
from collections.abc import Mapping, Sequence
from pathlib import Path

from pytest_specdec.cli.exits import EXIT_BAD_PROFILE, EXIT_FINDINGS, EXIT_OK, EXIT_USAGE
from pytest_specdec.core.errors import CompareError, ProfileError, ServerError, ServerStartError
from pytest_specdec.core.metric_table import PAIRED_FIELDS
from pytest_specdec.core.tolerances import field_specs, format_tolerances
from pytest_specdec.engines.rules import load_profiles
from pytest_specdec.judge import sequential
from pytest_specdec.judge.compare import design_of, run_to_run_sd
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
from pytest_specdec.judge.verdict import design_for
from pytest_specdec.measure import pairing, runner
from pytest_specdec.measure.results import ResultRecord, ResultStore
from pytest_specdec.profiles.schema import Profile, Workload

__all__ = ["calibrate_command"]

#: Server starts from which a run-to-run sd is not called rough (on one H100, 4 starts read 3.3 %, the next 6 14.8 %).
_FIRM_RUNS = 6


def calibrate_command(args: argparse.Namespace) -> int:
    """``calibrate PROFILE_FILE --profile NAME [--runs K]`` or ``calibrate --from RUN ...``: prints each run's
    figures, writes the noise file (``noise.calibrate_noise``) and prints an ini block of proposed tolerances
    (``noise.calibrate_proposal``: per field the least tolerance at which the compare passes an unchanged run of
    this noise 90 % of the time, ``noise.gate_tolerance``, against ``--stored-runs`` stored runs at the profile's
    budget; from per-pair ratios where the compare judges those), counting measurements, not tests
    (``noise.measurements``: the tests of a profile in one run file share one). A line per field shows the sds it
    is sized for and, where more, what 1-3 stored runs (the first nights) need; for a paired field, a comment says
    what its raw row needs at the ratio row's tolerance (:func:`_raw_line`). Returns ``EXIT_FINDINGS`` when a server
    failed, ``EXIT_USAGE``/``EXIT_BAD_PROFILE`` on bad input, else ``EXIT_OK``."""
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
    wild = [f"{key}: sd {sd:.0%} {kind}" for kind, sds in (("within a run", noise), ("run to run", noise.run_to_run))
            for key, sd in sds.items() if sd > MAX_NOISE_SD]  # fmt: skip
    if wild:  # read_noise would refuse the file
        shown = "; ".join(wild)
        print(f"error: {shown} across {len(records)} measurement(s): beyond {MAX_NOISE_SD:.0%}, more than a steady "
              "server's noise (a slowed or broken run pooled?); calibrate from runs that measured normally (no noise "
              "file written)", file=sys.stderr)  # fmt: skip
        return EXIT_USAGE
    name = args.profile or (records[0].profile if records else "profile")
    out = Path(args.noise_out or Path(".specdec/noise") / f"{name}.json")
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps({"profile": name, "runs": noise.runs, "sigma_rel": dict(noise),
                               "run_to_run_rel": noise.run_to_run}, indent=1) + "\n")  # fmt: skip
    counted = f"{len(records)} measurement(s)"
    if tests > len(records):
        counted += f" ({tests} tests: the tests of a profile in one run share its measurement)"
    print(
        f"# noise from {counted} -> {out} (--specdec-compare reads it until 4 stored runs of the profile measure "
        "their own)"
    )
    for key, sigma in noise.items():
        run = noise.run_to_run.get(key)
        print(f"#   {key}: sd {sigma * 100:.2f}% within a run" + (f", {run * 100:.2f}% run to run" if run is not None
                                                                   else ""))  # fmt: skip
    print(
        "# a compare takes each run-to-run sd where it is larger than its assumed one (7% raw or the row's "
        "within-run sd, 2% ratio): a few server starts size it poorly"
    )
    if len(records) < _FIRM_RUNS:
        print(f"# only {len(records)} server start(s): the run-to-run sds above are rough (a compare takes one only "
              f"where larger than its assumed 7%); {_FIRM_RUNS} or more size them better")  # fmt: skip
    vs = paired_arm(records)
    print(f"# proposed from {len(records)} measurement(s); paste into pytest's ini (or a profile's tolerances:)")
    print(_assumes_line(sizing, proposal_sds(records)))
    specs = field_specs()
    first = dataclasses.replace(sizing, stored_runs=1)
    lines: list[str] = []
    for fname, found in proposal_sds(records).items():
        tol = proposal[fname]
        higher = specs[fname].higher_is_better if fname in specs else True
        is_paired = found.row != fname
        shown = _percent(tol.rel) if tol is not None else f"none below {TOLERANCE_CAP:.1%}"
        if tol is not None and found.within > 0 and tol.rel == 0.01:
            shown += " (the 1% floor)"
        sds = f"sd {found.within * 100:.2f}% " + (
            f"within a run, {found.run_to_run * 100:.2f}% run to run"
            if found.key in noise
            else "of all values (one repeat per run)"
        )
        if found.within <= 0:
            print(f"#   {found.key}: {shown}, the floor: no spread (identical values decide exactly)")
            continue
        line = f"#   {found.key}: {shown} for {sds}"
        if sizing.stored_runs > 1 and tol is not None:
            early = gate_tolerance(found, first, higher_is_better=higher, shared=is_paired)
            if early is None or early > tol.rel:
                line += f"; {_first_nights(found, early)}"
            else:
                line += _more_than_one(found, sizing, early, tol.rel)
        print(line)
        if is_paired and tol is not None:
            raw = dataclasses.replace(found, key=fname, row=fname, within=noise.get(fname, found.within),
                                      run_to_run=noise.run_to_run.get(fname, 0.0))  # fmt: skip
            lines.append(_raw_line(raw, vs or "", tol.rel, sizing, higher))
    if vs:
        print(f"# {', '.join(f for f in PAIRED_FIELDS if f in proposal)}: from the per-pair ratios to {vs!r} (the "
              "ratio rows, e.g. output_tok_s / " f"{vs}; their raw spread includes the runner's load); the compare "
              "judges the raw rows at the same tolerances too (below)")  # fmt: skip
    print("specdec_tolerances =")
    for line in format_tolerances({f: t for f, t in proposal.items() if t is not None}).split():
        print(f"    {line}")
    if lines:
        print("\n".join(lines))
    return EXIT_OK


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


def _first_nights(found: FieldNoise, early: float | None) -> str:
    """What the first nights need: a compare against one stored run with this noise file (and against 2-3, which
    take the same run-to-run sd as known)."""
    need = f"~{_percent(early)}" if early is not None else f"no tolerance below {TOLERANCE_CAP:.1%}"
    run_sd = run_to_run_sd(found.row, found.within, found.run_to_run)
    return (f"against 1-3 stored runs (the first nights, with this noise file: run-to-run sd {run_sd * 100:.2g}% "
            f"taken as known for each server instance) it takes {need}: until then unchanged nights stay undecided "
            "more often (--specdec-undecided=warn, the default, passes them with a warning)")  # fmt: skip


def _more_than_one(found: FieldNoise, sizing: GateSizing, early: float | None, tol: float) -> str:
    """Why more stored runs may need a wider tolerance than one, in words that do not read as advice to store fewer:
    1-3 stored runs take the run-to-run sd as known (assumed, or calibrate's), from
    ``sequential.ASSUMED_UP_TO_RUNS + 1`` the compare estimates it from the stored runs, with their few degrees of
    freedom; both size the same real spread. "" where one stored run needs as much."""
    if early is None or early >= tol:
        return ""
    return (f" (1-3 stored runs take ~{_percent(early)}, with the run-to-run sd taken as known, "
            f"{run_to_run_sd(found.row, found.within, found.run_to_run) * 100:.2g}%; from "
            f"{sequential.ASSUMED_UP_TO_RUNS + 1} the compare estimates it from the stored runs, whose few degrees of "
            "freedom widen the interval: the width comes from the run-to-run spread itself, which a quieter runner "
            "narrows, not fewer stored runs)")  # fmt: skip


def _percent(rel: float) -> str:
    return f"{rel * 100:g}%"


def _raw_line(raw: FieldNoise, vs: str, tol: float, sizing: GateSizing, higher: bool) -> str:
    """The comment under the ini block for a paired field's raw row: the proposal ``tol`` is its ratio row's
    (``field / vs``); what the raw row, judged at the same tolerance with the raw spread, needs against the same
    stored runs (and against 1-3, the first nights)."""
    fname = raw.row
    need = gate_tolerance(raw, sizing, higher_is_better=higher, shared=True)
    early = gate_tolerance(raw, dataclasses.replace(sizing, stored_runs=1), higher_is_better=higher, shared=True)
    runs = f"{sizing.stored_runs} stored run{'s' if sizing.stored_runs != 1 else ''}"
    shown = f"~{_percent(need)}" if need is not None else f"no tolerance below {TOLERANCE_CAP:.1%}"
    head = (f"# {fname}: {_percent(tol)} is proposed for the ratio row ({fname} / {vs}); the raw row {fname} is "
            f"judged at it too, with the raw spread (sd {raw.within * 100:.2f}% within a run, "
            f"{raw.run_to_run * 100:.2f}% run to run): against {runs} it takes {shown}")  # fmt: skip
    if sizing.stored_runs > 1 and need is not None:
        head += (f"; {_first_nights(raw, early)}" if early is None or early > need
                 else _more_than_one(raw, sizing, early, need))  # fmt: skip
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
