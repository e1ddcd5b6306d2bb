"""pytest hooks only: options, ini keys, the ``specdec`` marker, fixtures and the terminal summary.

The work is done by ``runner`` (launch, wait, measure), ``thresholds`` (verdicts) and ``report`` (lines); this module
wires them to pytest's hooks and fixtures.
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Generator, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from pytest_specdec import report, runner
from pytest_specdec.errors import PreflightError, ProfileError, SpecdecError
from pytest_specdec.profiles import Profile, ProfileSet, Thresholds, load_profiles
from pytest_specdec.thresholds import evaluate, merge_marker

session_key = pytest.StashKey["SpecdecSession"]()
thresholds_key = pytest.StashKey[Thresholds]()
measurement_key = pytest.StashKey[runner.Measurement]()

_SERVER_FIXTURES = ("specdec_server", "specdec_run", "specdec_profile")
_USER_PROPERTY = "specdec"


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
        help="Profile file (default: ini specdec_profiles, else specdec.yaml in the rootdir)",
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
        help="Where server logs and result files go (default: ini specdec_dir, else .specdec in the rootdir)",
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


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line(
        "markers",
        "specdec(min_accept_length=None, min_accept_rate=None, min_tok_s=None, max_ttft_ms=None, max_itl_ms=None, "
        "max_tpot_ms=None, min_speedup=None): a speculative-decoding performance test, run once per "
        "--server-profile; thresholds override the profile's. "
        "Example: @pytest.mark.specdec(min_accept_length=2.0, min_tok_s=100)",
    )
    session = SpecdecSession.from_config(config)
    config.stash[session_key] = session
    config.pluginmanager.register(session, "specdec-session")


def pytest_unconfigure(config: pytest.Config) -> None:
    session = config.stash.get(session_key, None)
    if session is not None:
        del config.stash[session_key]
        config.pluginmanager.unregister(session)


def pytest_cmdline_main(config: pytest.Config) -> int | None:
    # Runs before pytest_configure (like --fixtures): load and check without starting a session.
    if not config.option.specdec_check:
        return None
    from pytest_specdec.preflight import format_findings, run_preflight

    path = _profile_path(config)
    try:
        profile_set = load_profiles(path)
        selected = _selected(config)
        for name in selected:
            profile_set.get(name)
    except ProfileError as exc:
        raise pytest.UsageError(str(exc)) from None
    names = selected or sorted(profile_set.profiles)
    tw = config.get_terminal_writer()
    worst = 0
    for name in names:
        findings = run_preflight(profile_set.profiles[name])
        tw.sep("-", f"specdec check: {name}")
        for line in format_findings(findings) or ["no findings"]:
            tw.line(line)
        for finding in findings:
            if finding.severity == "error" or (finding.severity == "warning" and config.option.specdec_strict):
                worst = 1
    tw.line(f"specdec check: {'FAILED' if worst else 'passed'} ({len(names)} profile(s) from {profile_set.path})")
    return worst


def _profile_path(config: pytest.Config) -> Path:
    if config.option.specdec_profiles:
        return Path(os.path.abspath(config.option.specdec_profiles))
    raw = config.getini("specdec_profiles") or "specdec.yaml"
    return Path(raw) if Path(raw).is_absolute() else config.rootpath / raw


def _selected(config: pytest.Config) -> list[str]:
    return [n.strip() for n in (config.option.server_profile or "").split(",") if n.strip()]


@dataclass
class _Row:
    nodeid: str
    profile: str
    values: dict[str, Any]
    outcome: str


@dataclass
class SpecdecSession:
    """Per-run state: the profile file, the selected profiles, measurements and summary rows."""

    config: pytest.Config
    selected: list[str]
    profile_path: Path
    out_dir: Path
    profile_set: ProfileSet | None = None
    measurements: dict[str, runner.Measurement] = field(default_factory=dict)
    rows: list[_Row] = field(default_factory=list)
    log_paths: dict[str, Path] = field(default_factory=dict)
    preflight_notes: list[str] = field(default_factory=list)

    @classmethod
    def from_config(cls, config: pytest.Config) -> SpecdecSession:
        """Read options and ini; load and preflight the profile file when profiles are selected.

        :raises pytest.UsageError: unknown profile, broken profile file, preflight errors.
        """
        root = config.rootpath
        out_raw = config.option.specdec_dir or config.getini("specdec_dir") or ".specdec"
        out_dir = Path(out_raw) if Path(out_raw).is_absolute() else root / out_raw
        session = cls(config=config, selected=_selected(config), profile_path=_profile_path(config), out_dir=out_dir)
        if session.selected:
            session.load()
            session._preflight()
        return session

    def load(self) -> ProfileSet:
        try:
            self.profile_set = load_profiles(self.profile_path)
        except ProfileError as exc:
            raise pytest.UsageError(str(exc)) from None
        url = self.config.option.server_url
        if url:
            self.profile_set = ProfileSet(
                path=self.profile_set.path,
                profiles={n: p.model_copy(update={"url": url}) for n, p in self.profile_set.profiles.items()},
            )
        for name in self.selected:
            if name not in self.profile_set.profiles:
                self._unknown(name)
        return self.profile_set

    def _unknown(self, name: str) -> None:
        assert self.profile_set is not None
        try:
            self.profile_set.get(name)
        except ProfileError as exc:
            raise pytest.UsageError(str(exc)) from None

    def _preflight(self) -> None:
        from pytest_specdec.preflight import format_findings, run_preflight

        assert self.profile_set is not None
        strict = self.config.option.specdec_strict
        errors: list[str] = []
        for name in self.selected:
            findings = run_preflight(self.profile_set.profiles[name])
            bad = [f for f in findings if f.severity == "error" or (strict and f.severity == "warning")]
            if bad:
                errors.extend(format_findings(bad))
            self.preflight_notes.extend(format_findings([f for f in findings if f not in bad]))
        if errors:
            raise pytest.UsageError(
                "specdec preflight failed (nothing was launched):\n" + "\n".join(errors)
            )

    def profile(self, name: str) -> Profile:
        assert self.profile_set is not None
        return self.profile_set.profiles[name]

    # -- hooks (this object is registered as a plugin) --

    def pytest_report_header(self, config: pytest.Config) -> list[str] | None:
        if not self.selected:
            return None
        lines = [f"specdec: profiles {', '.join(self.selected)} from {self.profile_path}; logs/results in {self.out_dir}"]
        lines += [f"specdec preflight: {line}" for line in self.preflight_notes]
        return lines

    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        if report.when != "call" and not (report.when == "setup" and report.outcome != "passed"):
            return
        for name, value in report.user_properties:
            if name == _USER_PROPERTY:
                data = json.loads(value) if isinstance(value, str) else value
                self.rows.append(_Row(report.nodeid, data["profile"], data["metrics"], report.outcome))

    def pytest_terminal_summary(self, terminalreporter: Any) -> None:
        if not self.rows:
            return
        terminalreporter.write_sep("=", "specdec summary")
        for line in report.summary_lines([(r.nodeid, r.profile, r.values, r.outcome) for r in self.rows]):
            terminalreporter.write_line(line)
        path = self._write_results()
        if path is not None:
            terminalreporter.write_sep("-", f"specdec results: {path}")

    def _write_results(self) -> Path | None:
        if hasattr(self.config, "workerinput"):
            return None
        results_dir = self.out_dir / "results"
        results_dir.mkdir(parents=True, exist_ok=True)
        stamp = time.strftime("%Y%m%dT%H%M%S")
        path = results_dir / f"{stamp}.json"
        data = {
            "rows": [{"test": r.nodeid, "profile": r.profile, "outcome": r.outcome, "metrics": r.values} for r in self.rows],
        }
        path.write_text(json.dumps(data, indent=2) + "\n")
        return path


def pytest_itemcollected(item: pytest.Item) -> None:
    # Tests that use the server are specdec tests, so `-m specdec` selects them even without the marker.
    names = getattr(item, "fixturenames", ())
    if any(n in names for n in _SERVER_FIXTURES) and item.get_closest_marker("specdec") is None:
        item.add_marker("specdec")


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
    names = session.selected or [None]
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
def specdec_server(specdec_profile: Profile, request: pytest.FixtureRequest) -> Iterator[runner.RunningServer]:
    """The profile's server, started once per session and ready to generate (``runner.RunningServer``).

    Ready means ``/health`` 200 *and* a real 1-token generate. Torn down (whole process tree) at the end of the
    session, or before the next profile's server starts.
    """
    session: SpecdecSession = request.config.stash[session_key]
    log_dir = session.out_dir / "logs"
    progress = _Progress(request.config, specdec_profile.name)
    try:
        server = runner.start_server(
            specdec_profile,
            log_dir=log_dir,
            startup_timeout_s=request.config.option.specdec_startup_timeout,
            on_progress=progress,
        )
    finally:
        progress.done()
    if server.log_path is not None:
        session.log_paths[specdec_profile.name] = server.log_path
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture
def specdec_run(specdec_server: runner.RunningServer, request: pytest.FixtureRequest) -> runner.Measurement:
    """The profile's workload measured once per session and profile (``runner.Measurement``: ``.metrics`` has
    output_tok_s, accept_length, accept_rate, ttft/itl/tpot/e2e percentiles in ms). Marker and profile thresholds are
    checked after the test body."""
    session: SpecdecSession = request.config.stash[session_key]
    name = specdec_server.profile.name
    measurement = session.measurements.get(name)
    if measurement is None:
        measurement = runner.measure(specdec_server)
        session.measurements[name] = measurement
    item = request.node
    item.stash[measurement_key] = measurement
    item.user_properties.append(
        (_USER_PROPERTY, json.dumps({"profile": name, "metrics": report.row_values(measurement.metrics)}))
    )
    return measurement


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
    profile_param = getattr(getattr(item, "callspec", None), "params", {}).get("specdec_profile")
    session: SpecdecSession = item.config.stash[session_key]
    base = session.profile(profile_param).thresholds if profile_param else Thresholds()
    try:
        item.stash[thresholds_key] = merge_marker(base, dict(marker.kwargs))
    except ValueError as exc:
        pytest.fail(f"@pytest.mark.specdec: {exc}", pytrace=False)


@pytest.hookimpl(wrapper=True)
def pytest_runtest_call(item: pytest.Item) -> Generator[None, object, object]:
    result = yield
    measurement = item.stash.get(measurement_key, None)
    if measurement is None:
        return result
    session: SpecdecSession = item.config.stash[session_key]
    profile = session.profile(measurement.profile)
    thresholds = item.stash.get(thresholds_key, None) or profile.thresholds
    speedup = None
    if thresholds.min_speedup is not None:
        other = session.measurements.get(thresholds.min_speedup.vs)
        if other is not None and other.metrics.output_tok_s > 0:
            speedup = measurement.metrics.output_tok_s / other.metrics.output_tok_s
    verdict = evaluate(thresholds, measurement.metrics, speculative=profile.is_speculative, speedup=speedup)
    if verdict.failed:
        context = f"profile {profile.name}, {measurement.metrics.num_ok} requests"
        pytest.fail(verdict.message(context), pytrace=False)
    return result


class _Progress:
    """Startup status: a rewritten line on a terminal, a line every 30 s in CI logs."""

    def __init__(self, config: pytest.Config, name: str) -> None:
        self.tr = config.pluginmanager.get_plugin("terminalreporter")
        self.name = name
        self.tty = bool(self.tr is not None and self.tr.isatty() and not hasattr(config, "workerinput"))
        self.last_print = -30.0
        self.started = False

    def __call__(self, elapsed_s: float, budget_s: float, last_line: str) -> None:
        if self.tr is None:
            return
        text = f"specdec: starting {self.name}: {elapsed_s:.0f}/{budget_s:.0f} s | {last_line.strip()[:90]}"
        if self.tty:
            if not self.started:
                self.tr.write("\n")
                self.started = True
            self.tr.rewrite(text)
        elif elapsed_s - self.last_print >= 30.0:
            self.last_print = elapsed_s
            self.tr.write_line(text)

    def done(self) -> None:
        if self.tty and self.started:
            self.tr.rewrite("", erase=True)


_ = (SpecdecError, PreflightError)
