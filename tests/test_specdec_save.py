"""``--specdec-save NAME`` that names nothing fails the session (``SpecdecSession._save_failure``).

A fresh-user trial's nightly stored its baseline with ``--specdec-save``; a session that saved nothing (no specdec
test ran, all deselected) exited 0 and the name was silently not created, found out the next night. A run stored but
not clean (refused) said so in yellow and exited 0 when its tests passed (an undecided verdict under ``warn``). Both
now end in a red ``FAIL specdec save: ...`` line right above pytest's last, naming NAME, why and the fix, and exit 1
(a status pytest already made non-zero is kept).
"""

from __future__ import annotations

import pytest

from tests.helpers import IN_PROCESS_SHOWN_INI, fake_sglang_profiles, run_in_process


def _project(pytester: pytest.Pytester, workload: str = "repeats: 1", thresholds: str = "{}") -> None:
    """One profile, ``eagle3``, on the fake SGLang (2 requests a repeat), and one test that measures it."""
    pytester.makefile(".yaml", specdec=fake_sglang_profiles({}, thresholds=thresholds, workload=workload))
    pytester.makepyfile(test_night="def test_run(specdec_run):\n    pass\n")
    pytester.makeini(IN_PROCESS_SHOWN_INI)


def _names(pytester: pytest.Pytester) -> list[str]:
    names = pytester.path / ".specdec" / "results" / "names"
    return sorted(p.name for p in names.iterdir()) if names.is_dir() else []


def test_save_without_a_profile_saves_nothing_and_fails(pytester: pytest.Pytester) -> None:
    """No ``--server-profile``: the specdec test is skipped, nothing is stored, and the session fails naming NAME,
    why and the fix (it exited 0 before)."""
    _project(pytester)
    result = run_in_process(pytester, "--specdec-save=night-1")
    result.assert_outcomes(skipped=1)
    assert result.ret == pytest.ExitCode.TESTS_FAILED
    result.stdout.fnmatch_lines([
        "FAIL specdec save: --specdec-save=night-1: nothing saved: no --server-profile given, so every specdec test "
        "was skipped, so no run was stored; no run is named night-1. Fix: add --server-profile=NAME (e.g. pytest -m "
        "specdec --server-profile=eagle3 --specdec-save=night-1), or name a stored run: python -m pytest_specdec save "
        "RUN night-1",
        "*= 1 skipped in *",
    ])  # fmt: skip
    assert _names(pytester) == []


def test_save_with_every_test_deselected_says_so_and_keeps_pytests_status(pytester: pytest.Pytester) -> None:
    """A profile selected but every test deselected (``-k``): nothing launched, nothing stored; pytest's own exit
    status (5, no tests ran) is kept, and the line says which profile had no test run."""
    _project(pytester)
    result = run_in_process(pytester, "--server-profile=eagle3", "--specdec-save=night-1", "-k", "no_such_test")
    assert result.ret == pytest.ExitCode.NO_TESTS_COLLECTED
    result.stdout.fnmatch_lines([
        "FAIL specdec save: --specdec-save=night-1: nothing saved: none of the tests of profile(s) eagle3 ran "
        "(deselected by -m/-k, skipped, or none collected), so no run was stored; no run is named night-1. Fix: "
        "select tests that use specdec_run (e.g. -m specdec), or name a stored run: python -m pytest_specdec save RUN "
        "night-1",
    ])  # fmt: skip
    assert _names(pytester) == []


def test_save_of_a_run_that_is_not_clean_fails_a_passing_session(pytester: pytest.Pytester) -> None:
    """One repeat and no more: ``min_tok_s`` cannot be decided, the test passes undecided (``warn``), and the run may
    not become a baseline. The refusal was a yellow note with exit 0; now it is the red line and exit 1, said once."""
    _project(pytester, workload="repeats: 1, max_repeats: 1", thresholds="{min_tok_s: 1}")
    result = run_in_process(pytester, "--server-profile=eagle3", "--specdec-save=night-1")
    result.assert_outcomes(passed=1)  # warnings not counted: a busy machine adds its own (LoadWarning)
    result.stdout.fnmatch_lines(["*SpecdecWarning: output_tok_s * tok/s: undecided vs min 1 *"])
    assert result.ret == pytest.ExitCode.TESTS_FAILED
    result.stdout.fnmatch_lines([
        "FAIL specdec save: not saved as night-1: 1 test(s) not clean: test_run[[]eagle3[]] (undecided: min_tok_s); "
        "no run is named night-1. Name it anyway: python -m pytest_specdec save * night-1 --force",
    ])  # fmt: skip
    assert "specdec: not saved as" not in result.stdout.str()
    assert _names(pytester) == []


def test_save_of_a_clean_run_names_it_and_passes(pytester: pytest.Pytester) -> None:
    _project(pytester)
    result = run_in_process(pytester, "--server-profile=eagle3", "--specdec-save=night-1")
    assert result.ret == pytest.ExitCode.OK, result.stdout.str()
    assert "FAIL specdec save" not in result.stdout.str()
    assert _names(pytester) == ["night-1"]
