"""Bisect against a one-difference-at-a-time search on the incident (a script, not a test): launches, server-seconds,
wall time, the load average and what each names.

Usage: ``OMP_NUM_THREADS=1 python benchmarks/bench_bisect.py [--harmless 3] [--requests 3] [--max-new-tokens 16]
[--delay-ms 3.5] [--ids 0,1,2] [--runs 1] [--no-one-at-a-time] [--simulate]``

The good profile is ``eagle3`` of ``examples/more/specdec.yaml`` (small workload); the bad one adds the incident's
two causes (aux ids ``--ids``, [0, 1, 2] by default, and ``SPECDEC_REF_FORWARD_DELAY_MS`` standing in for lost NCCL
tuning) and ``--harmless N`` harmless differences (``env HF_HUB_OFFLINE``, ``--log-level warning``,
``--served-model-name``, then unused ``SPECDEC_BENCH_UNUSED_<i>`` variables). ``--ids -1,1,3`` is the patched-SGLang
variant: id -1 served through ``--ref-embedding-capture patched`` (a third culprit that acts only with the ids; the
permission ``speculative.allow_embedding_capture`` is grouped under the ids). Both searches launch through the
plugin's runner (``probes.Prober``). One at a time applies each difference alone to the good profile and names it when
that alone regresses; it misses culprits that act only together.

``--simulate`` replaces the servers by a formula (accept length 2.333 -> 2.032 with the other ids, tok/s x0.7 with
the delay, 5 s per launch) to show how launches grow with ``--harmless`` at sizes too slow to run for real.

``--noise-table`` replays the formula over seeds (``--runs``, default 40) for each tok/s spread (each phase's tok/s
x uniform(1 - s, 1 + s); 0.3 gives one pair's log ratio an sd of ~0.25, as one H200 without CUDA graphs showed)
and delay effect (x0.7, x0.9), and prints per cell: culprits named exactly / with extra (noise named) / with
missed ones, the runs that reported ``tok/s not bisected``, and the median and largest launches.
``--no-spread-check`` turns off the check that stops a tok/s search no probe can decide (``_Search.splittable``),
to compare.
"""

from __future__ import annotations

import argparse
import os
import random
import statistics
import tempfile
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from pytest_specdec import bisection
from pytest_specdec.bisection.probes import Prober, profile_mapping
from pytest_specdec.core.errors import ServerStartError
from pytest_specdec.engines.rules import load_profiles

ROOT = Path(__file__).resolve().parents[1]
DELAY_ENV = "SPECDEC_REF_FORWARD_DELAY_MS"


def incident(harmless: int, *, requests: int, max_new_tokens: int, delay_ms: float,
             ids: list[int]) -> tuple[dict[str, Any], ...]:  # fmt: skip
    """(good mapping, bad mapping, source) of the incident with ``harmless`` harmless differences."""
    profile = load_profiles(ROOT / "examples" / "more" / "specdec.yaml").get("eagle3")
    good = profile_mapping(profile)
    good["workload"].update(num_requests=requests, max_new_tokens=max_new_tokens, warmup_requests=1, repeats=1)
    bad = {**good, "env": {DELAY_ENV: f"{delay_ms:g}"}, "extra_args": [],
           "speculative": {**good["speculative"], "aux_hidden_state_layer_ids": ids}}  # fmt: skip
    if -1 in ids:
        bad["extra_args"] = ["--ref-embedding-capture", "patched"]
        bad["speculative"]["allow_embedding_capture"] = True
    pool = [("env", "HF_HUB_OFFLINE", "1"), ("flag", "--log-level", "warning"), ("flag", "--served-model-name", "x")]
    pool += [("env", f"SPECDEC_BENCH_UNUSED_{i}", "1") for i in range(max(harmless - len(pool), 0))]
    for kind, key, value in pool[:harmless]:
        if kind == "env":
            bad["env"][key] = value
        else:
            bad["extra_args"] = [*bad["extra_args"], key, value]
    return good, bad, {"source": profile.source, "name": profile.name}


class Formula:
    """``bisection.Probes`` without servers: the reference server's behaviour on the incident as a formula."""

    def __init__(self, seed: int = 0, slow: float = 0.7, spread: float = 0.05) -> None:
        self.launches, self.server_s, self.rng = 0, 0.0, random.Random(seed)
        self.slow, self.spread = slow, spread
        self.current: str | None = None
        self.reference: Mapping[str, Any] | None = None
        self.reference_key: str | None = None

    def _serve(self, config: Mapping[str, Any]) -> None:
        key = bisection.launch_key(config)
        if self.reference is None:
            self.reference, self.reference_key = config, key
            self.launches += 1
            self.server_s += 5.0
        if key not in (self.current, self.reference_key):
            self.launches += 1
            self.server_s += 5.0
            self.current = key
        if -1 in (config["speculative"].get("aux_hidden_state_layer_ids") or []) and (
            "--ref-embedding-capture" not in config["extra_args"]
        ):
            raise ServerStartError("TypeError at the first forward (stock capture of id -1)")

    @staticmethod
    def _accept(config: Mapping[str, Any]) -> float:
        return 2.333 if config["speculative"].get("aux_hidden_state_layer_ids") is None else 2.032

    def _tok_s(self, config: Mapping[str, Any]) -> float:
        slow = self.slow if DELAY_ENV in config["env"] else 1.0
        return 100.0 * self._accept(config) / 2.333 * slow * self.rng.uniform(1.0 - self.spread, 1.0 + self.spread)

    def exact(self, config: Mapping[str, Any], label: str, phases: int) -> dict[str, list[float]]:
        self._serve(config)
        return {"accept_length": [self._accept(config)] * phases}

    def pairs(self, config: Mapping[str, Any], label: str, count: int) -> list[float]:
        self._serve(config)
        assert self.reference is not None
        return [self._tok_s(config) / self._tok_s(self.reference) for _ in range(count)]

    def hold(self, config: Mapping[str, Any], label: str) -> None:
        key = bisection.launch_key(config)
        if key == self.current:
            self.current = None
        else:
            self.launches += 1
            self.server_s += 5.0
        self.reference, self.reference_key = config, key

    def running(self) -> str | None:
        return self.current

    def close(self) -> None:
        pass


def run(args: argparse.Namespace, harmless: int) -> list[list[str]]:
    ids = [int(x) for x in args.ids.split(",")]
    good, bad, meta = incident(harmless, requests=args.requests, max_new_tokens=args.max_new_tokens,
                               delay_ms=args.delay_ms, ids=ids)  # fmt: skip
    diffs = bisection.differences(good, bad)
    truth = {"env " + DELAY_ENV, "speculative.aux_hidden_state_layer_ids"}
    if -1 in ids:
        truth.add("extra_args --ref-embedding-capture")
    methods = ["bisect"] + ([] if args.no_one_at_a_time else ["one at a time"])
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        for method in methods:
            load = os.getloadavg()[0]
            probes: Any = Formula() if args.simulate else Prober(
                good, name=meta["name"], source=meta["source"], log_dir=Path(tmp) / "logs", log_prefix=method[:3]
            )  # fmt: skip
            started = time.perf_counter()
            try:
                if method == "bisect":
                    result = bisection.bisect(good, diffs, probes)
                    named = {diffs[i].key for i in result.culprits}
                    causes = len(result.causes)
                    if args.report:
                        print("\n".join(bisection.report_lines(result)), flush=True)
                else:
                    found = bisection.one_at_a_time(good, diffs, probes)
                    named = {diffs[i].key for i, _ in found}
                    causes = len(found)
            finally:
                probes.close()
            wall = time.perf_counter() - started
            verdict = "exact" if named == truth else f"missed {len(truth - named)}, extra {len(named - truth)}"
            load = (load + os.getloadavg()[0]) / 2
            rows.append([str(len(diffs)), method, str(probes.launches), f"{probes.server_s:.0f}",
                         f"{wall:.0f}" if not args.simulate else "-", f"{load:.1f}" if not args.simulate else "-",
                         str(causes), verdict])  # fmt: skip
    return rows


def _print_table(header: list[str], rows: list[list[str]]) -> None:
    widths = [max(len(r[i]) for r in [header, *rows]) for i in range(len(header))]
    for r in [header, *rows]:
        print("  ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)).rstrip())


def noise_table(args: argparse.Namespace) -> None:
    """The ``--noise-table`` replay (module docstring)."""
    good, bad, _ = incident(3, requests=args.requests, max_new_tokens=args.max_new_tokens, delay_ms=args.delay_ms,
                            ids=[0, 1, 2])  # fmt: skip
    diffs = bisection.differences(good, bad)
    truth = {"env " + DELAY_ENV, "speculative.aux_hidden_state_layer_ids"}
    runs = args.runs if args.runs > 1 else 40
    header = ["spread", "delay", "exact", "extra", "missed", "not bisected", "launches med", "max"]
    rows = []
    for spread in (0.05, 0.15, 0.3):
        for slow in (0.7, 0.9):
            exact = extra = missed = unsplit = 0
            launches = []
            for seed in range(runs):
                probes = Formula(seed, slow=slow, spread=spread)
                result = bisection.bisect(good, diffs, probes, max_pairs=args.max_pairs)
                named = {diffs[i].key for i in result.culprits}
                exact += named == truth
                extra += bool(named - truth)
                missed += bool(truth - named)
                unsplit += bool(result.unsplit)
                launches.append(probes.launches)
            rows.append([f"{spread:.2f}", f"x{slow:.1f}", f"{exact}/{runs}", f"{extra}/{runs}", f"{missed}/{runs}",
                         f"{unsplit}/{runs}", f"{statistics.median(launches):.0f}", str(max(launches))])  # fmt: skip
    _print_table(header, rows)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--harmless", type=int, nargs="+", default=[3], help="harmless differences (one run each)")
    parser.add_argument("--requests", type=int, default=3)
    parser.add_argument("--max-new-tokens", type=int, default=16)
    parser.add_argument("--delay-ms", type=float, default=3.5)
    parser.add_argument("--ids", default="0,1,2", help="the bad aux ids (default 0,1,2; -1,1,3: the patched variant)")
    parser.add_argument("--runs", type=int, default=1, help="bisect runs per size (default 1)")
    parser.add_argument("--no-one-at-a-time", action="store_true", help="bisect only")
    parser.add_argument("--report", action="store_true", help="print each bisect's report")
    parser.add_argument("--simulate", action="store_true", help="a formula instead of servers (launches only)")
    parser.add_argument("--noise-table", action="store_true", help="replay the formula over seeds, spreads, delays")
    parser.add_argument("--max-pairs", type=int, default=bisection.MAX_PAIRS,
                        help=f"the bisect's --max-pairs in the noise table (default {bisection.MAX_PAIRS})")
    parser.add_argument("--no-spread-check", action="store_true", help="never stop a tok/s search no probe can decide")
    args = parser.parse_args()
    if args.no_spread_check:
        from pytest_specdec.bisection import search

        search._Search.splittable = lambda self, *a, **k: True  # type: ignore[method-assign]
    if args.noise_table:
        noise_table(args)
        return
    header = ["diffs", "method", "launches", "server-s", "wall s", "load", "causes", "culprits vs truth"]
    rows = [row for n in args.harmless for _ in range(args.runs) for row in run(args, n)]
    _print_table(header, rows)


if __name__ == "__main__":
    main()
