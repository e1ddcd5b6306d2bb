"""Summary output on the fake SGLang: a passing --specdec-compare shows its delta table (it said only "N test(s)
compared"); with pytest-benchmark on, a line says why its OPS differs from the summary's tok/s."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from pytest_specdec.engines.rules import BUNDLED_DRAFT_EAGLE3, BUNDLED_TARGET
from tests.helpers import IN_PROCESS_INI, run_in_process

FAKE = Path(__file__).resolve().parent / "fakesglang"


def _project(pytester: pytest.Pytester) -> None:
    env = json.dumps({"PYTHONPATH": str(FAKE), "SPECDEC_FAKE_SGLANG": "{}"})
    spec = (
        f"{{algorithm: EAGLE3, draft_model_path: {BUNDLED_DRAFT_EAGLE3}, num_steps: 3, eagle_topk: 1, "
        "num_draft_tokens: 4}"
    )
    # Wide time tolerances: a busy runner's tok/s may move, and the fake's ITL p50 is near 0 ms, where a relative
    # tolerance alone is any jitter (hence +50 ms); the table is what this test is about.
    pytester.makefile(".yaml", specdec=(
        f"profiles:\n  eagle3:\n    server: sglang\n    model_path: {BUNDLED_TARGET}\n    env: {env}\n"
        f"    startup_timeout_s: 60\n    speculative: {spec}\n"
        "    workload: {max_new_tokens: 15, num_requests: 2, warmup_requests: 0, repeats: 2}\n"
        '    tolerances: ["output_tok_s:1000%", "ttft_ms:1000%+50", "itl_ms:1000%+50", "tpot_ms:1000%+50"]\n'
    ))  # fmt: skip
    pytester.makepyfile(test_cmp="def test_run(specdec_run):\n    pass\n")
    # In-process runs (no fresh interpreter needed: the fake SGLang is the launched process) meet modules this
    # process imported before them: pytest's note that it cannot rewrite them is no error here.
    pytester.makeini(IN_PROCESS_INI)


@pytest.mark.slow
def test_passing_compare_prints_the_delta_table(pytester: pytest.Pytester) -> None:
    _project(pytester)
    args = ("--server-profile=eagle3",)
    # The baseline with 4 repeats: with 2, one stalled phase (ITL mean 4.4 and 0.44 ms) left a +50 ms tolerance
    # undecided at 1 df (flake hunt seed 219), and the undecided warning is an error under the strict ini.
    first = run_in_process(pytester, *args, "--specdec-repeats=4")
    assert first.ret == pytest.ExitCode.OK, first.stdout.str()
    second = run_in_process(pytester, *args, "--specdec-compare")
    assert second.ret == pytest.ExitCode.OK, second.stdout.str()
    second.stdout.fnmatch_lines(
        [
            "specdec compare: 1 test(s) compared with stored run *",
            "*- specdec compare: test_run[[]eagle3[]] (no regression) -*",
            "fingerprint: same as baseline",
            "metric * better * baseline * current * delta * delta % * tolerance * verdict",
            "accept_length * higher * 2.8 * 2.8 * +0 * +0.0% * 2% * ok",
        ]
    )
    # Under xdist the controller judges nothing: the workers send it their compares, and it says the same lines
    # (a trial under -n 2 saw neither the line naming the baseline nor the table). The second run passed against
    # the first: the first stays the reference.
    third = run_in_process(pytester, *args, "--specdec-compare", "-n", "2")
    assert third.ret == pytest.ExitCode.OK, third.stdout.str()
    third.stdout.fnmatch_lines(
        [
            "specdec compare: 1 test(s) compared with stored run *: the reference of *",
            "*- specdec compare: test_run[[]eagle3[]] (no regression) -*",
            "accept_length * higher * 2.8 * 2.8 * +0 * +0.0% * 2% * ok",
        ]
    )


@pytest.mark.slow
def test_with_pytest_benchmark_the_summary_says_why_ops_differs_from_tok_s(pytester: pytest.Pytester) -> None:
    pytest.importorskip("pytest_benchmark")
    from pytest_specdec.report.summary import BENCHMARK_OPS_NOTE, REPEATS_NOTE

    _project(pytester)
    result = run_in_process(pytester, "--server-profile=eagle3", benchmark=True)
    assert result.ret == pytest.ExitCode.OK, result.stdout.str()
    result.stdout.fnmatch_lines([REPEATS_NOTE, BENCHMARK_OPS_NOTE, "*benchmark 'specdec: seconds per output token*"])
    without = run_in_process(pytester, "--server-profile=eagle3")
    assert BENCHMARK_OPS_NOTE not in without.stdout.str()
    # The table's tok/s (median repeat) beside a verdict's geometric mean is explained without pytest-benchmark too.
    assert REPEATS_NOTE in without.stdout.str()
