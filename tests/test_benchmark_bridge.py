"""Tests of pytest_specdec.report.benchmark end to end: real pytest-benchmark runs (pytester), in process where one
run's entry is read, in a subprocess where runs autosave and compare or start xdist workers.

The inner project gets the bridge from the installed plugin (``plugin.py::pytest_configure`` registers it) and records
synthetic measurements: 2.0 s per repeat for ``2 * tok/s`` output tokens.
"""

from __future__ import annotations

import inspect
import json
from pathlib import Path
from typing import Any

import pytest

pytest_benchmark = pytest.importorskip("pytest_benchmark")

from pytest_benchmark.stats import Metadata  # noqa: E402

from pytest_specdec.report import benchmark as bridge  # noqa: E402
from tests.helpers import run_in_process  # noqa: E402

REPO = Path(__file__).resolve().parents[1]

CONFTEST = """
import os
import pytest
from pytest_specdec.report import benchmark as bridge
from pytest_specdec.core.records import RunMetrics
from pytest_specdec.measure.runner import Measurement
import dataclasses


def make(tok_s):
    fields = {f.name: None for f in dataclasses.fields(RunMetrics) if f.default is dataclasses.MISSING}
    fields.update(num_requests=4, num_ok=4, num_errors=0, duration_s=2.0, output_tokens=int(round(2 * tok_s)),
                  output_tok_s=tok_s, accept_length=2.5)
    return Measurement("eagle3", RunMetrics(**fields), (), "h", None, None, None)
"""

TEST = """
import os
import pytest
from conftest import make
from pytest_specdec.report import benchmark as bridge


@pytest.mark.parametrize("profile", ["eagle3"])
def test_tok_s(request, profile):
    toks = [float(x) for x in os.environ["SPECDEC_TOKS"].split(",")]
    added = bridge.record(request, [make(t) for t in toks], {"engine": "reference"})
    assert added is (os.environ.get("SPECDEC_EXPECT", "1") == "1")
    if os.environ.get("SPECDEC_VERDICTS_MEASURED"):  # the test's own verdicts measured more (session.judge)
        more = [float(x) for x in os.environ["SPECDEC_VERDICTS_MEASURED"].split(",")]
        assert bridge.extend(request.config, [make(t) for t in toks + more]) is True
        assert bridge.extend(request.config, [make(t) for t in toks + more]) is False  # nothing new


def test_same_profile_again(request):
    # A second test of the same profile shares its measurement: no second entry (it may have measured more).
    toks = [float(x) for x in (os.environ["SPECDEC_TOKS"] + os.environ.get("SPECDEC_MORE", "")).split(",")]
    assert bridge.record(request, [make(t) for t in toks], {"engine": "reference"}) is False
"""


@pytest.fixture
def project(pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch) -> pytest.Pytester:
    monkeypatch.setenv("PYTHONPATH", str(REPO))
    pytester.makeconftest(CONFTEST)
    # Not test_specdec.py: in process, examples/test_specdec.py may already be the module of that name.
    pytester.makepyfile(test_bridged=TEST)
    return pytester


def _run(project: pytest.Pytester) -> pytest.RunResult:
    """One run writing out.json, in process: no server, and a pytest start in a subprocess costs 2-3 s on a busy
    runner."""
    return run_in_process(project, "--benchmark-json=out.json", benchmark=True)


def test_json_entry_is_seconds_per_token_with_extra_info(
    project: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("SPECDEC_TOKS", "100,80,90")
    result = _run(project)
    assert result.ret == 0
    result.assert_outcomes(passed=2)
    data = json.loads((project.path / "out.json").read_text())
    # Issue 14.7: one entry per profile (two tests of eagle3 -> one row), named after the profile.
    (entry,) = data["benchmarks"]
    assert entry["fullname"] == "specdec[eagle3]"
    assert (entry["name"], entry["param"], entry["params"]) == ("specdec[eagle3]", "eagle3", {"profile": "eagle3"})
    assert entry["group"] == bridge.GROUP
    assert entry["stats"]["data"] == [2.0 / 200, 2.0 / 160, 2.0 / 180]
    assert entry["stats"]["rounds"] == 3
    assert entry["stats"]["ops"] == pytest.approx(3 / (1 / 100 + 1 / 80 + 1 / 90))  # harmonic mean of tok/s
    specdec = entry["extra_info"]["specdec"]
    assert specdec["unit"] == "seconds per output token"
    assert specdec["tests"] == ["test_bridged.py::test_tok_s[eagle3]", "test_bridged.py::test_same_profile_again"]
    assert specdec["per_repeat"]["output_tok_s"] == [100.0, 80.0, 90.0]
    assert specdec["metrics"]["output_tok_s"] == 90.0  # the median of the repeats, not the first (100)
    assert specdec["fingerprint"] == {"engine": "reference"}
    assert "gpus" in data["machine_info"] and "pytest_specdec" in data["machine_info"]


def _five_repeats_entry(project: pytest.Pytester, monkeypatch: pytest.MonkeyPatch) -> dict[str, Any]:
    """The entry after a first measurement of 3 repeats (100, 80, 90 tok/s) and 2 more (70, 60): every repeat in it."""
    monkeypatch.setenv("SPECDEC_TOKS", "100,80,90")
    monkeypatch.setenv("SPECDEC_MORE", ",70,60")
    result = _run(project)
    result.assert_outcomes(passed=2)
    (entry,) = json.loads((project.path / "out.json").read_text())["benchmarks"]
    assert entry["stats"]["rounds"] == 5
    specdec = entry["extra_info"]["specdec"]
    assert specdec["per_repeat"]["output_tok_s"] == [100.0, 80.0, 90.0, 70.0, 60.0]
    assert specdec["metrics"]["output_tok_s"] == 80.0
    return dict(entry)


def test_repeats_a_later_test_measured_join_the_entry(
    project: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A fresh-user trial read pytest-benchmark's "Rounds 3" beside the summary's "5 repeats" of one profile: the
    second test had measured two more (``MeasureHandle.more``). The entry holds every repeat."""
    entry = _five_repeats_entry(project, monkeypatch)
    assert entry["stats"]["data"] == [2.0 / 200, 2.0 / 160, 2.0 / 180, 2.0 / 140, 2.0 / 120]


def test_repeats_the_tests_own_verdicts_measured_join_the_entry(
    project: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A fresh-user trial read "Rounds 3" and the first 3 repeats' median where the compare of the same test had
    measured to 8: the entry is recorded by the fixture, before the verdicts measure on. ``extend`` adds them."""
    monkeypatch.setenv("SPECDEC_VERDICTS_MEASURED", "70,60")
    entry = _five_repeats_entry(project, monkeypatch)
    assert entry["stats"]["median"] == 2.0 / 160
    tests = entry["extra_info"]["specdec"]["tests"]
    assert tests == ["test_bridged.py::test_tok_s[eagle3]", "test_bridged.py::test_same_profile_again"]


@pytest.mark.slow
def test_compare_fail_catches_a_throughput_loss(project: pytest.Pytester, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SPECDEC_TOKS", "100")
    first = project.runpytest_subprocess("--benchmark-autosave", "-p", "no:cacheprovider", timeout=120)
    assert first.ret == 0
    assert len(list((project.path / ".benchmarks").rglob("*.json"))) == 1
    monkeypatch.setenv("SPECDEC_TOKS", "99")
    same = project.runpytest_subprocess(
        "--benchmark-compare", "--benchmark-compare-fail=mean:5%", "-p", "no:cacheprovider", timeout=120
    )
    assert same.ret == 0
    monkeypatch.setenv("SPECDEC_TOKS", "90")
    slow = project.runpytest_subprocess(
        "--benchmark-compare", "--benchmark-compare-fail=mean:5%", "-p", "no:cacheprovider", timeout=120
    )
    assert slow.ret == pytest.ExitCode.TESTS_FAILED
    slow.assert_outcomes(passed=2)
    # Issue 14.7: the summary ends with one line saying why (then pytest's own stats line), not a traceback.
    reason = slow.stdout.lines[-2]
    assert reason.startswith(
        "specdec: pytest-benchmark --benchmark-compare-fail: performance regressed: specdec[eagle3] (0001"
    ), slow.stdout.lines[-3:]
    assert reason.endswith("- Field 'mean' has failed PercentageRegressionCheck: 11.111111111 > 5.000000000")
    assert "Traceback" not in slow.stdout.str() + slow.stderr.str()
    assert "PerformanceRegression" not in slow.stdout.str() + slow.stderr.str()


@pytest.mark.slow
def test_xdist_warns_once_and_records_nothing(project: pytest.Pytester, monkeypatch: pytest.MonkeyPatch) -> None:
    pytest.importorskip("xdist")
    monkeypatch.setenv("SPECDEC_TOKS", "100")
    monkeypatch.setenv("SPECDEC_EXPECT", "0")
    result = project.runpytest_subprocess("-n", "1", "--benchmark-autosave", "-p", "no:cacheprovider", timeout=120)
    assert result.ret == 0
    result.assert_outcomes(passed=2)
    result.stdout.fnmatch_lines([f"*SpecdecWarning: {bridge.XDIST_WARNING}"])
    assert result.stdout.str().count(bridge.XDIST_WARNING) == 1


@pytest.mark.slow
def test_disabled_records_nothing(project: pytest.Pytester, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SPECDEC_TOKS", "100")
    monkeypatch.setenv("SPECDEC_EXPECT", "0")
    result = project.runpytest_subprocess("--benchmark-disable", "-p", "no:cacheprovider", timeout=120)
    assert result.ret == 0
    result.assert_outcomes(passed=2)


def test_private_contract() -> None:
    """Fails when pytest-benchmark changes what ``benchmark._session``/``_entry`` rely on."""
    assert list(inspect.signature(Metadata.__init__).parameters) == ["self", "fixture", "iterations", "options"]
    from pytest_benchmark import plugin, session

    init = inspect.getsource(session.BenchmarkSession.__init__)
    assert "self.benchmarks = []" in init and "self.disabled" in init
    assert "self.performance_regressions = []" in init
    assert "if self.performance_regressions:" in inspect.getsource(session.BenchmarkSession.check_regressions)
    assert "config._benchmarksession = BenchmarkSession(config)" in inspect.getsource(plugin.pytest_configure)
    assert "add_stats=bs.benchmarks.append" in inspect.getsource(plugin.benchmark)
    shape = bridge._FixtureShape("n", "f::n", "g", None, None, {"a": 1})
    entry = bridge._entry(shape, [0.01, 0.02])
    data = entry.as_dict(include_data=True)
    assert (data["name"], data["fullname"], data["group"], data["extra_info"]) == ("n", "f::n", "g", {"a": 1})
    assert data["stats"]["data"] == [0.01, 0.02]
    assert data["stats"]["mean"] == pytest.approx(0.015)
    assert entry.has_error is False
