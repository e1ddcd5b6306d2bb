"""Baseline compare end to end on the reference server: save a run, change the config, rerun against it.

The seed's two regressions, in miniature: aux layer ids edited (accept length drops, the aux-id diff is shown), and an
env var lost on restart while the server got slower (the env diff leads; pytest-benchmark's compare-fail also trips).
"""

from __future__ import annotations

import re
from collections.abc import Callable

import pytest

# Imported before any in-process run (pytester drops the modules an inner run imported; numpy.fft cannot be loaded
# twice in one process).
import scipy.stats  # noqa: F401

from tests.helpers import SHARED_EAGLE3, assert_tok_s_regressed_or_left_open, run_in_process

pytestmark = pytest.mark.slow

WORKLOAD = "workload: {max_new_tokens: 16, num_requests: 8, warmup_requests: 1, repeats: 2}"
#: The shifted layers regress on accept length, exact at temperature 0: half the tokens keep its drop (8 built-in
#: prompts, 2026-12-04: 2.45 -> 2.17 at 32 tokens, 2.42 -> 2.14 at 16; tolerance 2%), and so do half the requests (the
#: first 4 prompts, 2026-12-06: 2.286 -> 2.138 at 16 tokens, -6.5%, REGRESSED (exact) at load 10: greedy decoding
#: replays the same tokens, so the accept length of a prompt set is one number whatever the load); the repeats it
#: was saved with decide it; without max_repeats the compare went on to 12 repeats for the tok/s and latency rows,
#: which this test does not read.
SHORT_WORKLOAD = "workload: {max_new_tokens: 16, num_requests: 4, warmup_requests: 1, repeats: 2, max_repeats: 2}"

TEST = """
import pytest

@pytest.mark.specdec
def test_eagle3(specdec_run):
    pass
"""


def _profiles(eagle3_env: str, extra: str = "", workload: str = WORKLOAD, url: str | None = None) -> str:
    """``url``: eagle3 (and the profile extending it) measures that server, never launches."""
    given = f"\n    url: {url}" if url is not None else ""
    return f"""
profiles:
  eagle3:
    server: reference{given}
    env: {eagle3_env}
    {workload}
    speculative: {{algorithm: EAGLE3, num_steps: 3, eagle_topk: 1, num_draft_tokens: 4}}
  eagle3-shifted-layers:
    extends: eagle3
    speculative: {{aux_hidden_state_layer_ids: [0, 2, 4]}}
{extra}
"""


def test_shifted_layers_regress_against_the_eagle3_baseline_with_aux_id_diff(
    pytester: pytest.Pytester, reference_url: Callable[[str], str]
) -> None:
    """The stored eagle3 run measures the session's shared EAGLE3 server (``conftest.reference_url``: a launch
    saved; the bundled draft on its trained aux ids, as it reports); the shifted layers launch their own."""
    pytester.makefile(".yaml", specdec=_profiles("{}", workload=SHORT_WORKLOAD, url=reference_url(SHARED_EAGLE3)))
    # A second parametrization: the profile id is only part of the node id ("[eagle3-1]").
    pytester.makepyfile(
        test_compare_night=TEST + "\n\n@pytest.mark.parametrize('n', [1])\ndef test_param(specdec_run, n):\n    pass\n"
    )
    # In process: the servers are processes of their own, nothing needs a fresh interpreter.
    first = run_in_process(pytester, "--server-profile=eagle3")
    assert first.ret == pytest.ExitCode.OK, first.stdout.str()
    pytester.makefile(".yaml", specdec=_profiles("{}", workload=SHORT_WORKLOAD))
    second = run_in_process(
        pytester, "--server-profile=eagle3-shifted-layers", "--specdec-compare", "--specdec-compare-profile=eagle3"
    )
    assert second.ret == pytest.ExitCode.TESTS_FAILED, second.stdout.str()
    second.assert_outcomes(failed=2)
    second.stdout.fnmatch_lines(["regression against run * (test_compare_night.py::test_param[[]eagle3-1[]]):"])
    second.stdout.fnmatch_lines(["specdec compare: 2 test(s) compared with stored run *"])
    out = second.stdout.str()
    second.stdout.fnmatch_lines(
        [
            "regression against run * (test_compare_night.py::test_eagle3[[]eagle3[]]):",
            "*draft aux ids: [[]1, 3, 5[]] -> [[]0, 2, 4[]]*",
            "*accept_length*REGRESSED*",
        ]
    )
    # "What changed?" comes before the numbers.
    assert out.index("draft aux ids") < out.index("REGRESSED")


def test_lost_env_var_and_slower_server_lead_with_env_diff_and_trip_benchmark_compare(
    pytester: pytest.Pytester,
) -> None:
    pytester.makefile(".yaml", specdec=_profiles("{NCCL_PROTO: LL}"))
    pytester.makepyfile(test_compare_night=TEST)
    # The baseline with 4 repeats, as the plugin advises: with 2, one stalled phase (62.9 and 86.4 tok/s, seen on CI)
    # leaves the baseline spreading more than today, hence Welch's t with ~1 df, and a -44% run honestly undecided.
    first = run_in_process(pytester, "--server-profile=eagle3", "--benchmark-autosave", "--specdec-repeats=4",
                           benchmark=True)  # fmt: skip
    assert first.ret == pytest.ExitCode.OK, first.stdout.str()
    # The restart "lost" NCCL_PROTO and the server is slower per forward (a documented reference-server knob). Every
    # target forward takes 3x its own compute (the draft is not slowed): x0.40 tok/s quiet (tests/test_probes.py),
    # x0.33 at load 3-5, about the 15 ms delay it replaces had quiet (x0.44). A fixed sleep shrank as load stretched
    # the compute (x0.51-0.59 at load 3-5), a factor does not; 2.5 (x0.39 at load 3) was left undecided at 5 repeats
    # when the load eased between the stored run and this one (x0.633, CI 0.35-1.15), and so was 3 (x0.526, CI
    # 0.24-1.14, run-to-run sd taken as 21%: the run stored beside a second job's slowed server, the compare after it
    # ended; flake hunt seed 95). 5 read x0.132 at load 4.5 (CI 0.10-0.17, 18.6 server-s for 2 repeats), far enough
    # below that an interval as wide as that failure's (x2.2 each way) still tops out under 0.95; 6 read x0.126 but
    # cost 23 server-s.
    pytester.makefile(".yaml", specdec=_profiles("{SPECDEC_REF_FORWARD_SLOWDOWN: '5'}"))
    second = run_in_process(
        pytester, "--server-profile=eagle3", "--specdec-compare", "--benchmark-compare",
        "--benchmark-compare-fail=mean:5%", "--specdec-undecided=fail", benchmark=True,
    )  # fmt: skip
    assert second.ret != pytest.ExitCode.OK, second.stdout.str()
    out = second.stdout.str()
    if "regression against run" not in out:
        # A busy runner (load per CPU above 1): raw rows take a 68% run-to-run sd against one stored run, and the 5x
        # forward slowdown read only x0.698 at load 3.3 (clean-clone CI): undecided, said, failed by the policy. The
        # env diff still leads its compare section.
        assert re.search(r"^\d+ verdicts? undecided at the budget \(--specdec-undecided=fail\):", out, re.M), out
        section = out[out.index("specdec compare: test_eagle3[eagle3] (undecided)") :]
        assert re.search(r"^(raw|raw and ratio) rows: a busy runner without a GPU", section, re.M), section
        assert section.index("env NCCL_PROTO: LL -> (unset)") < section.index("output_tok_s "), section
    else:
        second.stdout.fnmatch_lines(["regression against run *", "*env NCCL_PROTO: LL -> (unset)*"])
        assert out.index("env NCCL_PROTO") < out.index("REGRESSED")
        # Decided on its interval (issue 15.3). The compare stops at the look at which a row regressed: tok/s, or a
        # latency row first (flake hunt seed 250, a baseline spread sd 24.5% by load: output_tok_s x0.607, CI
        # 0.36-1.03 open at 5 repeats beside regressed latencies); an open row keeps its interval and says it was not
        # measured.
        assert_tok_s_regressed_or_left_open(out)
    # Accept length at temperature 0 is exact: equal, no statistics.
    second.stdout.fnmatch_lines(["exact: accept length/rate at temperature 0 with identical repeats*"])
    # pytest-benchmark's own gate sees seconds per output token and fails the session too; the bridge turns its
    # PerformanceRegression traceback into one line.
    second.stdout.fnmatch_lines(
        ["specdec: pytest-benchmark --benchmark-compare-fail: performance regressed: specdec[[]eagle3[]] *"]
    )
    assert "PerformanceRegression" not in second.stderr.str()
