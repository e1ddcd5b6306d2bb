"""What a verdict may ask of the run's measurements: read a profile's run and paired arms, and ask for more.

:class:`MeasureHandle` is the narrow face of ``measure.store.MeasurementStore`` that ``judge.verdict`` sees: a
verdict that cannot decide on what was measured asks for one more repeat or pair (:meth:`MeasureHandle.more`) and
reads what it cost (:meth:`MeasureHandle.spent_s`), until decided or its budget is spent. The judging code never sees
the store, the servers, or pytest.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Protocol

if TYPE_CHECKING:
    from pytest_specdec.measure.pairing import PairedArms
    from pytest_specdec.measure.runner import RunResult

__all__ = ["MeasureHandle"]


class MeasureHandle(Protocol):
    """The measurements of one run, as a verdict sees them (profiles by name; ``vs`` = the reference profile of a
    ``min_speedup`` pairing, None for a profile measured alone)."""

    def run(self, profile: str) -> RunResult:
        """The profile's run as measured so far (every repeat, medians over them). :raises KeyError: not measured."""
        ...

    def arms(self, profile: str, vs: str) -> PairedArms | None:
        """The profile's paired arms with ``vs``, or None when they could not be measured (:meth:`pair_error`)."""
        ...

    def pair_error(self, profile: str, vs: str) -> str | None:
        """Why the pairing with ``vs`` could not be measured (or measured again), or None."""
        ...

    def more_error(self, profile: str) -> str | None:
        """Why a :meth:`more` of the profile failed (the first time), or None: the verdicts stopped measuring there."""
        ...

    def can_measure(self, profile: str) -> bool:
        """Whether the profile's server is running in this process (more can be measured on it)."""
        ...

    def more(self, profile: str, vs: str | None, pairs: int | None = None, *, why: str = "") -> bool:
        """Measure one more repeat (with ``vs``: one more pair; bracketed pairing: one bracket of ``pairs`` pairs,
        default as many as its first block) and append it to the profile's run and arms (medians recomputed).
        ``why`` is shown in the progress line while it measures (``"min_speedup: pair 9 of at most 24"``).
        :returns: False when nothing was added (no running server, or it failed; a pair's reason goes to
        :meth:`pair_error`)."""
        ...

    def spent_s(self, profile: str, vs: str | None) -> float:
        """Seconds the profile's phases held servers so far, with the reference phases of its pairing with ``vs``
        and, bracketed, the seconds of its server switches (``PairedArms.restart_s``)."""
        ...
