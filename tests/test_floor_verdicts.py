"""Per-position and per-category floors get the three verdicts of the overall ones (``judge/verdict.py``,
``sequential_checks``): where repeats differ (temperature above 0, a batch-variant engine) a floor inside the
interval is measured on and ends undecided at the budget, never passed on its median; a scripted handle, no server."""

from __future__ import annotations

import dataclasses
import itertools
from pathlib import Path
from typing import Any

import pytest

from pytest_specdec.core.records import RunMetrics
from pytest_specdec.judge.outcomes import Outcomes
from pytest_specdec.judge.thresholds import FLOOR_RULES, evaluate
from pytest_specdec.judge.verdict import ItemVerdict, judge_item
from pytest_specdec.measure import results
from pytest_specdec.profiles.schema import CategoryThresholds, Profile, Thresholds
from tests.helpers import ScriptedHandle, fingerprint

TEST_ID = "t.py::test_x[eagle3]"
MAX_REPEATS = 12


def _metrics(rate_1: float, code_length: float, code_ttft_ms: float = 40.0, length: float = 2.0) -> RunMetrics:
    fields: dict[str, Any] = {f.name: None for f in dataclasses.fields(RunMetrics)}
    fields.update(num_requests=4, num_ok=4, num_errors=0, duration_s=1.0, output_tokens=100, output_tok_s=100.0,
                  accept_length=length, accept_rate=(length - 1) / 3, accept_rate_at=(rate_1, 0.3, 0.1),
                  by_category={"code": {"num_ok": 4, "accept_length": code_length, "ttft_ms_p50": code_ttft_ms,
                                        "accept_rate_at": [rate_1, 0.3, 0.1]}})  # fmt: skip
    return RunMetrics(**fields)


def _judge(thresholds: Thresholds, script: list[tuple[float, ...]], tmp_path: Path, temperature: float = 0.7,
           speculative: bool = True, first: int = 2, max_repeats: int = MAX_REPEATS,
           ) -> tuple[ItemVerdict, ScriptedHandle]:  # fmt: skip
    spec = {"speculative": {"algorithm": "EAGLE3", "num_steps": 3}} if speculative else {}
    profile = Profile.model_validate({"name": "eagle3", "server": "reference", **spec,
                                      "workload": {"temperature": temperature, "repeats": first,
                                                   "max_repeats": max_repeats}})  # fmt: skip
    repeats = itertools.islice(itertools.cycle(script), MAX_REPEATS)
    handle = ScriptedHandle([_metrics(*repeat) for repeat in repeats], first=first)
    record = results.ResultRecord.from_measurements(TEST_ID, handle.measured, fingerprint())
    verdict = judge_item(record, nodeid=TEST_ID, profile=profile, thresholds=thresholds,
                         profiles={"eagle3": profile}, repeats=first, measurements=handle,
                         outcomes=Outcomes(tmp_path / "noise"))  # fmt: skip
    return verdict, handle


SWINGING = [(0.55, 2.0), (0.75, 2.6)]  # medians 0.65 and 2.3: above floors of 0.6 and 2.2, inside their intervals


@pytest.mark.parametrize(
    ("thresholds", "label", "cost_key"),
    [
        (Thresholds(min_accept_rate_at={1: 0.6}), "accept_rate_at[1]", "min_accept_rate_at[1]"),
        (Thresholds(categories={"code": {"min_accept_length": 2.2}}), "accept_length[code]",
         "min_accept_length[code]"),
        (Thresholds(categories={"code": {"min_accept_rate_at": {1: 0.6}}}), "accept_rate_at[1][code]",
         "min_accept_rate_at[1][code]"),
    ],
    ids=["position", "category", "category-position"],
)
def test_a_floor_inside_the_interval_is_undecided_at_the_budget_not_passed_on_its_median(
    thresholds: Thresholds, label: str, cost_key: str, tmp_path: Path
) -> None:
    verdict, handle = _judge(thresholds, SWINGING, tmp_path)
    assert handle.asked == MAX_REPEATS - 2  # measured on to the budget
    # The progress line says what each repeat is for and how far it may go.
    assert handle.whys[:2] == [f"{cost_key}: repeat {n} of at most {MAX_REPEATS}" for n in (3, 4)]
    assert verdict.failure is None
    (line,) = verdict.undecided
    assert line.startswith(f"{label} ") and ": undecided vs min " in line, line
    assert verdict.record.cost["verdicts"][cost_key]["verdict"] == "undecided"


def test_clear_floors_pass_after_the_first_look_and_a_clear_miss_fails(tmp_path: Path) -> None:
    thresholds = Thresholds(min_accept_rate_at={1: 0.3}, categories={"code": {"min_accept_length": 3.0}})
    verdict, handle = _judge(thresholds, [(0.80, 2.00), (0.82, 2.02)], tmp_path)
    assert handle.asked == 0  # decided at the design's first look, the 2 repeats measured
    assert verdict.undecided == ()
    assert verdict.failure is not None
    assert verdict.failure.startswith("accept_length[code] 2.0")
    assert "< min 3 (margin" in verdict.failure and "[geometric mean; " in verdict.failure
    costs = verdict.record.cost["verdicts"]
    assert costs["min_accept_rate_at[1]"]["verdict"] == "passed"
    assert costs["min_accept_length[code]"]["verdict"] == "FAILED"


def test_at_temperature_zero_identical_repeats_decide_by_the_first(tmp_path: Path) -> None:
    verdict, handle = _judge(Thresholds(min_accept_rate_at={1: 0.9}), [(0.8, 2.0)], tmp_path, temperature=0)
    assert handle.asked == 0
    assert verdict.failure is not None
    assert "[exact; temperature 0, 2 identical repeats: decided by the first, " in verdict.failure
    assert verdict.record.cost["verdicts"]["min_accept_rate_at[1]"]["repeats"] == 1


def test_a_baseline_profiles_category_ceiling_is_not_passed_on_its_median(tmp_path: Path) -> None:
    # Medians 45 ms under a 50 ms ceiling, inside its interval: a profile without speculative decoding has no
    # accept floors, but its latency ceilings are decided on their interval all the same.
    thresholds = Thresholds(categories={"code": {"max_ttft_ms": 50.0, "min_accept_length": 2.0}})
    verdict, handle = _judge(thresholds, [(0.5, 2.0, 35.0), (0.5, 2.0, 55.0)], tmp_path, speculative=False)
    assert handle.asked == MAX_REPEATS - 2
    (line,) = verdict.undecided
    assert line.startswith("ttft_ms p50[code] ") and ": undecided vs max " in line, line
    assert set(verdict.record.cost["verdicts"]) == {"max_ttft_ms[code]"}  # the accept floor is not applicable


def test_every_scalar_threshold_key_has_a_floor_rule() -> None:
    # A key without a rule would raise KeyError at judging time, after the servers ran.
    scalar = {name for name, field in Thresholds.model_fields.items() if field.annotation == (float | None)}
    per_category = set(CategoryThresholds.model_fields) - {"min_accept_rate_at"}
    assert per_category <= set(FLOOR_RULES)
    assert set(FLOOR_RULES) <= scalar


def test_a_category_agreeing_by_coincidence_in_a_varying_run_is_not_exact(tmp_path: Path) -> None:
    # temperature 0, but the run's accept length differs across repeats (a batch-variant engine): the category's
    # identical 2.4s are not taken as exact; with no spread they have no interval, so they are measured on (here
    # the script keeps them identical to the budget: undecided, never passed on the value).
    script = [(0.8, 2.4, 40.0, 2.50), (0.8, 2.4, 40.0, 2.45), (0.8, 2.4, 40.0, 2.55)]
    verdict, handle = _judge(Thresholds(categories={"code": {"min_accept_length": 2.38}}), script, tmp_path,
                             temperature=0)  # fmt: skip
    cost = verdict.record.cost["verdicts"]["min_accept_length[code]"]
    assert (cost["verdict"], handle.asked) == ("undecided", MAX_REPEATS - 2)
    # The same category spreading a little is decided on its interval after the first look.
    spread = [(0.8, 2.41, 40.0, 2.50), (0.8, 2.40, 40.0, 2.45), (0.8, 2.42, 40.0, 2.55)]
    verdict, _ = _judge(Thresholds(categories={"code": {"min_accept_length": 2.38}}), spread, tmp_path / "b",
                        temperature=0)  # fmt: skip
    assert verdict.record.cost["verdicts"]["min_accept_length[code]"]["verdict"] == "passed"


def test_one_repeat_at_temperature_zero_measures_a_second_before_calling_a_floor_exact(tmp_path: Path) -> None:
    verdict, handle = _judge(Thresholds(min_accept_rate_at={1: 0.9}), [(0.8, 2.0)], tmp_path, temperature=0, first=1)
    assert handle.asked == 1  # the second repeat agrees: exact from there
    assert verdict.failure is not None and "[exact; temperature 0, 2 identical repeats: " in verdict.failure


def test_a_one_repeat_budget_decides_an_exact_floor_on_its_value_and_says_nothing_showed_agreement(
    tmp_path: Path,
) -> None:
    # workload.max_repeats 1 (a fixed one-look design) leaves no second repeat: the value decides, and the line
    # says so rather than "1 identical repeats" (a trial read that as shown agreement).
    verdict, handle = _judge(Thresholds(min_accept_rate_at={1: 0.9}), [(0.8, 2.0)], tmp_path, temperature=0,
                             first=1, max_repeats=1)  # fmt: skip
    assert handle.asked == 0
    assert verdict.failure is not None
    assert "[exact; temperature 0, 1 repeat: decided by its value, " in verdict.failure
    assert "no second repeat to show the repeats agree" in verdict.failure


class _TailsGrowWithRepeats(ScriptedHandle):
    """The run's p90 TTFT evidence as the repeats grow: 2 repeats cannot bound it from above, 4 can (under 500 ms)."""

    def run(self, profile: str) -> Any:
        run = super().run(profile)
        high = None if len(self.measured) < 4 else 120.0
        tails = {"ttft_ms_p90": {"n": 24 * len(self.measured), "estimate": 100.0, "low": 90.0, "high": high}}
        return dataclasses.replace(run, metrics=dataclasses.replace(run.metrics, tails=tails))


def test_a_profile_tail_ceiling_is_judged_once_though_a_later_test_measured_more(tmp_path: Path) -> None:
    # An audit finding: the tail ceilings were judged per test, so a second test of the profile, after its own marker
    # measured more repeats, could pass the p90 ceiling the first test of the same profile left undecided.
    profile = Profile.model_validate({"name": "eagle3", "server": "reference", "workload": {"repeats": 2}})
    handle = _TailsGrowWithRepeats([_metrics(0.6, 2.0)] * 4, first=2)
    outcomes = Outcomes(tmp_path / "noise")

    def judge(test_id: str) -> ItemVerdict:
        record = results.ResultRecord.from_measurements(test_id, handle.measured, fingerprint())
        return judge_item(record, nodeid=test_id, profile=profile, thresholds=Thresholds(max_ttft_ms_p90=500),
                          profiles={"eagle3": profile}, repeats=2, measurements=handle, outcomes=outcomes)

    first = judge("t.py::test_a[eagle3]")
    handle.more("eagle3", None)
    handle.more("eagle3", None)  # what test_b's own marker would have measured before its verdict
    assert "passed" in evaluate(Thresholds(max_ttft_ms_p90=500), handle.run("eagle3").metrics,
                                speculative=True).outcomes()["max_ttft_ms_p90"]  # fmt: skip
    second = judge("t.py::test_b[eagle3]")
    assert first.checks["max_ttft_ms_p90"].startswith("undecided: ttft_ms p90 100 ms: undecided vs max 500")
    assert second.checks == first.checks and second.undecided == first.undecided
