"""Which stored run becomes a baseline, and what a baseline says when it is stored (no server: stored run files).

Only a clean run is chosen by ``latest`` (completed, passed, every verdict passed); names resolve before run ids; a
record with an outlier repeat or too wide a spread says so, with the fix, when it is stored.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import statistics
from pathlib import Path

import pytest

from pytest_specdec.cli.save import save_command
from pytest_specdec.core.errors import CompareError
from pytest_specdec.core.tolerances import parse_tolerances
from pytest_specdec.judge import sequential
from pytest_specdec.judge.baseline import Baselines, baseline_notes
from pytest_specdec.measure.results import ResultRecord, ResultStore, RunFile, check_name, read_run_file
from pytest_specdec.report import summary
from tests.helpers import record, with_repeats

TEST = "tests/test_x.py::test_run[baseline]"


def _verdicts(**verdicts: str) -> dict[str, object]:
    return {"verdicts": {key: {"verdict": v, "repeats": 2, "server_s": 1.0} for key, v in verdicts.items()}}


def _run(run_id: str, **changes: object) -> RunFile:
    rec = dataclasses.replace(with_repeats(record("baseline", 90.0, None), [89.0, 90.0, 91.0]), **changes)
    return RunFile(run_id=run_id, started=0.0, results=(rec,))


def _store(tmp_path: Path, *runs: RunFile) -> ResultStore:
    store = ResultStore(tmp_path)
    for run in runs:
        store.save(run)
    return store


def test_a_record_is_clean_only_when_it_completed_passed_and_every_verdict_passed() -> None:
    base = record("baseline", 90.0, None)
    assert base.baseline_problem() == ""
    assert dataclasses.replace(base, cost=_verdicts(min_tok_s="passed", compare="passed")).baseline_problem() == ""
    assert dataclasses.replace(base, outcome="failed").baseline_problem() == "failed"
    assert dataclasses.replace(base, interrupted=True).baseline_problem() == "interrupted"
    undecided = dataclasses.replace(base, cost=_verdicts(min_tok_s="passed", compare="undecided"))
    assert undecided.baseline_problem() == "undecided: compare"
    # Old records have only their checks: "undecided: <line>" there counts too.
    checked = dataclasses.replace(base, checks={"min_tok_s": "undecided: output_tok_s 90 tok/s: undecided vs min 90"})
    assert checked.baseline_problem() == "undecided: min_tok_s"


def test_old_run_files_read_without_the_new_fields_and_new_ones_round_trip(tmp_path: Path) -> None:
    run = _run("20261201T000000Z-aaaaaa", interrupted=True, baseline_notes=("output_tok_s: too wide",))
    path = ResultStore(tmp_path).save(run)
    back = read_run_file(path).results[0]
    assert back.interrupted and back.baseline_notes == ("output_tok_s: too wide",)
    data = json.loads(path.read_text())
    for key in ("interrupted", "baseline_notes"):
        del data["results"][0][key]
    old = ResultRecord.from_dict(data["results"][0])
    assert not old.interrupted and old.baseline_notes == () and old.baseline_problem() == ""


def test_latest_passes_over_failed_undecided_and_interrupted_runs_and_says_why(tmp_path: Path) -> None:
    """The -75 % night ended undecided and passed: it must not become the next baseline (nor a failed or an
    interrupted one); the line names the run chosen, why, and the newer runs passed over."""
    store = _store(
        tmp_path,
        _run("20261201T000000Z-aaaaaa", cost=_verdicts(compare="passed")),
        _run("20261202T000000Z-bbbbbb", cost=_verdicts(compare="undecided")),
        _run("20261203T000000Z-cccccc", outcome="failed"),
        _run("20261204T000000Z-dddddd", interrupted=True),
    )
    baselines = Baselines.from_option("latest", store)
    assert baselines is not None
    found = baselines.find(TEST)
    assert found is not None
    assert found.run.run_id == "20261201T000000Z-aaaaaa"
    assert found.why == "the newest stored run in which the test was clean (completed, passed, every verdict passed)"
    assert found.skipped == (
        "20261204T000000Z-dddddd (interrupted)",
        "20261203T000000Z-cccccc (failed)",
        "20261202T000000Z-bbbbbb (undecided: compare)",
    )
    assert baselines.find("tests/test_x.py::test_other[baseline]") is None
    assert baselines.missing("tests/test_x.py::test_other[baseline]").endswith(": no stored run has it")


def _passed_against(run_id: str, **compare: object) -> dict[str, object]:
    return {"verdicts": {"compare": {"verdict": "passed", "repeats": 3, "server_s": 1.0, "baseline_test": TEST,
                                     "baseline_run": run_id, **compare}}}  # fmt: skip


def test_latest_is_the_reference_the_newest_clean_night_passed_against_so_a_slow_drift_adds_up(
    tmp_path: Path,
) -> None:
    # Replayed on real reference-server instances (benchmarks/bench_drift.py --rule newest): with each passing night
    # the next night's baseline, a server slowing 1% a night passed a 15% tolerance for 20 nights (18% below the
    # first) in 28 of 60 chains. The reference now stays the run the chain of passing nights started from.
    a, b, c, d = (f"2026120{n}T000000Z-{x * 6}" for n, x in zip("1234", "abcd", strict=True))
    store = _store(tmp_path, _run(a), _run(b, cost=_passed_against(a)), _run(c, cost=_passed_against(b)),
                   _run(d, cost=_verdicts(compare="undecided")))  # fmt: skip
    baselines = Baselines.from_option("latest", store)
    assert baselines is not None
    found = baselines.find(TEST)
    assert found is not None and found.run.run_id == a
    assert found.why.startswith(f"the reference of {c}, the newest stored run in which the test was clean ")
    assert f": it passed against {b}, which passed against {a}; a night that passes within its tolerance " in found.why
    assert found.skipped == (f"{d} (undecided: compare)",)


@pytest.mark.parametrize(
    ("b_compare", "reference"),
    [
        ({"new_reference": True}, "b"),  # b improved a row, none worse than half its tolerance: b restarts the chain
        ({"baseline_test": "tests/test_x.py::test_run[eagle3]"}, "b"),  # b crossed to another test's record
        ({"baseline_run": "20261130T000000Z-zzzzzz"}, "b"),  # b's reference is no longer stored
        ({"verdict": "undecided"}, "a"),  # b is not clean: c's own reference a is the newest that is
    ],
    ids=["improved", "other-test", "removed", "unclean"],
)
def test_the_reference_chain_stops_at_a_restart_another_test_or_a_missing_run(
    tmp_path: Path, b_compare: dict[str, object], reference: str
) -> None:
    a, b, c = "20261201T000000Z-aaaaaa", "20261202T000000Z-bbbbbb", "20261203T000000Z-cccccc"
    c_against = a if reference == "a" else b
    store = _store(tmp_path, _run(a), _run(b, cost=_passed_against(a, **b_compare)),
                   _run(c, cost=_passed_against(c_against)))  # fmt: skip
    baselines = Baselines.from_option("latest", store)
    assert baselines is not None
    found = baselines.find(TEST)
    assert found is not None and found.run.run_id == {"a": a, "b": b}[reference]
    # A record stored before the link was (no baseline_run) is its own reference, as before.
    old = dataclasses.replace(store.load(c).results[0], cost=_verdicts(compare="passed"))
    assert old.passed_against() is None


def test_a_passed_compare_restarts_the_reference_only_when_a_row_improved_and_none_went_half_its_tolerance() -> None:
    from pytest_specdec.judge.verdict import judge_compare

    def rec(tok_s: list[float], ttft_ms: float = 40.0) -> ResultRecord:
        ttft = [ttft_ms * f for f in (1.0, 1.01, 0.99, 1.005, 0.995, 1.0)]
        return dataclasses.replace(record("baseline", statistics.median(tok_s), None), repeats={
            "output_tok_s": tok_s, "itl_ms_p50": [1000.0 / v for v in tok_s], "ttft_ms_p50": ttft})  # fmt: skip

    unchanged = [89.0, 90.0, 91.0, 90.0, 89.5, 90.5]
    # 4 more stored runs of the same level: the run-to-run spread is measured (none), not assumed.
    history = [rec([v * (1 + k / 1000) for v in unchanged]) for k in range(1, 5)]

    def judged(tok_s: list[float], tolerances: str = "output_tok_s:5%", ttft_ms: float = 40.0) -> dict[str, object]:
        verdict = judge_compare(rec(unchanged), rec(tok_s, ttft_ms), run_id="R1", test_id=TEST, noise={}, force=False,
                                tolerances=parse_tolerances(tolerances), design=sequential.Design(6, 6),
                                history=history)  # fmt: skip
        assert verdict.failure is None and verdict.undecided is None, verdict
        return verdict.cost

    faster = [119.0, 120.0, 121.0, 120.0, 119.5, 120.5]  # +33%: output_tok_s improved
    assert judged(faster)["new_reference"] is True
    assert "new_reference" not in judged(unchanged)  # unchanged: the reference stays
    # tok/s improved, but TTFT went 6% slower, beyond half its 10% tolerance: the reference stays.
    slower_ttft = judged(faster, ttft_ms=42.4)
    assert "new_reference" not in slower_ttft, slower_ttft


def test_a_run_stored_without_a_compare_after_a_clean_one_is_passed_over_unless_named(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # Adversarial trial: aux layer ids changed, the gated night read accept length REGRESSED; one run without
    # --specdec-compare then passed (nothing to compare) and was the newest clean run, and the next gated night read
    # the regressed config "ok" against it.
    a, b, c = "20261201T000000Z-aaaaaa", "20261202T000000Z-bbbbbb", "20261203T000000Z-cccccc"
    store = _store(tmp_path, _run(a), _run(b, outcome="failed", cost=_verdicts(compare="FAILED")), _run(c))
    baselines = Baselines.from_option("latest", store)
    assert baselines is not None
    found = baselines.find(TEST)
    assert found is not None and found.run.run_id == a  # the first night: stored without a compare, nothing older
    assert found.skipped == (
        f"{c} (not compared when stored (no --specdec-compare, or no baseline then) after {b} regressed against its "
        f"baseline; to take it anyway: python -m pytest_specdec save {c} NAME, then --specdec-compare=NAME)",
        f"{b} (failed)",
    )
    # Named on purpose: taken. `save` says what --specdec-compare alone made of it (a trial named such a run silently
    # and the regressed server then read ok against it).
    args = argparse.Namespace(run=c, name="rebased", force=False, results_dir=str(tmp_path))
    assert save_command(args) == 0
    assert capsys.readouterr().out.splitlines()[1] == (
        f"note: --specdec-compare alone passed this run over for {TEST} (not compared when stored (no "
        f"--specdec-compare, or no baseline then) after {b} regressed against its baseline); named, it is a "
        "baseline as it is, of --specdec-compare=rebased and, while it is the newest clean run, of "
        "--specdec-compare alone: check that the server it measured is the one to keep"
    )
    renamed = Baselines.from_option("latest", store)
    assert renamed is not None
    assert (taken := renamed.find(TEST)) is not None and taken.run.run_id == c
    # A second trial removed the first clean run's file (as pruning a store would): the REGRESSED night alone still
    # keeps the unchecked run after it from becoming the baseline. A failed floor without a compare does not.
    (tmp_path / "names" / "rebased").unlink()
    (tmp_path / f"{a}.json").unlink()
    pruned = Baselines.from_option("latest", store)
    assert pruned is not None and pruned.find(TEST) is None
    assert pruned.missing(TEST).endswith(
        f"(not compared when stored (no --specdec-compare, or no baseline then) after {b} regressed against its "
        f"baseline; to take it anyway: python -m pytest_specdec save {c} NAME, then --specdec-compare=NAME), "
        f"{b} (failed)"
    )


def test_a_renamed_profiles_unchecked_first_night_is_passed_over_and_the_old_test_named(tmp_path: Path) -> None:
    # Adversarial trial: the eagle3 profile renamed eagle3f with its aux ids changed; eagle3f's first night ran
    # without a compare (or with no baseline under --specdec-compare-missing=warn), was its first clean run, and the
    # next gated night read the regressed accept length ok against it.
    a, b, c = "20261201T000000Z-aaaaaa", "20261202T000000Z-bbbbbb", "20261203T000000Z-cccccc"

    def spec(profile: str, aux: list[int], run_id: str) -> RunFile:
        rec = record(profile, 90.0, 2.3)
        fp = {**rec.fingerprint, "draft": {"aux_ids": aux}}
        plain = record("baseline", 80.0, None)
        return RunFile(run_id=run_id, started=0.0, results=(dataclasses.replace(rec, fingerprint=fp), plain))

    renamed = "tests/test_x.py::test_run[eagle3f]"
    store = _store(tmp_path, spec("eagle3", [1, 3, 5], a), spec("eagle3f", [0, 1, 2], b))
    baselines = Baselines.from_option("latest", store)
    assert baselines is not None and baselines.find(renamed) is None
    assert baselines.missing(renamed).endswith(
        f"{b} (not compared when stored (no --specdec-compare, or no baseline then), and its run has no "
        f"tests/test_x.py::test_run[eagle3], which {a} was clean for (a renamed profile? "
        f"--specdec-compare-profile=eagle3 compares with it); to take it anyway: python -m pytest_specdec save {b} "
        "NAME, then --specdec-compare=NAME)"
    )
    # The test with no baseline names the old one, with what differs; not a profile of the other kind.
    current = spec("eagle3f", [0, 1, 2], c).results[0]
    assert baselines.renamed(current) == (
        f"; tests/test_x.py::test_run[eagle3] has one (run {a}, differing in: draft aux ids: [1, 3, 5] -> [0, 1, 2]): "
        "a renamed profile? --specdec-compare-profile=eagle3 compares with it"
    )
    assert baselines.renamed(current, mapped_to="eagle3") == ""  # already mapped there: nothing to add
    # A plain profile is pointed at a plain one only (eagle3f of the newest run is passed: it speculates), at the run
    # its compare would take (b's is unchecked after a clean one).
    assert baselines.renamed(record("baseline-2", 80.0, None)) == (
        f"; tests/test_x.py::test_run[baseline] has one (run {a}, the same server and workload): a renamed profile? "
        "--specdec-compare-profile=baseline compares with it"
    )
    # A sweep stored before a nightly's first night holds eagle3f's test as points (eagle3f@num_steps=2): a point is
    # no renamed profile, and eagle3f's first night stays its baseline.
    point = spec("eagle3f@num_steps=2", [1, 3, 5], a).results[0]
    swept = RunFile(run_id="20261130T000000Z-999999", started=0.0, results=(point,))
    sweep_first = _store(tmp_path / "sweep", swept, spec("eagle3f", [0, 1, 2], b))
    after_sweep = Baselines.from_option("latest", sweep_first)
    assert after_sweep is not None and (first := after_sweep.find(renamed)) is not None and first.run.run_id == b
    # A new profile beside the old one (its run holds both) is a new test: its first unchecked night is the baseline.
    old = spec("eagle3", [1, 3, 5], b).results[0]
    store.save(RunFile(run_id=b, started=0.0, results=(*spec("eagle3f", [0, 1, 2], b).results, old)))
    again = Baselines.from_option("latest", store)
    assert again is not None and (found := again.find(renamed)) is not None and found.run.run_id == b


def test_no_clean_run_is_no_baseline_and_the_reason_lists_the_runs(tmp_path: Path) -> None:
    store = _store(tmp_path, _run("20261202T000000Z-bbbbbb", cost=_verdicts(min_tok_s="undecided")))
    baselines = Baselines.from_option("latest", store)
    assert baselines is not None
    assert baselines.find(TEST) is None
    assert baselines.missing(TEST) == (
        f"no baseline for {TEST} in {tmp_path}: 1 stored run(s) have it, none clean: "
        "20261202T000000Z-bbbbbb (undecided: min_tok_s)"
    )


def test_names_resolve_before_run_ids_and_move_when_saved_again(tmp_path: Path) -> None:
    first, second = _run("20261201T000000Z-aaaaaa"), _run("20261202T000000Z-bbbbbb")
    store = _store(tmp_path, first, second)
    path = store.save_name("night-1", first.run_id)
    assert path == tmp_path / "names" / "night-1"
    assert path.read_text() == f"{first.run_id}\n"
    # A name that is also a run-id prefix: the name wins.
    store.save_name("20261202", first.run_id)
    assert store.load("20261202").run_id == first.run_id
    assert store.load("night-1").run_id == first.run_id
    assert store.list() == [tmp_path / f"{first.run_id}.json", tmp_path / f"{second.run_id}.json"]
    store.save_name("night-1", second.run_id)
    assert store.load("night-1").run_id == second.run_id
    baselines = Baselines.from_option("night-1", store)
    assert baselines is not None
    assert baselines.header_line() == f"specdec: comparing against night-1 (run {second.run_id})"
    found = baselines.find(TEST)
    assert found is not None and found.why == "named night-1 (--specdec-compare)"


def test_a_named_run_that_is_not_clean_is_honoured_and_said(tmp_path: Path) -> None:
    run = _run("20261201T000000Z-aaaaaa", outcome="failed")
    store = _store(tmp_path, run)
    store.save_name("rc1", run.run_id)
    baselines = Baselines.from_option("rc1", store)
    assert baselines is not None
    found = baselines.find(TEST)
    assert found is not None
    assert found.why == "named rc1 (--specdec-compare); not clean (failed), compared anyway because it was named"


@pytest.mark.parametrize(
    ("name", "message"),
    [
        ("", "a name cannot be empty, e.g. night-1"),
        ("latest", "'latest' means the newest clean run; choose another name, e.g. night-1"),
        ("a/b", "'a/b': must not start with a dot or hold whitespace or any of \\/:*?<>| (it has '/')"),
        (".x", "'.x': must not start with a dot or hold whitespace or any of \\/:*?<>| (it starts with a dot)"),
    ],
)
def test_bad_names_are_refused_with_the_rule(name: str, message: str) -> None:
    with pytest.raises(ValueError) as info:
        check_name(name)
    assert str(info.value) == message


def test_a_name_of_a_removed_run_says_so(tmp_path: Path) -> None:
    run = _run("20261201T000000Z-aaaaaa")
    store = _store(tmp_path, run)
    store.save_name("night-1", run.run_id)
    (tmp_path / f"{run.run_id}.json").unlink()
    with pytest.raises(CompareError, match="name 'night-1' points at run 20261201T000000Z-aaaaaa, which is not in"):
        store.load("night-1")
    with pytest.raises(CompareError, match="nothing to name 'x'"):
        store.save_name("x", "nope")


def test_save_name_needs_a_clean_run_and_keeps_the_old_name_otherwise(tmp_path: Path) -> None:
    store = _store(tmp_path, _run("20261201T000000Z-aaaaaa"))
    store.save_name("night-1", "20261201T000000Z-aaaaaa")
    bad = _run("20261202T000000Z-bbbbbb", cost=_verdicts(compare="undecided"))
    store.save(bad)
    path, why = summary._save_name(store, bad, "night-1")
    assert path is None
    assert why == (
        "not saved as night-1: 1 test(s) not clean: test_run[baseline] (undecided: compare); night-1 still names run "
        "20261201T000000Z-aaaaaa. Name it anyway: python -m pytest_specdec save 20261202T000000Z-bbbbbb night-1 --force"
    )
    good = _run("20261203T000000Z-cccccc")
    store.save(good)
    assert summary._save_name(store, good, "night-1") == (tmp_path / "names" / "night-1", "")
    assert store.named("night-1") == good.run_id


def test_a_compare_run_that_compared_nothing_fails() -> None:
    compared = dataclasses.replace(record("baseline", 90.0, None), cost=_verdicts(compare="passed"))
    assert summary.nothing_compared([compared, record("eagle3", 90.0, 2.0)]) == ""
    assert summary.nothing_compared([record("baseline", 90.0, None)]).startswith(
        "--specdec-compare compared none of the 1 test(s) with a stored run"
    )


def test_a_noisy_baseline_says_so_when_stored_with_the_fix() -> None:
    """The issue's repeats 236, 215 and 117 tok/s: 117 is an outlier, and at that spread no unchanged run passes
    within 5 %; a tight baseline stores without a word."""
    design = sequential.Design(3, 24)
    noisy = with_repeats(record("baseline", 215.0, None), [236.0, 215.0, 117.0])
    (note,) = baseline_notes(noisy, {}, design)
    assert note.startswith("output_tok_s: repeats 236, 215, 117 tok/s: 117 is an outlier (-46% from the median); ")
    assert ("could not pass within 5% against it, however many repeats of its own it measured (budget 24 repeats, "
            "workload.max_repeats)") in note
    tight = with_repeats(record("baseline", 100.0, None), [100.0, 101.0, 99.0])
    assert baseline_notes(tight, {}, design) == []
    wide = with_repeats(record("baseline", 100.0, None), [100.0, 108.0, 93.0])
    (note,) = baseline_notes(wide, {}, design)
    assert note.endswith("store the baseline with more repeats (about 16: --specdec-repeats 16), or widen the "
                         "tolerance to output_tok_s:13% (an unchanged run of this spread passes that within 24 "
                         "repeats)"), note  # fmt: skip
    # A fresh-user trial was told "--specdec-repeats 126" right after "budget 24 repeats": past twice the budget
    # the tolerance this spread supports comes first.
    wider = with_repeats(record("baseline", 100.0, None), [100.0, 112.0, 90.0])
    (note,) = baseline_notes(wider, {}, design)
    assert note.endswith("widen the tolerance to output_tok_s:18% (an unchanged run of this spread passes that "
                         "within 24 repeats), or measure it again on a quieter runner (a baseline of about 76 "
                         "repeats would also do)"), note  # fmt: skip


def test_the_save_command_names_a_clean_stored_run_and_compare_finds_it(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from pytest_specdec.cli.main import main

    good, bad = _run("20261201T000000Z-aaaaaa"), _run("20261202T000000Z-bbbbbb", outcome="failed")
    _store(tmp_path, good, bad)
    where = ["--results-dir", str(tmp_path)]
    assert main(["save", "latest", "night-1", *where]) == 1
    assert capsys.readouterr().out == (
        f"save: refused: 1 test(s) of run {bad.run_id} not clean: {TEST} (failed); a baseline completed, passed and "
        "every verdict passed (--force names it anyway)\n"
    )
    assert main(["save", "20261201", "night-1", *where]) == 0
    assert capsys.readouterr().out == f"saved as night-1: {tmp_path}/names/night-1 names run {good.run_id}\n"
    assert main(["save", "20261201", "a/b", *where]) == 2
    assert "must not start with a dot or hold whitespace" in capsys.readouterr().err
    assert main(["compare", "night-1", bad.run_id, *where]) == 0
    assert capsys.readouterr().out.startswith(f"specdec compare: baseline {good.run_id} -> current {bad.run_id}\n")


def test_an_unchanged_undecided_night_joins_the_history_but_never_becomes_the_baseline(tmp_path: Path) -> None:
    # Fresh-user trial: under a gated nightly every night after the first stored run ended undecided (one stored
    # run cannot size the run-to-run spread), was never pooled, and the compare kept advising "save more unchanged
    # runs" that `save` refused: the history never grew. An undecided compare with no suspected row (no open row's
    # estimate beyond its tolerance) now joins the history; a suspected one (maybe the regression it could not
    # decide), a failed one, or another open verdict does not; the baseline stays the last clean run.
    from pytest_specdec.judge.history import StoredHistory

    def night(run_id: str, **compare: object) -> RunFile:
        cost = {"verdicts": {"compare": {"verdict": "undecided", "repeats": 3, "server_s": 1.0, **compare}}}
        return _run(run_id, cost=cost)

    store = _store(
        tmp_path,
        _run("20261201T000000Z-aaaaaa"),  # night-1: clean, the baseline
        night("20261202T000000Z-bbbbbb", suspected=[]),
        night("20261203T000000Z-cccccc", suspected=["output_tok_s"]),
        night("20261204T000000Z-dddddd"),  # stored before "suspected" was: stays out
        _run("20261205T000000Z-eeeeee", outcome="failed"),
        night("20261206T000000Z-ffffff", suspected=[]),
        night("20261207T000000Z-ababab", suspected=[]),  # today's, for the compare command
    )
    unsuspected = night("x", suspected=[]).results[0]
    assert unsuspected.history_problem() == "" and unsuspected.baseline_problem() == "undecided: compare"
    other = dataclasses.replace(unsuspected, cost={"verdicts": {**unsuspected.cost["verdicts"],
                                                                "min_tok_s": {"verdict": "undecided"}}})  # fmt: skip
    assert other.history_problem() == "undecided: min_tok_s"
    # --specdec-undecided=fail failed the test for that open compare alone: still an unchanged night's measurement.
    by_policy = dataclasses.replace(unsuspected, outcome="failed",
                                    cost={**unsuspected.cost, "failed_by": "undecided"})  # fmt: skip
    assert by_policy.history_problem() == "" and by_policy.baseline_problem() == "failed"
    assert dataclasses.replace(unsuspected, outcome="failed").history_problem() == "failed"
    baselines = Baselines.from_option("latest", store)
    assert baselines is not None
    found = baselines.find(TEST)
    assert found is not None and found.run.run_id == "20261201T000000Z-aaaaaa"
    history = StoredHistory(tmp_path, before="20261207T000000Z-ababab").of(found.run.run_id, found.record)
    assert [r.test_id for r in history] == [TEST, TEST]  # ffffff and bbbbbb, newest first
    # pytest's own run is not stored yet: every stored run counts.
    assert len(StoredHistory(tmp_path).of(found.run.run_id, found.record)) == 3



def test_a_baselines_stored_note_is_not_repeated_under_a_compare_that_pooled_its_spread(tmp_path: Path) -> None:
    # Second fresh-user trial: the note a run's record got when stored ("an unchanged run could not pass within 5%
    # against it") judged that record alone; repeated under compares that pooled it with other stored runs (and
    # decided at 5%), it contradicted them. It is kept for a compare against that run alone.
    from pytest_specdec.judge.baseline import Baseline
    from pytest_specdec.judge.outcomes import Outcomes

    run = _run("20261201T000000Z-aaaaaa", baseline_notes=("output_tok_s: too wide",))
    found = Baseline(run, run.results[0], "the newest clean run")
    alone, pooled = Outcomes(tmp_path), Outcomes(tmp_path)
    alone.add_compare(run.run_id, TEST, [], [], baseline=found)
    pooled.add_compare(run.run_id, TEST, [], [], baseline=found, pooled=True)
    assert list(alone.chosen[run.run_id][2]) == ["(profile baseline): output_tok_s: too wide"]
    assert list(pooled.chosen[run.run_id][2]) == []


def test_a_repeat_or_pair_a_few_percent_off_in_normal_noise_is_no_outlier() -> None:
    """A fresh-user trial's baseline note called one pair 6 % below the median an outlier: with 3 values the MAD is
    the smaller of two distances, near 0 when two values agree by chance, so any value past the tolerance was one.
    An outlier is now also more than :data:`OUTLIER_TOLERANCES` tolerances from the median; -46 % still is one."""
    from pytest_specdec.judge.baseline import OUTLIER_TOLERANCES

    design = sequential.Design(3, 24)
    assert OUTLIER_TOLERANCES * 0.05 < 0.46
    for values in ([100.0, 100.4, 94.0], [100.0, 103.0, 97.0, 100.5, 94.0], [236.0, 235.0, 221.0]):
        notes = baseline_notes(with_repeats(record("baseline", values[0], None), values), {}, design)
        assert not any("outlier" in note for note in notes), (values, notes)
    # The trial's shape: paired ratios 1.36, 1.365, 1.28 (-6 %) against the baseline arm.
    paired = dataclasses.replace(
        with_repeats(record("eagle3", 136.0, 2.6), [136.0, 136.5, 128.0]),
        paired={"vs": "baseline", "target": {"output_tok_s": [136.0, 136.5, 128.0]},
                "reference": {"output_tok_s": [100.0, 100.0, 100.0]}},
    )  # fmt: skip
    assert not any("outlier" in note for note in baseline_notes(paired, {}, design))
    for values in ([236.0, 215.0, 117.0], [100.0, 100.4, 54.0], [100.0, 103.0, 97.0, 100.5, 62.0]):
        notes = baseline_notes(with_repeats(record("baseline", values[0], None), values), {}, design)
        assert any(f"{values[-1]:.4g} is an outlier" in note for note in notes), (values, notes)


def test_a_paired_baselines_note_names_and_reads_its_ratio_rows_own_tolerance() -> None:
    """Fresh-user trial: the note on a ratio row said "widen the tolerance to ttft_ms_p50:30%", which widens the raw
    row too; it names ``FIELD/ARM`` and sizes against the ratio row's own tolerance where one is given."""
    design = sequential.Design(3, 24)
    paired = dataclasses.replace(
        with_repeats(record("eagle3", 130.0, 2.6), [136.0, 124.0, 130.0]),
        paired={"vs": "baseline", "target": {"output_tok_s": [136.0, 124.0, 130.0]},
                "reference": {"output_tok_s": [100.0, 108.0, 93.0]}},
    )  # fmt: skip
    (note,) = [n for n in baseline_notes(paired, parse_tolerances("output_tok_s:5%"), design)
               if n.startswith("output_tok_s / baseline")]  # fmt: skip
    assert "widen the tolerance to output_tok_s/baseline:" in note, note
    # At its own 60% the ratio row needs nothing; the field's 5% alone would.
    own = parse_tolerances("output_tok_s:5% output_tok_s/baseline:60%")
    assert not [n for n in baseline_notes(paired, own, design) if n.startswith("output_tok_s / baseline")]


def test_a_stored_runs_note_names_its_profile_as_a_profile(tmp_path: Path) -> None:
    # A fresh-user trial read "specdec baseline: baseline: itl_ms_p50: ..." (the profile named baseline) as an error.
    from pytest_specdec.judge.baseline import Baseline
    from pytest_specdec.judge.outcomes import Outcomes

    run = _run("20261201T000000Z-aaaaaa", baseline_notes=("output_tok_s: too wide",))
    assert [line.text for line in summary.baseline_lines(run.results)] == [
        "specdec baseline note (profile baseline): output_tok_s: too wide"
    ]
    outcomes = Outcomes(tmp_path)
    outcomes.add_compare(run.run_id, TEST, [], [], baseline=Baseline(run, run.results[0], "the newest clean run"))
    lines = [line.text for line in summary.compare_lines(outcomes)]
    warning = f"specdec compare: run {run.run_id} was stored with a warning (profile baseline): output_tok_s: too wide"
    assert warning in lines
