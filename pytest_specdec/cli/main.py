"""Command line of pytest-specdec:

- ``check PROFILE_FILE [--profile NAME] [--strict]``: preflight, launches nothing;
- ``compare BASE CURRENT [--tolerance METRIC:TOL ...] [--force] [--compare-profile NAME]``: the baseline compare,
  exit 1 on a regression pytest would fail without measuring again (throughput/latency: "suspected, not confirmed");
- ``calibrate PROFILE_FILE --profile NAME [--runs K]`` (or ``--from RUN ...``): propose tolerances from the spread;
- ``trend [RUN ...] [--metric FIELD] [--profile NAME]``: change points over stored runs, exit 1 on a worse one;
- ``plot [RUN ...] -o trend.png [--metric FIELD] [--threshold FIELD=VALUE] [--profile NAME]``: a trend PNG;
- ``merge PATH... [--store DIR] [--markdown PATH] [--trend PNG] [--force]``: CI shards' runs -> one run
  (``pytest_specdec.report.merge``).
- ``reap [--dir DIR]``: stop the recorded servers whose pytest is gone, and list them.
- ``bisect [PROFILE_FILE] --good A --bad B``: the differences that caused a regression, by delta debugging over
  launched probes (``pytest_specdec.bisection``, ``pytest_specdec.bisection.probes``).
"""

from __future__ import annotations

import argparse
import dataclasses
import difflib
import json
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any, NoReturn

from pytest_specdec.core.errors import CompareError, ProfileError
from pytest_specdec.engines.preflight import Finding, format_findings, locate, run_preflight
from pytest_specdec.measure.results import ResultRecord, read_run_file
from pytest_specdec.profiles.schema import Profile, did_you_mean, load_profiles
from pytest_specdec.report.merge import DEFAULT_TREND_RUNS

__all__ = ["main"]

#: Exit codes of ``check``.
EXIT_OK, EXIT_FINDINGS, EXIT_BAD_PROFILE = 0, 1, 2
#: Exit code of `plot` on a bad option or an unreadable run.
EXIT_USAGE = 2


#: Stands for ``compare``'s default tolerances in its help, filled in only when the help is shown (importing
#: ``compare`` takes numpy).
_DEFAULT_TOLERANCES = "{default_tolerances}"


class _ShortUsageError(Exception):
    def __init__(self, parser: argparse.ArgumentParser, message: str) -> None:
        super().__init__(message)
        self.parser = parser
        self.message = message


class _Parser(argparse.ArgumentParser):
    """A subcommand's parser; ``short_errors=True``: a usage error raises ``_ShortUsageError`` (``main`` prints the
    usage and ``error: ...`` and returns 2) instead of argparse's exit."""

    def __init__(self, *args: Any, short_errors: bool = False, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.short_errors = short_errors
        self.set_defaults(parser=self)

    def error(self, message: str) -> NoReturn:
        if self.short_errors:
            raise _ShortUsageError(self, message)
        super().error(message)


class _CompareHelpFormatter(argparse.HelpFormatter):
    def _get_help_string(self, action: argparse.Action) -> str | None:
        text = action.help
        if text is not None and _DEFAULT_TOLERANCES in text:
            from pytest_specdec.judge.tolerances import DEFAULT_TOLERANCES, format_tolerances

            text = text.replace(_DEFAULT_TOLERANCES, format_tolerances(DEFAULT_TOLERANCES).replace("%", "%%"))
        return text


def _build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m pytest_specdec", description="pytest-specdec tools")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND", parser_class=_Parser)
    check = sub.add_parser(
        "check",
        help="run preflight checks on a profile file without launching anything",
        description="Check profiles against their model files. Every finding goes to stderr as 'SEVERITY: "
        "FILE:LINE: profiles.NAME.KEY: ...'; stdout lists the profiles without findings. Exit 1 on errors (or "
        "warnings with --strict), 2 on a profile file that cannot be loaded or an unknown --profile, 0 otherwise.",
    )
    check.add_argument("profile_file", metavar="PROFILE_FILE", help="the specdec YAML file")
    check.add_argument("--profile", metavar="NAME", action="append", help="check only this profile (repeatable)")
    check.add_argument("--strict", action="store_true", help="exit 1 on warnings too")
    check.set_defaults(func=_cmd_check)
    plot = sub.add_parser(
        "plot",
        help="draw a trend PNG of stored runs (tok/s and accept length per run)",
        description="Plot metrics of stored run files, one line per profile, runs placed by start time, repeats' "
        "min-max as bars, runs with a failed test marked; exit 2 on an unreadable run or a bad option, 0 otherwise. "
        "Needs matplotlib (the 'plot' extra).",
    )
    plot.add_argument(
        "runs",
        metavar="RUN",
        nargs="*",
        help="a run file, a directory of run files, or a run id (or unique prefix) in --results-dir "
        "(default: every run in --results-dir)",
    )
    plot.add_argument(
        "-o", "--output", metavar="PNG", default="trend.png", help="the PNG to write (default: trend.png)"
    )
    plot.add_argument(
        "--metric",
        metavar="FIELD",
        action="append",
        help="a RunMetrics field to plot, e.g. ttft_ms_p50 (repeatable; default: output_tok_s and accept_length)",
    )
    plot.add_argument(
        "--threshold",
        metavar="FIELD=VALUE",
        action="append",
        default=[],
        help="draw a horizontal line at VALUE in FIELD's panel, e.g. output_tok_s=80 (repeatable)",
    )
    plot.add_argument("--profile", metavar="NAME", action="append", help="only this profile (repeatable)")
    plot.add_argument(
        "--results-dir",
        metavar="DIR",
        default=".specdec/results",
        help="where run ids are looked up (default: .specdec/results)",
    )
    plot.set_defaults(func=_cmd_plot)
    reap = sub.add_parser(
        "reap",
        help="stop servers launched by pytest runs that are gone (killed before their teardown), and list them",
        description="Stop every server recorded in DIR/servers whose pytest (the launching process, or the xdist "
        "controller) is gone; servers of a live pytest are in use and left alone. Prints one line per server "
        "stopped; exit 0.",
    )
    reap.add_argument(
        "--dir",
        metavar="DIR",
        default=".specdec",
        help="the specdec directory (pytest's --specdec-dir / ini specdec_dir; default: .specdec)",
    )
    reap.set_defaults(func=_cmd_reap)
    compare = sub.add_parser(
        "compare",
        help="compare two stored runs; exit 1 on a regression",
        description="Compare a specdec run with a baseline run: fingerprint diff, then one row per metric.",
        formatter_class=_CompareHelpFormatter,
        short_errors=True,
    )
    compare.add_argument("base", metavar="BASE", help="baseline: a run file, a run id (or unique prefix), or 'latest'")
    compare.add_argument("current", metavar="CURRENT", help="current run: a run file, a run id, or 'latest'")
    compare.add_argument(
        "-t",
        "--tolerance",
        action="append",
        default=[],
        metavar="SPEC",
        help="Per-metric tolerance, e.g. output_tok_s:5%% accept_length:0.02 ttft_ms:10%%+5 (repeatable; each one "
        "replaces that metric's default, the other defaults stay: " + _DEFAULT_TOLERANCES + ")",
    )
    compare.add_argument("--force", action="store_true", help="Compare even when the workloads differ")
    compare.add_argument(
        "--compare-profile",
        metavar="NAME|CUR=BASE[,...]",
        help="Compare with another profile's results, as pytest's --specdec-compare-profile: NAME for every test of "
        "a speculative profile (tests without speculation keep their own), or CUR=BASE pairs, e.g. "
        "eagle3-shifted-layers=eagle3 (default: each test with itself)",
    )
    compare.add_argument(
        "--noise",
        metavar="FILE",
        help="Calibrated noise (written by 'calibrate', e.g. .specdec/noise/eagle3.json): a shift must also exceed "
        "3 x that sigma (default: the repeats' own spread only)",
    )
    compare.add_argument(
        "--dir",
        default=".specdec/results",
        metavar="DIR",
        help="Where run ids are looked up (default: .specdec/results)",
    )
    compare.set_defaults(func=_cmd_compare)
    merge = sub.add_parser(
        "merge",
        help="merge the run files of CI shards into one run, one markdown summary and one trend",
        description="Merge the run files of CI shards into one run in the store, with one markdown summary and one "
        "trend PNG. Refuses runs of different commits, profile definitions or metric definitions, and a test "
        "measured twice, unless --force. Exit 0 merged, 1 refused, 2 bad input.",
    )
    merge.add_argument(
        "paths",
        metavar="PATH",
        nargs="+",
        help="a run file, or a directory searched recursively for run files (e.g. the downloaded shard artifacts)",
    )
    merge.add_argument(
        "--store",
        metavar="DIR",
        default=".specdec/results",
        help="the results store the merged run is written to (default: .specdec/results)",
    )
    merge.add_argument("--markdown", metavar="PATH", help="write the merged summary as markdown (also appended to "
                       "$GITHUB_STEP_SUMMARY when set)")  # fmt: skip
    merge.add_argument("--trend", metavar="PNG", help="draw the store's trend (needs matplotlib)")
    merge.add_argument(
        "--trend-runs",
        metavar="N",
        type=int,
        default=DEFAULT_TREND_RUNS,
        help=f"the newest N runs of the store in the trend (default: {DEFAULT_TREND_RUNS})",
    )
    merge.add_argument(
        "--metric",
        metavar="FIELD",
        action="append",
        help="a RunMetrics field for the trend (repeatable; default: output_tok_s and accept_length)",
    )
    merge.add_argument("--force", action="store_true", help="merge even when the runs differ (recorded in the run)")
    merge.set_defaults(func=_cmd_merge)
    calibrate = sub.add_parser(
        "calibrate",
        help="rerun a profile K times (separate server starts) and propose baseline-compare tolerances",
        description="Propose per-metric relative tolerances, max(3 x MAD-based sigma, 1%), from K separate runs of "
        "one profile (or from stored run files with --from); prints an ini block for specdec_tolerances.",
    )
    calibrate.add_argument("profile_file", metavar="PROFILE_FILE", nargs="?", help="the specdec YAML file")
    calibrate.add_argument("--profile", metavar="NAME", help="the profile to rerun")
    calibrate.add_argument("--runs", metavar="K", type=int, default=3, help="server starts (default: 3)")
    calibrate.add_argument("--from", dest="from_runs", metavar="RUN", nargs="+", help="use stored run files instead")
    calibrate.add_argument("--log-dir", metavar="DIR", default=".specdec/calibrate", help="server logs")
    calibrate.add_argument(
        "--noise-out",
        metavar="PATH",
        help="where the measured noise goes, read by --specdec-compare for the profile "
        "(default: .specdec/noise/<profile>.json)",
    )
    calibrate.set_defaults(func=_cmd_calibrate)
    trend = sub.add_parser(
        "trend",
        help="find change points in a series of stored runs (a slow drift that passes every night)",
        description="Per test and metric, one value per stored run (oldest first); report change points found by "
        "binary segmentation and kept when significant (Welch's t-test). Exit 1 when a change point is in the worse "
        "direction, 2 on bad input, else 0. Needs ruptures (the 'trend' extra).",
    )
    trend.add_argument("runs", metavar="RUN", nargs="*", help="run files or directories (default: --results-dir)")
    trend.add_argument("--results-dir", metavar="DIR", default=".specdec/results", help="default: .specdec/results")
    trend.add_argument(
        "--metric", metavar="FIELD", action="append", help="a metric field (repeatable; default: output_tok_s, "
        "accept_length; ratios to a paired arm are added)"
    )  # fmt: skip
    trend.add_argument("--profile", metavar="NAME", action="append", help="only this profile (repeatable)")
    trend.add_argument("--max-pvalue", metavar="P", type=float, default=0.001, help="keep a split at p <= P (0.001)")
    trend.add_argument("--min-size", metavar="N", type=int, default=3, help="fewest runs each side (default: 3)")
    trend.set_defaults(func=_cmd_trend)
    bisect = sub.add_parser(
        "bisect",
        help="find which differences between a good and a bad configuration cause a regression (launches servers)",
        description="Build configurations between GOOD and BAD from their differences (env variables, extra flags, "
        "speculative keys, other profile keys, workload keys), launch and measure them, and report the minimal set "
        "that reproduces the regression (delta debugging, Zeller's ddmin), grouped into causes with their measured "
        "effect, the launches and server-seconds spent. GOOD and BAD are two profiles of PROFILE_FILE, or, without "
        "PROFILE_FILE, two stored runs (run file, run id or unique prefix in --results-dir). Exit 0 when culprits "
        "were named, 1 when the regression did not reproduce here or nothing could be bisected, 2 on bad input.",
    )
    bisect.add_argument("profile_file", metavar="PROFILE_FILE", nargs="?", help="the specdec YAML file (GOOD and BAD "
                        "are profile names in it)")  # fmt: skip
    bisect.add_argument("--good", metavar="A", required=True, help="the good profile, or run")
    bisect.add_argument("--bad", metavar="B", required=True, help="the bad profile, or run")
    bisect.add_argument("--test", metavar="ID", help="stored runs: the test whose record is bisected (default: the "
                        "only test of the bad run)")  # fmt: skip
    bisect.add_argument("--good-test", metavar="ID", help="stored runs: the good run's test, when it has another id "
                        "(default: --test)")  # fmt: skip
    bisect.add_argument("--results-dir", metavar="DIR", default=".specdec/results",
                        help="where run ids are looked up (default: .specdec/results)")  # fmt: skip
    bisect.add_argument("--profiles-dir", metavar="DIR", default=".", help="stored runs: the directory that "
                        "<profiles> in the recorded profile stands for (default: the working directory)")  # fmt: skip
    bisect.add_argument("--log-dir", metavar="DIR", default=".specdec/logs", help="server logs, bisect-<launch>.log "
                        "(default: .specdec/logs; servers are recorded for reap in its parent)")  # fmt: skip
    bisect.add_argument("--phases", metavar="N", type=int, default=2, help="measured phases per probe for its exact "
                        "metrics (default: 2, the fewest that show identical repeats)")  # fmt: skip
    bisect.add_argument("--max-pairs", metavar="N", type=int, default=12, help="paired phases after which an "
                        "undecided probe is unresolved (default: 12)")  # fmt: skip
    bisect.set_defaults(func=_cmd_bisect)
    return parser


def _cmd_bisect(args: argparse.Namespace) -> int:
    from pytest_specdec import bisection
    from pytest_specdec.bisection.probes import Prober
    from pytest_specdec.core.errors import SpecdecError
    from pytest_specdec.judge.tolerances import layered_tolerances

    try:
        good, bad, name, source, fixed, tolerances = _bisect_inputs(args)
        tolerance = layered_tolerances(tolerances)["output_tok_s"].rel
    except (ProfileError, CompareError, ValueError) as exc:
        print(f"ERROR: {exc}", file=sys.stderr)
        return EXIT_USAGE
    diffs = bisection.differences(good, bad)
    if not diffs:
        print(f"bisect: {args.good} and {args.bad} have no difference a profile can apply")
        for item in fixed:
            print(f"not bisectable here: {item.line()}")
        return EXIT_FINDINGS
    print(f"bisect: {len(diffs)} differences between {args.good} (good) and {args.bad} (bad):")
    for d in diffs:
        print(f"  {d.line()}")
    try:
        prober = Prober(good, name=name, source=source, log_dir=Path(args.log_dir), phases=args.phases,
                        log_prefix="bisect")  # fmt: skip
    except ProfileError as exc:
        print(f"ERROR: {exc}", file=sys.stderr)
        return EXIT_USAGE

    def progress(rec: bisection.ProbeRecord) -> None:
        verdict = rec.verdict
        if verdict is not None:
            words = {"FAIL": "reproduces", "PASS": "does not reproduce", "UNRESOLVED": "unresolved"}
            shown = words[verdict.outcome or "UNRESOLVED"]
            print(f"probe {rec.label}: {shown} [{verdict.basis}: {verdict.line}] ({prober.launches} launches)",
                  flush=True)  # fmt: skip

    try:
        result = bisection.bisect(good, diffs, prober, tolerance_rel=tolerance, max_pairs=args.max_pairs,
                                  fixed=fixed, on_probe=progress)  # fmt: skip
    except SpecdecError as exc:
        print(f"ERROR: {exc}", file=sys.stderr)
        return EXIT_FINDINGS
    finally:
        prober.close()
    for line in bisection.report_lines(dataclasses.replace(result, launches=prober.launches, server_s=prober.server_s)):
        print(line)
    return EXIT_OK if result.culprits else EXIT_FINDINGS


def _bisect_inputs(args: argparse.Namespace) -> tuple[dict[str, Any], dict[str, Any], str, str, list[Any], list[str]]:
    """(good mapping, bad mapping, good name, source, not-bisectable differences, good's tolerances) of ``bisect``,
    from two profiles of PROFILE_FILE or from two stored runs' recorded profile definitions.

    :raises ProfileError, CompareError: unknown profile, unreadable run, no such test, no recorded definition.
    """
    from pytest_specdec import bisection
    from pytest_specdec.bisection.probes import profile_mapping

    if args.profile_file:
        profiles = load_profiles(args.profile_file)
        good, bad = profiles.get(args.good), profiles.get(args.bad)
        return profile_mapping(good), profile_mapping(bad), good.name, good.source, [], list(good.tolerances)
    from pytest_specdec.measure.results import ResultStore

    store = ResultStore(Path(args.results_dir))
    good_run, bad_run = store.load(args.good), store.load(args.bad)
    test = args.test
    if test is None:
        ids = [r.test_id for r in bad_run.results]
        if len(ids) != 1:
            raise CompareError(f"--test: run {bad_run.run_id} has {len(ids)} tests; name one with --test ID "
                               f"(tests: {', '.join(ids) or 'none'})")  # fmt: skip
        test = ids[0]
    bad_rec = bad_run.find(test)
    good_rec = good_run.find(args.good_test or test)
    for run, rec, wanted in ((bad_run, bad_rec, test), (good_run, good_rec, args.good_test or test)):
        if rec is None:
            raise CompareError(f"--test={wanted}: no such test in run {run.run_id} (tests: "
                               f"{', '.join(r.test_id for r in run.results) or 'none'})")  # fmt: skip
    assert good_rec is not None and bad_rec is not None
    fixed = bisection.not_bisectable(good_rec.fingerprint, bad_rec.fingerprint)
    maps = []
    for run, rec in ((good_run, good_rec), (bad_run, bad_rec)):
        definition = rec.fingerprint.get("profile_def")
        if not isinstance(definition, dict):
            raise CompareError(f"run {run.run_id}: {rec.test_id} has no recorded profile definition (fingerprint "
                               "profile_def); bisect its profiles from the profile file instead")  # fmt: skip
        maps.append(_restore_paths(definition, Path(args.profiles_dir).resolve()))
    good, bad = maps
    for name in sorted(set(good.get("env") or {}) | set(bad.get("env") or {})):
        from pytest_specdec.core.redaction import REDACTED

        if REDACTED in ((good.get("env") or {}).get(name), (bad.get("env") or {}).get(name)):
            import os

            for m in (good, bad):
                if (m.get("env") or {}).get(name) == REDACTED:
                    if name in os.environ:
                        m["env"][name] = os.environ[name]
                    else:
                        del m["env"][name]
            if name not in os.environ:
                fixed.append(bisection.NotBisectable(f"env {name} (secret, redacted in the runs; export it to "
                                                     "include it)", "<redacted>", "<redacted>"))  # fmt: skip
    for m in (good, bad):
        m.pop("api_key", None)
    source = str(Path(args.profiles_dir).resolve() / "specdec.yaml")
    return good, bad, good_rec.profile, source, fixed, list(good.get("tolerances") or [])


def _restore_paths(value: Any, profiles_dir: Path) -> Any:
    """A recorded profile definition with ``<profiles>`` and ``<pytest_specdec>`` (``results.profile_definition``)
    made paths again: the profiles directory given, and this installed package."""
    if isinstance(value, str):
        package = str(Path(__file__).resolve().parents[1])
        return value.replace("<profiles>", str(profiles_dir)).replace("<pytest_specdec>", package)
    if isinstance(value, dict):
        return {k: _restore_paths(v, profiles_dir) for k, v in value.items()}
    if isinstance(value, list):
        return [_restore_paths(v, profiles_dir) for v in value]
    return value


def _cmd_trend(args: argparse.Namespace) -> int:
    from pytest_specdec.measure.results import ResultStore
    from pytest_specdec.report.trend import DEFAULT_FIELDS, series_from_runs, trend_lines

    runs = []
    try:
        for ref in args.runs or [args.results_dir]:
            path = Path(ref)
            files = ResultStore(path).list() if path.is_dir() else [path]
            runs += [read_run_file(p) for p in files]
    except CompareError as exc:
        print(f"ERROR: {exc}", file=sys.stderr)
        return EXIT_USAGE
    if len(runs) < 2 * args.min_size:
        print(f"ERROR: {len(runs)} run(s) found; trend needs at least {2 * args.min_size} (--min-size {args.min_size} "
              "each side of a change)", file=sys.stderr)  # fmt: skip
        return EXIT_USAGE
    try:
        series = series_from_runs(runs, args.metric or DEFAULT_FIELDS, args.profile)
        lines, worse = trend_lines(series, max_pvalue=args.max_pvalue, min_size=args.min_size)
    except ValueError as exc:
        print(f"ERROR: --metric: {exc}", file=sys.stderr)
        return EXIT_USAGE
    except ImportError as exc:
        print(f"ERROR: {exc}; pip install 'pytest-specdec[trend]'", file=sys.stderr)
        return EXIT_USAGE
    for line in lines:
        print(line)
    return EXIT_FINDINGS if worse else EXIT_OK


def _cmd_compare(args: argparse.Namespace) -> int:
    from pytest_specdec.cli.compare import compare_command

    return compare_command(
        args.base,
        args.current,
        tolerances=args.tolerance,
        force=args.force,
        compare_profile=args.compare_profile,
        noise_path=args.noise,
        results_dir=args.dir,
    )


def _cmd_merge(args: argparse.Namespace) -> int:
    from pytest_specdec.report.merge import merge_command

    if args.trend_runs < 1:
        print(f"ERROR: --trend-runs={args.trend_runs}: expected an integer >= 1", file=sys.stderr)
        return EXIT_USAGE
    fields = _numeric_fields()
    for name in args.metric or ():
        if name not in fields:
            print(f"ERROR: --metric={name}: not a metric field (available: {', '.join(fields)})", file=sys.stderr)
            return EXIT_USAGE
    return merge_command(
        args.paths,
        store_dir=args.store,
        markdown=args.markdown,
        trend=args.trend,
        trend_runs=args.trend_runs,
        metrics=args.metric,
        force=args.force,
    )


def _cmd_calibrate(args: argparse.Namespace) -> int:
    from pytest_specdec.core.errors import ServerError, ServerStartError
    from pytest_specdec.judge.noise import calibrate_noise, calibrate_proposal
    from pytest_specdec.judge.paired import paired_ratios
    from pytest_specdec.judge.tolerances import format_tolerances

    records: list[ResultRecord] = []
    if args.from_runs:
        try:
            for ref in args.from_runs:
                stored = read_run_file(Path(ref))
                records += [r for r in stored.results if not args.profile or r.profile == args.profile]
        except CompareError as exc:
            print(f"ERROR: {exc}", file=sys.stderr)
            return EXIT_USAGE
    else:
        if not args.profile_file or not args.profile or args.runs < 2:
            print("ERROR: calibrate needs PROFILE_FILE, --profile NAME and --runs K >= 2 (or --from RUN ...)",
                  file=sys.stderr)  # fmt: skip
            return EXIT_USAGE
        try:
            profile = load_profiles(args.profile_file).get(args.profile)
        except ProfileError as exc:
            print(f"ERROR: {exc}", file=sys.stderr)
            return EXIT_BAD_PROFILE
        vs = profile.thresholds.min_speedup.vs if profile.thresholds.min_speedup is not None else None
        try:
            reference = load_profiles(args.profile_file).get(vs) if vs else None
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
    out.write_text(json.dumps({"profile": name, "runs": len(records), "sigma_rel": noise}, indent=1) + "\n")
    print(f"# noise from {len(records)} run(s) -> {out} (--specdec-compare reads it: a shift must exceed 3 sigma)")
    for key, sigma in noise.items():
        print(f"#   {key}: sigma {sigma * 100:.2f}%")
    print(f"# proposed from {len(records)} run(s); paste into pytest's ini (or a profile's tolerances:)")
    print("specdec_tolerances =")
    for line in format_tolerances(proposal).split():
        print(f"    {line}")
    return EXIT_OK


def _calibration_run(profile: Profile, reference: Profile | None, log_dir: Path) -> ResultRecord:
    """One calibration run: a fresh server of ``profile`` measured ``repeats`` times, paired with ``reference`` (its
    ``min_speedup.vs``) when given, so the noise of the paired ratio is measured too.

    :raises ServerStartError, ServerError: a server failed.
    """
    from pytest_specdec.measure import pairing, runner

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


def _cmd_reap(args: argparse.Namespace) -> int:
    from pytest_specdec.serve.registry import reap

    where = Path(args.dir) / "servers"
    lines = reap(where)
    for line in lines:
        print(line)
    print(f"reap: {len(lines)} server(s) stopped ({where})")
    return EXIT_OK


def _cmd_check(args: argparse.Namespace) -> int:
    # Every diagnostic goes to stderr in one shape, ``SEVERITY: FILE:LINE: profiles.NAME.KEY: ...``; stdout only
    # says which profiles are fine. Exit codes: EXIT_OK, EXIT_FINDINGS, EXIT_BAD_PROFILE (README "Profiles").
    try:
        profiles = load_profiles(args.profile_file)
    except ProfileError as exc:
        for line in str(exc).splitlines():
            print(f"error: {line}", file=sys.stderr)
        return EXIT_BAD_PROFILE
    names = args.profile or sorted(profiles.profiles)
    unknown = [n for n in names if n not in profiles.profiles]
    if unknown:
        available = ", ".join(sorted(profiles.profiles))
        print(f"error: --profile={unknown[0]}: no such profile in {args.profile_file}"
              f"{did_you_mean(unknown[0], list(profiles.profiles))} (available: {available})",
              file=sys.stderr)  # fmt: skip
        return EXIT_BAD_PROFILE
    findings: list[Finding] = []
    for name in names:
        try:
            found = locate(run_preflight(profiles.get(name)), profiles)
        except ProfileError as exc:
            print(f"error: {exc}", file=sys.stderr)
            return EXIT_BAD_PROFILE
        findings += found
        if not found:
            print(f"profile {name}: ok")
    for line in format_findings(findings):
        print(line, file=sys.stderr)
    failing = {"error", "warning"} if args.strict else {"error"}
    return EXIT_FINDINGS if any(f.severity in failing for f in findings) else EXIT_OK


def _numeric_fields() -> list[str]:
    import dataclasses

    from pytest_specdec.core.records import RunMetrics

    return [f.name for f in dataclasses.fields(RunMetrics) if f.name != "accept_length_source"]


def _cmd_plot(args: argparse.Namespace) -> int:
    from pytest_specdec.measure.results import ResultStore, RunFile, read_run_file
    from pytest_specdec.report.plots import DEFAULT_TREND_METRICS, plot_trend

    fields = _numeric_fields()
    metrics = args.metric or list(DEFAULT_TREND_METRICS)
    for name in metrics:
        if name not in fields:
            print(f"ERROR: --metric={name}: not a metric field (available: {', '.join(fields)})", file=sys.stderr)
            return EXIT_USAGE
    thresholds: dict[str, float] = {}
    for spec in args.threshold:
        name, sep, raw = spec.partition("=")
        try:
            value = float(raw)
        except ValueError:
            value = None
        if not sep or value is None or name not in fields:
            print(f"ERROR: --threshold={spec}: expected FIELD=NUMBER with FIELD a metric field, "
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
                    print(f"ERROR: {ref}: no run files (*.json) in this directory", file=sys.stderr)
                    return EXIT_USAGE
                runs += [read_run_file(p) for p in files]
            else:
                runs.append(store.load(ref))
    except CompareError as exc:
        print(f"ERROR: {exc}", file=sys.stderr)
        return EXIT_USAGE
    unique = {run.run_id: run for run in runs}
    found = sorted({r.profile for run in unique.values() for r in run.results})
    for name in args.profile or ():
        if name not in found:
            close = difflib.get_close_matches(name, found, n=1)
            hint = f" (did you mean {close[0]!r}?)" if close else ""
            print(f"ERROR: --profile={name}: no such profile in {len(unique)} run(s){hint} (available: "
                  f"{', '.join(found)})", file=sys.stderr)  # fmt: skip
            return EXIT_USAGE
    try:
        out = plot_trend(list(unique.values()), Path(args.output), metrics=metrics, thresholds=thresholds,
                         profiles=args.profile)  # fmt: skip
    except (ValueError, ImportError) as exc:
        print(f"ERROR: {exc}", file=sys.stderr)
        return EXIT_USAGE
    shown = [run for run in unique.values() if any(not args.profile or r.profile in args.profile for r in run.results)]
    print(f"wrote {out} ({len(shown)} runs)")
    return EXIT_OK


def main(argv: Sequence[str] | None = None) -> int:
    """Run the CLI; returns the exit code.

    A usage error exits 2 the argparse way (usage, then ``<prog>: error: ...``), except ``compare``'s, which prints
    its usage and ``error: ...`` and returns 2 like the rest of its errors. Unrecognized arguments are reported
    with the usage of the subcommand they were given to.
    """
    argv = list(sys.argv[1:] if argv is None else argv)
    parser = _build_parser()
    try:
        args, extra = parser.parse_known_args(argv)
        if extra:
            getattr(args, "parser", parser).error(f"unrecognized arguments: {' '.join(extra)}")
    except _ShortUsageError as exc:
        print(exc.parser.format_usage().rstrip(), file=sys.stderr)
        print(f"error: {exc.message}", file=sys.stderr)
        return EXIT_USAGE
    return int(args.func(args))


if __name__ == "__main__":
    sys.exit(main())
