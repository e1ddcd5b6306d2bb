"""``python -m pytest_specdec compare BASE CURRENT`` on a night pytest compared across profiles
(``--specdec-compare-profile eagle3`` or ``eagle3-x=eagle3``): without ``--compare-profile`` the command compares
each such test with the test pytest compared it with, so it prints pytest's rows and exit (issue 43: a night pytest
failed read "1 without baseline", exit 0). An explicit ``--compare-profile`` still wins.

Runs stored by hand as pytest stores them (the compare verdict in each compared record's cost); runs pytest itself
stored on the reference server: tests/test_baselines_e2e.py (the night-1 test's slowed compare)."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest

from pytest_specdec.cli.main import main
from pytest_specdec.measure.results import ResultRecord, ResultStore, RunFile

#: Temperature 0: an accept-length drop is exact, REGRESSED as pytest decides it without measuring more.
FP = {"workload": {"max_new_tokens": 64, "num_requests": 16, "concurrency": 1, "temperature": 0.0},
      "prompt_hash": "abc"}  # fmt: skip


def _record(profile: str, accept: float, *, verdict: str | None = None, cost: dict[str, Any] | None = None,
            speculative: bool = True) -> ResultRecord:  # fmt: skip
    """``t.py::test_x[PROFILE]`` with steady tok/s and accept length ``accept``; ``verdict``: pytest compared it and
    stored that compare verdict in its cost (``verdict.compare_item``), the test's outcome with it."""
    repeats = {"output_tok_s": [100.0, 101.0, 99.0], "accept_length": [accept] * 3}
    metrics = {"output_tok_s": 100.0, "accept_length": accept}
    fp = {**FP, "speculative": {"algorithm": "EAGLE3"} if speculative else None}
    compare = {"verdict": verdict, "repeats": 3, "server_s": 3.0, **(cost or {})}
    return ResultRecord(f"t.py::test_x[{profile}]", profile, metrics, repeats, fp,
                        outcome="failed" if verdict == "failed" else "passed",
                        cost={"verdicts": {"compare": compare}} if verdict else {})  # fmt: skip


def _save(root: Path, run_id: str, *records: ResultRecord) -> str:
    return str(ResultStore(root).save(RunFile(run_id=run_id, started=0.0, results=records)))


def _tables(out: str) -> list[str]:
    """The output less its note lines: the tables, the lines under them and the summary line."""
    return [line for line in out.splitlines() if not line.startswith("note: ")]


def _night(root: Path, **compare: Any) -> tuple[str, str]:
    """BASE: baseline and eagle3 (accept length 2.63); CURRENT: baseline and eagle3-x (2.49), which pytest compared
    with eagle3's test under --specdec-compare-profile and failed (``compare``: more of its stored verdict)."""
    base = _save(root, "night-1", _record("baseline", 1.0, speculative=False), _record("eagle3", 2.63))
    current = _save(root, "night-2", _record("baseline", 1.0, verdict="passed", speculative=False),
                    _record("eagle3-x", 2.49, verdict="failed", cost=compare))  # fmt: skip
    return base, current


@pytest.mark.parametrize("mapping", ["eagle3", "eagle3-x=eagle3"])
def test_compare_without_the_option_compares_as_pytest_did_under_a_mapped_profile(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], mapping: str
) -> None:
    """pytest failed eagle3-x's test against eagle3's (the mapping either spelling of the option gives): the command
    without the option prints the rows and exit that ``--compare-profile MAPPING`` prints, one note line saying which
    test it took and why. Before: no baseline for it, exit 0."""
    base, current = _night(tmp_path)
    assert main(["compare", base, current, "--compare-profile", mapping]) == 1
    explicit = capsys.readouterr().out
    assert main(["compare", base, current]) == 1
    out = capsys.readouterr().out
    assert _tables(out) == _tables(explicit)
    assert "== t.py::test_x[eagle3-x] (profile eagle3-x, against test_x[eagle3])" in out
    assert re.search(r"accept_length .*REGRESSED", out), out
    assert "no baseline" not in out
    assert out.splitlines()[-1].startswith("specdec compare: 2 tests compared, 1 regressed")
    notes = [line for line in out.splitlines() if line.startswith("note: ")]
    assert notes == [
        "note: t.py::test_x[eagle3-x]: compared with test_x[eagle3], the test pytest compared it with "
        "(--specdec-compare-profile; CURRENT's record has pytest's compare verdict and BASE no result under its own "
        "id); --compare-profile overrides"
    ]


def test_compare_maps_only_a_test_pytest_compared_and_an_explicit_option_wins(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A test pytest did not compare (no compare verdict stored: run without --specdec-compare) has no baseline, as
    before (nothing compared: exit 2; the --compare-profile hint); ``--compare-profile eagle3-x=baseline`` compares
    it with what it names, not with what pytest took."""
    base = _save(tmp_path, "night-1", _record("baseline", 1.0, speculative=False), _record("eagle3", 2.63))
    alone = _save(tmp_path, "alone", _record("eagle3-x", 2.49))
    assert main(["compare", base, alone]) == 2
    out = capsys.readouterr().out
    assert "no baseline for t.py::test_x[eagle3-x]\n" in out
    assert "add --compare-profile <name> (e.g. --compare-profile eagle3" in out
    _, current = _night(tmp_path)
    main(["compare", base, current, "--compare-profile", "eagle3-x=baseline"])
    out = capsys.readouterr().out
    assert "== t.py::test_x[eagle3-x] (profile eagle3-x, against test_x[baseline])" in out
    assert "the test pytest compared it with" not in out


def test_compare_takes_the_compared_test_the_record_names(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """A record whose compare verdict names the test pytest compared it with (``baseline_test``) is compared with
    that test where BASE holds it, even where BASE holds the record's own id too (``--specdec-compare-profile
    eagle3`` maps eagle3-x's test while a run of both is the baseline); where BASE lacks it, the line says so."""
    both = _save(tmp_path, "both", _record("eagle3", 2.63), _record("eagle3-x", 2.49))
    current = _save(tmp_path, "night-2", _record("eagle3-x", 2.49, verdict="failed",
                                                 cost={"baseline_test": "t.py::test_x[eagle3]"}))  # fmt: skip
    assert main(["compare", both, current]) == 1
    out = capsys.readouterr().out
    assert "== t.py::test_x[eagle3-x] (profile eagle3-x, against test_x[eagle3])" in out
    assert ("note: t.py::test_x[eagle3-x]: compared with test_x[eagle3], the test pytest compared it with "
            "(--specdec-compare-profile; CURRENT's record names it); --compare-profile overrides") in out
    other = _save(tmp_path, "other", _record("baseline", 1.0, speculative=False))
    assert main(["compare", other, current]) == 2  # nothing compared
    out = capsys.readouterr().out
    assert ("no baseline for t.py::test_x[eagle3-x]; pytest compared it with a stored run, but pytest compared it "
            "with t.py::test_x[eagle3], which BASE (other) does not hold\n") in out  # fmt: skip


def test_compare_names_no_test_where_several_could_be_the_mapped_one(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """BASE holds two speculative profiles' tests in eagle3-x's place: which one pytest took is not told by the
    record, so none is taken, and the line says to name one."""
    _, current = _night(tmp_path)
    base = _save(tmp_path, "several", _record("eagle3", 2.63), _record("eagle2", 2.63))
    main(["compare", base, current])
    out = capsys.readouterr().out
    assert (
        "no baseline for t.py::test_x[eagle3-x]; pytest compared it with a stored run, but BASE (several) holds "
        "several tests in its place (test_x[eagle3], test_x[eagle2]): name one with --compare-profile\n"
    ) in out
