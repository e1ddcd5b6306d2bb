"""`python -m pytest_specdec trend` (issue 15.7): change points over stored runs, a drift that passes every night."""

from __future__ import annotations

import re
from pathlib import Path

import numpy as np
import pytest

from pytest_specdec.cli.main import main
from pytest_specdec.measure.results import ResultRecord, ResultStore, RunFile
from pytest_specdec.report.change_points import change_points, series_from_runs

pytest.importorskip("ruptures")


def test_step_is_found_and_flat_noise_is_not() -> None:
    rng = np.random.default_rng(7)
    step = list(100 + rng.normal(0, 1, 8)) + list(90 + rng.normal(0, 1, 8))
    assert [i for i, _ in change_points(step)] == [8]
    assert change_points(list(100 + rng.normal(0, 3, 20))) == []
    assert change_points([2.63] * 12) == []  # exact metrics: constant, nothing to split


def _store(tmp_path: Path, tok_s: list[float], ratios: list[float]) -> Path:
    store = ResultStore(tmp_path / "results")
    for night, (value, ratio) in enumerate(zip(tok_s, ratios, strict=True)):
        paired = {"vs": "baseline", "target": {"output_tok_s": [value]}, "reference": {"output_tok_s": [value / ratio]}}
        record = ResultRecord(
            "t.py::test_x[eagle3]", "eagle3", {"output_tok_s": value}, {"output_tok_s": [value]}, {}, paired=paired
        )
        store.save(RunFile(f"202611{night + 1:02d}T030000Z-00000{night % 10}", 1_764_000_000.0 + night * 86400,
                           results=(record,)))  # fmt: skip
    return store.root


def test_cli_reports_a_slow_drift_in_the_paired_ratio(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    # Raw tok/s swings with the runner's load; the ratio to the paired baseline drifts down 1 % a night from night 9:
    # each night passes a 5 % compare against the night before.
    rng = np.random.default_rng(3)
    ratios = [1.40 + e for e in rng.normal(0, 0.004, 8)] + [1.40 * (1 - 0.01 * i) for i in range(1, 9)]
    tok_s = list(130 + rng.normal(0, 15, 16))
    root = _store(tmp_path, tok_s, ratios)
    assert main(["trend", "--results-dir", str(root)]) == 1
    out = capsys.readouterr().out.splitlines()
    assert out[0].startswith("specdec trend: 16 runs, 2 series; change points by binary segmentation (ruptures")
    assert out[1].startswith("t.py::test_x[eagle3] output_tok_s / baseline: ")
    # A drift has no sharp onset: the split lands inside it (here after night 10 of 16).
    assert re.fullmatch(
        r"  at run 202611(09|1[0-3])T030000Z-\d+ \(#(9|1[0-3]), .* UTC\): 1\.39\d* -> 1\.3\d* \(-\d\.\d%, worse\), "
        r"p=[0-9.e-]+ \(Welch t, \d+ vs \d+ runs\)",
        out[2],
    ), out[2]
    assert not any(line.startswith("t.py::test_x[eagle3] output_tok_s: ") for line in out)


def test_cli_needs_enough_runs(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    root = _store(tmp_path, [100.0, 101.0], [1.4, 1.4])
    assert main(["trend", str(root)]) == 2
    assert capsys.readouterr().err.startswith("error: 2 run(s) found; trend needs at least 6")


def test_series_keep_run_order_and_reject_unknown_fields(tmp_path: Path) -> None:
    root = _store(tmp_path, [100.0, 90.0, 95.0], [1.4, 1.3, 1.35])
    runs = [RunFile.from_dict(__import__("json").loads(p.read_text())) for p in sorted(root.glob("*.json"))]
    (raw, ratio) = series_from_runs(list(reversed(runs)))
    assert raw.values == (100.0, 90.0, 95.0) and ratio.metric == "output_tok_s / baseline"
    with pytest.raises(ValueError, match="unknown metric field 'tok_s'"):
        series_from_runs(runs, ["tok_s"])
