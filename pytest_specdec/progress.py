"""Progress of a measured phase: requests done / total and output tok/s so far, as one status line.

The client calls a :class:`PhaseProgress` once per finished request (``client.run_requests(on_request_done=...)``),
never per stream event, so the display costs the hot path one call and a few additions per request.
"""

from __future__ import annotations

from collections.abc import Callable

from pytest_specdec import clock
from pytest_specdec.records import RequestRecord

__all__ = ["PhaseProgress"]

#: Seconds between two lines in a log that is not a terminal (CI), as the startup status line does.
LOG_INTERVAL_S = 30.0
#: Seconds between two rewrites of the terminal line (a fast phase finishes many requests per second).
TTY_INTERVAL_S = 0.5


class PhaseProgress:
    """Counts one measured phase's finished requests and writes a status line through ``write``:

    ``specdec: measuring eagle3 (phase 2): 7/16 requests, 123.4 tok/s so far``

    tok/s so far = Σ completion tokens of the finished ok requests / (now - the earliest start among them), the
    phase's own formula (``metrics.summarize``) on what has finished. On a terminal (``tty``) the line is written at
    most every 0.5 s and for the last request; in a log, at most every 30 s after the phase started.

    :param profile: the profile measured.
    :param total: requests in the phase.
    :param phase: the phase's number for this profile in the session (1, 2, ...).
    :param write: receives each line (the plugin rewrites the terminal line or writes a log line).
    :param now: the clock (``clock.now``, ``time.perf_counter`` seconds; the records' clock).
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
    ) -> None:
        self.profile, self.total, self.phase, self.write, self.tty, self.now = profile, total, phase, write, tty, now
        self.done = 0
        self.tokens = 0
        self.first_start_s: float | None = None
        self.last_write_s = now()

    def line(self, now_s: float) -> str:
        """The status text at ``now_s``."""
        elapsed = now_s - self.first_start_s if self.first_start_s is not None else 0.0
        rate = f", {self.tokens / elapsed:.1f} tok/s so far" if elapsed > 0 and self.tokens else ""
        return f"specdec: measuring {self.profile} (phase {self.phase}): {self.done}/{self.total} requests{rate}"

    def __call__(self, record: RequestRecord) -> None:
        """One request finished (ok or failed)."""
        self.done += 1
        if record.ok:
            self.tokens += record.completion_tokens
            if self.first_start_s is None or record.start_s < self.first_start_s:
                self.first_start_s = record.start_s
        now_s = self.now()
        interval = TTY_INTERVAL_S if self.tty else LOG_INTERVAL_S
        if now_s - self.last_write_s >= interval or (self.tty and self.done == self.total):
            self.last_write_s = now_s
            self.write(self.line(now_s))
