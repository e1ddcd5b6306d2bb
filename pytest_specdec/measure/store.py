"""The run's measurements, and the only code that measures or measures again: each profile's run (its repeats), its
fingerprint, the paired arms of ``min_speedup``, and the reference servers those pairs need.

A verdict sees it through ``judge.handle.MeasureHandle`` (read a run, ask for one more repeat or pair); the
fixtures (``run.fixtures``) measure a profile once and hand it the server they started. Built from plain values
(a log directory, a start-up budget, the profiles, an xdist lock), never from the pytest config, so it imports
nothing heavy until it measures (``tests/test_plugin_import.py``).

Under xdist the workers share servers: every measurement runs inside ``lock()``, which yields None without xdist, or
a namer of the per-profile file through which the first worker to measure a profile hands its run to the others
(``serve.sharing``).
"""

from __future__ import annotations

import contextlib
import dataclasses
from collections.abc import Callable, Iterator, Mapping
from contextlib import AbstractContextManager
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from pytest_specdec.measure import pairing, runner
    from pytest_specdec.profiles.schema import Profile
    from pytest_specdec.serve.server import ServerHandle

__all__ = ["Lock", "MeasurementStore"]

#: ``lock()`` -> a context holding the xdist measurement lock, yielding the shared-file namer (None without xdist).
Lock = Callable[[], AbstractContextManager[Callable[[str], Path] | None]]


class MeasurementStore:
    """Measurements of one pytest process, by profile name (paired arms by ``(profile, reference profile)``).

    Usage (``run.session``)::

        store = MeasurementStore(log_dir=out / "logs", startup_timeout_s=None, repeats=settings.repeats_of,
                                 profiles=profiles, lock=lambda: measure_lock(config))
        store.measure_once(server, vs="baseline")  # first measurement, shared with sibling workers
        store.more("eagle3", "baseline")  # one more pair, for a sequential verdict

    :param log_dir: where reference servers log (``<profile>.paired.<stamp>.log``).
    :param startup_timeout_s: start-up budget of reference servers and restarts (None: the profile's own).
    :param repeats: measured phases of a profile's first measurement (``RunSettings.repeats_of``).
    :param profiles: the loaded profiles (reference arms are looked up here).
    :param lock: the xdist measurement lock (see the module docstring).
    """

    def __init__(
        self,
        *,
        log_dir: Path,
        startup_timeout_s: float | None,
        repeats: Callable[[Profile], int],
        profiles: Mapping[str, Profile],
        lock: Lock,
    ) -> None:
        self._log_dir = log_dir
        self._startup_timeout_s = startup_timeout_s
        self._repeats = repeats
        self._profiles = profiles
        self._lock = lock
        self._runs: dict[str, runner.RunResult] = {}
        self._fingerprints: dict[str, dict[str, Any]] = {}
        #: profile -> the runner's state before its first phase (``hoststate.snapshot``): :meth:`more` ends the
        #: fingerprint's runner entry at its own last phase.
        self._runner_before: dict[str, dict[str, Any]] = {}
        #: (profile, reference profile) -> paired arms measured for min_speedup.
        self._pairs: dict[tuple[str, str], pairing.PairedArms] = {}
        #: (profile, reference profile) -> why the pair could not be measured (the speedup check fails with it).
        self._pair_errors: dict[tuple[str, str], str] = {}
        #: Profile -> why its first failed ``more()`` failed (a verdict that stopped there says so).
        self._more_errors: dict[str, str] = {}
        #: profile -> its running server (the fixture's), for measuring again.
        self._servers: dict[str, runner.RunningServer] = {}
        #: profile -> its confirming measurement (None: it could not be measured again).
        self._reference_servers: pairing.ReferenceServers | None = None
        #: Servers this process launched and stopped ("eagle3 (pid 123)"; a start that Ctrl-C cut short: "eagle3 (pid
        #: 123, interrupted while starting)", :meth:`launching`), named after an interrupted run.
        self.stopped: list[str] = []

    # -- reading (MeasureHandle) --

    @property
    def runs(self) -> Mapping[str, runner.RunResult]:
        """profile -> its run, for the summary (traces) and the end of the run."""
        return self._runs

    def run(self, profile: str) -> runner.RunResult:
        return self._runs[profile]

    def fingerprint(self, profile: str) -> dict[str, Any]:
        """The profile's fingerprint (``results.build_fingerprint`` with the runner state over its phases)."""
        return self._fingerprints[profile]

    def arms(self, profile: str, vs: str) -> pairing.PairedArms | None:
        return self._pairs.get((profile, vs))

    def pair_error(self, profile: str, vs: str) -> str | None:
        return self._pair_errors.get((profile, vs))

    def more_error(self, profile: str) -> str | None:
        return self._more_errors.get(profile)

    def can_measure(self, profile: str) -> bool:
        return profile in self._servers

    def spent_s(self, profile: str, vs: str | None) -> float:
        run = self._runs.get(profile)
        measured = list(run.measurements) if run is not None else []
        arms = self._pairs.get((profile, vs)) if vs else None
        if arms is not None:
            # The pair's target phases are the run's own when the pairing measured it first; when a test without
            # min_speedup measured it alone before, the pair's first target phases are not in the run (they were
            # left out of the cost line: an audit finding).
            seen = {id(m) for m in measured}
            measured += [m for m in arms.target_measurements() if id(m) not in seen]
            measured += arms.reference
        # A bracketed pairing's server switches hold the GPU too (minutes each there): the budget counts them.
        return sum(m.server_s for m in measured) + (arms.restart_s if arms is not None else 0.0)

    # -- the first measurement (the specdec_run fixture) --

    def needs(self, profile: str, vs: str | None) -> bool:
        """Whether ``profile`` still has to be measured (or paired with ``vs``) in this process."""
        if profile not in self._runs:
            return True
        key = (profile, vs)
        return vs is not None and key not in self._pairs and key not in self._pair_errors

    def adopt_shared(self, profile: str) -> None:
        """Take what a sibling xdist worker measured for ``profile``, if it did (nothing without xdist)."""
        with self._lock() as shared_file:
            if shared_file is not None:
                self._load_shared(shared_file(profile))

    def attach(self, server: runner.RunningServer) -> None:
        """The profile's running server (the fixture's): confirmations and sequential verdicts measure on it."""
        self._servers[server.profile.name] = server

    def detach(self, profile: str) -> None:
        """The profile's server is stopping: nothing more is measured on it."""
        self._servers.pop(profile, None)

    def measure_once(self, server: runner.RunningServer, vs: str | None) -> None:
        """Measure ``server``'s profile unless it (or a sibling worker meanwhile) already did, paired with ``vs``
        when given; a sibling's measurement is taken instead, this one is handed to the siblings.

        :raises SpecdecError: the target's server failed during its phases.
        """
        name = server.profile.name
        with self._lock() as shared_file:
            path = shared_file(name) if shared_file else None
            if path is not None:
                self._load_shared(path)
            if self.needs(name, vs):
                self._measure(server, vs, shared=path is not None)
                if path is not None:
                    self._save_shared(path, name)

    def _measure(self, server: runner.RunningServer, vs: str | None, *, shared: bool) -> None:
        """Measure ``server``'s profile (when not yet), paired with profile ``vs`` when given. A reference arm that
        cannot be measured is recorded in ``pair_error`` (its speedup check fails with the reason); the target's
        own checks still run on phases measured alone."""
        from pytest_specdec.core import hoststate
        from pytest_specdec.core.errors import ServerError, ServerStartError
        from pytest_specdec.measure import runner

        profile = server.profile
        n = self._repeats(profile)
        before = hoststate.snapshot()
        prompts = runner.profile_prompts(profile)  # once for the repeats and the trace: phase
        if vs is not None:
            arms = None
            try:
                with _purpose(f"{profile.name} vs {vs}: {_first(n, 'pair')}"):
                    arms = self._measure_pair(server, vs, n, shared=shared)
            except (ServerStartError, ServerError, ValueError) as exc:
                self._pair_errors[(profile.name, vs)] = f"reference arm {vs!r}: {exc}"
                if server.process is not None and not server.process.alive():
                    raise
            if arms is not None:
                self._pairs[(profile.name, vs)] = arms
                if profile.name not in self._runs:
                    self._keep_run(server, runner.run_result(server, arms.target_measurements()), before, prompts)
                return
        if profile.name not in self._runs:
            with _purpose(_first(n, "repeat")):
                measured = runner.measure_repeats(server, n, prompts=prompts)
            self._keep_run(server, measured, before, prompts)

    def _keep_run(
        self, server: runner.RunningServer, run: runner.RunResult, before: dict[str, Any], prompts: list[Any]
    ) -> None:
        """Keep the profile's run and fingerprint; with ``trace:``, run the traced phase first (after the measured
        ones, on the same prompts) and keep its line in the run's ``trace``."""
        from pytest_specdec.core import hoststate
        from pytest_specdec.measure import results, runner

        if server.profile.trace is not None:
            traced = runner.trace_phase(server, prompts=prompts)
            run = dataclasses.replace(run, trace=traced.line, cycle_split=traced.split)
        self._runs[server.profile.name] = run
        fingerprint = results.build_fingerprint(server, run.prompt_hash)
        fingerprint["runner"] = hoststate.runner_entry(before, hoststate.snapshot())
        self._fingerprints[server.profile.name] = fingerprint
        self._runner_before[server.profile.name] = before

    def _measure_pair(
        self, server: runner.RunningServer, vs: str, pairs: int, *, shared: bool, offset: int = 0
    ) -> pairing.PairedArms:
        """``min_speedup``'s paired arms: ``pairs`` phases of ``server`` and of profile ``vs`` (``pairing.py``);
        ``offset``: pairs already measured (the interleaved order continues theirs).

        :raises ServerStartError, ServerError: a server failed; ``ValueError``: bracketed pairing is impossible.
        """
        from pytest_specdec.measure import pairing

        profile = server.profile
        reference = self._profiles[vs]
        if self._reference_servers is None:
            self._reference_servers = pairing.ReferenceServers(self._log_dir, startup_timeout_s=self._startup_timeout_s)
        refs = self._reference_servers
        if pairing.pairing_mode(profile) == "interleaved":
            with self.launching() as on_launch:
                ref_server = refs.get(reference, on_launch=on_launch)
            return pairing.measure_interleaved(server, ref_server, pairs, offset=offset)
        if shared or server.process is None:
            raise ValueError(
                "bracketed pairing restarts this profile's server, which is shared with other xdist workers or "
                "given by URL; run without -n, or set pairing: interleaved in the profile if both servers fit"
            )
        timeout = self._startup_timeout_s

        def start_reference() -> runner.RunningServer:
            with self.launching() as on_launch:
                return refs.start_once(reference, on_launch=on_launch)

        def restart_target() -> None:
            with self.launching() as on_launch:
                server.restart(startup_timeout_s=timeout, on_launch=on_launch)

        return pairing.measure_bracketed(
            server, pairs, start_reference=start_reference, restart_target=restart_target
        )

    def _load_shared(self, path: Path) -> None:
        """Take what a sibling xdist worker measured for a profile (:meth:`_save_shared`)."""
        from pytest_specdec.serve import sharing

        loaded = sharing.load_run(path)
        if loaded is None:
            return
        name, run, fingerprint, pairs, errors = loaded
        self._runs.setdefault(name, run)
        self._fingerprints.setdefault(name, fingerprint)
        for key, arms in pairs.items():
            self._pairs.setdefault(key, arms)
        for key, error in errors.items():
            self._pair_errors.setdefault(key, error)

    def _save_shared(self, path: Path, name: str) -> None:
        from pytest_specdec.serve import sharing

        pairs = {k: v for k, v in self._pairs.items() if k[0] == name}
        errors = {k: v for k, v in self._pair_errors.items() if k[0] == name}
        sharing.save_run(path, (name, self._runs[name], self._fingerprints[name], pairs, errors))

    # -- measuring again (MeasureHandle) --

    def more(self, profile: str, vs: str | None, pairs: int | None = None, *, why: str = "") -> bool:
        from pytest_specdec.core.errors import ServerError, ServerStartError
        from pytest_specdec.measure import runner

        server = self._servers.get(profile)
        run = self._runs.get(profile)
        if server is None or run is None:
            return False
        key = (profile, vs) if vs else None
        arms = self._pairs.get(key) if key is not None else None
        purpose = ", ".join(p for p in (f"{profile} vs {vs}" if vs else "", why) if p)
        with self._lock() as shared_file, _purpose(purpose):
            try:
                if key is not None and arms is not None:
                    count = 1 if arms.mode == "interleaved" else max(pairs or arms.first, 1)
                    added_arms = self._measure_pair(
                        server, key[1], count, shared=shared_file is not None, offset=arms.pairs
                    )
                    self._pairs[key] = arms.extend(added_arms)
                    added = added_arms.target_measurements()
                else:
                    added = (runner.measure(server),)
            except (ServerStartError, ServerError, ValueError) as exc:
                if key is not None:
                    self._pair_errors.setdefault(key, f"sequential measurement failed: {exc}")
                with_vs = f" paired with {vs}" if vs else ""
                self._more_errors.setdefault(profile, f"measuring {profile}{with_vs} again failed: {exc}")
                return False
        measurements = run.measurements + tuple(added)
        before = self._runner_before.get(profile)
        if before is not None and profile in self._fingerprints:
            from pytest_specdec.core import hoststate

            # The runner over every phase a verdict measured, not only the first ones: a compare judges the ratio
            # rows of a runner that got busy meanwhile as a busy runner's (``hoststate.oversubscribed``).
            self._fingerprints[profile]["runner"] = hoststate.runner_entry(before, hoststate.snapshot())
        # Pooled as the first measurement was (``runner.pooled_metrics``): tail and goodput verdicts weigh every
        # repeat's requests (a fresh-user trial saw "4 of 4 requests" from 3 repeats of 4: one repeat's tails).
        self._runs[profile] = dataclasses.replace(
            run, measurements=measurements, metrics=runner.pooled_metrics(measurements)
        )
        return True

    # -- servers --

    @contextlib.contextmanager
    def launching(self) -> Iterator[Callable[[ServerHandle], None]]:
        """Around a server start (``startup.start_server``): yields the ``on_launch`` to give it. When Ctrl-C cuts
        the start short after the launch (the start stops the server before re-raising), the server is named in
        :attr:`stopped` as ``eagle3 (pid 123, interrupted while starting)``: a fresh-user trial's interrupted run
        named only the server already up, not the one it had just stopped mid-start.
        """
        launched: list[ServerHandle] = []
        try:
            yield launched.append
        except KeyboardInterrupt:
            self.stopped.extend(f"{p.name} (pid {p.pid}, interrupted while starting)" for p in launched)
            raise

    def stop_reference_servers(self) -> None:
        """Stop the reference servers of paired arms (after the profile's last test)."""
        if self._reference_servers is not None:
            servers = self._reference_servers.servers.values()
            self.stopped.extend(_launched(s) for s in servers if s.process is not None)
            self._reference_servers.stop()

    def stop_server(self, server: runner.RunningServer) -> None:
        """Stop a fixture's server and remember it for the interrupted-run line."""
        if server.process is not None and server.stop_report is None:
            self.stopped.append(_launched(server))
        server.stop()


def _launched(server: runner.RunningServer) -> str:
    """``eagle3 (pid 123)`` for a server we launched (``log_path`` names its launch)."""
    process = server.process  # a ServerHandle (its pid is declared), None for a server given by URL
    return f"{server.profile.name} (pid {process.pid})" if process is not None else server.profile.name


@contextlib.contextmanager
def _purpose(text: str) -> Iterator[None]:
    """``runner.phase_purpose`` set to ``text`` while the phases inside are measured (the progress line shows it)."""
    from pytest_specdec.measure import runner

    token = runner.phase_purpose.set(text)
    try:
        yield
    finally:
        runner.phase_purpose.reset(token)


def _first(n: int, unit: str) -> str:
    """``first 3 pairs``, ``first repeat``: a profile's first measurement, in the progress line."""
    return f"first {n} {unit}s" if n != 1 else f"first {unit}"
