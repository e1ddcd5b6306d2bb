"""Record the spread between server instances of one config on the reference server: the run effect a compare
against a single stored run cannot see (each run starts its own servers).

    python benchmarks/record_instances.py                        # 10 instances x 8 pairs, quiet
    python benchmarks/record_instances.py --instances 2 --pairs 2 --out /tmp/i.json   # a proof that it runs
    python benchmarks/record_instances.py --load-procs 0,2,4 --instances 15 --out /tmp/busy.json   # under load

``--load-procs`` runs that many CPU-bound processes beside each instance (``busy.Load``), cycling through the list
instance by instance so that the load levels interleave in time (the speedup of speculative decoding on a CPU moves
with the CPU share its servers get: the run effect a compare on a busy runner must assume).

Each instance is a fresh pair of servers (the bundled ``eagle3`` as target, ``baseline`` as the reference arm,
started one at a time), measured as the plugin measures a pairing (``pairing.measure_interleaved``), then stopped.
At the end a table gives, for the raw target tok/s and for the paired log ratio, the within-instance and
between-instance sd of the log (one-way random-effects ANOVA, method of moments; the estimator of
``judge.sequential.History``).

Output (JSON): ``{"meta": {...}, "runs": [{"target_tok_s": [...], "reference_tok_s": [...], "load": L,
"load_before": L0, "load_procs": N}]}`` (1-minute load averages at the instance's end and start),
the layout of ``benchmarks/data/h200-graphs-c1-pairs.json`` (``--analyse FILE`` prints the table of either).
"""

from __future__ import annotations

import argparse
import json
import math
import os
import platform
import signal
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from busy import Load  # noqa: E402 - benchmarks/busy.py, beside this script

from pytest_specdec.engines.rules import load_profiles  # noqa: E402
from pytest_specdec.measure import pairing, runner  # noqa: E402

DEFAULT_OUT = ROOT / "benchmarks" / "data" / "ref-instances.json"


def _profiles(requests: int, tokens: int) -> str:
    return f"""profiles:
  baseline:
    server: reference
    startup_timeout_s: 600
    workload: {{max_new_tokens: {tokens}, num_requests: {requests}, warmup_requests: 1, concurrency: 1,
               temperature: 0.0, ignore_eos: true}}
  eagle3:
    extends: baseline
    speculative: {{algorithm: EAGLE3, num_steps: 3, eagle_topk: 1, num_draft_tokens: 4}}
"""


def run_effect(groups: Sequence[Sequence[float]]) -> tuple[float, float, float]:
    """(within sd, between sd, F) of the logs of ``groups`` (one list of values > 0 per instance)."""
    logs = [np.log(np.asarray(g, dtype=float)) for g in groups if len(g) >= 1]
    n, k = sum(a.size for a in logs), len(logs)
    within = float(sum(((a - a.mean()) ** 2).sum() for a in logs)) / (n - k)
    grand = float(np.concatenate(logs).mean())
    ms_between = float(sum(a.size * (a.mean() - grand) ** 2 for a in logs)) / (k - 1)
    n0 = (n - sum(a.size**2 for a in logs) / n) / (k - 1)
    return math.sqrt(within), math.sqrt(max(0.0, (ms_between - within) / n0)), ms_between / within


def analyse(path: Path) -> None:
    runs = json.loads(path.read_text())["runs"]
    print(f"{path.name}: {len(runs)} instances, {sum(len(r['target_tok_s']) for r in runs)} pairs")
    print("| row | within sd (log) | between sd (log) | F |\n|---|---|---|---|")
    rows = {
        "raw target tok/s": [r["target_tok_s"] for r in runs],
        "raw reference tok/s": [r["reference_tok_s"] for r in runs],
        "paired ratio": [[t / b for t, b in zip(r["target_tok_s"], r["reference_tok_s"], strict=True)] for r in runs],
    }
    for name, groups in rows.items():
        within, between, f = run_effect(groups)
        print(f"| {name} | {within:.3f} | {between:.3f} | {f:.2f} |")
    levels = sorted({r.get("load_procs", 0) for r in runs})
    if len(levels) > 1:
        print("\n| busy procs | instances | load (1-min) | speedup per instance (median ratio) | between sd (log) |")
        print("|---|---|---|---|---|")
        for level in levels:
            these = [r for r in runs if r.get("load_procs", 0) == level]
            ratios = [[t / b for t, b in zip(r["target_tok_s"], r["reference_tok_s"], strict=True)] for r in these]
            between = run_effect(ratios)[1] if len(these) > 1 else float("nan")
            loads = [r["load"] for r in these]
            speedups = ", ".join(f"{float(np.median(g)):.2f}" for g in ratios)
            print(f"| {level} | {len(these)} | {min(loads):.1f}-{max(loads):.1f} | {speedups} | {between:.3f} |")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--instances", type=int, default=10)
    parser.add_argument("--pairs", type=int, default=8, help="pairs per instance (default 8)")
    parser.add_argument("--requests", type=int, default=4, help="requests per phase (default 4)")
    parser.add_argument("--tokens", type=int, default=32, help="max_new_tokens (default 32)")
    parser.add_argument("--out", type=Path, default=DEFAULT_OUT)
    parser.add_argument("--load-procs", default="0", help="busy processes beside each instance, a list cycled "
                        "instance by instance (default 0)")
    parser.add_argument("--analyse", type=Path, help="print the table of a recorded file and exit")
    args = parser.parse_args()
    if args.analyse:
        analyse(args.analyse)
        return 0
    signal.signal(signal.SIGTERM, signal.default_int_handler)
    project = Path(tempfile.mkdtemp(prefix="specdec-instances-"))
    (project / "specdec.yaml").write_text(_profiles(args.requests, args.tokens))
    profiles = load_profiles(project / "specdec.yaml")
    out = {
        "meta": {
            "date": time.strftime("%Y-%m-%dT%H:%M:%S"), "machine": f"{platform.machine()} {os.cpu_count()} cores",
            "workload": f"{args.requests} requests x {args.tokens} tokens, c1, temperature 0, bundled eagle3 "
                        "paired with baseline, a fresh server pair per instance",
        },
        "runs": [],
    }  # fmt: skip
    cycle = [int(n) for n in args.load_procs.split(",")]
    for i in range(args.instances):
        load = Load(cycle[i % len(cycle)])
        load.on()
        try:
            load_before = round(os.getloadavg()[0], 2)
            reference = runner.start_server(profiles.get("baseline"), log_dir=project / "logs")
            try:
                target = runner.start_server(profiles.get("eagle3"), log_dir=project / "logs")
                try:
                    arms = pairing.measure_interleaved(target, reference, args.pairs)
                finally:
                    target.stop()
            finally:
                reference.stop()
            load_after = round(os.getloadavg()[0], 2)
        finally:
            load.off()
        run = {
            "target_tok_s": [float(t[0].metrics.output_tok_s or 0.0) for t in arms.target],
            "reference_tok_s": [float(r.metrics.output_tok_s or 0.0) for r in arms.reference],
            "load": load_after,
            "load_before": load_before,
            "load_procs": load.procs,
        }
        out["runs"].append(run)  # type: ignore[attr-defined]  # our JSON
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(json.dumps(out, indent=1))
        speedup = float(np.median([t / b for t, b in zip(run["target_tok_s"], run["reference_tok_s"], strict=True)]))
        print(f"instance {i + 1}: {load.procs} busy, target median {float(np.median(run['target_tok_s'])):.1f} "
              f"tok/s, speedup {speedup:.3f}, load {load_before} -> {load_after}", flush=True)  # fmt: skip
    analyse(args.out)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
