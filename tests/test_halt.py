"""A test that failed decisively measures no more (``judge/verdict.py``): a scripted handle whose tok/s swings
widely, so that ``min_tok_s`` alone would measure to ``max_repeats``; no server is started."""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

from pytest_specdec.core.records import RunMetrics, median_metrics
from pytest_specdec.judge.outcomes import Outcomes
from pytest_specdec.judge.verdict import judge_item
from pytest_specdec.measure import results, runner
from pytest_specdec.profiles.schema import Profile, Thresholds

SWINGING = [100.0, 140.0] * 8  # tok/s: a floor of 120 stays inside the interval for 16 repeats


def _metrics(tok_s: float) -> RunMetrics:
    fields: dict[str, Any] = {f.name: None for f in dataclasses.fields(RunMetrics)}
    fields.update(num_requests=4, num_ok=4, num_errors=0, duration_s=1.0, output_tokens=int(tok_s),
                  output_tok_s=tok_s, accept_length=2.0, accept_rate=1 / 3)  # fmt: skip
    return RunMetrics(**fields)


class _Scripted:
    """A MeasureHandle over a list of per-repeat tok/s; ``more()`` appends the next (1 s of server each)."""

    def __init__(self, first: int) -> None:
        self.measured = [runner.Measurement("eagle3", _metrics(v), (), "h", None, None, None, server_s=1.0)
                         for v in SWINGING[:first]]  # fmt: skip
        self.asked = 0

    def run(self, profile: str) -> runner.RunResult:
        return runner.RunResult(profile, tuple(self.measured), median_metrics([m.metrics for m in self.measured]), "h")

    def arms(self, profile: str, vs: str) -> None:
        return None

    def pair_error(self, profile: str, vs: str) -> None:
        return None

    def more_error(self, profile: str) -> None:
        return None

    def can_measure(self, profile: str) -> bool:
        return len(self.measured) < len(SWINGING)

    def more(self, profile: str, vs: str | None) -> bool:
        self.asked += 1
        self.measured.append(runner.Measurement("eagle3", _metrics(SWINGING[len(self.measured)]), (), "h", None,
                                                None, None, server_s=1.0))  # fmt: skip
        return True

    def spent_s(self, profile: str, vs: str | None) -> float:
        return float(len(self.measured))


def _judge(thresholds: Thresholds, tmp_path: Path) -> tuple[Any, _Scripted]:
    profile = Profile.model_validate({"name": "eagle3", "server": "reference",
                                      "speculative": {"algorithm": "EAGLE3", "num_steps": 3},
                                      "workload": {"temperature": 0, "repeats": 2, "max_repeats": 16}})  # fmt: skip
    handle = _Scripted(first=2)
    record = results.ResultRecord.from_measurements("t.py::test_x[eagle3]", handle.measured, {})
    verdict = judge_item(record, nodeid="t.py::test_x[eagle3]", profile=profile, thresholds=thresholds,
                         profiles={"eagle3": profile}, repeats=2, measurements=handle,
                         outcomes=Outcomes(tmp_path / "noise"))  # fmt: skip
    return verdict, handle


def test_min_tok_s_alone_measures_to_the_budget(tmp_path: Path) -> None:
    verdict, handle = _judge(Thresholds(min_tok_s=120), tmp_path)
    assert handle.asked == 14 and verdict.failure is None
    assert verdict.undecided and "min_tok_s" not in verdict.undecided[0]  # the line names the metric
    assert verdict.undecided[0].startswith("output_tok_s")


def test_an_exact_floor_that_fails_stops_the_others_measuring(tmp_path: Path) -> None:
    verdict, handle = _judge(Thresholds(min_tok_s=120, min_accept_length=2.5), tmp_path)
    assert handle.asked == 0
    assert verdict.failure is not None and "accept_length 2 tok/verify < min 2.5" in verdict.failure
    # Not counted as undecided at the budget (nor failed twice under --specdec-undecided=fail): a warning says why.
    assert verdict.undecided == ()
    assert any(w.startswith("output_tok_s") and w.endswith("not measured further (eagle3 had already failed "
                                                           "min_accept_length)") for w in verdict.warnings), verdict
