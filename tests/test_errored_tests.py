"""Specdec tests that errored or failed before they measured, kept in the run file (``RunFile.errored``).

A run file held records only for the tests that measured: a night whose server died at startup left no trace of
its tests, and a session in which no test measured wrote no run file at all, so ``compare night-1 latest`` compared
an older run and could exit 0 (even with ``--fail-on-missing``) on a night that could not have seen a regression.
The session now lists those tests at run level (not as records: readers that iterate records are unchanged), writes
the run file when none measured, and ``compare`` exits 1 on them; ``merge`` carries the list.
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import json
import os
import queue
import re
import signal
import threading
import time
from pathlib import Path
from types import SimpleNamespace

import pytest

from pytest_specdec.cli.main import main
from pytest_specdec.cli.save import save_command
from pytest_specdec.core.errors import CompareError
from pytest_specdec.measure.results import (
    SCHEMA_VERSION,
    ErroredTest,
    ResultRecord,
    ResultStore,
    RunFile,
    read_run_file,
)
from pytest_specdec.report.markdown import markdown_summary
from pytest_specdec.report.merge import Shard, merge_runs, merged_markdown
from pytest_specdec.run import schedule
from tests.helpers import IN_PROCESS_SHOWN_INI, fake_sglang_profiles, record, run_in_process, sigint_default

FAKE = Path(__file__).resolve().parent / "fakesglang"
#: The fake SGLang's startup death: log a line no cause matches, exit 3 before serving.
DIES = {"exit_at_startup": {"code": 3, "line": "Loading weights took 1.2 s"}}
TEST = "test_fake_errored.py::test_run[eagle3]"
DEATH = "server 'eagle3' exited with code 3 before it was ready after "


def _profiles(script: dict[str, object]) -> str:
    """One profile, ``eagle3`` (no speculation needed to measure), on the fake SGLang with ``script``; 2 requests."""
    return fake_sglang_profiles(script)


def _night(pytester: pytest.Pytester, script: dict[str, object], *args: str) -> pytest.RunResult:
    """One pytest session of ``test_run`` on ``eagle3`` (in process: the server is a subprocess either way; a Ctrl-C
    ends the session, not the test running it)."""
    pytester.makefile(".yaml", specdec=_profiles(script))
    return run_in_process(pytester, "--server-profile=eagle3", *args, ctrl_c_ends_run=True)


@pytest.fixture
def project(pytester: pytest.Pytester) -> pytest.Pytester:
    pytester.makepyfile(test_fake_errored="def test_run(specdec_run):\n    pass\n")
    pytester.makeini(IN_PROCESS_SHOWN_INI)
    return pytester


def _stored(pytester: pytest.Pytester) -> list[dict[str, object]]:
    """Every run file of the project, oldest first, as JSON."""
    return [json.loads(p.read_text()) for p in ResultStore(pytester.path / ".specdec/results").list()]


def test_a_night_whose_server_died_at_startup_is_stored_and_compare_exits_1_on_it(
    project: pytest.Pytester, capsys: pytest.CaptureFixture[str]
) -> None:
    """Night 1 measures and is saved; night 2's server dies at startup, so no test measures. Night 2 still writes
    its run file, listing the test (``latest`` is night 2, not night 1), is not saved under a name, and ``compare
    night-1 latest`` exits 1 naming it. Before, night 2 wrote nothing and the command compared night 1 with
    itself."""
    first = _night(project, {}, "--specdec-save=night-1")
    assert first.ret == pytest.ExitCode.OK, first.stdout.str()
    assert "errored before" not in first.stdout.str()
    (normal,) = _stored(project)
    # A normal run's file: the keys it had, and an empty list of errored tests.
    assert list(normal) == ["schema", "run_id", "started", "started_utc", "machine", "metric_definitions",
                            "results", "errored", "interrupted"]  # fmt: skip
    assert normal["schema"] == SCHEMA_VERSION == 1
    assert normal["errored"] == [] and normal["interrupted"] is False
    assert [r["test_id"] for r in normal["results"]] == [TEST]  # type: ignore[union-attr]

    second = _night(project, DIES, "--specdec-save=night-2", "--specdec-markdown=night-2.md")
    assert second.ret == pytest.ExitCode.TESTS_FAILED, second.stdout.str()
    second.assert_outcomes(errors=1)
    second.stdout.fnmatch_lines(
        [
            "specdec: 1 test errored before it measured (listed in the result file; compare exits 1 on it): "
            "test_run[[]eagle3[]]",
            "*- specdec results: *.specdec/results/*.json -*",
            "FAIL specdec save: not saved as night-2: 1 test(s) not clean: test_run[[]eagle3[]] (errored before it "
            "measured); no run is named night-2. Name it anyway: python -m pytest_specdec save * night-2 --force",
        ]
    )
    # The markdown summary is written though nothing measured, and names the test with its cause.
    md = (project.path / "night-2.md").read_text().splitlines()
    assert md[:3] == ["## specdec summary: 1 test not judged (errored before it measured)", "", "No test measured."]
    (item,) = [line for line in md if line.startswith("- ")]
    assert item.startswith(f"- `test_run[eagle3]` (profile `eagle3`, setup): `{DEATH}"), item
    stored = _stored(project)
    assert len(stored) == 2
    night2 = stored[-1]
    assert night2["results"] == []
    (entry,) = night2["errored"]  # type: ignore[misc]
    assert entry["test_id"] == TEST and entry["profile"] == "eagle3" and entry["when"] == "setup"
    assert entry["error"].startswith(DEATH), entry

    capsys.readouterr()
    results = str(project.path / ".specdec/results")
    assert main(["compare", "night-1", "latest", "--results-dir", results]) == 1
    out = capsys.readouterr().out.splitlines()
    assert out[0] == f"specdec compare: baseline {normal['run_id']} -> current {night2['run_id']}"
    errored = [line for line in out if line.startswith("errored in CURRENT")]
    assert len(errored) == 1 and errored[0].startswith(f"errored in CURRENT before it measured: {TEST}: {DEATH}")
    assert not [line for line in out if line.startswith("in the baseline, not in CURRENT")]  # said once, as errored
    assert out[-1] == ("specdec compare: 0 tests compared, 0 regressed, 0 undecided, 0 without baseline, 0 refused, "
                       "1 errored before measuring")  # fmt: skip


@pytest.mark.slow
def test_a_night_interrupted_before_it_measured_is_stored_as_interrupted_and_compare_exits_1_on_it(
    project: pytest.Pytester, capsys: pytest.CaptureFixture[str]
) -> None:
    """Ctrl-C (a test raising KeyboardInterrupt) before any test measured: the run file is written, says
    ``interrupted: true``, is not saved under a name, the markdown summary says so, and ``compare night-1 latest``
    exits 1 naming it. Before, nothing was written: ``latest`` was night 1, compared with itself, exit 0."""
    first = _night(project, {}, "--specdec-save=night-1", "test_fake_errored.py")
    assert first.ret == pytest.ExitCode.OK, first.stdout.str()
    project.makepyfile(test_a_stop="def test_stop(specdec_profile):\n    raise KeyboardInterrupt\n")
    second = _night(project, {}, "--specdec-save=night-2", "--specdec-markdown=night-2.md")
    assert second.ret == pytest.ExitCode.INTERRUPTED, second.stdout.str()
    second.stdout.fnmatch_lines(
        [
            "specdec: the session was interrupted: the result file says so (interrupted: true) and compare exits 1 on "
            "it; rerun it to judge the run",
            "*- specdec results: *.specdec/results/*.json -*",
            "FAIL specdec save: not saved as night-2: the session was interrupted before any test measured; no run is "
            "named night-2. Name it anyway: python -m pytest_specdec save * night-2 --force",
        ]
    )
    night1, night2 = _stored(project)
    assert night1["interrupted"] is False
    assert night2["interrupted"] is True and night2["results"] == [] and night2["errored"] == []
    md = (project.path / "night-2.md").read_text().splitlines()
    assert md[:5] == ["## specdec summary: interrupted", "", "No test measured.", "", "### Interrupted"]
    capsys.readouterr()
    assert main(["compare", "night-1", "latest", "--results-dir", str(project.path / ".specdec/results")]) == 1
    out = capsys.readouterr().out.splitlines()
    assert out[0] == f"specdec compare: baseline {night1['run_id']} -> current {night2['run_id']}"
    said = f"interrupted: CURRENT ({night2['run_id']}) ended early (Ctrl-C): the tests it never ran are not in it"
    assert f"{said}, so it could not show their regressions; rerun it" in out


def test_a_measured_test_beside_an_errored_one_is_compared_and_the_errored_one_fails_the_command(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A run in which one profile measured and another's server died: the measured test is compared as before, the
    errored one is said and counted, and the status is 1 without ``--fail-on-missing``."""
    fp = {"workload": {"max_new_tokens": 64, "num_requests": 16, "concurrency": 1}, "prompt_hash": "abc"}
    steady = {"output_tok_s": [100.0, 101.0, 99.0]}
    measured = ResultRecord("t.py::test_x[baseline]", "baseline", {"output_tok_s": 100.0}, steady, fp,
                            outcome="passed")  # fmt: skip
    other = ResultRecord("t.py::test_x[eagle3]", "eagle3", {"output_tok_s": 100.0}, steady, fp, outcome="passed")
    store = ResultStore(tmp_path)
    base = store.save(RunFile("base", 0.0, results=(measured, other)))
    died = ErroredTest("t.py::test_x[eagle3]", "eagle3", "setup", "server 'eagle3' exited with code 3 before ...")
    current = store.save(RunFile("cur", 1.0, results=(measured,), errored=(died,)))
    assert main(["compare", str(base), str(current), "-t", "output_tok_s:65%"]) == 1
    out = capsys.readouterr().out.splitlines()
    assert "== t.py::test_x[baseline] (profile baseline)" in out
    assert ("errored in CURRENT before it measured: t.py::test_x[eagle3]: server 'eagle3' exited with code 3 "
            "before ...") in out  # fmt: skip
    assert not [line for line in out if line.startswith("in the baseline, not in CURRENT")]
    assert out[-1] == ("specdec compare: 1 test compared, 0 regressed, 0 undecided, 0 without baseline, 0 refused, "
                       "1 errored before measuring")  # fmt: skip


def test_compare_exits_1_on_an_interrupted_current_naming_it(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A run interrupted after its first test measured: that test compares clean, yet the run is said interrupted,
    counted and the status is 1 (before: 0, the tests it never ran were only listed as not in CURRENT)."""
    fp = {"workload": {"max_new_tokens": 64, "num_requests": 16, "concurrency": 1}, "prompt_hash": "abc"}
    steady = {"output_tok_s": [100.0, 101.0, 99.0]}
    first = ResultRecord("t.py::test_x[baseline]", "baseline", {"output_tok_s": 100.0}, steady, fp, outcome="passed")
    store = ResultStore(tmp_path)
    base = store.save(RunFile("base", 0.0, results=(first,)))
    current = store.save(RunFile("cur", 1.0, results=(dataclasses.replace(first, interrupted=True),), interrupted=True))
    assert main(["compare", str(base), str(current), "-t", "output_tok_s:65%"]) == 1
    out = capsys.readouterr().out.splitlines()
    assert "== t.py::test_x[baseline] (profile baseline)" in out
    assert ("interrupted: CURRENT (cur) ended early (Ctrl-C): the tests it never ran are not in it, so it could not "
            "show their regressions; rerun it") in out  # fmt: skip
    assert out[-1] == ("specdec compare: 1 test compared, 0 regressed, 0 undecided, 0 without baseline, 0 refused, "
                       "CURRENT interrupted")  # fmt: skip
    # The same run not interrupted exits 0: the flag alone made it 1.
    clean = store.save(RunFile("clean", 2.0, results=(first,)))
    assert main(["compare", str(base), str(clean), "-t", "output_tok_s:65%"]) == 0


def test_the_markdown_summary_of_a_night_whose_eagle3_server_never_started_names_it_and_its_cause() -> None:
    """The baseline measured, eagle3 died at startup: the heading says a test was not judged, and a section names it
    with its profile, phase and error line (before: the baseline's table alone, as on a clean night)."""
    died = ErroredTest("t.py::test_run[eagle3]", "eagle3", "setup", "server 'eagle3' exited with code 3 before it "
                       "was ready after 0.4 s; `python -m sglang.launch_server ...`")  # fmt: skip
    lines = markdown_summary([record("baseline", 88.8, None)], results_path="r.json", errored=[died])
    assert lines == [
        "## specdec summary: 1 test not judged (errored before it measured)",
        "",
        "| test | profile | tok/s | accept len | accept rate | TTFT p50 ms | ITL p50 ms | result |",
        "|---|---|---:|---:|---:|---:|---:|---|",
        "| `test_run[baseline]` | baseline | 88.8 | n/a | n/a | 40.0 | 11.26 | ✅ passed |",
        "",
        "### Errored before measuring",
        "",
        "The run could not show a regression of these tests and `compare` exits 1 on them; the first line of each "
        "one's error:",
        "",
        "- `test_run[eagle3]` (profile `eagle3`, setup): `` server 'eagle3' exited with code 3 before it was ready "
        "after 0.4 s; `python -m sglang.launch_server ...` ``",
        "",
        "Results: `r.json`",
    ]


def test_the_markdown_summary_of_an_interrupted_run_with_nothing_measured_says_so() -> None:
    crashed = ErroredTest("t.py::test_run[eagle3]", None, "crash", "worker 'gw0' crashed while running 't.py::x'")
    lines = markdown_summary([], errored=[crashed, dataclasses.replace(crashed, test_id="t.py::y", error="")],
                             interrupted=True)  # fmt: skip
    assert lines == [
        "## specdec summary: interrupted; 2 tests not judged (errored before they measured)",
        "",
        "No test measured.",
        "",
        "### Interrupted",
        "",
        "The session ended early (Ctrl-C, or an xdist worker interrupted): tests it selected may be in no table here, "
        "so the run cannot be judged whole and `compare` exits 1 on it. Rerun it.",
        "",
        "### Errored before measuring",
        "",
        "The run could not show a regression of these tests and `compare` exits 1 on them; the first line of each "
        "one's error:",
        "",
        "- `test_run[eagle3]` (crash): `worker 'gw0' crashed while running 't.py::x'`",
        "- `y` (crash): no error line recorded",
    ]


def _record(test_id: str) -> ResultRecord:
    return ResultRecord(test_id, "eagle3", {"output_tok_s": 100.0}, {"output_tok_s": [100.0]}, {}, outcome="passed")


def test_a_run_file_without_errored_reads_as_none_and_one_with_it_round_trips(tmp_path: Path) -> None:
    """Files written before the key was (no ``errored``) read as before; the key written reads back the same."""
    record = _record("t.py::a[eagle3]").to_dict()
    old = {"schema": 1, "run_id": "r1", "started": 1.0, "machine": {}, "results": [record]}
    path = tmp_path / "r1.json"
    path.write_text(json.dumps(old))
    run = read_run_file(path)
    assert run.errored == () and [r.test_id for r in run.results] == ["t.py::a[eagle3]"]
    entry = ErroredTest("t.py::b[eagle3]", "eagle3", "setup", "server 'eagle3' exited with code 3")
    saved = ResultStore(tmp_path).save(RunFile("r2", 2.0, errored=(entry, ErroredTest("t.py::c", None, "call", ""))))
    assert read_run_file(saved).errored == (entry, ErroredTest("t.py::c", None, "call", ""))
    assert json.loads(saved.read_text())["schema"] == 1
    assert read_run_file(saved).interrupted is False and read_run_file(path).interrupted is False
    stopped = ResultStore(tmp_path).save(RunFile("r3", 3.0, interrupted=True))
    assert json.loads(stopped.read_text())["interrupted"] is True and read_run_file(stopped).interrupted is True


@pytest.mark.parametrize(
    ("errored", "said"),
    [
        ({"a": 1}, 'errored: expected a list of the tests that errored before they measured, got {"a": 1}'),
        ([{"profile": "eagle3"}], 'errored[0]: expected {"test_id": "...", ...}, got {"profile": "eagle3"}'),
    ],
)
def test_an_errored_list_no_run_writes_is_refused_naming_the_file_and_key(
    tmp_path: Path, errored: object, said: str
) -> None:
    path = tmp_path / "r1.json"
    path.write_text(json.dumps({"run_id": "r1", "results": [], "errored": errored}))
    with pytest.raises(CompareError) as info:
        read_run_file(path)
    assert str(info.value) == (f"{path}: {said}; the file was edited or damaged: store the run again (rerun its "
                               "tests) or remove the file")  # fmt: skip


def test_merge_keeps_errored_tests_but_those_another_shard_measured(tmp_path: Path) -> None:
    """A test measured in one shard and errored in another (a retried shard) is not errored in the merged run."""

    def died(test: str) -> ErroredTest:
        return ErroredTest(f"t.py::{test}[eagle3]", "eagle3", "setup", "server 'eagle3' exited with code 3")

    first = RunFile("20261201T020000Z-aaaaaa", 0.0, results=(_record("t.py::a[eagle3]"),), errored=(died("b"),))
    second = RunFile("20261201T020100Z-bbbbbb", 60.0, errored=(died("a"), died("c")))
    merged = merge_runs([Shard(tmp_path / "a.json", first), Shard(tmp_path / "b.json", second)])
    assert [r.test_id for r in merged.results] == ["t.py::a[eagle3]"]
    assert [e.test_id for e in merged.errored] == ["t.py::b[eagle3]", "t.py::c[eagle3]"]
    assert merged.interrupted is False
    stopped = merge_runs(
        [Shard(tmp_path / "a.json", first), Shard(tmp_path / "b.json", RunFile("r", 9.0, interrupted=True))]
    )
    assert stopped.interrupted is True
    md = merged_markdown(merged, [Shard(tmp_path / "a.json", first)], tmp_path / "m.json")
    assert md[0] == "## specdec summary (1 shards merged): 2 tests not judged (errored before they measured)"
    assert "- `c[eagle3]` (profile `eagle3`, setup): `server 'eagle3' exited with code 3`" in md


def test_merge_command_writes_the_errored_tests_into_the_merged_run(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("GITHUB_STEP_SUMMARY", raising=False)
    commit = {"commit": {"id": "1a2b3c", "dirty": False}}
    died = ErroredTest("t.py::b[eagle3]", "eagle3", "setup", "server 'eagle3' exited with code 3")
    ResultStore(tmp_path / "s1").save(RunFile("20261201T020000Z-aaaaaa", 0.0, commit, (_record("t.py::a[eagle3]"),)))
    ResultStore(tmp_path / "s2").save(RunFile("20261201T020100Z-bbbbbb", 60.0, commit, errored=(died,)))
    store = tmp_path / "store"
    assert main(["merge", str(tmp_path / "s1"), str(tmp_path / "s2"), "--results-dir", str(store)]) == 0
    assert "errored before it measured: t.py::b[eagle3]: server 'eagle3' exited with code 3" in capsys.readouterr().out
    (merged,) = ResultStore(store).list()
    assert read_run_file(merged).errored == (died,)


def test_save_refuses_a_run_with_an_errored_test_unless_forced_and_one_with_no_measured_test_always(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    died = ErroredTest("t.py::b[eagle3]", "eagle3", "setup", "server 'eagle3' exited with code 3")
    ResultStore(tmp_path).save(RunFile("r1", 0.0, results=(_record("t.py::a[eagle3]"),), errored=(died,)))
    args = argparse.Namespace(run="r1", name="night-1", force=False, results_dir=str(tmp_path))
    assert save_command(args) == 1
    assert capsys.readouterr().out == (
        "save: refused: 1 test(s) of run r1 not clean: t.py::b[eagle3] (errored before it measured); a baseline "
        "completed, passed and every verdict passed (--force names it anyway)\n"
    )
    assert ResultStore(tmp_path).named("night-1") is None
    args.force = True
    assert save_command(args) == 0
    assert "not clean, named with --force: t.py::b[eagle3] (errored before it measured)" in capsys.readouterr().out
    # A run with no record is never a baseline, --force or not: a name for it would compare nothing.
    ResultStore(tmp_path).save(RunFile("r2", 1.0, interrupted=True))
    ResultStore(tmp_path).save(RunFile("r3", 2.0, errored=(died,)))
    for run, why in (("r2", "the session was interrupted before any test measured"),
                     ("r3", "every test errored before it measured")):  # fmt: skip
        for force in (False, True):
            args = argparse.Namespace(run=run, name="night-2", force=force, results_dir=str(tmp_path))
            assert save_command(args) == 1
            assert capsys.readouterr().out == (
                f"save: refused: run {run} has no measured test ({why}): a baseline named for it would compare "
                "nothing, with or without --force; name a run that measured\n"
            )
    assert ResultStore(tmp_path).named("night-2") is None


@pytest.mark.slow
def test_under_xdist_the_controller_stores_the_errored_tests_of_its_workers(project: pytest.Pytester) -> None:
    """The errored test is marked on its report where the report is made (a worker, which has the item); the
    controller writes the run file from the reports it receives."""
    profiles = _profiles({}) + '  broken:\n    extends: eagle3\n    extra_args: ["--no-such-flag"]\n'
    project.makefile(".yaml", specdec=profiles)
    # The controller in process (its workers are subprocesses anyway): no third interpreter and plugin import.
    result = run_in_process(project, "-n", "2", "--server-profile=eagle3,broken")
    assert result.ret == pytest.ExitCode.TESTS_FAILED, result.stdout.str()
    result.assert_outcomes(passed=1, errors=1)
    (run,) = _stored(project)
    assert [r["test_id"] for r in run["results"]] == [TEST]  # type: ignore[union-attr]
    (entry,) = run["errored"]  # type: ignore[misc]
    assert entry["test_id"] == "test_fake_errored.py::test_run[broken]" and entry["profile"] == "broken"
    assert entry["when"] == "setup"
    assert entry["error"].startswith("server 'broken' exited with code 2 before it was ready (cause: bad flag)")


@pytest.mark.slow
def test_under_xdist_a_test_whose_worker_crashed_is_listed_as_errored(project: pytest.Pytester) -> None:
    """A worker that dies while running a specdec test (``os._exit``, as a segfault would) sends no report of it;
    pytest-xdist's controller makes one (``worker 'gw0' crashed while running '...'``), which the run file lists
    with the profile, ``crash`` and that line. Before, the run file held the other test's record alone: a shorter
    clean night."""
    project.makefile(".yaml", specdec=_profiles({}))
    project.makepyfile(test_zcrash="import os\n\ndef test_crash(specdec_run):\n    os._exit(1)\n")
    plugins = ["-p", "no:cacheprovider", "-p", "no:benchmark", "-p", "no:randomly"]
    # No restart: no replacement worker is started after the crash, which keeps this test short.
    result = project.runpytest_subprocess("-n", "2", "--max-worker-restart=0", *plugins, "--server-profile=eagle3",
                                          timeout=180)  # fmt: skip
    assert result.ret == pytest.ExitCode.TESTS_FAILED, result.stdout.str()
    result.assert_outcomes(passed=1, failed=1)
    result.stdout.fnmatch_lines(
        ["specdec: 1 test errored before it measured (listed in the result file; compare exits 1 on it): "
         "test_crash[[]eagle3[]]"]
    )  # fmt: skip
    (run,) = _stored(project)
    assert [r["test_id"] for r in run["results"]] == [TEST]  # type: ignore[union-attr]
    crashed = "test_zcrash.py::test_crash[eagle3]"
    (entry,) = run["errored"]  # type: ignore[misc]
    assert entry == {"test_id": crashed, "profile": "eagle3", "when": "crash", "error": entry["error"]}
    assert re.fullmatch(rf"worker 'gw\d' crashed while running '{re.escape(crashed)}'", entry["error"]), entry
    assert run["interrupted"] is False


@pytest.mark.parametrize(
    ("nodeid", "unit", "profile"),
    [
        ("t.py::test_x[eagle3-wrong-layers]", "specdec", "eagle3-wrong-layers"),  # the longest, not eagle3
        ("t.py::test_x[eagle3-64]", "specdec", "eagle3"),
        ("t.py::test_x[other]", "specdec:baseline", "baseline"),  # a non-exclusive profile's unit names it
        ("t.py::test_x[other]", "specdec", None),
        ("t.py::test_x", "specdec", None),
    ],
)
def test_the_profile_of_a_crashed_test_is_read_from_its_unit_or_node_id(
    nodeid: str, unit: str, profile: str | None
) -> None:
    from pytest_specdec.run.session import _profile_of

    assert _profile_of(nodeid, unit, ("baseline", "eagle3", "eagle3-wrong-layers")) == profile


def test_a_death_shared_by_two_tests_is_said_once_in_full_with_how_much_of_the_run_had_run(
    pytester: pytest.Pytester, capsys: pytest.CaptureFixture[str]
) -> None:
    """A fresh-user trial: with 2 tests sharing 1 measurement, the whole death message (launch command included)
    appeared twice in the terminal, the markdown, the run file's ``errored`` and ``compare``, which cut its fix to
    "fix: run its launch command by hand to see why it exits: ..." without the command; and a death in repeat 2
    said "before any of N measured requests succeeded" though repeat 1 had run. The first test shows the message
    whole, with the run's count; the second, the same verdict (errored in setup) with a one-line reference."""
    pytester.makepyfile(test_fake_errored="def test_run(specdec_run):\n    pass\n\n\ndef test_latency(specdec_run):\n"
                        "    pass\n")  # fmt: skip
    # As the project fixture: in process, the package is already imported (by the outer session) when pytest
    # marks it for rewriting; that warning must not become the inner session's internal error (seen in CI).
    pytester.makeini(IN_PROCESS_SHOWN_INI)
    # The fake SGLang's scheduler crashes on the 4th measured request: repeat 1's 2 succeed, then 1 of repeat 2's.
    profiles = _profiles({"crash_after_requests": 3}).replace("repeats: 1", "repeats: 2")
    pytester.makefile(".yaml", specdec=profiles)
    result = run_in_process(pytester, "--server-profile=eagle3", "--specdec-markdown=night.md")
    assert result.ret == pytest.ExitCode.TESTS_FAILED, result.stdout.str()
    result.assert_outcomes(errors=2)
    first_id, second_id = "test_fake_errored.py::test_run[eagle3]", "test_fake_errored.py::test_latency[eagle3]"
    errors = {r.nodeid: str(r.longrepr) for r in result.reprec.getreports("pytest_runtest_logreport") if r.failed}
    assert list(errors) == [first_id, second_id]
    death = errors[first_id]
    how_far = (
        ") was killed by signal 9 (SIGKILL) while running, after 3 measured requests to this server succeeded "
        "(1 repeat done), during repeat 2 (1 of its 2 succeeded) (cause: scheduler exception): "
    )
    assert death.startswith("server 'eagle3' (pid ") and how_far in death, death
    command = death.partition("fix: run its launch command by hand to see why it exits: ")[2]
    assert command.startswith(f"PYTHONPATH={FAKE} ") and " -m sglang.launch_server " in command, death
    short = f"same failure as {first_id} (the tests of profile 'eagle3' share one measurement): see its message above"
    assert errors[second_id] == short
    # In the first test's error section only (the short summary after it cuts its lines to the terminal's width,
    # except under CI=true, where pytest shows them whole: counted before it).
    sections = result.stdout.str().partition("short test summary info")[0]
    assert sections.count(command) == 1, sections
    (stored,) = _stored(pytester)
    assert [(e["test_id"], e["when"], e["error"]) for e in stored["errored"]] == [  # type: ignore[union-attr]
        (first_id, "setup", death),
        (second_id, "setup", short),
    ]
    md = (pytester.path / "night.md").read_text()
    assert md.count(command) == 1 and short in md, md
    capsys.readouterr()
    results = str(pytester.path / ".specdec/results")
    run_id = str(stored["run_id"])
    assert main(["compare", run_id, run_id, "--results-dir", results]) == 1
    out = capsys.readouterr().out
    assert f"errored in CURRENT before it measured: {first_id}: {death}\n" in out
    assert f"errored in CURRENT before it measured: {second_id}: {short}\n" in out


#: Writes ``reported`` once the controller (not a worker: no PYTEST_XDIST_WORKER) logged a test that passed.
_REPORTED_CONFTEST = """
import os
from pathlib import Path

def pytest_runtest_logreport(report):
    if report.when == "call" and report.passed and "PYTEST_XDIST_WORKER" not in os.environ:
        Path("reported").touch()
"""


@pytest.mark.slow
def test_under_xdist_a_sigint_to_the_controller_alone_stores_an_interrupted_run_and_stops_its_server(
    project: pytest.Pytester, capsys: pytest.CaptureFixture[str]
) -> None:
    """A fresh-user trial: ``pytest -n 2`` and SIGINT to the controller's pid alone (a CI cancel, ``timeout -s
    INT``) ended with exit 1, the run file not interrupted (or none when nothing had measured), no interrupted line,
    and the shared server still running at session end (its worker ran on), so ``compare night-1 latest`` exited
    0. The controller now interrupts its workers and takes their last reports: exit 2, the measured test kept in a
    run file that says ``interrupted: true``, the markdown says so, the server its worker stopped is named and gone,
    and the compare exits 1."""
    import subprocess
    import sys

    import psutil

    first = _night(project, {}, "--specdec-save=night-1", "test_fake_errored.py")
    assert first.ret == pytest.ExitCode.OK, first.stdout.str()
    # After test_run measured, test_wait (same profile and worker) holds the server until the SIGINT.
    project.makepyfile(test_zwait="import time\n\ndef test_wait(specdec_run):\n    time.sleep(120)\n")
    project.makeconftest(_REPORTED_CONFTEST)
    servers = project.path / ".specdec" / "servers"
    # Python keeps SIGINT ignored when its parent ignored it (a run started with '&' by a non-interactive shell): the
    # controller restores the handler; a session of its own keeps the signal off any other process group.
    restore = "import signal, sys, pytest; signal.signal(signal.SIGINT, signal.default_int_handler); "
    proc = subprocess.Popen(
        [sys.executable, "-c", restore + "sys.exit(pytest.main(sys.argv[1:]))", "-n", "2", "-p", "no:cacheprovider",
         "-p", "no:benchmark", "-p", "no:randomly", "--server-profile=eagle3", "--specdec-markdown=night-2.md"],
        cwd=project.path, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, start_new_session=True,
    )  # fmt: skip
    try:
        deadline = time.monotonic() + 120
        record = None
        while record is None and time.monotonic() < deadline and proc.poll() is None:
            if (project.path / "reported").exists():
                found = [json.loads(p.read_text()) for p in servers.glob("*.json")] if servers.is_dir() else []
                record = next((r for r in found if r.get("profile") == "eagle3"), None)
            time.sleep(0.05)
        assert record is not None, proc.communicate(timeout=60)[0] if proc.poll() is not None else "no report"
        proc.send_signal(signal.SIGINT)  # the controller's pid only
        out, _ = proc.communicate(timeout=150)
    finally:
        if proc.poll() is None:
            _kill_tree(proc.pid)
            proc.wait()
    assert proc.returncode == pytest.ExitCode.INTERRUPTED, out
    assert "was still running at session end" not in out, out
    assert re.search(rf"^specdec: interrupted; stopped the servers this run launched: eagle3 \(pid {record['pid']}\)$",
                     out, re.M), out  # fmt: skip
    assert ("specdec: the session was interrupted: the result file says so (interrupted: true) and compare exits 1 "
            "on it; rerun it to judge the run") in out  # fmt: skip
    night1, night2 = _stored(project)
    assert night2["interrupted"] is True and night2["errored"] == []
    assert [r["test_id"] for r in night2["results"]] == [TEST]  # type: ignore[union-attr]
    md = (project.path / "night-2.md").read_text().splitlines()
    assert md[0] == "## specdec summary: interrupted" and "### Interrupted" in md
    assert not psutil.pid_exists(record["pid"]) or psutil.Process(record["pid"]).status() == psutil.STATUS_ZOMBIE
    assert list(servers.glob("*.json")) == []
    capsys.readouterr()
    assert main(["compare", "night-1", "latest", "--results-dir", str(project.path / ".specdec/results")]) == 1
    out = capsys.readouterr().out.splitlines()
    assert out[0] == f"specdec compare: baseline {night1['run_id']} -> current {night2['run_id']}"
    assert out[-1].endswith(", CURRENT interrupted"), out[-1]


def _kill_tree(pid: int) -> None:
    """Kill a process and its descendants (a test that failed before its run ended leaves nothing behind)."""
    import psutil

    with contextlib.suppress(psutil.Error):
        parent = psutil.Process(pid)
        for proc in [*parent.children(recursive=True), parent]:
            with contextlib.suppress(psutil.Error):
                proc.kill()


class _Node:
    """An xdist ``WorkerController`` as ``interrupt_workers`` reads it: its id, and the ``Popen`` of its process
    (execnet's popen gateway's ``_io.popen``)."""

    def __init__(self, name: str, popen: object) -> None:
        self.gateway = SimpleNamespace(id=name, _io=SimpleNamespace(popen=popen))


class _DSession:
    """What ``schedule.interrupt_workers`` uses of xdist's ``DSession``: the event queue, the workers not finished,
    the hooks, and the ``worker_<event>`` handlers (recorded here)."""

    def __init__(self, nodes: list[_Node]) -> None:
        self.queue: queue.Queue[tuple[str, dict[str, object]]] = queue.Queue()
        self._active_nodes = set(nodes)
        self.handled: list[tuple[str, object]] = []
        self.down: list[tuple[str, object]] = []

        def nodedown(node: _Node, error: object) -> None:
            self.down.append((node.gateway.id, error))

        self.config = SimpleNamespace(hook=SimpleNamespace(pytest_testnodedown=nodedown))

    def worker_testreport(self, node: _Node, rep: object) -> None:
        self.handled.append(("testreport", rep))


def test_the_controller_interrupts_the_workers_a_ctrl_c_did_not_reach_and_takes_their_last_reports(
    tmp_path: Path,
) -> None:
    """gw0 wrote its interrupted file (a Ctrl-C reached it): no second SIGINT, which would cut its teardown short;
    gw1 did not: it is sent one after the grace. Reports are handed to xdist's handler until both finished;
    scheduling events are dropped."""
    import subprocess

    reached, running = (subprocess.Popen(["sleep", "30"], preexec_fn=sigint_default) for _ in range(2))
    try:
        gw0 = _Node("gw0", reached)
        gw1 = _Node("gw1", running)
        dsession = _DSession([gw0, gw1])
        schedule.mark_interrupted(tmp_path, "gw0")
        dsession.queue.put(("runtest_protocol_complete", {"node": gw1, "item_index": 1, "duration": 0.1}))
        dsession.queue.put(("testreport", {"node": gw1, "rep": "report of test_run"}))
        dsession.queue.put(("workerfinished", {"node": gw0}))
        # gw1 finishes when the SIGINT ended it (a real worker sends its last reports, then workerfinished).
        threading.Thread(
            target=lambda: (running.wait(), dsession.queue.put(("workerfinished", {"node": gw1}))), daemon=True
        ).start()
        assert schedule.interrupt_workers(dsession, tmp_path, grace_s=0.2, stop_s=20) == ["gw1"]
        assert running.wait(timeout=5) == -signal.SIGINT
        assert reached.poll() is None  # never signalled
        assert dsession.handled == [("testreport", "report of test_run")]
        assert sorted(dsession.down) == [("gw0", None), ("gw1", None)]
        assert dsession._active_nodes == set()
    finally:
        for proc in (reached, running):
            proc.kill()
            proc.wait()


def test_a_worker_whose_process_is_gone_is_not_signalled_and_the_wait_ends_at_its_budget(tmp_path: Path) -> None:
    import subprocess

    gone = subprocess.Popen(["true"])
    gone.wait()
    node = _Node("gw0", gone)
    dsession = _DSession([node])
    assert schedule.interrupt_workers(dsession, tmp_path, grace_s=0.0, stop_s=0.3) == []
    assert dsession._active_nodes == {node}  # never finished: xdist's teardown ends it
    # An xdist without the attributes read here: nothing is done.
    assert schedule.interrupt_workers(SimpleNamespace(), tmp_path) == []


def test_a_worker_sigint_writes_its_interrupted_file_then_raises_keyboard_interrupt(tmp_path: Path) -> None:
    """The file is written in the SIGINT handler, before pytest reports the interrupt: a trial's worker formatted
    the traceback for over a second first, and the controller's SIGINT then cut that worker's teardown short."""
    # As in a worker: Python's own handler (this process may have been started with SIGINT ignored).
    previous = signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        restore = schedule.mark_interrupts(tmp_path, "gw3")
        assert restore is not None
        try:
            with pytest.raises(KeyboardInterrupt):
                os.kill(os.getpid(), signal.SIGINT)
                time.sleep(5)  # the handler runs at once; the sleep keeps the signal inside the block
        finally:
            restore()
        assert (tmp_path / "specdec-interrupted-gw3").is_file()
        assert signal.getsignal(signal.SIGINT) is signal.default_int_handler
        # A handler of someone else's is left alone.
        signal.signal(signal.SIGINT, signal.SIG_IGN)
        assert schedule.mark_interrupts(tmp_path, "gw4") is None
        assert signal.getsignal(signal.SIGINT) is signal.SIG_IGN
    finally:
        signal.signal(signal.SIGINT, previous)
