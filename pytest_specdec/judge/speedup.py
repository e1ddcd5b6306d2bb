"""The ``min_speedup`` verdict: paired throughput ratios (``measure/pairing.py``) judged against a floor.

Fixed repeats: the median ratio against the floor, a distribution-free confidence interval (``stats.summarize``) and
a one-sided Wilcoxon signed-rank test (``stats.below_test``); a median below the floor is first *suspected*, confirmed
by as many pairs again. Sequential (``workload.max_repeats``): a look after every pair (``sequential.decide_floor``).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

from pytest_specdec.core import stats
from pytest_specdec.judge import sequential
from pytest_specdec.judge.thresholds import Check

__all__ = ["CONFIRM_TOTAL_PAIRS", "Speedup", "judge_speedup", "judge_speedup_sequential"]

#: A confirming measurement brings the pairs to at least this many: below 6 pairs even "every ratio below the floor"
#: is not significant at 5 % one-sided (Wilcoxon: 5 pairs p = 1/32 only when all agree; 6 pairs 1/64).
CONFIRM_TOTAL_PAIRS = 6


@dataclass(frozen=True, slots=True)
class Speedup:
    """The judged speedup of a target over a reference arm (:func:`judge_speedup`).

    ``verdict``: ``passed`` (median ratio >= floor), ``suspected`` (below, first measurement only: confirm it),
    ``FAILED`` (below after confirmation, and significant), ``not significant`` (below, not significant: passes
    with a warning).
    """

    vs: str
    floor: float
    mode: str
    ratios: tuple[float, ...]
    first: int
    summary: stats.Summary | None
    test: stats.BelowTest | None
    verdict: str
    #: With sequential verdicts (``judge_speedup_sequential``): the last look's decision; ``verdict`` is then
    #: ``passed``, ``FAILED`` or ``undecided``.
    decision: sequential.Decision | None = None
    #: Sequential: the line's bracket, from ``sequential.floor_line`` (looks, interval, server-seconds, what more).
    detail: str = ""

    @property
    def ratio(self) -> float | None:
        if self.decision is not None:
            return self.decision.estimate
        return self.summary.median if self.summary is not None else None

    def check(self) -> Check:
        """The ``min_speedup`` check (``thresholds.Check``): fails only on ``FAILED``; ``undecided`` passes, marked."""
        passed = self.verdict != "FAILED"
        return Check(
            "min_speedup", f"speedup vs {self.vs}", ">=", self.floor, self.ratio, "x", passed, text=self.line(),
            undecided=self.verdict == "undecided",
        )  # fmt: skip

    def line(self) -> str:
        """``speedup vs baseline 1.38x >= min 1.05x [median of 3 paired ratios, interleaved, CI 1.31-1.45 (75%)]``;
        below the floor, the first and the confirming measurements and the test. Sequential: ``speedup vs baseline
        1.38x >= min 1.05x [geometric mean of 3 paired ratios, interleaved; decided after 3 pairs, ...]``."""
        if self.summary is None:
            return f"speedup vs {self.vs}: not measured (no paired ratio)"
        if self.decision is not None:
            d = self.decision
            sym = {"passed": ">=", "FAILED": "<"}.get(self.verdict, "vs")
            head = f"speedup vs {self.vs} {d.estimate:.3g}x {sym} min {self.floor:g}x"
            if self.verdict == "undecided":
                head = f"speedup vs {self.vs} {d.estimate:.3g}x: undecided vs min {self.floor:g}x"
            return f"{head} [geometric mean of {d.n} paired ratios, {self.mode}; {self.detail}]"
        s = self.summary
        ratio = s.median
        below = ratio < self.floor
        sym = "<" if below else ">="
        margin = ratio - self.floor
        head = f"speedup vs {self.vs} {ratio:.3g}x {sym} min {self.floor:g}x"
        if below:
            head += f" (margin {margin:+.3g}, {margin / self.floor * 100:+.1f}%)"
        detail = [
            f"median of {s.n} paired ratios, {self.mode}",
            f"CI {s.ci_low:.3g}-{s.ci_high:.3g} ({s.coverage:.0%})",
        ]
        if len(self.ratios) > self.first:
            first = stats.summarize(self.ratios[: self.first])
            again = stats.summarize(self.ratios[self.first :])
            if first is not None and again is not None:
                detail.append(f"first {first.n}: {first.median:.3g}x, confirming {again.n}: {again.median:.3g}x")
        if below and self.test is not None:
            detail.append(
                f"{self.test.method} p={self.test.p_value:.3g}" if self.test.p_value is not None else self.test.method
            )
        return f"{head} [{'; '.join(detail)}]"


def judge_speedup(
    ratios: Sequence[float], floor: float, *, vs: str, mode: str, first: int, confirmable: bool
) -> Speedup:
    """Judge paired throughput ratios against ``floor`` (see :class:`Speedup` for the verdicts).

    Below the floor, the verdict is ``suspected`` while the first measurement can still be confirmed
    (``confirmable`` and no confirming pairs yet); otherwise ``FAILED`` when ``stats.below_test`` is significant,
    else ``not significant``.

    :param ratios: target/reference per pair (``pairing.PairedArms.ratios``); the first ``first`` are the first
        measurement.
    """
    summary = stats.summarize(list(ratios))
    if summary is None:
        return Speedup(vs, floor, mode, tuple(ratios), first, None, None, "FAILED")
    if summary.median >= floor:
        return Speedup(vs, floor, mode, tuple(ratios), first, summary, None, "passed")
    test = stats.below_test(ratios, floor)
    if confirmable and len(ratios) <= first:
        verdict = "suspected"
    else:
        verdict = "FAILED" if test.significant else "not significant"
    return Speedup(vs, floor, mode, tuple(ratios), first, summary, test, verdict)


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
    measured and ``undecided`` when ``exhausted`` (the budget is spent or no pair can be added).

    :param detail: the line's bracket for a decision (``verdict.py`` adds server-seconds and what more would take).
    """
    decision = sequential.decide_floor(list(ratios), floor, design)
    verdict = {"above": "passed", "below": "FAILED"}.get(decision.verdict, "undecided" if exhausted else "open")
    summary = stats.summarize(list(ratios))
    return Speedup(vs, floor, mode, tuple(ratios), first, summary, None, verdict, decision, detail(decision))
