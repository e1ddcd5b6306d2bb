"""Do sweep rankings and recommendations rest on evidence? Repeated num_steps sweeps on the reference server (issue 24).

    python benchmarks/bench_sweep_evidence.py                          # 20 sweeps of num_steps 1..4, 1 and 3 repeats
    python benchmarks/bench_sweep_evidence.py --sweeps 1 --repeats 1,2 --steps 1,2 --configured 2 --requests 2 \\
        --max-new-tokens 8 --truth-repeats 3                           # a proof that it runs (minutes)

In a scratch project, profile ``eagle3`` (the reference server, EAGLE-3 at num_steps ``--configured``, default 3)
with ``min_speedup: {vs: baseline, ratio: 0.01}`` (never failed: it only makes every point measured as paired arms
with the no-speculation ``baseline``, so points are ranked by paired speedup), and one test that only measures:

1. the truth: one sweep with ``--truth-repeats`` pairs per point (default 12): the true best is the point with the
   highest median paired speedup;
2. per repeat count in ``--repeats`` (default 1 and 3), ``--sweeps`` sweeps (default 20), each
   ``pytest --server-profile=eagle3 --specdec-sweep num_steps=...`` as a user runs it, its result file read back and
   decided by the plugin's own functions (``sweep.rank_points``, ``sweep.configured_point_lines``).

Per repeat count, one table row: sweeps; how often a best point was named (a decided ranking) and how often it is
the true best; how often the true best is among the best and its ties; how often a recommendation was made (the
run would fail: the configured point shown more than ``--max-gap`` below the best) and how often it is wrong (the
truth does not put the configured point more than ``--max-gap`` below the recommended point); how often nothing was
decided (1 repeat per point). Goal: no wrong recommendation; where the data cannot decide, the sweep says so and
what would decide it (printed per sweep with ``-v``).

Run it on a quiet machine for figures: a loaded one widens the spread, so fewer sweeps decide (the wrong-
recommendation count should stay 0 either way).
"""

from __future__ import annotations

import argparse
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from pytest_specdec.engines.rules import load_profiles  # noqa: E402
from pytest_specdec.judge import sweep  # noqa: E402
from pytest_specdec.judge.pair_ratios import paired_ratios  # noqa: E402
from pytest_specdec.measure.results import ResultRecord, read_run_file  # noqa: E402
from pytest_specdec.report import sweep_table  # noqa: E402

TEST = "def test_run(specdec_run):\n    pass\n"


def _profiles(args: argparse.Namespace) -> str:
    return f"""
profiles:
  baseline:
    server: reference
    startup_timeout_s: 600
    workload: {{max_new_tokens: {args.max_new_tokens}, num_requests: {args.requests}, warmup_requests: 1, repeats: 1}}
  eagle3:
    extends: baseline
    speculative:
      {{algorithm: EAGLE3, num_steps: {args.configured}, eagle_topk: 1, num_draft_tokens: {args.configured + 1}}}
    thresholds: {{min_speedup: {{vs: baseline, ratio: 0.01}}}}
"""


def _sweep(project: Path, args: argparse.Namespace, repeats: int, tag: str) -> list[ResultRecord]:
    """One sweep as a user runs it; the records of its result file (empty when pytest wrote none)."""
    out_dir = project / f"run-{tag}"
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    cmd = [sys.executable, "-m", "pytest", "-m", "specdec", "-p", "no:cacheprovider", "-p", "no:randomly", "-q",
           "-W", "default", "--server-profile=eagle3", f"--specdec-sweep=num_steps={args.steps}",
           f"--specdec-repeats={repeats}", f"--specdec-dir={out_dir}",
           f"--specdec-sweep-max-gap={args.max_gap * 100:g}"]  # fmt: skip
    proc = subprocess.Popen(
        cmd, cwd=project, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),  # Ctrl-C reaches pytest, which tears down
    )  # fmt: skip
    try:
        stdout, _ = proc.communicate(timeout=args.timeout_s)
    except BaseException:
        proc.send_signal(signal.SIGINT)
        proc.wait(120)
        raise
    files = sorted((out_dir / "results").glob("*.json"))
    if not files:
        print(f"  {tag}: no result file (exit {proc.returncode}): {stdout.strip()[-400:]}", file=sys.stderr)
        return []
    return list(read_run_file(files[-1]).results)


def _median_speedup(record: ResultRecord) -> float | None:
    ratios = paired_ratios(record, "output_tok_s")
    return statistics.median(ratios) if ratios else None


@dataclass
class Row:
    repeats: int
    sweeps: int = 0
    named: int = 0
    named_true: int = 0
    true_in_ties: int = 0
    recommended: int = 0
    wrong: int = 0
    undecided: int = 0
    seconds: list[float] = field(default_factory=list)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n", 1)[0])
    parser.add_argument("--sweeps", type=int, default=20, help="sweeps per repeat count (default: 20)")
    parser.add_argument("--repeats", default="1,3", help="repeat counts per point, comma-separated (default: 1,3)")
    parser.add_argument("--steps", default="1..4", help="num_steps values, as --specdec-sweep (default: 1..4)")
    parser.add_argument("--configured", type=int, default=3, help="the profile's own num_steps (default: 3)")
    parser.add_argument("--truth-repeats", type=int, default=12, help="pairs per point of the truth (default: 12)")
    parser.add_argument("--requests", type=int, default=8, help="requests per phase (default: 8)")
    parser.add_argument("--max-new-tokens", type=int, default=32, help="tokens per request (default: 32)")
    parser.add_argument("--max-gap", type=float, default=0.05, help="--specdec-sweep-max-gap as a fraction (0.05)")
    parser.add_argument("--timeout-s", type=float, default=3600.0, help="per pytest run (default: 3600)")
    parser.add_argument("--keep", action="store_true", help="keep the scratch project (its path is printed)")
    parser.add_argument("-v", "--verbose", action="store_true", help="print each sweep's decision lines")
    args = parser.parse_args(argv)
    repeat_counts = [int(r) for r in args.repeats.split(",")]

    project = Path(tempfile.mkdtemp(prefix="specdec-sweep-evidence-"))
    (project / "specdec.yaml").write_text(_profiles(args))
    (project / "test_sweep.py").write_text(TEST)
    (project / "pytest.ini").write_text("[pytest]\n")
    profiles = dict(load_profiles(project / "specdec.yaml").profiles)
    print(f"project {project}; num_steps={args.steps}, configured {args.configured}, {args.requests} requests x "
          f"{args.max_new_tokens} tokens a phase, max gap {args.max_gap:.0%}")  # fmt: skip
    try:
        started = time.perf_counter()
        truth = sweep.sweep_records(_sweep(project, args, args.truth_repeats, "truth"))
        true_up = {r.profile: _median_speedup(r) for r in truth}
        known = {k: v for k, v in true_up.items() if v is not None}
        if not known:
            print("the truth sweep measured no paired speedup; nothing to compare with", file=sys.stderr)
            return 2
        true_best = max(known, key=lambda k: known[k])
        cells = ", ".join(f"{k.split('@', 1)[1]} {v:.3f}x" for k, v in known.items())
        print(f"truth ({args.truth_repeats} pairs per point, {time.perf_counter() - started:.0f} s): {cells}; "
              f"best {true_best}")  # fmt: skip
        rows = []
        for repeats in repeat_counts:
            row = Row(repeats)
            for i in range(args.sweeps):
                t0 = time.perf_counter()
                records = _sweep(project, args, repeats, f"r{repeats}-{i}")
                row.seconds.append(time.perf_counter() - t0)
                points = sweep.sweep_records(records)
                if not points:
                    continue
                row.sweeps += 1
                ok = sweep.thresholds_ok(records)
                (group,) = sweep.rank_points(points, thresholds_ok=ok)
                lines, failing, _ = sweep.configured_point_lines(points, profiles, thresholds_ok=ok,
                                                                 max_gap=args.max_gap)  # fmt: skip
                if group.best is None:
                    row.undecided += 1
                else:
                    row.named += 1
                    row.named_true += group.best.profile == true_best
                    row.true_in_ties += true_best in {group.best.profile, *(t.profile for t in group.tied)}
                if failing:
                    row.recommended += 1
                    assert group.best is not None
                    conf = f"eagle3@num_steps={args.configured}"
                    best_up, conf_up = known.get(group.best.profile), known.get(conf)
                    # Wrong: the truth does not put the configured point more than max_gap below the recommended one.
                    if best_up is None or conf_up is None or 1.0 - conf_up / best_up <= args.max_gap:
                        row.wrong += 1
                if args.verbose:
                    last = sweep_table.sweep_table(points, thresholds_ok=ok)[-1:]
                    print(f"  r{repeats} sweep {i}: " + " | ".join(last + lines))
            rows.append(row)
        print()
        header = (f"{'repeats':>7}  {'sweeps':>6}  {'best named':>10}  {'= true best':>11}  {'true in ties':>12}  "
                  f"{'recommended':>11}  {'wrong':>5}  {'undecided':>9}  {'s/sweep':>7}")  # fmt: skip
        print(header)
        for row in rows:
            mean_s = statistics.fmean(row.seconds) if row.seconds else 0.0
            print(f"{row.repeats:>7}  {row.sweeps:>6}  {row.named:>10}  {row.named_true:>11}  {row.true_in_ties:>12}  "
                  f"{row.recommended:>11}  {row.wrong:>5}  {row.undecided:>9}  {mean_s:>7.0f}")  # fmt: skip
        wrong = sum(r.wrong for r in rows)
        print(f"\ngoal: no wrong recommendation: {'met' if wrong == 0 else f'MISSED ({wrong} wrong)'}")
        return 0 if wrong == 0 else 1
    finally:
        if args.keep:
            print(f"kept {project}")
        else:
            import shutil

            shutil.rmtree(project, ignore_errors=True)


if __name__ == "__main__":
    raise SystemExit(main())
