"""Tests of pytest_specdec.report.plots and ``python -m pytest_specdec plot``: real PNGs from synthetic and stored runs.

Pixels are checked for colours only one element draws: the gold best-point star, the red crosses of failed points,
the red threshold lines.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from pytest_specdec.cli.main import main
from pytest_specdec.judge import sweep
from pytest_specdec.measure.results import ResultRecord, ResultStore, RunFile
from pytest_specdec.report.plots import metric_label, plot_sweep, plot_trend, trend_points, trend_title
from tests.helpers import record, repeated_records, seed_records

image = pytest.importorskip("matplotlib.image")

GOLD = (1.0, 215 / 255, 0.0)
RED = (1.0, 0.0, 0.0)


def pixels(path: Path, rgb: tuple[float, float, float]) -> int:
    """How many pixels of the PNG are within 0.2 of ``rgb`` on every channel (antialiased edges included; no
    other colour of the palette, C0..C9 or grey, comes that close to pure red or gold)."""
    data = image.imread(str(path))[..., :3]
    return int(np.all(np.abs(data - np.asarray(rgb)) < 0.2, axis=-1).sum())


def png_size(path: Path) -> tuple[int, int]:
    data = image.imread(str(path))
    return data.shape[1], data.shape[0]


def test_plot_sweep_marks_best_and_failed_points(tmp_path: Path) -> None:
    records = repeated_records(failed=(1,))
    points = sweep.sweep_records(records)
    ok = sweep.thresholds_ok(records)
    out = plot_sweep(
        points,
        tmp_path / "plots" / "sweep.png",
        baselines=sweep.baseline_records(records, None),
        best=sweep.best_points(points, thresholds_ok=ok),
        thresholds_ok=ok,
    )
    assert out == tmp_path / "plots" / "sweep.png"
    assert out.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert png_size(out)[0] == 800
    assert pixels(out, GOLD) > 20
    assert pixels(out, RED) > 20


def test_plot_sweep_without_best_or_failures_has_neither_mark(tmp_path: Path) -> None:
    records = seed_records()
    out = plot_sweep(sweep.sweep_records(records), tmp_path / "sweep.png")
    assert pixels(out, GOLD) == 0
    assert pixels(out, RED) == 0


def test_plot_sweep_rejects_records_that_are_not_points(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match=r"^plot_sweep: 'baseline' is not a sweep point \(expected NAME@KEY=VALUE\)$"):
        plot_sweep([record("baseline", 88.8, None)], tmp_path / "x.png")
    with pytest.raises(ValueError, match="^plot_sweep: no sweep points to plot$"):
        plot_sweep([], tmp_path / "x.png")


def test_metric_label_has_the_unit() -> None:
    assert metric_label("output_tok_s") == "output_tok_s (tok/s)"
    assert metric_label("ttft_ms_p50") == "ttft_ms_p50 (ms)"
    assert metric_label("accept_length") == "accept_length (tokens/verify step)"


def three_runs(root: Path) -> list[Path]:
    """Three stored runs, one hour apart, eagle3 getting slower, baseline steady."""
    store = ResultStore(root)
    paths = []
    for i, tok_s in enumerate((120.0, 110.0, 95.0)):
        records = (
            _named(record("baseline", 85.0, None), "baseline"),
            _named(record("eagle3", tok_s, 2.6 - 0.1 * i), "eagle3"),
        )
        run = RunFile(run_id=f"20261130T1{i}0000Z-00000{i}", started=1795000000.0 + 3600 * i, results=records)
        paths.append(store.save(run))
    return paths


def _named(rec: ResultRecord, profile: str) -> ResultRecord:
    return ResultRecord(f"examples/test_specdec.py::test_profile_thresholds[{profile}]", profile, rec.metrics, {},
                        rec.fingerprint, outcome="passed")  # fmt: skip


def test_plot_trend_from_three_runs_with_thresholds(tmp_path: Path) -> None:
    runs = [ResultStore(tmp_path / "results").load(p.stem) for p in three_runs(tmp_path / "results")[::-1]]
    out = plot_trend(runs, tmp_path / "trend.png", thresholds={"output_tok_s": 100.0, "ttft_ms_p50": 50.0})
    assert out.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    width, height = png_size(out)
    assert height == 880  # 100 dpi x (2.6 in per panel x 3 panels: the two defaults and ttft_ms_p50, + 1 in)
    assert pixels(out, RED) > 50


def _spread_runs(hours: tuple[float, ...], failed_at: int | None) -> list[RunFile]:
    """eagle3 with three repeats (tok/s median 100, min 96, max 105) per run; a baseline-only run at the end."""
    runs = []
    for i, h in enumerate(hours):
        repeats = {"output_tok_s": [96.0, 100.0, 105.0], "accept_length": [2.6, 2.6, 2.6]}
        rec = ResultRecord("t.py::test_x[eagle3]", "eagle3", {"output_tok_s": 100.0, "accept_length": 2.6}, repeats,
                           {}, outcome="failed" if i == failed_at else "passed")  # fmt: skip
        runs.append(RunFile(run_id=f"r{i}-abc{i}", started=1795000000.0 + 3600 * h, results=(rec,)))
    base = ResultRecord("t.py::test_x[baseline]", "baseline", {"output_tok_s": 80.0}, {"output_tok_s": [80.0]}, {})
    runs.append(RunFile(run_id="r9-base", started=1795000000.0 + 3600 * 11, results=(base,)))
    return runs


def test_trend_points_carry_repeat_spread_failures_and_start_times() -> None:
    runs = _spread_runs((0, 1, 10), failed_at=1)
    points = trend_points(runs[::-1], "output_tok_s", ["eagle3"])
    assert [(p.run_id, p.value, p.low, p.high, p.failed) for p in points] == [
        ("r0-abc0", 100.0, 96.0, 105.0, False),
        ("r1-abc1", 100.0, 96.0, 105.0, True),
        ("r2-abc2", 100.0, 96.0, 105.0, False),
    ]
    assert [p.started - points[0].started for p in points] == [0.0, 3600.0, 36000.0]
    assert [p.profile for p in trend_points(runs, "output_tok_s")][-1] == "baseline"
    assert [p.profile for p in trend_points(runs, "accept_length")] == ["eagle3"] * 3  # n/a: no point


def test_plot_trend_marks_the_failed_run_where_it_happened_in_time(tmp_path: Path) -> None:
    # Runs at 0 h, 1 h and 10 h: the failed run (1 h) sits near the left edge, not in the middle as with even spacing.
    out = plot_trend(_spread_runs((0, 1, 10), failed_at=1), tmp_path / "t.png", metrics=["output_tok_s"],
                     profiles=["eagle3"])  # fmt: skip
    data = image.imread(str(out))[..., :3]
    red = np.all(np.abs(data - np.asarray(RED)) < 0.2, axis=-1)
    columns = np.nonzero(red)[1] / data.shape[1]
    in_panel = columns[columns < 0.8]  # the legend's cross sits right of the panel
    assert in_panel.size > 30
    assert in_panel.mean() < 0.3
    clean = plot_trend(_spread_runs((0, 1, 10), failed_at=None), tmp_path / "c.png", metrics=["output_tok_s"])
    assert pixels(clean, RED) == 0


def test_trend_title_names_the_chosen_profiles() -> None:
    assert trend_title(["eagle3"], 3) == "specdec trend of eagle3 over 3 run(s)"
    assert trend_title(None, 4) == "specdec trend over 4 run(s)"


def test_cli_plot_counts_only_runs_of_the_chosen_profile(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    store = ResultStore(tmp_path / "results")
    for run in _spread_runs((0, 1, 10), failed_at=None):
        store.save(run)
    out = tmp_path / "trend.png"
    assert main(["plot", str(tmp_path / "results"), "-o", str(out), "--profile", "eagle3"]) == 0
    assert capsys.readouterr().out == f"wrote {out} (3 runs)\n"
    assert main(["plot", str(tmp_path / "results"), "-o", str(out)]) == 0
    assert capsys.readouterr().out == f"wrote {out} (4 runs)\n"


def test_plot_trend_errors(tmp_path: Path) -> None:
    runs = [RunFile(run_id="r1", started=1.0, results=(record("eagle3", 90.0, 2.0),))]
    with pytest.raises(ValueError, match=r"^plot_trend: no results of profile\(s\) nope in 1 run\(s\)$"):
        plot_trend(runs, tmp_path / "x.png", profiles=["nope"])
    with pytest.raises(ValueError, match="^plot_trend: no runs to plot$"):
        plot_trend([], tmp_path / "x.png")


def test_cli_plot_three_stored_runs(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    paths = three_runs(tmp_path / "results")
    out = tmp_path / "trend.png"
    args = ["plot", str(paths[0]), paths[1].stem, paths[2].stem[:12], "--results-dir", str(tmp_path / "results")]
    assert main([*args, "-o", str(out), "--threshold", "output_tok_s=100"]) == 0
    assert capsys.readouterr().out == f"wrote {out} (3 runs)\n"
    assert pixels(out, RED) > 50


def test_cli_plot_a_directory_and_no_threshold(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    three_runs(tmp_path / "results")
    out = tmp_path / "trend.png"
    assert main(["plot", str(tmp_path / "results"), "-o", str(out), "--metric", "output_tok_s"]) == 0
    assert capsys.readouterr().out == f"wrote {out} (3 runs)\n"
    assert pixels(out, RED) == 0
    assert png_size(out)[1] == 360  # one panel


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--metric", "tok_s"], "error: --metric=tok_s: not a metric field (available: num_requests, num_ok, "),
        (["--metric", "tails"], "error: --metric=tails: not a metric field (available: "),  # a mapping, not a number
        (
            ["--threshold", "output_tok_s"],
            "error: --threshold=output_tok_s: expected FIELD=NUMBER with FIELD a metric "
            "field, e.g. --threshold output_tok_s=80\n",
        ),  # fmt: skip
        (["--threshold", "output_tok_s=fast"], "error: --threshold=output_tok_s=fast: expected FIELD=NUMBER"),
        (["nope"], "error: no run 'nope': not a file and no run id in "),
        (
            ["--profile", "eagle4"],
            "error: --profile=eagle4: no such profile in 3 run(s) (did you mean 'eagle3'?) (available: baseline, "
            "eagle3)\n",
        ),
        (
            ["--profile", "eagle3", "--profile", "xyz"],
            "error: --profile=xyz: no such profile in 3 run(s) (available: baseline, eagle3)\n",
        ),
    ],
)
def test_cli_plot_errors(tmp_path: Path, capsys: pytest.CaptureFixture[str], args: list[str], message: str) -> None:
    three_runs(tmp_path / "results")
    code = main(["plot", "--results-dir", str(tmp_path / "results"), "-o", str(tmp_path / "t.png"), *args])
    assert code == 2
    assert capsys.readouterr().err.startswith(message)
    assert not (tmp_path / "t.png").exists()


def test_cli_plot_unreadable_run_file(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    bad = tmp_path / "bad.json"
    bad.write_text("{not json")
    assert main(["plot", str(bad), "-o", str(tmp_path / "t.png")]) == 2
    assert capsys.readouterr().err.startswith(f"error: {bad}: not JSON: ")


def test_plot_sweep_draws_the_accept_floor_and_names_the_missed_threshold(tmp_path: Path) -> None:
    """Issue 14.6: the threshold line on the accept-length axis, and the failed point says which threshold."""
    import dataclasses

    records = seed_records(failed=(1,))
    points = sweep.sweep_records(records)
    ok = sweep.thresholds_ok(records)
    plain = plot_sweep(points, tmp_path / "plain.png", thresholds_ok=ok)
    named = [dataclasses.replace(p, checks={"min_accept_length": "FAILED: accept_length 1.8 < min 2.4"},
                                 repeats={"output_tok_s": [88.0, 90.1, 93.0]}) if p.profile.endswith("=1") else p
             for p in points]  # fmt: skip
    out = plot_sweep(named, tmp_path / "named.png", thresholds_ok=ok, accept_floor=2.4)
    purple = (0.6, 0.0, 0.6)
    assert pixels(plain, purple) == 0
    assert pixels(out, purple) > 50
    assert pixels(out, RED) > pixels(plain, RED) + 20  # "missed accept_length" in red beside the cross


def test_plot_trend_of_one_run_spans_two_hours_not_years(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A single run's dates would have a zero-width range, which matplotlib widened to 2025-2029 (issue 27)."""
    from matplotlib.dates import num2date

    from pytest_specdec.report import plots

    figures: list[object] = []
    monkeypatch.setattr(plots, "_save", lambda fig, path: figures.append(fig) or path)
    one = _spread_runs((0,), failed_at=None)[:1]
    plot_trend(one, tmp_path / "one.png", metrics=["output_tok_s"])
    low, high = (num2date(x) for x in figures[0].axes[0].get_xlim())  # type: ignore[attr-defined]
    assert (high - low).total_seconds() == 2 * 3600
    assert low.timestamp() == one[0].started - 3600


def test_plot_sweep_stars_every_tied_point_and_says_undecided(tmp_path: Path) -> None:
    """Issue 24.2: points the measurements cannot tell apart from the best are starred too, not one star."""
    records = repeated_records()
    points = sweep.sweep_records(records)
    ok = sweep.thresholds_ok(records)
    (group,) = sweep.rank_points(points, thresholds_ok=ok)
    one = plot_sweep(points, tmp_path / "one.png", best=[group.best], thresholds_ok=ok)
    tied = plot_sweep(points, tmp_path / "tied.png", best=[group.best], tied=points[2:], thresholds_ok=ok)
    assert pixels(tied, GOLD) > pixels(one, GOLD) + 40  # two more stars (and their legend entry)
    undecided = plot_sweep(points, tmp_path / "undecided.png", thresholds_ok=ok, note="undecided: 1 repeat per point")
    assert pixels(undecided, GOLD) == 0
    assert pixels(undecided, (0.25, 0.25, 0.25)) > pixels(plot_sweep(points, tmp_path / "x.png"), (0.25, 0.25, 0.25))


def test_plot_sweep_labels_a_tied_leader_highest_not_best(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A leader tied with other points is "highest" on the plot, as in the table (``<- highest``); "best" only for
    one separated from every other point."""
    from pytest_specdec.report import plots

    figures: list[object] = []
    monkeypatch.setattr(plots, "_save", lambda fig, path: figures.append(fig) or path)
    records = repeated_records()
    points = sweep.sweep_records(records)
    ok = sweep.thresholds_ok(records)
    (group,) = sweep.rank_points(points, thresholds_ok=ok)
    plot_sweep(points, tmp_path / "one.png", best=[group.best], thresholds_ok=ok)
    plot_sweep(points, tmp_path / "tied.png", best=[group.best], tied=points[2:], thresholds_ok=ok)

    def words(fig: object) -> list[str]:
        ax = fig.axes[0]  # type: ignore[attr-defined]
        return [t.get_text() for t in ax.texts] + [t.get_text() for t in ax.get_legend().get_texts()]

    alone, tied = (words(fig) for fig in figures)
    assert "best: 94.0 tok/s" in alone and "best point: eagle3@num_steps=2" in alone
    assert "highest: 94.0 tok/s" in tied and not any(w.startswith("best") for w in tied)
    assert "highest point: eagle3@num_steps=2 (not separated from the ties)" in tied
    assert "tied with the highest (not separated)" in tied


def test_plot_sweep_draws_the_accept_floor_only_where_it_applies(tmp_path: Path) -> None:
    """Issue 24.2: a floor that is n/a at a point (the table says so) is not drawn over it, so it cannot look failed."""
    import dataclasses

    records = seed_records()
    points = sweep.sweep_records(records)
    floors = {p.profile: 2.5 for p in points}
    everywhere = plot_sweep(points, tmp_path / "all.png", accept_floors=floors)
    na = [dataclasses.replace(p, checks={"min_accept_length": "n/a: at num_steps 1 accept length is at most 2"})
          if not p.profile.endswith("=4") else p for p in points]  # fmt: skip
    one = plot_sweep(na, tmp_path / "one.png", accept_floors=floors)
    purple = (0.6, 0.0, 0.6)
    assert pixels(one, purple) > 20  # the segment at num_steps 4 and the legend
    assert pixels(everywhere, purple) > pixels(one, purple) + 100  # three more segments


def _at_rate(profile: str, tok_s: float, rate: float, p99: float) -> ResultRecord:
    r = record(profile, tok_s, None)
    r.fingerprint["workload"]["request_rate"] = rate
    r.metrics["ttft_ms_p99"] = p99
    return r


def test_load_curve_one_line_per_profile_sorted_by_rate(tmp_path: Path) -> None:
    from pytest_specdec.report.plots import load_curve_series, plot_load_curve

    records = [
        _at_rate("eagle3@request_rate=6", 31.4, 6, 1010.0),
        _at_rate("baseline@request_rate=2", 25.1, 2, 230.0),
        _at_rate("eagle3@request_rate=2", 24.9, 2, 500.0),
        _at_rate("baseline@request_rate=6", 40.3, 6, 402.0),
        record("closed", 50.0, None),  # a closed loop has no place on a load curve
    ]
    assert load_curve_series(records) == {
        "eagle3": [(2.0, 24.9, 500.0), (6.0, 31.4, 1010.0)],
        "baseline": [(2.0, 25.1, 230.0), (6.0, 40.3, 402.0)],
    }
    out = plot_load_curve(records, tmp_path / "load.png")
    assert out is not None and out.read_bytes()[:4] == b"\x89PNG"
    assert plot_load_curve(records[:1], tmp_path / "one.png") is None  # one rate: no curve
