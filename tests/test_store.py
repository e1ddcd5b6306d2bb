"""``measure/store.py``: the store measures a profile once, then one more repeat or pair at a time when a verdict asks
(``judge/handle.py::MeasureHandle``), with what it cost (fake servers
whose phases return scripted tok/s; no process is started)."""

from __future__ import annotations

import contextlib
import dataclasses
from collections.abc import Iterator
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from pytest_specdec.core.errors import ServerError
from pytest_specdec.core.records import RunMetrics, median_metrics
from pytest_specdec.judge.handle import MeasureHandle
from pytest_specdec.measure import pairing, results, runner
from pytest_specdec.measure.store import MeasurementStore


def _metrics(tok_s: float) -> RunMetrics:
    fields = {f.name: None for f in dataclasses.fields(RunMetrics)}
    fields.update(num_requests=1, num_ok=1, num_errors=0, duration_s=1.0, output_tokens=int(tok_s), output_tok_s=tok_s)
    return RunMetrics(**fields)


class _Phases:
    """Scripted phases: each profile's next tok/s; each phase holds its server 2 s (target) or 1 s (reference)."""

    def __init__(self, speeds: dict[str, list[float]]) -> None:
        self.speeds = speeds
        self.log: list[str] = []
        self.purposes: list[str] = []  # runner.phase_purpose at each phase: what the progress line says it is for

    def measure(self, server: Any, **_: Any) -> runner.Measurement:
        name = server.profile.name
        self.log.append(name)
        self.purposes.append(runner.phase_purpose.get())
        if not self.speeds[name]:
            raise ServerError(f"{name} stalled")
        held = 1.0 if name == "baseline" else 2.0
        return runner.Measurement(name, _metrics(self.speeds[name].pop(0)), (), "h", None, None, None, server_s=held)

    def run_result(self, server: Any, measured: Any) -> runner.RunResult:
        measured = tuple(measured)
        return runner.RunResult(server.profile.name, measured, median_metrics([m.metrics for m in measured]), "h")


def _server(name: str) -> Any:
    profile = SimpleNamespace(name=name, trace=None, pairing="interleaved", url=None, workload=SimpleNamespace())
    return SimpleNamespace(profile=profile, process=None, stop=lambda: None)


@contextlib.contextmanager
def _no_lock() -> Iterator[None]:
    yield None


@pytest.fixture
def phases(monkeypatch: pytest.MonkeyPatch) -> _Phases:
    fake = _Phases({"eagle3": [130.0, 120.0, 140.0, 110.0, 150.0], "baseline": [100.0, 80.0, 100.0]})
    monkeypatch.setattr(runner, "measure", fake.measure)
    monkeypatch.setattr(runner, "profile_prompts", lambda profile: [])
    monkeypatch.setattr(runner, "run_result", fake.run_result)
    monkeypatch.setattr(
        runner, "measure_repeats", lambda s, n, **kw: fake.run_result(s, [fake.measure(s) for _ in range(n)])
    )
    monkeypatch.setattr(results, "build_fingerprint", lambda server, prompt_hash: {"prompt_hash": prompt_hash})
    reference = _server("baseline")
    monkeypatch.setattr(pairing.ReferenceServers, "get", lambda self, profile, on_launch=None: reference)
    return fake


def _store(repeats: int = 2) -> MeasurementStore:
    return MeasurementStore(
        log_dir=Path("logs"),
        startup_timeout_s=None,
        repeats=lambda profile: repeats,
        profiles={"baseline": _server("baseline").profile},
        lock=_no_lock,
    )


def test_a_reference_server_start_cut_short_by_ctrl_c_is_named_with_the_stopped_servers(
    phases: _Phases, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A fresh-user trial: Ctrl-C while min_speedup's reference server started; the interrupted run named only the
    # target's server. start_server stops the one it launched before re-raising; the store names it.
    def interrupted(self: Any, profile: Any, on_launch: Any = None) -> Any:
        on_launch(SimpleNamespace(name=profile.name, pid=4242))
        raise KeyboardInterrupt

    monkeypatch.setattr(pairing.ReferenceServers, "get", interrupted)
    store = _store()
    server = _server("eagle3")
    store.attach(server)
    with pytest.raises(KeyboardInterrupt):
        store.measure_once(server, "baseline")
    assert store.stopped == ["baseline (pid 4242, interrupted while starting)"]
    # A start that failed otherwise (its error is reported as such) or launched nothing is not named here.
    for raised, launch in ((ServerError("no"), True), (KeyboardInterrupt(), False)):
        with pytest.raises(type(raised)), store.launching() as on_launch:
            if launch:
                on_launch(SimpleNamespace(name="eagle3", pid=1))
            raise raised
    assert store.stopped == ["baseline (pid 4242, interrupted while starting)"]


def test_more_adds_one_repeat_and_its_server_seconds(phases: _Phases) -> None:
    store = _store()
    handle: MeasureHandle = store  # the store is what verdicts get, through the narrow handle
    server = _server("eagle3")
    store.attach(server)
    store.measure_once(server, None)
    assert [m.metrics.output_tok_s for m in handle.run("eagle3").measurements] == [130.0, 120.0]
    assert handle.spent_s("eagle3", None) == 4.0
    assert handle.more("eagle3", None) is True
    run = handle.run("eagle3")
    assert ([m.metrics.output_tok_s for m in run.measurements], run.metrics.output_tok_s) == (
        [130.0, 120.0, 140.0],
        130,
    )
    assert handle.spent_s("eagle3", None) == 6.0
    store.detach("eagle3")
    assert (handle.can_measure("eagle3"), handle.more("eagle3", None)) == (False, False)


def test_more_adds_one_interleaved_pair_in_the_order_the_pairs_left_off(phases: _Phases) -> None:
    store = _store()
    server = _server("eagle3")
    store.attach(server)
    store.measure_once(server, "baseline")
    assert phases.log == ["baseline", "eagle3", "eagle3", "baseline"]
    assert store.more("eagle3", "baseline", why="min_speedup: pair 3 of at most 24") is True
    assert phases.log[4:] == ["baseline", "eagle3"]  # pair 2 (even): reference first, as pair 0
    assert phases.purposes == 4 * ["eagle3 vs baseline: first 2 pairs"] + 2 * [
        "eagle3 vs baseline, min_speedup: pair 3 of at most 24"
    ]
    assert runner.phase_purpose.get() == ""  # said only while it measures
    arms = store.arms("eagle3", "baseline")
    assert arms is not None and (arms.pairs, arms.first, arms.ratios()) == (3, 2, [1.3, 1.5, 1.4])
    assert len(store.run("eagle3").measurements) == 3
    assert store.spent_s("eagle3", "baseline") == 3 * 2.0 + 3 * 1.0


def test_a_pairing_after_a_solo_measurement_counts_its_target_phases(phases: _Phases) -> None:
    # An audit finding: a test without min_speedup measured eagle3 alone (2 x 2 s), then min_speedup paired it
    # (2 x 2 s target, 2 x 1 s reference): the pair's target phases are not the run's, and the cost line left them out.
    store = _store()
    server = _server("eagle3")
    store.attach(server)
    store.measure_once(server, None)
    store.measure_once(server, "baseline")
    assert len(store.run("eagle3").measurements) == 2
    assert store.spent_s("eagle3", None) == 4.0
    assert store.spent_s("eagle3", "baseline") == 4.0 + 2 * 2.0 + 2 * 1.0
    assert store.more("eagle3", "baseline") is True  # its target phase joins the run: counted once, not twice
    assert store.spent_s("eagle3", "baseline") == 4.0 + 3 * 2.0 + 3 * 1.0


def test_a_pair_that_cannot_be_measured_again_says_why(phases: _Phases) -> None:
    store = _store()
    server = _server("eagle3")
    store.attach(server)
    store.measure_once(server, "baseline")
    phases.speeds["baseline"].clear()
    assert store.more("eagle3", "baseline") is False
    assert store.pair_error("eagle3", "baseline") == "sequential measurement failed: baseline stalled"
    # What a verdict that stopped there says instead of "more repeats would decide it".
    assert store.more_error("eagle3") == "measuring eagle3 paired with baseline again failed: baseline stalled"
    assert len(store.run("eagle3").measurements) == 2


def test_more_pools_the_tails_of_every_repeat_as_the_first_measurement_did(
    phases: _Phases, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A fresh-user trial: after min_tok_s added a repeat, the p99 ceiling and goodput read "4 of 4 requests" of 3
    # repeats of 4: more() took per-field medians, which keep one repeat's tails, not runner.pooled_metrics.
    pooled: list[int] = []

    def spy(measurements: Any) -> RunMetrics:
        pooled.append(len(measurements))
        return median_metrics([m.metrics for m in measurements])

    monkeypatch.setattr(runner, "pooled_metrics", spy)
    store = _store()
    server = _server("eagle3")
    store.attach(server)
    store.measure_once(server, None)
    assert store.more("eagle3", None) is True
    assert pooled == [3]


def test_more_ends_the_runner_entry_at_its_own_last_phase(phases: _Phases, monkeypatch: pytest.MonkeyPatch) -> None:
    # The compare reads the runner's load from the fingerprint (a busy CPU widens the ratio rows' run-to-run sd): a
    # runner that got busy while a verdict measured on must show in it, not only the load over the first phases.
    from pytest_specdec.core import hoststate

    loads = iter([0.5, 0.9, 6.0])
    monkeypatch.setattr(hoststate, "snapshot", lambda: {"load1": next(loads), "cpus": 2, "cpu_times": {}, "gpu": None})
    store = _store()
    server = _server("eagle3")
    store.attach(server)
    store.measure_once(server, "baseline")
    first = store.fingerprint("eagle3")["runner"]
    assert (first["load1_before"], first["load1_after"]) == (0.5, 0.9)
    assert store.more("eagle3", "baseline") is True
    runner_state = store.fingerprint("eagle3")["runner"]
    assert (runner_state["load1_before"], runner_state["load1_after"]) == (0.5, 6.0)
    assert hoststate.oversubscribed(runner_state) == (3.0,)
