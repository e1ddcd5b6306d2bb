"""Does a sweep's configured-point check fail unchanged configs, or pass changed ones? Replayed on recorded servers.

    python benchmarks/bench_sweep_instances.py                  # 2000 sweeps per row, seed 0 (about a minute)
    python benchmarks/bench_sweep_instances.py --trials 500 --points 4 --repeats 3 --seed 1

``benchmarks/data/ref-instances-load.json`` holds 16 fresh server pairs of ONE config (the bundled eagle3 paired with
the no-speculation baseline, 6 repeats each) measured beside 0-4 busy processes on 2 cores (load average 1.3-10.7).
Each replayed sweep takes ``--points`` distinct instances as its points ``eagle3@num_steps=1..k`` (the same config, so
there is no true best), ``--repeats`` of each one's repeats (drawn without replacement, with the instance's load in
its fingerprint), calls the middle point the configured one and judges it. Rows: the basis (output tok/s, or the
paired speedup per repeat, as a profile with ``min_speedup`` measures it), and the rule: ``repeats`` (the verdict of
``ranking.judge_gap`` on the points' repeats alone: a recommendation fails, "within" and "best" pass; the rule before
2026-12-07) or ``now`` (``judge.sweep.configured_point_lines`` itself: failing lines, undecided lines, the rest
pass). Columns: the unchanged sweep (every FAIL a false alarm, every pass fine), the configured point's values divided
by 1.8 (the incident's size: 2 steps 1.8x as fast as the configured; FAIL is the check's power, a pass is a miss) and
by 1.10 (10% below the best, beyond the 5% allowed: a pass is an "ok" the run could not back).
"""

from __future__ import annotations

import argparse
import json
import random
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from pytest_specdec.engines.rules import load_profiles  # noqa: E402
from pytest_specdec.judge import ranking, sweep  # noqa: E402
from pytest_specdec.measure.results import ResultRecord  # noqa: E402

DATA = Path(__file__).resolve().parent / "data" / "ref-instances-load.json"
BASES = ("tok/s", "paired speedup")
SLOWER = (1.0, 1.8, 1.10)


def _instances() -> list[dict[str, object]]:
    runs = json.loads(DATA.read_text())["runs"]
    return [{"target": run["target_tok_s"], "reference": run["reference_tok_s"], "load": float(run["load"])}
            for run in runs]  # fmt: skip


def _record(step: int, target: list[float], reference: list[float], load: float, basis: str) -> ResultRecord:
    """A sweep point as the plugin stores it: per-repeat tok/s, the paired arm's (paired basis), the runner's load."""
    name = f"eagle3@num_steps={step}"
    paired = {"vs": "baseline", "target": {"output_tok_s": target}, "reference": {"output_tok_s": reference}}
    fingerprint = {"speculative": {"algorithm": "EAGLE3"}, "workload": {"concurrency": 1}, "gpus": [],
                   "runner": {"cpus": 2, "load1_before": load, "load1_after": load}}  # fmt: skip
    return ResultRecord(f"t.py::test_x[{name}]", name, {"output_tok_s": sorted(target)[len(target) // 2]},
                        {"output_tok_s": target}, fingerprint, paired=paired if basis == "paired speedup" else {})
    # fmt: skip


def _verdict_repeats(points: list[ResultRecord], configured: str, basis: str, max_gap: float) -> str:
    """``FAIL`` / ``pass`` / ``undecided`` by ``ranking.judge_gap`` on the repeats alone."""
    ranked = ranking.rank([sweep.sample_of(p, basis) for p in points])
    judged = ranking.judge_gap(ranked, configured, max_gap=max_gap)
    return {"recommend": "FAIL", "within": "pass", "best": "pass"}.get(judged.verdict, "undecided")


def _verdict_now(points: list[ResultRecord], profiles: dict, max_gap: float) -> str:
    lines, red, undecided = sweep.configured_point_lines(
        points, profiles, thresholds_ok={p.profile: True for p in points}, max_gap=max_gap
    )
    return "FAIL" if red else "undecided" if undecided or not lines else "pass"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--trials", type=int, default=2000, help="replayed sweeps per row (default 2000)")
    parser.add_argument("--points", type=int, default=3, help="points per sweep (default 3)")
    parser.add_argument("--repeats", type=int, default=3, help="repeats per point, at most 6 (default 3)")
    parser.add_argument("--max-gap", type=float, default=0.05, help="allowed gap, a fraction (default 0.05)")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)
    instances = _instances()
    middle = args.points // 2 + 1
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "specdec.yaml"
        path.write_text("profiles:\n  eagle3:\n    server: reference\n    workload: {concurrency: 1}\n"
                        f"    speculative: {{algorithm: EAGLE3, num_steps: {middle}, eagle_topk: 1}}\n")  # fmt: skip
        profiles = dict(load_profiles(path).profiles)
    configured = f"eagle3@num_steps={middle}"
    print(f"{len(instances)} recorded instances of one config, {args.points} points x {args.repeats} repeats, max "
          f"gap {args.max_gap:.0%}, {args.trials} sweeps per row, seed {args.seed}; FAIL / pass per cell")  # fmt: skip
    head = ["basis", "rule", "busy", "unchanged", "1.8x slower", "10% slower"]
    print(f"{head[0]:<15} {head[1]:<8} {head[2]:>5}  {head[3]:>15}  {head[4]:>15}  {head[5]:>15}")
    for basis in BASES:
        for rule in ("repeats", "now"):
            rng = random.Random(args.seed)
            counts = {(slow, v): 0 for slow in SLOWER for v in ("FAIL", "pass")}
            busy = 0
            for _ in range(args.trials):
                chosen = rng.sample(instances, args.points)
                busy += max(float(str(c["load"])) for c in chosen) / 2 > 1.0
                picks = [rng.sample(range(len(c["target"])), args.repeats) for c in chosen]  # type: ignore[arg-type]
                for slow in SLOWER:
                    points = []
                    for step, (c, pick) in enumerate(zip(chosen, picks, strict=True), start=1):
                        factor = slow if step == middle else 1.0
                        target = [c["target"][i] / factor for i in pick]  # type: ignore[index]
                        reference = [c["reference"][i] for i in pick]  # type: ignore[index]
                        points.append(_record(step, target, reference, float(str(c["load"])), basis))
                    verdict = (_verdict_repeats(points, configured, basis, args.max_gap) if rule == "repeats"
                               else _verdict_now(points, profiles, args.max_gap))  # fmt: skip
                    if verdict in ("FAIL", "pass"):
                        counts[slow, verdict] += 1
            n = args.trials
            cells = ["  ".join(f"{counts[slow, v] / n:>6.1%}" for v in ("FAIL", "pass")) for slow in SLOWER]
            print(f"{basis:<15} {rule:<8} {busy:>5}  {cells[0]:>15}  {cells[1]:>15}  {cells[2]:>15}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
