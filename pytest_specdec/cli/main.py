"""Command line of pytest-specdec:

- ``check PROFILE_FILE [--profile NAME] [--strict]``: preflight, launches nothing (``cli.check``);
- ``compare BASE CURRENT [--tolerance METRIC:TOL ...] [--force] [--compare-profile NAME] [--noise FILE]
  [--results-dir DIR] [--fail-on-suspected] [--fail-on-missing]``: the baseline compare (``cli.compare``), decided
  as pytest decided; exit 1 on a regression, a threshold pytest failed in CURRENT, a test of CURRENT without
  measurement or errored before it measured, or an interrupted CURRENT;
- ``calibrate PROFILE_FILE --profile NAME [--runs K]`` (or ``--from RUN ...``): propose tolerances from the spread
  (``cli.calibrate``), exit 1 when an outlying run was left out or a field left out of the ini block (a row of it
  no tolerance below the cap decides), exit 4 when no block is proposed at all;
- ``trend [RUN ...] [--metric FIELD] [--profile NAME] [--results-dir DIR]``: change points over stored runs, exit 1
  on a worse one (``cli.trend``);
- ``plot [RUN ...] -o trend.png [--metric FIELD] [--threshold FIELD=VALUE] [--profile NAME] [--results-dir DIR]``:
  a trend PNG (``cli.plot``);
- ``merge PATH... [--results-dir DIR] [--markdown PATH] [--trend PNG] [--force]``: CI shards' runs -> one run
  (``cli.merge``);
- ``save RUN NAME [--force] [--results-dir DIR]``: name a stored run, as pytest's ``--specdec-save`` (``cli.save``);
- ``reap [--specdec-dir DIR]``: stop the recorded servers whose pytest is gone, and list them (``cli.reap``);
- ``bisect [PROFILE_FILE] --good A --bad B [--results-dir DIR]``: the differences that caused a regression, by delta
  debugging over launched probes (``cli.bisect``).

This module holds the parser and the dispatch; each subcommand's body is its own module. A directory of stored
runs is ``--results-dir`` everywhere (default ``.specdec/results``), the specdec directory ``--specdec-dir`` (as
pytest's option; default ``.specdec``).
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Callable, Sequence
from typing import Any, NoReturn

from pytest_specdec.cli.exits import EXIT_CLOSED_PIPE, EXIT_USAGE
from pytest_specdec.core.tolerances import DEFAULT_TOLERANCES, format_tolerances
from pytest_specdec.report.merge import DEFAULT_TREND_RUNS

__all__ = ["entry", "main"]


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


def _build_parser() -> argparse.ArgumentParser:
    """Every subcommand and its flags. A table, kept as one function on purpose: read top to bottom it is the
    command line's reference, in the order ``--help`` prints it; each subcommand's work lives in its own module."""
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
        "--specdec-dir",
        metavar="DIR",
        default=".specdec",
        help="the specdec directory, as pytest's --specdec-dir / ini specdec_dir (default: .specdec)",
    )
    reap.set_defaults(func=_cmd_reap)
    compare = sub.add_parser(
        "compare",
        help="compare two stored runs; exit 1 on a regression or a threshold pytest failed",
        description="Compare a specdec run with a baseline run (each a name given by save or --specdec-save, a run "
        "id, a run file, or 'latest'): fingerprint diff, then one row per metric, each "
        "decided as pytest decided it (ok, REGRESSED or undecided, at the design the run was judged with). Exit "
        "codes: 0 no regression; 1 a row REGRESSED, or a test of CURRENT recorded no measurement or errored before "
        "measuring (its server did not start), or CURRENT was interrupted, or with --fail-on-suspected an undecided "
        "row whose estimate is beyond its tolerance, or with --fail-on-missing a test without baseline or one of "
        "BASE not in CURRENT; 2 unusable input or nothing compared.",
        short_errors=True,
    )
    compare.add_argument("base", metavar="BASE", help="baseline: a name (save, --specdec-save), a run file, a run id "
                         "(or unique prefix), or 'latest'")  # fmt: skip
    compare.add_argument("current", metavar="CURRENT", help="current run: a run file, a run id, or 'latest'")
    compare.add_argument(
        "-t",
        "--tolerance",
        action="append",
        default=[],
        metavar="SPEC",
        help="Per-metric tolerance, e.g. output_tok_s:5%% accept_length:0.02 ttft_ms:10%%+5, or one prompt category's "
        "row: tpot_ms_p50[code]:30%% (repeatable; each one "
        "replaces that metric's tolerance for every test, the others stay as each run was judged: the tolerances "
        "stored with it, else its profile's, else the defaults: "
        + format_tolerances(DEFAULT_TOLERANCES).replace("%", "%%")
        + ")",
    )
    compare.add_argument("--force", action="store_true", help="Compare even when the workloads differ")
    compare.add_argument(
        "--compare-profile",
        metavar="NAME|CUR=BASE[,...]",
        help="Compare with another profile's results, as pytest's --specdec-compare-profile: NAME for every test of "
        "a profile of NAME's kind, with speculation or without (the others keep their own), or CUR=BASE pairs, e.g. "
        "eagle3-shifted-layers=eagle3 (default: each test with itself)",
    )
    compare.add_argument(
        "--noise",
        metavar="FILE",
        help="Calibrated noise for every test (written by 'calibrate', e.g. .specdec/noise/eagle3.json): its sigma "
        "is the baseline's per-repeat spread when fewer than 2 stored runs of the baseline exist (default: each "
        "profile's own noise/<profile>.json beside --results-dir when there is one, as pytest reads it; else the "
        "stored runs of the same fingerprint, else both runs' own repeats)",
    )
    compare.add_argument(
        "--fail-on-suspected",
        action="store_true",
        help="Exit 1 also when a row is undecided with its estimate beyond the tolerance (default: reported only)",
    )
    compare.add_argument(
        "--fail-on-missing",
        action="store_true",
        help="Exit 1 also when a test of CURRENT has no baseline, or a test of BASE is not in CURRENT (deselected, "
        "renamed, or errored before it measured in a run stored before run files listed those) (default: listed "
        "and counted only)",
    )
    compare.add_argument(
        "--results-dir",
        default=".specdec/results",
        metavar="DIR",
        help="Where run ids are looked up (default: .specdec/results)",
    )
    compare.set_defaults(func=_cmd_compare)
    save = sub.add_parser(
        "save",
        help="name a stored run (as pytest's --specdec-save NAME) for --specdec-compare=NAME",
        description="Point NAME at a stored run, as pytest's --specdec-save NAME does for the run it stores: "
        "--specdec-compare=NAME and compare's BASE then find it by that name (names resolve before run ids). A name "
        "saved again moves to the new run. The run must be clean (every test completed, passed, every verdict "
        "passed) unless --force. Exit 0 named, 1 refused (not clean), 2 bad input.",
    )
    save.add_argument("run", metavar="RUN", help="the run: a name, a run id (or unique prefix), a run file in "
                      "--results-dir, or 'latest' (the newest)")  # fmt: skip
    save.add_argument("name", metavar="NAME", help="the name, e.g. night-1 (no whitespace, none of \\/:*?<>|)")
    save.add_argument("--force", action="store_true", help="name a run that is not clean")
    save.add_argument("--results-dir", metavar="DIR", default=".specdec/results",
                      help="the results store (default: .specdec/results)")  # fmt: skip
    save.set_defaults(func=_cmd_save)
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
        "--results-dir",
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
        description="Propose per-metric relative tolerances from K separate runs of one profile (or from stored run "
        "files with --from): the least at which the compare passes an unchanged night of the measured noise, every "
        "row it judges statistically, 90% of the time (each of R rows at 1 - 10%/R), at the profile's budget against "
        "--stored-runs stored runs (at least 1%); prints an ini block for specdec_tolerances (none, exit 4, where "
        "no field has every row decided by a tolerance below 99.9%).",
    )
    calibrate.add_argument("profile_file", metavar="PROFILE_FILE", nargs="?", help="the specdec YAML file")
    calibrate.add_argument("--profile", metavar="NAME", help="the profile to rerun (with --from: the profile to "
                           "pool, needed when the runs hold more than one)")  # fmt: skip
    calibrate.add_argument("--runs", metavar="K", type=int, default=3, help="server starts (default: 3)")
    calibrate.add_argument(
        "--from",
        dest="from_runs",
        metavar="RUN",
        nargs="+",
        help="use 2 or more stored runs instead: each a run file, a name (save), a run id (or unique prefix) in "
        "--results-dir, or 'latest'; failed and interrupted tests are left out, undecided ones kept",
    )
    calibrate.add_argument("--results-dir", metavar="DIR", default=".specdec/results",
                           help="where --from's names and run ids are found (default: .specdec/results)")  # fmt: skip
    calibrate.add_argument("--log-dir", metavar="DIR", default=".specdec/calibrate", help="server logs")
    calibrate.add_argument("--stored-runs", metavar="K", type=int, default=10,
                           help="stored runs of the baseline the proposal is sized for (default: 10, the most a "
                           "compare pools; 1: the first nights, with the noise file)")  # fmt: skip
    calibrate.add_argument("--per-row", action="store_true",
                           help="size each row to pass 90%% of unchanged nights alone, not the night (a night of R "
                           "rows then passes them all about 0.9^R of the time)")  # fmt: skip
    calibrate.add_argument("--keep-outliers", action="store_true",
                           help="pool a run whose tok/s is an outlier against the other runs' (3 runs or more; "
                           "default: it is named, left out, and calibrate exits 1)")  # fmt: skip
    calibrate.add_argument(
        "--noise-out",
        metavar="PATH",
        help="where the measured noise goes, read by --specdec-compare for the profile "
        "(default: .specdec/noise/<profile>.json)",
    )
    calibrate.set_defaults(func=_cmd_calibrate)
    trend = sub.add_parser(
        "trend",
        help="find change points in a series of stored runs (where a drift or a step began)",
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
        "that reproduces each symptom (delta debugging, Zeller's ddmin): the exact symptom (accept length at "
        "temperature 0) first, then throughput with that cause on both sides; each cause with its measured effect, "
        "the launches and server-seconds spent. Ctrl-C, SIGTERM or --max-launches stop it with what is known. GOOD "
        "and BAD are two profiles of PROFILE_FILE, or, without PROFILE_FILE, two stored runs (run file, run id or "
        "unique prefix in --results-dir). Exit 0 when culprits were named, 1 when the regression did not reproduce "
        "here or nothing could be bisected, 2 on bad input, 3 when stopped before the end.",
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
    bisect.add_argument("--max-pairs", metavar="N", type=_at_least(2, "one pair has no spread to judge"), default=24,
                        help="pairs of phases after which an open throughput verdict is undecided, a probe "
                        "unresolved (default: 24; at least 2)")  # fmt: skip
    bisect.add_argument("--max-launches", metavar="N", type=int, default=None, help="launch at most N servers, "
                        "then stop and report what is known (default: no limit)")  # fmt: skip
    bisect.set_defaults(func=_cmd_bisect)
    return parser


def _at_least(low: int, why: str) -> Callable[[str], int]:
    """An argparse ``type``: an int of at least ``low``; below it, argparse's usage error with ``why`` (a fresh-user
    trial gave ``bisect --max-pairs 0`` and it launched servers that could never decide)."""

    def parse(text: str) -> int:
        value = int(text)  # not an int: argparse says "invalid parse value"
        if value < low:
            raise argparse.ArgumentTypeError(f"{value}: at least {low} ({why})")
        return value

    parse.__name__ = "int"  # argparse names the type in "invalid int value: 'abc'"
    return parse


# One function per subcommand: each imports its module only when that command runs, so ``--help`` stays fast.


def _cmd_check(args: argparse.Namespace) -> int:
    from pytest_specdec.cli.check import check_command

    return check_command(args)


def _cmd_plot(args: argparse.Namespace) -> int:
    from pytest_specdec.cli.plot import plot_command

    return plot_command(args)


def _cmd_reap(args: argparse.Namespace) -> int:
    from pytest_specdec.cli.reap import reap_command

    return reap_command(args)


def _cmd_compare(args: argparse.Namespace) -> int:
    from pytest_specdec.cli.compare import compare_command

    return compare_command(
        args.base,
        args.current,
        tolerances=args.tolerance,
        force=args.force,
        compare_profile=args.compare_profile,
        noise_path=args.noise,
        results_dir=args.results_dir,
        fail_on_suspected=args.fail_on_suspected,
        fail_on_missing=args.fail_on_missing,
    )


def _cmd_save(args: argparse.Namespace) -> int:
    from pytest_specdec.cli.save import save_command

    return save_command(args)


def _cmd_merge(args: argparse.Namespace) -> int:
    from pytest_specdec.cli.merge import merge_command

    return merge_command(
        args.paths,
        results_dir=args.results_dir,
        markdown=args.markdown,
        trend=args.trend,
        trend_runs=args.trend_runs,
        metrics=args.metric,
        force=args.force,
    )


def _cmd_calibrate(args: argparse.Namespace) -> int:
    from pytest_specdec.cli.calibrate import calibrate_command

    return calibrate_command(args)


def _cmd_trend(args: argparse.Namespace) -> int:
    from pytest_specdec.cli.trend import trend_command

    return trend_command(args)


def _cmd_bisect(args: argparse.Namespace) -> int:
    from pytest_specdec.cli.bisect import bisect_command

    return bisect_command(args)


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


def entry() -> int:
    """``python -m pytest_specdec``: :func:`main`; a reader that closed the pipe (``compare ... | head``) ends it
    quietly with :data:`~pytest_specdec.cli.exits.EXIT_CLOSED_PIPE` (141), not a traceback and 1, which is a verdict.
    The recipe of Python's docs (``signal``, "Note on SIGPIPE"): stdout pointed at devnull, so the exit's own flush
    does not raise again."""
    try:
        code = main()
        sys.stdout.flush()
    except BrokenPipeError:
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return EXIT_CLOSED_PIPE
    return code
