"""Baselines a team can trust, end to end on the reference server (few requests, few tokens): a run saved as
``night-1``; a failed, an undecided and an interrupted run after it, none of which ``latest`` takes; an unchanged run
compared by name passes from pytest and from the CLI; an explicit ``--specdec-compare-profile`` on a profile without
speculation compares (and a slowed server fails, in pytest and in the CLI's compare of that night); a slowdown of both
arms fails the speculative profile's raw row.
"""

from __future__ import annotations

import re
from collections.abc import Callable

import pytest

# Imported before any in-process run (pytester drops the modules an inner run imported; numpy.fft cannot be loaded
# twice in one process).
import scipy.stats  # noqa: F401

from pytest_specdec.cli.main import main
from pytest_specdec.judge.baseline import Baselines
from pytest_specdec.measure.results import ResultStore
from tests.helpers import IN_PROCESS_SHOWN_INI, SHARED_EAGLE3, run_in_process, with_url

pytestmark = pytest.mark.slow

#: Wide tolerances: a loaded 2-core runner moves the reference server's tok/s by tens of percent between runs; the
#: slowdown below makes every target forward take 10x its own compute, so plain decoding (nearly all target forward)
#: runs ~8x slower (at 5x: x0.256 at load 3.4), judged at the 50% tolerance (x0.5 its limit) with room for a burst on
#: either run (below). At 20x it was judged at the 80% tolerance (x0.2 its limit) and its 3 slowed repeats took twice
#: as long: 47 s at load 8 (issue 45). A factor, not a fixed sleep: load stretches the compute but not a sleep, so
#: the 60 ms delay it replaces measured x0.195 at load 3 and x0.27 at load 5.
PROFILES = """
profiles:
  baseline:
    server: reference
    tolerances: {tolerances}
    thresholds: {thresholds}
    workload: {{max_new_tokens: 8, num_requests: 2, warmup_requests: 0, {repeats}}}
  baseline-slow:
    extends: baseline
    env: {{SPECDEC_REF_FORWARD_SLOWDOWN: "10"}}
"""
TOLERANCES = ("output_tok_s:50%", "ttft_ms:900%", "itl_ms:900%", "tpot_ms:900%")
TWO = "repeats: 2, max_repeats: 2"
RUN = "def test_run(specdec_run):\n    pass\n"
TEST = "test_night.py::test_run[baseline]"


def _project(
    pytester: pytest.Pytester,
    tests: str = RUN,
    thresholds: str = "{}",
    repeats: str = TWO,
    tolerances: tuple[str, ...] = TOLERANCES,
    url: str | None = None,
) -> None:
    """``url``: the baseline profile (and baseline-slow, which extends it) measures that server, never launches."""
    text = PROFILES.format(tolerances=list(tolerances), thresholds=thresholds, repeats=repeats)
    if url is not None:
        text = with_url(text, "baseline", url)
    pytester.makefile(".yaml", specdec=text)
    pytester.makepyfile(test_night=tests)
    pytester.makeini(IN_PROCESS_SHOWN_INI)


def _run_id(result: pytest.RunResult) -> str:
    found = re.search(r"specdec results: \S+/(\S+)\.json", result.stdout.str())
    assert found is not None, result.stdout.str()
    return found.group(1)


def test_night_1_is_saved_never_replaced_by_an_unclean_run_and_compared_by_name(
    pytester: pytest.Pytester, capsys: pytest.CaptureFixture[str], reference_url: Callable[[str], str]
) -> None:
    """The failed, undecided and interrupted runs stay three runs of their own, each measured on the session's shared
    baseline server (``conftest.reference_url``: three launches saved): ``latest`` passes them over on their
    outcomes and verdicts, whatever server they measured. The night, the compare by name and the slowed server are
    launched: the compares read launched fingerprints (the slowed one's env diff)."""
    _project(pytester)
    # Three repeats, not two: with 2 stored and 2 current repeats the interval has 1 degree of freedom per side, and
    # a night stored under 19% CPU steal (62 and 127 tok/s) left even the 5x slowdown below undecided.
    night = run_in_process(pytester, "--server-profile=baseline", "--specdec-save=night-1", "--specdec-repeats=3")
    night.assert_outcomes(passed=1)
    night.stdout.fnmatch_lines(["specdec: saved as night-1: */names/night-1 names this run"])
    shared = reference_url("")
    _project(pytester, "def test_run(specdec_run):\n    assert False, 'broken'\n", url=shared)
    run_in_process(pytester, "--server-profile=baseline").assert_outcomes(failed=1)
    # One repeat and no more: the min_tok_s floor has no spread to decide on, so it ends undecided and passes.
    _project(pytester, thresholds="{min_tok_s: 1}", repeats="repeats: 1, max_repeats: 1", url=shared)
    run_in_process(pytester, "--server-profile=baseline").assert_outcomes(passed=1)
    _project(pytester, RUN + "\n\ndef test_stop(specdec_run):\n    raise KeyboardInterrupt\n", url=shared)
    assert (
        run_in_process(pytester, "--server-profile=baseline", ctrl_c_ends_run=True).ret == pytest.ExitCode.INTERRUPTED
    )
    store = ResultStore(pytester.path / ".specdec" / "results")
    latest = Baselines.from_option("latest", store)
    assert latest is not None
    found = latest.find(TEST)
    assert found is not None and found.run.run_id == _run_id(night)
    assert [s.split(" ", 1)[1] for s in found.skipped] == ["(interrupted)", "(undecided: min_tok_s)", "(failed)"]

    # The unchanged night at 80% on tok/s: its 1-s phases read x0.462 (CI 0.31-0.70) against night-1 in a clean-clone
    # CI run at load 3.6 (the other worker's server starts taking the cores for a second). The slowed run below is
    # judged at 50%: 10x slower stays beyond it whichever of the two runs a burst slows (20x read x0.13 at worst at
    # 80%, a limit 1.5x above it; 10x at 50% keeps 2x).
    wide = ("output_tok_s:80%", *TOLERANCES[1:])
    _project(pytester, tolerances=wide)
    by_name = run_in_process(pytester, "--server-profile=baseline", "--specdec-compare=night-1")
    by_name.assert_outcomes(passed=1)
    by_name.stdout.fnmatch_lines([f"specdec compare: 1 test(s) compared with stored run {_run_id(night)}: named "
                                  "night-1 (--specdec-compare)"])  # fmt: skip
    # The command line reads no profile: the profile's tolerances are given as pytest had them.
    tolerances = [arg for tol in wide for arg in ("-t", tol)]
    assert main(["compare", "night-1", "latest", *tolerances, "--results-dir", str(store.root)]) == 0
    assert f"specdec compare: baseline {_run_id(night)} -> current {_run_id(by_name)}" in capsys.readouterr().out

    # Without speculation too, an explicit --specdec-compare-profile maps the test: a 10x slower server regresses (at
    # the 50% tolerance).
    _project(pytester)
    slow = run_in_process(pytester, "--server-profile=baseline-slow", "--specdec-compare=night-1",
                "--specdec-compare-profile=baseline", "--specdec-repeats=3")  # fmt: skip
    slow.assert_outcomes(failed=1)
    slow.stdout.fnmatch_lines(
        [
            f"regression against run {_run_id(night)} (test_night.py::test_run[[]baseline[]]):",
            "*env SPECDEC_REF_FORWARD_SLOWDOWN: (unset) -> 10*",
            "output_tok_s *REGRESSED*",
        ]
    )
    # The command repeats pytest's verdict on that night, compared across profiles (issue 43: it read "1 without
    # baseline", exit 0): pytest stores the baseline test it compared with, and ``compare night-1 latest`` with the
    # profile's tolerances and no --compare-profile takes that one, regresses the same row and exits 1 (the same
    # runs as the compares above: no launch of its own; tests/test_compare_as_pytest.py on hand-made runs).
    (latest,) = [r for r in store.load("latest").results if r.profile == "baseline-slow"]
    assert latest.cost["verdicts"]["compare"]["baseline_test"] == TEST
    assert latest.cost["verdicts"]["compare"]["baseline_run"] == _run_id(night)  # the link Baselines.find follows
    tolerances = [arg for tol in TOLERANCES for arg in ("-t", tol)]
    capsys.readouterr()
    assert main(["compare", "night-1", "latest", *tolerances, "--results-dir", str(store.root)]) == 1
    out = capsys.readouterr().out
    assert "== test_night.py::test_run[baseline-slow] (profile baseline-slow, against test_run[baseline])" in out
    assert re.search(r"^output_tok_s .*REGRESSED", out, re.MULTILINE), out
    assert "no baseline" not in out


def test_a_slowdown_of_both_arms_is_not_green_on_the_speculative_profile_either(
    pytester: pytest.Pytester, reference_url: Callable[[str], str]
) -> None:
    """The seed incident's shape (NCCL tuning env lost on a restart: the baseline 88.8 -> 62.9 tok/s and the
    speculative server with it): a forward delay on both profiles. The paired ratio alone cannot see it; the raw row
    of the speculative profile fails too, or, on a busy runner (load per CPU above 1: raw rows take a 68% run-to-run
    sd against one stored run), stays undecided, which ``--specdec-undecided=fail`` (a gate that must not pass an
    unseen regression, docs/ci.md) fails.

    The night measures the session's shared servers of both arms (``conftest.reference_url``: two launches saved;
    the same bundled server and speculative block); the slowed night launches its own, with the delay in their env."""
    eagle3 = (
        "  eagle3:\n    extends: baseline\n"
        "    speculative: {algorithm: EAGLE3, num_steps: 3, eagle_topk: 1, num_draft_tokens: 4}\n"
        "    thresholds: {min_speedup: {vs: baseline, ratio: 0.01}}\n"
        # Room to measure on: a stalled phase on a busy runner leaves 2 repeats undecided (x0.29, CI 0.06-1.4).
        "    workload: {max_new_tokens: 8, num_requests: 2, warmup_requests: 0, repeats: 2, max_repeats: 8}\n"
    )
    _project(pytester, thresholds="{}")
    # The baseline profile gets the same room: 2 repeats against 4, one stalled, leave even a 5x slowdown undecided
    # (the smaller run spreads more, so Welch with ~1 df; seen on CI: the baseline test passed with a warning).
    room = "repeats: 2, max_repeats: 8"
    clean = PROFILES.format(tolerances=list(TOLERANCES), thresholds="{}", repeats=room) + eagle3
    on_shared = with_url(with_url(clean, "baseline", reference_url("")), "eagle3", reference_url(SHARED_EAGLE3))
    pytester.makefile(".yaml", specdec=on_shared)
    # The baseline night with 6 repeats: with 2, one stalled phase on a busy runner can leave it too wide to decide;
    # with 4 at load 5, eagle3's raw x0.455 stayed undecided (CI 0.20-1.01: "the baseline's side keeps the interval
    # open (1 stored run, 4 repeats)", flake hunt seed 219).
    # A night stored through a stalled phase is one the plugin itself calls unusable ("an unchanged run could not pass
    # within 50% against it ... or measure it again on a quieter runner"): do as it says, up to twice more (clean-clone
    # CI at load 10-11: paired ratios 0.48-4.03 in the night, then eagle3's raw x0.375 undecided, CI 0.11-1.23).
    for _ in range(3):
        saved = run_in_process(
            pytester, "--server-profile=baseline,eagle3", "--specdec-save=night-1", "--specdec-repeats=6"
        )
        saved.assert_outcomes(passed=2)
        if "could not pass within" not in saved.stdout.str():
            break
    # Still a fixed delay, not the factor: SPECDEC_REF_FORWARD_SLOWDOWN slows target forwards only, so the speculative
    # arm (its draft steps not slowed) lost far less than the plain one: at 5, baseline x0.256 but eagle3 x0.548,
    # undecided at 5 repeats (CI 0.30-1.01, load 3.4); a factor large enough for eagle3 makes the plain arm ~x0.1.
    delay = '    env: {SPECDEC_REF_FORWARD_DELAY_MS: "60"}\n'  # on baseline, so on eagle3 (extends) too
    slowed = clean.replace("    thresholds: {}\n", "    thresholds: {}\n" + delay, 1)
    pytester.makefile(".yaml", specdec=slowed)
    night = run_in_process(pytester, "--server-profile=baseline,eagle3", "--specdec-compare=night-1",
                           "--specdec-undecided=fail")  # fmt: skip
    night.assert_outcomes(failed=2)
    out = night.stdout.str()
    if "test_night.py::test_run[eagle3]):" not in out:  # its compare undecided: a busy runner, failed by the policy
        assert re.search(r"^\d+ verdicts? undecided at the budget \(--specdec-undecided=fail\):", out, re.M), out
        undecided = out[out.index("specdec compare: test_run[eagle3] (undecided)") :]
        assert re.search(r"^output_tok_s +higher .* undecided \(x0\.", undecided, re.M), out
        assert re.search(r"^(raw|raw and ratio) rows: a busy runner without a GPU", undecided, re.M), undecided
        return
    start = out.index("test_night.py::test_run[eagle3]):")
    # Up to the next test's failure or the summary: the baseline test's own table follows (clean-clone CI read its
    # REGRESSED tok/s row as eagle3's).
    end = re.compile(r"^_{3,} \S.* _{3,}$|^=+ specdec summary =+$", re.M).search(out, start)
    speculative = out[start : end.start() if end else len(out)]
    # Its tok/s row REGRESSED, or, on a busy runner, left open while a latency row regressed (clean-clone CI at load
    # 7: output_tok_s x0.241 undecided at 50% beside itl_ms_p50 x12.7 REGRESSED).
    assert re.search(r"^output_tok_s +higher .* (REGRESSED|undecided) \(x0\.", speculative, re.M), out
    ratio = re.search(r"^output_tok_s / baseline +higher .*", speculative, re.M)
    assert ratio is not None and "REGRESSED" not in ratio.group(0), out
    if not re.search(r"^output_tok_s +higher .* REGRESSED", speculative, re.M):
        # Another raw row regressed; its note says both arms slowed or, where that row's own ratio is still open,
        # that more pairs would tell both arms from the target alone (flake hunt 29 at load 5.7: output_tok_s x0.159
        # undecided beside itl_ms_p50 x12.1 REGRESSED, whose ratio row spread 162%).
        either = r"(both arms slower|raw REGRESSED, the ratio to 'baseline' undecided: both arms slower, or the target)"
        assert re.search(rf"^[\w_]+(, [\w_]+)*: {either}", speculative, re.M), speculative
        return
    # The note lists every raw row that fell while its ratio held (``output_tok_s, itl_ms_p50: ...``); a ratio row
    # still undecided (a busy runner) is not called held.
    note = r"both arms slower alike \(raw REGRESSED, the ratio to 'baseline' held\)"
    if " undecided (" in ratio.group(0):
        note = r"raw REGRESSED, the ratio to 'baseline' undecided: both arms slower, or the target alone"
    elif " improved (" in ratio.group(0):  # the reference arm slowed more than the target (60 ms a forward each)
        note = r"both arms slower \(raw REGRESSED\), the reference arm more \(the ratio to 'baseline' improved\)"
    assert re.search(rf"^([\w_]+, )*output_tok_s(, [\w_]+)*: {note}", speculative, re.M), speculative


def test_a_compare_after_min_speedup_never_measures_past_max_repeats(
    pytester: pytest.Pytester, reference_url: Callable[[str], str]
) -> None:
    """min_speedup adds pairs first; the compare then starts from every repeat measured, not from the first
    measurement (seen live: ``compare FAILED after 25 repeats`` with max_repeats 24: one pair more than allowed).

    Both arms are the session's shared server (``conftest.reference_url``; four launches saved): paired with itself,
    the ratio sits at 1.0, and only the repeat counts are read."""
    eagle3 = (
        "  eagle3:\n    extends: baseline\n    url: {url}\n"
        "    speculative: {{algorithm: EAGLE3, num_steps: 3, eagle_topk: 1, num_draft_tokens: 4}}\n"
        "    thresholds: {{min_speedup: {{vs: twin, ratio: {ratio}}}}}\n"
        "    workload: {{max_new_tokens: 8, num_requests: 2, warmup_requests: 0, repeats: 2, max_repeats: 4}}\n"
        # Paired with an identical server, the ratio sits at 1.0: a floor of 1.0 stays undecided to the budget.
        "  twin:\n    extends: baseline\n    url: {url}\n"
        "    speculative: {{algorithm: EAGLE3, num_steps: 3, eagle_topk: 1, num_draft_tokens: 4}}\n"
        "    workload: {{max_new_tokens: 8, num_requests: 2, warmup_requests: 0, repeats: 2, max_repeats: 4}}\n"
    )
    url = reference_url(SHARED_EAGLE3)
    _project(pytester)
    head = PROFILES.format(tolerances=["output_tok_s:1%"], thresholds="{}", repeats=TWO)
    pytester.makefile(".yaml", specdec=head + eagle3.format(ratio=0.01, url=url))
    first = run_in_process(pytester, "--server-profile=eagle3")
    first.assert_outcomes(passed=1)
    pytester.makefile(".yaml", specdec=head + eagle3.format(ratio=1.0, url=url))
    night = run_in_process(pytester, "--server-profile=eagle3", "--specdec-compare")
    line = re.search(r"^specdec server time: test_run\[eagle3\]: .*", night.stdout.str(), re.M)
    assert line is not None, night.stdout.str()
    counts = [int(n) for n in re.findall(r"(?:after|,) (\d+) (?:repeats|pairs)", line.group(0))]
    assert counts and max(counts) <= 4, line.group(0)
