"""Measured-phase progress: the client's per-request callback and the status line (pytest_specdec.run.progress)."""

from __future__ import annotations

import httpx
import pytest

from pytest_specdec.core import clock as specdec_clock
from pytest_specdec.core.records import RequestRecord
from pytest_specdec.measure.client import run_phase
from pytest_specdec.run.progress import PhaseProgress
from tests.helpers import BASE, GENERATE_SCRIPT, FakeClock, req, sse

OK = RequestRecord(ok=True, error=None, start_s=10.0, end_s=11.0, prompt_tokens=5, completion_tokens=64)
FAILED = RequestRecord(ok=False, error="boom", start_s=10.5, end_s=10.6, prompt_tokens=5, completion_tokens=0)


@pytest.fixture
def fake_clock(monkeypatch: pytest.MonkeyPatch) -> FakeClock:
    fake = FakeClock()
    monkeypatch.setattr(specdec_clock, "now", fake.now)
    return fake


def test_client_reports_each_finished_request_once(fake_clock: FakeClock) -> None:
    calls = 0

    async def handler(request: httpx.Request) -> httpx.Response:
        nonlocal calls
        calls += 1
        if calls == 2:
            return httpx.Response(500, text="overloaded")
        return httpx.Response(
            200, content=sse(fake_clock, GENERATE_SCRIPT)(), headers={"content-type": "text/event-stream"}
        )

    done: list[RequestRecord] = []
    phase = run_phase(BASE, [req("a"), req("b"), req("c")], transport=httpx.MockTransport(handler),
                      on_request_done=done.append)  # fmt: skip
    assert [r.ok for r in done] == [True, False, True]
    assert sorted(map(id, done)) == sorted(map(id, phase.records))  # the records themselves, once each


# Worker processes report each finished request too: tests/test_client.py's workers test checks it on the phase it
# runs (one phase of worker processes for both).


class Clock:
    def __init__(self, t: float) -> None:
        self.t = t

    def __call__(self) -> float:
        return self.t


def test_terminal_line_at_most_every_half_second_and_for_the_last_request() -> None:
    clock, lines = Clock(10.0), []
    progress = PhaseProgress("eagle3", 3, 2, lines.append, tty=True, now=clock)
    clock.t = 11.0
    progress(OK)  # 64 tokens over 1 s since the first start
    clock.t = 11.2
    progress(FAILED)  # 0.2 s after the last line: not written
    clock.t = 12.0
    progress(OK)  # the last request: always written
    assert lines == [
        "specdec: measuring eagle3 (phase 2): 1/3 requests, 64.0 tok/s so far",
        "specdec: measuring eagle3 (phase 2): 3/3 requests, 64.0 tok/s so far",
    ]


def test_log_line_every_30_seconds() -> None:
    clock, lines = Clock(10.0), []
    progress = PhaseProgress("eagle3", 100, 1, lines.append, tty=False, now=clock)
    for t in (20.0, 39.0, 40.0, 50.0, 70.5):
        clock.t = t
        progress(OK)
    assert lines == [
        # At once when the session's first phase starts: a CI log says what the run waits for (a fresh-user trial
        # read nothing for the first 30 s on a busy runner).
        "specdec: measuring eagle3 (phase 1): 0/100 requests",
        "specdec: measuring eagle3 (phase 1): 3/100 requests, 6.4 tok/s so far",  # 192 tokens / 30 s
        "specdec: measuring eagle3 (phase 1): 5/100 requests, 5.3 tok/s so far",  # 320 tokens / 60.5 s
    ]
    assert PhaseProgress("p", 2, 1, [].append, tty=False, now=Clock(0.0)).line(0.0) == (
        "specdec: measuring p (phase 1): 0/2 requests"
    )


def test_the_line_says_what_the_phase_is_for() -> None:
    # A fresh-user trial read "measuring baseline (phase 18)" and could not tell what it was for or when it would end.
    lines: list[str] = []
    progress = PhaseProgress("baseline", 2, 18, lines.append, tty=True, now=Clock(0.0),
                             purpose="eagle3 vs baseline, min_speedup: pair 9 of at most 24")  # fmt: skip
    assert progress.line(0.0) == (
        "specdec: measuring baseline (phase 18; eagle3 vs baseline, min_speedup: pair 9 of at most 24): 0/2 requests"
    )


def test_log_interval_spans_phases() -> None:
    """Phases of 8 s each (a sweep, paired arms): one line per 30 s of the session, not none (issue 27)."""
    from pytest_specdec.run.progress import LogPacer

    clock, lines = Clock(0.0), []
    pacer = LogPacer(now=clock)
    for phase in range(1, 9):  # 8 phases x 4 requests, 2 s apart: 64 s in all
        progress = PhaseProgress("eagle3", 4, phase, lines.append, tty=False, now=clock, pacer=pacer)
        for _ in range(4):
            clock.t += 2.0
            progress(OK)
    # When the first phase starts; 30 s after it: phase 4's 3rd request (t=30); then t=60, phase 8's 2nd request.
    assert [line.split(":")[1] for line in lines] == [
        " measuring eagle3 (phase 1)", " measuring eagle3 (phase 4)", " measuring eagle3 (phase 8)"
    ]
    assert lines[1].startswith("specdec: measuring eagle3 (phase 4): 3/4 requests")


def test_measure_status_keeps_one_pacer_per_session(pytester: pytest.Pytester) -> None:
    from pytest_specdec.run.progress import MeasureStatus

    config = pytester.parseconfigure()
    first, second = MeasureStatus(config), MeasureStatus(config)
    assert first.pacer is second.pacer


def test_startup_log_line_at_the_first_report_then_every_30_seconds(pytester: pytest.Pytester) -> None:
    from pytest_specdec.run.progress import StartupProgress

    class Log:
        """A terminal reporter writing to a log that is not a terminal."""

        def __init__(self, config: pytest.Config) -> None:
            self.config, self.lines = config, []

        def isatty(self) -> bool:
            return False

        def write_line(self, text: str) -> None:
            self.lines.append(text)

        def flush(self) -> None:
            pass

    progress = StartupProgress(pytester.parseconfigure(), "eagle3")
    progress.tr = log = Log(progress.tr.config)
    for elapsed_s in (0.5, 1.0, 29.0, 30.6, 31.0, 61.0):
        progress(elapsed_s, 600.0, f"line at {elapsed_s}")
    assert log.lines == [
        "specdec: starting eagle3: 0/600 s | line at 0.5",  # at once: a CI log said nothing for the first 30 s
        "specdec: starting eagle3: 31/600 s | line at 30.6",
        "specdec: starting eagle3: 61/600 s | line at 61.0",
    ]
