"""Part 1 of the real-SGLang tests (tests/gpu/conftest.py): the trained ids pass with a paired speedup, wrong ids fail
on acceptance, EAGLE on an EAGLE-3 draft stops at preflight. ``pytest -m gpu tests/gpu/test_part1_verdicts.py``.
"""

from __future__ import annotations

import os

import pytest

pytestmark = pytest.mark.gpu

if not os.environ.get("SPECDEC_SGLANG_PYTHON"):
    pytest.skip("real SGLang tests: set SPECDEC_SGLANG_PYTHON on a GPU machine (tests/gpu/)", allow_module_level=True)


def test_trained_ids_pass_and_speculation_pays(run_plugin) -> None:
    result = run_plugin("--server-profile=baseline,eagle3-speedup")
    assert result.ret == 0, result.stdout.str()
    result.assert_outcomes(passed=2)


def test_wrong_layer_ids_fail_on_acceptance(run_plugin) -> None:
    result = run_plugin("--server-profile=eagle3-wrong-layers")
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines(["*accept_length*< min 2.5*"])


def test_eagle_algorithm_on_eagle3_draft_stops_at_preflight(run_plugin) -> None:
    result = run_plugin("--server-profile=eagle-algorithm")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(
        ["*profiles.eagle-algorithm.speculative.algorithm*fix: set speculative.algorithm: EAGLE3"]
    )
