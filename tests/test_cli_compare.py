"""``python -m pytest_specdec compare``: what it says, and exits, of tests the two runs do not both measured: a test of
BASE that CURRENT does not hold, a test of CURRENT without baseline, a record of CURRENT without measurement.

The product's promise: exit 0 only when the run could have seen a regression of its tolerance. A CI that runs
``pytest ... || true`` and then ``compare`` read green on a run whose server died at startup (fresh-user trial).
"""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import pytest

from pytest_specdec.cli.main import main
from pytest_specdec.measure.results import ResultRecord, ResultStore, RunFile
from tests.helpers import IN_PROCESS_SHOWN_INI, rec, run_in_process

FP = {"workload": {"max_new_tokens": 64, "num_requests": 16, "concurrency": 1}, "prompt_hash": "abc"}
NOTE = "note: tests without baseline or not in CURRENT do not change the exit status; --fail-on-missing exits 1 on them"
#: Wide enough that an unchanged tok/s row is ok against one stored run (no undecided count in the summary line).
WIDE = ["-t", "output_tok_s:65%"]


def _record(test_id: str, *, measured: bool = True, outcome: str = "passed") -> ResultRecord:
    """A record of profile ``baseline`` or ``eagle3`` (the id's brackets) with steady tok/s; ``measured=False``: none,
    as a hand-edited or foreign run file could hold for a test that failed before it measured."""
    profile = test_id.rsplit("[", 1)[1].rstrip("]")
    tok_s = [100.0, 101.0, 99.0] if measured else []
    metrics = {"output_tok_s": 100.0} if measured else {}
    return ResultRecord(test_id, profile, metrics, {"output_tok_s": tok_s} if measured else {}, FP, outcome=outcome)


def _save(root: Path, run_id: str, *records: ResultRecord) -> Path:
    return ResultStore(root).save(RunFile(run_id=run_id, started=0.0, results=records))


def _compare(base: Path, current: Path, *args: str) -> int:
    return main(["compare", str(base), str(current), *WIDE, *args])


def test_a_test_of_base_that_current_does_not_hold_is_listed_and_fails_only_on_request(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """eagle3's server died at startup in CURRENT: its tests errored and left no record. compare named nothing of
    them and exited 0; now each is listed, with what CURRENT tells of its profile, and counted. The run file cannot
    tell an error from a deselection, so the status stays 0 unless --fail-on-missing."""
    base = _save(tmp_path, "base", _record("t.py::test_x[baseline]"), _record("t.py::test_x[eagle3]"),
                 _record("t.py::test_y[eagle3]"))  # fmt: skip
    current = _save(tmp_path, "cur", _record("t.py::test_x[baseline]"))
    assert _compare(base, current) == 0
    out = capsys.readouterr().out.splitlines()
    absent = [
        "in the baseline, not in CURRENT: t.py::test_x[eagle3] (errored, deselected or renamed? CURRENT has no test "
        "of profile eagle3: its server may not have started)",
        "in the baseline, not in CURRENT: t.py::test_y[eagle3] (errored, deselected or renamed? CURRENT has no test "
        "of profile eagle3: its server may not have started)",
        NOTE,
    ]
    assert [line for line in out if line.startswith(("in the baseline", "note: tests"))] == absent
    assert out[-1] == (
        "specdec compare: 1 test compared, 0 regressed, 0 undecided, 0 without baseline, 0 refused, 2 not in CURRENT"
    )
    assert _compare(base, current, "--fail-on-missing") == 1
    out = capsys.readouterr().out.splitlines()
    assert absent[:2] == [line for line in out if line.startswith("in the baseline")]
    assert not [line for line in out if line == NOTE]  # the option is given: no advice
    assert out[-1].endswith(", 0 refused, 2 not in CURRENT")


def test_a_test_absent_beside_others_of_its_profile_says_so(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """test_y of a profile CURRENT measured: deselected (-k), renamed, or errored before it measured."""
    base = _save(tmp_path, "base", _record("t.py::test_x[eagle3]"), _record("t.py::test_y[eagle3]"))
    current = _save(tmp_path, "cur", _record("t.py::test_x[eagle3]"))
    assert _compare(base, current) == 0
    out = capsys.readouterr().out
    assert (
        "in the baseline, not in CURRENT: t.py::test_y[eagle3] (errored, deselected or renamed? CURRENT has other "
        "tests of profile eagle3)\n"
    ) in out


def test_a_test_mapped_by_compare_profile_is_not_absent(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """--compare-profile eagle3 compares eagle3-shifted-layers' test with eagle3's: that one is not listed."""
    spec = {**FP, "speculative": {"algorithm": "EAGLE3"}}
    tok_s = {"output_tok_s": [100.0, 101.0, 99.0]}
    shifted = ResultRecord("t.py::test_x[eagle3-shifted-layers]", "eagle3-shifted-layers", {}, tok_s, spec)
    base_eagle3 = ResultRecord("t.py::test_x[eagle3]", "eagle3", {}, tok_s, spec)
    base = _save(tmp_path, "base", _record("t.py::test_x[baseline]"), base_eagle3)
    current = _save(tmp_path, "cur", shifted)
    assert _compare(base, current, "--compare-profile", "eagle3", "--fail-on-missing") == 1  # baseline: absent
    out = capsys.readouterr().out
    assert "in the baseline, not in CURRENT: t.py::test_x[baseline] (errored, deselected or renamed? " in out
    assert "not in CURRENT: t.py::test_x[eagle3]" not in out
    assert out.splitlines()[-1].endswith(", 0 refused, 1 not in CURRENT")


def test_a_test_without_baseline_fails_only_on_request(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """A new test: listed and counted, exit 0; --fail-on-missing: exit 1."""
    base = _save(tmp_path, "base", _record("t.py::test_x[eagle3]"))
    current = _save(tmp_path, "cur", _record("t.py::test_x[eagle3]"), _record("t.py::test_new[eagle3]"))
    assert _compare(base, current) == 0
    out = capsys.readouterr().out.splitlines()
    assert "no baseline for t.py::test_new[eagle3]" in out
    assert NOTE in out
    assert out[-1] == "specdec compare: 1 test compared, 0 regressed, 0 undecided, 1 without baseline, 0 refused"
    assert _compare(base, current, "--fail-on-missing") == 1
    assert capsys.readouterr().out.splitlines()[-1].endswith(", 1 without baseline, 0 refused")


def test_a_record_without_measurement_is_not_compared_and_fails(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A record of CURRENT with no figure (its test failed before it measured) was compared to rows of n/a and the
    command exited 0. It could not have shown a regression: said, counted, exit 1 without any option."""
    base = _save(tmp_path, "base", _record("t.py::test_x[baseline]"), _record("t.py::test_y[baseline]"))
    current = _save(tmp_path, "cur", _record("t.py::test_x[baseline]"),
                    _record("t.py::test_y[baseline]", measured=False, outcome="failed"))  # fmt: skip
    assert _compare(base, current) == 1
    out = capsys.readouterr().out.splitlines()
    assert (
        "not compared: t.py::test_y[baseline]: CURRENT recorded no measurement of it (outcome: failed); that run's "
        "pytest output says why"
    ) in out
    assert "== t.py::test_y[baseline] (profile baseline)" not in out  # no table of n/a rows
    assert not [line for line in out if "not in CURRENT:" in line]  # it is in CURRENT
    assert out[-1] == (
        "specdec compare: 1 test compared, 0 regressed, 0 undecided, 0 without baseline, 0 refused, 1 without "
        "measurement"
    )


def test_a_current_run_of_only_unmeasured_records_fails_not_nothing_compared(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Nothing compared because nothing was measured: exit 1 (the run failed), not 2 (unusable input). An
    interrupted record without measurement says so."""
    base = _save(tmp_path, "base", _record("t.py::test_x[eagle3]"))
    unmeasured = ResultRecord("t.py::test_x[eagle3]", "eagle3", {}, {}, FP, outcome="failed", interrupted=True)
    current = _save(tmp_path, "cur", unmeasured)
    assert _compare(base, current) == 1
    out = capsys.readouterr().out
    assert "not compared: t.py::test_x[eagle3]: CURRENT recorded no measurement of it (outcome: interrupted)" in out
    assert out.splitlines()[-1].startswith("specdec compare: 0 tests compared, ")


def test_a_failed_test_that_measured_is_compared(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """A test whose body failed after it measured (or whose later fixture errored) keeps its measurement: compared."""
    base = _save(tmp_path, "base", _record("t.py::test_x[eagle3]"))
    current = _save(tmp_path, "cur", _record("t.py::test_x[eagle3]", outcome="failed"))
    assert _compare(base, current) == 0
    out = capsys.readouterr().out.splitlines()
    assert "== t.py::test_x[eagle3] (profile eagle3)" in out
    assert out[-1] == "specdec compare: 1 test compared, 0 regressed, 0 undecided, 0 without baseline, 0 refused"


#: min_speedup as pytest stores a missed one (``ThresholdChecks.outcomes``): the verdict, then its line.
SPEEDUP_FAILED = ("FAILED: speedup vs baseline 0.98x < min 1.05x [geometric mean of 3 paired ratios, interleaved; "
                  "decided after 3 pairs, CI 0.95-1.01 (98.3%), 9.1 server-s]")


def _pytest_exit(run: RunFile) -> pytest.ExitCode:
    """The exit status pytest gave the session that stored ``run`` (no test errored nor interrupted): a test whose
    outcome is ``failed`` failed the session."""
    return pytest.ExitCode.TESTS_FAILED if any(r.outcome == "failed" for r in run.results) else pytest.ExitCode.OK


SPEEDUP_OPEN = ("undecided: speedup vs baseline 0.771x: undecided vs min 0.9x [geometric mean of 8 paired ratios, "
                "interleaved; undecided after 8 pairs, CI 0.604-0.985 (97.5%), 20.1 server-s]")


@pytest.mark.parametrize("speedup", ["passed", SPEEDUP_FAILED, SPEEDUP_OPEN])
def test_compare_exits_as_pytest_did_on_a_night_with_a_failed_min_speedup(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], speedup: str
) -> None:
    """A night pytest failed on ``min_speedup`` (its record's ``checks``) while its compare rows are unchanged:
    compare judged the rows alone and exited 0 (fresh-user trial, finding 4); now it says the stored failed check,
    its name and verdict, counts it and exits 1, as pytest did. A night whose checks passed exits 0 in both. One
    left undecided (pytest passed it with a warning) is said and counted, exit 0 (an adversarial trial read "0
    undecided" of a night whose min_speedup was open)."""
    fast = {"output_tok_s": [100.0, 101.0, 99.0], "accept_length": [2.6, 2.6, 2.6]}
    base = rec(**fast)
    night = dataclasses.replace(rec(**fast), checks={"min_accept_length": "passed", "min_speedup": speedup},
                                outcome="failed" if speedup == SPEEDUP_FAILED else "passed")  # fmt: skip
    stored = RunFile(run_id="cur", started=0.0, results=(night,))
    base_path = ResultStore(tmp_path).save(RunFile(run_id="base", started=0.0, results=(base,)))
    current = ResultStore(tmp_path).save(stored)
    code = _compare(base_path, current)
    assert code == _pytest_exit(stored) == (1 if speedup == SPEEDUP_FAILED else 0)
    out = capsys.readouterr().out.splitlines()
    said = [line for line in out if line.startswith("failed check")]
    if speedup == SPEEDUP_OPEN:
        assert said == []
        assert [line for line in out if line.startswith("undecided check")] == [
            f"undecided check in CURRENT: t.py::test_x[eagle3]: min_speedup: {SPEEDUP_OPEN}"
        ]
        assert out[-1] == ("specdec compare: 1 test compared, 0 regressed, 0 undecided, 0 without baseline, 0 refused, "
                           "1 undecided check")  # fmt: skip
    elif speedup == "passed":
        assert said == []
        assert out[-1] == "specdec compare: 1 test compared, 0 regressed, 0 undecided, 0 without baseline, 0 refused"
    else:
        assert said == [f"failed check in CURRENT: t.py::test_x[eagle3]: min_speedup: {SPEEDUP_FAILED}"]
        assert out[-1] == ("specdec compare: 1 test compared, 0 regressed, 0 undecided, 0 without baseline, 0 refused, "
                           "1 failed check")  # fmt: skip


def test_nothing_in_common_stays_unusable_input_with_fail_on_missing(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """No test in common: 2 (nothing compared), with or without --fail-on-missing."""
    base = _save(tmp_path, "base", _record("t.py::test_x[eagle3]"))
    current = _save(tmp_path, "cur", _record("t.py::test_y[eagle3]"))
    assert _compare(base, current) == 2
    assert _compare(base, current, "--fail-on-missing") == 2
    out = capsys.readouterr().out.splitlines()
    assert out[-1] == (
        "specdec compare: 0 tests compared, 0 regressed, 0 undecided, 1 without baseline, 0 refused, 1 not in CURRENT"
    )


def test_a_regression_beside_a_missing_test_exits_1(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """The regression decides the status; the absent test is still listed."""
    base = _save(tmp_path, "base", _record("t.py::test_x[eagle3]"), _record("t.py::test_y[eagle3]"))
    slow = ResultRecord("t.py::test_x[eagle3]", "eagle3", {"output_tok_s": 60.0}, {"output_tok_s": [60.0, 61.0, 59.0]},
                        FP)  # fmt: skip
    current = _save(tmp_path, "cur", slow)
    assert main(["compare", str(base), str(current), "-t", "output_tok_s:5%"]) == 1
    out = capsys.readouterr().out.splitlines()
    assert out[-1] == (
        "specdec compare: 1 test compared, 1 regressed, 0 undecided, 0 without baseline, 0 refused, 1 not in CURRENT"
    )


FAKE = Path(__file__).resolve().parent / "fakesglang"
PROFILES = """
profiles:
  baseline:
    server: sglang
    model_path: {target}
    env: {env}
    startup_timeout_s: 60
    workload: {{max_new_tokens: 15, num_requests: 2, warmup_requests: 0, repeats: 2}}
  eagle3:
    extends: baseline
    speculative: {{algorithm: EAGLE3, draft_model_path: {draft}, num_steps: 3, eagle_topk: 1, num_draft_tokens: 4{aux}}}
"""
#: Aux id -1: the fake SGLang replays the recorded scheduler crash at the first forward, before the server is ready.
CRASH = ", aux_hidden_state_layer_ids: [-1, 1, 3], allow_embedding_capture: true"


@pytest.mark.slow
def test_a_server_that_died_at_startup_leaves_its_tests_out_of_the_run_file_and_compare_lists_them(
    pytester: pytest.Pytester, capsys: pytest.CaptureFixture[str]
) -> None:
    """What a run file holds, as the plugin writes it: a record per test that measured (passed, or failed after it
    measured), and a test whose server died at startup in its list of errored tests, not as a record. compare
    exited 0 saying nothing of eagle3; it says its test errored and exits 1, with or without --fail-on-missing."""
    from pytest_specdec.engines.rules import BUNDLED_DRAFT_EAGLE3, BUNDLED_TARGET

    env = json.dumps({"PYTHONPATH": str(FAKE), "SPECDEC_FAKE_SGLANG": "{}"})
    pytester.makepyfile(test_died="def test_run(specdec_run):\n    pass\n")
    # As tests/test_verdicts_fast.py: SpecdecWarnings shown, and the in-process plugin's rewrite warning ignored.
    pytester.makeini(IN_PROCESS_SHOWN_INI)
    results = pytester.path / ".specdec" / "results"
    runs = []
    for aux in ("", CRASH):
        profiles = PROFILES.format(target=BUNDLED_TARGET, draft=BUNDLED_DRAFT_EAGLE3, env=env, aux=aux)
        pytester.makefile(".yaml", specdec=profiles)
        result = run_in_process(pytester, "--server-profile=baseline,eagle3")
        runs.append(result)
    runs[0].assert_outcomes(passed=2)
    runs[1].assert_outcomes(passed=1, errors=1)
    stored = [json.loads(p.read_text()) for p in sorted(results.glob("*.json"))]
    assert [[r["test_id"] for r in run["results"]] for run in stored] == [
        ["test_died.py::test_run[baseline]", "test_died.py::test_run[eagle3]"],
        ["test_died.py::test_run[baseline]"],
    ]
    assert [[e["test_id"] for e in run["errored"]] for run in stored] == [[], ["test_died.py::test_run[eagle3]"]]
    base, current = (run["run_id"] for run in stored)
    # Timing rows at a width no load reaches: the status says what is compared, not how busy the runner was.
    wide = ["-t", "output_tok_s:500%", "-t", "ttft_ms:500%", "-t", "itl_ms:500%", "-t", "tpot_ms:500%"]
    capsys.readouterr()
    assert main(["compare", base, current, "--results-dir", str(results), *wide]) == 1
    out = capsys.readouterr().out.splitlines()
    errored = [line for line in out if line.startswith("errored in CURRENT before it measured: ")]
    assert len(errored) == 1, out
    assert errored[0].startswith("errored in CURRENT before it measured: test_died.py::test_run[eagle3]: server "
                                 "'eagle3' ")  # fmt: skip
    assert not [line for line in out if line.startswith("in the baseline, not in CURRENT")]
    assert out[-1].startswith("specdec compare: 1 test compared, 0 regressed, ")
    assert out[-1].endswith(", 0 without baseline, 0 refused, 1 errored before measuring")
    assert main(["compare", base, current, "--results-dir", str(results), "--fail-on-missing", *wide]) == 1
