"""Does a sweep's configured-point check fail unchanged configs? Replayed on recorded server instances.

    python benchmarks/bench_sweep_instances.py                  # 2000 sweeps per row, seed 0 (seconds)
    python benchmarks/bench_sweep_instances.py --trials 500 --points 4 --repeats 3 --seed 1

``benchmarks/data/ref-instances-load.json`` holds 16 fresh server pairs of ONE config (the bundled eagle3 paired with
the no-speculation baseline, 6 repeats each) measured beside 0-4 busy processes on 2 cores (load average 1.3-10.7).
Each replayed sweep takes ``--points`` distinct instances as its points (the same config, so there is no true best),
``--repeats`` of each one's repeats (drawn without replacement), calls the middle point the configured one and judges
it as ``judge.sweep.configured_point_lines`` does: ``ranking.rank`` and ``ranking.judge_gap`` at ``--max-gap``; a
recommendation fails the run. Every failure here is a false alarm. Rows: the basis (output tok/s, or the paired
speedup per repeat), and the rule: ``repeats`` (Welch on the points' repeats alone, before 2026-12-07) or
``+instances`` (the recommendation must also pass ``ranking.instance_separation`` at ``sweep.instance_sd_of``'s sd:
the compare's assumed instance sd for the row, busy when the instances' load per CPU exceeds 1). The ``1.8x`` column
divides the configured point's values by 1.8 (the incident's size: 2 steps 1.8x as fast as the configured one) and
counts how often the sweep then fails it (the check's power at that size).
"""

from __future__ import annotations

import argparse
import json
import random
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from pytest_specdec.judge import compare, ranking  # noqa: E402

DATA = Path(__file__).resolve().parent / "data" / "ref-instances-load.json"


def _instances() -> list[dict[str, object]]:
    runs = json.loads(DATA.read_text())["runs"]
    out = []
    for run in runs:
        target, reference = run["target_tok_s"], run["reference_tok_s"]
        out.append({"tok/s": target, "paired speedup": [t / r for t, r in zip(target, reference, strict=True)],
                    "load_per_cpu": float(run["load"]) / 2})  # fmt: skip
    return out


def _fails(samples: list[ranking.Sample], configured: str, max_gap: float, sd: float | None) -> bool:
    """Whether the sweep fails the configured point (a recommendation; with ``sd``, one past the instance spread)."""
    ranked = ranking.rank(samples)
    if ranked.leader is None:
        return False
    judged = ranking.judge_gap(ranked, configured, max_gap=max_gap)
    if judged.verdict != "recommend" or sd is None:
        return judged.verdict == "recommend"
    assert judged.test is not None
    leader, conf = ranked.sample(ranked.leader), ranked.sample(configured)
    assert leader is not None and conf is not None
    held = ranking.instance_separation(leader, conf, allowed=max_gap, comparisons=judged.test.comparisons,
                                       instance_sd=sd)  # fmt: skip
    return held.separated(ranked.alpha)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--trials", type=int, default=2000, help="replayed sweeps per row (default 2000)")
    parser.add_argument("--points", type=int, default=3, help="points per sweep (default 3)")
    parser.add_argument("--repeats", type=int, default=3, help="repeats per point, at most 6 (default 3)")
    parser.add_argument("--max-gap", type=float, default=0.05, help="allowed gap, a fraction (default 0.05)")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)
    instances = _instances()
    print(f"{len(instances)} recorded instances of one config, {args.points} points x {args.repeats} repeats, "
          f"max gap {args.max_gap:.0%}, {args.trials} sweeps per row, seed {args.seed}")  # fmt: skip
    print(
        f"{'basis':<16} {'rule':<11} {'busy sweeps':>11} {'false FAIL':>11} {'rate':>6} {'1.8x FAIL':>10} {'rate':>6}"
    )
    for basis in ("tok/s", "paired speedup"):
        key = "output_tok_s / baseline" if basis == "paired speedup" else "output_tok_s"
        for rule in ("repeats", "+instances"):
            rng = random.Random(args.seed)
            false = power = busy_count = 0
            for _ in range(args.trials):
                chosen = rng.sample(instances, args.points)
                busy = max(float(str(c["load_per_cpu"])) for c in chosen) > 1.0
                busy_count += busy
                sd = compare.assumed_instance_sd(key, busy_cpu=busy) if rule == "+instances" else None
                values = [rng.sample(list(c[basis]), args.repeats) for c in chosen]
                configured = f"p{args.points // 2}"
                samples = [ranking.Sample(f"p{i}", tuple(v)) for i, v in enumerate(values)]
                false += _fails(samples, configured, args.max_gap, sd)
                slowed = [ranking.Sample(s.name, tuple(x / 1.8 for x in s.values) if s.name == configured else s.values)
                          for s in samples]  # fmt: skip
                power += _fails(slowed, configured, args.max_gap, sd)
            n = args.trials
            print(
                f"{basis:<16} {rule:<11} {busy_count:>11} {false:>11} {false / n:>6.1%} {power:>10} {power / n:>6.1%}"
            )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
