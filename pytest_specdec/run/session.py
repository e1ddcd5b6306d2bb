"""The run's state, one typed object per pytest session, and its lifecycle: options read, profiles loaded and
preflighted, servers started (or shared across xdist workers), measurements and paired arms, result records.

``plugin.py`` registers it as a plugin (its ``pytest_*`` methods are hooks) and forwards the fixtures and the
per-test setup to its methods. Policies live in the modules that own them: ``verdict`` (a test's thresholds,
speedup and baseline compare, confirming), ``summary`` (result file, outputs, terminal summary), ``thresholds``,
``compare``, ``pairing``, ``sweep``, ``sharing`` (xdist), ``progress`` (status lines).

Every pytest run builds this object, profiles selected or not, so the modules behind measuring and loading (runner:
aiohttp, httpx, numpy; profiles: pydantic) are imported in the methods that use them (``tests/test_plugin_import.py``).
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import os
import re
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

import pytest

from pytest_specdec.core import xdistnode
from pytest_specdec.core.errors import CompareError, LoadWarning, ProfileError, SpecdecError, SpecdecWarning
from pytest_specdec.profiles import discovery
from pytest_specdec.run import marker
from pytest_specdec.run.keys import (
    CHECKS_PROPERTY,
    OVERRIDES_PROPERTY,
    RECORD_PROPERTY,
    record_key,
    session_key,
    thresholds_key,
    tolerances_key,
)
from pytest_specdec.run.settings import RunSettings

if TYPE_CHECKING:
    from pytest_specdec.judge import sequential
    from pytest_specdec.judge.baseline import Baselines
    from pytest_specdec.measure import pairing, results, runner
    from pytest_specdec.profiles.schema import Profile, ProfileSet

__all__ = [
    "SpecdecSession",
    "measure_lock",
    "or_fail",
    "record_key",
    "session_key",
    "thresholds_key",
    "tolerances_key",
]

T = TypeVar("T")


def _new_run_id(now: float) -> str:
    """``results.new_run_id`` (``results`` imported on call)."""
    from pytest_specdec.measure.results import new_run_id

    return new_run_id(now)


@dataclass(eq=False)  # registered as a plugin: pluggy needs it hashable
class SpecdecSession:
    """Per-run state: the profile file, the selected profiles, measurements, result records, the baseline run."""

    config: pytest.Config
    settings: RunSettings
    #: The profiles this run measures: ``settings.selected``, each swept profile replaced by its points.
    selected: list[str]
    profile_set: ProfileSet | None = None
    runs: dict[str, runner.RunResult] = field(default_factory=dict)
    fingerprints: dict[str, dict[str, Any]] = field(default_factory=dict)
    records: list[results.ResultRecord] = field(default_factory=list)
    preflight_notes: list[str] = field(default_factory=list)
    #: What each test is compared with under ``--specdec-compare`` (None without the option).
    baselines: Baselines | None = None
    run_id: str = ""
    started: float = 0.0
    saved_path: Path | None = None
    check_lines: list[tuple[str, list[str]]] = field(default_factory=list)
    check_failed: bool = False
    sweep_lines: list[str] = field(default_factory=list)
    reaped: list[str] = field(default_factory=list)
    compared: dict[str, list[str]] = field(default_factory=dict)
    #: node id -> the passing compare's table (``compare.Comparison.lines``), shown under the summary.
    compare_tables: dict[str, list[str]] = field(default_factory=dict)
    #: Servers this process launched and stopped ("eagle3 (pid 123)"), named after an interrupted run.
    stopped: list[str] = field(default_factory=list)
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
    #: Sweep lines that fail the run (no passing point; configured point shown too far below the best).
    sweep_red: list[str] = field(default_factory=list)
    #: Configured-point lines the measurements could not decide (written yellow; the run does not fail on them).
    sweep_undecided: list[str] = field(default_factory=list)
    report_path: Path | None = None
    markdown_paths: list[Path] = field(default_factory=list)
    #: (profile, reference profile) -> paired arms measured for min_speedup (``pairing.PairedArms``).
    pairs: dict[tuple[str, str], pairing.PairedArms] = field(default_factory=dict)
    #: (profile, reference profile) -> why the pair could not be measured (the speedup check fails with it).
    pair_errors: dict[tuple[str, str], str] = field(default_factory=dict)
    reference_servers: pairing.ReferenceServers | None = None
    #: How compares were judged (exact metrics, paired ratios), printed under the summary; a dict as ordered set.
    compare_notes: dict[str, None] = field(default_factory=dict)
    #: profile -> calibrated relative noise per field (``verdict.noise_for``).
    noise: dict[str, dict[str, float]] = field(default_factory=dict)
    #: profile -> its re-measured record (``verdict.confirm_record``); None when it could not be re-measured.
    confirmations: dict[str, results.ResultRecord | None] = field(default_factory=dict)
    #: profile -> its running server (the fixture's), for confirming measurements.
    servers: dict[str, runner.RunningServer] = field(default_factory=dict)
    #: The live ``specdec_server`` fixture: (FixtureDef, its request, profile name), to stop it after its last test.
    server_fixture: tuple[Any, Any, str] | None = None
    #: profile -> position of its last test in the collection, and node id -> position (``is_last_test_of``).
    last_of: dict[str, int] | None = None
    positions: dict[str, int] = field(default_factory=dict)

    @classmethod
    def from_config(cls, config: pytest.Config) -> SpecdecSession:
        """Read options and ini; load and preflight the profile file when profiles are selected; load the baseline.

        :raises pytest.UsageError: unknown profile, broken profile file, preflight errors, unreadable baseline,
            bad tolerance.
        """
        settings = RunSettings.from_config(config)
        session = cls(config=config, settings=settings, selected=list(settings.selected))
        session.started = time.time()
        out_dir = settings.out_dir
        if not xdistnode.is_worker(config) and (out_dir / "servers").is_dir():
            from pytest_specdec.serve import registry

            session.reaped = registry.reap(out_dir / "servers")
        session.run_id = _new_run_id(session.started)
        if settings.check:
            session.load()
            session._check_only()
            return session
        if session.selected:
            session.load()
            session._expand_sweep()
            session._preflight()
        ref = settings.compare
        if ref is not None:
            from pytest_specdec.judge.baseline import Baselines

            try:
                session.baselines = Baselines.from_option(ref, session.store())
            except CompareError as exc:
                raise pytest.UsageError(f"--specdec-compare={ref}: {exc}") from None
        return session

    @property
    def out_dir(self) -> Path:
        return self.settings.out_dir

    @property
    def profile_path(self) -> Path:
        return self.settings.profile_path

    def store(self) -> results.ResultStore:
        """The result files of ``<specdec dir>/results`` (this run's file among them once saved)."""
        from pytest_specdec.measure import results

        return results.ResultStore(self.out_dir / "results", current=self.run_id)

    def load(self) -> ProfileSet:
        """Load the profile file, apply ``--server-url``, and check the selected profiles' names, tolerances and
        ``min_speedup.vs``.

        :raises pytest.UsageError: no profile file, a broken one, an unknown profile, a bad value (file, key, value).
        """
        from pytest_specdec.engines.rules import load_profiles
        from pytest_specdec.judge.tolerances import parse_tolerances

        settings = self.settings
        if settings.profile_search and not self.profile_path.is_file():
            raise pytest.UsageError(
                discovery.not_found_message(self.profile_path.name, settings.profile_search, settings.rootpath)
            )
        try:
            self.profile_set = load_profiles(self.profile_path)
        except ProfileError as exc:
            # The shape of `python -m pytest_specdec check` and of preflight: one `error: FILE:LINE: ...` per problem.
            problems = "\n".join(f"error: {line}" for line in str(exc).splitlines())
            raise pytest.UsageError(f"specdec: invalid profile file (nothing was launched):\n{problems}") from None
        url = settings.server_url
        if url and not url.startswith(("http://", "https://")):
            raise pytest.UsageError(
                f"--server-url={url}: expected http://HOST:PORT, e.g. --server-url=http://127.0.0.1:30000"
            )
        if url:
            urls = {n: p.model_copy(update={"url": url}) for n, p in self.profile_set.profiles.items()}
            self.profile_set = self.profile_set.model_copy(update={"profiles": urls})
        for name in self.selected:
            try:
                self.profile_set.get(name)
            except ProfileError as exc:
                raise pytest.UsageError(str(exc)) from None
            try:
                parse_tolerances(self.profile_set.profiles[name].tolerances)
            except ValueError as exc:
                raise pytest.UsageError(f"{self.profile_path}: profiles.{name}.tolerances: {exc}") from None
        return self.profile_set

    def _expand_sweep(self) -> None:
        """``--specdec-sweep``: replace the selected profiles by one derived profile per point (``eagle3@num_steps=2``,
        see ``sweep.expand_profiles``); preflight then checks every derived profile before anything launches."""
        from pytest_specdec.judge import sweep

        points = self.settings.sweep
        if not points:
            return
        assert self.profile_set is not None
        names = list(self.selected)
        base = self.settings.sweep_baseline
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
        self.profile_set = self.profile_set.model_copy(update={"profiles": profiles})

    def _preflight(self) -> None:
        from pytest_specdec.engines.preflight import blocking, format_findings, locate, run_preflight

        assert self.profile_set is not None
        strict = self.settings.strict
        errors: list[str] = []
        for name in self.selected:
            errors.extend(self._run_inputs(self.profile_set.profiles[name]))
            findings = locate(run_preflight(self.profile_set.profiles[name]), self.profile_set)
            bad = blocking(findings, strict=strict)
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
        from pytest_specdec.measure.workload import workload_prompts

        def where(key: str) -> str:
            line = self.profile_set.locate(profile.name, key)[0] if self.profile_set is not None else None
            return f"{self.profile_path}:{line}" if line is not None else str(self.profile_path)

        problems = []
        try:
            workload_prompts(profile.workload, Path(profile.source or self.profile_path).parent, profile.model_path)
        except ProfileError as exc:
            detail = str(exc).removeprefix("workload.prompts: ")
            problems.append(f"error: {where('workload.prompts')}: profiles.{profile.name}.workload.prompts: {detail}")
        if profile.api_key_env and not os.environ.get(profile.api_key_env):
            problems.append(
                f"error: {where('api_key_env')}: profiles.{profile.name}.api_key_env: environment variable "
                f"{profile.api_key_env} is not set; export it, or remove api_key_env"
            )
        return problems

    def _check_only(self) -> None:
        """``--specdec-check``: preflight every selected profile (all when none is selected); launch nothing."""
        from pytest_specdec.engines.preflight import blocking, format_findings, locate, run_preflight

        assert self.profile_set is not None
        strict = self.settings.strict
        for name in self.selected or sorted(self.profile_set.profiles):
            findings = locate(run_preflight(self.profile_set.profiles[name]), self.profile_set)
            inputs = self._run_inputs(self.profile_set.profiles[name])
            self.check_lines.append((name, inputs + format_findings(findings) or ["no findings"]))
            self.check_failed = self.check_failed or bool(inputs)
            if blocking(findings, strict=strict):
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
        from pytest_specdec.core import hoststate
        from pytest_specdec.core.errors import ServerError, ServerStartError
        from pytest_specdec.measure import runner

        profile = server.profile
        n = self.repeats(profile)
        before = hoststate.snapshot()
        prompts = runner.profile_prompts(profile)  # once for the repeats and the trace: phase
        if vs is not None:
            arms = None
            try:
                arms = self.measure_pair(server, vs, n, shared=shared)
            except (ServerStartError, ServerError, ValueError) as exc:
                self.pair_errors[(profile.name, vs)] = f"reference arm {vs!r}: {exc}"
                if server.process is not None and not server.process.alive():
                    raise
            if arms is not None:
                self.pairs[(profile.name, vs)] = arms
                if profile.name not in self.runs:
                    self._store_run(server, runner.run_result(server, arms.target_measurements()), before, prompts)
                return
        if profile.name not in self.runs:
            self._store_run(server, runner.measure_repeats(server, n, prompts=prompts), before, prompts)

    def _store_run(
        self, server: runner.RunningServer, run: runner.RunResult, before: dict[str, Any], prompts: list[Any]
    ) -> None:
        """Keep the profile's run and fingerprint; with ``trace:``, run the traced phase first (after the measured
        ones, on the same prompts) and keep its line in ``run.trace``."""
        from pytest_specdec.core import hoststate
        from pytest_specdec.measure import results, runner

        if server.profile.trace is not None:
            run = dataclasses.replace(run, trace=runner.trace_phase(server, prompts=prompts))
        self.runs[server.profile.name] = run
        fingerprint = results.build_fingerprint(server, run.prompt_hash)
        fingerprint["runner"] = hoststate.summarize(before, hoststate.snapshot())
        self.fingerprints[server.profile.name] = fingerprint

    def measure_pair(
        self, server: runner.RunningServer, vs: str, pairs: int, *, shared: bool, offset: int = 0
    ) -> pairing.PairedArms:
        """``min_speedup``'s paired arms: ``pairs`` phases of ``server`` and of profile ``vs`` (``pairing.py``);
        ``offset``: pairs already measured (the interleaved order continues theirs).

        :raises ServerStartError, ServerError: a server failed; ``ValueError``: bracketed pairing is impossible.
        """
        from pytest_specdec.measure import pairing

        profile = server.profile
        reference = self.profile(vs)
        if self.reference_servers is None:
            self.reference_servers = pairing.ReferenceServers(
                self.out_dir / "logs", startup_timeout_s=self.settings.startup_timeout_s
            )
        refs = self.reference_servers
        if pairing.pairing_mode(profile) == "interleaved":
            return pairing.measure_interleaved(server, refs.get(reference), pairs, offset=offset)
        if shared or server.process is None:
            raise ValueError(
                "bracketed pairing restarts this profile's server, which is shared with other xdist workers or "
                "given by URL; run without -n, or set pairing: interleaved in the profile if both servers fit"
            )
        timeout = self.settings.startup_timeout_s
        return pairing.measure_bracketed(
            server,
            pairs,
            start_reference=lambda: refs.start_once(reference),
            restart_target=lambda: server.restart(startup_timeout_s=timeout),
        )

    def load_shared(self, path: Path) -> None:
        """Take what a sibling xdist worker measured for a profile (``save_shared``)."""
        from pytest_specdec.serve import sharing

        loaded = sharing.load_run(path)
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
        from pytest_specdec.serve import sharing

        sharing.save_run(path, (name, self.runs[name], self.fingerprints[name], pairs, errors))

    def stop_reference_servers(self) -> None:
        if self.reference_servers is not None:
            self.stopped.extend(_launched(s) for s in self.reference_servers.servers.values() if s.process is not None)
            self.reference_servers.stop()

    def stop_server(self, server: runner.RunningServer) -> None:
        """Stop a fixture's server and remember it for the interrupted-run line (``summary.write_summary``)."""
        if server.process is not None and server.stop_report is None:
            self.stopped.append(_launched(server))
        server.stop()

    def profile(self, name: str) -> Profile:
        assert self.profile_set is not None
        return self.profile_set.profiles[name]

    @property
    def profiles(self) -> dict[str, Profile] | None:
        """The loaded profiles by name (after ``--server-url`` and ``--specdec-sweep``), None before ``load``."""
        return self.profile_set.profiles if self.profile_set is not None else None

    def repeats(self, profile: Profile) -> int:
        return self.settings.repeats_of(profile)

    def design(self, profile: Profile) -> sequential.Design | None:
        """The sequential design of ``profile``'s verdicts: looks from its repeats (the first measurement) up to
        ``workload.max_repeats`` (``sequential.DEFAULT_MAX_REPEATS`` when only ``max_server_s`` is set); None with
        fixed repeats (neither key set)."""
        wl = profile.workload
        if wl.max_repeats is None and wl.max_server_s is None:
            return None
        from pytest_specdec.judge import sequential

        first = self.repeats(profile)
        most = max(wl.max_repeats or sequential.DEFAULT_MAX_REPEATS, first)
        return sequential.Design(first, most, max_server_s=wl.max_server_s)

    def server_seconds(self, name: str, vs: str | None = None) -> float:
        """Seconds profile ``name``'s phases held servers so far (``Measurement.server_s``), with the reference
        phases of its pairing with ``vs`` when given."""
        run = self.runs.get(name)
        spent = sum(m.server_s for m in run.measurements) if run is not None else 0.0
        arms = self.pairs.get((name, vs)) if vs else None
        return spent + (sum(m.server_s for m in arms.reference) if arms is not None else 0.0)

    def extend(self, name: str, vs: str | None) -> bool:
        """Measure profile ``name`` once more for a sequential verdict and append it to ``runs`` (the medians
        recomputed): one more pair with ``vs`` when its arms were paired (bracketed pairing: as many pairs again, a
        bracket restarts both servers), else one more repeat. Later tests of the profile start from the longer run.

        :returns: False when nothing was added: no running server, or it failed (for a pair, the reason is kept in
            ``pair_errors``).
        """
        from pytest_specdec.core.errors import ServerError, ServerStartError
        from pytest_specdec.core.records import median_metrics
        from pytest_specdec.measure import runner

        server = self.servers.get(name)
        run = self.runs.get(name)
        if server is None or run is None:
            return False
        key = (name, vs) if vs else None
        arms = self.pairs.get(key) if key is not None else None
        with measure_lock(self.config) as shared_file:
            try:
                if key is not None and arms is not None:
                    count = 1 if arms.mode == "interleaved" else arms.first
                    more = self.measure_pair(server, key[1], count, shared=shared_file is not None, offset=arms.pairs)
                    self.pairs[key] = arms.extend(more)
                    added = more.target_measurements()
                else:
                    added = (runner.measure(server),)
            except (ServerStartError, ServerError, ValueError) as exc:
                if key is not None:
                    self.pair_errors.setdefault(key, f"sequential measurement failed: {exc}")
                return False
        measurements = run.measurements + tuple(added)
        self.runs[name] = dataclasses.replace(
            run, measurements=measurements, metrics=median_metrics([m.metrics for m in measurements])
        )
        return True

    # -- per test (the plugin's hook functions and fixtures forward here) --

    def measure_for(self, profile: Profile, request: pytest.FixtureRequest) -> runner.RunResult:
        """The ``specdec_run`` fixture: the profile's measurement (made now when none exists yet in this session, under
        xdist in any worker), attached to the test as its result record, JUnit properties and benchmark entry."""
        from pytest_specdec.measure import results
        from pytest_specdec.report import benchmark, junit

        item = request.node
        vs = marker.speedup_vs(item, self.profiles)
        if self.needs_measurement(profile.name, vs):
            with measure_lock(request.config) as shared_file:
                path = shared_file(profile.name) if shared_file else None
                if path is not None:
                    self.load_shared(path)
            if self.needs_measurement(profile.name, vs):
                specdec_server: runner.RunningServer = request.getfixturevalue("specdec_server")  # launch only now
                self.servers[profile.name] = specdec_server
                with measure_lock(request.config) as shared_file:
                    path = shared_file(profile.name) if shared_file else None
                    if path is not None:
                        self.load_shared(path)  # measured by a sibling worker meanwhile?
                    if self.needs_measurement(profile.name, vs):
                        or_fail(lambda: self.measure(specdec_server, vs, shared=path is not None))
                        if path is not None:
                            self.save_shared(path, profile.name)
            run = self.runs[profile.name]
            for message in dict.fromkeys([*run.cross_checks, *run.log_warnings]):
                # Counters disagreeing with the client (a metrics bug, not a regression), or a log-level warning.
                request.node.warn(SpecdecWarning(f"profile {profile.name}: {message}"))
            for message in dict.fromkeys(run.client_checks):
                request.node.warn(LoadWarning(f"profile {profile.name}: {message}"))
        run = self.runs[profile.name]
        if "specdec_server" in request.fixturenames:  # already set up for this test: no launch
            self.servers[profile.name] = request.getfixturevalue("specdec_server")
        arms = self.pairs.get((profile.name, vs)) if vs else None
        fingerprint = self.fingerprints[profile.name]
        record = results.ResultRecord.from_measurements(
            item.nodeid, run.measurements, fingerprint, paired=arms.to_dict() if arms is not None else None
        )
        item.stash[record_key] = record
        item.user_properties.append((RECORD_PROPERTY, json.dumps(record.to_dict(), default=str)))
        item.user_properties.extend(junit.junit_properties(record.metrics))  # JUnit <property name="specdec_...">
        benchmark.record(request, run.measurements, fingerprint)
        return run

    def serve(self, profile: Profile, tmp_path_factory: pytest.TempPathFactory) -> Iterator[runner.RunningServer]:
        """The ``specdec_server`` fixture's body: start (or, under xdist, share through ``sharing.shared_server``) the
        profile's server, yield it, stop it (and the reference servers of its paired arms) afterwards.

        :raises pytest.fail.Exception: the server could not be started or attached (``or_fail``).
        """
        from pytest_specdec.measure import runner
        from pytest_specdec.measure.progress import StartupProgress
        from pytest_specdec.serve import sharing

        config = self.config

        def start(on_launch: Callable[[Any], None] | None = None) -> runner.RunningServer:
            progress = StartupProgress(config, profile.name)
            try:
                return runner.start_server(
                    profile,
                    log_dir=self.out_dir / "logs",
                    startup_timeout_s=self.settings.startup_timeout_s,
                    on_progress=progress,
                    on_launch=on_launch,
                )
            finally:
                progress.done()

        if not xdistnode.is_worker(config) or profile.url is not None:
            server = or_fail(start)
            try:
                yield server
            finally:
                self.servers.pop(profile.name, None)
                self.stop_reference_servers()
                self.stop_server(server)
            return
        started: list[runner.RunningServer] = []

        def start_process(on_launch: Callable[[Any], None]) -> Any:
            started.append(start(on_launch))
            return started[0].process

        root = tmp_path_factory.getbasetemp().parent
        budget = self.settings.startup_timeout_s or profile.startup_timeout_s
        sharer = sharing.shared_server(profile.name, root, start_process)
        shared = or_fail(sharer.__enter__)
        try:
            # The worker that launched it keeps its handle; the others attach by URL. Teardown is shared_server's job.
            yield started[0] if started else or_fail(lambda: runner.attach(profile, shared.base_url, budget_s=budget))
        finally:
            self.servers.pop(profile.name, None)
            self.stop_reference_servers()
            sharer.__exit__(None, None, None)

    def is_last_test_of(self, item: pytest.Item, profile: str) -> bool:
        """Whether no test after ``item`` in the session's collection order runs on ``profile``."""
        if self.last_of is None:  # computed once: the collection does not change during the run
            self.last_of, self.positions = {}, {}
            for i, other in enumerate(item.session.items):
                self.positions[other.nodeid] = i
                name = getattr(getattr(other, "callspec", None), "params", {}).get("specdec_profile")
                if name:
                    self.last_of[name] = i
        position = self.positions.get(item.nodeid)
        return position is not None and position >= self.last_of.get(profile, -1)

    # -- hooks (this object is registered as a plugin) --

    def pytest_report_header(self, config: pytest.Config) -> list[str] | None:
        reaped = [f"specdec: {line}" for line in self.reaped]
        if not self.selected:
            return reaped or None
        lines = reaped + [
            f"specdec: profiles {', '.join(self.selected)} from {self.profile_path}; logs/results in {self.out_dir}"
        ]
        if self.baselines is not None:
            lines.append(self.baselines.header_line())
        lines += [f"specdec preflight: {line}" for line in self.preflight_notes]
        return lines

    @pytest.hookimpl(tryfirst=True)
    def pytest_collection(self, session: pytest.Session) -> bool | None:
        return True if self.settings.check else None

    @pytest.hookimpl(tryfirst=True)
    def pytest_runtestloop(self, session: pytest.Session) -> bool | None:
        return True if self.settings.check else None

    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        # Runs on the controller under xdist too: records travel in user_properties.
        if report.when != "call" and not (report.when == "setup" and report.outcome != "passed"):
            return
        checks = {
            str(k): str(v)
            for name, value in report.user_properties
            if name == CHECKS_PROPERTY
            for k, v in json.loads(str(value)).items()
        }
        for name, value in report.user_properties:
            if name == RECORD_PROPERTY:
                from pytest_specdec.measure import results

                record = results.ResultRecord.from_dict(json.loads(str(value)))
                self.records.append(dataclasses.replace(record, outcome=report.outcome, checks=checks))
                if report.failed:
                    self.failures[report.nodeid] = report.longreprtext
            elif name == OVERRIDES_PROPERTY:
                profile, changed = json.loads(str(value))
                self.overrides[report.nodeid] = (str(profile), [str(c) for c in changed])

    @pytest.hookimpl(tryfirst=True)
    def pytest_sessionfinish(self, session: pytest.Session) -> None:
        if self.settings.check:
            session.exitstatus = pytest.ExitCode.TESTS_FAILED if self.check_failed else pytest.ExitCode.OK
            return
        if xdistnode.is_worker(self.config):
            return
        xdist = self.selected and self.config.pluginmanager.hasplugin("xdist")
        root = xdistnode.shared_dir(self.config) if xdist else None
        if root is not None:
            # Shared servers exist only when profiles ran (worker options are the controller's).
            from pytest_specdec.serve import sharing

            self.sweep_lines = sharing.sweep_shared(root)
            if self.sweep_lines:
                session.exitstatus = pytest.ExitCode.TESTS_FAILED
        if self.records:
            from pytest_specdec.run import summary

            summary.finish(self, session)

    def pytest_terminal_summary(self, terminalreporter: Any, exitstatus: int) -> None:
        if exitstatus == pytest.ExitCode.INTERRUPTED and self.stopped:
            # Teardown already ran (pytest_sessionfinish precedes the summary): say so, not just "KeyboardInterrupt".
            names = ", ".join(dict.fromkeys(self.stopped))
            terminalreporter.write_line(f"specdec: interrupted; stopped the servers this run launched: {names}",
                                        yellow=True)  # fmt: skip
        if not (self.check_lines or self.sweep_lines or self.records or self.preflight_notes or self.runs):
            return  # nothing to print (a run without specdec tests does not import the summary's modules)
        from pytest_specdec.run import summary

        summary.write_summary(self, terminalreporter)


@contextlib.contextmanager
def measure_lock(config: pytest.Config) -> Iterator[Callable[[str], Path] | None]:
    """Under xdist, workers share servers: one measured phase at a time, and each profile is measured once for all
    workers (the first one measures, the others read its result). Yields the per-profile result file namer, or None
    without xdist. Every measurement goes through here, so it also shows the measured-phase status line."""
    from filelock import FileLock

    from pytest_specdec.measure import runner
    from pytest_specdec.measure.progress import MeasureStatus

    status = MeasureStatus(config)
    token = runner.phase_watcher.set(status)
    try:
        root = xdistnode.shared_dir(config) if xdistnode.is_worker(config) else None
        if root is None:
            yield None
            return
        with FileLock(str(root / "specdec-measure.lock")):
            yield lambda name: root / f"specdec-run-{re.sub(r'[^A-Za-z0-9_.@=-]', '_', name)}.pickle"
    finally:
        runner.phase_watcher.reset(token)
        status.done()


def _launched(server: runner.RunningServer) -> str:
    """``eagle3 (pid 123)`` for a server we launched (``log_path`` names its launch)."""
    pid = getattr(server.process, "pid", None)
    return f"{server.profile.name} (pid {pid})" if pid is not None else server.profile.name


def or_fail(call: Callable[[], T]) -> T:
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
