"""False alarms on real recordings: every ordered pair of stored, unchanged runs compared as a night compares them.

    python benchmarks/bench_stored_pairs.py RUN.json[.gz] RUN.json[.gz] ...      # 2 or more stored runs
    python benchmarks/bench_stored_pairs.py --h200                              # the H200 nights in tests/data
    python benchmarks/bench_stored_pairs.py --h100                              # the H100 nights in tests/data
    python benchmarks/bench_stored_pairs.py --h100-g                            # one H100: unchanged and changed

Each stored run is one server instance per profile (its measurement: the record with the most repeats). For each
profile, every ordered pair (baseline, current) of runs is judged by ``compare.compare_results`` with one stored run
as the baseline (no history), at the tolerances and design the current record was judged with in pytest
(``compare.judged_tolerances``, ``compare.design_of``). The runs are of one unchanged config, so every REGRESSED is
a false alarm. The table gives, per profile and row, the verdict counts over the pairs; ``--instance-sd`` replaces
the assumed run-to-run sd of raw timing rows (``sequential.ASSUMED_INSTANCE_SD``, and ``ASSUMED_GPU_INSTANCE_SD``
which runs measured on a GPU host take) to show what it buys.

``--h100-g`` reads one machine's nights (machine g, 2026-12-06: five unchanged runs, three of eagle3 with
``SGLANG_DISABLE_DRAFT_EXTEND_CUDA_GRAPH=1`` and one with ``CUDA_LAUNCH_BLOCKING=1``): the first table counts the
unchanged pairs (false alarms), the second judges each changed run against each unchanged run as the stored one
(every REGRESSED is a catch).

The pairs share runs, so they are not independent: read the counts as what these recordings would have said, not
as a rate with a binomial interval. Nothing is timed; it runs in seconds.
"""

from __future__ import annotations

import argparse
import gzip
import itertools
import sys
import tempfile
from collections import Counter
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from pytest_specdec.core.tolerances import Tolerances, parse_tolerances  # noqa: E402
from pytest_specdec.judge import compare, sequential  # noqa: E402
from pytest_specdec.measure.results import ResultRecord, read_run_file  # noqa: E402

H200 = ROOT / "tests" / "data" / "sglang" / "0.5.17-graphs"
#: The unchanged runs among the stored H200 nights (SGLang 0.5.17, CUDA graphs, the nightly profile; READMEs there):
#: the changed ones (aux ids [0, 1, 2], CUDA_LAUNCH_BLOCKING=1) are left out, and so is night-4's eagle3 only.
H200_RUNS = ["gate/gate-1", "gate/gate-2", "gate/gate-3", "nightly/night-1a", "nightly/night-1b", "nightly/night-2",
             "halt/night-1c", "halt/night-2c"]  # fmt: skip

H100 = H200 / "h100"
#: The unchanged H100 runs (SGLang 0.5.17, CUDA graphs, eagle3 paired with baseline interleaved, 2026-12-06; README
#: in benchmarks/gpu/results-2026-12-06-c): 9 runs on 4 machines (a-d). Left out: the CLB runs (changed) and the two
#: bracketed runs (e, f: their ratio pairs arms of separate server lifetimes, another level than interleaved pairs).
H100_RUNS = ["a-base", "a-night2", "a-night3", "b-base", "b-night2", "c-base", "c-night2", "d-base", "d-night2"]
#: One H100 (machine g, 2026-12-06; README in benchmarks/gpu/results-2026-12-06-d): unchanged runs (g-base stored 16
#: pairs, the nights stopped at 8-12 where the budget could not decide), and runs of eagle3 changed in its env only
#: (draft-extend CUDA graph off: the ratio row -21 to -23%; CUDA_LAUNCH_BLOCKING=1: -41%). Left out: g-noov
#: (--disable-overlap-schedule: another config whose ratio row read x1.00).
G_UNCHANGED = ["g-base", "g-night2", "g-night3", "g-night4", "g-night5"]
G_CHANGED = ["g-dxg1", "g-dxg2", "g-dxg3", "g-clb"]


def _read(path: Path, scratch: Path) -> dict[str, ResultRecord]:
    """profile -> its measurement in the run file (the record with the most repeats)."""
    if path.suffix == ".gz":
        plain = scratch / path.name.removesuffix(".gz")
        plain.write_bytes(gzip.decompress(path.read_bytes()))
        path = plain
    kept: dict[str, ResultRecord] = {}
    for record in read_run_file(path).results:
        old = kept.get(record.profile)
        if old is None or len(record.values("output_tok_s")) > len(old.values("output_tok_s")):
            kept[record.profile] = record
    return kept


def read_h200() -> list[dict[str, ResultRecord]]:
    """The unchanged H200 runs of :data:`H200_RUNS`, each as profile -> its measurement."""
    with tempfile.TemporaryDirectory() as scratch:
        return [_read(H200 / f"{name}.json.gz", Path(scratch)) for name in H200_RUNS]


def read_h100() -> list[dict[str, ResultRecord]]:
    """The unchanged H100 runs of :data:`H100_RUNS`, each as profile -> its measurement."""
    with tempfile.TemporaryDirectory() as scratch:
        return [_read(H100 / f"{name}.json.gz", Path(scratch)) for name in H100_RUNS]


#: The pseudo-row that counts nights: REGRESSED when any row regressed, undecided when any row was open, else ok.
NIGHT = "(night: any row)"


def read_g() -> tuple[list[dict[str, ResultRecord]], list[dict[str, ResultRecord]]]:
    """Machine g's runs: (:data:`G_UNCHANGED`, :data:`G_CHANGED`), each run as profile -> its measurement."""
    with tempfile.TemporaryDirectory() as scratch:
        unchanged = [_read(H100 / f"{name}.json.gz", Path(scratch)) for name in G_UNCHANGED]
        changed = [_read(H100 / f"{name}.json.gz", Path(scratch)) for name in G_CHANGED]
    return unchanged, changed


def count(
    runs: list[dict[str, ResultRecord]], changed: list[dict[str, ResultRecord]] | None = None,
    override: Tolerances | None = None,
) -> dict[str, dict[str, Counter[str]]]:
    """profile -> row metric -> verdict counts over every ordered pair of runs that both have the profile.

    With ``changed``: over every pair (a run of ``runs`` as the stored one, a run of ``changed`` as today's) instead.
    ``override``: tolerances over those each run was judged with (the ``compare`` command's ``-t``).
    """
    out: dict[str, dict[str, Counter[str]]] = {}
    pairs = itertools.permutations(runs, 2) if changed is None else itertools.product(runs, changed)
    for a, b in pairs:
        for profile in sorted(set(a) & set(b)):
            base, current = a[profile], b[profile]
            rows = compare.compare_results(
                base, current, compare.judged_tolerances(current, override), force=True,
                design=compare.design_of(current)
            ).rows
            for row in rows:
                out.setdefault(profile, {}).setdefault(row.metric, Counter())[row.verdict] += 1
            # The night's outcome: it fails on any REGRESSED row (as the compare does), else open on any undecided.
            verdicts = {row.verdict for row in rows}
            night = next((v for v in ("REGRESSED", "undecided") if v in verdicts), "ok")
            out[profile].setdefault(NIGHT, Counter())[night] += 1
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("runs", nargs="*", type=Path, help="stored run files (.json or .json.gz) of one config")
    parser.add_argument("--h200", action="store_true", help="the unchanged H200 nights stored in tests/data")
    parser.add_argument("--h100", action="store_true", help="the unchanged H100 nights stored in tests/data")
    parser.add_argument("--h100-g", action="store_true", help="one H100's unchanged and changed nights (tests/data)")
    parser.add_argument("--instance-sd", type=float, default=None, help="assumed run-to-run sd of raw timing rows")
    parser.add_argument("-t", "--tolerance", action="append", default=[], metavar="SPEC",
                        help="tolerances over each run's own, as the compare command's -t (output_tok_s/baseline:15%%)")
    parser.add_argument("--rows", default="output_tok_s,ttft_ms_p50,itl_ms_p50,itl_ms_p95,tpot_ms_p50",
                        help="rows to show (comma separated; 'all' for every row)")  # fmt: skip
    args = parser.parse_args(argv)
    paths = list(args.runs)
    if args.h200:
        paths = [H200 / f"{name}.json.gz" for name in H200_RUNS]
    elif args.h100:
        paths = [H100 / f"{name}.json.gz" for name in H100_RUNS]
    elif args.h100_g:
        paths = [H100 / f"{name}.json.gz" for name in G_UNCHANGED]
    if len(paths) < 2:
        parser.error("give 2 or more stored runs (or --h200, --h100)")
    if args.instance_sd is not None:
        sequential.ASSUMED_INSTANCE_SD = sequential.ASSUMED_GPU_INSTANCE_SD = args.instance_sd
    if args.h200:
        runs = read_h200()
    elif args.h100:
        runs = read_h100()
    elif args.h100_g:
        runs, changed = read_g()
    else:
        with tempfile.TemporaryDirectory() as scratch:
            runs = [_read(p, Path(scratch)) for p in paths]
    wanted = None if args.rows == "all" else set(args.rows.split(","))
    gpu = any(compare.measured_on_gpu(*run.values()) for run in runs)
    raw = sequential.ASSUMED_GPU_INSTANCE_SD if gpu else sequential.ASSUMED_INSTANCE_SD
    print(f"{len(paths)} stored runs, assumed run-to-run sd {raw:.0%} raw{' (GPU host)' if gpu else ''} "
          f"({sequential.ASSUMED_RATIO_INSTANCE_SD:.0%} ratio); every REGRESSED is a false alarm")  # fmt: skip
    override = parse_tolerances(args.tolerance, strict=True) if args.tolerance else None
    _table(count(runs, override=override), wanted)
    if args.h100_g:
        print(f"\n{len(G_CHANGED)} changed runs, each judged against each unchanged run: every REGRESSED is a catch")
        _table(count(runs, changed, override), wanted)
    return 0


def _table(counts: dict[str, dict[str, Counter[str]]], wanted: set[str] | None) -> None:
    print(f"{'profile':<10} {'row':<28} {'pairs':>5} {'REGRESSED':>9} {'undecided':>9} {'ok':>4} {'improved':>8}")
    for profile, rows in counts.items():
        for metric, verdicts in rows.items():
            if wanted is not None and metric not in wanted and metric != NIGHT:
                continue
            total = sum(verdicts.values())
            print(f"{profile:<10} {metric:<28} {total:>5} {verdicts['REGRESSED']:>9} {verdicts['undecided']:>9} "
                  f"{verdicts['ok']:>4} {verdicts['improved']:>8}")  # fmt: skip


if __name__ == "__main__":
    raise SystemExit(main())
