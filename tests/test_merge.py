"""``python -m pytest_specdec merge``: shards of one suite -> one run, one markdown summary, one trend."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from pytest_specdec.cli.main import main
from pytest_specdec.measure.results import ResultRecord, ResultStore, RunFile, profile_definition, read_run_file
from pytest_specdec.profiles.schema import Profile
from pytest_specdec.report.merge import load_shards, merge_problems, merge_runs, merged_run_id

COMMIT = {"id": "1a2b3c4d5e6f7a8b9c0d", "dirty": False, "branch": "main"}


def definition(**workload: Any) -> dict[str, Any]:
    return profile_definition(Profile(name="x", workload=workload))


def record(test: str, profile: str, tok_s: float, *, definition_: dict[str, Any] | None = None) -> ResultRecord:
    fp = {"profile_def": definition_ if definition_ is not None else definition(), "host": "gpu-a"}
    metrics = {"output_tok_s": tok_s, "accept_length": 2.5, "num_ok": 16}
    return ResultRecord(f"tests/test_s.py::{test}[{profile}]", profile, metrics, {}, fp, outcome="passed")


def shard(
    root: Path, run_id: str, started: float, records: list[ResultRecord], commit: dict[str, Any] | None = None
) -> Path:
    run = RunFile(run_id, started, {"host": run_id[-1], "commit": COMMIT if commit is None else commit},
                  tuple(records))  # fmt: skip
    return ResultStore(root / run_id / "results").save(run)


@pytest.fixture
def shards(tmp_path: Path) -> Path:
    root = tmp_path / "shards"
    shard(root, "20261201T020000Z-aaaaaa", 1000.0, [record("test_a", "baseline", 90.0)])
    shard(root, "20261201T020100Z-bbbbbb", 1060.0, [record("test_a", "eagle3", 130.0),
                                                   record("test_b", "eagle3", 130.0)])  # fmt: skip
    return root


def test_merge_writes_one_run_markdown_and_store(shards: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                                 monkeypatch: pytest.MonkeyPatch) -> None:  # fmt: skip
    monkeypatch.delenv("GITHUB_STEP_SUMMARY", raising=False)
    store = tmp_path / "store"
    md = tmp_path / "summary.md"
    ret = main(["merge", str(shards), "--results-dir", str(store), "--markdown", str(md)])
    out = capsys.readouterr().out
    assert ret == 0
    files = ResultStore(store).list()
    assert len(files) == 1
    merged = read_run_file(files[0])
    assert [r.test_id for r in merged.results] == [
        "tests/test_s.py::test_a[baseline]",
        "tests/test_s.py::test_a[eagle3]",
        "tests/test_s.py::test_b[eagle3]",
    ]
    assert merged.started == 1000.0
    assert [s["run_id"] for s in merged.machine["shards"]] == ["20261201T020000Z-aaaaaa", "20261201T020100Z-bbbbbb"]
    assert f"merged 2 runs (3 results) into {files[0]}" in out
    text = md.read_text()
    assert text.startswith("## specdec summary (2 shards merged)\n")
    assert "| `test_b[eagle3]` | eagle3 | 130.0 | 2.50 | n/a | n/a | n/a | ✅ passed |" in text
    assert "| `20261201T020100Z-bbbbbb` | b | 2 |" in text
    # Merging the same shards again replaces the same run instead of adding a second one.
    assert main(["merge", str(shards), "--results-dir", str(store)]) == 0
    assert ResultStore(store).list() == files


def test_merge_refuses_different_commits(shards: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    other = {"id": "9f8e7d6c5b4a39281706", "dirty": False, "branch": "main"}
    path = shard(shards, "20261201T020200Z-cccccc", 1100.0, [record("test_c", "eagle3", 1.0)], commit=other)
    ret = main(["merge", str(shards), "--results-dir", str(tmp_path / "store")])
    err = capsys.readouterr().err
    assert ret == 1
    assert err.splitlines() == [
        "error: cannot merge 3 runs:",
        "the runs measured different code:",
        f"  commit 1a2b3c4d5e6f: 20261201T020000Z-aaaaaa ({shards}/20261201T020000Z-aaaaaa/results/"
        f"20261201T020000Z-aaaaaa.json), 20261201T020100Z-bbbbbb ({shards}/20261201T020100Z-bbbbbb/results/"
        "20261201T020100Z-bbbbbb.json)",
        f"  commit 9f8e7d6c5b4a: 20261201T020200Z-cccccc ({path})",
        "  merge the shards of one commit (one workflow run), or pass --force",
    ]
    assert not (tmp_path / "store").exists()


def test_merge_force_records_why(shards: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    shard(shards, "20261201T020200Z-cccccc", 1100.0, [record("test_c", "eagle3", 1.0)],
          commit={"id": "1a2b3c4d5e6f7a8b9c0d", "dirty": True})  # fmt: skip
    ret = main(["merge", str(shards), "--results-dir", str(tmp_path / "store"), "--force"])
    out = capsys.readouterr().out
    assert ret == 0
    assert "WARNING (--force): the runs measured different code:" in out
    assert "  commit 1a2b3c4d5e6f with uncommitted changes: 20261201T020200Z-cccccc" in out
    merged = read_run_file(ResultStore(tmp_path / "store").list()[0])
    assert merged.machine["merge_forced"][0].startswith("the runs measured different code:")


def test_merge_refuses_different_profile_definitions(shards: Path, capsys: pytest.CaptureFixture[str]) -> None:
    changed = definition(num_requests=32)
    shard(shards, "20261201T020200Z-cccccc", 1100.0, [record("test_c", "eagle3", 1.0, definition_=changed)])
    assert main(["merge", str(shards), "--results-dir", str(shards.parent / "store")]) == 1
    err = capsys.readouterr().err
    assert (
        "profile 'eagle3' is defined differently:\n"
        "  20261201T020100Z-bbbbbb -> 20261201T020200Z-cccccc:\n"
        "    workload.num_requests: 16 -> 32\n"
        "  run every shard from the same profile file, or pass --force\n"
    ) in err


def test_merge_refuses_a_test_measured_twice(tmp_path: Path) -> None:
    a = shard(tmp_path, "20261201T020000Z-aaaaaa", 1000.0, [record("test_a", "eagle3", 1.0)])
    b = shard(tmp_path, "20261201T020100Z-bbbbbb", 1060.0, [record("test_a", "eagle3", 2.0)])
    shards, _ = load_shards([tmp_path])
    assert merge_problems(shards) == [
        f"test tests/test_s.py::test_a[eagle3] was measured in two runs: 20261201T020000Z-aaaaaa ({a}) and "
        f"20261201T020100Z-bbbbbb ({b}); the shards' selections overlap (check each matrix entry's --server-profile "
        "/ -k), or pass --force to keep the later one"
    ]
    merged = merge_runs(shards)
    assert [r.metrics["output_tok_s"] for r in merged.results] == [2.0]


def test_profile_definition_ignores_checkout_path(tmp_path: Path) -> None:
    one = Profile(name="p", model_path=str(tmp_path / "a" / "models" / "m"), source=str(tmp_path / "a" / "s.yaml"))
    two = Profile(name="p", model_path=str(tmp_path / "b" / "models" / "m"), source=str(tmp_path / "b" / "s.yaml"))
    assert profile_definition(one) == profile_definition(two)
    assert profile_definition(one)["model_path"] == "<profiles>/models/m"


def test_report_copy_counts_once_and_other_json_is_skipped(shards: Path, capsys: pytest.CaptureFixture[str]) -> None:
    src = next(shards.rglob("20261201T020000Z-aaaaaa.json"))
    (shards / "specdec-report.json").write_text(src.read_text())
    (shards / "benchmark.json").write_text(json.dumps({"benchmarks": []}))
    assert main(["merge", str(shards), "--results-dir", str(shards.parent / "store")]) == 0
    out = capsys.readouterr().out
    assert "skipped 1 JSON file(s) that are not run files, e.g. " in out
    assert "merged 2 runs (3 results)" in out


def test_merge_bad_input(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["merge", str(tmp_path / "nope")]) == 2
    assert capsys.readouterr().err == f"error: {tmp_path / 'nope'}: no such file or directory\n"
    (tmp_path / "empty").mkdir()
    assert main(["merge", str(tmp_path / "empty")]) == 2
    assert capsys.readouterr().err.startswith(f"error: no run files to merge under {tmp_path / 'empty'}; ")
    (tmp_path / "empty" / "broken.json").write_text("{")
    assert main(["merge", str(tmp_path / "empty")]) == 2
    assert "broken.json: not a readable JSON file: " in capsys.readouterr().err


def test_merged_run_id_is_stable() -> None:
    a = RunFile("20261201T020000Z-aaaaaa", 0.0)
    b = RunFile("20261201T020100Z-bbbbbb", 60.0)
    from pytest_specdec.report.merge import Shard

    one = merged_run_id([Shard(Path("a"), a), Shard(Path("b"), b)])
    assert one == merged_run_id([Shard(Path("b"), b), Shard(Path("a"), a)])
    assert one.startswith("19700101T000000Z-")


def test_merge_trend(shards: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    pytest.importorskip("matplotlib")
    png = tmp_path / "trend.png"
    assert main(["merge", str(shards), "--results-dir", str(tmp_path / "store"), "--trend", str(png)]) == 0
    assert f"wrote {png} (1 run)" in capsys.readouterr().out
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_nightly_workflow_shards_and_merges() -> None:
    yaml = pytest.importorskip("yaml")
    path = Path(__file__).resolve().parents[1] / "examples" / "ci" / "nightly-gpu.yml"
    jobs = yaml.safe_load(path.read_text())["jobs"]
    shard_entries = jobs["specdec"]["strategy"]["matrix"]["include"]
    assert len(shard_entries) >= 2 and all(e["profiles"] for e in shard_entries)
    run_step = next(s for s in jobs["specdec"]["steps"] if "--specdec-report" in s.get("run", ""))
    assert "--server-profile=${{ matrix.profiles }}" in run_step["run"]
    assert '--specdec-report="shard/${{ matrix.name }}.json"' in run_step["run"]
    assert jobs["merge"]["needs"] == "specdec"
    merge_step = next(s for s in jobs["merge"]["steps"] if "pytest_specdec merge" in s.get("run", ""))
    assert "python -m pytest_specdec merge shards --results-dir .specdec/results" in merge_step["run"]


def test_merge_refuses_runs_with_other_metric_definitions(shards: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = next(shards.rglob("20261201T020000Z-aaaaaa.json"))
    data = json.loads(path.read_text())
    data["metric_definitions"]["accept_length"] = "completion tokens / verify steps [tok/verify]; source: old"
    path.write_text(json.dumps(data))
    assert main(["merge", str(shards), "--results-dir", str(shards.parent / "store")]) == 1
    err = capsys.readouterr().err
    assert f"20261201T020000Z-aaaaaa ({path}) defines metrics differently from this pytest-specdec" in err
    assert '  accept_length: "completion tokens / verify steps [tok/verify]; source: old" -> "' in err


def test_commit_info_from_git_then_github_sha(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import subprocess

    from pytest_specdec.measure.results import commit_info

    monkeypatch.delenv("GITHUB_SHA", raising=False)
    assert commit_info(tmp_path) == {}
    monkeypatch.setenv("GITHUB_SHA", "abc123")
    monkeypatch.setenv("GITHUB_REF_NAME", "main")
    assert commit_info(tmp_path) == {"id": "abc123", "dirty": None, "branch": "main"}
    git = ["git", "-c", "user.name=t", "-c", "user.email=t@t", "-C", str(tmp_path)]
    subprocess.run([*git, "init", "-q", "-b", "trunk"], check=True)
    (tmp_path / "f").write_text("1")
    subprocess.run([*git, "add", "f"], check=True)
    subprocess.run([*git, "commit", "-qm", "c"], check=True)
    head = subprocess.run([*git, "rev-parse", "HEAD"], capture_output=True, text=True, check=True).stdout.strip()
    assert commit_info(tmp_path) == {"id": head, "dirty": False, "branch": "trunk"}
    (tmp_path / "f").write_text("2")
    assert commit_info(tmp_path)["dirty"] is True
