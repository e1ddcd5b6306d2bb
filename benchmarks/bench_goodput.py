"""The ``min_goodput`` verdict on simulated runs: how often it passes a server that misses the floor, and fails one
that meets it, with the request rate taken as measured (the rule before 2026-12-05) and with its interval (now).

    python benchmarks/bench_goodput.py                  # 2,000 runs a cell, seed 1 (about a minute; nothing timed)
    python benchmarks/bench_goodput.py --runs 500 --requests 48

Each simulated run has ``--repeats`` phases of ``--requests`` requests; a request meets the SLO with probability
``--share``; a phase's request rate is ``--rate`` times exp(N(0, sd)), sd the runner's phase-to-phase spread (0 on a
quiet host; 0.05-0.10 per phase is what the reference server's tok/s shows on a busy 2-core runner). The floor is the
true goodput (share x rate) times a factor: below 1 the server meets it (a FAILED is a false alarm), above 1 it
misses it (a passed is a false pass). "now" is the plugin's own code (``measure.metrics.pooled_tails`` and
``judge.tails.tail_checks``); "before" the Clopper-Pearson share bounds times the pooled n / duration.

Prints one row per cell: F / U / P (FAILED, undecided, passed) of the runs, before -> now.
"""

from __future__ import annotations

import argparse
import dataclasses

import numpy as np

from pytest_specdec.core.order_stats import TAIL_CONFIDENCE, share_bounds
from pytest_specdec.core.records import RunMetrics
from pytest_specdec.judge.tails import tail_checks
from pytest_specdec.measure.metrics import pooled_tails
from pytest_specdec.profiles.schema import Thresholds


def _metrics(tails: dict) -> RunMetrics:
    fields = {f.name: None for f in dataclasses.fields(RunMetrics) if f.default is dataclasses.MISSING}
    fields.update(num_requests=1, num_ok=1, num_errors=0, duration_s=1.0, output_tokens=1, output_tok_s=1.0)
    fields["tails"] = tails
    return RunMetrics(**fields)


def _phases(rng: np.random.Generator, args: argparse.Namespace, sd: float) -> list[tuple[int, int, float]]:
    out = []
    for _ in range(args.repeats):
        rate = args.rate * float(np.exp(rng.normal(0.0, sd)))
        out.append((args.requests, int(rng.binomial(args.requests, args.share)), args.requests / rate))
    return out


def _now(phases: list[tuple[int, int, float]], floor: float) -> str:
    tails = [([], {"goodput_per_s": {"n": n, "good": g, "duration_s": d}}) for n, g, d in phases]
    (check,) = tail_checks(Thresholds(min_goodput=floor), _metrics(pooled_tails(tails)))
    return "U" if check.undecided else "P" if check.passed else "F"


def _before(phases: list[tuple[int, int, float]], floor: float) -> str:
    n, good, duration = (sum(p[i] for p in phases) for i in range(3))
    low, high = share_bounds(int(good), int(n), TAIL_CONFIDENCE)
    rate = n / duration
    return "P" if low * rate >= floor else "F" if high * rate < floor else "U"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=2000, help="simulated runs a cell (default 2000)")
    parser.add_argument("--repeats", type=int, default=3, help="phases a run (default 3, the default repeats)")
    parser.add_argument("--requests", type=int, default=100, help="requests a phase (default 100)")
    parser.add_argument("--share", type=float, default=0.95, help="true share meeting the SLO (default 0.95)")
    parser.add_argument("--rate", type=float, default=4.0, help="true request rate, req/s (default 4)")
    parser.add_argument("--seed", type=int, default=1)
    args = parser.parse_args()
    rng = np.random.default_rng(args.seed)
    truth = args.share * args.rate
    print(f"{args.runs} runs a cell, {args.repeats} repeats x {args.requests} requests, share {args.share}, "
          f"rate {args.rate} req/s: true goodput {truth:.3g} req/s")  # fmt: skip
    print("| phase sd | floor / true goodput | server | before F/U/P | now F/U/P |")
    print("|---|---|---|---|---|")
    for sd in (0.0, 0.05, 0.10):
        for factor in (0.8, 0.9, 1.05, 1.1, 1.2):
            counts = {"before": {"F": 0, "U": 0, "P": 0}, "now": {"F": 0, "U": 0, "P": 0}}
            for _ in range(args.runs):
                phases = _phases(rng, args, sd)
                counts["before"][_before(phases, truth * factor)] += 1
                counts["now"][_now(phases, truth * factor)] += 1
            side = "meets it" if factor < 1 else "misses it"
            cells = [" ".join(f"{k} {v}" for k, v in counts[rule].items()) for rule in ("before", "now")]
            print(f"| {sd:.2f} | {factor:.2f} | {side} | {cells[0]} | {cells[1]} |")


if __name__ == "__main__":
    main()
