"""Paired arms (issue 15.1, 14.2): interleaved and bracketed phase order, the paired-ratio verdict, and min_speedup
measured whenever it applies (any profile order, under xdist) or failed with the reason."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from types import SimpleNamespace
from typing import Any

import pytest

from pytest_specdec.cli.main import main
from pytest_specdec.core import stats
from pytest_specdec.core.records import RunMetrics
from pytest_specdec.judge import speedup
from pytest_specdec.measure import pairing
from pytest_specdec.measure.runner import Measurement
from tests.helpers import SHARED_EAGLE3, run_in_process, with_url


def _metrics(tok_s: float) -> RunMetrics:
    fields = {f.name: None for f in dataclasses.fields(RunMetrics)}
    fields.update(num_requests=1, num_ok=1, num_errors=0, duration_s=1.0, output_tokens=int(tok_s))
    fields.update(output_tok_s=tok_s, itl_ms_p50=1000.0 / tok_s)
    return RunMetrics(**fields)


class _Servers:
    """Fake servers whose phases return scripted tok/s, logging the order of phases and restarts."""

    def __init__(self, speeds: dict[str, list[float]]) -> None:
        self.speeds = speeds
        self.log: list[str] = []

    def server(self, name: str) -> Any:
        return SimpleNamespace(profile=SimpleNamespace(name=name), stop=lambda: self.log.append(f"stop {name}"))

    def measure(self, server: Any) -> Measurement:
        name = server.profile.name
        self.log.append(name)
        return Measurement(name, _metrics(self.speeds[name].pop(0)), (), "h", None, None, None)


def test_interleaved_pairs_alternate_order_and_ratio_each_pair() -> None:
    fake = _Servers({"eagle3": [130.0, 120.0, 140.0], "baseline": [100.0, 80.0, 100.0]})
    arms = pairing.measure_interleaved(fake.server("eagle3"), fake.server("baseline"), 3, measure=fake.measure)
    assert fake.log == ["baseline", "eagle3", "eagle3", "baseline", "baseline", "eagle3"]
    assert arms.ratios() == [1.3, 1.5, 1.4]
    assert (arms.mode, arms.pairs, arms.first, arms.reference_profile) == ("interleaved", 3, 3, "baseline")
    record = arms.to_dict()
    assert record["target"]["output_tok_s"] == [130.0, 120.0, 140.0]
    assert record["reference"]["itl_ms_p50"] == [10.0, 12.5, 10.0]


def test_bracketed_measures_target_reference_target_one_server_at_a_time() -> None:
    fake = _Servers({"eagle3": [120.0, 140.0, 100.0, 120.0], "baseline": [100.0, 100.0]})
    target = fake.server("eagle3")
    arms = pairing.measure_bracketed(
        target,
        2,
        start_reference=lambda: (fake.log.append("start baseline"), fake.server("baseline"))[1],
        restart_target=lambda: fake.log.append("restart eagle3"),
        measure=fake.measure,
    )
    assert fake.log == [
        "eagle3", "eagle3", "stop eagle3", "start baseline", "baseline", "baseline", "stop baseline",
        "restart eagle3", "eagle3", "eagle3",
    ]  # fmt: skip
    # pair i: mean(T_i, T'_i) / R_i -- a drift during the bracket cancels
    assert arms.ratios() == [1.1, 1.3]
    assert len(arms.target_measurements()) == 4


def test_sequential_speedup_lines_and_checks() -> None:
    from pytest_specdec.judge import sequential

    design = sequential.Design(2, 6)

    def judge(ratios: list[float]) -> speedup.Speedup:
        return speedup.judge_speedup_sequential(
            ratios, 1.05, design, vs="baseline", mode="interleaved", first=2, exhausted=True,
            detail=lambda d: sequential.detail(d, unit="pairs", server_s=12.0, needed=None, exhausted=True),
        )  # fmt: skip

    passed = judge([1.30, 1.32, 1.31])
    assert passed.verdict == "passed" and passed.check().passed and not passed.check().undecided
    assert passed.line() == (
        "speedup vs baseline 1.31x >= min 1.05x [geometric mean of 3 paired ratios, interleaved; decided after 3 "
        "pairs, CI 1.275-1.346 (97.5%), 12.0 server-s]"
    )
    failed = judge([0.80, 0.81, 0.79])
    assert failed.verdict == "FAILED" and failed.check().passed is False
    undecided = judge([1.00, 1.10, 1.05, 1.02, 1.08, 1.04])
    assert undecided.verdict == "undecided" and undecided.check().passed and undecided.check().undecided
    assert undecided.line().startswith("speedup vs baseline 1.05x: undecided vs min 1.05x [geometric mean of 6 ")
    assert undecided.line().endswith(
        "contains the limit, 12.0 server-s; more pairs would not decide it at this spread (the estimate sits on the "
        "limit)]"
    )


def test_below_test_exact_wilcoxon() -> None:
    assert stats.below_test([0.95, 0.97, 0.96, 0.94, 0.98, 0.99], 1.05).p_value == pytest.approx(1 / 64)
    assert stats.below_test([0.95, 0.97, 1.06], 1.05).p_value == pytest.approx(2 / 8)
    assert not stats.below_test([1.3, 1.2, 1.4], 1.05).significant


def test_pairing_mode_defaults_by_server_kind() -> None:
    def profile(**kw: Any) -> Any:
        base = {"server": "reference", "url": None, "pairing": None}
        return SimpleNamespace(**{**base, **kw})

    assert pairing.pairing_mode(profile()) == "interleaved"
    assert pairing.pairing_mode(profile(server="sglang")) == "bracketed"
    assert pairing.pairing_mode(profile(server="sglang", url="http://h:1")) == "interleaved"
    assert pairing.pairing_mode(profile(server="sglang", pairing="interleaved")) == "interleaved"


# -- end to end: the reference server ----------------------------------------------------------------------------

PROFILES = """
profiles:
  baseline:
    server: reference
    startup_timeout_s: 180
    workload: {max_new_tokens: 16, num_requests: 4, warmup_requests: 1, repeats: 2}
  eagle3:
    extends: baseline
    speculative: {algorithm: EAGLE3, num_steps: 3, eagle_topk: 1, num_draft_tokens: 4}
    thresholds: {min_speedup: {vs: baseline, ratio: @RATIO@}}
"""

TESTS = """
def test_speed(specdec_run):
    pass
"""


def test_with_url_points_the_named_profile_at_a_server_or_raises() -> None:
    """The tests below point a profile at the shared server with ``helpers.with_url``: a profile text that no longer
    has that profile must fail there, not launch a server of its own."""
    text = with_url(with_url(PROFILES, "baseline", "http://127.0.0.1:1"), "eagle3", "null")
    assert "  baseline:\n    url: http://127.0.0.1:1\n    server: reference\n" in text
    assert "  eagle3:\n    url: null\n    extends: baseline\n" in text
    with pytest.raises(ValueError, match="profile 'eagle': 0 lines '  eagle:\\\\n' in the profile text, expected 1"):
        with_url(PROFILES, "eagle", "http://127.0.0.1:1")
    with pytest.raises(ValueError, match="profile 'eagle3': 2 lines"):
        with_url(PROFILES + PROFILES, "eagle3", "http://127.0.0.1:1")


def _project(pytester: pytest.Pytester, ratio: float) -> pytest.Pytester:
    pytester.makefile(".yaml", specdec=PROFILES.replace("@RATIO@", str(ratio)))
    pytester.makepyfile(test_speed=TESTS)
    return pytester


@pytest.mark.slow
def test_min_speedup_passes_with_its_paired_ratio_and_fails_naming_a_reference_arm_that_cannot_start(
    pytester: pytest.Pytester, reference_url: Callable[[str], str]
) -> None:
    """One run of two profiles (one pytest start, not two), the baseline not listed: eagle3 passes with its paired
    ratio in the summary; eagle3-arm-dies, whose reference arm dies at startup, fails with the reason and the arm's
    log. The reference arms are launched (baseline's, and the one that dies); both targets are the session's shared
    eagle3 server (``conftest.reference_url``: two launches saved), which pairs as a launched reference server does
    (interleaved)."""
    _project(pytester, 0.5)
    text = (pytester.path / "specdec.yaml").read_text()
    assert SHARED_EAGLE3 in text  # the shared server runs eagle3's speculative block
    text = with_url(text, "eagle3", reference_url(SHARED_EAGLE3))
    (pytester.path / "specdec.yaml").write_text(
        text.rstrip("\n")
        + "\n  eagle3-arm-dies:\n    extends: eagle3\n    thresholds: {min_speedup: {vs: crashes, ratio: 1.05}}\n"
        + '  crashes:\n    extends: baseline\n    extra_args: ["--ref-fault-oom-at-startup", "0.2"]\n'
    )
    # In process: the servers are processes of their own either way (a pytest start costs 2-3 s on a busy runner).
    result = run_in_process(pytester, "--server-profile=eagle3,eagle3-arm-dies", "-rA")
    result.assert_outcomes(passed=1, failed=1)
    result.stdout.fnmatch_lines(["PASSED test_speed.py::test_speed[[]eagle3[]]*"])
    result.stdout.re_match_lines(
        [
            r"specdec eagle3: speedup vs baseline [0-9.]+x >= min 0.5x \[geometric mean of [0-9]+ paired ratios, "
            r"interleaved; decided after .*\]"
        ]
    )
    assert (pytester.path / ".specdec/logs/baseline.paired.log").is_file()
    result.stdout.re_match_lines(
        [
            r"speedup vs crashes: not measured: reference arm 'crashes': server 'crashes' exited with code 1 before it "
            r"was ready \(cause: out of memory\).*log: .*/crashes.paired.\d{8}T\d{6}Z-\w+.log"
        ]  # fmt: skip
    )
    result.stdout.fnmatch_lines(["FAILED test_speed.py::test_speed[[]eagle3-arm-dies[]]*"])


@pytest.mark.slow
def test_min_speedup_is_measured_once_in_any_order_under_xdist_and_fails_when_unmet(
    pytester: pytest.Pytester, reference_url: Callable[[str], str]
) -> None:
    """The baseline listed second: old code made min_speedup "not applicable" there, a silent pass (and not listed
    at all: the test above). Two test files on two workers: each eagle3 test fails on the one measurement. One run
    checks both (it was two, each starting both servers; issue 45). eagle3 is launched (its tests one xdist unit);
    the baseline, its own tests and eagle3's reference arm, is the session's shared plain server
    (``conftest.reference_url``): one launch, not three."""
    _project(pytester, 50)
    text = (pytester.path / "specdec.yaml").read_text()
    # eagle3 extends baseline: `url: null` keeps it launched.
    text = with_url(with_url(text, "baseline", reference_url("")), "eagle3", "null")
    (pytester.path / "specdec.yaml").write_text(text)
    pytester.makepyfile(test_more="def test_other(specdec_run):\n    pass\n")
    # The controller in process (its xdist workers are processes either way): one interpreter start saved.
    result = run_in_process(pytester, "--server-profile=eagle3,baseline", "-n", "2")
    result.assert_outcomes(failed=2, passed=2)
    assert result.ret == pytest.ExitCode.TESTS_FAILED
    result.stdout.re_match_lines(
        [
            # Two pairs decide it on a quiet machine; a busy one spreads them and a third look decides.
            r".*speedup vs baseline [0-9.]+x < min 50x \[geometric mean of ([0-9]+) paired ratios, interleaved; "
            r"decided after \1 pairs, CI .*, [0-9.]+ server-s\] \[profile eagle3, .*\]",
        ]
    )
    result.stdout.re_match_lines([r"specdec eagle3: speedup vs baseline .* < min 50x .*"])


def test_min_speedup_vs_unknown_profile_is_a_usage_error(
    pytester: pytest.Pytester, capsys: pytest.CaptureFixture[str]
) -> None:
    pytester.makefile(".yaml", specdec=PROFILES.replace("vs: baseline", "vs: basline").replace("@RATIO@", "1.05"))
    pytester.makepyfile(test_speed=TESTS)
    result = run_in_process(pytester, "--server-profile=eagle3", benchmark=True)
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(
        [
            "error: */specdec.yaml:*: profiles.eagle3.thresholds.min_speedup.vs: 'basline' is not another profile of "
            "this file (did you mean 'baseline'?) (available: baseline)"
        ]  # fmt: skip
    )
    # The check CLI runs the same check (a fresh user's finding: it said "profile eagle3: ok").
    # In process too: ``python -m pytest_specdec`` is this ``main`` (tests/test_preflight.py runs the module itself).
    capsys.readouterr()
    assert main(["check", "specdec.yaml"]) == 2
    pytest.LineMatcher(capsys.readouterr().err.splitlines()).fnmatch_lines(
        ["error: specdec.yaml:*: profiles.eagle3.thresholds.min_speedup.vs: 'basline' is not *"]
    )
