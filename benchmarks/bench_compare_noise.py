"""Print false-alarm and detection rates of ``compare.compare_results`` for a few noise levels and shifts.

Each trial draws a baseline and a current run of output tok/s, ``REPEATS`` repeats each, from
``100 * (1 + noise)`` (noise Gaussian with the given relative sigma); the current run is shifted down by ``shift``.
Columns: our rule (median shift beyond 5 % AND significant over repeats, ``stats.worse_test``) against the naive
rule pytest-benchmark style (one run each, fail when worse by more than 5 %). Shift 0 % = false-alarm rate.

Run: ``python benchmarks/bench_compare_noise.py [--trials 200] [--repeats 5] [--seed 0]``. Not collected by pytest.
"""

from __future__ import annotations

import argparse

import numpy as np

from pytest_specdec.core.tolerances import Tolerance
from pytest_specdec.judge.compare import compare_results
from pytest_specdec.measure.results import ResultRecord

TOLERANCE = {"output_tok_s": Tolerance(rel=0.05)}
NOISES = (0.01, 0.03, 0.05)
SHIFTS = (0.0, 0.03, 0.05, 0.07, 0.10, 0.15)


def _record(values: np.ndarray) -> ResultRecord:
    vals = [float(v) for v in values]
    return ResultRecord("bench", "p", {"output_tok_s": float(np.median(vals))}, {"output_tok_s": vals}, {})


def rates(noise: float, shift: float, trials: int, repeats: int, rng: np.random.Generator) -> tuple[float, float]:
    """(our failure rate, naive single-run failure rate) over ``trials``."""
    ours = naive = 0
    for _ in range(trials):
        base = 100.0 * (1 + rng.normal(0.0, noise, repeats))
        cur = 100.0 * (1 - shift) * (1 + rng.normal(0.0, noise, repeats))
        ours += compare_results(_record(base), _record(cur), TOLERANCE).failed
        naive += cur[0] < base[0] * 0.95
    return ours / trials, naive / trials


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--trials", type=int, default=200)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    rng = np.random.default_rng(args.seed)
    print(f"tolerance 5 %, {args.repeats} repeats per run, {args.trials} trials per cell, seed {args.seed}")
    print(f"{'noise sigma':>11}  {'shift':>5}  {'ours':>6}  {'naive 1-run':>11}")
    for noise in NOISES:
        for shift in SHIFTS:
            ours, naive = rates(noise, shift, args.trials, args.repeats, rng)
            print(f"{noise:>10.0%}  {shift:>5.0%}  {ours:>6.1%}  {naive:>11.1%}")


if __name__ == "__main__":
    main()
