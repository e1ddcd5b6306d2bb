"""Prints how fast pytest_specdec.server notices readiness and crashes, and how long teardown takes (not a test).

Usage: ``python benchmarks/bench_lifecycle.py [--repeats 5] [--reference]``

Fake servers (tests/fakeserver.py) stamp ``time.monotonic()`` (CLOCK_MONOTONIC, shared by all processes on Linux)
when they become ready or exit; the harness stamps when it notices. Targets (issue 6): readiness detection <= 0.25 s,
exit detection <= 1 s, teardown <= the server's own shutdown + 1 s. ``--reference`` also runs the bundled reference
server (``python -m pytest_specdec.refserver``, EAGLE-3 on the committed assets): it has no monotonic stamps, so it
shows startup time, teardown time and how its OOM and orphan faults are handled.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

import httpx

from pytest_specdec.engines.base import LaunchSpec
from pytest_specdec.errors import ServerStartError
from pytest_specdec.ports import find_free_port
from pytest_specdec.server import ServerProcess

FAKE = Path(__file__).resolve().parents[1] / "tests" / "fakeserver.py"
HOST = "127.0.0.1"


def _spec(*flags: str) -> LaunchSpec:
    port = find_free_port(HOST)
    argv = (sys.executable, str(FAKE), "--port", str(port), *flags)
    return LaunchSpec(argv=argv, env={"PATH": os.environ["PATH"]}, host=HOST, port=port)


def _probe(base_url: str):  # type: ignore[no-untyped-def]
    return lambda: httpx.get(base_url + "/health", timeout=1.0).status_code == 200


def _stamp(path: Path, what: str) -> float:
    for line in path.read_text().splitlines():
        name, value = line.split()
        if name == what:
            return float(value)
    raise RuntimeError(f"no {what!r} stamp in {path}")


def readiness_delay(tmp: Path, i: int) -> float:
    stamps = tmp / f"ready-{i}.txt"
    with ServerProcess.start(_spec("--stamp-file", str(stamps)), name="fake", log_path=tmp / f"r{i}.log") as proc:
        proc.wait_ready(_probe(proc.base_url), timeout_s=60)
        noticed = time.monotonic()
    return noticed - _stamp(stamps, "ready")


def exit_delay(tmp: Path, i: int) -> float:
    stamps = tmp / f"exit-{i}.txt"
    proc = ServerProcess.start(
        _spec("--crash-at", "0.5", "--stamp-file", str(stamps)), name="fake", log_path=tmp / f"e{i}.log"
    )
    try:
        proc.wait_ready(_probe(proc.base_url), timeout_s=60)
    except ServerStartError:
        noticed = time.monotonic()
    else:
        raise RuntimeError("the crashing fake became ready")
    return noticed - _stamp(stamps, "exit")


def teardown(tmp: Path, i: int, *flags: str, timeout_s: float = 30.0) -> float:
    with ServerProcess.start(_spec(*flags), name="fake", log_path=tmp / f"t{i}.log") as proc:
        proc.wait_ready(_probe(proc.base_url), timeout_s=60)
        time.sleep(0.3)  # let the descendant snapshot run
        report = proc.stop(timeout_s=timeout_s)
    if not report.clean:
        raise RuntimeError(report.describe())
    return report.duration_s


ASSETS = Path(__file__).resolve().parents[1] / "pytest_specdec" / "refserver" / "assets"


def _ref_spec(*flags: str) -> LaunchSpec:
    port = find_free_port(HOST)
    argv = (
        sys.executable, "-m", "pytest_specdec.refserver", "--model-path", str(ASSETS / "target"),
        "--speculative-algorithm", "EAGLE3", "--speculative-draft-model-path", str(ASSETS / "draft-eagle3"),
        "--speculative-num-steps", "3", "--speculative-eagle-topk", "1", "--speculative-num-draft-tokens", "4",
        "--host", HOST, "--port", str(port), *flags,
    )  # fmt: skip
    env = {k: v for k, v in os.environ.items() if k in ("PATH", "HOME", "PYTHONPATH")}
    return LaunchSpec(argv=argv, env=env, host=HOST, port=port)


def reference(tmp: Path) -> list[str]:
    """Startup, teardown and fault handling on the bundled reference server (imports torch: seconds, not ms)."""
    lines = []
    with ServerProcess.start(_ref_spec(), name="reference", log_path=tmp / "ref.log") as proc:
        ready_s = proc.wait_ready(_probe(proc.base_url), timeout_s=600)
        report = proc.stop()
    lines.append(f"reference server: ready {ready_s:.2f} s after launch; teardown {report.duration_s * 1000:.0f} ms")
    proc = ServerProcess.start(_ref_spec("--ref-fault-oom-at-startup", "1"), name="reference", log_path=tmp / "o.log")
    try:
        proc.wait_ready(_probe(proc.base_url), timeout_s=600)
    except ServerStartError as exc:
        elapsed = time.monotonic() - proc.started
        lines.append(f"reference --ref-fault-oom-at-startup 1: ServerStartError {elapsed:.2f} s after launch, "
                     f"cause {exc.cause!r}")  # fmt: skip
    with ServerProcess.start(_ref_spec("--ref-fault-orphan"), name="reference", log_path=tmp / "g.log") as proc:
        proc.wait_ready(_probe(proc.base_url), timeout_s=600)
        report = proc.stop(timeout_s=1.0)
    lines.append(f"reference --ref-fault-orphan, grace 1 s: {report.describe()}; clean={report.clean}")
    return lines


def _row(name: str, values: list[float], target: str) -> str:
    return f"{name:<44} {statistics.median(values) * 1000:>9.1f} {max(values) * 1000:>9.1f} {len(values):>3}  {target}"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--reference", action="store_true")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="bench-lifecycle-") as name:
        tmp = Path(name)
        n = args.repeats
        rows = [
            _row("readiness detection (ready -> wait_ready)", [readiness_delay(tmp, i) for i in range(n)], "<= 250 ms"),
            _row("exit detection (exit -> ServerStartError)", [exit_delay(tmp, i) for i in range(n)], "<= 1000 ms"),
            _row("teardown, clean SIGTERM exit", [teardown(tmp, i) for i in range(n)], "<= 0 + 1000 ms"),
            _row(
                "teardown, server's own shutdown takes 0.5 s",
                [teardown(tmp, i, "--term-delay", "0.5") for i in range(n)],
                "<= 500 + 1000 ms",
            ),
            _row(
                "teardown, setsid grandchild ignores SIGTERM",
                [teardown(tmp, i, "--orphan", str(tmp / f"gc{i}.pid"), timeout_s=1.0) for i in range(n)],
                "grace 1000 + SIGKILL",
            ),
        ]
        print(f"{'measure':<44} {'median ms':>9} {'max ms':>9} {'n':>3}  target")
        for row in rows:
            print(row)
        if args.reference:
            for line in reference(tmp):
                print(line)


if __name__ == "__main__":
    main()
