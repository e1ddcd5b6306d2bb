"""Live and summary output through pytester: the measured-phase progress line, preflight warnings, marker overrides
of profile thresholds, one verdict printed once per profile, where the trace: phase went. On the session's
shared reference server (``conftest.reference_url``): nothing read here depends on the plugin's own launch."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest

from tests.helpers import SHARED_EAGLE3

# 5 draft tokens at top-k 1: preflight's warning that SGLang (and the reference server) run num_steps + 1 = 4, so
# the shared server of SHARED_EAGLE3 (4) is what this profile runs, and its read-back agrees.
SPECULATIVE = "{algorithm: EAGLE3, num_steps: 3, eagle_topk: 1, num_draft_tokens: 5}"

PROFILES = """
profiles:
  eagle3:
    server: reference
    url: @URL@
    workload: {max_new_tokens: 16, num_requests: 3, warmup_requests: 0, repeats: 1}
    speculative: @SPECULATIVE@
    thresholds: {min_accept_length: 3.9, min_tok_s: 0.1}  # reachable (<= num_steps + 1), never met
    trace: {dir: traces, requests: 2}
"""

TESTS = """
from pathlib import Path

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
def test_progress_warning_override_and_shared_verdict(
    pytester: pytest.Pytester, reference_url: Callable[[str], str]
) -> None:
    profiles = PROFILES.replace("@URL@", reference_url(SHARED_EAGLE3)).replace("@SPECULATIVE@", SPECULATIVE)
    pytester.makefile(".yaml", specdec=profiles)
    pytester.makepyfile(test_specdec=TESTS)
    pytester.makeini("[pytest]\n")
    # A line per finished request instead of one every 30 s, to see the log form in a short phase.
    pytester.makeconftest(
        "import pytest_specdec.run.progress\npytest_specdec.run.progress.LOG_INTERVAL_S = 0.0\n"
    )
    result = pytester.runpytest_subprocess("--server-profile=eagle3", "-p", "no:cacheprovider", timeout=600)
    assert result.ret == pytest.ExitCode.TESTS_FAILED, result.stdout.str()
    result.assert_outcomes(passed=1, failed=2)
    warning = (
        "eagle3: warning: *specdec.yaml:*: profiles.eagle3.speculative.num_draft_tokens: with eagle_topk 1 SGLang "
        "overwrites num_draft_tokens*"
    )
    result.stdout.fnmatch_lines(
        [
            f"specdec preflight: {warning}",  # header
            # live, not captured: the tests pass or fail after it, and passing tests' output is never shown
            "specdec: measuring eagle3 (phase 1; first repeat): 0/3 requests",  # when the phase starts
            "specdec: measuring eagle3 (phase 1; first repeat): 1/3 requests, * tok/s so far",
            "specdec: measuring eagle3 (phase 1; first repeat): 3/3 requests, * tok/s so far",
            "*accept_length * tok/verify < min 3.9 (margin *) [[]exact; temperature 0, * identical repeats: decided by "
            "the first, * server-s[]] [[]profile eagle3, 3 requests*[]]",  # test_first: in full
            "*accept_length missed the thresholds of profile eagle3: the same verdict as test_first[[]eagle3[]] "
            "(printed there)",  # test_second refers to it
            "*= specdec summary =*",
            "test_first[[]eagle3[]] *failed",
            "test_loosened[[]eagle3[]] *passed",
            f"specdec preflight: {warning}",  # again under the table
            "specdec: test_loosened[[]eagle3[]]: marker overrides profile eagle3: min_accept_length 1 (profile: 3.9)",
            f"specdec eagle3: trace: {pytester.path / 'traces'} (1 new file)",  # the session ran trace: once
        ]
    )
    # Printed once in full; pytest's short summary repeats it untruncated when CI is set, so skip those lines.
    full = [line for line in result.stdout.lines if not line.startswith("FAILED ")]
    assert sum(line.count("< min 3.9 (margin") for line in full) == 1


def test_one_speedup_line_per_profile_the_confirmed_one() -> None:
    """After a confirmation the profile's first test recorded 3 pairs and the later ones all 6: one line, the last."""
    import dataclasses

    from pytest_specdec.measure.results import ResultRecord
    from pytest_specdec.report.summary import speedup_lines
    from tests.helpers import record

    def paired(profile: str, speedup: str) -> ResultRecord:
        return dataclasses.replace(record(profile, 100.0, 2.6), paired={"speedup": speedup})

    first = paired("eagle3", "speedup vs baseline 1.02x < min 1.05x [median of 3 paired ratios, ...] (suspected)")
    second = paired("eagle3", "speedup vs baseline 1.08x >= min 1.05x [median of 6 paired ratios, ...]")
    other = paired("eagle3-b", "speedup vs baseline 1.2x >= min 1.05x [median of 3 paired ratios, ...]")
    assert speedup_lines([first, second, other]) == [
        "specdec eagle3: speedup vs baseline 1.08x >= min 1.05x [median of 6 paired ratios, ...]",
        "specdec eagle3-b: speedup vs baseline 1.2x >= min 1.05x [median of 3 paired ratios, ...]",
    ]
    # A marker's floor on one test (min_speedup 1.3) beside the profile's (1.05) on the same pairs: two lines, each
    # with its own limit (a fresh-user trial saw the marker's line stand for the profile's undecided verdict).
    marked = dataclasses.replace(record("eagle3", 100.0, 2.6), paired={
        "speedup": "speedup vs baseline 1.08x < min 1.3x [...]", "limit": 1.3})  # fmt: skip
    profile = dataclasses.replace(record("eagle3", 100.0, 2.6), paired={
        "speedup": "speedup vs baseline 1.08x: undecided vs min 1.05x [...]", "limit": 1.05})  # fmt: skip
    assert speedup_lines([profile, marked]) == [
        "specdec eagle3: speedup vs baseline 1.08x: undecided vs min 1.05x [...]",
        "specdec eagle3: speedup vs baseline 1.08x < min 1.3x [...]",
    ]


def test_a_profiles_compare_table_and_its_notes_are_shown_once_per_measurement(tmp_path: Path) -> None:
    """Two tests of one profile read one measurement and get one compare (``Outcomes.once``): a fresh-user trial saw
    its table twice and its run-to-run line three times (in each table, then among the notes). One table now, headed
    by both tests; a note printed in a table is not repeated under it; a failed compare's notes (its table goes with
    the failure) still are."""
    from pytest_specdec.judge.outcomes import Outcomes
    from pytest_specdec.report.summary import compare_lines

    run_to_run = "run-to-run: too few stored runs to measure how server instances differ; ..."
    table = ["fingerprint: same as baseline", run_to_run, "metric  better  ...", "output_tok_s  higher  ..."]
    outcomes = Outcomes(tmp_path)
    for test in ("test_one", "test_two"):
        outcomes.add_compare("R1", f"t.py::{test}[eagle3]", [f"eagle3: {run_to_run}"], table, outcome="undecided")
    other = ["fingerprint: same as baseline", "metric  better  ...", "itl_ms_p50  lower  ..."]
    outcomes.add_compare("R1", "t.py::test_one[baseline]", [], other)
    outcomes.add_compare("R1", "t.py::test_one[eagle3-b]", ["eagle3-b: exact: ..."], [], outcome="FAILED")
    lines = [line.text for line in compare_lines(outcomes)]
    assert lines == [
        "specdec compare: 4 test(s) compared with stored run R1",
        "specdec compare: test_one[eagle3], test_two[eagle3] (undecided)",
        *table,
        "specdec compare: test_one[baseline] (no regression)",
        *other,
    ]
    assert outcomes.compare_notes == ("eagle3-b: exact: ...",)
