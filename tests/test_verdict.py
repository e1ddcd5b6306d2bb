"""``verdict.py``'s data-only functions: the threshold message, the shared-verdict reference, the sweep point's
steps, and the baseline compare with its confirming measurement (hand-made records, no server)."""

from __future__ import annotations

import pytest

from pytest_specdec import compare
from pytest_specdec.profiles import Profile, Thresholds
from pytest_specdec.results import ResultRecord
from pytest_specdec.summary import cost_lines, note_lines
from pytest_specdec.thresholds import evaluate
from pytest_specdec.verdict import CompareVerdict, failure_message, judge_compare, shared_verdict_message, sweep_steps
from tests.helpers import rec, run_metrics

SLOW = run_metrics(output_tok_s=100.0, accept_length=2.0)


def test_failure_message_names_profile_requests_and_repeats() -> None:
    verdict = evaluate(Thresholds(min_accept_length=2.5), SLOW, speculative=True)
    assert failure_message(verdict, "eagle3", 16, 3) == (
        "accept_length 2 tok/verify < min 2.5 (margin -0.5, -20.0%) [profile eagle3, 16 requests, median of 3 repeats]"
    )
    assert failure_message(verdict, "eagle3", 16, 1).endswith("[profile eagle3, 16 requests]")


def test_a_later_test_refers_to_the_first_verdict() -> None:
    verdict = evaluate(Thresholds(min_accept_length=2.5, min_tok_s=200), SLOW, speculative=True)
    assert shared_verdict_message(verdict, "eagle3", "tests/test_a.py::test_first[eagle3]") == (
        "accept_length, output_tok_s missed the thresholds of profile eagle3: the same verdict as "
        "test_first[eagle3] (printed there)"
    )


def test_sweep_steps_of_a_point_and_of_its_profile() -> None:
    spec = {"algorithm": "EAGLE3", "num_steps": 3, "eagle_topk": 1, "num_draft_tokens": 4}
    base = Profile(name="eagle3", server="reference", speculative=spec)
    point = Profile(name="eagle3@num_steps=1", server="reference", speculative={**spec, "num_steps": 1})
    assert sweep_steps(point, {"eagle3": base}) == (1, 3)
    assert sweep_steps(base, {"eagle3": base}) == (None, None)


def _judge(base: ResultRecord, current: ResultRecord, again: ResultRecord | None, calls: list[int]) -> CompareVerdict:
    def confirm() -> ResultRecord | None:
        calls.append(1)
        return again

    return judge_compare(
        base, current, run_id="R1", test_id=current.test_id, tolerances=compare.layered_tolerances(), noise={},
        force=False, confirm=confirm,
    )  # fmt: skip


BASE = rec(output_tok_s=[100.0, 101.0, 99.0])
SLOWER = rec(output_tok_s=[70.0, 71.0, 69.0])


def test_no_regression_is_not_measured_again() -> None:
    calls: list[int] = []
    judged = _judge(BASE, rec(output_tok_s=[100.0, 100.0, 100.0]), None, calls)
    assert (judged.failure, judged.warning, calls) == (None, None, [])


def test_a_confirmed_regression_fails_with_both_measurements() -> None:
    calls: list[int] = []
    judged = _judge(BASE, SLOWER, SLOWER, calls)
    assert calls == [1]
    assert judged.failure is not None
    lines = judged.failure.splitlines()
    assert lines[0] == "regression against run R1 (t.py::test_x[eagle3]):"
    assert lines[1] == "first measurement:"
    assert "confirming measurement:" in lines


@pytest.mark.parametrize(
    ("again", "failure_end", "warning"),
    [
        (BASE, None, "t.py::test_x[eagle3]: suspected regression of output_tok_s against run R1 not confirmed by a "
                     "second measurement; not failed"),
        (None, "(not confirmed: the server could not be measured again)", None),
    ],
)  # fmt: skip
def test_an_unconfirmed_regression(again: ResultRecord | None, failure_end: str | None, warning: str | None) -> None:
    judged = _judge(BASE, SLOWER, again, [])
    assert (judged.failure.splitlines()[-1] if judged.failure else None) == failure_end
    assert judged.warning == warning


def test_note_lines() -> None:
    lines = note_lines(
        ["eagle3: warning: x"],
        {"t.py::test_a[eagle3]": ("eagle3", ["min_tok_s 1 (profile: 10)"]), "t.py::test_b[eagle3]": ("eagle3", ["y"])},
        {"t.py::test_a[eagle3]"},
        [("eagle3", "trace: /tmp/t (1 new files)"), ("base", None), ("vllm", "not traced: fixed at launch")],
    )
    assert lines == [
        ("specdec preflight: eagle3: warning: x", {"yellow": True}),
        ("specdec: test_a[eagle3]: marker overrides profile eagle3: min_tok_s 1 (profile: 10)", {}),
        ("specdec eagle3: trace: /tmp/t (1 new files)", {"yellow": False}),
        ("specdec vllm: not traced: fixed at launch", {"yellow": True}),
    ]


def test_cost_lines_give_server_seconds_per_verdict_and_skip_old_records() -> None:
    import dataclasses

    old = ResultRecord("t.py::test_old[eagle3]", "eagle3", {}, {}, {})
    new = dataclasses.replace(
        old,
        test_id="t.py::test_new[eagle3]",
        cost={"server_s": 34.25, "repeats": 4, "verdicts": {
            "min_speedup": {"verdict": "passed", "repeats": 4, "server_s": 34.25},
            "min_tok_s": {"verdict": "undecided", "repeats": 4, "server_s": 12.0},
        }},
    )  # fmt: skip
    assert cost_lines([old, new]) == [
        "specdec server time: test_new[eagle3]: 34.2 server-s, 4 repeats; min_speedup passed after 4 pairs (34.2 s); "
        "min_tok_s undecided after 4 repeats (12.0 s)"
    ]
