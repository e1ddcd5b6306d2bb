"""The servers of a bisect (``bisection.Probes``): a probe configuration launched with ``runner.start_server`` and
measured with ``runner.measure``; the reference arm's server (GOOD, then GOOD + cause 1) kept up for every probe."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from pytest_specdec.bisection.diffs import launch_key
from pytest_specdec.bisection.search import BudgetSpent
from pytest_specdec.bisection.symptoms import EXACT_FIELDS
from pytest_specdec.core import clock
from pytest_specdec.core.errors import ProfileError
from pytest_specdec.engines.rules import engine_problem, resolve_paths
from pytest_specdec.measure import pairing, runner
from pytest_specdec.profiles.schema import Profile

__all__ = ["Prober", "profile_mapping"]


def profile_mapping(profile: Profile) -> dict[str, Any]:
    """A profile as the mapping bisect works on: ``Profile.model_dump(mode="json")`` without ``name`` and
    ``source`` (as a stored run's ``fingerprint["profile_def"]``)."""
    return profile.model_dump(mode="json", exclude={"name", "source"})


class Prober:
    """Launches and measures bisect probes, counting launches and server-seconds (each server's lifetime from the
    launch to its stop, startup included).

    One probe server runs at a time beside the reference arm (GOOD until :meth:`hold` names another): a probe that
    needs the same launch as a running one (its configuration differs only in ``workload:``) reuses it, any other
    stops the probe server first. Paired tok/s is measured interleaved with the reference arm
    (``pairing.measure_interleaved``); a profile that pairs bracketed (SGLang and vLLM by default: two servers may not
    fit on the GPUs) needs ``pairing: interleaved`` set, or it is refused.

    :param good: the good profile mapping; :param name: the good profile's name (probes are ``<name>~<n>``);
    :param source: the profile file the mappings' relative paths were resolved against (the probes' ``source``).
    :param log_dir: the server logs, ``<log_prefix>-<launch number>`` (``logfiles``: one file per launch, the newest
        kept); servers are recorded in ``log_dir.parent / "servers"`` as ``runner.start_server`` does, for ``reap``.
    :param max_launches: launches allowed in all; the one beyond raises ``BudgetSpent`` before anything starts.
    :param on_launch: called after each launch with (launch number, label, seconds to ready or None, and when None
        why: ``did not start`` or ``interrupted while starting`` (Ctrl-C or SIGTERM during the startup)).
    :raises ProfileError: the good profile does not validate or pairs bracketed.
    """

    def __init__(
        self,
        good: Mapping[str, Any],
        *,
        name: str,
        source: str,
        log_dir: Path,
        startup_timeout_s: float | None = None,
        log_prefix: str = "probe",
        max_launches: int | None = None,
        on_launch: Callable[[int, str, float | None, str], None] | None = None,
    ) -> None:
        self.name = name
        self.log_prefix = log_prefix
        self.source = source
        self.log_dir = log_dir
        self.startup_timeout_s = startup_timeout_s
        self.max_launches = max_launches
        self.on_launch = on_launch
        self.launches = 0
        self.server_s = 0.0
        #: Seconds the first (GOOD's) server took to be ready: the estimate's start time.
        self.start_s: float | None = None
        #: Seconds and count of the phases measured so far (a pair is two), for :attr:`phase_s`.
        self._phase_time = 0.0
        self._phase_count = 0
        self.good_key = launch_key(good)
        self.good_profile = self.profile(good, "good")
        if pairing.pairing_mode(self.good_profile) != "interleaved":
            raise ProfileError(
                f"profile {name!r} pairs bracketed (one server at a time); bisect keeps the good server beside each "
                "probe: set 'pairing: interleaved' in the profile when two servers fit (or use smaller GPUs' share)",
                profile=name,
            )
        self._good: runner.RunningServer | None = None
        self._probe: tuple[str, runner.RunningServer] | None = None
        self._started: dict[str, float] = {}
        #: Pairs measured so far per probe label: the interleaving order continues (R T, T R, ...).
        self._pairs: dict[str, int] = {}

    def profile(self, config: Mapping[str, Any], label: str) -> Profile:
        """The probe's ``Profile`` (bundled paths filled in).

        :raises ProfileError: the mapping does not validate (an intermediate configuration the schema rejects).
        """
        try:
            profile = Profile.model_validate({**config, "name": f"{self.name}~{label}"[:200], "source": self.source})
        except ValidationError as exc:
            first = exc.errors()[0]
            where = ".".join(str(p) for p in first["loc"])
            raise ProfileError(f"probe {label}: not a valid profile: {where}: {first['msg']}", profile=label) from None
        profile = resolve_paths(profile)
        problem = engine_problem(profile)
        if problem is not None:
            # Worded as the schema's own whole-profile errors are (no key path; pydantic's "Value error, " prefix).
            raise ProfileError(f"probe {label}: not a valid profile: : Value error, {problem}", profile=label)
        return profile

    def _start(self, profile: Profile, label: str) -> runner.RunningServer:
        if self.max_launches is not None and self.launches >= self.max_launches:
            raise BudgetSpent(f"--max-launches {self.max_launches} spent")
        self.launches += 1
        started = clock.now()
        try:
            server = runner.start_server(profile, log_dir=self.log_dir, startup_timeout_s=self.startup_timeout_s,
                                         log_name=f"{self.log_prefix}-{self.launches:02d}")  # fmt: skip
        except BaseException as exc:
            self.server_s += clock.now() - started
            if self.on_launch is not None:
                why = "interrupted while starting" if isinstance(exc, KeyboardInterrupt) else "did not start"
                self.on_launch(self.launches, label, None, why)
            raise
        ready = clock.now() - started
        if self.start_s is None:
            self.start_s = ready
        self._started[server.base_url] = started
        if self.on_launch is not None:
            self.on_launch(self.launches, label, ready, "")
        return server

    def _stop(self, server: runner.RunningServer) -> None:
        server.stop()
        started = self._started.pop(server.base_url, None)
        if started is not None:
            self.server_s += clock.now() - started

    def _good_server(self) -> runner.RunningServer:
        if self._good is None:
            self._good = self._start(self.good_profile, "good")
        return self._good

    def _server(self, config: Mapping[str, Any], label: str) -> runner.RunningServer:
        """The server for ``config``, launched when no running one serves it, viewed with the probe's profile."""
        profile = self.profile(config, label)
        key = launch_key(config)
        if key == self.good_key:
            server = self._good_server()
        elif self._probe is not None and self._probe[0] == key:
            server = self._probe[1]
        else:
            if self._probe is not None:
                self._stop(self._probe[1])
                self._probe = None
            self._good_server()  # started first: the paired arm every probe is measured against
            server = self._start(profile, label)
            self._probe = (key, server)
        # Same process, the probe's workload (a workload-only difference needs no launch).
        return server if server.profile == profile else dataclasses.replace(server, profile=profile)

    @property
    def phase_s(self) -> float | None:
        """Mean seconds of one measured phase so far (exact phases and either arm of a pair), None before any."""
        return self._phase_time / self._phase_count if self._phase_count else None

    def _phases_took(self, since: float, count: int) -> None:
        self._phase_time += clock.now() - since
        self._phase_count += count

    def running(self) -> str | None:
        """The launch key of the probe server running now (None: only the good one)."""
        return self._probe[0] if self._probe is not None else None

    def exact(self, config: Mapping[str, Any], label: str, phases: int) -> dict[str, list[float]]:
        """``phases`` measured phases of the probe: per exact field, the per-phase values (None dropped).

        :raises ServerStartError, ServerError, ProfileError: the probe could not be measured.
        :raises BudgetSpent: it needs a launch beyond ``max_launches``.
        """
        server = self._server(config, label)
        prompts = runner.profile_prompts(server.profile)
        since = clock.now()
        measured = [runner.measure(server, prompts=prompts) for _ in range(max(phases, 1))]
        self._phases_took(since, len(measured))
        out: dict[str, list[float]] = {}
        for name in EXACT_FIELDS:
            values = [getattr(m.metrics, name) for m in measured]
            out[name] = [float(v) for v in values if isinstance(v, int | float)]
        return out

    def pairs(self, config: Mapping[str, Any], label: str, count: int) -> list[float]:
        """``count`` pairs of phases, probe and reference arm interleaved (R T, T R, ..., continuing the order of
        this label's earlier pairs): the probe/reference tok/s ratios.

        :raises ServerStartError, ServerError, ProfileError: the probe could not be measured.
        :raises BudgetSpent: it needs a launch beyond ``max_launches``.
        """
        server = self._server(config, label)
        offset = self._pairs.get(label, 0)
        reference = self._good_server()
        since = clock.now()
        arms = pairing.measure_interleaved(server, reference, count, offset=offset)
        self._phases_took(since, 2 * count)
        self._pairs[label] = offset + count
        return arms.ratios("output_tok_s")

    def hold(self, config: Mapping[str, Any], label: str) -> None:
        """Make ``config`` the reference arm of every later pair: the probe server that serves it is kept (else it
        is launched), the previous reference arm's server is stopped.

        :raises ServerStartError, ProfileError: its server could not be started.
        :raises BudgetSpent: it needs a launch beyond ``max_launches``.
        """
        key = launch_key(config)
        profile = self.profile(config, label)
        if key == self.good_key:
            return
        if self._probe is not None and self._probe[0] == key:
            server = self._probe[1]
            self._probe = None
        else:
            if self._probe is not None:
                self._stop(self._probe[1])
                self._probe = None
            server = self._start(profile, label)
        if self._good is not None:
            self._stop(self._good)
        self._good = server if server.profile == profile else dataclasses.replace(server, profile=profile)
        self.good_key = key
        self.good_profile = profile

    def close(self) -> None:
        """Stop every server still running (the probe's, then the good one)."""
        if self._probe is not None:
            self._stop(self._probe[1])
            self._probe = None
        if self._good is not None:
            self._stop(self._good)
            self._good = None
