"""Bracketed pairing (one server at a time, SGLang's default) under a sequential ``min_speedup``: what one verdict
costs in server restarts and wall time, and what it decides, under three rules: ``first``, blocks of the first
block's pairs, a look where a block lands on a point (before 2026-12-06); ``end``, blocks sized to reach a look and
outlast their restarts (``judge.verdict._bracket_pairs``), one look where a block ends (085d5a7); ``in``, the same
blocks, a look at each point a block passes, on its first pairs (``verdict._measure_until``, now).

    python benchmarks/bench_bracketed.py             # 200 verdicts a cell, seeded, about 15 s on 2 cores
    python benchmarks/bench_bracketed.py --runs 500 --seed 3

Per-pair speedup ratios are resampled from real SGLang 0.5.17 runs with CUDA graphs on three lent H100 machines
(``benchmarks/gpu/results-2026-12-05-b`` and ``results-2026-12-06``, the ``pgate`` task: eagle3 paired bracketed with
baseline; each run's log ratios centred on 0, so a cell sets the level): machine A 14 pairs (sd of the log 0.13), B 8
(0.02), C 24 (0.25). A cell's true speedup is 1.0 against a floor of 0.9 (``passed`` is right) or 0.8 against 0.9
(``FAILED`` is right), ``Design(3, 24)``, the plugin's own loop (``verdict._measure_until``) and decision
(``sequential.decide_floor``, on the pairs of the look) over a scripted handle. Two cost regimes: the bundled tiny model
on an H100 (2.6 s a phase, a block's two restarts 75 s, as measured on 2026-12-06) and an 8B model with a 15-minute
start (10 s a phase, 1800 s). Printed per cell and rule: verdicts passed/FAILED/undecided, the median blocks (each two
restarts) and the median wall minutes of one verdict (its phases and restarts, the first block's included). Nothing is
started or timed.
"""

from __future__ import annotations

import argparse
import dataclasses
import functools
import gzip
import json
import math
import statistics
import sys
from collections.abc import Callable
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from pytest_specdec.judge import sequential, verdict  # noqa: E402
from pytest_specdec.measure import runner  # noqa: E402
from pytest_specdec.measure.metrics import RunMetrics  # noqa: E402
from pytest_specdec.measure.pairing import PairedArms  # noqa: E402

GPU = ROOT / "benchmarks" / "gpu"
#: (machine, run files): the unchanged runs of the ``pgate`` task on each machine.
STREAMS = {
    "A": ["results-2026-12-05-b/pgate-1a.json.gz", "results-2026-12-05-b/pgate-2a.json.gz"],
    "B": ["results-2026-12-05-b/pgate-1b.json.gz"],
    "C": ["results-2026-12-06/pgate-1.json.gz"],
}
#: (name, seconds a phase, seconds of a block's two restarts).
REGIMES = (("tiny model, H100", 2.6, 75.0), ("8B, 15-min start", 10.0, 1800.0))
FLOOR = 0.9


def centred_log_ratios(files: list[str]) -> list[float]:
    """Each run's per-pair log speedups (``record.paired``), centred on the run's mean, pooled."""
    out: list[float] = []
    for name in files:
        doc = json.loads(gzip.open(GPU / name).read())
        record = next(r for r in doc["results"] if r.get("paired"))
        t, r = record["paired"]["target"]["output_tok_s"], record["paired"]["reference"]["output_tok_s"]
        logs = [math.log(a / b) for a, b in zip(t, r, strict=True)]
        out += [v - statistics.fmean(logs) for v in logs]
    return out


def _metrics(tok_s: float) -> RunMetrics:
    fields: dict[str, object] = {
        f.name: None for f in dataclasses.fields(RunMetrics) if f.default is dataclasses.MISSING
    }
    fields.update(num_requests=16, num_ok=16, num_errors=0, duration_s=1.0, output_tokens=1024, output_tok_s=tok_s)
    return RunMetrics(**fields)  # type: ignore[arg-type]


def _draw(rng: np.random.Generator, logs: list[float], true: float) -> float:
    """One pair's ratio: ``true`` times a resampled centred log ratio."""
    return true * math.exp(rng.choice(logs))


class Scripted:
    """A bracketed ``MeasureHandle`` drawing each pair's ratio from ``draw()``; blocks cost ``switch_s``."""

    def __init__(self, draw: Callable[[], float], first: int, phase_s: float, switch_s: float) -> None:
        self.draw, self.phase_s, self.switch_s = draw, phase_s, switch_s
        self.arms = self._block(first)

    def _phase(self, tok_s: float) -> runner.Measurement:
        return runner.Measurement("eagle3", _metrics(tok_s), (), "h", None, None, None, server_s=self.phase_s)

    def _block(self, pairs: int) -> PairedArms:
        ratios = [self.draw() for _ in range(pairs)]
        target = tuple((self._phase(100 * q), self._phase(100 * q)) for q in ratios)
        reference = tuple(self._phase(100.0) for _ in ratios)
        return PairedArms("eagle3", "baseline", "bracketed", target, reference, pairs, 1, self.switch_s)

    def more(self, pairs: int | None) -> None:
        self.arms = self.arms.extend(self._block(pairs or self.arms.first))

    def wall_s(self) -> float:
        return self.arms.measuring_s() + self.arms.restart_s


class NewRule:
    """The plugin's ``MeasureHandle`` face over :class:`Scripted` (``verdict._measure_until`` drives it)."""

    def __init__(self, s: Scripted) -> None:
        self.s = s

    def run(self, profile: str) -> runner.RunResult:
        phases = self.s.arms.target_measurements()
        return runner.RunResult(profile, phases, runner.pooled_metrics(phases), "h")

    def arms(self, profile: str, vs: str) -> PairedArms:
        return self.s.arms

    def pair_error(self, profile: str, vs: str) -> None:
        return None

    def more_error(self, profile: str) -> None:
        return None

    def can_measure(self, profile: str) -> bool:
        return True

    def more(self, profile: str, vs: str | None, pairs: int | None = None, *, why: str = "") -> bool:
        self.s.more(pairs)
        return True

    def spent_s(self, profile: str, vs: str | None) -> float:
        return self.s.wall_s()


def first_rule(s: Scripted, design: sequential.Design, decided: Callable[[int], bool]) -> int:
    """The loop before 2026-12-06: looks only where the pairs land on a point, blocks of the first block's pairs."""
    while True:
        n = s.arms.pairs
        if (n in design.points or n >= design.max_repeats) and decided(n):
            return n
        if not design.may_continue(n, s.arms.measuring_s(), step=s.arms.first):
            return n
        s.more(None)


def end_rule(s: Scripted, design: sequential.Design, decided: Callable[[int], bool]) -> int:
    """The loop of 085d5a7: blocks sized as now, one look where a block passes a point, on all its pairs."""
    handle, last = NewRule(s), 0
    while True:
        n = s.arms.pairs
        if design.look_due(n, last):
            last = n
            if decided(n):
                return n
        step = verdict._next_step(handle, "eagle3", "baseline", design, n, in_phases=False)
        if not design.may_continue(n, s.wall_s(), step.cost_s, step=step.pairs):
            return n
        s.more(step.pairs)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=200, help="verdicts a cell (default 200)")
    parser.add_argument("--seed", type=int, default=5)
    args = parser.parse_args(argv)
    design = sequential.Design(3, 24)
    print(f"min_speedup floor {FLOOR}, Design(3, 24), {args.runs} verdicts a cell, seed {args.seed}")
    print(f"{'machine':8} {'regime':18} {'true':>5} {'rule':5} {'passed':>6} {'FAILED':>6} {'undec':>6} "
          f"{'blocks':>6} {'wall min':>8}")  # fmt: skip
    for machine, files in STREAMS.items():
        logs = centred_log_ratios(files)
        for regime, phase_s, switch_s in REGIMES:
            for true in (1.0, 0.8):
                for rule in ("first", "end", "in"):
                    rng = np.random.default_rng(args.seed)  # the same draws for both rules
                    outcomes: dict[str, int] = {"passed": 0, "FAILED": 0, "undecided": 0}
                    blocks, walls = [], []
                    for _ in range(args.runs):
                        s = Scripted(functools.partial(_draw, rng, logs, true), 3, phase_s, switch_s)

                        def ratios(p: int, s: Scripted = s) -> list[float]:
                            return verdict._first_pairs(s.arms, p).ratios()

                        def decided(p: int) -> bool:
                            return sequential.decide_floor(ratios(p), FLOOR, design).decided

                        if rule == "first":
                            count = first_rule(s, design, decided)
                        elif rule == "end":
                            count = end_rule(s, design, decided)
                        else:
                            count = verdict._measure_until(NewRule(s), "eagle3", "baseline", design, decided)
                        outcomes[sequential.decide_floor(ratios(count), FLOOR, design).outcome] += 1
                        blocks.append(s.arms.brackets)
                        walls.append(s.wall_s() / 60)
                    print(f"{machine:8} {regime:18} {true:5.2f} {rule:5} {outcomes['passed']:6d} "
                          f"{outcomes['FAILED']:6d} {outcomes['undecided']:6d} {statistics.median(blocks):6.0f} "
                          f"{statistics.median(walls):8.1f}")  # fmt: skip
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
