"""Tests of pytest_specdec.judge.noise: tolerances proposed from the spread of repeated runs."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import pytest

from pytest_specdec.cli.main import main
from pytest_specdec.core.tolerances import Tolerance
from pytest_specdec.judge.noise import calibrate_proposal, measurements, paired_arm
from pytest_specdec.measure.results import ResultRecord, ResultStore, RunFile
from tests.helpers import rec


def test_calibrate_proposal() -> None:
    runs = [rec(output_tok_s=[v], accept_length=[2.0]) for v in (98.0, 100.0, 101.0, 103.0, 100.0)]
    # tok/s: sigma = 1.4826 * MAD 1 -> 3 * 1.4826 % = 4.45 % -> 4.5 %; accept length constant -> the 1 % floor
    assert calibrate_proposal(runs) == {"output_tok_s": Tolerance(rel=0.045), "accept_length": Tolerance(rel=0.01)}


def _paired(test: str, target: list[float], reference: list[float]) -> ResultRecord:
    record = rec(test, output_tok_s=target)
    paired = {"vs": "baseline", "target": {"output_tok_s": target}, "reference": {"output_tok_s": reference}}
    return dataclasses.replace(record, paired=paired)


def test_calibrate_counts_measurements_not_tests(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Two tests of one profile in one run read one measurement: two run files of two such tests are 2
    measurements, and their values are pooled once (the later test's record, with more repeats, is kept)."""
    monkeypatch.chdir(tmp_path)
    files = []
    for run_id, tok_s in (("a", [98.0, 100.0, 101.0]), ("b", [103.0, 100.0, 100.0])):
        first = rec("t.py::test_a[eagle3]", output_tok_s=tok_s[:2], accept_length=[2.6, 2.6])
        later = rec("t.py::test_b[eagle3]", output_tok_s=tok_s, accept_length=[2.6] * 3)
        files.append(str(ResultStore(tmp_path).save(RunFile(run_id=run_id, started=0.0, results=(first, later)))))
    assert [len(r.values("output_tok_s")) for r in measurements([("a", first), ("a", later)])] == [3]
    assert main(["calibrate", "--from", *files]) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[0] == (
        "# noise from 2 measurement(s) (4 tests: the tests of a profile in one run share its measurement) -> "
        ".specdec/noise/eagle3.json (--specdec-compare reads it: a shift must exceed 3 sigma)"
    )
    assert json.loads((tmp_path / ".specdec/noise/eagle3.json").read_text())["runs"] == 2
    assert "#   output_tok_s: sigma 0.74%" in out


def test_calibrate_proposes_paired_fields_from_the_paired_ratios(capsys: pytest.CaptureFixture[str]) -> None:
    """The runner's load moves both arms (raw tok/s 60..100): the compare judges the ratio, whose spread is small."""
    runs = [
        _paired("t.py::test_x[eagle3]", [60.0, 80.0, 100.0], [50.0, 66.0, 84.0]),
        _paired("t.py::test_x[eagle3]", [90.0, 70.0, 95.0], [75.0, 58.0, 79.0]),
    ]
    assert paired_arm(runs) == "baseline"
    proposal = calibrate_proposal(runs, ["output_tok_s"])
    assert proposal == {"output_tok_s": Tolerance(rel=0.013)}
    assert calibrate_proposal([dataclasses.replace(r, paired={}) for r in runs], ["output_tok_s"]) == {
        "output_tok_s": Tolerance(rel=0.655)
    }
