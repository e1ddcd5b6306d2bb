"""Prints how long ``python -m pytest_specdec merge`` takes for 10, 100 and 1,000 stored shard runs (not a test).

Usage: ``python benchmarks/bench_merge.py [--runs 10,100,1000] [--tests 4] [--store-runs 1000] [--trend]``

Table 1 merges N shard runs into an empty store. Table 2 merges 8 shards into a store that already holds
``--store-runs`` runs of history (the nightly case), with the trend of the newest 30 when ``--trend``.

Each synthetic shard run holds ``--tests`` records shaped like a real run of the bundled example profiles: every
``RunMetrics`` field, 3 repeats, 48 request samples (16 requests x 3 repeats), a full fingerprint with the profile
definition; a file is about 30 KB at 4 tests. Phases timed with ``time.perf_counter()``: reading the files
(``load_shards``), the consistency checks (``merge_problems``), building the merged run (``merge_runs``), writing it
(``ResultStore.save``), and the whole CLI (``python -m pytest_specdec merge`` with ``--markdown``, and ``--trend``
over the newest 30 runs when ``--trend``), each the median of 3.
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import io
import statistics
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from pytest_specdec.cli.main import main as cli_main
from pytest_specdec.core.records import RunMetrics
from pytest_specdec.measure.results import RequestSample, ResultRecord, ResultStore, RunFile, profile_definition
from pytest_specdec.profiles.schema import Profile
from pytest_specdec.report.merge import load_shards, merge_problems, merge_runs

COMMIT = {"id": "1a2b3c4d5e6f7a8b9c0d1a2b3c4d5e6f7a8b9c0d", "dirty": False, "branch": "main"}


def _record(run: int, test: int) -> ResultRecord:
    profile = f"profile{test}"
    metrics: dict[str, Any] = {}
    for f in dataclasses.fields(RunMetrics):
        metrics[f.name] = "counters" if f.name == "accept_length_source" else 100.0 + run % 7 + test
    repeats = {k: [v, v, v] for k, v in metrics.items()}
    samples = tuple(
        RequestSample(
            repeat=i // 16, ok=True, completion_tokens=64, ttft_ms=50.0, itl_ms_mean=6.0, tpot_ms=6.5, e2e_ms=460.0
        )  # fmt: skip
        for i in range(48)
    )
    definition = profile_definition(Profile(name=profile, server="sglang", model_path="m", tp_size=8))
    fingerprint = {
        "plugin_version": "0.1.0",
        "engine": "sglang",
        "packages": {"sglang": "0.5.23", "torch": "2.13.0"},
        "argv": ["sglang", "serve", "--model-path", "m", "--port", str(30000 + run)],
        "env": {"NCCL_PROTO": "LL"},
        "workload": {"num_requests": 16, "max_new_tokens": 64},
        "profile_def": definition,
        "host": f"runner-{run}",
    }
    return ResultRecord(f"tests/test_nightly.py::test_suite[{profile}-shard{run}]", profile, metrics, repeats,
                        fingerprint, samples, "passed", 1.0e9 + run)  # fmt: skip


def _write(root: Path, runs: int, tests: int, *, flat: bool = False, offset: int = 0) -> Path:
    for i in range(offset, offset + runs):
        started = 1.0e9 + 3600.0 * i
        run_id = time.strftime("%Y%m%dT%H%M%SZ", time.gmtime(started)) + f"-{i:06x}"
        records = tuple(_record(i, t) for t in range(tests))
        run = RunFile(run_id, started, {"host": f"runner-{i}", "commit": COMMIT}, records)
        ResultStore(root if flat else root / f"shard{i}").save(run)
    return root


def _median_s(fn: Callable[[], object], times: int = 3) -> float:
    values = []
    for _ in range(times):
        start = time.perf_counter()
        fn()
        values.append(time.perf_counter() - start)
    return statistics.median(values)


def _row(tmp: Path, runs: int, tests: int, trend: bool) -> str:
    shards_dir = _write(tmp / "shards", runs, tests)
    size_mb = sum(p.stat().st_size for p in shards_dir.rglob("*.json")) / 1e6
    shards, _ = load_shards([shards_dir])
    read_s = _median_s(lambda: load_shards([shards_dir]))
    check_s = _median_s(lambda: merge_problems(shards))
    merged = merge_runs(shards)
    merge_s = _median_s(lambda: merge_runs(shards))
    store = ResultStore(tmp / "store")
    save_s = _median_s(lambda: store.save(merged, compact=True))
    cli = [str(shards_dir), "--results-dir", str(tmp / "store"), "--markdown", str(tmp / "summary.md")]
    if trend:
        cli += ["--trend", str(tmp / "trend.png")]
    cli_s = _median_s(lambda: _cli(cli))
    return f"{runs:>6} {size_mb:>7.1f} {read_s:>8.2f} {check_s:>8.3f} {merge_s:>8.3f} {save_s:>7.2f} {cli_s:>7.2f}"


def _cli(argv: list[str]) -> None:
    with contextlib.redirect_stdout(io.StringIO()):
        assert cli_main(["merge", *argv]) == 0


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", default="10,100,1000", help="comma-separated shard-run counts")
    parser.add_argument("--tests", type=int, default=4, help="records per run (default: 4)")
    parser.add_argument("--store-runs", type=int, default=1000, help="history in the store for table 2")
    parser.add_argument("--trend", action="store_true", help="also draw the trend (matplotlib)")
    args = parser.parse_args()
    header = f"{'runs':>6} {'MB':>7} {'read s':>8} {'check s':>8} {'merge s':>8} {'save s':>7} {'CLI s':>7}"
    print(header)
    for runs in [int(x) for x in args.runs.split(",")]:
        with tempfile.TemporaryDirectory(prefix="bench-merge-") as tmp:
            print(_row(Path(tmp), runs, args.tests, args.trend))
    print()
    print(f"8 shards into a store of {args.store_runs} runs" + (" + trend of the newest 30" if args.trend else ""))
    with tempfile.TemporaryDirectory(prefix="bench-merge-") as tmp:
        store_dir = _write(Path(tmp) / "store", args.store_runs, args.tests, flat=True)
        shards_dir = _write(Path(tmp) / "shards", 8, args.tests, offset=args.store_runs)
        cli = [str(shards_dir), "--results-dir", str(store_dir), "--markdown", str(Path(tmp) / "summary.md")]
        if args.trend:
            cli += ["--trend", str(Path(tmp) / "trend.png")]
        print(f"CLI s: {_median_s(lambda: _cli(cli)):.2f}")


if __name__ == "__main__":
    main()
