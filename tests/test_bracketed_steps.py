"""Bracketed pairing (one server at a time, SGLang's default): a sequential verdict's next block of pairs reaches a
look and outlasts its two server switches, and the budget counts the switches (``judge.verdict._next_step``)."""

from __future__ import annotations

import pytest
from helpers import run_metrics

from pytest_specdec.judge import sequential, verdict
from pytest_specdec.measure import runner
from pytest_specdec.measure.pairing import PairedArms


def _phase(name: str, tok_s: float, server_s: float) -> runner.Measurement:
    return runner.Measurement(name, run_metrics(output_tok_s=tok_s), (), "h", None, None, None, server_s=server_s)


class BracketedHandle:
    """A ``MeasureHandle`` whose eagle3 is paired bracketed with baseline: each block of ``pairs`` pairs costs
    ``switch_s`` of server switches and ``phase_s`` a phase; the ratio is always 0.8 (a clear speedup failure
    against 1.05 only once the interval is narrow: here at once, the values are identical)."""

    def __init__(self, first: int, *, phase_s: float, switch_s: float) -> None:
        self.phase_s, self.switch_s = phase_s, switch_s
        self.asked: list[int] = []
        self.paired = self._block(first)

    def _block(self, pairs: int) -> PairedArms:
        target = tuple((_phase("eagle3", 80.0, self.phase_s), _phase("eagle3", 80.0, self.phase_s))
                       for _ in range(pairs))  # fmt: skip
        reference = tuple(_phase("baseline", 100.0, self.phase_s) for _ in range(pairs))
        return PairedArms("eagle3", "baseline", "bracketed", target, reference, pairs, brackets=1,
                          restart_s=self.switch_s)  # fmt: skip

    def run(self, profile: str) -> runner.RunResult:
        phases = self.paired.target_measurements()
        return runner.RunResult(profile, phases, runner.pooled_metrics(phases), "h")

    def arms(self, profile: str, vs: str) -> PairedArms:
        return self.paired

    def pair_error(self, profile: str, vs: str) -> None:
        return None

    def more_error(self, profile: str) -> None:
        return None

    def can_measure(self, profile: str) -> bool:
        return True

    def more(self, profile: str, vs: str | None, pairs: int | None = None) -> bool:
        self.asked.append(pairs or self.paired.first)
        self.paired = self.paired.extend(self._block(pairs or self.paired.first))
        return True

    def spent_s(self, profile: str, vs: str | None) -> float:
        return self.paired.measuring_s() + self.paired.restart_s


def test_a_look_is_due_where_a_step_passes_a_point_without_landing_on_it() -> None:
    design = sequential.Design(3, 24)  # looks at 3, 5, 8, 12, 18, 24
    assert design.look_due(3, 0) and not design.look_due(4, 3) and design.look_due(6, 3)  # 6 passed 5
    assert not design.look_due(6, 6) and design.look_due(30, 24) and not design.look_due(7, 6)


@pytest.mark.parametrize(
    ("pair_s", "switch_s", "expected"),
    [
        (0.0, 0.0, 2),  # free switches: the next look (5)
        (7.8, 70.0, 9),  # the tiny model on an H100: 9 pairs of 7.8 s outlast two 35-s starts (3 -> 12)
        (30.0, 1800.0, 21),  # a 15-minute start: the rest of the budget in one block
    ],
)
def test_a_bracketed_block_reaches_a_look_and_outlasts_its_switches(pair_s: float, switch_s: float,
                                                                    expected: int) -> None:  # fmt: skip
    assert verdict._bracket_pairs(sequential.Design(3, 24), 3, 1, pair_s, switch_s) == expected


def test_a_compare_counts_a_bracketed_pair_as_two_repeats() -> None:
    # 6 target phases (3 pairs) of Design(3, 32): looks 3, 5, 8, 12, 18, 27, 32; 11 pairs reach 28 >= 27.
    assert verdict._bracket_pairs(sequential.Design(3, 32), 6, 2, 7.8, 70.0) == 11


def test_the_measuring_loop_asks_for_blocks_that_reach_looks_not_the_first_blocks_size() -> None:
    """Before: blocks of the first block's 3 pairs (3 -> 6 -> 9 -> 12 ...), two restarts each, most ending between
    looks; now: blocks sized to the switches, each ending at or past a look."""
    handle = BracketedHandle(3, phase_s=2.6, switch_s=70.0)
    design = sequential.Design(3, 24)
    looked: list[int] = []

    def decided() -> bool:
        looked.append(handle.paired.pairs)
        return False  # never decided: the loop runs to the budget

    verdict._measure_until(handle, "eagle3", "baseline", design, decided)
    assert handle.asked == [9, 12]  # 3 -> 12 -> 24: two blocks, not seven
    assert looked == [3, 12, 24]


def test_a_server_seconds_budget_counts_the_switches() -> None:
    """``max_server_s`` 120: 3 pairs measured in 23.4 s plus a 70-s switch = 93.4 s; the next block (9 pairs, 70.2 s,
    and its 70-s switches) would overrun it, so none is asked for (the switches used to be left out)."""
    handle = BracketedHandle(3, phase_s=2.6, switch_s=70.0)
    design = sequential.Design(3, 24, max_server_s=120.0)
    verdict._measure_until(handle, "eagle3", "baseline", design, lambda: False)
    assert handle.asked == []
    assert handle.spent_s("eagle3", "baseline") == pytest.approx(3 * 3 * 2.6 + 70.0)
