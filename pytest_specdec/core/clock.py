"""The one monotonic clock every client-side duration is read from (tests replace ``now``)."""

from __future__ import annotations

import time

__all__ = ["now"]


def now() -> float:
    """Seconds from ``time.perf_counter()``: monotonic, arbitrary origin, only differences are meaningful.

    Callers must look it up as ``clock.now()`` (not ``from clock import now``) so that a test's
    ``monkeypatch.setattr(pytest_specdec.core.clock, "now", fake)`` reaches them.
    """
    return time.perf_counter()
