"""Record long streams of real paired measurements on the reference server, once, for ``bench_verdicts.py`` to replay.

    python benchmarks/record_ref_streams.py                      # 0/5/10/20 % x quiet/busy, 60 pairs a cell
    python benchmarks/record_ref_streams.py --pairs 4 --cells 0:quiet --out /tmp/s.json   # a proof that it runs

A cell is a slowdown and a load. The slowed target is the bundled ``eagle3`` with a forward delay
(``SPECDEC_REF_FORWARD_DELAY_MS`` in the profile's ``env:``), calibrated on the quiet machine so that its tok/s is
``1 - pct/100`` of an unslowed ``eagle3`` (a 0 % cell is a second, unslowed server). The reference arm is one
``eagle3`` server kept up for every cell; targets are started one at a time (a 2-core machine cannot start five
servers at once). Each pair is measured as the plugin measures it (``pairing.measure_interleaved``: R T, T R, ...).
``busy`` cells run ``--load-procs`` CPU-bound processes beside the servers (``busy.Load``).

Output (JSON): ``{"meta": {...}, "cells": {"10:busy": {"target_tok_s": [...], "reference_tok_s": [...],
"server_s": [...], "load": [...]}}}`` — per pair, both arms' output tok/s, the server-seconds of both phases, and
the 1-minute load average when the pair ended.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import platform
import signal
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from busy import Load  # noqa: E402 - benchmarks/busy.py, beside this script

from pytest_specdec.core.errors import ServerError  # noqa: E402
from pytest_specdec.engines.rules import load_profiles  # noqa: E402
from pytest_specdec.measure import pairing, runner  # noqa: E402
from pytest_specdec.refserver.decoding import FORWARD_DELAY_ENV  # noqa: E402

DEFAULT_OUT = ROOT / "benchmarks" / "data" / "ref-streams.json"


def _profiles(delay_ms: float, requests: int, tokens: int) -> str:
    """``ref`` (the bundled eagle3) and ``target`` (the same with ``delay_ms`` per target forward)."""
    return f"""profiles:
  ref:
    server: reference
    startup_timeout_s: 600
    workload: {{max_new_tokens: {tokens}, num_requests: {requests}, warmup_requests: 1, concurrency: 1,
               temperature: 0.0, ignore_eos: true}}
    speculative: {{algorithm: EAGLE3, num_steps: 3, eagle_topk: 1, num_draft_tokens: 4}}
  target:
    extends: ref
    env: {{{FORWARD_DELAY_ENV}: '{delay_ms:.4f}'}}
"""


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--pairs", type=int, default=60, help="pairs per cell (default 60)")
    parser.add_argument("--cells", default="0:quiet,5:quiet,10:quiet,20:quiet,0:busy,5:busy,10:busy,20:busy")
    parser.add_argument("--load-procs", type=int, default=1, help="busy processes in a busy cell (default 1)")
    parser.add_argument("--probe-ms", type=float, default=2.0, help="calibration probe delay, ms (default 2)")
    parser.add_argument("--requests", type=int, default=4, help="requests per phase (default 4)")
    parser.add_argument("--tokens", type=int, default=32, help="max_new_tokens (default 32)")
    parser.add_argument("--out", type=Path, default=DEFAULT_OUT)
    args = parser.parse_args()
    signal.signal(signal.SIGTERM, signal.default_int_handler)
    cells = [(int(p), load) for p, load in (c.split(":") for c in args.cells.split(","))]
    project = Path(tempfile.mkdtemp(prefix="specdec-streams-"))
    load = Load(args.load_procs)

    def start(name: str, delay_ms: float) -> runner.RunningServer:
        (project / "specdec.yaml").write_text(_profiles(delay_ms, args.requests, args.tokens))
        return runner.start_server(load_profiles(project / "specdec.yaml").get(name), log_dir=project / "logs")

    # Cells already in --out are kept (a run stopped half-way resumes); each cell is written as soon as it ends.
    out: dict[str, object] = json.loads(args.out.read_text()) if args.out.exists() else {}
    data: dict[str, dict[str, list[float]]] = dict(out.get("cells") or {})  # type: ignore[call-overload]  # our JSON
    todo = [(p, k) for k, p in sorted((k, p) for p, k in cells) if f"{p}:{k}" not in data]  # quiet cells first
    reference = start("ref", 0.0)
    try:
        meta = out.get("meta")
        if isinstance(meta, dict) and "delays_ms" in meta:
            delays = {int(p): float(d) for p, d in meta["delays_ms"].items()}
            r0 = float(meta["probe"]["ratio"])
        else:
            probe = start("target", args.probe_ms)
            try:
                r0 = statistics.median(pairing.measure_interleaved(probe, reference, 6).ratios())
            finally:
                probe.stop()
            per_ms = max(1 / r0 - 1, 1e-6) / args.probe_ms  # T(d) = T0 (1 + k d): ratio(d) = 1 / (1 + k d)
            delays = {p: (1 / (1 - p / 100) - 1) / per_ms for p in (0, 5, 10, 20)}
        print(f"probe {args.probe_ms} ms -> ratio {r0:.3f}; delays: "
              + ", ".join(f"{p}% {d:.3f} ms" for p, d in delays.items()), flush=True)  # fmt: skip
        out["meta"] = {
            "date": time.strftime("%Y-%m-%dT%H:%M:%S"), "machine": f"{platform.machine()} {os.cpu_count()} cores",
            "workload": f"{args.requests} requests x {args.tokens} tokens, c1, temperature 0, bundled eagle3",
            "delays_ms": delays, "probe": {"delay_ms": args.probe_ms, "ratio": r0}, "load_procs": args.load_procs,
        }  # fmt: skip
        retries = 0
        while todo:
            pct, kind = todo[0]
            if reference.process is not None and not reference.process.alive():
                reference = start("ref", 0.0)
            target = start("target", delays[pct])
            cell: dict[str, list[float]] = {"target_tok_s": [], "reference_tok_s": [], "server_s": [], "load": []}
            try:
                if kind == "busy":
                    load.on()
                for i in range(args.pairs):
                    arms = pairing.measure_interleaved(target, reference, 1, offset=i)
                    t, r = arms.target[0][0], arms.reference[0]
                    cell["target_tok_s"].append(float(t.metrics.output_tok_s or 0.0))
                    cell["reference_tok_s"].append(float(r.metrics.output_tok_s or 0.0))
                    cell["server_s"].append(round(t.server_s + r.server_s, 4))
                    cell["load"].append(round(os.getloadavg()[0], 2))
            except ServerError as exc:  # a server killed from outside: the cell is measured again from its start
                retries += 1
                print(f"{pct}% {kind}: {exc}; measuring the cell again", flush=True)
                if retries > 5:
                    raise
                continue
            finally:
                load.off()
                target.stop()
            todo.pop(0)
            data[f"{pct}:{kind}"] = cell
            out["cells"] = data
            args.out.parent.mkdir(parents=True, exist_ok=True)
            args.out.write_text(json.dumps(out, indent=1))
            logs = [math.log(a / b) for a, b in zip(cell["target_tok_s"], cell["reference_tok_s"], strict=True)]
            print(f"{pct}% {kind}: {len(logs)} pairs, median ratio {math.exp(statistics.median(logs)):.3f}, "
                  f"sd of log ratio {statistics.stdev(logs):.3f}, load {statistics.median(cell['load']):.2f}, "
                  f"{statistics.mean(cell['server_s']):.2f} server-s/pair", flush=True)  # fmt: skip
    finally:
        load.off()
        reference.stop()
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
