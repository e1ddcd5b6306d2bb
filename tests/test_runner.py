"""Tests of pytest_specdec.measure.runner pieces that need no server: the client-overload verdict and worker choice."""

from __future__ import annotations

import dataclasses
import os
from types import SimpleNamespace

import pytest

from pytest_specdec.core.errors import ClientOverloadError, ServerError
from pytest_specdec.core.records import RequestRecord
from pytest_specdec.measure import runner
from pytest_specdec.measure.client import ClientLoad
from pytest_specdec.measure.metrics import phase_metrics
from pytest_specdec.profiles.schema import Profile

# One request: ITL 10 ms (events 10 ms apart, one token each).
RECORD = RequestRecord(True, None, 0.0, 0.05, 4, 4, (0.02, 0.03, 0.04, 0.05), (1, 1, 1, 1))
OVERLOADED = "client overloaded: event-loop lag p99 2.00 ms > 10% of ITL p50 10.00 ms"


def run_with_lag(lag_ms: float) -> object:
    run = phase_metrics([RECORD], 0.05, num_steps=None, speculative=False)
    return dataclasses.replace(run, client_lag_ms_p99=lag_ms, client_cpu_cores=0.9, client_workers=1)


def test_client_overload_warns_by_default_and_fails_when_the_profile_says() -> None:
    warn = Profile.model_validate({"name": "p"})
    assert runner.client_verdict(warn, run_with_lag(0.5)) is None  # type: ignore[arg-type]
    line = runner.client_verdict(warn, run_with_lag(2.0))  # type: ignore[arg-type]
    assert line is not None and line.startswith(OVERLOADED)
    strict = Profile.model_validate({"name": "p", "workload": {"client_overload": "fail"}})
    with pytest.raises(ClientOverloadError) as info:
        runner.client_verdict(strict, run_with_lag(2.0))  # type: ignore[arg-type]
    assert str(info.value).startswith(f"profile p: {OVERLOADED} (client CPU 0.90 cores, 1 worker process)")
    assert str(info.value).endswith("(workload.client_overload: fail)")


def test_client_overload_fail_does_not_fire_on_a_busy_machine() -> None:
    # The same lag with the client at 0.07 cores: the server or other processes held the CPU; more client workers
    # would not help, so client_overload: fail leaves it a warning that says so.
    strict = Profile.model_validate({"name": "p", "workload": {"client_overload": "fail"}})
    idle = dataclasses.replace(run_with_lag(2.0), client_cpu_cores=0.07)  # type: ignore[type-var]
    line = runner.client_verdict(strict, idle)  # type: ignore[arg-type]
    assert line == (
        "machine busy: event-loop lag p99 2.00 ms > 10% of ITL p50 10.00 ms while the client used 0.07 cores (1 "
        "worker process); the server or other processes took the CPU, so TTFT and ITL include waits for a free "
        "core; fix: run fewer jobs beside the benchmark, or the server on another machine"
    )


@pytest.mark.parametrize(
    ("setting", "load", "expected"),
    [(3, None, 3), ("auto", None, 4), ("auto", ClientLoad(0.1, 2.0, 4.0, cpu_cores=2.6), 6)],
)
def test_client_workers_set_or_chosen_from_the_last_phase(
    monkeypatch: pytest.MonkeyPatch, setting: object, load: ClientLoad | None, expected: int
) -> None:
    monkeypatch.setattr(os, "cpu_count", lambda: 16)
    profile = Profile.model_validate({"name": "p", "workload": {"concurrency": 64, "client_workers": setting}})
    server = runner.RunningServer(profile, engine=None, base_url="http://x", api_key=None)  # type: ignore[arg-type]
    runner._keep_load(server, load)
    assert runner.client_load_of(server) is load
    assert runner._client_workers(server) == expected  # 64 streams / 16 -> 4; 2.6 cores -> ceil(2.6 / 0.5) = 6


def test_url_profile_without_speculative_on_an_eagle3_server_gets_the_lines_to_add() -> None:
    from pytest_specdec.core.errors import ServerStartError
    from pytest_specdec.engines.base import EffectiveConfig

    eff = EffectiveConfig("0.5.17", "EAGLE3", 3, 1, 4, None, {"speculative_algorithm": "EAGLE3",
                          "speculative_draft_model_path": "lmsys/sglang-EAGLE3-LLaMA3.1-Instruct-8B"})  # fmt: skip

    class Engine:
        def effective_config(self, http: object, profile: Profile) -> EffectiveConfig:
            return eff

    profile = Profile.model_validate({"name": "remote", "url": "http://gpu:30000", "source": "/p/specdec.yaml"})
    server = runner.RunningServer(profile, Engine(), "http://gpu:30000", None)  # type: ignore[arg-type]
    with pytest.raises(ServerStartError) as info:
        runner.read_back(server)
    assert str(info.value).splitlines() == [
        "server for profile 'remote' (http://gpu:30000) runs a different speculative config than the profile asks "
        "for:",
        "  speculative_algorithm: profile none, server 'EAGLE3'",
        "  fix: add these lines to profiles.remote in /p/specdec.yaml (what the server reports it runs), or point the "
        "profile at a server without speculative decoding:",
        "      speculative:",
        "        algorithm: EAGLE3",
        "        draft_model_path: lmsys/sglang-EAGLE3-LLaMA3.1-Instruct-8B",
        "        num_steps: 3",
        "        eagle_topk: 1",
        "        num_draft_tokens: 4",
    ]


class _DyingProcess:
    """A launched server that died but is seen exited only on its ``seen_dead_after``-th liveness check (a process
    closes its sockets before the kernel marks it exited)."""

    def __init__(self, seen_dead_after: int) -> None:
        self.checks = 0
        self.seen_dead_after = seen_dead_after
        self.when: str | None = None

    def alive(self) -> bool:
        self.checks += 1
        return self.checks < self.seen_dead_after

    def check_alive(self, when: str = "while running") -> None:
        if self.alive():
            return
        self.when = when
        raise ServerError(f"server 'p' exited with code 1 {when}")


FAILED = RequestRecord(False, "ServerDisconnectedError on http://h/generate: Server disconnected", 0.0, 0.1, 4, 0)


def test_a_death_mid_phase_is_reported_as_the_death_with_how_far_the_phase_got() -> None:
    """The last request failed: the server is given a moment to be seen exited, so the error is its death (cause,
    log) rather than "2 of 4 requests failed"; the message says how many measured requests succeeded."""
    dying = _DyingProcess(seen_dead_after=4)
    with pytest.raises(ServerError, match=r"^server 'p' exited with code 1 while running, after 2 of 4 measured "):
        runner._check_alive(SimpleNamespace(process=dying), [RECORD, RECORD, FAILED, FAILED])  # type: ignore[arg-type]
    assert dying.when == "while running, after 2 of 4 measured requests succeeded"
    none_ok = _DyingProcess(seen_dead_after=1)
    with pytest.raises(ServerError, match=r"before any of 2 measured requests succeeded$"):
        runner._check_alive(SimpleNamespace(process=none_ok), [FAILED, FAILED])  # type: ignore[arg-type]


def test_a_live_server_whose_last_request_succeeded_is_not_waited_for() -> None:
    alive = _DyingProcess(seen_dead_after=10**9)
    runner._check_alive(SimpleNamespace(process=alive), [FAILED, RECORD])  # type: ignore[arg-type]
    assert alive.checks == 1  # check_alive's own look, no wait
