"""The ``min_speedup`` verdict: paired throughput ratios (``measure.pairing``) judged against a floor at a look of
a sequential design (``sequential.decide_floor``): passed when the interval of the geometric-mean ratio is above the
floor, FAILED when below, undecided while it holds the floor at the budget.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

from pytest_specdec.judge import sequential
from pytest_specdec.judge.thresholds import Check

__all__ = ["Speedup", "judge_speedup_sequential"]


@dataclass(frozen=True, slots=True)
class Speedup:
    """The judged speedup of a target over a reference arm (:func:`judge_speedup_sequential`).

    ``verdict``: ``passed``, ``FAILED``, ``open`` (more pairs may decide) or ``undecided`` (the budget is spent).
    ``detail`` is the line's bracket (looks, interval, server-seconds, what more would take).
    """

    vs: str
    floor: float
    mode: str
    ratios: tuple[float, ...]
    first: int
    verdict: str
    decision: sequential.Decision
    detail: str = ""

    @property
    def ratio(self) -> float | None:
        return self.decision.estimate if self.ratios else None

    def check(self) -> Check:
        """The ``min_speedup`` check (``thresholds.Check``): fails only on ``FAILED``; ``undecided`` passes, marked."""
        return Check(
            "min_speedup", f"speedup vs {self.vs}", ">=", self.floor, self.ratio, "x", self.verdict != "FAILED",
            text=self.line(), undecided=self.verdict in ("undecided", "open"),
        )  # fmt: skip

    def line(self) -> str:
        """``speedup vs baseline 1.38x >= min 1.05x [geometric mean of 3 paired ratios, interleaved; decided after
        3 pairs, CI 1.31-1.45 (98.3%), 9.1 server-s]``."""
        if not self.ratios:
            return f"speedup vs {self.vs}: not measured (no paired ratio)"
        d = self.decision
        sym = {"passed": ">=", "FAILED": "<"}.get(self.verdict, "vs")
        head = f"speedup vs {self.vs} {d.estimate:.3g}x {sym} min {self.floor:g}x"
        if self.verdict in ("undecided", "open"):
            head = f"speedup vs {self.vs} {d.estimate:.3g}x: undecided vs min {self.floor:g}x"
        return f"{head} [geometric mean of {d.n} paired ratios, {self.mode}; {self.detail}]"


def judge_speedup_sequential(
    ratios: Sequence[float],
    floor: float,
    design: sequential.Design,
    *,
    vs: str,
    mode: str,
    first: int,
    exhausted: bool,
    detail: Callable[[sequential.Decision], str],
) -> Speedup:
    """Judge paired ratios against ``floor`` at one look of a sequential verdict (``sequential.decide_floor``):
    ``passed`` / ``FAILED`` once the interval is above / below the floor, else ``open`` while more pairs may be
    measured and ``undecided`` when ``exhausted`` (the budget is spent or no pair can be added). No ratio at all
    is ``FAILED`` (never a silent pass).

    :param ratios: target/reference per pair (``pairing.PairedArms.ratios``).
    :param detail: the line's bracket for a decision (``verdict.py`` adds server-seconds and what more would take).
    """
    decision = sequential.decide_floor(list(ratios), floor, design)
    if not ratios:
        return Speedup(vs, floor, mode, (), first, "FAILED", decision, "no paired ratio")
    verdict = {"above": "passed", "below": "FAILED"}.get(decision.verdict, "undecided" if exhausted else "open")
    return Speedup(vs, floor, mode, tuple(ratios), first, verdict, decision, detail(decision))
