"""A slow drift under a gated nightly, replayed on real server instances: does the compare fail it against the named
baseline, or follow it?

    python benchmarks/bench_drift.py                 # 100 chains a cell, seeded, about a minute quiet
    python benchmarks/bench_drift.py --chains 50 --nights 30 --tolerance 0.15
    python benchmarks/bench_drift.py --rule newest --tolerance 0.15   # which night the next one is compared with

Each chain is a gated nightly against one named baseline: the baseline, then ``--nights`` nights, each one server
instance of the bundled reference server drawn from ``data/ref-instances.json`` (16 real instances of one config, 8
repeats each; a fresh server pair per instance, so their spread is the real run-to-run spread), its repeats resampled
and scaled by ``(1 - drift) ** night``, measured one repeat at a time while the plugin's own ``judge_compare`` asks
for more (``Design(3, 8)``). A night that did not fail and has no suspected row joins the history of the next ones,
as ``ResultRecord.history_problem`` admits it. Two rules for the history, on the same draws:

- ``own level``: the plugin's: the level is the named baseline's own run, the other stored runs lend their spread;
- ``pooled level``: the rule before 2026-12-05 (late): every stored run of the fingerprint pooled into the level
  (``sequential.History.from_runs(level_runs=None)``, patched in for the replay).

Printed per drift a night: chains that FAILED within the nights, FAILED nights per night judged (drift 0: the false
alarm rate of one compare), the median and worst cumulative slowdown at the first FAILED. Nothing is started or
timed.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import statistics
import sys
from collections.abc import Iterator
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from pytest_specdec.core.tolerances import Tolerance  # noqa: E402
from pytest_specdec.judge import sequential  # noqa: E402
from pytest_specdec.judge.verdict import judge_compare  # noqa: E402
from pytest_specdec.measure.results import ResultRecord  # noqa: E402

INSTANCES = ROOT / "benchmarks" / "data" / "ref-instances.json"


def _record(values: list[float]) -> ResultRecord:
    """A raw tok/s record (no paired arm): the compare judges ``output_tok_s`` on it."""
    return ResultRecord(
        test_id="bench", profile="eagle3", metrics={"output_tok_s": statistics.median(values)},
        repeats={"output_tok_s": list(values)}, fingerprint={"workload": {"temperature": 0.0}}, outcome="passed",
    )  # fmt: skip


@contextlib.contextmanager
def _level(own: bool) -> Iterator[None]:
    """The plugin's rule (``own``), or the pooled level of before: ``History.from_runs`` with ``level_runs=None``."""
    if own:
        yield
        return
    original = sequential.History.from_runs.__func__  # type: ignore[attr-defined]

    def pooled(cls: type, runs: object, assumed_sd: float = 0.0, *, level_runs: int | None = None,
               assumed_always: bool = False) -> object:  # fmt: skip
        return original(cls, runs, assumed_sd, level_runs=None, assumed_always=assumed_always)

    sequential.History.from_runs = classmethod(pooled)  # type: ignore[method-assign,assignment]
    try:
        yield
    finally:
        sequential.History.from_runs = classmethod(original)  # type: ignore[method-assign,assignment]


def chain(instances: list[list[float]], drift: float, nights: int, tol: float, own_level: bool,
          rng: np.random.Generator, moves: str = "named") -> tuple[float | None, int]:  # fmt: skip
    """The cumulative slowdown at the chain's first FAILED night (None when none failed), and the nights judged.

    ``moves``: which night the next night is compared with under ``--specdec-compare`` alone: ``named`` (the first,
    a named baseline), ``newest`` (the rule before 2026-12-07: each night that passed), ``reference`` (the rule
    now: a night that passed only when its compare restarted the reference, ``cost["new_reference"]``)."""

    def instance(scale: float) -> list[float]:
        values = instances[int(rng.integers(len(instances)))]
        return [float(v) * scale for v in rng.choice(values, size=len(values))]

    base = _record(instance(1.0)[:3])  # a baseline of pytest's default 3 repeats
    later: list[ResultRecord] = []
    design = sequential.Design(3, 8)
    for night in range(1, nights + 1):
        scale = (1.0 - drift) ** night
        pool = instance(scale)
        shown = [3]

        def more(pool: list[float] = pool, shown: list[int] = shown) -> ResultRecord | None:
            shown[0] += 1
            return _record(pool[: shown[0]]) if shown[0] <= len(pool) else None

        with _level(own_level):
            judged = judge_compare(
                base, _record(pool[:3]), run_id="base", test_id="bench",
                tolerances={"output_tok_s": Tolerance(rel=tol)}, noise={}, force=True, more=more, design=design,
                history=tuple(later), server_s=lambda: 1.0,
            )  # fmt: skip
        if judged.failure:
            return 1.0 - scale, night
        passed = judged.undecided is None
        if passed and (moves == "newest" or moves == "reference" and judged.cost.get("new_reference")):
            later, base = [base, *later][:9], _record(pool[: shown[0]])
        elif not judged.cost.get("suspected"):
            later = [_record(pool[: shown[0]]), *later][:9]
    return None, nights


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--chains", type=int, default=100)
    parser.add_argument("--nights", type=int, default=20)
    parser.add_argument("--tolerance", type=float, default=0.10)
    parser.add_argument("--drifts", default="0,0.01,0.02,0.04")
    parser.add_argument("--seed", type=int, default=5)
    parser.add_argument("--rule", choices=("level", "newest"), default="level",
                        help="level: the baseline's own level vs the pooled level (a named baseline); newest: under "
                             "--specdec-compare alone, each passing night the next baseline (before) vs the "
                             "reference kept until a night improves (now), beside a named baseline")  # fmt: skip
    args = parser.parse_args()
    instances = [run["target_tok_s"] for run in json.loads(INSTANCES.read_text())["runs"]]
    print(f"{args.chains} chains a cell, {args.nights} nights each, tolerance {args.tolerance:.0%}, seed {args.seed}; "
          f"{len(instances)} real reference-server instances")  # fmt: skip
    print(f"{'drift/night':>11}  {'rule':<12}  {'chains FAILED':>13}  {'per night':>9}  "
          f"{'slowdown at 1st FAILED: median':>31}  {'worst':>6}")  # fmt: skip
    rules = ([("own level", True, "named"), ("pooled level", False, "named")] if args.rule == "level" else
             [("named", True, "named"), ("newest", True, "newest"), ("reference", True, "reference")])  # fmt: skip
    for drift in (float(d) for d in args.drifts.split(",")):
        for name, own, moves in rules:
            rng = np.random.default_rng(args.seed)  # the same draws for every rule
            found = [chain(instances, drift, args.nights, args.tolerance, own, rng, moves)
                     for _ in range(args.chains)]  # fmt: skip
            hits = [f for f, _ in found if f is not None]
            judged = sum(n for _, n in found)
            median = f"{statistics.median(hits):.1%}" if hits else "-"
            worst = f"{max(hits):.1%}" if hits else "-"
            print(f"{drift:>11.0%}  {name:<12}  {len(hits):>8}/{args.chains:<4}  "
                  f"{len(hits) / judged:>9.2%}  {median:>31}  {worst:>6}")  # fmt: skip


if __name__ == "__main__":
    main()
