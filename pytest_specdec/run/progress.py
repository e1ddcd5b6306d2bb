"""Progress of a measured phase (requests done / total and output tok/s so far) and of a server's startup, as one
status line: rewritten on a terminal; in CI logs a line at once, then one every 30 s; xdist workers stay silent.

The client calls a :class:`PhaseProgress` once per finished request (``client.run_requests(on_request_done=...)``),
never per stream event, so the display costs the hot path one call and a few additions per request.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable

import pytest

from pytest_specdec.core import clock
from pytest_specdec.core.records import RequestRecord
from pytest_specdec.core.xdistnode import is_worker

__all__ = ["LogPacer", "MeasureStatus", "PhaseProgress", "StartupProgress"]

#: profile -> phases measured so far in this session (``MeasureStatus``; confirmations continue the count).
_phases_key = pytest.StashKey[dict[str, int]]()

#: Seconds between two lines in a log that is not a terminal (CI), as the startup status line does.
LOG_INTERVAL_S = 30.0
#: Seconds between two rewrites of the terminal line (a fast phase finishes many requests per second).
TTY_INTERVAL_S = 0.5


class LogPacer:
    """When the next line may go to a log that is not a terminal: at most one every ``interval_s``, counted across
    phases. A sweep's or a paired run's phases last 5-10 s each, so a timer restarted with every phase never fired;
    one pacer per session spans them.

    :param interval_s: seconds between two lines (default: ``LOG_INTERVAL_S`` at the time of each check).
    :param now: the clock (``clock.now`` seconds).
    """

    def __init__(self, interval_s: float | None = None, now: Callable[[], float] | None = None) -> None:
        # Both looked up at call time, so a test's monkeypatched ``clock.now`` or ``LOG_INTERVAL_S`` reaches a pacer
        # kept in the stash.
        self._interval_s, self.now = interval_s, now if now is not None else (lambda: clock.now())
        #: when the last line was written, or when the first phase started (``start``); None before that.
        self.last_s: float | None = None

    def start(self) -> bool:
        """A phase starts: the first interval counts from the session's first phase. True for that first phase: its
        line is written at once, so a CI log says what the run waits for before the first 30 s are up."""
        if self.last_s is None:
            self.last_s = self.now()
            return True
        return False

    def due(self, now_s: float) -> bool:
        """Whether a line may be written at ``now_s``; if so, the next interval starts there."""
        if self.last_s is None:
            self.last_s = now_s
        interval_s = LOG_INTERVAL_S if self._interval_s is None else self._interval_s
        if now_s - self.last_s < interval_s:
            return False
        self.last_s = now_s
        return True


#: The session's pacer: a ``MeasureStatus`` is made per measurement, the 30 s interval spans them.
_pacer_key = pytest.StashKey[LogPacer]()


class PhaseProgress:
    """Counts one measured phase's finished requests and writes a status line through ``write``:

    ``specdec: measuring eagle3 (phase 2): 7/16 requests, 123.4 tok/s so far``, with what the phase is for when
    said: ``specdec: measuring baseline (phase 18; eagle3 vs baseline, min_speedup: pair 9 of at most 24): ...``

    tok/s so far = Σ completion tokens of the finished ok requests / (now - the earliest start among them), the
    phase's own formula (``metrics.phase_metrics``) on what has finished. On a terminal (``tty``) the line is written at
    most every 0.5 s and for the last request; in a log, when the session's first phase starts (``0/16 requests``)
    and then at most every 30 s, counted by ``pacer`` across the session's phases (default: a pacer of this phase
    alone, started now).

    :param profile: the profile measured.
    :param total: requests in the phase.
    :param phase: the phase's number for this profile in the session (1, 2, ...).
    :param write: receives each line (the plugin rewrites the terminal line or writes a log line).
    :param now: the clock (``clock.now``, ``time.perf_counter`` seconds; the records' clock).
    :param pacer: the log-line pacer shared by the session's phases (ignored on a terminal).
    :param purpose: what the phase is for (``measure.runner.phase_purpose``), or empty.
    """

    def __init__(
        self,
        profile: str,
        total: int,
        phase: int,
        write: Callable[[str], None],
        *,
        tty: bool,
        now: Callable[[], float] = clock.now,
        pacer: LogPacer | None = None,
        purpose: str = "",
    ) -> None:
        self.profile, self.total, self.phase, self.write, self.tty, self.now = profile, total, phase, write, tty, now
        self.purpose = purpose
        self.done = 0
        self.tokens = 0
        self.first_start_s: float | None = None
        self.last_write_s = now()
        self.pacer = pacer if pacer is not None else LogPacer(now=now)
        if self.pacer.start() and not tty:
            write(self.line(self.last_write_s))

    def line(self, now_s: float) -> str:
        """The status text at ``now_s``."""
        elapsed = now_s - self.first_start_s if self.first_start_s is not None else 0.0
        rate = f", {self.tokens / elapsed:.1f} tok/s so far" if elapsed > 0 and self.tokens else ""
        # A new user read "measuring baseline (phase 18)" and could not tell what it was for or when it would end.
        what = f"phase {self.phase}; {self.purpose}" if self.purpose else f"phase {self.phase}"
        return f"specdec: measuring {self.profile} ({what}): {self.done}/{self.total} requests{rate}"

    def __call__(self, record: RequestRecord) -> None:
        """One request finished (ok or failed)."""
        self.done += 1
        if record.ok:
            self.tokens += record.completion_tokens
            if self.first_start_s is None or record.start_s < self.first_start_s:
                self.first_start_s = record.start_s
        now_s = self.now()
        if self.tty:
            if now_s - self.last_write_s >= TTY_INTERVAL_S or self.done == self.total:
                self.last_write_s = now_s
                self.write(self.line(now_s))
        elif self.pacer.due(now_s):
            self.write(self.line(now_s))


def _live(config: pytest.Config) -> contextlib.AbstractContextManager[object]:
    """Output capturing suspended, as pytest's live logging does (``logging.py``): a status line written while a
    fixture runs would otherwise go to the test's captured output, shown only if it fails."""
    capman = config.pluginmanager.get_plugin("capturemanager")
    return capman.global_and_fixture_disabled() if capman is not None else contextlib.nullcontext()


class MeasureStatus:
    """Measured-phase status (``progress.PhaseProgress``: requests done/total, tok/s so far): a rewritten line on a
    terminal, a line every 30 s in CI logs; xdist workers stay silent."""

    def __init__(self, config: pytest.Config) -> None:
        self.config = config
        self.tr = None if is_worker(config) else config.pluginmanager.get_plugin("terminalreporter")
        self.tty = bool(self.tr is not None and self.tr.isatty())
        #: profile -> phases measured so far in this session (confirmations continue the count)
        self.phases = config.stash.setdefault(_phases_key, {})
        self.pacer = config.stash.setdefault(_pacer_key, LogPacer())
        self.started = False

    def __call__(self, profile: str, total: int) -> PhaseProgress | None:
        if self.tr is None:
            return None
        from pytest_specdec.measure import runner

        self.phases[profile] = self.phases.get(profile, 0) + 1
        return PhaseProgress(profile, total, self.phases[profile], self._write, tty=self.tty, pacer=self.pacer,
                             purpose=runner.phase_purpose.get())  # fmt: skip

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


class StartupProgress:
    """Startup status: a rewritten line on a terminal; in CI logs, a line at the first report (about 0.5 s after the
    launch) and then every 30 s."""

    def __init__(self, config: pytest.Config, name: str) -> None:
        self.tr = config.pluginmanager.get_plugin("terminalreporter")
        self.name = name
        self.tty = bool(self.tr is not None and self.tr.isatty() and not is_worker(config))
        #: elapsed seconds of the last log line; None before the first, which is written at once (a CI log said
        #: nothing for the first 30 s of a start).
        self.last_print: float | None = None
        self.started = False

    def __call__(self, elapsed_s: float, budget_s: float, last_line: str) -> None:
        if self.tr is None or is_worker(self.tr.config):
            return
        text = f"specdec: starting {self.name}: {elapsed_s:.0f}/{budget_s:.0f} s | {last_line.strip()[:90]}"
        with _live(self.tr.config):
            if self.tty:
                if not self.started:
                    self.tr.write("\n")
                    self.started = True
                self.tr.rewrite(text)
            elif self.last_print is None or elapsed_s - self.last_print >= LOG_INTERVAL_S:
                self.last_print = elapsed_s
                self.tr.write_line(text)
            self.tr.flush()

    def done(self) -> None:
        if self.tty and self.started and self.tr is not None:
            with _live(self.tr.config):
                self.tr.rewrite("", erase=True)
                self.tr.flush()
