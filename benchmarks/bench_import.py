"""Prints what the installed plugin costs a pytest run that has no specdec tests (not a test).

Usage: ``python benchmarks/bench_import.py [--against GITREF] [--runs 7]``

Every pytest run in an environment with pytest-specdec installed imports ``pytest_specdec.plugin`` (entry point
``specdec``) and runs its ``pytest_configure``, so what they import is paid by every run. Rows, each the median of
``--runs`` fresh interpreters (``time.perf_counter()`` around a subprocess, or ``python -X importtime``):

- ``import plugin (after pytest)``: the cumulative ``-X importtime`` figure of ``pytest_specdec.plugin`` in
  ``python -c "import pytest; import pytest_specdec.plugin"`` (pytest is imported by the run anyway);
- ``python -c 'import plugin'``: the whole interpreter, pytest included, wall clock;
- ``pytest run, 1 plain test``: ``python -m pytest -q`` on one test that does not use the plugin, wall clock, and
  the same with ``-p no:specdec``; their difference is the plugin's cost per run (import + configure + hooks);
- the heavy third-party modules (aiohttp, numpy, pydantic, httpx, yaml, psutil) in ``sys.modules`` after the import.

``--against GITREF`` runs every row also on that revision (``git archive`` into a temporary directory, put first on
``PYTHONPATH``), interleaved with the working tree's runs, so the two columns share the machine's load.
"""

from __future__ import annotations

import argparse
import os
import re
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
HEAVY = ("aiohttp", "numpy", "pydantic", "httpx", "yaml", "psutil")
PLAIN_TEST = "def test_plain():\n    assert 1 + 1 == 2\n"


def _run(src: Path, args: list[str], cwd: Path) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONPATH": str(src)}
    return subprocess.run([sys.executable, *args], cwd=cwd, env=env, capture_output=True, text=True, check=False)


def _wall(src: Path, args: list[str], cwd: Path) -> float:
    started = time.perf_counter()
    done = _run(src, args, cwd)
    elapsed = time.perf_counter() - started
    if done.returncode != 0:
        raise SystemExit(f"{args} failed in {src}:\n{done.stdout}\n{done.stderr}")
    return elapsed


def _plugin_import_s(src: Path, cwd: Path) -> float:
    done = _run(src, ["-X", "importtime", "-c", "import pytest; import pytest_specdec.plugin"], cwd)
    match = re.search(r"\|\s*(\d+) \| pytest_specdec\.plugin$", done.stderr, re.MULTILINE)
    if match is None:
        raise SystemExit(f"no importtime line for pytest_specdec.plugin in {src}:\n{done.stderr[-2000:]}")
    return int(match.group(1)) / 1e6


def _heavy(src: Path, cwd: Path) -> str:
    code = f"import sys, pytest_specdec.plugin; print(','.join(m for m in {HEAVY!r} if m in sys.modules))"
    return _run(src, ["-c", code], cwd).stdout.strip() or "none"


def _measure(sources: dict[str, Path], runs: int, work: Path) -> dict[str, dict[str, float]]:
    rows: dict[str, dict[str, list[float]]] = {}

    def add(row: str, name: str, value: float) -> None:
        rows.setdefault(row, {}).setdefault(name, []).append(value)

    (work / "test_plain.py").write_text(PLAIN_TEST)
    pytest_args = ["-m", "pytest", "-q", "-p", "no:cacheprovider", "test_plain.py"]
    for _ in range(runs):
        for name, src in sources.items():  # interleaved: both columns see the same load
            add("import plugin (after pytest)", name, _plugin_import_s(src, work))
            add("python -c 'import plugin'", name, _wall(src, ["-c", "import pytest_specdec.plugin"], work))
            with_plugin = _wall(src, pytest_args, work)
            without = _wall(src, [*pytest_args, "-p", "no:specdec"], work)
            add("pytest run, 1 plain test", name, with_plugin)
            add("same, -p no:specdec", name, without)
            add("plugin's cost per run", name, with_plugin - without)
    return {row: {name: statistics.median(v) for name, v in cols.items()} for row, cols in rows.items()}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--against", metavar="GITREF", help="also measure this revision (e.g. main)")
    parser.add_argument("--runs", type=int, default=7, help="fresh interpreters per row and column (default: 7)")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="bench-import-") as tmp:
        work = Path(tmp) / "project"
        work.mkdir()
        sources = {"working tree": ROOT}
        if args.against:
            old = Path(tmp) / "against"
            old.mkdir()
            archive = subprocess.run(["git", "-C", str(ROOT), "archive", args.against], capture_output=True, check=True)
            subprocess.run(["tar", "-x", "-C", str(old)], input=archive.stdout, check=True)
            sources = {args.against: old, **sources}
        medians = _measure(sources, args.runs, work)
        heavy = {name: _heavy(src, work) for name, src in sources.items()}
    names = list(sources)
    print(f"# median of {args.runs} fresh interpreters per cell; {sys.executable}, load {os.getloadavg()[0]:.1f}")
    print(f"{'row':<30}" + "".join(f"{n:>16}" for n in names))
    for row, cols in medians.items():
        print(f"{row:<30}" + "".join(f"{cols[n] * 1000:>13.0f} ms" for n in names))
    for name in names:
        print(f"# {name}: third-party modules loaded by the import: {heavy[name]}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
