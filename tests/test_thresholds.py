"""Thresholds from profile and marker -> verdict lines; here the per-position floors (``min_accept_rate_at``)."""

from __future__ import annotations

import dataclasses

import pytest

from pytest_specdec.profiles import Thresholds
from pytest_specdec.thresholds import evaluate, merge_marker
from tests.test_results import run_metrics

SPEC = dataclasses.replace(
    run_metrics(output_tok_s=100.0, accept_length=2.5),
    accept_rate_at=(0.72, 0.41, 0.2),
    accept_rate_cond_at=(0.72, 0.57, 0.49),
)


def test_position_floors_pass_and_fail_with_one_line_each() -> None:
    verdict = evaluate(Thresholds(min_accept_rate_at={1: 0.7, 2: 0.5}), SPEC, speculative=True)
    assert [c.passed for c in verdict.checks] == [True, False]
    assert verdict.message("profile eagle3, 16 requests") == (
        "accept_rate_at[2] 0.41 < min 0.5 (margin -0.09, -18.0%) [profile eagle3, 16 requests]"
    )


def test_position_beyond_the_drafted_ones_fails_saying_how_many() -> None:
    verdict = evaluate(Thresholds(min_accept_rate_at={4: 0.1}), SPEC, speculative=True)
    assert verdict.message("p") == (
        "accept_rate_at[4]: min 0.1 cannot be checked: the server drafts 3 position(s) per verify step; lower the "
        "position or raise speculative num_steps/num_draft_tokens [p]"
    )


def test_position_floors_not_applicable_without_speculation_or_data() -> None:
    plain = evaluate(Thresholds(min_accept_rate_at={1: 0.7}), SPEC, speculative=False)
    assert plain.checks[0].passed is None and not plain.failed
    missing = evaluate(Thresholds(min_accept_rate_at={1: 0.7}), run_metrics(output_tok_s=1.0), speculative=True)
    assert missing.checks[0].line() == (
        "accept_rate_at[1]: min 0.7 not applicable (per-position acceptance not reported by the server)"
    )


def test_marker_positions_override_and_string_keys_are_accepted() -> None:
    merged = merge_marker(Thresholds(min_accept_rate_at={1: 0.7}), {"min_accept_rate_at": {"2": 0.5, 1: 0.6}})
    assert merged.min_accept_rate_at == {1: 0.6, 2: 0.5}


@pytest.mark.parametrize(
    ("value", "message"),
    [
        (0.7, "min_accept_rate_at=0.7: expected a mapping of draft position to rate like "
              "min_accept_rate_at={1: 0.7, 2: 0.5}"),
        ({0: 0.7}, "min_accept_rate_at={0: 0.7}: position 0: positions are integers >= 1 (1 = the first "
                   "draft token), e.g. {1: 0.7, 2: 0.5} (draft position -> minimum rate)"),
        ({1: 1.5}, "min_accept_rate_at={1: 1.5}: position 1: rate 1.5 is not a number in [0, 1], "
                   "e.g. {1: 0.7, 2: 0.5} (draft position -> minimum rate)"),
        ({"first": 0.5}, "min_accept_rate_at={'first': 0.5}: position 'first': positions are integers "
                         ">= 1 (1 = the first draft token), e.g. {1: 0.7, 2: 0.5} (draft position -> minimum rate)"),
    ],
)
def test_bad_marker_positions_name_key_value_and_shape(value: object, message: str) -> None:
    with pytest.raises(ValueError) as info:
        merge_marker(Thresholds(), {"min_accept_rate_at": value})
    assert str(info.value) == message
