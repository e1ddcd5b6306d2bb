"""How far instances of one SGLang config spread, with and without CUDA graphs (issue 38), on one GPU.

Launches ``--instances`` servers of each config (no speculation, the bundled tiny target) on ports 31000.., in the
order g1 n1 g2 n2 ... (g: ``--graph-flags``, n: ``--nograph-flags``), each once the one before it has allocated its
KV cache, so that launches overlap but every instance sizes its pool from the memory left when it started (SGLang
0.5.17 budgets ``free memory now - free at start x (1 - mem_fraction_static)``, kv_cache_configurator.py:1614-1634).
Then measures every instance with the plugin's client (``benchmarks/bench_vs_serving.py``, random-ids prompts as
bench_serving draws them, ``--flush-cache``) at each ``--loads`` entry, instances alternating g/n within a round and
rounds in reverse order one after the other (ABBA over instances). Writes ``OUT/measure.jsonl`` (one line per phase:
instance, config, load, round, tok/s, TTFT/ITL p50) and ``OUT/table.txt``; server logs as ``OUT/<inst>.log``.

    python benchmarks/gpu/spread.py --python /tmp/sgvenv/bin/python --out /tmp/spread --instances 5 \\
        --graph-flags "..." --nograph-flags "..." [--loads 1:16:64,64:256:128] [--rounds 1] [--budget-s 540]

Standard library only (runs with the GPU image's interpreter); idle instances stay up while another is measured.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import signal
import statistics
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
TARGET = REPO / "pytest_specdec" / "refserver" / "assets" / "target"


def ready(port: int) -> bool:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/health", timeout=3) as r:
            return r.status == 200
    except Exception:
        return False


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--python", default=sys.executable)
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--instances", type=int, default=5)
    ap.add_argument("--graph-flags", required=True)
    ap.add_argument("--nograph-flags", required=True)
    ap.add_argument("--mem-fraction", type=float, default=0.08)
    ap.add_argument("--loads", default="1:16:64,64:256:128", help="concurrency:prompts:output_len, comma-separated")
    ap.add_argument("--input-len", type=int, default=128)
    ap.add_argument("--rounds", type=int, default=1)
    ap.add_argument("--budget-s", type=float, default=540)
    args = ap.parse_args()
    t0 = time.monotonic()
    args.out.mkdir(parents=True, exist_ok=True)
    names = [f"{c}{i}" for i in range(1, args.instances + 1) for c in ("g", "n")]
    procs: dict[str, tuple[subprocess.Popen, int]] = {}
    launched: dict[str, float] = {}
    try:
        for k, name in enumerate(names):
            port = 31000 + k
            flags = (args.graph_flags if name[0] == "g" else args.nograph_flags).split()
            cmd = [
                args.python,
                "-m",
                "sglang.launch_server",
                "--model-path",
                str(TARGET),
                "--host",
                "127.0.0.1",
                "--port",
                str(port),
                "--mem-fraction-static",
                str(args.mem_fraction),
                *flags,
            ]
            log = open(args.out / f"{name}.log", "w")
            procs[name] = (subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, start_new_session=True), port)
            launched[name] = time.monotonic()
            # next launch once this one has its KV pool (or is up, or died)
            while time.monotonic() - launched[name] < 240:
                text = (args.out / f"{name}.log").read_text(errors="replace")
                if (
                    re.search(r"KV Cache is allocated|max_total_num_tokens", text)
                    or procs[name][0].poll() is not None
                    or ready(procs[name][1])
                ):
                    break
                time.sleep(0.5)
            print(f"{name}: launched (+{time.monotonic() - t0:.0f} s)", flush=True)
        up: dict[str, float] = {}
        while len(up) + sum(p.poll() is not None for p, _ in procs.values()) < len(names):
            for name, (p, port) in procs.items():
                if name not in up and p.poll() is None and ready(port):
                    up[name] = time.monotonic() - launched[name]
                    print(f"{name}: ready after {up[name]:.0f} s", flush=True)
            if time.monotonic() - t0 > 400:
                break
            time.sleep(1)
        dead = [n for n, (p, _) in procs.items() if p.poll() is not None]
        if dead:
            print(f"died: {dead}", flush=True)
        loads = [tuple(int(x) for x in spec.split(":")) for spec in args.loads.split(",")]
        order = [n for n in names if n in up]
        rows = []
        jsonl = args.out / "measure.jsonl"
        for rnd in range(args.rounds):
            for name in order if rnd % 2 == 0 else order[::-1]:
                for conc, prompts, out_len in loads:
                    if time.monotonic() - t0 > args.budget_s:
                        print("budget spent: stopping the measurements", flush=True)
                        break
                    tmp = args.out / "phase.jsonl"
                    tmp.unlink(missing_ok=True)
                    cmd = [
                        args.python,
                        str(REPO / "benchmarks" / "bench_vs_serving.py"),
                        "--base-url",
                        f"http://127.0.0.1:{procs[name][1]}",
                        "--concurrency",
                        str(conc),
                        "--num-prompts",
                        str(prompts),
                        "--input-len",
                        str(args.input_len),
                        "--output-len",
                        str(out_len),
                        "--range-ratio",
                        "1",
                        "--flush-cache",
                        "--json-out",
                        str(tmp),
                    ]
                    env = {**os.environ, "PYTHONPATH": f"{REPO}:{os.environ.get('PYTHONPATH', '')}"}
                    subprocess.run(cmd, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.STDOUT, timeout=300)
                    try:
                        d = json.loads(tmp.read_text().splitlines()[-1])
                    except (OSError, IndexError, ValueError):
                        d = {}
                    row = {
                        "instance": name,
                        "graphs": name[0] == "g",
                        "concurrency": conc,
                        "prompts": prompts,
                        "output_len": out_len,
                        "round": rnd + 1,
                        "ready_s": round(up[name], 1),
                        **{k: v for k, v in d.items() if isinstance(v, (int, float)) and k not in vars(args)},
                    }
                    rows.append(row)
                    with jsonl.open("a") as fh:
                        fh.write(json.dumps(row) + "\n")
                    print(
                        f"{name} c{conc}: "
                        + ", ".join(
                            f"{k}={v:.4g}"
                            for k, v in row.items()
                            if isinstance(v, float) and ("tok_s" in k or "p50" in k)
                        ),
                        flush=True,
                    )
        lines = []
        for graphs in (True, False):
            for conc, prompts, out_len in loads:
                sel = [r for r in rows if r["graphs"] == graphs and r["concurrency"] == conc]
                key = next((k for k in ("output_tok_s", "tok_s") if sel and k in sel[0]), None)
                if not sel or key is None:
                    continue
                per: dict[str, list[float]] = {}
                for r in sel:
                    per.setdefault(str(r["instance"]), []).append(float(r[key]))
                vals = [statistics.median(v) for v in per.values()]
                lines.append(
                    f"{'graphs' if graphs else 'no graphs'}, c{conc} ({prompts} x {out_len} tokens): "
                    + " ".join(f"{n}={statistics.median(v):.0f}" for n, v in per.items())
                    + f" | min {min(vals):.0f} max {max(vals):.0f} max/min {max(vals) / min(vals):.3f}"
                    + (f" cv {statistics.stdev(vals) / statistics.mean(vals):.3f}" if len(vals) > 1 else "")
                )
        (args.out / "table.txt").write_text("\n".join(lines) + "\n")
        print("\n".join(lines))
    finally:
        for p, _ in procs.values():
            try:
                os.killpg(p.pid, signal.SIGTERM)
            except OSError:
                pass
        time.sleep(3)
        for p, _ in procs.values():
            try:
                os.killpg(p.pid, signal.SIGKILL)
            except OSError:
                pass
    return 0


if __name__ == "__main__":
    sys.exit(main())
