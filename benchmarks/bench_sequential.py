"""Fixed repeats (today) vs sequential verdicts (``pytest_specdec/judge/sequential.py``): false alarms, detections and
server-seconds per verdict, on the reference server with injected slowdowns (issue 31).

    python benchmarks/bench_sequential.py                         # 20 runs per cell, 6 cells (hours on 2 cores)
    python benchmarks/bench_sequential.py --runs 2 --cells 0:quiet,10:busy    # a proof that it runs

Servers: one ``eagle3`` reference arm and one slowed ``eagle3`` per slowdown (``SPECDEC_REF_FORWARD_DELAY_MS``,
``refserver/decoding.py::FORWARD_DELAY_ENV``; a 0 % target is a second unslowed server), started once and reused by
every run. The delay for a slowdown is calibrated on the quiet machine from a probe delay (time per token grows
linearly with it), or given with ``--delays-ms``. A cell is a slowdown and a load (``quiet``, or ``busy``: two busy
processes beside the servers, ``--load-procs``).

Each run measures one stream of interleaved pairs (R T, T R, ...: the plugin's ``pairing.measure_interleaved``)
of the slowed target against the reference, as many as the slowest rule needs, and judges it with both rules:

- ``speedup``: the paired tok/s ratio against ``--floor`` (default 0.975: a 0 % slowdown should pass, 5 % and
  10 % fail). Fixed: today's ``min_speedup`` (median of ``--repeats`` pairs, below the floor re-measured up to 6
  pairs, failed when the Wilcoxon test is significant: ``speedup.judge_speedup``). Sequential: a look after every
  pair from ``--repeats`` on, up to ``--max-repeats`` (``sequential.decide_floor``).
- ``compare``: against a stored baseline of ``--repeats`` pairs at 0 % on the quiet machine, tolerance
  ``--tolerance`` (default 2 %). Fixed: today's ``compare_results`` on the ratio rows, a regression confirmed by a
  second measurement of as many pairs. Sequential: the plugin's screen (the first pairs' median ratio worse than
  the tolerance), then a look after every pair (``sequential.decide_shift``).

A run's verdict is ``FAILED``, ``passed`` or (sequential only) ``undecided``; at 0 % a FAILED is a false alarm, at
5 % and 10 % a detection. Server-seconds per verdict: the phases (warmups included) of both arms up to the look
that decided. Targets (issue 31): at most 1/20 false alarms in every cell, at least 19/20 detections of 10 % in
every cell and of 5 % on the quiet machine, and at least 2x fewer server-seconds than fixed repeats.
"""

from __future__ import annotations

import argparse
import os
import signal
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from busy import Load  # noqa: E402 - benchmarks/busy.py, beside this script

from pytest_specdec.engines.rules import load_profiles  # noqa: E402
from pytest_specdec.judge import compare, sequential, speedup  # noqa: E402
from pytest_specdec.judge.paired import paired_ratios  # noqa: E402
from pytest_specdec.judge.tolerances import Tolerance  # noqa: E402
from pytest_specdec.measure import pairing, results, runner  # noqa: E402
from pytest_specdec.refserver.decoding import FORWARD_DELAY_ENV  # noqa: E402


def _profiles(delays: dict[int, float], requests: int, tokens: int) -> str:
    """``ref`` (eagle3) and ``slow-<pct>`` (eagle3 with a forward delay) on the reference server, small phases."""
    head = f"""profiles:
  ref:
    server: reference
    startup_timeout_s: 300
    workload: {{max_new_tokens: {tokens}, num_requests: {requests}, warmup_requests: 1, concurrency: 1,
               temperature: 0.0, repeats: 3}}
    speculative: {{algorithm: EAGLE3, num_steps: 3, eagle_topk: 1, num_draft_tokens: 4}}
"""
    for pct, delay in delays.items():
        head += f"  slow-{pct}:\n    extends: ref\n    env: {{{FORWARD_DELAY_ENV}: '{delay:.3f}'}}\n"
    return head


@dataclass
class Stream:
    """The pairs of one run, measured on demand: ``ratio[i]`` target/reference tok/s, ``cost[i]`` both phases' s."""

    target: runner.RunningServer
    reference: runner.RunningServer
    target_tok_s: list[float] = field(default_factory=list)
    reference_tok_s: list[float] = field(default_factory=list)
    cost: list[float] = field(default_factory=list)

    def ratios(self, n: int) -> list[float]:
        while len(self.cost) < n:
            arms = pairing.measure_interleaved(self.target, self.reference, 1, offset=len(self.cost))
            t, r = arms.target[0][0], arms.reference[0]
            self.target_tok_s.append(float(t.metrics.output_tok_s or 0.0))
            self.reference_tok_s.append(float(r.metrics.output_tok_s or 0.0))
            self.cost.append(t.server_s + r.server_s)
        return [t / r for t, r in zip(self.target_tok_s[:n], self.reference_tok_s[:n], strict=True) if r]

    def spent(self, n: int) -> float:
        return sum(self.cost[:n])


def _record(target: list[float], reference: list[float]) -> results.ResultRecord:
    """A result record holding only paired tok/s (what ``compare_results`` judges as ``output_tok_s / ref``)."""
    return results.ResultRecord(
        test_id="bench", profile="slow", metrics={"output_tok_s": statistics.median(target)},
        repeats={"output_tok_s": list(target)}, fingerprint={"workload": {"temperature": 0.0}},
        paired={"vs": "ref", "target": {"output_tok_s": target}, "reference": {"output_tok_s": reference}},
    )  # fmt: skip


Verdict = tuple[str, int, float]  # verdict, pairs used, server-seconds


def fixed_speedup(s: Stream, floor: float, first: int) -> Verdict:
    judged = speedup.judge_speedup(s.ratios(first), floor, vs="ref", mode="interleaved", first=first, confirmable=True)
    n = first
    if judged.verdict == "suspected":
        n = max(first, speedup.CONFIRM_TOTAL_PAIRS)
        judged = speedup.judge_speedup(s.ratios(n), floor, vs="ref", mode="interleaved", first=first,
                                       confirmable=False)  # fmt: skip
    return ("FAILED" if judged.verdict == "FAILED" else "passed"), n, s.spent(n)


def sequential_speedup(s: Stream, floor: float, design: sequential.Design) -> Verdict:
    n = design.start
    while True:
        decision = sequential.decide_floor(s.ratios(n), floor, design)
        if decision.decided or n >= design.max_repeats:
            verdict = {"above": "passed", "below": "FAILED"}.get(decision.verdict, "undecided")
            return verdict, n, s.spent(n)
        n += 1


def fixed_compare(s: Stream, base: results.ResultRecord, tolerance: float, first: int) -> Verdict:
    tol = {"output_tok_s": Tolerance(rel=tolerance)}
    s.ratios(first)
    cur = _record(s.target_tok_s[:first], s.reference_tok_s[:first])
    if not compare.compare_results(base, cur, tol).failed:
        return "passed", first, s.spent(first)
    s.ratios(2 * first)
    again = _record(s.target_tok_s[first : 2 * first], s.reference_tok_s[first : 2 * first])
    failed = any(r.metric.startswith("output_tok_s") for r in compare.compare_results(base, again, tol).regressions)
    return ("FAILED" if failed else "passed"), 2 * first, s.spent(2 * first)


def sequential_compare(
    s: Stream, base: results.ResultRecord, tolerance: float, design: sequential.Design
) -> Verdict:
    tol = {"output_tok_s": Tolerance(rel=tolerance)}
    first = design.start
    s.ratios(first)
    rows = compare.compare_results(base, _record(s.target_tok_s[:first], s.reference_tok_s[:first]), tol).rows
    row = next(r for r in rows if r.metric == "output_tok_s / ref")
    # The plugin's screen (verdict._suspects): the median worse than the tolerance, whatever the repeats' spread.
    if row.delta is None or row.baseline is None or -row.delta <= row.tolerance.allowed(row.baseline):
        return "passed", first, s.spent(first)
    base_ratios = paired_ratios(base, "output_tok_s")
    n = first + 1
    while True:
        decision = sequential.decide_shift(base_ratios, s.ratios(n), tolerance, design, higher_is_better=True)
        if decision.decided or n >= design.max_repeats:
            verdict = {"worse": "FAILED", "within": "passed"}.get(decision.verdict, "undecided")
            return verdict, n, s.spent(n)
        n += 1


@dataclass
class Tally:
    verdicts: list[Verdict] = field(default_factory=list)

    def row(self) -> str:
        if not self.verdicts:
            return "-"
        n = len(self.verdicts)
        failed = sum(v == "FAILED" for v, _, _ in self.verdicts)
        undecided = sum(v == "undecided" for v, _, _ in self.verdicts)
        pairs = statistics.fmean(p for _, p, _ in self.verdicts)
        secs = statistics.fmean(c for _, _, c in self.verdicts)
        und = f" ?{undecided}" if undecided else ""
        return f"{failed}/{n} FAILED{und}, {pairs:.1f} pairs, {secs:.1f} s"


def _calibrate(reference: runner.RunningServer, start: Callable[[float], runner.RunningServer], pcts: list[int],
               probe_ms: float) -> dict[int, float]:  # fmt: skip
    """Delay (ms per target forward) per slowdown, from a probe: T(d) = T0 + k d, so ratio(d) = 1/(1 + d k/T0)."""
    server = start(probe_ms)
    try:
        ratios = sorted(pairing.measure_interleaved(server, reference, 4).ratios())
    finally:
        server.stop()
    r0 = statistics.median(ratios)
    per_ms = max(1 / r0 - 1, 1e-6) / probe_ms
    return {p: (1 / (1 - p / 100) - 1) / per_ms if p else 0.0 for p in pcts}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=20, help="runs per cell (default 20)")
    parser.add_argument("--cells", default="0:quiet,5:quiet,10:quiet,0:busy,5:busy,10:busy",
                        help="slowdown%%:load pairs (default: 0, 5, 10 x quiet, busy)")
    parser.add_argument("--load-procs", type=int, default=2, help="busy processes in a busy cell (default 2)")
    parser.add_argument("--delays-ms", default=None, help="PCT=MS,... instead of calibrating, e.g. 5=0.6,10=1.3")
    parser.add_argument("--probe-ms", type=float, default=2.0, help="calibration probe delay (default 2 ms)")
    parser.add_argument("--floor", type=float, default=0.975, help="speedup floor of the paired ratio (0.975)")
    parser.add_argument("--tolerance", type=float, default=0.02, help="compare tolerance, relative (0.02)")
    parser.add_argument("--repeats", type=int, default=3, help="first look / fixed repeats, pairs (default 3)")
    parser.add_argument("--max-repeats", type=int, default=12, help="sequential budget, pairs (default 12)")
    parser.add_argument("--requests", type=int, default=4, help="requests per phase (default 4)")
    parser.add_argument("--tokens", type=int, default=32, help="max_new_tokens (default 32)")
    args = parser.parse_args()
    signal.signal(signal.SIGTERM, signal.default_int_handler)
    cells = [(int(p), load) for p, load in (c.split(":") for c in args.cells.split(","))]
    pcts = sorted({0} | {p for p, _ in cells})  # the 0 % server holds the stored baseline
    project = Path(tempfile.mkdtemp(prefix="specdec-sequential-"))
    logs = project / "logs"
    design = sequential.Design(args.repeats, args.max_repeats)
    load = Load(args.load_procs)
    servers: dict[str, runner.RunningServer] = {}

    def start(name: str, delays: dict[int, float]) -> runner.RunningServer:
        (project / "specdec.yaml").write_text(_profiles(delays, args.requests, args.tokens))
        return runner.start_server(load_profiles(project / "specdec.yaml").get(name), log_dir=logs)

    try:
        servers["ref"] = start("ref", {})
        if args.delays_ms:
            delays = {int(k): float(v) for k, v in (kv.split("=") for kv in args.delays_ms.split(","))}
            delays.setdefault(0, 0.0)
        else:
            delays = _calibrate(servers["ref"], lambda ms: start("slow-1", {1: ms}), pcts, args.probe_ms)
        print("delays: " + ", ".join(f"{p}% {d:.3f} ms/forward" for p, d in sorted(delays.items())), flush=True)
        for pct in pcts:
            servers[f"slow-{pct}"] = start(f"slow-{pct}", {p: delays[p] for p in pcts})
        base_stream = Stream(servers["slow-0"], servers["ref"])
        base_stream.ratios(args.repeats)
        base = _record(base_stream.target_tok_s, base_stream.reference_tok_s)
        print(f"stored baseline: {args.repeats} pairs at 0 %, quiet, ratios "
              f"{', '.join(f'{r:.3f}' for r in base_stream.ratios(args.repeats))}", flush=True)  # fmt: skip
        header = (f"{'cell':<10} {'ratio':>6}  {'speedup fixed':<32} {'speedup sequential':<32} "
                  f"{'compare fixed':<32} {'compare sequential':<32}")  # fmt: skip
        rows = []
        for pct, kind in cells:
            tallies = [Tally() for _ in range(4)]
            medians = []
            if kind == "busy":
                load.on()
            try:
                for _ in range(args.runs):
                    s = Stream(servers[f"slow-{pct}"], servers["ref"])
                    tallies[0].verdicts.append(fixed_speedup(s, args.floor, args.repeats))
                    tallies[1].verdicts.append(sequential_speedup(s, args.floor, design))
                    tallies[2].verdicts.append(fixed_compare(s, base, args.tolerance, args.repeats))
                    tallies[3].verdicts.append(sequential_compare(s, base, args.tolerance, design))
                    medians.append(statistics.median(s.ratios(len(s.cost))))
            finally:
                load.off()
            rows.append(f"{f'{pct}% {kind}':<10} {statistics.median(medians):>6.3f}  "
                        + " ".join(f"{t.row():<32}" for t in tallies))  # fmt: skip
            print(rows[-1], flush=True)
        print()
        print(f"floor {args.floor}, tolerance {args.tolerance:.0%}, {args.repeats} pairs first, sequential up to "
              f"{args.max_repeats} ({design.looks} looks, alpha {design.alpha} each way); {args.requests} requests x "
              f"{args.tokens} tokens a phase; {args.runs} runs per cell; ?N = undecided")  # fmt: skip
        print("FAILED at 0 % = false alarms; at 5 % and 10 % = detections. s = server-seconds per verdict (mean).")
        print(header)
        for row in rows:
            print(row)
        print(f"load average: {os.getloadavg()[0]:.2f} (1 min), at {time.strftime('%H:%M:%S')}")
    finally:
        load.off()
        for server in servers.values():
            server.stop()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
