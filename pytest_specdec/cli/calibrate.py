"""``python -m pytest_specdec calibrate``: rerun a profile K times (separate server starts), or read stored runs, and
propose baseline-compare tolerances from the spread; the measured noise is written for ``--specdec-compare``."""

from __future__ import annotations

import argparse
import json
import sys
from collections import Counter
from collections.abc import Sequence
from pathlib import Path

from pytest_specdec.cli.exits import EXIT_BAD_PROFILE, EXIT_FINDINGS, EXIT_OK, EXIT_USAGE
from pytest_specdec.core.errors import CompareError, ProfileError, ServerError, ServerStartError
from pytest_specdec.core.metric_table import PAIRED_FIELDS
from pytest_specdec.core.tolerances import format_tolerances
from pytest_specdec.engines.rules import load_profiles
from pytest_specdec.judge.noise import MAX_NOISE_SD, calibrate_noise, calibrate_proposal, measurements, paired_arm
from pytest_specdec.judge.pair_ratios import paired_ratios
from pytest_specdec.measure import pairing, runner
from pytest_specdec.measure.results import ResultRecord, ResultStore
from pytest_specdec.profiles.schema import Profile

__all__ = ["calibrate_command"]

#: Server starts from which a run-to-run sd is not called rough (on one H100, 4 starts read 3.3 %, the next 6 14.8 %).
_FIRM_RUNS = 6


def calibrate_command(args: argparse.Namespace) -> int:
    """``calibrate PROFILE_FILE --profile NAME [--runs K]`` or ``calibrate --from RUN ...``: prints each run's
    figures, writes the noise file (``noise.calibrate_noise``) and prints an ini block of proposed tolerances
    (``noise.calibrate_proposal``: from per-pair ratios where the compare judges those), counting measurements, not
    tests (``noise.measurements``: the tests of a profile in one run file share one). Returns ``EXIT_FINDINGS`` when
    a server failed, ``EXIT_USAGE``/``EXIT_BAD_PROFILE`` on bad input, else ``EXIT_OK``."""
    records: list[ResultRecord] = []
    tests = 0
    if args.from_runs:
        try:
            stored = _stored_records(args.from_runs, args.profile, Path(args.results_dir))
        except CompareError as exc:
            print(f"ERROR: {exc}", file=sys.stderr)
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
            print(f"ERROR: calibrate --from needs K >= 2 runs of the profile (separate server starts: a run-to-run "
                  f"sd needs 2 or more, as --runs K >= 2); got {len(records)} (runs: {runs})",
                  file=sys.stderr)  # fmt: skip
            return EXIT_USAGE
    else:
        if not args.profile_file or not args.profile or args.runs < 2:
            print("ERROR: calibrate needs PROFILE_FILE, --profile NAME and --runs K >= 2 (or --from RUN ...)",
                  file=sys.stderr)  # fmt: skip
            return EXIT_USAGE
        try:
            profile = load_profiles(args.profile_file).get(args.profile, flag="--profile")
        except ProfileError as exc:
            print(f"ERROR: {exc}", file=sys.stderr)
            return EXIT_BAD_PROFILE
        vs = profile.thresholds.min_speedup.vs if profile.thresholds.min_speedup is not None else None
        try:
            where = f"{args.profile}'s min_speedup.vs"
            reference = load_profiles(args.profile_file).get(vs, flag=where) if vs else None
        except ProfileError as exc:
            print(f"ERROR: {exc}", file=sys.stderr)
            return EXIT_BAD_PROFILE
        for i in range(args.runs):
            try:
                record = _calibration_run(profile, reference, Path(args.log_dir))
            except (ServerStartError, ServerError) as exc:
                print(f"ERROR: run {i + 1}/{args.runs}: {exc}", file=sys.stderr)
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
        print("ERROR: not enough values to propose tolerances (need >= 2 per metric)", file=sys.stderr)
        return EXIT_USAGE
    noise = calibrate_noise(records)
    wild = [f"{key}: sd {sd:.0%} {kind}" for kind, sds in (("within a run", noise), ("run to run", noise.run_to_run))
            for key, sd in sds.items() if sd > MAX_NOISE_SD]  # fmt: skip
    if wild:  # read_noise would refuse the file
        shown = "; ".join(wild)
        print(f"ERROR: {shown} across {len(records)} measurement(s): beyond {MAX_NOISE_SD:.0%}, more than a steady "
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
    print(f"# noise from {counted} -> {out} (--specdec-compare reads it until 4 stored runs of the profile measure "
          "their own)")
    for key, sigma in noise.items():
        run = noise.run_to_run.get(key)
        print(f"#   {key}: sd {sigma * 100:.2f}% within a run" + (f", {run * 100:.2f}% run to run" if run is not None
                                                                   else ""))  # fmt: skip
    print("# a compare takes each run-to-run sd where it is larger than its assumed one (7% raw or the row's "
          "within-run sd, 2% ratio): a few server starts size it poorly")
    if len(records) < _FIRM_RUNS:
        print(f"# only {len(records)} server start(s): the run-to-run sds above are rough (a compare takes one only "
              f"where larger than its assumed 7%); {_FIRM_RUNS} or more size them better")  # fmt: skip
    vs = paired_arm(records)
    print(f"# proposed from {len(records)} measurement(s); paste into pytest's ini (or a profile's tolerances:)")
    if vs:
        print(f"# {', '.join(f for f in PAIRED_FIELDS if f in proposal)}: from the per-pair ratios to {vs!r}, which "
              "the compare judges them on (their raw spread includes the runner's load)")  # fmt: skip
    print("specdec_tolerances =")
    for line in format_tolerances(proposal).split():
        print(f"    {line}")
    return EXIT_OK


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
