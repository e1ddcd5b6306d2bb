"""Summary notes through pytester: preflight warnings, marker overrides of profile thresholds, one verdict printed
once per profile. One reference-server start."""

from __future__ import annotations

import pytest

PROFILES = """
profiles:
  eagle3:
    server: reference
    startup_timeout_s: 180
    workload: {max_new_tokens: 16, num_requests: 3, warmup_requests: 0, repeats: 1}
    speculative: {algorithm: EAGLE3, num_steps: 3, eagle_topk: 1, num_draft_tokens: 5}
    thresholds: {min_accept_length: 9, min_tok_s: 0.1}
"""

TESTS = """
import pytest

def test_first(specdec_run):
    pass

def test_second(specdec_run):
    pass

@pytest.mark.specdec(min_accept_length=1.0)
def test_loosened(specdec_run):
    pass
"""


@pytest.mark.slow
def test_warning_override_and_shared_verdict_in_the_summary(pytester: pytest.Pytester) -> None:
    pytester.makefile(".yaml", specdec=PROFILES)
    pytester.makepyfile(test_specdec=TESTS)
    pytester.makeini("[pytest]\n")
    result = pytester.runpytest_subprocess("--server-profile=eagle3", "-p", "no:cacheprovider", timeout=600)
    assert result.ret == pytest.ExitCode.TESTS_FAILED, result.stdout.str()
    result.assert_outcomes(passed=1, failed=2)
    warning = (
        "eagle3: warning: *specdec.yaml: profiles.eagle3.speculative.num_draft_tokens: with eagle_topk 1 SGLang "
        "overwrites num_draft_tokens*"
    )
    result.stdout.fnmatch_lines(
        [
            f"specdec preflight: {warning}",  # header
            "*accept_length * tok/verify < min 9 (margin *) [[]profile eagle3, 3 requests[]]",  # test_first: in full
            "*accept_length missed the thresholds of profile eagle3: the same verdict as test_first[[]eagle3[]] "
            "(printed there)",  # test_second refers to it
            "*= specdec summary =*",
            "test_first[[]eagle3[]] *failed",
            "test_loosened[[]eagle3[]] *passed",
            f"specdec preflight: {warning}",  # again under the table
            "specdec: test_loosened[[]eagle3[]]: marker overrides profile eagle3: min_accept_length 1 (profile: 9)",
        ]
    )
    assert result.stdout.str().count("< min 9 (margin") == 1
