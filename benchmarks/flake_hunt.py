"""Flake hunt: run the plugin's own suite N times in random order beside a busy process; list every test that failed.

Usage (from the repository root, with the dev and flake extras installed: ``pip install -e '.[dev,flake]'``)::

    python benchmarks/flake_hunt.py                         # 10 full runs, 1 busy process, random order
    python benchmarks/flake_hunt.py --runs 3 --busy 2 -- -m "not slow and not vllm"
    python benchmarks/flake_hunt.py --no-shuffle -- -n 2   # fixed order, under pytest-xdist

Each run is ``pytest -p randomly --randomly-seed=SEED`` (pytest-randomly shuffles modules, classes and tests, and
reseeds ``random`` per test; the suite turns it off by default with ``-p no:randomly``) with a JUnit XML report; a
failed or errored test case in any run is listed with the seeds it failed under, so that
``pytest -p randomly --randomly-seed=SEED`` replays that order. The busy processes spin on the CPU for the whole
hunt, standing in for the other jobs of a loaded CI runner. Prints one line per run (wall time, load average,
failures), then a table of every test that failed at least once. Exit status 1 when any test failed.

The goal (issue 25): no failure in 10 consecutive full runs under that load. Fix causes; never retry into green.
"""

from __future__ import annotations

import argparse
import importlib.util
import multiprocessing
import os
import subprocess
import sys
import tempfile
import time
import xml.etree.ElementTree as ET
from collections import defaultdict
from dataclasses import dataclass, field
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


def _spin() -> None:
    while True:
        pass


@dataclass
class Failure:
    """One test case that failed or errored at least once: the seeds it failed under and its first message."""

    test_id: str
    seeds: list[int] = field(default_factory=list)
    message: str = ""


def failed_cases(junit: Path) -> list[tuple[str, str]]:
    """``(test id, first line of the message)`` of every failed or errored case in a JUnit XML report.

    :raises ET.ParseError: the report is not XML (pytest crashed before writing it).
    """
    out = []
    for case in ET.parse(junit).getroot().iter("testcase"):
        for kind in ("failure", "error"):
            node = case.find(kind)
            if node is not None:
                name = f"{case.get('classname', '')}::{case.get('name', '')}"
                out.append((name, (node.get("message") or kind).splitlines()[0][:160]))
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=10, help="full runs of the suite (default 10)")
    parser.add_argument("--busy", type=int, default=1, help="busy processes beside the suite (default 1)")
    parser.add_argument("--seed", type=int, default=1, help="seed of the first run; run i uses seed + i")
    parser.add_argument("--no-shuffle", action="store_true", help="keep the suite's fixed order")
    parser.add_argument("--keep", type=Path, metavar="DIR",
                        help="keep each run's JUnit XML and console (seedN.xml, seedN.log) in DIR")  # fmt: skip
    parser.add_argument("pytest_args", nargs="*", help="after --: passed to pytest")
    args = parser.parse_args(argv)
    if not args.no_shuffle and importlib.util.find_spec("pytest_randomly") is None:
        parser.error("random order needs pytest-randomly: pip install -e '.[flake]' (or pass --no-shuffle)")

    busy = [multiprocessing.Process(target=_spin, daemon=True) for _ in range(args.busy)]
    for proc in busy:
        proc.start()
    failures: dict[str, Failure] = defaultdict(lambda: Failure(""))
    try:
        with tempfile.TemporaryDirectory(prefix="flake-hunt-") as tmp:
            where = args.keep or Path(tmp)
            where.mkdir(parents=True, exist_ok=True)
            for i in range(args.runs):
                seed = args.seed + i
                junit = where / f"seed{seed}.xml"
                order = [] if args.no_shuffle else ["-p", "randomly", f"--randomly-seed={seed}"]
                cmd = [sys.executable, "-m", "pytest", "-q", *order, f"--junitxml={junit}", *args.pytest_args]
                started = time.monotonic()
                with open(where / f"seed{seed}.log", "w") as console:
                    done = subprocess.run(cmd, cwd=REPO, stdout=console, stderr=subprocess.STDOUT)
                wall = time.monotonic() - started
                try:
                    cases = failed_cases(junit)
                except (OSError, ET.ParseError):
                    cases = [(f"<pytest exited {done.returncode} without a report>", "")]
                for test_id, message in cases:
                    entry = failures[test_id]
                    entry.test_id, entry.message = test_id, entry.message or message
                    entry.seeds.append(seed)
                load = os.getloadavg()[0]
                print(f"run {i + 1}/{args.runs} seed {seed}: exit {done.returncode}, {len(cases)} failed, "
                      f"{wall:.0f} s, load average {load:.1f}", flush=True)  # fmt: skip
    finally:
        for proc in busy:
            proc.terminate()
    if not failures:
        print(f"no test failed in {args.runs} runs beside {args.busy} busy process(es)")
        return 0
    print(f"\n{'test':<90} {'failed':>6}  seeds / first message")
    for entry in sorted(failures.values(), key=lambda f: -len(f.seeds)):
        print(f"{entry.test_id:<90} {len(entry.seeds):>3}/{args.runs}  {entry.seeds} {entry.message}")
    return 1


if __name__ == "__main__":
    sys.exit(main())
