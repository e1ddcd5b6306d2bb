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
from collections.abc import Sequence
from pathlib import Path

import numpy as np

from pytest_specdec.cli.exits import EXIT_BAD_PROFILE, EXIT_FINDINGS, EXIT_OK, EXIT_USAGE
from pytest_specdec.core.errors import CompareError, ProfileError, ServerError, ServerStartError
from pytest_specdec.core.metric_table import PAIRED_FIELDS
from pytest_specdec.core.tolerances import Tolerance, field_specs, format_tolerances
from pytest_specdec.engines.rules import load_profiles
from pytest_specdec.judge import sequential
from pytest_specdec.judge.compare import assumed_instance_sd, calibrated_history, design_of, run_to_run_sd
from pytest_specdec.judge.noise import (
    MAX_NOISE_SD,
    CalibratedNoise,
    calibrate_noise,
    calibrate_proposal,
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
    (``noise.calibrate_proposal``: 3 sd of the within-run and run-to-run sds combined, ``noise.proposal_sds``, a line
    per field showing the sum; from per-pair ratios where the compare judges those), counting measurements, not
    tests (``noise.measurements``: the tests of a profile in one run file share one). A timing field's proposal is
    raised to what 4 stored unchanged runs like these decide, and a comment under the block says what one stored run
    and such a history decide where one stored run cannot decide the 3-sd value (:func:`_reaches`); for a paired
    field, another says what its raw row decides at the ratio row's tolerance (:func:`_raw_line`). Returns
    ``EXIT_FINDINGS`` when a server failed, ``EXIT_USAGE``/``EXIT_BAD_PROFILE`` on bad input, else ``EXIT_OK``."""
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
    proposal = calibrate_proposal(records)
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
    design = design or sequential.Design(Workload().repeats, sequential.DEFAULT_MAX_REPEATS)
    reaches, raw_reaches = _reaches(records, proposal, noise, design)
    sigma3 = dict(proposal)
    for fname, reach in reaches.items():
        if reach.history is not None and reach.history > proposal[fname].rel:
            proposal[fname] = Tolerance(rel=reach.history)  # one the gate decides once 4 stored runs exist
    print(f"# proposed from {len(records)} measurement(s); paste into pytest's ini (or a profile's tolerances:)")
    # The sd is the two the lines above print, combined: an unchanged run meets a stored one with its own repeats'
    # spread and its own server instance's offset. The pooled values' MAD matched neither line (fresh-user trial).
    print("# each max(3 sd, 1%), sd = sqrt(within^2 + run-to-run^2) of the sds above: one repeat of a new server "
          "instance about the profile's level, as an unchanged run meets a stored one")  # fmt: skip
    for fname, sd in proposal_sds(records).items():
        if fname not in proposal:
            continue
        key = f"{fname}/{vs}" if vs and fname in PAIRED_FIELDS else fname
        parts = (f"sqrt({noise[key] * 100:.2f}%^2 within + {noise.run_to_run.get(key, 0.0) * 100:.2f}%^2 run to run)"
                 if key in noise else "of all values, one repeat per run: within and run to run together")  # fmt: skip
        shown = f"3 sd {3 * sd * 100:.2f}% -> {_percent(sigma3[fname].rel)}"
        if 3 * sd < 0.01:
            shown += " (the 1% floor)"
        if proposal[fname] != sigma3[fname]:
            shown += f", proposed {_percent(proposal[fname].rel)} (below)"
        print(f"#   {key}: sd {sd * 100:.2f}% = {parts}; {shown}")
    if vs:
        print(f"# {', '.join(f for f in PAIRED_FIELDS if f in proposal)}: from the per-pair ratios to {vs!r} (the "
              "ratio rows, e.g. output_tok_s / " f"{vs}; their raw spread includes the runner's load); the compare "
              "judges the raw rows at the same tolerances too (below)")  # fmt: skip
    print("specdec_tolerances =")
    for line in format_tolerances(proposal).split():
        print(f"    {line}")
    lines = [line for fname, reach in reaches.items() if (line := _reach_line(fname, sigma3[fname].rel, reach))]
    lines += [_raw_line(fname, vs or "", proposal[fname].rel, reach) for fname, reach in raw_reaches.items()]
    if lines:
        print("\n".join(lines))
        print(f"# (an unchanged run measured to the budget of {design.max_repeats} repeats, workload.max_repeats; "
              f"from {_HISTORY_RUNS} stored unchanged runs of a fingerprint the compare measures the run-to-run sd "
              "itself)")  # fmt: skip
    return EXIT_OK


#: Stored runs from which a compare takes the history's own run-to-run estimate, not an assumed one.
_HISTORY_RUNS = sequential.ASSUMED_UP_TO_RUNS + 1
#: The largest tolerance :func:`_least_tolerance` looks for.
_REACH_CAP = 0.999


@dataclasses.dataclass(frozen=True, slots=True)
class _Reach:
    """For one proposed timing field: the least tolerance (relative, rounded up to 0.1 %) an unchanged run measured
    to the budget passes within, against one stored run (``one_run``, taking ``run_sd`` for each server instance)
    and against :data:`_HISTORY_RUNS` stored runs like the calibration's (``history``); None where none up to
    :data:`_REACH_CAP` does."""

    one_run: float | None
    run_sd: float
    history: float | None


def _reaches(
    records: Sequence[ResultRecord], proposal: dict[str, Tolerance], noise: CalibratedNoise, design: sequential.Design
) -> tuple[dict[str, _Reach], dict[str, _Reach]]:
    """:class:`_Reach` of each proposed timing field's row, and of each paired field's raw row (the compare judges
    both at the field's tolerance; the proposal comes from the first, the ratio row): :func:`_reach`."""
    vs = paired_arm(records)
    rows: dict[str, _Reach] = {}
    raw: dict[str, _Reach] = {}
    for fname in proposal:
        paired = vs is not None and fname in PAIRED_FIELDS
        if (reach := _reach(records, fname, vs if paired else None, noise, design, shared=paired)) is not None:
            rows[fname] = reach
        if paired and (reach := _reach(records, fname, None, noise, design, shared=True)) is not None:
            raw[fname] = reach
    return rows, raw


def _reach(
    records: Sequence[ResultRecord],
    fname: str,
    vs: str | None,
    noise: CalibratedNoise,
    design: sequential.Design,
    *,
    shared: bool,
) -> _Reach | None:
    """:class:`_Reach` of ``fname``'s row (its ratio to the paired arm ``vs`` when given, ``field / ``, else raw;
    None for a field without an assumed run-to-run sd or a calibrated one: ``compare.assumed_instance_sd``),
    decided by ``sequential.decide_shift`` as ``compare._judge`` decides it after this calibration: against one
    stored run with the noise file written here (``compare._Judging.pooled``: the within-run sd as known, the
    run-to-run sd of ``_Judging.assumed_sd``), against a history by ``sequential.History.from_runs`` of runs whose
    within-run and run-to-run sds are the measured ones. The unchanged values are synthetic: each run's logs spread
    exactly at the within-run sd, today's at the baseline's level over ``design.max_repeats`` repeats; at half the
    alpha where ``shared`` (a paired field's raw and ratio rows share it in the compare)."""
    key, noise_key = (f"{fname} / ", f"{fname}/{vs}") if vs else (fname, fname)
    sigma = noise.get(noise_key)
    specs = field_specs()
    if sigma is None or not assumed_instance_sd(key) or fname not in specs:
        return None
    counts = [n for r in records if (n := len(paired_ratios(r, fname) if vs else r.values(fname)))]
    n_base = max(int(statistics.median_low(counts)), 2) if counts else 2
    look = dataclasses.replace(design, alpha=design.alpha / 2) if shared else design
    higher = specs[fname].higher_is_better
    log_sd = math.log1p(sigma)
    base, today = _unchanged(n_base, log_sd), _unchanged(design.max_repeats, log_sd)
    run_sd = run_to_run_sd(key, sigma, noise.run_to_run.get(noise_key))
    one = calibrated_history(base, sigma, run_sd)  # as the compare reads the noise file written here
    one_run = _least_tolerance(base, today, look, higher, one, run_sd)
    # Runs whose means spread as the measured run-to-run sd beyond their repeats (the ANOVA's moments); the
    # first, the named baseline whose level the compare takes (the others are the nights after it), at today's.
    spread = math.sqrt(math.log1p(noise.run_to_run.get(noise_key, 0.0)) ** 2 + log_sd**2 / n_base)
    offsets = np.array([0.0] + [(-1.0) ** k * ((k + 1) // 2) for k in range(1, _HISTORY_RUNS)])
    runs = [_unchanged(n_base, log_sd, float(d) * spread / float(offsets.std(ddof=1))) for d in offsets]
    history = sequential.History.from_runs(runs, run_sd)
    reached = None
    if history is not None:
        run_to_run = math.expm1(math.sqrt(history.between)) if history.assumed else 0.0
        reached = _least_tolerance(runs[0], today, look, higher, history, run_to_run)
    return _Reach(one_run, run_sd, reached)


def _unchanged(n: int, log_sd: float, shift: float = 0.0) -> list[float]:
    """``n`` values around 100 whose logs have mean ``shift`` (plus log 100) and sd ``log_sd`` (n - 1) exactly."""
    z = np.arange(n) - (n - 1) / 2
    if n > 1:
        z = z / z.std(ddof=1)
    return [float(v) for v in np.exp(math.log(100.0) + shift + log_sd * z)]


def _least_tolerance(
    base: list[float],
    today: list[float],
    design: sequential.Design,
    higher: bool,
    history: sequential.History | None,
    instance_sd: float,
) -> float | None:
    """The least relative tolerance (rounded up to 0.1 %) at which ``sequential.decide_shift`` passes ``today``
    against ``base`` (``within``), by bisection (the tolerance only widens the bound); None when none up to
    :data:`_REACH_CAP` does."""

    def passes(tol: float) -> bool:
        decision = sequential.decide_shift(base, today, tol, design, higher_is_better=higher, history=history,
                                           instance_sd=instance_sd)  # fmt: skip
        return decision.verdict == "within"

    low, high = 0.0, _REACH_CAP
    if not passes(high):
        return None
    while high - low > 1e-5:
        mid = (low + high) / 2
        low, high = (low, mid) if passes(mid) else (mid, high)
    return math.ceil(round(high * 1000, 6)) / 1000


def _percent(rel: float) -> str:
    return f"{rel * 100:g}%"


def _reach_line(fname: str, sigma3: float, reach: _Reach) -> str:
    """The comment under the ini block when the 3-sd proposal ``sigma3`` is below what one stored run decides,
    or was raised to what a history decides; "" otherwise."""
    one = (f"within ~{_percent(reach.one_run)}" if reach.one_run is not None else
           f"within no tolerance below {_REACH_CAP:.0%}")  # fmt: skip
    against_one = (f"against one stored run an unchanged run passes only {one} (run-to-run sd "
                   f"{reach.run_sd * 100:.2g}% taken for each server instance)")  # fmt: skip
    many = f"{_HISTORY_RUNS} stored unchanged runs like these"
    if reach.history is not None and reach.history > sigma3:
        return (f"# {fname}: 3 sd is {_percent(sigma3)}, proposed {_percent(reach.history)}: the least an unchanged "
                f"run passes within against {many}; {against_one}")  # fmt: skip
    if reach.one_run is not None and sigma3 >= reach.one_run:
        return ""
    if reach.history is None:
        return (f"# {fname}:{_percent(sigma3)}: against {many} an unchanged run passes within no tolerance below "
                f"{_REACH_CAP:.0%}; {against_one}")  # fmt: skip
    return (f"# {fname}:{_percent(sigma3)} is decidable only from {many} (an unchanged run passes within "
            f"~{_percent(reach.history)} there); {against_one}")  # fmt: skip


def _raw_line(fname: str, vs: str, tol: float, reach: _Reach) -> str:
    """The comment under the ini block for a paired field's raw row: the proposal ``tol`` is decided on the ratio
    row (``field / vs``); what the raw row, judged at the same tolerance with the raw run-to-run sd, decides."""
    one = f"~{_percent(reach.one_run)}" if reach.one_run is not None else f"no tolerance below {_REACH_CAP:.0%}"
    many = f"~{_percent(reach.history)}" if reach.history is not None else f"no tolerance below {_REACH_CAP:.0%}"
    head = (f"# {fname}: {_percent(tol)} is proposed for the ratio row ({fname} / {vs}); the raw row {fname} is "
            f"judged at it too, with the raw run-to-run sd: an unchanged run passes it within {one} against one "
            f"stored run (run-to-run sd {reach.run_sd * 100:.2g}% taken for each server instance), within {many} "
            f"against {_HISTORY_RUNS} stored unchanged runs like these")  # fmt: skip
    warn = "--specdec-undecided=warn, the default, passes such a night with a warning; =fail fails it"
    at_one = reach.one_run is not None and tol >= reach.one_run
    at_many = reach.history is not None and tol >= reach.history
    if at_one and at_many:
        return f"{head}: {_percent(tol)} decides it against one stored run and against {_HISTORY_RUNS}"
    if at_one:
        return f"{head}: {_percent(tol)} decides it against one stored run, not against {_HISTORY_RUNS} ({warn})"
    if at_many:
        return (f"{head}: {_percent(tol)} decides it only from {_HISTORY_RUNS} stored unchanged runs; until then the "
                f"raw row stays undecided ({warn})")  # fmt: skip
    reached = [r for r in (reach.one_run, reach.history) if r is not None]
    many_runs = f"against {_HISTORY_RUNS} stored unchanged runs"
    wheres = ((reach.one_run, "against one stored run"), (reach.history, many_runs))
    where = " and ".join(w for r, w in wheres if r is not None)
    wider = (f"{fname}:{_percent(max(reached))} decides it {where}, and bounds the ratio row that loosely too"
             if reached else f"no tolerance below {_REACH_CAP:.0%} decides it")  # fmt: skip
    return (f"{head}: at {_percent(tol)} the raw row stays undecided every night, also against {_HISTORY_RUNS} "
            f"stored unchanged runs ({warn}); {wider}")  # fmt: skip


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
