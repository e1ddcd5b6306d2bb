"""Acceptance per draft position on the reference server (a script, not a test): one row per configuration.

Usage: ``OMP_NUM_THREADS=1 python benchmarks/bench_positions.py [--profiles eagle3,eagle3-wrong-layers,...]
[--window 8 --window 16]``

Each profile of ``examples/more/specdec.yaml`` is started through the plugin's own runner (``runner.start_server`` +
``runner.measure``: 16 built-in prompts, 64 tokens, temperature 0, so every figure is exactly reproducible); each
``--window N`` adds ``eagle3`` with ``--speculative-draft-window-size N`` (the drafter sees only its last N keys).
Printed per row: accept length, then per draft position k the unconditional rate (steps accepting draft k / verify
steps) and the conditional one (/ steps that reached k), from ``meta_info.spec_correct_drafts_histogram``.
"""

from __future__ import annotations

import argparse
import tempfile
from pathlib import Path

from pytest_specdec.engines.rules import load_profiles
from pytest_specdec.measure import runner

ROOT = Path(__file__).resolve().parents[1]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--profiles", default="eagle3,eagle3-wrong-layers")
    parser.add_argument("--window", type=int, action="append", default=[])
    args = parser.parse_args()
    profile_set = load_profiles(ROOT / "examples" / "more" / "specdec.yaml")
    wanted = [(name, profile_set.get(name)) for name in args.profiles.split(",") if name]
    base = profile_set.get("eagle3")
    for n in args.window:
        extra = [*base.extra_args, "--speculative-draft-window-size", str(n)]
        variant = base.model_copy(update={"name": f"eagle3-window-{n}", "extra_args": extra})
        wanted.append((f"eagle3 window {n}", variant))
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        for label, profile in wanted:
            with runner.running_server(profile, log_dir=Path(tmp) / "logs") as server:
                m = runner.measure(server, base_dir=ROOT / "examples" / "more").metrics
            cells = [f"{r:.3f}/{c:.3f}" if c is not None else f"{r:.3f}/n/a"
                     for r, c in zip(m.accept_rate_at, m.accept_rate_cond_at, strict=True)]
            rows.append([label, f"{m.accept_length:.3f}", *cells])
            print(f"done: {label}", flush=True)
    n = max(len(r) for r in rows) - 2
    header = ["configuration", "accept_len", *(f"k={k} rate/cond" for k in range(1, n + 1))]
    widths = [max(len(str(r[i])) if i < len(r) else 0 for r in [header, *rows]) for i in range(len(header))]
    for r in [header, *rows]:
        pairs = enumerate(zip(r, widths, strict=False))
        cells = [str(c).ljust(w) if i == 0 else str(c).rjust(w) for i, (c, w) in pairs]
        print("  ".join(cells))


if __name__ == "__main__":
    main()
