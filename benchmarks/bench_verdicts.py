"""The compare gate replayed on resampled streams of real measurements: false alarms, detections, undecided verdicts
and server-seconds per verdict, sequential (the plugin's default) against a single look at fixed 3 repeats.

    python benchmarks/bench_verdicts.py                    # 200 runs a cell, ~1 minute, seeded
    python benchmarks/bench_verdicts.py --runs 50 --max-repeats 12,24,48
    python benchmarks/bench_verdicts.py --instance-sd 0.07           # each run on a server instance of its own
    python benchmarks/bench_verdicts.py --false-alarm-runs 300 --seed 7 --instance-sd 0.07   # false alarms only
    python benchmarks/bench_verdicts.py --unpaired --history 1 --instance-sd 0.07   # the raw row alone
    python benchmarks/bench_verdicts.py --stream-per-run ...   # two trees' rules on the same pairs, run by run

Streams (recorded once, replayed here; nothing is started):

- ``data/ref-streams.json``: the bundled reference server, per pair the tok/s of an ``eagle3`` target (unslowed, or
  slowed by a forward delay) and of an ``eagle3`` reference arm, 64 pairs a cell, on the quiet 2-core machine and
  with a busy process beside (``record_ref_streams.py``). A regression cell is the slowed server itself: its
  effect is what was measured (the ``effect`` column), not the nominal percent.
- ``data/h200-graphs-c1-pairs.json``: real SGLang 0.5.17 on an H200 with CUDA graphs, EAGLE-3 vs baseline, 35
  pairs of the unchanged profile over 5 runs (fresh servers each run). Regressions are the same pairs scaled by
  1 - pct (a bootstrap with a shift: the real spread, a known effect).
- ``data/h100-g-pairs.json``: the same on one H100 (2026-12-06), 52 pairs of the unchanged profile over 5 runs and
  15 pairs of eagle3 with ``SGLANG_DISABLE_DRAFT_EXTEND_CUDA_GRAPH=1`` over 3 runs (a real ~20% regression: the
  ``h100 dxg`` cell draws today's pairs from them, its effect as measured).

A replayed run is what ``pytest --specdec-compare`` does with it: ``--history`` stored baseline runs of
``--history-pairs`` pairs
(drawn from the unchanged stream), then the current run's pairs drawn one at a time from the cell's stream and
judged by the plugin's own ``verdict.judge_compare`` at the default design (``Design(3, max_repeats)``), which asks
for one more pair while the ratio row is undecided at a look. ``fixed 3`` is the same rule at a single look after 3
pairs (``Design(3, 3)``): what 3 repeats alone can decide. Targets: false alarms <= 1/20 a cell, 10 % caught
>= 19/20, median pairs for 20 % <= 3.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import statistics
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from pytest_specdec.core.tolerances import Tolerance, Tolerances  # noqa: E402
from pytest_specdec.judge import sequential  # noqa: E402
from pytest_specdec.judge import verdict as judging  # noqa: E402
from pytest_specdec.judge.verdict import judge_compare  # noqa: E402
from pytest_specdec.measure.results import ResultRecord  # noqa: E402

DATA = Path(__file__).resolve().parent / "data"


@dataclass
class Pool:
    """Pairs to draw from: (target tok/s, reference tok/s, server-seconds of the pair)."""

    name: str
    pairs: list[tuple[float, float, float]]

    def draw(self, rng: np.random.Generator, n: int, scale: float = 1.0,
             runner: float = 1.0) -> list[tuple[float, float, float]]:  # fmt: skip
        """``n`` pairs; ``scale`` multiplies the target arm (a regression), ``runner`` both arms (the run's runner
        state: what moves the raw rows and leaves the ratio)."""
        idx = rng.integers(0, len(self.pairs), n)
        return [(self.pairs[i][0] * scale * runner, self.pairs[i][1] * runner, self.pairs[i][2]) for i in idx]

    def effect(self, null: Pool, scale: float = 1.0) -> float:
        """The cell's median ratio over the unchanged stream's, minus 1."""
        med = statistics.median(t / r for t, r, _ in self.pairs) * scale
        return med / statistics.median(t / r for t, r, _ in null.pairs) - 1.0


def _record(pairs: list[tuple[float, float, float]], test_id: str = "bench") -> ResultRecord:
    """A record holding paired tok/s only (``compare_results`` judges ``output_tok_s / ref``); with ``UNPAIRED``
    the target arm's tok/s alone (the raw row only: a profile without a reference arm)."""
    target = [p[0] for p in pairs]
    reference = [p[1] for p in pairs]
    paired = None if UNPAIRED else {"vs": "ref", "target": {"output_tok_s": target},
                                    "reference": {"output_tok_s": reference}}  # fmt: skip
    return ResultRecord(
        test_id=test_id, profile="eagle3", metrics={"output_tok_s": statistics.median(target)},
        repeats={"output_tok_s": target}, fingerprint={"workload": {"temperature": 0.0}},
        paired=paired, outcome="passed",
    )  # fmt: skip


#: ``--unpaired``: replay the target arm alone.
UNPAIRED = False


@dataclass
class Tally:
    verdicts: list[str] = field(default_factory=list)
    pairs: list[int] = field(default_factory=list)
    server_s: list[float] = field(default_factory=list)

    def row(self) -> str:
        n = len(self.verdicts)
        f, u = self.verdicts.count("FAILED"), self.verdicts.count("undecided")
        return (f"F {f:>3}/{n} U {u:>3} P {n - f - u:>3}  pairs med {statistics.median(self.pairs):>4.0f} "
                f"s {statistics.mean(self.server_s):>6.1f}")  # fmt: skip


def replay(current: Pool, null: Pool, scale: float, tol: float, design: sequential.Design, history: tuple[int, int],
           rng: np.random.Generator, instance_sd: float = 0.0,
           raw_tol: float | None = None) -> tuple[str, int, float]:  # fmt: skip
    """One replayed run: its compare verdict, the pairs it measured and their server-seconds. ``instance_sd``: each
    run (stored or current) on a runner state of its own, both arms x exp(N(0, sd)). ``raw_tol``: the raw row's own
    tolerance, ``tol`` then the ratio row's (``output_tok_s:RAW output_tok_s/ref:TOL``); None: ``tol`` for both."""

    def runner() -> float:
        return math.exp(instance_sd * rng.standard_normal()) if instance_sd else 1.0

    stored = [_record(null.draw(rng, history[1], runner=runner())) for _ in range(history[0])]
    today = runner()
    pairs = current.draw(rng, design.start, scale, today)

    def more() -> ResultRecord | None:
        pairs.extend(current.draw(rng, 1, scale, today))
        return _record(pairs)

    ratio = {("output_tok_s", "ref"): Tolerance(rel=tol)} if raw_tol is not None else {}
    tolerances = Tolerances({"output_tok_s": Tolerance(rel=tol if raw_tol is None else raw_tol)}, ratios=ratio)
    judged = judge_compare(
        stored[0], _record(pairs), run_id="base", test_id="bench", tolerances=tolerances,
        noise={}, force=True, more=more, design=design, history=stored[1:],
        server_s=lambda: sum(p[2] for p in pairs),
    )  # fmt: skip
    verdict = "FAILED" if judged.failure else "undecided" if judged.undecided else "passed"
    return verdict, len(pairs), sum(p[2] for p in pairs)


def _false_alarms(args: argparse.Namespace) -> None:
    """FAILED counts over ``--false-alarm-runs`` replayed unchanged runs per stream, fixed 3 pairs and sequential."""
    ref, _ = _ref_pools()
    budget = int(args.max_repeats.split(",")[0])
    tol = float(args.tolerances.split(",")[0])
    print(f"false alarms of {args.false_alarm_runs} unchanged runs, seed {args.seed}, tolerance "
          f"{tol:.0%}, history {args.history} x {args.history_pairs}, instance sd "
          f"{args.instance_sd}")  # fmt: skip
    for name, pool in (("ref quiet", ref["0:quiet"]), ("ref busy", ref["0:busy"]), ("h200", _h200_pool())):
        row = []
        for label, design in (("fixed 3", sequential.Design(3, 3)), (f"sequential max {budget}",
                                                                      sequential.Design(3, budget))):  # fmt: skip
            rng = np.random.default_rng(args.seed)
            failed = sum(
                replay(pool, pool, 1.0, tol, design,
                       (args.history, args.history_pairs), rng, args.instance_sd)[0] == "FAILED"
                for _ in range(args.false_alarm_runs)
            )  # fmt: skip
            row.append(f"{label}: F {failed}/{args.false_alarm_runs}")
        print(f"{name:<10} " + "  ".join(row))


def _ref_pools() -> tuple[dict[str, Pool], dict[str, object]]:
    data = json.loads((DATA / "ref-streams.json").read_text())
    pools = {}
    for key, cell in data["cells"].items():
        pairs = list(zip(cell["target_tok_s"], cell["reference_tok_s"], cell["server_s"], strict=True))
        pools[key] = Pool(key, [p for p in pairs if p[0] > 0 and p[1] > 0])
    return pools, data["meta"]


def _h200_pool() -> Pool:
    data = json.loads((DATA / "h200-graphs-c1-pairs.json").read_text())
    pairs = []
    for run in data["runs"]:
        for t, r in zip(run["target_tok_s"], run["reference_tok_s"], strict=True):
            # 16 requests x 64 tokens on each arm: the phases' seconds from their throughput.
            pairs.append((t, r, 16 * 64 / t + 16 * 64 / r))
    return Pool("h200", pairs)


def _h100_pools() -> tuple[Pool, Pool]:
    """Machine g's pairs: (the unchanged profile, eagle3 with its draft extend off the CUDA graph)."""
    data = json.loads((DATA / "h100-g-pairs.json").read_text())
    pools = []
    for key in ("runs", "changed"):
        pairs = [(t, r, 16 * 64 / t + 16 * 64 / r) for run in data[key]
                 for t, r in zip(run["target_tok_s"], run["reference_tok_s"], strict=True)]  # fmt: skip
        pools.append(Pool(f"h100 {key}", pairs))
    return pools[0], pools[1]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=200, help="replayed runs a cell (default 200)")
    parser.add_argument("--max-repeats", default=str(sequential.DEFAULT_MAX_REPEATS),
                        help="budgets to compare, comma separated (default: the plugin's)")  # fmt: skip
    parser.add_argument("--history", type=int, default=3, help="stored baseline runs (default 3)")
    parser.add_argument("--history-pairs", type=int, default=12, help="pairs of each stored run (default 12)")
    parser.add_argument("--tolerances", default="0.05,0.10", help="relative tolerances (default 0.05,0.10)")
    parser.add_argument("--raw-tolerance", type=float, default=None,
                        help="the raw row's own relative tolerance, --tolerances then the ratio row's "
                             "(output_tok_s:RAW output_tok_s/ref:TOL); default: one tolerance for both")
    parser.add_argument("--seed", type=int, default=43)
    parser.add_argument("--instance-sd", type=float, default=0.0,
                        help="a runner state per run, both arms x exp(N(0, sd)); 0.07 was measured live over 10 runs "
                             "of the reference server (default 0: the recordings alone)")  # fmt: skip
    parser.add_argument("--false-alarm-runs", type=int, default=0,
                        help="only count false alarms: this many replayed unchanged runs per stream, fixed 3 and "
                             "sequential (docs/measurements/verdicts.md used 300 at seed 7)")  # fmt: skip
    parser.add_argument("--futility-shift-se", type=float, default=judging.FUTILITY_SHIFT_SE,
                        help="measure an open row on while it would decide with today's estimate this many "
                             "standard errors further from the limit (default: verdict.FUTILITY_SHIFT_SE)")
    parser.add_argument("--stream-per-run", action="store_true",
                        help="each replayed run (cell, run, column) draws from a stream of its own, so that two "
                             "rules replayed on one seed see the same pairs run by run (by default one stream per "
                             "cell: a rule that measures more pairs shifts every later run's draws)")  # fmt: skip
    parser.add_argument("--unpaired", action="store_true",
                        help="the target arm alone, judged on its raw tok/s row (a profile without a reference arm; "
                             "with --instance-sd, each run on a runner state of its own)")  # fmt: skip
    parser.add_argument("--cells", default="",
                        help="only cells whose name starts with one of these, comma separated (e.g. 'h200,ref quiet')")
    args = parser.parse_args()
    judging.FUTILITY_SHIFT_SE = args.futility_shift_se
    global UNPAIRED
    UNPAIRED = args.unpaired
    if args.false_alarm_runs:
        _false_alarms(args)
        return 0
    budgets = [int(x) for x in args.max_repeats.split(",")]
    tols = [float(x) for x in args.tolerances.split(",")]
    ref, meta = _ref_pools()
    h200 = _h200_pool()
    cells: list[tuple[str, Pool, Pool, float]] = []
    for load in ("quiet", "busy"):
        null = ref.get(f"0:{load}")
        if null is None:
            continue
        for pct in (0, 5, 10, 20):  # the slowed servers as measured
            if f"{pct}:{load}" in ref:
                cells.append((f"ref {load} {pct}%", ref[f"{pct}:{load}"], null, 1.0))
        for pct in (10, 20):  # the unchanged stream shifted by a known effect
            cells.append((f"ref {load} x{1 - pct / 100:.1f}", null, null, 1.0 - pct / 100))
    for pct in (0, 5, 10, 20):
        cells.append((f"h200 {pct}%", h200, h200, 1.0 - pct / 100))
    h100, dxg = _h100_pools()
    cells += [("h100 0%", h100, h100, 1.0), ("h100 dxg", dxg, h100, 1.0), ("h100 20%", h100, h100, 0.8)]
    if args.cells:
        cells = [c for c in cells if c[0].startswith(tuple(args.cells.split(",")))]
    cell_loads = {k: v["load"] for k, v in json.loads((DATA / "ref-streams.json").read_text())["cells"].items()}
    loads = ", ".join(f"{k} {statistics.median(cell_loads[k]):.1f}" for k in sorted(ref))
    print(f"reference streams: {meta['workload']}, recorded {meta['date']} ({meta['machine']}); 'quiet' = no busy "
          f"process of ours beside (other work was running), 'busy' = one more; median load average per cell: {loads}")
    print(f"h100 streams: {len(h100.pairs)} pairs unchanged, {len(dxg.pairs)} with the draft extend off its graph")
    print(f"h200 streams: {len(h200.pairs)} pairs; {args.runs} runs a cell, seed {args.seed}, history "
          f"{args.history} stored runs x {args.history_pairs} pairs; F/U/P = FAILED/undecided/passed, pairs = median "
          "pairs measured, s = mean server-seconds of the current run")  # fmt: skip
    started = time.perf_counter()
    for tol in tols:
        print()
        head = f"{'tolerance ' + format(tol, '.0%'):<16} {'effect':>7}  {'fixed 3 (one look)':<42}"
        head += "".join(f"{'sequential, max ' + str(b):<42}" for b in budgets)
        print(head)
        for name, pool, null, scale in cells:
            rng = np.random.default_rng(args.seed)
            fixed = Tally()
            seq = [Tally() for _ in budgets]
            for run in range(args.runs):
                for column, (tally, design) in enumerate([(fixed, sequential.Design(3, 3))] + [
                    (t, sequential.Design(3, b)) for t, b in zip(seq, budgets, strict=True)
                ]):
                    if args.stream_per_run:
                        rng = np.random.default_rng([args.seed, cells.index((name, pool, null, scale)), run, column])
                    verdict, n, s = replay(pool, null, scale, tol, design, (args.history, args.history_pairs), rng,
                                           args.instance_sd, args.raw_tolerance)  # fmt: skip
                    tally.verdicts.append(verdict)
                    tally.pairs.append(n)
                    tally.server_s.append(s)
            effect = pool.effect(null, scale)
            print(f"{name:<16} {effect:>+7.1%}  {fixed.row():<42}" + "".join(f"{t.row():<42}" for t in seq))
    print()
    print(f"replayed in {time.perf_counter() - started:.0f} s; load average {os.getloadavg()[0]:.2f}; "
          f"sd of the per-pair log ratio: " + ", ".join(
              f"{c[0]} {statistics.stdev([math.log(t / r) for t, r, _ in c[1].pairs]):.3f}"
              for c in cells if c[0].endswith(" 0%")))  # fmt: skip
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
