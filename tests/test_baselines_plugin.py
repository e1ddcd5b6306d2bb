"""Baselines from pytest, on the fake SGLang (``tests/fakesglang``: a server start well under a second): only a clean
run becomes a baseline, ``--specdec-save NAME`` names one, a test without a baseline fails under
``--specdec-compare``, a run that compared nothing is not green, ``--specdec-compare-profile`` maps tests of its
profile's kind and refuses a kind no selected profile has.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

# Imported before any in-process run (pytester drops the modules an inner run imported; numpy.fft cannot be loaded
# twice in one process).
import scipy.stats  # noqa: F401

from pytest_specdec.engines.rules import BUNDLED_DRAFT_EAGLE3, BUNDLED_TARGET
from tests.helpers import IN_PROCESS_SHOWN_INI, run_in_process

FAKE = Path(__file__).resolve().parent / "fakesglang"
ENV = json.dumps({"PYTHONPATH": str(FAKE), "SPECDEC_FAKE_SGLANG": "{}"})
SPEC = (
    f"{{algorithm: EAGLE3, draft_model_path: {BUNDLED_DRAFT_EAGLE3}, num_steps: 3, eagle_topk: 1, num_draft_tokens: 4}}"
)
#: Wide tolerances: the fake's timings on a loaded runner must not decide these tests, the baselines must.
TOLERANCES = '["output_tok_s:90%", "ttft_ms:900%", "itl_ms:900%", "tpot_ms:900%"]'


def _profiles(workload: str = "{repeats: 2, max_repeats: 2}", thresholds: str = "{}") -> str:
    return f"""
profiles:
  baseline:
    server: sglang
    model_path: {BUNDLED_TARGET}
    env: {ENV}
    startup_timeout_s: 60
    tolerances: {TOLERANCES}
    thresholds: {thresholds}
    workload: {{max_new_tokens: 15, num_requests: 2, warmup_requests: 0, {workload[1:-1]}}}
  eagle3:
    extends: baseline
    speculative: {SPEC}
"""


RUN = "def test_run(specdec_run):\n    pass\n"


def _project(pytester: pytest.Pytester, tests: str = RUN, **profiles: str) -> None:
    pytester.makefile(".yaml", specdec=_profiles(**profiles))
    pytester.makepyfile(test_base=tests)
    pytester.makeini(IN_PROCESS_SHOWN_INI)


def _run_id(result: pytest.RunResult) -> str:
    found = re.search(r"specdec results: \S+/(\S+)\.json", result.stdout.str())
    assert found is not None, result.stdout.str()
    return found.group(1)


@pytest.mark.slow
def test_latest_never_takes_a_failed_undecided_or_interrupted_run(pytester: pytest.Pytester) -> None:
    _project(pytester)
    clean = run_in_process(pytester, "--server-profile=baseline", "--specdec-save=night-1")
    clean.assert_outcomes(passed=1)
    clean.stdout.fnmatch_lines(["specdec: saved as night-1: */names/night-1 names this run"])
    _project(pytester, "def test_run(specdec_run):\n    assert False, 'broken'\n")
    failed = run_in_process(pytester, "--server-profile=baseline", "--specdec-save=night-2")
    failed.assert_outcomes(failed=1)
    failed.stdout.fnmatch_lines(["FAIL specdec save: not saved as night-2: 1 test(s) not clean: test_run[[]baseline[]] "
                                 "(failed); no run is named night-2. Name it anyway: *"])  # fmt: skip
    # One repeat and no more: a min_tok_s floor cannot be decided (no spread), so the test passes undecided.
    _project(pytester, workload="{repeats: 1, max_repeats: 1}", thresholds="{min_tok_s: 1}")
    undecided = run_in_process(pytester, "--server-profile=baseline")
    undecided.assert_outcomes(passed=1)
    _project(pytester, RUN + "\n\ndef test_stop(specdec_run):\n    raise KeyboardInterrupt\n")
    interrupted = run_in_process(pytester, "--server-profile=baseline", ctrl_c_ends_run=True)
    assert interrupted.ret == pytest.ExitCode.INTERRUPTED
    stored = json.loads((pytester.path / ".specdec" / "results" / f"{_run_id(interrupted)}.json").read_text())
    assert [(r["outcome"], r["interrupted"]) for r in stored["results"]] == [("passed", True)]
    compared = run_in_process(pytester, "--server-profile=baseline", "--specdec-compare", "-k", "test_run")
    compared.assert_outcomes(passed=1)
    compared.stdout.fnmatch_lines(
        [
            f"specdec compare: 1 test(s) compared with stored run {_run_id(clean)}: the newest stored run in which the "
            "test was clean (completed, passed, every verdict passed); newer runs passed over: "
            f"{_run_id(interrupted)} (interrupted), {_run_id(undecided)} (undecided: min_tok_s), {_run_id(failed)} "
            "(failed)"
        ]
    )


@pytest.mark.slow
def test_a_test_without_baseline_fails_and_a_run_that_compared_nothing_is_not_green(pytester: pytest.Pytester) -> None:
    _project(pytester)
    run_in_process(pytester, "--server-profile=baseline").assert_outcomes(passed=1)
    new = run_in_process(pytester, "--server-profile=eagle3", "--specdec-compare")
    new.assert_outcomes(failed=1)
    new.stdout.fnmatch_lines(
        [
            "no baseline for test_base.py::test_run[[]eagle3[]] in *: no stored run has it; not compared: a new "
            "test? --specdec-compare-missing=warn passes it for its first night",
        ]
    )
    warned = run_in_process(pytester, "--server-profile=eagle3", "--specdec-compare", "--specdec-compare-missing=warn")
    # Warnings are not counted: a busy machine adds its own ("machine busy: ...").
    warned.assert_outcomes(passed=1)
    assert warned.ret == pytest.ExitCode.TESTS_FAILED
    warned.stdout.fnmatch_lines(["*SpecdecWarning: no baseline for test_base.py::test_run[[]eagle3[]] in *; not "
                                 "compared (--specdec-compare-missing=warn)"])  # fmt: skip
    # Said: the policy passes a test without a baseline, not a run that compared none (an adversarial trial read
    # "1 passed" and exit 1 as a contradiction).
    warned.stdout.fnmatch_lines(["FAIL specdec compare: --specdec-compare compared none of the 1 test(s) with a "
                                 "stored run (each one's line says why); a gate that compared nothing is not green "
                                 "(--specdec-compare-missing=warn passes a test without a baseline, not a run that "
                                 "compared none). *"])  # fmt: skip
    # A renamed profile (the same definition under a new name) is said to be one, with the option that compares it
    # (an adversarial trial: it started afresh under --specdec-compare-missing=warn with only the warning above).
    pytester.makefile(".yaml", specdec=_profiles() + "  baseline-renamed:\n    extends: baseline\n")
    renamed = run_in_process(pytester, "--server-profile=baseline-renamed", "--specdec-compare")
    renamed.assert_outcomes(failed=1)
    renamed.stdout.fnmatch_lines(["no baseline for test_base.py::test_run[[]baseline-renamed[]] in *: no stored "
                                  "run has it; test_base.py::test_run[[]baseline[]] has one (run *, the same server "
                                  "and workload): a renamed profile? --specdec-compare-profile=baseline compares with "
                                  "it; not compared: a new test? *"])  # fmt: skip
    # Passed by the policy beside a compared test, it is counted above pytest's final line, not only warned (an
    # adversarial trial read "passed" in the table and a last line that counted nothing).
    beside = run_in_process(pytester, "--server-profile=baseline,baseline-renamed", "--specdec-compare",
                            "--specdec-compare-missing=warn")  # fmt: skip
    beside.assert_outcomes(passed=2)
    beside.stdout.fnmatch_lines(["specdec: 1 test not compared with a stored run, passed by "
                                 "--specdec-compare-missing=warn: test_run[[]baseline-renamed[]]; its warning above "
                                 "says why (a new test's first night, or a renamed profile)"])  # fmt: skip


@pytest.mark.slow
def test_a_test_whose_stored_nights_were_never_clean_is_not_called_new(pytester: pytest.Pytester) -> None:
    # A fresh-user trial: eagle3's min_speedup never decided, so no night was clean, and the failure advised
    # --specdec-compare-missing=warn "for its first night", which would have switched its compare off for good.
    _project(pytester, "def test_run(specdec_run):\n    assert False, 'broken'\n")
    run_in_process(pytester, "--server-profile=baseline").assert_outcomes(failed=1)
    _project(pytester)
    night = run_in_process(pytester, "--server-profile=baseline", "--specdec-compare")
    night.assert_outcomes(failed=1)
    night.stdout.fnmatch_lines(["*: 1 stored run(s) have it, none clean: * (failed); not compared: store a night whose "
                                "verdicts decide (raise workload.max_repeats, or measure on a quieter runner), or name "
                                "one of these runs after reading why it was not clean: python -m pytest_specdec save "
                                "RUN NAME --force, then --specdec-compare=NAME"])  # fmt: skip
    assert "a new test?" not in night.stdout.str()


def test_compare_options_without_a_compare_are_a_usage_error(pytester: pytest.Pytester) -> None:
    # A fresh-user trial measured 60 s with --specdec-compare-profile (of a profile that does not exist) and no
    # --specdec-compare, and read "2 passed": the option had done nothing.
    _project(pytester)
    for args in (["--specdec-compare-profile=eagle4"], ["--specdec-compare-force"]):
        refused = run_in_process(pytester, "--server-profile=eagle3", *args)
        assert refused.ret == pytest.ExitCode.USAGE_ERROR
        refused.stderr.fnmatch_lines([f"ERROR: {args[0]} only shapes a compare and none was asked for: add "
                                      "--specdec-compare (each test's newest clean stored run, or its reference) or "
                                      "--specdec-compare=NAME"])  # fmt: skip


@pytest.mark.slow
def test_compare_profile_maps_profiles_of_its_kind_and_refuses_a_kind_none_has(pytester: pytest.Pytester) -> None:
    _project(pytester)
    run_in_process(pytester, "--server-profile=eagle3").assert_outcomes(passed=1)
    # baseline runs without speculation; so does no selected profile here but eagle3's kind: refused at start.
    refused = run_in_process(
        pytester, "--server-profile=eagle3", "--specdec-compare", "--specdec-compare-profile=baseline"
    )
    assert refused.ret == pytest.ExitCode.USAGE_ERROR
    refused.stderr.fnmatch_lines(["ERROR: --specdec-compare-profile=baseline: profile baseline runs without "
                                  "speculation, and none of the selected profiles (eagle3) does, so it would map no "
                                  "test; name a profile of their kind"])  # fmt: skip
    run_in_process(pytester, "--server-profile=baseline").assert_outcomes(passed=1)
    pytester.makefile(".yaml", specdec=_profiles() + "  baseline-slow:\n    extends: baseline\n")
    mapped = run_in_process(
        pytester, "--server-profile=baseline-slow", "--specdec-compare", "--specdec-compare-profile=baseline"
    )
    mapped.assert_outcomes(passed=1)
    mapped.stdout.fnmatch_lines(["specdec compare: 1 test(s) compared with stored run *"])


@pytest.mark.slow
def test_a_slow_night_that_ended_undecided_is_not_the_next_baseline(pytester: pytest.Pytester) -> None:
    """The sequence this rule comes from: a night 10x slower whose compare ended undecided (one repeat a side: no
    spread to decide on) passed; the next night compares with the clean night before it, not with the slow one
    (against which an unchanged night would read +900% improved)."""
    script = json.dumps({"env_slowdown": {"NCCL_PROTO": 10}})
    fast = json.dumps({"PYTHONPATH": str(FAKE), "SPECDEC_FAKE_SGLANG": script, "NCCL_PROTO": "LL"})
    slow = json.dumps({"PYTHONPATH": str(FAKE), "SPECDEC_FAKE_SGLANG": script})
    one = "{repeats: 1, max_repeats: 1}"
    _project(pytester, workload=one)
    pytester.makefile(".yaml", specdec=_profiles(workload=one).replace(ENV, fast))
    clean = run_in_process(pytester, "--server-profile=baseline")
    clean.assert_outcomes(passed=1)
    pytester.makefile(".yaml", specdec=_profiles(workload=one).replace(ENV, slow))
    undecided = run_in_process(pytester, "--server-profile=baseline", "--specdec-compare")
    undecided.assert_outcomes(passed=1)  # warnings not counted: a busy machine adds its own
    undecided.stdout.fnmatch_lines(["specdec: 1 test undecided (1 profile: baseline on compare) at the budget: *"])
    pytester.makefile(".yaml", specdec=_profiles(workload=one).replace(ENV, fast))
    nightly = run_in_process(pytester, "--server-profile=baseline", "--specdec-compare")
    nightly.assert_outcomes(passed=1)
    nightly.stdout.fnmatch_lines([f"specdec compare: 1 test(s) compared with stored run {_run_id(clean)}: *; newer "
                                  f"runs passed over: {_run_id(undecided)} (undecided: compare)"])  # fmt: skip


#: Two test functions of one profile: both read its one measurement (pytest lists their warnings apart).
TWO = RUN + "\n\ndef test_again(specdec_run):\n    pass\n"


def _slow_night(pytester: pytest.Pytester, *args: str) -> tuple[pytest.RunResult, pytest.RunResult]:
    """A clean night, then a night 10x slower (NCCL_PROTO lost) whose compare stays undecided at one repeat a side
    (no spread to decide on): the two runs of ``TWO``, the second with ``--specdec-compare`` and ``args``."""
    script = json.dumps({"env_slowdown": {"NCCL_PROTO": 10}})
    fast = json.dumps({"PYTHONPATH": str(FAKE), "SPECDEC_FAKE_SGLANG": script, "NCCL_PROTO": "LL"})
    slow = json.dumps({"PYTHONPATH": str(FAKE), "SPECDEC_FAKE_SGLANG": script})
    one = "{repeats: 1, max_repeats: 1}"
    _project(pytester, TWO, workload=one)
    pytester.makefile(".yaml", specdec=_profiles(workload=one).replace(ENV, fast))
    clean = run_in_process(pytester, "--server-profile=baseline")
    clean.assert_outcomes(passed=2)
    pytester.makefile(".yaml", specdec=_profiles(workload=one).replace(ENV, slow))
    return clean, run_in_process(pytester, "--server-profile=baseline", "--specdec-compare", *args)


@pytest.mark.slow
def test_an_undecided_compare_warns_once_per_profile_a_head_and_a_line_per_open_row(
    pytester: pytest.Pytester,
) -> None:
    # A fresh-user trial: the warning was one ~2.5 kB line (every open row's reason joined by "; "), and it was
    # repeated under each test of the profile, all of which read the same measurement and share its verdict.
    _, undecided = _slow_night(pytester)
    undecided.assert_outcomes(passed=2)
    out = undecided.stdout.str()
    assert out.count("compare against run ") == 1, out
    undecided.stdout.fnmatch_lines(
        [
            "test_base.py::test_run[[]baseline[]]",
            "  test_base.py:1: SpecdecWarning: profile baseline: compare against run * undecided after 1 repeat "
            "(* server-s), * rows open: not failed (--specdec-undecided=warn)",
            "    output_tok_s x0.*, no interval (1 repeat) holds the tolerance 90%: more repeats would not decide *",
            "    ttft_ms_mean x*, no interval (1 repeat) holds the tolerance 900%*",
        ]
    )
    assert "test_base.py::test_again[baseline]\n" not in out.partition("warnings summary")[2], out
    # No line of the undecided warning is a run of rows: each open row is a line of its own. (Its block only: on a busy
    # runner a LoadWarning of its own, one long line, joins the summary; CI saw it at 334 characters.)
    warnings = out.partition("warnings summary")[2].partition("-- Docs:")[0]
    undecided_block = warnings.partition("SpecdecWarning: ")[2].partition("\n\n")[0]
    assert len(undecided_block.splitlines()) >= 3, warnings
    assert max(map(len, undecided_block.splitlines())) < 300, warnings


@pytest.mark.slow
def test_pytest_and_the_compare_command_count_undecided_tests_alike(
    pytester: pytest.Pytester, capsys: pytest.CaptureFixture[str]
) -> None:
    # A fresh-user trial: pytest said "1 verdict undecided" (per profile and check) and the command "2 undecided"
    # (per test) of the same two tests of one profile. Both count tests now, and say of which profiles.
    from pytest_specdec.cli.main import main

    clean, undecided = _slow_night(pytester, "--specdec-markdown=summary.md")
    undecided.assert_outcomes(passed=2)
    undecided.stdout.fnmatch_lines(["specdec: 2 tests undecided (1 profile: baseline on compare) at the budget: not "
                                    "failed (--specdec-undecided=warn); each profile's warning above says what would "
                                    "decide it"])  # fmt: skip
    # The markdown summary counts them too, and gives each open row as the warning did (a fresh-user trial's step
    # summary said "passed" and nothing else), read from the stored record: the same lines reach `merge --markdown`.
    warning = undecided.stdout.str().partition(": compare against run ")[2].partition("\n\n")[0].splitlines()[1:]
    rows = [line.strip() for line in warning if " holds the tolerance " in line]  # not the source line under it
    md = (pytester.path / "summary.md").read_text(encoding="utf-8").splitlines()
    assert md[0] == "## specdec summary: 2 tests undecided (could not tell at their budget)"
    assert [line.endswith("| ⚠️ undecided |") for line in md[4:6]] == [True, True], md
    # The terminal's table says so too (it read "passed": a fresh-user trial).
    table = undecided.stdout.str().partition("specdec summary")[2]
    assert len(re.findall(r"^test_(?:run|again)\[baseline\] .* undecided$", table, re.M)) == 2, table
    said = [f"`compare: {row}`" for row in rows]
    items = [f"- `test_run[baseline]` (profile `baseline`): {said[0]}"] if len(said) == 1 else [
        "- `test_run[baseline]` (profile `baseline`):", *(f"  - {item}" for item in said)]  # fmt: skip
    items.append("- `test_again[baseline]` (profile `baseline`): the same verdicts as `test_run[baseline]`")
    start = md.index("### Undecided") + 4
    assert rows and md[start : md.index("", start)] == items, (rows, md)
    results = pytester.path / ".specdec" / "results"
    capsys.readouterr()
    assert main(["compare", _run_id(clean), _run_id(undecided), "--results-dir", str(results)]) == 0
    # How many open rows are suspected (estimate beyond the tolerance) depends on the fake server's timings.
    last = capsys.readouterr().out.splitlines()[-1]
    assert re.fullmatch(
        r"specdec compare: 2 tests compared, 0 regressed, 2 tests undecided \(1 profile: baseline; "
        r"[02] suspected: estimate beyond the tolerance\), 0 without baseline, 0 refused",
        last,
    ), last


def test_an_unknown_baseline_name_lists_the_saved_names(pytester: pytest.Pytester) -> None:
    # A fresh-user trial: `--specdec-compare=night-1` where night-2 and release-1 were saved. Nothing is launched.
    from pytest_specdec.measure.results import ResultRecord, ResultStore, RunFile

    _project(pytester)
    store = ResultStore(pytester.path / ".specdec" / "results")
    record = ResultRecord("t.py::t[baseline]", "baseline", {}, {}, {})
    store.save(RunFile("20260101T000000Z-aaaaaa", 0.0, results=(record,)))
    for name in ("release-1", "night-2"):
        store.save_name(name, "20260101T000000Z-aaaaaa")
    result = run_in_process(pytester, "--server-profile=baseline", "--specdec-compare=night-1")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines([
        "ERROR: --specdec-compare=night-1: no run 'night-1' (did you mean 'night-2'?): not a file and no run id in * "
        "(1 run stored; saved names: night-2, release-1)"
    ])  # fmt: skip


@pytest.mark.slow
def test_a_test_path_taken_as_the_baseline_name_gets_the_fix(pytester: pytest.Pytester) -> None:
    # `--specdec-compare test_base.py`: the option's value is optional (as --benchmark-compare's), so argparse gives
    # it the path. Nothing is launched; the error says how to write it.
    _project(pytester)
    result = run_in_process(pytester, "--server-profile=baseline", "--specdec-compare", "test_base.py")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(["ERROR: --specdec-compare=test_base.py: no run 'test_base.py': *; a test path? "
                                 "write --specdec-compare=latest test_base.py (or put the path first)"])  # fmt: skip


@pytest.mark.slow
def test_a_night_failed_by_the_undecided_policy_alone_is_marked_so_for_the_history(pytester: pytest.Pytester) -> None:
    # --specdec-undecided=fail fails an open compare; the stored record says the policy alone failed it, so a night
    # whose open rows' estimates are all inside their tolerances may still join later compares' history
    # (ResultRecord.history_problem), and one with a suspected row may not. Never a baseline.
    from pytest_specdec.measure.results import read_run_file

    _, failed = _slow_night(pytester, "--specdec-undecided=fail")
    failed.assert_outcomes(failed=2)
    stored = read_run_file(pytester.path / ".specdec" / "results" / f"{_run_id(failed)}.json")
    for record in stored.results:
        compare = record.cost["verdicts"]["compare"]
        assert record.cost["failed_by"] == "undecided" and compare["verdict"] == "undecided"
        # The noise it was judged with (none calibrated): the compare command reads it, not a later noise file.
        assert compare["noise"] == {"sigma_rel": {}, "run_to_run_rel": {}, "runs": 0}
        # Whether a row is suspected (its estimate beyond the tolerance) depends on the fake server's timings (10x
        # slower at the profile's own 90% tok/s tolerance is on the limit; a latency row may be past its own).
        problem = "undecided: compare" if compare["suspected"] else ""
        assert (record.baseline_problem(), record.history_problem()) == ("failed", problem)
