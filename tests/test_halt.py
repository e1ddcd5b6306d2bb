"""A test that failed decisively measures no more (``judge/verdict.py``): a scripted handle whose tok/s swings
widely, so that ``min_tok_s`` (or ``min_speedup``, or the compare's tok/s row) alone would measure to
``max_repeats``; no server is started."""

from __future__ import annotations

import dataclasses
import re
from pathlib import Path
from typing import Any

import pytest

from pytest_specdec.core.records import RunMetrics
from pytest_specdec.core.tolerances import layered_tolerances
from pytest_specdec.judge import sequential
from pytest_specdec.judge.baseline import Baselines
from pytest_specdec.judge.outcomes import Outcomes
from pytest_specdec.judge.verdict import CompareSetup, ItemVerdict, judge_compare, judge_item
from pytest_specdec.measure import results
from pytest_specdec.profiles.schema import Profile, Thresholds
from pytest_specdec.report.summary import undecided_lines
from tests.helpers import ScriptedHandle, fingerprint, rec

SWINGING = [100.0, 140.0] * 8  # tok/s: a floor of 120 stays inside the interval for 16 repeats
TEST_ID = "t.py::test_x[eagle3]"


def _metrics(tok_s: float, accept_length: float, at: tuple[float, ...]) -> RunMetrics:
    fields: dict[str, Any] = {f.name: None for f in dataclasses.fields(RunMetrics)}
    fields.update(num_requests=4, num_ok=4, num_errors=0, duration_s=1.0, output_tokens=int(tok_s),
                  output_tok_s=tok_s, accept_length=accept_length, accept_rate=(accept_length - 1) / 3,
                  accept_rate_at=at)  # fmt: skip
    return RunMetrics(**fields)


def _judge(
    thresholds: Thresholds, tmp_path: Path, *, accept_length: float = 2.0, at: tuple[float, ...] = (0.6, 0.3),
    temperature: float = 0, compare_setup: CompareSetup | None = None, undecided: str = "warn",
) -> tuple[ItemVerdict, ScriptedHandle]:  # fmt: skip
    profile = Profile.model_validate({"name": "eagle3", "server": "reference",
                                      "speculative": {"algorithm": "EAGLE3", "num_steps": 3},
                                      "workload": {"temperature": temperature, "repeats": 2,
                                                   "max_repeats": 16}})  # fmt: skip
    handle = ScriptedHandle([_metrics(v, accept_length, at) for v in SWINGING], first=2)
    record = results.ResultRecord.from_measurements(TEST_ID, handle.measured, fingerprint())
    verdict = judge_item(record, nodeid=TEST_ID, profile=profile, thresholds=thresholds,
                         profiles={"eagle3": profile}, repeats=2, measurements=handle,
                         outcomes=Outcomes(tmp_path / "noise"), compare_setup=compare_setup,
                         undecided=undecided)  # fmt: skip
    return verdict, handle


def test_min_tok_s_alone_measures_to_the_budget(tmp_path: Path) -> None:
    verdict, handle = _judge(Thresholds(min_tok_s=120), tmp_path)
    assert handle.asked == 14 and verdict.failure is None
    assert verdict.undecided and verdict.undecided[0].startswith("output_tok_s")
    assert undecided_lines([verdict.record], "warn")  # counted: it spent the budget


@pytest.mark.parametrize(
    "thresholds, reason",
    [
        (Thresholds(min_tok_s=120, min_accept_length=2.5), "min_accept_length"),
        (Thresholds(min_tok_s=120, min_accept_rate_at={1: 0.8}), "min_accept_rate_at"),
    ],
    ids=["accept-length-floor", "per-position-floor"],
)
@pytest.mark.parametrize("policy", ["warn", "fail"])
def test_an_exact_failure_stops_the_others_measuring(
    thresholds: Thresholds, reason: str, policy: str, tmp_path: Path
) -> None:
    verdict, handle = _judge(thresholds, tmp_path, undecided=policy)
    assert handle.asked == 0
    assert verdict.failure is not None and verdict.failure.count("\n") == 0  # the exact miss, not failed twice
    assert reason.removeprefix("min_") in verdict.failure
    # Neither undecided at the budget (the summary's line, --specdec-undecided=fail) nor passed: not measured.
    assert verdict.undecided == () and undecided_lines([verdict.record], policy) == []
    line = f"not measured further vs min 120 (geometric mean of 2 repeats; eagle3 had already failed {reason})"
    assert any(w.startswith("output_tok_s ") and w.endswith(line) for w in verdict.warnings), verdict.warnings
    assert verdict.checks["min_tok_s"].startswith("not measured: output_tok_s")
    assert verdict.record.cost["verdicts"]["min_tok_s"]["verdict"] == "not measured further"


def test_above_temperature_zero_an_accept_floor_miss_is_statistical_and_stops_nothing(tmp_path: Path) -> None:
    verdict, handle = _judge(Thresholds(min_tok_s=120, min_accept_rate_at={1: 0.8}), tmp_path, temperature=0.7)
    assert handle.asked == 14 and verdict.undecided


def _baseline_setup(tmp_path: Path, accept_length: float) -> CompareSetup:
    base = rec(TEST_ID, fingerprint(), output_tok_s=[120.0, 121.0, 119.0], accept_length=[accept_length] * 3)
    run = results.RunFile("night-1", 0.0, results=(base,))
    return CompareSetup(Baselines(tmp_path, run=run, label="named night-1"), run_id="night-2")


def test_an_exact_compare_row_that_regressed_stops_the_thresholds_measuring(tmp_path: Path) -> None:
    # The aux-id night: accept length fell (exact at temperature 0) while tok/s would swing for 16 repeats.
    verdict, handle = _judge(Thresholds(min_tok_s=120), tmp_path, compare_setup=_baseline_setup(tmp_path, 2.5))
    assert handle.asked == 0
    assert verdict.failure is not None
    assert re.search(r"^accept_length +higher .* REGRESSED \(exact\)$", verdict.failure, re.M), verdict.failure
    reason = "eagle3's compare had already regressed accept_length (exact)"
    assert any(w.endswith(f"(geometric mean of 2 repeats; {reason})") for w in verdict.warnings), verdict.warnings
    assert verdict.undecided == () and undecided_lines([verdict.record], "fail") == []


def test_an_unchanged_compare_measures_on(tmp_path: Path) -> None:
    verdict, handle = _judge(Thresholds(min_tok_s=120), tmp_path, compare_setup=_baseline_setup(tmp_path, 2.0))
    assert handle.asked == 14 and verdict.failure is None


def test_a_compare_that_regressed_at_a_look_measures_no_more_for_its_open_rows() -> None:
    calls: list[int] = []
    base = rec(output_tok_s=[100.0, 101.0, 99.0], accept_length=[2.8, 2.8, 2.8])
    current = rec(output_tok_s=[90.0, 115.0, 95.0], accept_length=[2.3, 2.3, 2.3])

    def more() -> results.ResultRecord | None:
        calls.append(1)
        return None

    judged = judge_compare(
        base, current, run_id="R1", test_id=current.test_id, tolerances=layered_tolerances(), noise={},
        force=False, more=more, design=sequential.Design(3, 12),
    )  # fmt: skip
    assert calls == [] and judged.failure is not None
    assert re.search(r"^accept_length +higher .* REGRESSED \(exact\)$", judged.failure, re.M)
    assert re.search(r"^output_tok_s +higher .* undecided \(", judged.failure, re.M)
    assert judged.failure.splitlines()[-1] == "1 undecided row not measured further: the compare had regressed at 3 " \
                                              "repeats"


def test_a_failed_compare_says_why_a_row_left_open_at_the_budget_is_open() -> None:
    # Flake hunt seed 178 (load 3): ITL regressed at the look at 12 repeats beside a tok/s row that more repeats on a
    # busy runner would not decide (x0.186, CI 0.03-1.14); the failure listed it undecided and said nothing of why.
    base = rec(output_tok_s=[100.0, 101.0, 99.0], accept_length=[2.8, 2.8, 2.8])
    current = rec(output_tok_s=[90.0, 115.0, 95.0], accept_length=[2.3, 2.3, 2.3])
    judged = judge_compare(
        base, current, run_id="R1", test_id=current.test_id, tolerances=layered_tolerances(), noise={},
        force=False, design=sequential.Design(3, 3),
    )  # fmt: skip
    assert judged.failure is not None
    assert re.search(r"^accept_length +higher .* REGRESSED \(exact\)$", judged.failure, re.M), judged.failure
    block = judged.failure[judged.failure.index("\n1 undecided row beside the regression after 3 repeats:\n"):]
    assert re.search(r"^  output_tok_s x0\.\d+, CI .* holds the tolerance 5%[;:] ", block, re.M), block
    assert "not measured further" not in judged.failure


def test_a_statistical_regression_stops_the_compare_at_its_look() -> None:
    # Replayed (bench_verdicts): a 20% regression decided after a median of 3 pairs, not 5, when the compare stops at
    # the look at which a row regressed; the open rows keep their intervals (seed 241's lost env: tok/s -87% read
    # undecided at 2 repeats beside regressed latencies).
    base = rec(output_tok_s=[100.0, 101.0, 99.0] * 2, itl_ms_p50=[10.0, 10.1, 9.9] * 2)
    asked: list[int] = []

    def more() -> results.ResultRecord | None:
        asked.append(1)
        return None

    current = rec(output_tok_s=[80.0, 81.0, 79.0], itl_ms_p50=[10.0, 14.0, 9.0])
    judged = judge_compare(
        base, current, run_id="R1", test_id=TEST_ID, tolerances=layered_tolerances(), noise={}, force=False,
        more=more, design=sequential.Design(3, 12),
    )  # fmt: skip
    assert judged.failure is not None and asked == []
    assert re.search(r"^output_tok_s +higher .* REGRESSED \(x0\.8", judged.failure, re.M), judged.failure
    assert re.search(r"^itl_ms_p50 +lower .* undecided \(x", judged.failure, re.M), judged.failure
    assert judged.failure.splitlines()[-1] == "1 undecided row not measured further: the compare had regressed at 3 " \
                                              "repeats"


def test_a_later_test_whose_floor_measured_more_is_compared_on_its_own_repeats(tmp_path: Path) -> None:
    """One measurement, two tests: test_a's compare is decided on the first repeats; test_b's floor then measures on
    (the server slowed down). test_b's stored record holds every repeat, so its compare is judged on them, as the
    ``compare`` command reading that record judges it (before: test_a's cached verdict, on 3 of 12 repeats)."""
    profile = Profile.model_validate({"name": "eagle3", "server": "reference",
                                      "speculative": {"algorithm": "EAGLE3", "num_steps": 3},
                                      "workload": {"temperature": 0.7, "repeats": 3, "max_repeats": 12}})  # fmt: skip
    handle = ScriptedHandle([_metrics(v, 2.0, (0.6, 0.3)) for v in [100.0, 100.6, 99.4] + [90.0, 90.4, 89.6] * 3],
                            first=3)  # fmt: skip
    base = [rec(test_id, fingerprint(), output_tok_s=[100.0, 101.0, 99.0], accept_length=[2.0] * 3)
            for test_id in ("t.py::test_a[eagle3]", TEST_ID)]  # fmt: skip
    setup = CompareSetup(Baselines(tmp_path, run=results.RunFile("night-1", 0.0, results=tuple(base)),
                                   label="named night-1"), run_id="night-2")  # fmt: skip
    outcomes = Outcomes(tmp_path / "noise")
    records = []
    for test_id, thresholds in [("t.py::test_a[eagle3]", Thresholds()), (TEST_ID, Thresholds(min_tok_s=99.5))]:
        record = results.ResultRecord.from_measurements(test_id, handle.measured, fingerprint())
        verdict = judge_item(record, nodeid=test_id, profile=profile, thresholds=thresholds,
                             profiles={"eagle3": profile}, repeats=3, measurements=handle, outcomes=outcomes,
                             compare_setup=setup)  # fmt: skip
        records.append(verdict.record)
    later = records[1]
    assert len(later.repeats["output_tok_s"]) > 3
    assert later.cost["verdicts"]["compare"]["repeats"] == len(later.repeats["output_tok_s"]), later.cost
