"""Bracketed pairing (one server at a time, SGLang's default): a sequential verdict's next block of pairs reaches a
look and outlasts its two server switches, and the budget counts the switches (``judge.verdict._next_step``)."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import numpy as np
import pytest
from helpers import fingerprint, rec, run_metrics

from pytest_specdec.core.tolerances import layered_tolerances
from pytest_specdec.judge import sequential, verdict
from pytest_specdec.judge.outcomes import Outcomes
from pytest_specdec.judge.verdict import ItemVerdict
from pytest_specdec.measure import results, runner
from pytest_specdec.measure.pairing import PairedArms
from pytest_specdec.profiles.schema import Profile

TEST_ID = "t.py::test_x[eagle3]"


def _phase(name: str, tok_s: float, server_s: float) -> runner.Measurement:
    return runner.Measurement(name, run_metrics(output_tok_s=tok_s), (), "h", None, None, None, server_s=server_s)


class BracketedHandle:
    """A ``MeasureHandle`` whose eagle3 is paired bracketed with baseline: each block of ``pairs`` pairs costs
    ``switch_s`` of server switches and ``phase_s`` a phase; pair i's ratio is ``ratios[i]`` (target 100 x ratio
    tok/s in both its phases, reference 100), 0.8 past the list (a clear speedup failure against 1.05 only once the
    interval is narrow: identical ratios have none). ``mode="interleaved"`` measures one target phase a pair and
    one pair a step, as the interleaved pairing does."""

    def __init__(self, first: int, *, phase_s: float, switch_s: float, ratios: Sequence[float] = (),
                 mode: str = "bracketed") -> None:  # fmt: skip
        self.phase_s, self.switch_s, self.ratios, self.mode = phase_s, switch_s, list(ratios), mode
        self.asked: list[int] = []
        self.whys: list[str] = []
        self.paired = self._block(first, 0)

    def _block(self, pairs: int, offset: int) -> PairedArms:
        ratios = [self.ratios[i] if i < len(self.ratios) else 0.8 for i in range(offset, offset + pairs)]
        per_pair = 2 if self.mode == "bracketed" else 1
        target = tuple(tuple(_phase("eagle3", 100.0 * q, self.phase_s) for _ in range(per_pair)) for q in ratios)
        reference = tuple(_phase("baseline", 100.0, self.phase_s) for _ in range(pairs))
        switches = (1, self.switch_s) if self.mode == "bracketed" else (0, 0.0)
        return PairedArms("eagle3", "baseline", self.mode, target, reference, pairs, *switches)

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

    def more(self, profile: str, vs: str | None, pairs: int | None = None, *, why: str = "") -> bool:
        count = 1 if self.mode == "interleaved" else pairs or self.paired.first
        self.asked.append(count)
        self.whys.append(why)
        self.paired = self.paired.extend(self._block(count, self.paired.pairs))
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

    def decided(pairs: int) -> bool:
        looked.append(pairs)
        return False  # never decided: the loop runs to the budget

    verdict._measure_until(handle, "eagle3", "baseline", design, decided, "min_speedup")
    assert handle.asked == [9, 12]  # 3 -> 12 -> 24: two blocks, not seven
    assert handle.whys == ["min_speedup: pairs 4-12 of at most 24", "min_speedup: pairs 13-24 of at most 24"]
    assert looked == [3, 5, 8, 12, 18, 24]  # each look of the design, on the block's first pairs


def test_a_server_seconds_budget_counts_the_switches() -> None:
    """``max_server_s`` 120: 3 pairs measured in 23.4 s plus a 70-s switch = 93.4 s; the next block (9 pairs, 70.2 s,
    and its 70-s switches) would overrun it, so none is asked for (the switches used to be left out)."""
    handle = BracketedHandle(3, phase_s=2.6, switch_s=70.0)
    design = sequential.Design(3, 24, max_server_s=120.0)
    verdict._measure_until(handle, "eagle3", "baseline", design, lambda p: False)
    assert handle.asked == []
    assert handle.spent_s("eagle3", "baseline") == pytest.approx(3 * 3 * 2.6 + 70.0)


#: Pair ratios whose first 3 leave 1.05 inside the interval (CI 0.588-1.27) and whose first 5 decide below it
#: (CI 0.742-0.956); the first 8 decide too, on other figures (CI 0.772-0.884).
DECIDED_AT_5 = [0.8, 0.95, 0.85, 0.8, 0.82, 0.81, 0.79, 0.8]


def _judge(handle: BracketedHandle, thresholds: dict[str, object], tmp_path: Path) -> ItemVerdict:
    profiles = {name: Profile.model_validate({"name": name, "server": "reference", "thresholds": {},
                                              "workload": {"repeats": 3, "max_repeats": 24}})
                for name in ("eagle3", "baseline")}  # fmt: skip
    profile = Profile.model_validate({"name": "eagle3", "server": "reference", "thresholds": thresholds,
                                      "workload": {"repeats": 3, "max_repeats": 24}})  # fmt: skip
    record = results.ResultRecord.from_measurements(TEST_ID, handle.paired.target_measurements(), fingerprint())
    return verdict.judge_item(record, nodeid=TEST_ID, profile=profile, thresholds=profile.thresholds,
                              profiles={**profiles, "eagle3": profile}, repeats=3, measurements=handle,
                              outcomes=Outcomes(tmp_path / "noise"))  # fmt: skip


def test_a_block_that_passes_two_looks_decides_at_the_first_that_decides(tmp_path: Path) -> None:
    """Pairs of 7.8 s, 20 s of switches: the block after the first 3 pairs has 5 (3 -> 8), passing the looks at 5
    and 8. The first 5 pairs decide: the line judges them (before: one look where the block ended, "decided after
    8 pairs, CI 0.7724-0.8836"); the server-seconds count all 8 pairs and both blocks' switches."""
    handle = BracketedHandle(3, phase_s=2.6, switch_s=20.0, ratios=DECIDED_AT_5)
    judged = _judge(handle, {"min_speedup": {"vs": "baseline", "ratio": 1.05}}, tmp_path)
    assert handle.asked == [5] and handle.paired.pairs == 8
    spent = 8 * 3 * 2.6 + 2 * 20.0
    assert judged.record.paired["speedup"] == (
        "speedup vs baseline 0.842x < min 1.05x [geometric mean of 5 paired ratios, bracketed; decided after 5 "
        f"pairs, CI 0.7417-0.9564 (98.3%), {spent:.1f} server-s]"
    )
    assert judged.record.cost["verdicts"]["min_speedup"] == {"verdict": "FAILED", "repeats": 5, "server_s": spent}
    assert judged.record.paired["pairs"] == 8  # every pair measured is kept in the record
    assert judged.failure is not None and judged.failure.count("\n") == 0  # one line for the check


def test_a_floor_looks_inside_the_block_on_the_first_pairs_phases(tmp_path: Path) -> None:
    """``min_tok_s`` of a profile paired bracketed (its ``min_speedup`` pairs it): a pair is two target phases, so
    the look at 5 pairs judges the first 10 repeats (target tok/s 100 x the ratio), not the block's 16. The speedup
    check, judged after, starts where the floor left the pairs and looks there first, as it would interleaved."""
    handle = BracketedHandle(3, phase_s=2.6, switch_s=20.0, ratios=DECIDED_AT_5)
    judged = _judge(handle, {"min_tok_s": 95.0, "min_speedup": {"vs": "baseline", "ratio": 0.5}}, tmp_path)
    assert handle.asked == [5]
    assert judged.failure is not None
    # The run's context still says what was measured (16 repeats: the summary's medians are of all of them).
    assert judged.failure == (
        "output_tok_s 84.22 tok/s < min 95 (margin -10.78, -11.3%) [geometric mean; decided after 10 repeats, CI "
        "79.1-89.68 (98.3%), 102.4 server-s] [profile eagle3, 1 requests x 16 repeats]"
    )
    assert judged.record.cost["verdicts"]["min_tok_s"]["repeats"] == 10
    assert "decided after 8 pairs" in judged.record.paired["speedup"]


def _stream_verdict(ratios: Sequence[float], mode: str, floor: float) -> tuple[str, int]:
    """(outcome, pairs judged) of ``min_speedup`` ``floor`` on ``ratios`` with an 8B model's costs (10 s a phase,
    15-minute starts: the block after the first is the whole budget, 3 -> 24, passing five looks)."""
    handle = BracketedHandle(3, phase_s=10.0, switch_s=1800.0, ratios=ratios, mode=mode)
    design = sequential.Design(3, 24)

    def ratios_at(p: int) -> list[float]:
        return verdict._first_pairs(handle.paired, p).ratios()

    count = verdict._measure_until(handle, "eagle3", "baseline", design,
                                   lambda p: sequential.decide_floor(ratios_at(p), floor, design).decided)  # fmt: skip
    return sequential.decide_floor(ratios_at(count), floor, design).outcome, count


@pytest.mark.slow
def test_looks_inside_blocks_spend_alpha_as_pairs_one_at_a_time() -> None:
    """Seeded: 1000 streams of pair ratios at the floor (log sd 0.25, the noisiest H100 replayed in
    benchmarks/bench_bracketed.py): the within-block looks decide each stream exactly as one pair at a time
    (interleaved) does, at the same pairs, so they spend the design's alpha at its points; FAILED (and passed,
    the other error at the floor) at most alpha = 0.05 plus three standard errors of the simulation."""
    rng = np.random.default_rng(11)
    runs, floor = 1000, 0.9
    outcomes = {"passed": 0, "FAILED": 0, "undecided": 0}
    for _ in range(runs):
        ratios = list(floor * np.exp(0.25 * rng.standard_normal(24)))
        bracketed = _stream_verdict(ratios, "bracketed", floor)
        assert bracketed == _stream_verdict(ratios, "interleaved", floor)
        outcomes[bracketed[0]] += 1
    margin = 3 * (0.05 * 0.95 / runs) ** 0.5
    assert outcomes["FAILED"] / runs <= sequential.ALPHA + margin, outcomes
    assert outcomes["passed"] / runs <= sequential.ALPHA + margin, outcomes


def test_a_compare_plans_each_step_once_before_measuring_it() -> None:
    """``judge_compare`` asks ``next_step`` once before each ``more()``, and ``compare_item``'s ``more()`` measures
    that step (it computed the step three times: for its repeats, its seconds and the pairs asked for)."""
    events: list[str] = []
    stream = [80.0, 120.0] * 4  # wide: open at every look of Design(2, 8)
    shown = [2]

    def next_step() -> tuple[int, float | None]:
        events.append("step")
        return 2, 10.0

    def more() -> results.ResultRecord | None:
        events.append("more")
        shown[0] += 2
        return rec(output_tok_s=stream[: shown[0]])

    verdict.judge_compare(rec(output_tok_s=[100.0, 101.0, 99.0]), rec(output_tok_s=stream[:2]), run_id="R1",
                          test_id="t.py::test_x[eagle3]", tolerances=layered_tolerances(), noise={}, force=False,
                          more=more, design=sequential.Design(2, 8), server_s=lambda: 10.0 * shown[0],
                          next_step=next_step)  # fmt: skip
    # Each more() after exactly one plan of its step (where it stops is the compare's business: here at 6 repeats).
    assert events.count("more") >= 2
    assert set(events[0::2]) == {"step"} and set(events[1::2]) == {"more"}, events
