"""pytest hooks only: options, ini keys, the ``specdec`` marker, fixtures and the terminal summary.

The work is done by ``runner`` (launch, wait, measure), ``thresholds`` (verdicts) and ``report`` (lines); this module
wires them to pytest's hooks and fixtures.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import os
import pickle
import re
import time
from collections.abc import Callable, Generator, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

import pytest
from filelock import FileLock

from pytest_specdec import (
    benchmark,
    compare,
    discovery,
    hoststate,
    markdown,
    pairing,
    plots,
    registry,
    report,
    results,
    runner,
    schedule,
    server,
    sharing,
    sweep,
)
from pytest_specdec.errors import (
    CompareError,
    ProfileError,
    ServerError,
    ServerStartError,
    SpecdecError,
    SpecdecWarning,
)
from pytest_specdec.profiles import MinSpeedup, Profile, ProfileSet, Thresholds, load_profiles
from pytest_specdec.progress import PhaseProgress
from pytest_specdec.thresholds import Check, evaluate, merge_marker, overrides

T = TypeVar("T")
session_key = pytest.StashKey["SpecdecSession"]()
thresholds_key = pytest.StashKey[Thresholds]()
record_key = pytest.StashKey[results.ResultRecord]()
tolerances_key = pytest.StashKey[list[str]]()
_phases_key = pytest.StashKey[dict[str, int]]()

_SERVER_FIXTURES = ("specdec_server", "specdec_run", "specdec_profile")
_USER_PROPERTY = "specdec"
#: Per-threshold outcomes of a test (``thresholds.Verdict.outcomes``), joined to its record on the controller.
_CHECKS_PROPERTY = "specdec_checks"
#: user_properties entry listing what a test's marker changed in its profile's thresholds (shown in the summary).
_OVERRIDES_PROPERTY = "specdec_threshold_overrides"


def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("specdec", "speculative-decoding performance regression tests (pytest-specdec)")
    group.addoption(
        "--server-profile",
        action="store",
        default=None,
        metavar="NAME[,NAME...]",
        help="Profiles to run specdec tests against, one server alive at a time (default: none; specdec tests skip)",
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
        type=_positive_float("--specdec-startup-timeout"),
        default=None,
        metavar="S",
        help="Seconds to wait for a server to become ready (default: the profile's startup_timeout_s, 900)",
    )
    group.addoption(
        "--specdec-check",
        action="store_true",
        default=False,
        help="Run preflight checks on the selected profiles (all when none selected), launch nothing, and exit",
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
        type=_positive_int("--specdec-repeats"),
        default=None,
        metavar="N",
        help="Measured phases per profile (default: the profile's workload.repeats, 3)",
    )
    group.addoption(
        "--specdec-compare",
        action="store",
        nargs="?",
        const="latest",
        default=None,
        metavar="RUN_OR_PATH",
        help="Fail each test whose metrics regressed against stored results (default: per test, the newest "
        "stored run in which it passed; or a run id or file)",
    )
    group.addoption(
        "--specdec-compare-profile",
        action="store",
        default=None,
        metavar="NAME",
        help="Compare against the stored results of this profile instead of the test's own (e.g. eagle3)",
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
        type=_sweep_points,
        default=None,
        metavar="PARAM=VALUES[;...]",
        help='Run each selected speculative profile at every point, one server per point, e.g. "num_steps=1..6" or '
        '"num_steps=1,2,4;concurrency=1,8" (num_steps, num_draft_tokens, eagle_topk, concurrency; default: no sweep)',
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
        type=_percent("--specdec-sweep-max-gap"),
        default=0.05,
        metavar="PCT",
        help="Fail a sweep whose best point beats the profile's configured point by more than PCT percent of "
        "output tok/s, ties (overlapping repeat ranges) excepted (default: 5)",
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


def _positive_float(option: str):  # type: ignore[no-untyped-def]
    def parse(value: str) -> float:
        try:
            number = float(value)
        except ValueError:
            raise pytest.UsageError(f"{option}={value}: expected a number of seconds, e.g. {option}=900") from None
        if number <= 0:
            raise pytest.UsageError(f"{option}={value}: expected a positive number of seconds")
        return number

    return parse


def _percent(option: str):  # type: ignore[no-untyped-def]
    def parse(value: str) -> float:
        try:
            number = float(value.strip().removesuffix("%"))
        except ValueError:
            raise pytest.UsageError(f"{option}={value}: expected a percentage, e.g. {option}=5") from None
        if not 0 <= number <= 100:
            raise pytest.UsageError(f"{option}={value}: expected a percentage from 0 to 100, e.g. {option}=5")
        return number / 100.0

    return parse


def _sweep_points(value: str) -> list[dict[str, int]]:
    try:
        return sweep.parse_sweep(value)
    except ValueError as exc:
        raise pytest.UsageError(f"--specdec-sweep={value}: {exc}") from None


def _positive_int(option: str):  # type: ignore[no-untyped-def]
    def parse(value: str) -> int:
        try:
            number = int(value)
        except ValueError:
            raise pytest.UsageError(f"{option}={value}: expected a positive integer, e.g. {option}=3") from None
        if number < 1:
            raise pytest.UsageError(f"{option}={value}: expected a positive integer, e.g. {option}=3")
        return number

    return parse


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line(
        "markers",
        "specdec(min_accept_length=None, min_accept_rate=None, min_tok_s=None, max_ttft_ms=None, max_itl_ms=None, "
        "max_tpot_ms=None, min_speedup=None, tolerances=None): a speculative-decoding performance test, run once "
        "per --server-profile; thresholds override the profile's (latency ceilings apply to the p50; min_speedup="
        "{'vs': 'baseline', 'ratio': 1.1}); tolerances=['output_tok_s:5%'] for --specdec-compare. "
        "Example: @pytest.mark.specdec(min_accept_length=2.0, min_tok_s=100)",
    )
    for engine in ("reference", "sglang", "vllm"):
        config.addinivalue_line("markers", f"{engine}: added to specdec tests that run on a `server: {engine}` profile")
    session = SpecdecSession.from_config(config)
    config.stash[session_key] = session
    config.pluginmanager.register(session, "specdec-session")
    bridge = benchmark.BenchmarkBridge.from_config(config)
    if bridge is not None:
        config.pluginmanager.register(bridge, "specdec-benchmark")
    if session.selected and config.pluginmanager.hasplugin("xdist") and not hasattr(config, "workerinput"):
        config.pluginmanager.register(schedule.XdistSchedule(config), "specdec-xdist-schedule")


def pytest_unconfigure(config: pytest.Config) -> None:
    session = config.stash.get(session_key, None)
    if session is not None:
        del config.stash[session_key]
        config.pluginmanager.unregister(session)
    for name in ("specdec-benchmark", "specdec-xdist-schedule"):
        plugin = config.pluginmanager.get_plugin(name)
        if plugin is not None:
            config.pluginmanager.unregister(plugin)
    server.leftovers()  # an atexit-style last resort; the session-end sweep below reports


@pytest.hookimpl(wrapper=True, tryfirst=True)
def pytest_sessionfinish(session: pytest.Session) -> Generator[None, object, object]:
    # Outermost wrapper: session fixtures (our servers) are torn down inside, so whatever is still alive here leaked.
    result = yield
    left = server.leftovers(kill=True)
    if left:
        session.exitstatus = pytest.ExitCode.TESTS_FAILED
        tr = session.config.pluginmanager.get_plugin("terminalreporter")
        if tr is not None:
            pids = ", ".join(str(p.pid) for p in left)
            tr.write_line(f"specdec: server process(es) left after teardown, killed: pid {pids}", red=True)
    return result


def _profile_path(config: pytest.Config) -> tuple[Path, list[Path]]:
    """The profile file, and the directories searched when neither the option nor the ini key names one."""
    if config.option.specdec_profiles:
        return Path(os.path.abspath(config.invocation_params.dir / config.option.specdec_profiles)), []
    raw = config.getini("specdec_profiles")
    if raw:
        return (Path(raw) if Path(raw).is_absolute() else config.rootpath / raw), []
    start = discovery.args_ancestor(config.args, config.invocation_params.dir)
    found, looked = discovery.find_profile_file(start, config.rootpath, project_root=config.inipath is not None)
    return found or config.rootpath / discovery.DEFAULT_PROFILE_FILE, looked


def _selected(config: pytest.Config) -> list[str]:
    return [n.strip() for n in (config.option.server_profile or "").split(",") if n.strip()]


@dataclass(eq=False)  # registered as a plugin: pluggy needs it hashable
class SpecdecSession:
    """Per-run state: the profile file, the selected profiles, measurements, result records, the baseline run."""

    config: pytest.Config
    selected: list[str]
    profile_path: Path
    out_dir: Path
    profile_set: ProfileSet | None = None
    #: Directories searched for specdec.yaml (empty when an option or ini key named the file).
    profile_search: list[Path] = field(default_factory=list)
    runs: dict[str, runner.RunResult] = field(default_factory=dict)
    fingerprints: dict[str, dict[str, Any]] = field(default_factory=dict)
    records: list[results.ResultRecord] = field(default_factory=list)
    preflight_notes: list[str] = field(default_factory=list)
    baseline: results.RunFile | None = None
    baseline_paths: list[Path] = field(default_factory=list)
    compare_enabled: bool = False
    _loaded: dict[Path, results.RunFile] = field(default_factory=dict)
    tolerances: list[str] = field(default_factory=list)
    run_id: str = ""
    started: float = 0.0
    saved_path: Path | None = None
    check_lines: list[tuple[str, list[str]]] = field(default_factory=list)
    check_failed: bool = False
    sweep_lines: list[str] = field(default_factory=list)
    reaped: list[str] = field(default_factory=list)
    compared: dict[str, list[str]] = field(default_factory=dict)
    #: node id -> failure text of failed specdec tests (for the markdown summary).
    failures: dict[str, str] = field(default_factory=dict)
    #: node id -> (profile, what its marker changed in the profile's thresholds), for the summary.
    overrides: dict[str, tuple[str, list[str]]] = field(default_factory=dict)
    #: (profile, threshold verdict) -> the first test that failed with it; later tests refer to it.
    verdicts: dict[tuple[str, str], str] = field(default_factory=dict)
    sweep_table: list[str] = field(default_factory=list)
    sweep_plot: Path | None = None
    position_plot: Path | None = None
    position_plot_error: str = ""
    sweep_failed: bool = False
    #: Sweep lines that fail the run (no passing point; configured point too far below the best).
    sweep_red: list[str] = field(default_factory=list)
    report_path: Path | None = None
    markdown_paths: list[Path] = field(default_factory=list)
    #: (profile, reference profile) -> paired arms measured for min_speedup (``pairing.PairedArms``).
    pairs: dict[tuple[str, str], pairing.PairedArms] = field(default_factory=dict)
    #: (profile, reference profile) -> why the pair could not be measured (the speedup check fails with it).
    pair_errors: dict[tuple[str, str], str] = field(default_factory=dict)
    reference_servers: pairing.ReferenceServers | None = None
    #: How compares were judged (exact metrics, paired ratios), printed under the summary; a dict as ordered set.
    compare_notes: dict[str, None] = field(default_factory=dict)
    #: profile -> calibrated relative noise per field (``noise_for``).
    noise: dict[str, dict[str, float]] = field(default_factory=dict)
    #: profile -> its re-measured record (``confirm_record``); None when it could not be re-measured.
    confirmations: dict[str, results.ResultRecord | None] = field(default_factory=dict)
    #: profile -> its running server (the fixture's), for confirming measurements.
    servers: dict[str, runner.RunningServer] = field(default_factory=dict)
    #: The live ``specdec_server`` fixture: (FixtureDef, its request, profile name), to stop it after its last test.
    server_fixture: tuple[Any, Any, str] | None = None
    #: profile -> position of its last test in the collection, and node id -> position (``_last_test_of``).
    last_of: dict[str, int] | None = None
    positions: dict[str, int] = field(default_factory=dict)

    @classmethod
    def from_config(cls, config: pytest.Config) -> SpecdecSession:
        """Read options and ini; load and preflight the profile file when profiles are selected; load the baseline.

        :raises pytest.UsageError: unknown profile, broken profile file, preflight errors, unreadable baseline,
            bad tolerance.
        """
        trap = discovery.space_form_trap(
            config.invocation_params.args,
            config.invocation_params.dir,
            config.rootpath,
            discovery.args_ancestor(config.args, config.invocation_params.dir),
            "--specdec-dir",
        )
        if trap:
            raise pytest.UsageError(trap)
        if config.option.specdec_dir:  # command-line paths are relative to the current directory, ini ones to rootdir
            out_dir = Path(os.path.abspath(config.invocation_params.dir / config.option.specdec_dir))
        else:
            out_dir = config.rootpath / (config.getini("specdec_dir") or ".specdec")
        profile_path, searched = _profile_path(config)
        session = cls(config=config, selected=_selected(config), profile_path=profile_path, out_dir=out_dir)
        session.profile_search = searched
        session.started = time.time()
        if not hasattr(config, "workerinput"):
            session.reaped = registry.reap(out_dir / "servers")
        session.run_id = results.new_run_id(session.started)
        session.tolerances = list(config.getini("specdec_tolerances"))
        try:
            compare.parse_tolerances(session.tolerances)
        except ValueError as exc:
            raise pytest.UsageError(f"ini specdec_tolerances: {exc}") from None
        if config.option.specdec_check:
            session.load()
            session._check_only()
            return session
        if session.selected:
            session.load()
            session._expand_sweep()
            session._preflight()
        elif config.option.specdec_sweep:
            raise pytest.UsageError("--specdec-sweep: no profile selected; add --server-profile=NAME (e.g. eagle3)")
        ref = config.option.specdec_compare
        if ref == "latest":
            # Per test, the newest stored run in which that test passed (see _baseline_for).
            session.baseline_paths = list(reversed(session.store().list()))
            session.compare_enabled = True
        elif ref is not None:
            try:
                session.baseline = session.store().load(ref)
            except CompareError as exc:
                raise pytest.UsageError(f"--specdec-compare={ref}: {exc}") from None
            session.compare_enabled = True
        return session

    def baseline_for(self, test_id: str) -> tuple[results.RunFile, results.ResultRecord] | None:
        """The stored record to compare ``test_id`` with: from the run named by ``--specdec-compare=RUN``, or, with
        plain ``--specdec-compare``, from the newest run where that test passed (a regressed run never becomes the
        next baseline, and runs of other profiles are skipped)."""
        if self.baseline is not None:
            record = self.baseline.find(test_id)
            return (self.baseline, record) if record is not None else None
        for path in self.baseline_paths:
            run = self._loaded.get(path)
            if run is None:
                try:
                    run = self._loaded[path] = results.read_run_file(path)
                except CompareError:
                    continue
            record = run.find(test_id)
            if record is not None and record.outcome in ("passed", ""):
                return run, record
        return None

    def store(self) -> results.ResultStore:
        return results.ResultStore(self.out_dir / "results", current=self.run_id)

    def load(self) -> ProfileSet:
        if self.profile_search and not self.profile_path.is_file():
            raise pytest.UsageError(
                discovery.not_found_message(self.profile_path.name, self.profile_search, self.config.rootpath)
            )
        try:
            self.profile_set = load_profiles(self.profile_path)
        except ProfileError as exc:
            raise pytest.UsageError(str(exc)) from None
        url = self.config.option.server_url
        if url and not url.startswith(("http://", "https://")):
            raise pytest.UsageError(f"--server-url={url}: expected http://HOST:PORT, e.g. --server-url=http://127.0.0.1:30000")
        if url:
            self.profile_set = ProfileSet(
                path=self.profile_set.path,
                profiles={n: p.model_copy(update={"url": url}) for n, p in self.profile_set.profiles.items()},
            )
        for name in self.selected:
            try:
                self.profile_set.get(name)
            except ProfileError as exc:
                raise pytest.UsageError(str(exc)) from None
            try:
                compare.parse_tolerances(self.profile_set.profiles[name].tolerances)
            except ValueError as exc:
                raise pytest.UsageError(f"{self.profile_path}: profiles.{name}.tolerances: {exc}") from None
            ms = self.profile_set.profiles[name].thresholds.min_speedup
            if ms is not None and (ms.vs not in self.profile_set.profiles or ms.vs == name):
                available = ", ".join(n for n in sorted(self.profile_set.profiles) if n != name)
                raise pytest.UsageError(
                    f"{self.profile_path}: profiles.{name}.thresholds.min_speedup.vs: {ms.vs!r} is not another "
                    f"profile of this file (available: {available})"
                )
        return self.profile_set

    def _expand_sweep(self) -> None:
        """``--specdec-sweep``: replace the selected profiles by one derived profile per point (``eagle3@num_steps=2``,
        see ``sweep.expand_profiles``); preflight then checks every derived profile before anything launches."""
        points = self.config.option.specdec_sweep
        if not points:
            return
        assert self.profile_set is not None
        names = list(self.selected)
        base = self.config.option.specdec_sweep_baseline
        if base:
            try:
                baseline = self.profile_set.get(base)
            except ProfileError as exc:
                raise pytest.UsageError(str(exc).replace("--server-profile=", "--specdec-sweep-baseline=", 1)) from None
            if baseline.is_speculative:
                raise pytest.UsageError(
                    f"--specdec-sweep-baseline={base}: profile runs speculative decoding; name one without a "
                    "speculative: block"
                )
            if base not in names:
                names.append(base)
        try:
            profiles, self.selected = sweep.expand_profiles(self.profile_set.profiles, names, points)
        except ValueError as exc:
            raise pytest.UsageError(f"--specdec-sweep: {exc}") from None
        self.profile_set = ProfileSet(path=self.profile_set.path, profiles=profiles)

    def _finish_outputs(self, session: pytest.Session, run: results.RunFile) -> None:
        """Sweep table and plot, ``--specdec-report``, markdown summary. A sweep in which no point met its thresholds
        is a run-level failure."""
        option = self.config.option
        if option.specdec_sweep:
            points = sweep.sweep_records(self.records)
            if points:
                baselines = sweep.baseline_records(self.records, option.specdec_sweep_baseline)
                ok = sweep.thresholds_ok(self.records)
                best = sweep.best_points(points, thresholds_ok=ok)
                self.sweep_table = sweep.sweep_table(points, baselines=baselines, thresholds_ok=ok)
                assert self.profile_set is not None
                gap_lines, self.sweep_red = sweep.configured_point_lines(
                    points, self.profile_set.profiles, thresholds_ok=ok, max_gap=option.specdec_sweep_max_gap
                )
                self.sweep_table += gap_lines
                accept_floors = {self.profile(r.profile).thresholds.min_accept_length for r in points}
                plot_path = Path(option.specdec_sweep_plot or self.out_dir / f"sweep-{self.run_id}.png")
                try:
                    self.sweep_plot = plots.plot_sweep(
                        points,
                        plot_path,
                        baselines=baselines,
                        best=best,
                        thresholds_ok=ok,
                        accept_floor=accept_floors.pop() if len(accept_floors) == 1 else None,
                    )
                except ImportError as exc:
                    self.sweep_table.append(f"no plot: {exc}")
                if not best:
                    self.sweep_red = [line for line in self.sweep_table if line.startswith("no point")]
                if self.sweep_red:
                    self.sweep_failed = True
                    session.exitstatus = pytest.ExitCode.TESTS_FAILED
        if option.specdec_position_plot and any(r.metrics.get("accept_rate_at") for r in self.records):
            profiles = self.profile_set.profiles if self.profile_set is not None else {}
            floors = {name: p.thresholds.min_accept_rate_at or {} for name, p in profiles.items()}
            try:
                self.position_plot = plots.plot_positions(self.records, option.specdec_position_plot, floors=floors)
            except ImportError as exc:
                self.position_plot_error = str(exc)
        if option.specdec_report:
            self.report_path = report.write_json_report(run, Path(option.specdec_report))
        targets = markdown.markdown_targets(option.specdec_markdown, os.environ)
        if targets:
            lines = markdown.markdown_summary(
                self.records, self.failures, results_path=self.saved_path, sweep_lines=self.sweep_table
            )
            for path, append in targets:
                markdown.write_markdown(lines, path, append=append)
            self.markdown_paths = [path for path, _ in targets]

    def _preflight(self) -> None:
        from pytest_specdec.preflight import format_findings, run_preflight

        assert self.profile_set is not None
        strict = self.config.option.specdec_strict
        errors: list[str] = []
        for name in self.selected:
            errors.extend(self._run_inputs(self.profile_set.profiles[name]))
            findings = run_preflight(self.profile_set.profiles[name])
            bad = [f for f in findings if f.severity == "error" or (strict and f.severity == "warning")]
            if bad:
                errors.extend(format_findings(bad))
            rest = [f for f in findings if f not in bad]
            if rest:
                self.preflight_notes.extend(f"{name}: {line}" for line in format_findings(rest))
        if errors:
            raise pytest.UsageError("specdec preflight failed (nothing was launched):\n" + "\n".join(errors))

    def _run_inputs(self, profile: Profile) -> list[str]:
        """What the run itself needs besides the model files: the prompt set and the API key, checked before any
        launch so a 15-minute startup is not wasted on them."""
        from pytest_specdec.workload import load_prompts

        problems = []
        try:
            load_prompts(profile.workload.prompts, Path(profile.source or self.profile_path).parent)
        except ProfileError as exc:
            detail = str(exc).removeprefix("workload.prompts: ")
            problems.append(f"error: {self.profile_path}: profiles.{profile.name}.workload.prompts: {detail}")
        if profile.api_key_env and not os.environ.get(profile.api_key_env):
            problems.append(
                f"error: {self.profile_path}: profiles.{profile.name}.api_key_env: environment variable "
                f"{profile.api_key_env} is not set; export it, or remove api_key_env"
            )
        return problems

    def _check_only(self) -> None:
        """``--specdec-check``: preflight every selected profile (all when none is selected); launch nothing."""
        from pytest_specdec.preflight import format_findings, run_preflight

        assert self.profile_set is not None
        strict = self.config.option.specdec_strict
        for name in self.selected or sorted(self.profile_set.profiles):
            findings = run_preflight(self.profile_set.profiles[name])
            inputs = self._run_inputs(self.profile_set.profiles[name])
            self.check_lines.append((name, inputs + format_findings(findings) or ["no findings"]))
            self.check_failed = self.check_failed or bool(inputs)
            if any(f.severity == "error" or (strict and f.severity == "warning") for f in findings):
                self.check_failed = True

    def needs_measurement(self, name: str, vs: str | None) -> bool:
        """Whether profile ``name`` still has to be measured (or paired with ``vs``) in this process."""
        if name not in self.runs:
            return True
        return vs is not None and (name, vs) not in self.pairs and (name, vs) not in self.pair_errors

    def measure(self, server: runner.RunningServer, vs: str | None, *, shared: bool) -> None:
        """Measure ``server``'s profile (when not yet), paired with profile ``vs`` when given. A reference arm that
        cannot be measured is recorded in ``pair_errors`` (its speedup check fails with the reason); the target's
        own checks still run on phases measured alone.

        :raises SpecdecError: the target's server failed during its phases.
        """
        profile = server.profile
        n = self.repeats(profile)
        before = hoststate.snapshot()
        if vs is not None:
            arms = None
            try:
                arms = self._measure_pair(server, vs, n, shared=shared)
            except (ServerStartError, ServerError, ValueError) as exc:
                self.pair_errors[(profile.name, vs)] = f"reference arm {vs!r}: {exc}"
                if server.process is not None and not server.process.alive():  # type: ignore[attr-defined]
                    raise
            if arms is not None:
                self.pairs[(profile.name, vs)] = arms
                if profile.name not in self.runs:
                    self._store_run(server, runner.run_result(server, arms.target_measurements()), before)
                return
        if profile.name not in self.runs:
            self._store_run(server, runner.measure_repeats(server, n), before)

    def _store_run(self, server: runner.RunningServer, run: runner.RunResult, before: dict[str, Any]) -> None:
        self.runs[server.profile.name] = run
        fingerprint = results.build_fingerprint(server, run.prompt_hash)
        fingerprint["runner"] = hoststate.summarize(before, hoststate.snapshot())
        self.fingerprints[server.profile.name] = fingerprint

    def noise_for(self, name: str) -> dict[str, float]:
        """Calibrated relative noise of profile ``name`` (``calibrate`` writes ``<specdec dir>/noise/<name>.json``);
        empty when absent or unreadable."""
        if name not in self.noise:
            self.noise[name] = compare.read_noise(self.out_dir / "noise" / f"{name}.json")
        return self.noise[name]

    def confirm_record(self, item: pytest.Item, record: results.ResultRecord) -> results.ResultRecord | None:
        """A record of the test's profile measured again now (as many phases, or pairs, as the first time; once per
        profile and session), to confirm a suspected throughput/latency regression; None when its server is gone."""
        name = record.profile
        if name in self.confirmations:
            found = self.confirmations[name]
            return None if found is None else dataclasses.replace(found, test_id=record.test_id)
        server = self.servers.get(name)
        confirmed = None
        if server is not None:
            before = hoststate.snapshot()
            vs = (record.paired or {}).get("vs")
            arms = self.pairs.get((name, vs)) if vs else None
            try:
                if arms is not None:
                    if arms.pairs <= arms.first:
                        arms = self._confirm_pair((name, vs), arms)  # type: ignore[arg-type]
                    again = pairing.PairedArms(
                        arms.target_profile, arms.reference_profile, arms.mode,
                        arms.target[arms.first :], arms.reference[arms.first :], arms.pairs - arms.first,
                    )  # fmt: skip
                    measured, paired = again.target_measurements(), again.to_dict()
                else:
                    with _measure_lock(self.config):
                        measured, paired = runner.measure_repeats(server, self.repeats(server.profile)).measurements, {}
            except SpecdecError:
                measured = ()
            if measured:
                fingerprint = {**record.fingerprint, "runner": hoststate.summarize(before, hoststate.snapshot())}
                confirmed = results.ResultRecord.from_measurements(name, measured, fingerprint, paired=paired)
        self.confirmations[name] = confirmed
        return None if confirmed is None else dataclasses.replace(confirmed, test_id=record.test_id)

    def _measure_pair(self, server: runner.RunningServer, vs: str, pairs: int, *, shared: bool) -> pairing.PairedArms:
        """:raises ServerStartError, ServerError: a server failed; ``ValueError``: bracketed pairing is impossible."""
        profile = server.profile
        reference = self.profile(vs)
        if self.reference_servers is None:
            self.reference_servers = pairing.ReferenceServers(
                self.out_dir / "logs", startup_timeout_s=self.config.option.specdec_startup_timeout
            )
        refs = self.reference_servers
        if pairing.pairing_mode(profile) == "interleaved":
            return pairing.measure_interleaved(server, refs.get(reference), pairs)
        if shared or server.process is None:
            raise ValueError(
                "bracketed pairing restarts this profile's server, which is shared with other xdist workers or "
                "given by URL; run without -n, or set pairing: interleaved in the profile if both servers fit"
            )
        timeout = self.config.option.specdec_startup_timeout
        return pairing.measure_bracketed(
            server,
            pairs,
            start_reference=lambda: refs.start_once(reference),
            restart_target=lambda: server.restart(startup_timeout_s=timeout),
        )

    def load_shared(self, path: Path) -> None:
        """Take what a sibling xdist worker measured for a profile (``save_shared``)."""
        loaded = _load_shared_run(path)
        if loaded is None:
            return
        name, run, fingerprint, pairs, errors = loaded
        self.runs.setdefault(name, run)
        self.fingerprints.setdefault(name, fingerprint)
        for key, arms in pairs.items():
            self.pairs.setdefault(key, arms)
        for key, error in errors.items():
            self.pair_errors.setdefault(key, error)

    def save_shared(self, path: Path, name: str) -> None:
        pairs = {k: v for k, v in self.pairs.items() if k[0] == name}
        errors = {k: v for k, v in self.pair_errors.items() if k[0] == name}
        _save_shared_run(path, (name, self.runs[name], self.fingerprints[name], pairs, errors))

    def stop_reference_servers(self) -> None:
        if self.reference_servers is not None:
            self.reference_servers.stop()

    def speedup_check(self, item: pytest.Item, name: str, ms: MinSpeedup) -> Check:
        """The ``min_speedup`` check of profile ``name`` on its paired arms: a median ratio below the floor is
        re-measured (as many pairs again) before it can fail; below but not significant warns. Not measured fails
        with the reason (never a silent pass)."""
        key = (name, ms.vs)
        arms = self.pairs.get(key)
        if arms is None:
            reason = self.pair_errors.get(key, f"profile {ms.vs!r} was not measured with {name!r}")
            text = f"speedup vs {ms.vs}: not measured: {reason}"
            return Check("min_speedup", f"speedup vs {ms.vs}", ">=", ms.ratio, None, "x", False, text=text)
        confirmable = arms.pairs <= arms.first and name in self.servers
        judged = pairing.judge_speedup(
            arms.ratios(), ms.ratio, vs=ms.vs, mode=arms.mode, first=arms.first, confirmable=confirmable
        )
        if judged.verdict == "suspected":
            arms = self._confirm_pair(key, arms)
            judged = pairing.judge_speedup(
                arms.ratios(), ms.ratio, vs=ms.vs, mode=arms.mode, first=arms.first, confirmable=False
            )
        _replace_record(item, paired={**arms.to_dict(), "speedup": judged.line(), "verdict": judged.verdict})
        if judged.verdict == "not significant":
            item.warn(SpecdecWarning(f"{judged.line()}: below the floor, not significant; not failed"))
        return judged.check()

    def _confirm_pair(self, key: tuple[str, str], arms: pairing.PairedArms) -> pairing.PairedArms:
        """``arms`` extended by as many pairs measured again (on failure to re-measure, ``arms`` unchanged and the
        reason recorded in ``pair_errors``)."""
        server = self.servers[key[0]]
        with _measure_lock(self.config) as shared_file:
            try:
                count = max(arms.first, pairing.CONFIRM_TOTAL_PAIRS - arms.first)
                more = self._measure_pair(server, key[1], count, shared=shared_file is not None)
            except (ServerStartError, ServerError, ValueError) as exc:
                self.pair_errors[key] = f"confirming measurement failed: {exc}"
                return arms
        self.pairs[key] = arms = arms.extend(more)
        return arms

    def profile(self, name: str) -> Profile:
        assert self.profile_set is not None
        return self.profile_set.profiles[name]

    def repeats(self, profile: Profile) -> int:
        return int(self.config.option.specdec_repeats or profile.workload.repeats)

    # -- hooks (this object is registered as a plugin) --

    def pytest_report_header(self, config: pytest.Config) -> list[str] | None:
        reaped = [f"specdec: {line}" for line in self.reaped]
        if not self.selected:
            return reaped or None
        lines = reaped + [
            f"specdec: profiles {', '.join(self.selected)} from {self.profile_path}; logs/results in {self.out_dir}"
        ]
        if self.baseline is not None:
            lines.append(f"specdec: comparing against run {self.baseline.run_id}")
        elif self.compare_enabled:
            lines.append(
                f"specdec: comparing each test against the newest of {len(self.baseline_paths)} stored run(s) "
                f"in which it passed ({self.out_dir / 'results'})"
            )
        lines += [f"specdec preflight: {line}" for line in self.preflight_notes]
        return lines

    @pytest.hookimpl(tryfirst=True)
    def pytest_collection(self, session: pytest.Session) -> bool | None:
        return True if self.config.option.specdec_check else None

    @pytest.hookimpl(tryfirst=True)
    def pytest_runtestloop(self, session: pytest.Session) -> bool | None:
        return True if self.config.option.specdec_check else None

    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        # Runs on the controller under xdist too: records travel in user_properties.
        if report.when != "call" and not (report.when == "setup" and report.outcome != "passed"):
            return
        checks = {
            str(k): str(v)
            for name, value in report.user_properties
            if name == _CHECKS_PROPERTY
            for k, v in json.loads(str(value)).items()
        }
        for name, value in report.user_properties:
            if name == _USER_PROPERTY:
                record = results.ResultRecord.from_dict(json.loads(str(value)))
                self.records.append(dataclasses.replace(record, outcome=report.outcome, checks=checks))
                if report.failed:
                    self.failures[report.nodeid] = report.longreprtext
            elif name == _OVERRIDES_PROPERTY:
                profile, changed = json.loads(str(value))
                self.overrides[report.nodeid] = (str(profile), [str(c) for c in changed])

    @pytest.hookimpl(tryfirst=True)
    def pytest_sessionfinish(self, session: pytest.Session) -> None:
        if self.config.option.specdec_check:
            session.exitstatus = pytest.ExitCode.TESTS_FAILED if self.check_failed else pytest.ExitCode.OK
            return
        if hasattr(self.config, "workerinput"):
            return
        tmp_factory = getattr(self.config, "_tmp_path_factory", None)  # as xdist's workermanage.py reads it
        if tmp_factory is not None and self.config.pluginmanager.hasplugin("xdist"):
            self.sweep_lines = sharing.sweep_shared(tmp_factory.getbasetemp())
            if self.sweep_lines:
                session.exitstatus = pytest.ExitCode.TESTS_FAILED
        if not self.records:
            return
        run = results.RunFile(
            run_id=self.run_id, started=self.started, machine=results.machine_info(), results=tuple(self.records)
        )
        self.saved_path = self.store().save(run)
        self._finish_outputs(session, run)

    def pytest_terminal_summary(self, terminalreporter: Any) -> None:
        if self.check_lines:
            for name, lines in self.check_lines:
                terminalreporter.write_sep("-", f"specdec check: {name}")
                for line in lines:
                    terminalreporter.write_line(line)
            verdict = "FAILED" if self.check_failed else "passed"
            terminalreporter.write_line(
                f"specdec check {verdict}: {len(self.check_lines)} profile(s) from {self.profile_path}; "
                "nothing launched",
                red=self.check_failed,
                green=not self.check_failed,
            )
        for line in self.sweep_lines:
            terminalreporter.write_line(f"specdec: {line}", red=True)
        if not self.records:
            self._write_notes(terminalreporter)
            return
        terminalreporter.write_sep("=", "specdec summary")
        rows = [(r.test_id, r.profile, r.metrics, r.outcome) for r in self.records]
        for line in report.summary_lines(rows):
            terminalreporter.write_line(line)
        for line in dict.fromkeys(
            f"specdec {r.profile}: {r.paired['speedup']}" for r in self.records if r.paired.get("speedup")
        ):
            terminalreporter.write_line(line)
        for line in report.cycle_lines(self.records):
            terminalreporter.write_line(line)
        for line in report.definition_lines(self.records):
            terminalreporter.write_line(line)
        by_category = report.category_lines(rows)
        if by_category:
            terminalreporter.write_sep("-", "specdec accept length by prompt category (requests)")
            for line in by_category:
                terminalreporter.write_line(line)
        by_position = report.position_lines(rows)
        if by_position:
            terminalreporter.write_sep("-", "specdec acceptance by draft position")
            terminalreporter.write_line(report.POSITION_LEGEND)
            for line in by_position:
                terminalreporter.write_line(line)
        self._write_notes(terminalreporter)
        for run_id, tests in self.compared.items():
            terminalreporter.write_line(f"specdec compare: {len(tests)} test(s) compared with stored run {run_id}")
        for note in self.compare_notes:
            terminalreporter.write_line(f"specdec compare: {note}")
        if self.saved_path is not None:
            terminalreporter.write_sep("-", f"specdec results: {self.saved_path}")
        if self.sweep_table:
            terminalreporter.write_sep("=", "specdec sweep")
            for line in self.sweep_table:
                terminalreporter.write_line(line, red=line in self.sweep_red)
            if self.sweep_plot is not None:
                terminalreporter.write_sep("-", f"specdec sweep plot: {self.sweep_plot}")
        if self.position_plot is not None:
            terminalreporter.write_sep("-", f"specdec position plot: {self.position_plot}")
        elif self.position_plot_error:
            terminalreporter.write_line(f"specdec: no position plot: {self.position_plot_error}", red=True)
        if self.report_path is not None:
            terminalreporter.write_sep("-", f"specdec report: {self.report_path}")
        for path in self.markdown_paths:
            terminalreporter.write_sep("-", f"specdec markdown: {path}")

    def _write_notes(self, terminalreporter: Any) -> None:
        """Preflight warnings (also in the header, which scrolls away) and marker overrides of profile thresholds."""
        for line in self.preflight_notes:
            terminalreporter.write_line(f"specdec preflight: {line}", yellow=True)
        measured = {r.test_id for r in self.records}
        for nodeid, (profile, changed) in self.overrides.items():
            if nodeid not in measured:  # its setup failed: no threshold was checked
                continue
            test = nodeid.split("::", 1)[-1]
            terminalreporter.write_line(f"specdec: {test}: marker overrides profile {profile}: {', '.join(changed)}")


def pytest_itemcollected(item: pytest.Item) -> None:
    # Tests that use the server are specdec tests, so `-m specdec` selects them even without the marker.
    names = getattr(item, "fixturenames", ())
    if any(n in names for n in _SERVER_FIXTURES) and item.get_closest_marker("specdec") is None:
        item.add_marker("specdec")


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    # `-m "specdec and vllm"` selects the tests that run on vLLM profiles (likewise sglang, reference).
    session = config.stash.get(session_key, None)
    if session is None or session.profile_set is None:
        return
    units: dict[str, str] = {}
    for item in items:
        name = getattr(getattr(item, "callspec", None), "params", {}).get("specdec_profile")
        if name:
            profile = session.profile(name)
            item.add_marker(profile.server)
            units[item.nodeid] = schedule.unit_of(name, exclusive=profile.exclusive and profile.url is None)
    worker = getattr(config, "workerinput", {}).get("workerid")
    tmp_factory = getattr(config, "_tmp_path_factory", None)  # as xdist's workermanage.py reads it
    if worker and units and tmp_factory is not None:
        # The controller's scheduler groups by these units (schedule.py): one worker per server.
        schedule.write_units(tmp_factory.getbasetemp().parent, worker, units)


@pytest.hookimpl(wrapper=True)
def pytest_fixture_setup(
    fixturedef: pytest.FixtureDef[Any], request: pytest.FixtureRequest
) -> Generator[None, Any, Any]:
    result = yield
    if fixturedef.argname == "specdec_server":
        session = request.config.stash.get(session_key, None)
        if session is not None:
            session.server_fixture = (fixturedef, request, result.profile.name)
    return result


@pytest.hookimpl(wrapper=True)
def pytest_runtest_teardown(item: pytest.Item, nextitem: pytest.Item | None) -> Generator[None, object, object]:
    result = yield
    # Stop a profile's server right after its last test (in collection order), not at the end of the session: the
    # tests that follow may not need it, and under xdist another worker may be waiting to start the next server.
    session = item.config.stash.get(session_key, None)
    if session is not None and session.server_fixture is not None and nextitem is not None:
        fixturedef, request, name = session.server_fixture
        if fixturedef.cached_result is not None and _last_test_of(item, name):
            session.server_fixture = None
            fixturedef.finish(request)  # type: ignore[arg-type]
    return result


def _last_test_of(item: pytest.Item, profile: str) -> bool:
    """Whether no test after ``item`` in the session's collection order runs on ``profile``."""
    state: SpecdecSession = item.config.stash[session_key]
    if state.last_of is None:  # computed once: the collection does not change during the run
        state.last_of, state.positions = {}, {}
        for i, other in enumerate(item.session.items):
            state.positions[other.nodeid] = i
            name = getattr(getattr(other, "callspec", None), "params", {}).get("specdec_profile")
            if name:
                state.last_of[name] = i
    position = state.positions.get(item.nodeid)
    return position is not None and position >= state.last_of.get(profile, -1)


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    uses_server = any(n in metafunc.fixturenames for n in _SERVER_FIXTURES)
    marked = metafunc.definition.get_closest_marker("specdec") is not None
    if not (uses_server or marked):
        return
    if marked and "specdec_run" not in metafunc.fixturenames:
        # A marked test with thresholds needs a measurement even if it does not ask for one.
        metafunc.fixturenames.append("specdec_run")
    if "specdec_profile" not in metafunc.fixturenames:
        metafunc.fixturenames.append("specdec_profile")
    session = metafunc.config.stash[session_key]
    names: list[str | None] = list(session.selected) or [None]
    ids = [n or "no-profile" for n in names]
    metafunc.parametrize("specdec_profile", names, indirect=True, scope="session", ids=ids)


@pytest.fixture(scope="session")
def specdec_profile(request: pytest.FixtureRequest) -> Profile:
    """The profile (``pytest_specdec.profiles.Profile``) this test runs against, one of ``--server-profile``."""
    name = request.param
    if name is None:
        pytest.skip("specdec: no --server-profile given (e.g. pytest -m specdec --server-profile=eagle3)")
    return request.config.stash[session_key].profile(name)


@pytest.fixture(scope="session")
def specdec_server(
    specdec_profile: Profile, request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[runner.RunningServer]:
    """The profile's server, started once per session and ready to generate (``runner.RunningServer``).

    Ready means ``/health`` 200 *and* a real 1-token generate. Torn down (whole process tree) right after the
    profile's last test, or at the end of the session; its supervisor stops it if pytest dies first. Under
    pytest-xdist the profile's tests go to one worker (``schedule``); a server is still shared if two workers need
    it (the last one out tears it down).
    """
    session: SpecdecSession = request.config.stash[session_key]
    config = request.config

    def start(on_launch: Callable[[Any], None] | None = None) -> runner.RunningServer:
        progress = _Progress(config, specdec_profile.name)
        try:
            return runner.start_server(
                specdec_profile,
                log_dir=session.out_dir / "logs",
                startup_timeout_s=config.option.specdec_startup_timeout,
                on_progress=progress,
                on_launch=on_launch,
            )
        finally:
            progress.done()

    if not hasattr(config, "workerinput") or specdec_profile.url is not None:
        server = _or_fail(start)
        try:
            yield server
        finally:
            session.servers.pop(specdec_profile.name, None)
            session.stop_reference_servers()
            server.stop()
        return
    started: list[runner.RunningServer] = []

    def start_process(on_launch: Callable[[Any], None]) -> Any:
        started.append(start(on_launch))
        return started[0].process

    root = tmp_path_factory.getbasetemp().parent
    budget = config.option.specdec_startup_timeout or specdec_profile.startup_timeout_s
    sharer = sharing.shared_server(specdec_profile.name, root, start_process)
    shared = _or_fail(sharer.__enter__)
    try:
        # The worker that launched it keeps its handle; the others attach by URL. Teardown is shared_server's job.
        yield started[0] if started else _or_fail(
            lambda: runner.attach(specdec_profile, shared.base_url, budget_s=budget)
        )
    finally:
        session.servers.pop(specdec_profile.name, None)
        session.stop_reference_servers()
        sharer.__exit__(None, None, None)


def _or_fail(call: Callable[[], T]) -> T:
    """Run ``call``; our errors become one clean pytest failure (message, cause, log path and tail), not a
    traceback through the plugin. In a session fixture pytest caches it: one launch, every dependent test ERRORs."""
    message = None
    try:
        return call()
    except SpecdecError as exc:
        message = str(exc)
        tail = getattr(exc, "log_tail", "")
        if tail and tail not in message:
            message += "\n" + tail
    pytest.fail(message, pytrace=False)


@pytest.fixture
def specdec_run(specdec_profile: Profile, request: pytest.FixtureRequest) -> runner.RunResult:
    """The profile's workload, measured ``repeats`` times once per session and profile (``runner.RunResult``:
    ``.metrics`` is the per-metric median over repeats — output_tok_s, accept_length, accept_rate, TTFT/ITL/TPOT/e2e
    percentiles in ms; ``.measurements`` the repeats). When a ``min_speedup`` applies, the repeats are paired with
    phases of the reference profile measured close in time (``pairing.py``). Marker and profile thresholds, and the
    baseline compare when ``--specdec-compare`` is given, are checked after the test body. The server
    (``specdec_server``) is started or attached only when no measurement of the profile exists yet in this session
    (under xdist: in any worker)."""
    session: SpecdecSession = request.config.stash[session_key]
    profile = specdec_profile
    item = request.node
    vs = _speedup_vs(item, session)
    if session.needs_measurement(profile.name, vs):
        with _measure_lock(request.config) as shared_file:
            path = shared_file(profile.name) if shared_file else None
            if path is not None:
                session.load_shared(path)
        if session.needs_measurement(profile.name, vs):
            specdec_server: runner.RunningServer = request.getfixturevalue("specdec_server")  # launch only now
            session.servers[profile.name] = specdec_server
            with _measure_lock(request.config) as shared_file:
                path = shared_file(profile.name) if shared_file else None
                if path is not None:
                    session.load_shared(path)  # measured by a sibling worker meanwhile?
                if session.needs_measurement(profile.name, vs):
                    _or_fail(lambda: session.measure(specdec_server, vs, shared=path is not None))
                    if path is not None:
                        session.save_shared(path, profile.name)
        run = session.runs[profile.name]
        for message in dict.fromkeys([*run.cross_checks, *run.client_checks, *run.log_warnings]):
            # Counters disagreeing with the client (a metrics bug, not a regression), or a log-level warning.
            request.node.warn(SpecdecWarning(f"profile {profile.name}: {message}"))
    run = session.runs[profile.name]
    if "specdec_server" in request.fixturenames:  # already set up for this test: no launch
        session.servers[profile.name] = request.getfixturevalue("specdec_server")
    arms = session.pairs.get((profile.name, vs)) if vs else None
    fingerprint = session.fingerprints[profile.name]
    record = results.ResultRecord.from_measurements(
        item.nodeid, run.measurements, fingerprint, paired=arms.to_dict() if arms is not None else None
    )
    item.stash[record_key] = record
    item.user_properties.append((_USER_PROPERTY, json.dumps(record.to_dict(), default=str)))
    item.user_properties.extend(report.junit_properties(record.metrics))  # JUnit <property name="specdec_...">
    benchmark.record(request, run.measurements, fingerprint)
    return run


def _item_thresholds(item: pytest.Item, session: SpecdecSession) -> Thresholds | None:
    """The test's thresholds (profile merged with its marker; ``pytest_runtest_setup`` stores them)."""
    found = item.stash.get(thresholds_key, None)
    if found is not None:
        return found
    name = getattr(getattr(item, "callspec", None), "params", {}).get("specdec_profile")
    return session.profile(name).thresholds if name else None


def _speedup_vs(item: pytest.Item, session: SpecdecSession) -> str | None:
    """The profile this test's ``min_speedup`` is judged against, or None."""
    thresholds = _item_thresholds(item, session)
    return thresholds.min_speedup.vs if thresholds is not None and thresholds.min_speedup is not None else None


def _replace_record(item: pytest.Item, **changes: Any) -> None:
    """Update the test's result record (stash and the user property the controller reads)."""
    record = dataclasses.replace(item.stash[record_key], **changes)
    item.stash[record_key] = record
    item.user_properties[:] = [
        (k, json.dumps(record.to_dict(), default=str) if k == _USER_PROPERTY else v) for k, v in item.user_properties
    ]


@contextlib.contextmanager
def _measure_lock(config: pytest.Config) -> Iterator[Callable[[str], Path] | None]:
    """Under xdist, workers share servers: one measured phase at a time, and each profile is measured once for all
    workers (the first one measures, the others read its result). Yields the per-profile result file namer, or None
    without xdist. Every measurement goes through here, so it also shows the measured-phase status line."""
    status = _MeasureStatus(config)
    token = runner.phase_watcher.set(status)
    try:
        if not hasattr(config, "workerinput"):
            yield None
            return
        root = config._tmp_path_factory.getbasetemp().parent  # type: ignore[attr-defined]  # as xdist's workermanage
        with FileLock(str(root / "specdec-measure.lock")):
            yield lambda name: root / f"specdec-run-{re.sub(r'[^A-Za-z0-9_.@=-]', '_', name)}.pickle"
    finally:
        runner.phase_watcher.reset(token)
        status.done()


def _load_shared_run(path: Path) -> Any:
    if not path.is_file():
        return None
    with path.open("rb") as fh:
        return pickle.load(fh)  # written by a sibling worker, _save_shared_run


def _save_shared_run(path: Path, data: object) -> None:
    tmp = path.with_suffix(".tmp")
    with tmp.open("wb") as fh:
        pickle.dump(data, fh)
    os.replace(tmp, path)


def pytest_runtest_setup(item: pytest.Item) -> None:
    marker = item.get_closest_marker("specdec")
    if marker is None:
        return
    if marker.args:
        pytest.fail(
            f"@pytest.mark.specdec takes keyword arguments only, got positional {marker.args!r}; "
            "e.g. @pytest.mark.specdec(min_accept_length=2.0)",
            pytrace=False,
        )
    kwargs = dict(marker.kwargs)
    tolerances = kwargs.pop("tolerances", None)
    profile_param = getattr(getattr(item, "callspec", None), "params", {}).get("specdec_profile")
    session: SpecdecSession = item.config.stash[session_key]
    base = session.profile(profile_param).thresholds if profile_param else Thresholds()
    error = None
    try:
        item.stash[thresholds_key] = merged = merge_marker(base, kwargs)
        vs = merged.min_speedup.vs if merged.min_speedup is not None else None
        if vs is not None and session.profile_set is not None and vs not in session.profile_set.profiles:
            available = ", ".join(sorted(session.profile_set.profiles))
            error = f"@pytest.mark.specdec: min_speedup vs {vs!r}: no such profile in {session.profile_path} " + (
                f"(available: {available})"
            )
    except ValueError as exc:
        error = f"@pytest.mark.specdec: {exc}"
    else:
        changed = overrides(base, item.stash[thresholds_key]) if profile_param else []
        if changed:
            item.user_properties.append((_OVERRIDES_PROPERTY, json.dumps([profile_param, changed])))
    if tolerances is not None and error is None:
        try:
            compare.parse_tolerances(tolerances)
            item.stash[tolerances_key] = [tolerances] if isinstance(tolerances, str) else list(tolerances)
        except ValueError as exc:
            error = f"@pytest.mark.specdec(tolerances=...): {exc}"
    if error is not None:
        pytest.fail(error, pytrace=False)


@pytest.hookimpl(wrapper=True)
def pytest_runtest_call(item: pytest.Item) -> Generator[None, object, object]:
    result = yield
    record = item.stash.get(record_key, None)
    if record is None:
        return result
    session: SpecdecSession = item.config.stash[session_key]
    profile = session.profile(record.profile)
    thresholds = item.stash.get(thresholds_key, None) or profile.thresholds
    run = session.runs[profile.name]
    speedup_check = None
    if thresholds.min_speedup is not None:
        speedup_check = session.speedup_check(item, profile.name, thresholds.min_speedup)
    # At a sweep point, a threshold the point cannot reach by construction is not applicable (sweep.py).
    steps = profile.speculative.num_steps if profile.speculative is not None else None
    sweep_steps = steps if sweep.split_name(profile.name)[1] else None
    verdict = evaluate(
        thresholds,
        run.metrics,
        speculative=profile.is_speculative,
        speedup_check=speedup_check,
        sweep_steps=sweep_steps,
    )
    item.user_properties.append((_CHECKS_PROPERTY, json.dumps(verdict.outcomes())))
    failures = []
    if verdict.failed:
        repeats = len(run.measurements)
        context = f"profile {profile.name}, {run.metrics.num_ok} requests" + (
            f", median of {repeats} repeats" if repeats > 1 else ""
        )
        message = verdict.message(context)
        first = session.verdicts.setdefault((profile.name, message), item.nodeid)
        if first != item.nodeid:
            # Every test of a profile shares one measurement: print the verdict once, refer to it after.
            missed = ", ".join(c.label for c in verdict.failed)
            message = (
                f"{missed} missed the thresholds of profile {profile.name}: the same verdict as "
                f"{first.split('::', 1)[-1]} (printed there)"
            )
        failures.append(message)
    if session.compare_enabled:
        text = _compare(session, item, record, profile)
        if text:
            failures.append(text)
    if failures:
        pytest.fail("\n".join(failures), pytrace=False)
    return result


def _compare(session: SpecdecSession, item: pytest.Item, record: results.ResultRecord, profile: Profile) -> str | None:
    """The baseline-compare failure text for one test, or None when it did not regress."""
    test_id = record.test_id
    base_profile = item.config.option.specdec_compare_profile
    if base_profile and profile.is_speculative:
        # Swap only the profile's part of the parametrization id ("[eagle3-shifted-layers-1]" -> "[eagle3-1]");
        # profiles without speculation keep their own baseline.
        test_id = compare.swap_profile_id(test_id, profile.name, base_profile)
    found = session.baseline_for(test_id)
    if found is None:
        where = f"run {session.baseline.run_id}" if session.baseline else f"{session.out_dir / 'results'}"
        item.warn(SpecdecWarning(f"no baseline for {test_id} in {where}; not compared"))
        return None
    run, base = found
    session.compared.setdefault(run.run_id, []).append(record.test_id)
    # ini, then profile, then marker: each layer changes the tolerances it names; the defaults stay checked.
    layers = (session.tolerances, profile.tolerances, item.stash.get(tolerances_key, []))
    tolerances = compare.merge_tolerances(*(compare.parse_tolerances(spec) for spec in layers))
    noise = session.noise_for(profile.name)
    force = item.config.option.specdec_compare_force
    try:
        comparison = compare.compare_results(base, record, tolerances, force=force, noise=noise)
    except CompareError as exc:
        return f"not compared with run {run.run_id}: {exc} (--specdec-compare-force compares anyway)"
    for note in comparison.notes:
        if note.startswith(("exact:", "throughput and latency judged")):
            session.compare_notes[f"{profile.name}: {note}"] = None
    if not comparison.failed:
        return None
    head = f"regression against run {run.run_id} ({test_id}):"
    if any(r.basis == "exact" for r in comparison.regressions):
        return "\n".join([head, *comparison.lines()])  # equal-or-not: nothing to re-measure
    # Confirm before failing (issue 15.3): a throughput/latency regression is measured again now.
    again = session.confirm_record(item, record)
    if again is None:
        return "\n".join([head, *comparison.lines(), "(not confirmed: the server could not be measured again)"])
    confirming = compare.compare_results(base, again, tolerances, force=True, noise=noise)
    suspected = {r.metric for r in comparison.regressions}
    table = [line for line in confirming.lines() if not line.startswith(("fingerprint", "  ", "runner state"))]
    if not suspected & {r.metric for r in confirming.regressions}:
        item.warn(
            SpecdecWarning(
                f"{test_id}: suspected regression of {', '.join(sorted(suspected))} against run {run.run_id} not "
                "confirmed by a second measurement; not failed"
            )
        )
        return None
    return "\n".join([head, "first measurement:", *comparison.lines(), "confirming measurement:", *table])


def _live(config: pytest.Config) -> contextlib.AbstractContextManager[object]:
    """Output capturing suspended, as pytest's live logging does (``logging.py``): a status line written while a
    fixture runs would otherwise go to the test's captured output, shown only if it fails."""
    capman = config.pluginmanager.get_plugin("capturemanager")
    return capman.global_and_fixture_disabled() if capman is not None else contextlib.nullcontext()


class _MeasureStatus:
    """Measured-phase status (``progress.PhaseProgress``: requests done/total, tok/s so far): a rewritten line on a
    terminal, a line every 30 s in CI logs; xdist workers stay silent."""

    def __init__(self, config: pytest.Config) -> None:
        self.config = config
        self.tr = None if hasattr(config, "workerinput") else config.pluginmanager.get_plugin("terminalreporter")
        self.tty = bool(self.tr is not None and self.tr.isatty())
        #: profile -> phases measured so far in this session (confirmations continue the count)
        self.phases = config.stash.setdefault(_phases_key, {})
        self.started = False

    def __call__(self, profile: str, total: int) -> PhaseProgress | None:
        if self.tr is None:
            return None
        self.phases[profile] = self.phases.get(profile, 0) + 1
        return PhaseProgress(profile, total, self.phases[profile], self._write, tty=self.tty)

    def _write(self, text: str) -> None:
        assert self.tr is not None
        with _live(self.config):
            if not self.tty:
                self.tr.write_line(text)
            else:
                if not self.started:
                    self.tr.write("\n")
                    self.started = True
                self.tr.rewrite(text)
            self.tr.flush()

    def done(self) -> None:
        if self.tty and self.started and self.tr is not None:
            with _live(self.config):
                self.tr.rewrite("", erase=True)
                self.tr.flush()


class _Progress:
    """Startup status: a rewritten line on a terminal, a line every 30 s in CI logs."""

    def __init__(self, config: pytest.Config, name: str) -> None:
        self.tr = config.pluginmanager.get_plugin("terminalreporter")
        self.name = name
        self.tty = bool(self.tr is not None and self.tr.isatty() and not hasattr(config, "workerinput"))
        self.last_print = 0.0
        self.started = False

    def __call__(self, elapsed_s: float, budget_s: float, last_line: str) -> None:
        if self.tr is None or hasattr(self.tr.config, "workerinput"):
            return
        text = f"specdec: starting {self.name}: {elapsed_s:.0f}/{budget_s:.0f} s | {last_line.strip()[:90]}"
        with _live(self.tr.config):
            if self.tty:
                if not self.started:
                    self.tr.write("\n")
                    self.started = True
                self.tr.rewrite(text)
            elif elapsed_s - self.last_print >= 30.0:
                self.last_print = elapsed_s
                self.tr.write_line(text)
            self.tr.flush()

    def done(self) -> None:
        if self.tty and self.started and self.tr is not None:
            with _live(self.tr.config):
                self.tr.rewrite("", erase=True)
                self.tr.flush()
