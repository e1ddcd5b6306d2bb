"""The plugin's command-line options and ini keys (:func:`register`), and the parsers of their values (``argparse``
``type=`` callables).

Each parser raises ``pytest.UsageError`` naming the option, the value and an example of a valid one.
"""

from __future__ import annotations

from collections.abc import Callable

import pytest

__all__ = ["percent", "positive_float", "positive_int", "profile_names", "register", "save_name", "sweep_points"]


def profile_names(value: str) -> str:
    """``--server-profile``: one or more comma-separated names (kept as given; an empty value is an error, since
    ``--server-profile=$PROFILE`` with PROFILE unset would otherwise skip every specdec test and pass; a name given
    twice too: pytest would run each test twice as ``[eagle3_0]``/``[eagle3_1]``, ids no stored run matches)."""
    names = [name.strip() for name in value.split(",") if name.strip()]
    if not names:
        raise pytest.UsageError(
            f"--server-profile={value}: no profile named; give NAME[,NAME...], e.g. --server-profile=eagle3 "
            "(leave the option out to skip specdec tests)"
        )
    twice = sorted({name for name in names if names.count(name) > 1})
    if twice:
        once = ",".join(dict.fromkeys(names))
        raise pytest.UsageError(
            f"--server-profile={value}: {', '.join(twice)} named more than once; name each profile once "
            f"(--server-profile={once}); to measure more, raise --specdec-repeats"
        )
    return value


def positive_float(option: str) -> Callable[[str], float]:
    """Seconds, > 0."""

    def parse(value: str) -> float:
        try:
            number = float(value)
        except ValueError:
            raise pytest.UsageError(f"{option}={value}: expected a number of seconds, e.g. {option}=900") from None
        if number <= 0:
            raise pytest.UsageError(f"{option}={value}: expected a positive number of seconds")
        return number

    return parse


def percent(option: str) -> Callable[[str], float]:
    """A percentage 0..100 (``5`` or ``5%``), returned as a fraction (0.05)."""

    def parse(value: str) -> float:
        try:
            number = float(value.strip().removesuffix("%"))
        except ValueError:
            raise pytest.UsageError(f"{option}={value}: expected a percentage, e.g. {option}=5") from None
        if not 0 <= number <= 100:
            raise pytest.UsageError(f"{option}={value}: expected a percentage from 0 to 100, e.g. {option}=5")
        return number / 100.0

    return parse


def sweep_points(value: str) -> list[dict[str, float]]:
    """``--specdec-sweep`` points (``sweep_spec.parse_sweep``; imported here, when the option is given, since every
    pytest run imports this module with the plugin)."""
    from pytest_specdec.run import sweep_spec

    try:
        return sweep_spec.parse_sweep(value)
    except ValueError as exc:
        raise pytest.UsageError(f"--specdec-sweep={value}: {exc}") from None


def save_name(value: str) -> str:
    """``--specdec-save``: a name for the run (``results.check_name``: no path characters, not ``latest``)."""
    from pytest_specdec.measure.results import check_name

    try:
        return check_name(value)
    except ValueError as exc:
        raise pytest.UsageError(f"--specdec-save={value}: {exc}") from None


def positive_int(option: str) -> Callable[[str], int]:
    """An integer >= 1."""

    def parse(value: str) -> int:
        try:
            number = int(value)
        except ValueError:
            raise pytest.UsageError(f"{option}={value}: expected a positive integer, e.g. {option}=3") from None
        if number < 1:
            raise pytest.UsageError(f"{option}={value}: expected a positive integer, e.g. {option}=3")
        return number

    return parse


def register(parser: pytest.Parser) -> None:
    """Add the ``specdec`` option group and the ini keys to ``parser`` (``pytest_addoption``). A table, kept as one
    function on purpose: it is the order ``pytest --help`` prints; what each option does is ``run.settings``'s."""
    group = parser.getgroup("specdec", "speculative-decoding performance regression tests (pytest-specdec)")
    group.addoption(
        "--server-profile",
        action="store",
        type=profile_names,
        default=None,
        metavar="NAME[,NAME...]",
        help="Profiles to run specdec tests against, one after another; a min_speedup reference arm measured "
        "interleaved runs beside its target (default: none; specdec tests skip)",
    )
    group.addoption(
        "--server-url",
        action="store",
        default=None,
        metavar="URL",
        help="Use this already-running server for every selected profile; it is never started or stopped by us",
    )
    group.addoption(
        "--specdec-profiles",
        action="store",
        default=None,
        metavar="PATH",
        help="Profile file (default: ini specdec_profiles, else specdec.yaml in the common directory of the test "
        "paths or a parent of it, up to the rootdir)",
    )
    group.addoption(
        "--specdec-startup-timeout",
        action="store",
        type=positive_float("--specdec-startup-timeout"),
        default=None,
        metavar="S",
        help="Seconds to wait for a server to become ready (default: the profile's startup_timeout_s, 900)",
    )
    group.addoption(
        "--specdec-check",
        action="store_true",
        default=False,
        help="Run preflight checks on the selected profiles (all when none selected) and the collected tests' "
        "specdec markers, launch nothing, and exit",
    )
    group.addoption(
        "--specdec-strict",
        action="store_true",
        default=False,
        help="Preflight warnings fail like errors",
    )
    group.addoption(
        "--specdec-dir",
        action="store",
        default=None,
        metavar="DIR",
        help="Where server logs and result files go, relative to the current directory (default: ini specdec_dir, "
        "else .specdec in the rootdir)",
    )
    group.addoption(
        "--specdec-repeats",
        action="store",
        type=positive_int("--specdec-repeats"),
        default=None,
        metavar="N",
        help="Measured phases per profile (default: the profile's workload.repeats, 3)",
    )
    group.addoption(
        "--specdec-save",
        action="store",
        type=save_name,
        default=None,
        metavar="NAME",
        help="Save the current run under NAME as well (.specdec/results/names/NAME names its run id), when every test "
        "of it is clean (completed, passed, every verdict passed); --specdec-compare=NAME compares against it. A "
        "name saved again moves to the new run. A session that names nothing (a run not clean, no specdec test run) "
        "fails, saying why",
    )
    group.addoption(
        "--specdec-compare",
        action="store",
        nargs="?",
        const="latest",
        default=None,
        metavar="NAME|RUN",
        help="Fail each test whose metrics regressed against stored results: against the run saved as NAME "
        "(--specdec-save), or a run id or file, or if unspecified per test the newest stored run in which it was "
        "clean (completed, passed, every verdict passed), or the reference that run passed against",
    )
    group.addoption(
        "--specdec-compare-missing",
        action="store",
        choices=("fail", "warn"),
        default="fail",
        help="A test without a baseline under --specdec-compare: 'fail' (default) fails it with the reason, 'warn' "
        "passes it with a warning (a new test's first night)",
    )
    group.addoption(
        "--specdec-compare-profile",
        action="store",
        default=None,
        metavar="NAME",
        help="Compare every test whose profile is of NAME's kind (with speculation, or without) against the stored "
        "results of profile NAME instead of its own (e.g. eagle3)",
    )
    group.addoption(
        "--specdec-undecided",
        action="store",
        choices=("fail", "warn"),
        default=None,
        help="A verdict still undecided at its budget (its interval holds the limit): 'fail' fails the test, "
        "'warn' (default) passes it with a warning; either way the summary counts it. Ini: specdec_undecided",
    )
    group.addoption(
        "--specdec-compare-force",
        action="store_true",
        default=False,
        help="Compare even when the workloads differ (prompt set, max tokens, concurrency, requests)",
    )
    group.addoption(
        "--specdec-sweep",
        action="store",
        type=sweep_points,
        default=None,
        metavar="PARAM=VALUES[;...]",
        help='Run each selected speculative profile at every point, one server per point, e.g. "num_steps=1..6" or '
        '"num_steps=1,2,4;concurrency=1,8" (num_steps, num_draft_tokens, eagle_topk, concurrency, request_rate; '
        "default: no sweep)",
    )
    group.addoption(
        "--specdec-sweep-baseline",
        action="store",
        default=None,
        metavar="NAME",
        help="Profile without speculation that sweep speedups are computed against, run with the sweep "
        "(default: a selected profile without speculation, if any)",
    )
    group.addoption(
        "--specdec-sweep-max-gap",
        action="store",
        type=percent("--specdec-sweep-max-gap"),
        default=0.05,
        metavar="PCT",
        help="Fail a sweep whose best point is shown to beat the profile's configured point by more than PCT "
        "percent of output tok/s (or paired speedup), beyond the spread of repeats and of server instances; "
        "otherwise undecided or passed (default: 5)",
    )
    group.addoption(
        "--specdec-sweep-plot",
        action="store",
        default=None,
        metavar="PATH",
        help="Where the sweep PNG goes (default: <specdec dir>/sweep-<run id>.png)",
    )
    group.addoption(
        "--specdec-position-plot",
        action="store",
        default=None,
        metavar="PATH",
        help="Write a PNG of acceptance per draft position (every speculative profile) to PATH (default: none)",
    )
    group.addoption(
        "--specdec-report",
        action="store",
        default=None,
        metavar="PATH",
        help="Also write every result with its fingerprint (the run-file JSON) to PATH (default: none)",
    )
    group.addoption(
        "--specdec-requests-out",
        action="store",
        default=None,
        metavar="PATH",
        help="Write every measured request to PATH as JSON lines: arrival, queue wait, TTFT, ITLs, E2E, tokens, "
        "accept counts, category, ok/error (default: none)",
    )
    group.addoption(
        "--specdec-markdown",
        action="store",
        default=None,
        metavar="PATH",
        help="Write a markdown summary to PATH (default: none; always appended to $GITHUB_STEP_SUMMARY when set)",
    )
    parser.addini(
        "specdec_tolerances",
        "Baseline-compare tolerances, one METRIC:TOL per line, e.g. output_tok_s:5% (default: built-in)",
        type="linelist",
        default=[],
    )
    parser.addini("specdec_profiles", "Profile file, relative to the rootdir (default: specdec.yaml)", default=None)
    parser.addini("specdec_dir", "Directory for server logs and results (default: .specdec)", default=None)
    parser.addini("specdec_undecided", "Undecided verdicts: fail or warn (default: warn)", default=None)
