"""``python -m pytest_specdec calibrate``: rerun a profile K times (separate server starts), or read stored runs, and
propose baseline-compare tolerances from the spread; the measured noise is written for ``--specdec-compare``."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from pytest_specdec.cli.exits import EXIT_BAD_PROFILE, EXIT_FINDINGS, EXIT_OK, EXIT_USAGE
from pytest_specdec.core.errors import CompareError, ProfileError, ServerError, ServerStartError
from pytest_specdec.core.metric_table import PAIRED_FIELDS
from pytest_specdec.core.tolerances import format_tolerances
from pytest_specdec.engines.rules import load_profiles
from pytest_specdec.judge.noise import calibrate_noise, calibrate_proposal, measurements, paired_arm
from pytest_specdec.judge.pair_ratios import paired_ratios
from pytest_specdec.measure import pairing, runner
from pytest_specdec.measure.results import ResultRecord, read_run_file
from pytest_specdec.profiles.schema import Profile

__all__ = ["calibrate_command"]


def calibrate_command(args: argparse.Namespace) -> int:
    """``calibrate PROFILE_FILE --profile NAME [--runs K]`` or ``calibrate --from RUN ...``: prints each run's
    figures, writes the noise file (``noise.calibrate_noise``) and prints an ini block of proposed tolerances
    (``noise.calibrate_proposal``: from per-pair ratios where the compare judges those), counting measurements, not
    tests (``noise.measurements``: the tests of a profile in one run file share one). Returns ``EXIT_FINDINGS`` when
    a server failed, ``EXIT_USAGE``/``EXIT_BAD_PROFILE`` on bad input, else ``EXIT_OK``."""
    records: list[ResultRecord] = []
    tests = 0
    if args.from_runs:
        stored_records: list[tuple[str, ResultRecord]] = []
        try:
            for ref in args.from_runs:
                stored = read_run_file(Path(ref))
                stored_records += [(stored.run_id, r) for r in stored.results if not args.profile or
                                   r.profile == args.profile]  # fmt: skip
        except CompareError as exc:
            print(f"ERROR: {exc}", file=sys.stderr)
            return EXIT_USAGE
        # Every test of a profile in one run reads one measurement: count (and pool) measurements, not tests.
        records, tests = measurements(stored_records), len(stored_records)
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
    vs = paired_arm(records)
    print(f"# proposed from {len(records)} measurement(s); paste into pytest's ini (or a profile's tolerances:)")
    if vs:
        print(f"# {', '.join(f for f in PAIRED_FIELDS if f in proposal)}: from the per-pair ratios to {vs!r}, which "
              "the compare judges them on (their raw spread includes the runner's load)")  # fmt: skip
    print("specdec_tolerances =")
    for line in format_tolerances(proposal).split():
        print(f"    {line}")
    return EXIT_OK


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
