"""Tests of the CI-facing outputs: markdown summary (report/markdown.py), JUnit properties (report/junit.py), the JSON
report (report/json_report.py), and the terminal summary's lines (report/terminal.py)."""

from __future__ import annotations

import dataclasses
import json
import xml.etree.ElementTree as ET
from pathlib import Path
from typing import Any

import pytest

from pytest_specdec.measure.results import ResultRecord, ResultStore, RunFile, read_run_file
from pytest_specdec.report.json_report import write_json_report
from pytest_specdec.report.junit import junit_properties
from pytest_specdec.report.markdown import markdown_summary, markdown_targets, write_markdown
from pytest_specdec.report.merge import Shard, merge_runs, merged_markdown
from pytest_specdec.report.terminal import category_lines, position_lines
from tests.helpers import record

pytest_plugins = ["pytester"]


def session_records() -> list:
    return [
        record("baseline", 88.8, None),
        record("eagle3", 94.0, 2.4),
        record("eagle3-wrong-layers", 70.25, 1.5, outcome="failed"),
    ]


VERDICT = (
    "accept_length 1.5 tok/verify < min 2 (margin -0.5, -25.0%) [profile eagle3-wrong-layers, 16 requests]\n"
    "accept_rate 0.1667 < min 0.33 (margin -0.1633, -49.5%) [profile eagle3-wrong-layers, 16 requests]"
)


def test_markdown_summary_table_and_failed_verdicts() -> None:
    failures = {"tests/test_x.py::test_run[eagle3-wrong-layers]": VERDICT}
    lines = markdown_summary(session_records(), failures, results_path=".specdec/results/r1.json")
    assert lines == [
        "## specdec summary",
        "",
        "| test | profile | tok/s | accept len | accept rate | TTFT p50 ms | ITL p50 ms | result |",
        "|---|---|---:|---:|---:|---:|---:|---|",
        "| `test_run[baseline]` | baseline | 88.8 | n/a | n/a | 40.0 | 11.26 | ✅ passed |",
        "| `test_run[eagle3]` | eagle3 | 94.0 | 2.40 | 0.467 | 40.0 | 10.64 | ✅ passed |",
        "| `test_run[eagle3-wrong-layers]` | eagle3-wrong-layers | 70.2 | 1.50 | 0.167 | 40.0 | 14.23 | ❌ failed |",
        "",
        "### Failed",
        "",
        "**`test_run[eagle3-wrong-layers]`**",
        "",
        "```",
        "accept_length 1.5 tok/verify < min 2 (margin -0.5, -25.0%) [profile eagle3-wrong-layers, 16 requests]",
        "accept_rate 0.1667 < min 0.33 (margin -0.1633, -49.5%) [profile eagle3-wrong-layers, 16 requests]",
        "```",
        "",
        "Results: `.specdec/results/r1.json`",
    ]


#: An open compare row as ``verdict.judge_compare`` stores it (``cost["verdicts"]["compare"]["open"]``), from a
#: fresh-user trial's night whose markdown said only ``✅ passed``.
OPEN_ROW = (
    "output_tok_s x0.948, CI 0.4554-1.975 (99.2%) holds the tolerance 5%; about 40 repeats in all would decide it "
    "(raise workload.max_repeats or max_server_s)"
)
OPEN_FLOOR = (
    "output_tok_s 101.2 tok/s: undecided vs min 100 [undecided after 24 repeats, CI 97.1-105.4 (99.2%) contains the "
    "limit, 31.0 server-s; about 110 repeats in all would decide it at this spread (~310 more server-s: raise "
    "workload.max_repeats or max_server_s)]"
)


def _undecided(rec: ResultRecord, *, floor: bool = False, outcome: str = "passed") -> ResultRecord:
    """``rec`` with its compare (and with ``floor``, its min_tok_s) undecided at the budget, as the plugin stores it."""
    verdicts: dict[str, Any] = {"compare": {"verdict": "undecided", "repeats": 24, "server_s": 31.0,
                                            "suspected": ["output_tok_s"], "open": [OPEN_ROW]}}  # fmt: skip
    checks = {}
    if floor:
        verdicts["min_tok_s"] = {"verdict": "undecided", "repeats": 24, "server_s": 31.0}
        checks["min_tok_s"] = f"undecided: {OPEN_FLOOR}"
    return dataclasses.replace(rec, outcome=outcome, checks=checks, cost={"server_s": 31.0, "verdicts": verdicts})


def test_markdown_summary_says_a_night_it_could_not_tell_undecided_not_passed() -> None:
    # A fresh-user trial: the terminal said "specdec: 1 test undecided ... not failed (--specdec-undecided=warn)" and
    # the step summary showed "✅ passed" and nothing else; green where the night could not tell.
    passed = dataclasses.replace(record("baseline", 88.8, None),
                                 cost={"verdicts": {"compare": {"verdict": "passed", "repeats": 3}}})  # fmt: skip
    lines = markdown_summary([passed, _undecided(record("eagle3", 94.0, 2.4))], results_path="r1.json")
    assert lines == [
        "## specdec summary: 1 test undecided (could not tell at its budget)",
        "",
        "| test | profile | tok/s | accept len | accept rate | TTFT p50 ms | ITL p50 ms | result |",
        "|---|---|---:|---:|---:|---:|---:|---|",
        "| `test_run[baseline]` | baseline | 88.8 | n/a | n/a | 40.0 | 11.26 | ✅ passed |",
        "| `test_run[eagle3]` | eagle3 | 94.0 | 2.40 | 0.467 | 40.0 | 10.64 | ⚠️ undecided |",
        "",
        "### Undecided",
        "",
        "At its budget each verdict below could neither pass nor fail: the run could not tell. A test that passed "
        "with one shows `⚠️ undecided` (`--specdec-undecided=warn`; `=fail` fails it). What would decide each:",
        "",
        f"- `test_run[eagle3]` (profile `eagle3`): `compare: {OPEN_ROW}`",
        "",
        "Results: `r1.json`",
    ]


def test_merged_markdown_of_shard_run_files_counts_and_says_undecided_tests(tmp_path: Path) -> None:
    # Several open verdicts are listed under their test; a second test of the profile shares them (one measurement)
    # and refers to the first; a test the fail policy failed stays failed but is counted, as the terminal counts it.
    # Through the run file, as `merge --markdown` reads the shards: the lines are stored with the records.
    first = _undecided(record("eagle3", 94.0, 2.4), floor=True)
    again = dataclasses.replace(first, test_id="tests/test_x.py::test_again[eagle3]")
    failed = _undecided(record("eagle3-k2", 90.0, 2.1), outcome="failed")
    not_measured = dataclasses.replace(  # stopped by a decisive failure: not undecided at the budget, not counted
        record("eagle3-k3", 60.0, 1.2, outcome="failed"),
        cost={"verdicts": {"compare": {"verdict": "not measured further", "open": [OPEN_ROW]}}},
    )
    shard = ResultStore(tmp_path).save(RunFile("s1", 0.0, results=(first, again, failed, not_measured)))
    run = read_run_file(shard)
    lines = merged_markdown(merge_runs([Shard(shard, run)]), [Shard(shard, run)], tmp_path / "m.json")
    assert lines[0] == "## specdec summary (1 shards merged): 3 tests undecided (could not tell at their budget)"
    cells = [line.rsplit(" | ", 1)[-1] for line in lines[4:8]]
    assert cells == ["⚠️ undecided |", "⚠️ undecided |", "❌ failed |", "❌ failed |"]
    start = lines.index("### Undecided") + 4
    assert lines[start : lines.index("", start)] == [
        "- `test_run[eagle3]` (profile `eagle3`):",
        f"  - `compare: {OPEN_ROW}`",
        f"  - `{OPEN_FLOOR}`",
        "- `test_again[eagle3]` (profile `eagle3`): the same verdicts as `test_run[eagle3]`",
        f"- `test_run[eagle3-k2]` (profile `eagle3-k2`): `compare: {OPEN_ROW}`",
    ]


def test_an_open_tail_ceiling_or_goodput_floor_is_undecided_in_the_tables_and_counted() -> None:
    # Adversarial trial: a p99 ceiling on 72 requests and a goodput floor stayed undecided (said in the warnings) but
    # read "passed" in the terminal's table and "✅ passed" in the markdown, and the last line did not count them: they
    # are judged once on every request, so they have a check and no sequential cost entry.
    from pytest_specdec.report.markdown import shown_outcome
    from pytest_specdec.report.summary import undecided_lines

    open_p99 = "undecided: ttft_ms p99 291 ms: undecided vs max 500 [72 requests cannot bound p99 from above]"
    tail = dataclasses.replace(record("srv", 90.0, 2.4), checks={"max_ttft_ms_p99": open_p99, "min_tok_s": "passed"},
                               cost={"verdicts": {"min_tok_s": {"verdict": "passed", "repeats": 3}}})  # fmt: skip
    goodput = dataclasses.replace(record("srv2", 90.0, 2.4), checks={"min_goodput": "undecided: goodput 0.23 req/s"})
    assert tail.undecided_keys() == ["max_ttft_ms_p99"]
    assert shown_outcome(tail) == shown_outcome(goodput) == "undecided"
    (line,) = undecided_lines([tail, goodput], "warn")
    assert line.text.startswith("specdec: 2 tests undecided (2 profiles: srv on max_ttft_ms_p99, srv2 on min_goodput)")
    assert markdown_summary([tail])[-1] == (
        "- `test_run[srv]` (profile `srv`): `ttft_ms p99 291 ms: undecided vs max 500 [72 requests cannot bound p99 "
        "from above]`"
    )


def test_markdown_summary_of_a_record_stored_without_what_would_decide_it() -> None:
    old = dataclasses.replace(record("eagle3", 94.0, 2.4), cost={"verdicts": {"compare": {"verdict": "undecided"}}})
    lines = markdown_summary([old])
    said = "`compare: undecided (what would decide it is in the run's warnings)`"
    assert lines[-1] == f"- `test_run[eagle3]` (profile `eagle3`): {said}"


def test_markdown_summary_sweep_section_and_escaping() -> None:
    rec = record("odd|name", 50.0, None, outcome="skipped")
    lines = markdown_summary([rec], sweep_lines=["point  tok/s", "best: x"], title="nightly")
    assert lines[0] == "## nightly"
    assert lines[4] == "| `test_run[odd\\|name]` | odd\\|name | 50.0 | n/a | n/a | 40.0 | 20.00 | skipped |"
    assert lines[5:] == ["", "### Sweep", "", "```", "point  tok/s", "best: x", "```"]
    # A configured point the sweep could not decide: said in the heading and under the table (a trial's step
    # summary read a plain heading and "not failed" on the run --specdec-undecided=fail failed).
    point = "configured point x@num_steps=3 is tied with the highest x@num_steps=2 (...); not failed"
    open_point = markdown_summary([rec], sweep_lines=["point  tok/s", point], title="nightly", sweep_undecided=[point])
    assert open_point[0] == "## nightly: the sweep's configured point undecided"
    assert open_point[-1].startswith("⚠️ undecided: the configured point could not be told from the others")


def test_markdown_targets() -> None:
    assert markdown_targets(None, {}) == []
    assert markdown_targets("out/summary.md", {}) == [(Path("out/summary.md"), False)]
    assert markdown_targets(None, {"GITHUB_STEP_SUMMARY": "/gh/step"}) == [(Path("/gh/step"), True)]
    assert markdown_targets("a.md", {"GITHUB_STEP_SUMMARY": "/gh/step"}) == [
        (Path("a.md"), False),
        (Path("/gh/step"), True),
    ]


def test_write_markdown_appends_to_step_summary_and_replaces_a_file(tmp_path: Path) -> None:
    step = tmp_path / "step_summary"
    step.write_text("# earlier step\n")
    write_markdown(["## specdec summary", "| a |"], step, append=True)
    assert step.read_text() == "# earlier step\n\n## specdec summary\n| a |\n"
    target = tmp_path / "sub" / "summary.md"
    write_markdown(["one"], target)
    write_markdown(["two"], target)
    assert target.read_text() == "two\n"


def test_junit_properties_numeric_fields_in_runmetrics_order() -> None:
    props = junit_properties(
        {"output_tok_s": 94.0, "accept_length": None, "num_ok": 16, "accept_length_source": "client", "bogus": 1.0}
    )
    assert props == [("specdec_num_ok", 16), ("specdec_output_tok_s", 94.0)]


def test_junit_properties_reach_the_junit_xml(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(
        """
        from pytest_specdec.report.junit import junit_properties

        def test_metrics(request):
            metrics = {"output_tok_s": 94.0, "accept_length": 2.4, "ttft_ms_p50": None}
            request.node.user_properties.extend(junit_properties(metrics))
        """
    )
    result = pytester.runpytest_subprocess("--junitxml=junit.xml", "-p", "no:specdec", "-W", "error")
    assert result.ret == pytest.ExitCode.OK
    result.assert_outcomes(passed=1)
    tree = ET.parse(pytester.path / "junit.xml")
    props = {p.get("name"): p.get("value") for p in tree.iter("property")}
    assert props == {"specdec_output_tok_s": "94.0", "specdec_accept_length": "2.4"}


def test_write_json_report_is_the_run_file_with_fingerprints(tmp_path: Path) -> None:
    run = RunFile(
        run_id="20261130T000000Z-abcdef", started=1.0, machine={"host": "h"}, results=tuple(session_records())
    )
    path = write_json_report(run, tmp_path / "ci" / "specdec-report.json")
    assert path == tmp_path / "ci" / "specdec-report.json"
    assert [p.name for p in path.parent.iterdir()] == ["specdec-report.json"]
    data = json.loads(path.read_text())
    assert data["run_id"] == "20261130T000000Z-abcdef"
    assert [r["profile"] for r in data["results"]] == ["baseline", "eagle3", "eagle3-wrong-layers"]
    assert data["results"][1]["fingerprint"] == {"speculative": {"algorithm": "EAGLE3"}, "workload": {"concurrency": 1}}
    assert read_run_file(path) == run


def test_definition_lines_name_the_accept_length_the_native_figure_and_the_cache_reset() -> None:
    """Issue 12.4 / 14.4: the summary says which accept length it shows, the engine's own figure beside it, and
    what was done to the prefix cache."""
    from pytest_specdec.measure.results import ResultRecord
    from pytest_specdec.report.terminal import definition_lines

    def rec(profile: str, metrics: dict[str, object], native: str | None, notes: list[str]) -> ResultRecord:
        return ResultRecord(f"t.py::t[{profile}]", profile, metrics, {"cache_reset": notes},
                            {"accept_length_native": native})  # fmt: skip

    sglang = "Σcompletion_tokens / Σspec_verify_ct"
    records = [
        rec("baseline", {"accept_length": None}, sglang, ["reset: POST /flush_cache"]),
        rec("eagle3", {"accept_length": 2.5, "accept_length_native": 2.68}, sglang,
               ["reset: POST /flush_cache"] * 3),  # fmt: skip
        rec("vllm-eagle3", {"accept_length": 2.7, "accept_length_native": 2.7}, "1 + accepted / drafts",
               ["not reset: POST /reset_prefix_cache answered HTTP 404 ()"]),  # fmt: skip
    ]
    assert definition_lines(records) == [
        "accept_len = 1 + accepted drafts / verify steps (prefill token excluded); "
        "accept_rate = (accept_len - 1) / num_steps",
        "accept_len in the engine's own definition: eagle3 2.68 (Σcompletion_tokens / Σspec_verify_ct), "
        "vllm-eagle3 2.70 (1 + accepted / drafts)",
        "prefix cache before each measured phase: reset: POST /flush_cache (baseline, eagle3)",
        "prefix cache before each measured phase: not reset: POST /reset_prefix_cache answered HTTP 404 () "
        "(vllm-eagle3)",
    ]
    assert definition_lines(records[:1]) == [
        "prefix cache before each measured phase: reset: POST /flush_cache (baseline)"
    ]


def test_position_table_exact_lines_and_junit_per_position() -> None:
    spec = {"accept_rate_at": [0.718, 0.512, 0.35], "accept_rate_cond_at": [0.718, 0.713, None],
            "accept_position_source": "meta_info.spec_correct_drafts_histogram"}
    rows = [
        ("t.py::test_a[eagle3]", "eagle3", spec, "passed"),
        ("t.py::test_a[baseline]", "baseline", {"accept_rate_at": []}, "passed"),
        ("t.py::test_a[short]", "short", {"accept_rate_at": [0.5], "accept_rate_cond_at": [0.5],
                                          "accept_position_source": "counters x"}, "failed"),
    ]
    assert position_lines(rows) == [
        "test            profile          k=1          k=2        k=3  source",
        "test_a[eagle3]  eagle3   0.718/0.718  0.512/0.713  0.350/n/a  meta_info.spec_correct_drafts_histogram",
        "test_a[short]   short    0.500/0.500                          counters x",
    ]
    assert position_lines(rows[1:2]) == []
    assert junit_properties(spec) == [("specdec_accept_rate_at_1", 0.718), ("specdec_accept_rate_at_2", 0.512),
                                      ("specdec_accept_rate_at_3", 0.35), ("specdec_accept_rate_cond_at_1", 0.718),
                                      ("specdec_accept_rate_cond_at_2", 0.713)]


def test_category_table_exact_lines() -> None:
    rows = [
        ("t.py::test_a[eagle3]", "eagle3", {"by_category": {"code": {"accept_length": 2.714, "num_ok": 15},
                                                            "structured": {"accept_length": 2.1, "num_ok": 1}}}, "p"),
        ("t.py::test_a[baseline]", "baseline", {"by_category": {"code": {"accept_length": None, "num_ok": 15}}}, "p"),
        ("t.py::test_a[x]", "x", {}, "p"),
    ]
    assert category_lines(rows) == [  # the baseline row (no speculation) has no accept length: left out
        "test            profile       code  structured",
        "test_a[eagle3]  eagle3   2.71 (15)    2.10 (1)",
    ]
    assert category_lines(rows[1:]) == []  # a server without speculation: no all-"n/a" table


def test_cycle_cost_worked_example_and_line() -> None:
    from pytest_specdec.measure.results import ResultRecord
    from pytest_specdec.report.terminal import cycle_cost, cycle_lines

    rec = ResultRecord(
        test_id="t.py::test_a[eagle3]", profile="eagle3",
        metrics={"accept_length": 2.6, "draft_ms_per_cycle": 3.1, "verify_ms_per_cycle": 9.8},
        repeats={}, fingerprint={"workload": {"concurrency": 1}},
        paired={"vs": "baseline", "target": {"output_tok_s": [140.0, 130.0]},
                "reference": {"output_tok_s": [100.0, 100.0]}},
    )
    # The speedup line's estimate, the geometric mean of 1.4 and 1.3: 1.349; 2.6 / 1.349 = 1.927 (a fresh-user
    # trial read a speedup of 1.17x beside a cost of 2.29 at accept length 2.33: a median of per-pair costs).
    found = cycle_cost(rec)
    assert found is not None and found[0] == pytest.approx(2.6 / (1.4 * 1.3) ** 0.5) and found[1] == 2
    assert cycle_lines([rec, rec]) == [
        "specdec eagle3: a speculative cycle costs 1.93 plain decode steps (accept_len 2.60 / the paired speedup "
        "over baseline, 2 pairs at concurrency 1); speculation pays while the accept length exceeds 1.93 "
        "[server: draft 3.10 ms + verify 9.80 ms per cycle]"
    ]
    assert cycle_lines([dataclasses.replace(rec, paired={})]) == []
    # A traced profile adds the split its engine timed, paired or not.
    from pytest_specdec.measure.trace_split import CycleSplit

    split = CycleSplit(1.3, 0.9, 3.0, 40, "GPU", "SGLang profiler spans in e.trace.json.gz")
    (line,) = cycle_lines([rec], {"eagle3": split})
    assert line.endswith("per cycle] [trace: verify 0.90 ms + draft 1.30 ms a cycle (medians of 40 cycles): verify "
                         "41% of the two; cycle period 3.00 ms (GPU time of SGLang profiler spans in e.trace.json.gz)]")
    assert cycle_lines([dataclasses.replace(rec, paired={})], {"eagle3": split}) == [
        f"specdec eagle3: where the cycle goes [trace: {split.text()}]"]


def test_scheduler_cross_check_says_not_available_after_a_short_phase() -> None:
    """Issue 29.6 (sglang PR 29329): after /flush_cache a phase shorter than decode_log_interval (40) decode steps
    leaves avg_spec_accept_length absent from /server_info (runner._scheduler_covers does not even read it); the
    summary says the check was not available, it does not fail, and a long phase shows both figures. The end-to-end
    run is benchmarks/gpu/short-phase.yaml (output on the reference server in benchmarks/gpu/results-2026-12-02/)."""
    from pytest_specdec.measure.results import ResultRecord
    from pytest_specdec.report.terminal import definition_lines

    def rec(profile: str, engine: str, scheduler: float | None) -> ResultRecord:
        metrics = {"accept_length": 2.62, "accept_length_source": "client", "scheduler_accept_length": scheduler}
        return ResultRecord(f"t.py::t[{profile}]", profile, metrics, {}, {"engine": engine})

    lines = definition_lines([rec("long", "sglang", 2.6149), rec("short", "sglang", None), rec("v", "vllm", None)])
    assert lines[-1] == (
        "scheduler cross-check (avg_spec_accept_length vs accept_len): long 2.61 vs 2.62, short not available "
        "(SGLang folds it only every decode_log_interval (40) decode steps after /flush_cache; phases "
        "under 20 windows are not checked; the verdicts use accept_len)"
    )
    assert definition_lines([rec("long", "reference", 2.62)])[-1] == (
        "scheduler cross-check (avg_spec_accept_length vs accept_len): long 2.62 vs 2.62"
    )
