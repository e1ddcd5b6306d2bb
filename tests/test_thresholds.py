"""Thresholds from profile and marker -> verdict lines; here the per-position floors (``min_accept_rate_at``)."""

from __future__ import annotations

import dataclasses

import pytest

from pytest_specdec.judge.thresholds import Check, evaluate, merge_marker
from pytest_specdec.profiles.schema import Thresholds
from tests.helpers import run_metrics

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
    # An engine that reports accept length but not per position (no histogram, no per-position counter).
    no_positions = run_metrics(output_tok_s=1.0, accept_length=2.5)
    missing = evaluate(Thresholds(min_accept_rate_at={1: 0.7}), no_positions, speculative=True)
    assert missing.checks[0].line() == (
        "accept_rate_at[1]: min 0.7 not applicable (per-position acceptance not reported by the server)"
    )


def test_a_speculative_run_without_any_accept_figure_fails_every_accept_floor() -> None:
    """A server that stopped speculating (SGLang sends no spec_verify_ct then) reports no accept figure at all: its
    floors fail naming why, never pass as "not reported"; a latency ceiling beside them is judged as usual."""
    limits = Thresholds(min_accept_length=2.0, min_accept_rate=0.4, min_accept_rate_at={1: 0.7}, max_ttft_ms=50,
                        categories={"code": {"min_accept_length": 2.0}})  # fmt: skip
    silent = run_metrics(output_tok_s=1.0, ttft_ms_p50=10.0, by_category={"code": {"num_ok": 1}})
    verdict = evaluate(limits, silent, speculative=True)
    assert [(c.label, c.passed) for c in verdict.checks] == [
        ("accept_length", False), ("accept_rate", False), ("ttft_ms p50", True), ("accept_rate_at[1]", False),
        ("accept_length[code]", False)]  # fmt: skip
    assert verdict.message("p").startswith(
        "accept_length: min 2 cannot be checked: no request reported a verify step (meta_info.spec_verify_ct) and no "
        "accept counter was read: the server ran without speculative decoding (check the --speculative-* flags in "
        "its log) or does not report it"
    )
    # accept_length reported, accept_rate not (no num_steps to divide by): not applicable, as before.
    partial = evaluate(Thresholds(min_accept_rate=0.4), run_metrics(accept_length=2.5), speculative=True)
    assert partial.checks[0].passed is None


def test_a_sweep_point_exempts_per_category_floors_as_the_overall_ones() -> None:
    limits = Thresholds(categories={"code": {"min_accept_length": 2.5, "min_accept_rate_at": {2: 0.4}}})
    verdict = evaluate(limits, CATEGORIZED, speculative=True, sweep_steps=1, configured_steps=3)
    assert [c.passed for c in verdict.checks] == [None, None]
    assert [c.note for c in verdict.checks] == [
        "at num_steps 1 accept length is at most 2", "at num_steps 1 only 1 position(s) are drafted"]


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


def test_a_bool_in_a_marker_is_an_error_not_a_floor_of_one() -> None:
    with pytest.raises(ValueError, match=r"^min_accept_length=True: expected a number, got a bool$"):
        merge_marker(Thresholds(), {"min_accept_length": True})
    assert merge_marker(Thresholds(), {"min_accept_length": 2}).min_accept_length == 2.0


def test_a_failing_figure_never_reads_as_its_threshold() -> None:
    # A fresh-user trial: "accept_length 2.286 tok/verify < min 2.286 (margin -0.0002857, -0.0%)" (16/7 against 2.286).
    check = Check("min_accept_length", "accept_length", ">=", 2.286, 16 / 7, "tok/verify", False)
    assert check.line() == "accept_length 2.2857 tok/verify < min 2.286 (margin -0.0002857, -0.012%)"
    passed = Check("min_accept_length", "accept_length", ">=", 2.4, 2.6321, "tok/verify", True)
    assert passed.line() == "accept_length 2.632 tok/verify >= min 2.4 (margin +0.2321, +9.7%)"


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"min_accept_length": "x"}, "min_accept_length='x': expected a number >= 1"),
        ({"min_accept_length": 0.5}, "min_accept_length=0.5: expected a number >= 1"),
        ({"min_accept_rate": 47}, "min_accept_rate=47: expected a number between 0 and 1"),
        ({"max_ttft_ms": -1}, "max_ttft_ms=-1: expected a number > 0"),
    ],
)
def test_a_bad_marker_value_says_what_is_expected_as_the_profile_loader_does(kwargs: dict, message: str) -> None:
    # A fresh-user trial: the marker showed pydantic's "Input should be a valid number, unable to parse string as a
    # number" where the profile file's loader says "expected a number >= 1, got 'x'".
    with pytest.raises(ValueError) as info:
        merge_marker(Thresholds(), kwargs)
    assert str(info.value) == message


CATEGORIZED = dataclasses.replace(
    SPEC,
    by_category={
        "code": {"num_ok": 12, "accept_length": 2.8, "accept_rate": 0.6, "ttft_ms_p50": 40.0,
                 "accept_rate_at": [0.9, 0.6, 0.3]},
        "prose": {"num_ok": 4, "accept_length": 1.9, "accept_rate": 0.3, "ttft_ms_p50": 45.0,
                  "accept_rate_at": [0.6, 0.2, 0.1]},
    },
)


def test_category_thresholds_fail_with_the_category_in_the_label() -> None:
    limits = Thresholds(categories={"code": {"min_accept_length": 2.5, "min_accept_rate_at": {1: 0.8}},
                                    "prose": {"min_accept_length": 2.0, "max_ttft_ms": 50}})
    verdict = evaluate(limits, CATEGORIZED, speculative=True)
    assert [c.label for c in verdict.checks] == [
        "accept_length[code]", "accept_rate_at[1][code]", "accept_length[prose]", "ttft_ms p50[prose]"]
    assert verdict.message("p") == "accept_length[prose] 1.9 tok/verify < min 2 (margin -0.1, -5.0%) [p]"


def test_category_without_requests_fails_naming_the_ones_there() -> None:
    verdict = evaluate(Thresholds(categories={"math": {"min_accept_length": 2}}), CATEGORIZED, speculative=True)
    assert verdict.message("p") == (
        "accept_length[math]: min 2 cannot be checked: no request of category 'math' in this run "
        "(categories: code, prose) [p]"
    )


def test_marker_categories_merge_category_by_category() -> None:
    base = Thresholds(categories={"code": {"min_accept_length": 2.5}, "prose": {"min_accept_length": 1.5}})
    merged = merge_marker(base, {"categories": {"prose": {"min_accept_length": 1.8}}})
    assert merged.categories is not None
    assert {k: v.min_accept_length for k, v in merged.categories.items()} == {"code": 2.5, "prose": 1.8}
    with pytest.raises(ValueError) as info:
        merge_marker(base, {"categories": {"code": {"min_tok_s": 5}}})
    assert str(info.value) == "categories.code.min_tok_s=5: Extra inputs are not permitted"
    with pytest.raises(ValueError, match=r"^categories=\['code'\]: expected a mapping of category to thresholds"):
        merge_marker(base, {"categories": ["code"]})


def test_a_large_margin_reads_as_a_whole_number() -> None:
    # A fresh-user trial: "output_tok_s 61.22 tok/s < min 100000 (margin -9.994e+04, -99.9%)".
    check = Check("min_tok_s", "output_tok_s", ">=", 100000, 61.22, "tok/s", False)
    assert check.line() == "output_tok_s 61.22 tok/s < min 100000 (margin -99939, -99.9%)"
    near = Check("max_ttft_ms", "ttft_ms p50", "<=", 500, 9999.4, "ms", False)
    assert near.line() == "ttft_ms p50 9999 ms > max 500 (margin +9499, +1899.9%)"
