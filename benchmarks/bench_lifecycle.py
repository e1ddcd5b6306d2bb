"""Prints how fast pytest_specdec.serve.server notices readiness and crashes, and how long teardown takes (not a test).

Usage: ``python benchmarks/bench_lifecycle.py [--repeats 5] [--reference] [--pytest]``

Fake servers (tests/fakeserver.py) stamp ``time.monotonic()`` (CLOCK_MONOTONIC, shared by all processes on Linux)
when they become ready or exit; the harness stamps when it notices. Targets (issue 6): readiness detection <= 0.25 s,
exit detection <= 1 s, teardown <= the server's own shutdown + 1 s. ``--reference`` also runs the bundled reference
server (``python -m pytest_specdec.refserver``, EAGLE-3 on the committed assets): it has no monotonic stamps, so it
shows startup time, teardown time and how its OOM and orphan faults are handled.

``--pytest`` runs the plugin end to end in a scratch project (reference server, issue 16): pytest SIGKILLed while
its server starts and while a test runs -> seconds until no server process is left and its port is free (the
supervisor's work, no later run needed); and ``pytest -n 4`` over 3 profiles -> launches per profile and the most
servers alive at once (sampled every 50 ms).
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import httpx
import psutil

from pytest_specdec.core.errors import ServerStartError
from pytest_specdec.engines.base import LaunchSpec
from pytest_specdec.serve.ports import find_free_port, port_is_free
from pytest_specdec.serve.server import ServerProcess

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


# -- pytest end to end (issue 16) --------------------------------------------------------------------------------

REPO = Path(__file__).resolve().parents[1]
_PROFILE = """  {name}:
    server: reference
    env: {{SPECDEC_BENCH_TAG: "{tag}", SPECDEC_BENCH_PROFILE: {name}}}
    workload: {{max_new_tokens: 16, num_requests: 2, repeats: 1, warmup_requests: 0}}
    {extra}
"""
_SPEC = "speculative: {algorithm: EAGLE3, num_steps: 3, eagle_topk: 1, num_draft_tokens: 4}"


def _project(tmp: Path, tag: str) -> Path:
    project = tmp / tag
    project.mkdir()
    profiles = [("p1", ""), ("p2", _SPEC), ("p3", _SPEC[:-1] + ", aux_hidden_state_layer_ids: [0, 1, 2]}")]
    (project / "specdec.yaml").write_text(
        "profiles:\n" + "".join(_PROFILE.format(name=n, tag=tag, extra=e) for n, e in profiles)
    )
    (project / "test_bench.py").write_text(
        "import time\n\n"
        "def test_accept(specdec_run):\n    assert specdec_run.metrics.num_ok == 2\n\n"
        "def test_info(specdec_server):\n    assert specdec_server.base_url\n\n"
        "def test_hang(specdec_server, request):\n"
        "    if request.config.option.keyword == 'hang':\n        time.sleep(600)\n"
    )
    (project / "test_other.py").write_text(
        "import time, pytest\n\n@pytest.mark.parametrize('i', range(8))\ndef test_other(i):\n    time.sleep(0.3)\n"
    )
    (project / "pytest.ini").write_text("[pytest]\n")
    return project


def _servers(tag: str) -> list[tuple[int, str]]:
    """(pid, profile) of the live reference servers carrying ``tag`` in their environment."""
    found = []
    for proc in psutil.process_iter():
        try:
            env = proc.environ()
            if env.get("SPECDEC_BENCH_TAG") == tag and "pytest_specdec.refserver" in proc.cmdline():
                found.append((proc.pid, env.get("SPECDEC_BENCH_PROFILE", "?")))
        except (psutil.NoSuchProcess, psutil.AccessDenied, psutil.ZombieProcess):
            continue
    return found


def _pytest(project: Path, *args: str, **kwargs: object) -> subprocess.Popen[bytes]:
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    return subprocess.Popen(
        [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", *args], cwd=project, env=env,
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, **kwargs,  # type: ignore[arg-type]
    )  # fmt: skip


def sigkill_pytest(tmp: Path, i: int, *, when: str) -> float:
    """SIGKILL pytest while its server starts (``when="startup"``) or while a test runs (``"mid-run"``); seconds
    from the kill until no server process is left (not even a zombie) and its port is free."""
    tag = f"kill-{when}-{i}"
    project = _project(tmp, tag)
    proc = _pytest(project, "test_bench.py", "-k", "hang", "--server-profile=p1")
    records = project / ".specdec" / "servers"
    deadline = time.monotonic() + 300
    entry: dict[str, object] = {}
    while time.monotonic() < deadline:
        found = list(records.glob("*.json"))
        if found:
            entry = json.loads(found[0].read_text())
            if when == "startup":
                break
            try:
                if httpx.get(str(entry["base_url"]) + "/health", timeout=1.0).status_code == 200:
                    time.sleep(1.0)  # the test body is running
                    break
            except httpx.HTTPError:
                pass
        time.sleep(0.02)
    else:
        proc.kill()
        raise RuntimeError(f"{tag}: the server did not start")
    pid, port = int(entry["pid"]), int(str(entry["base_url"]).rsplit(":", 1)[1])  # type: ignore[call-overload]
    proc.send_signal(signal.SIGKILL)
    killed = time.monotonic()
    proc.wait()
    while psutil.pid_exists(pid) or not port_is_free(HOST, port):
        if time.monotonic() - killed > 60:
            raise RuntimeError(f"{tag}: server pid {pid} still there 60 s after pytest was killed")
        time.sleep(0.01)
    return time.monotonic() - killed


def xdist_schedule(tmp: Path) -> tuple[dict[str, int], int, int, float]:
    """``pytest -n 4`` over profiles p1, p2, p3 (3 specdec tests each, 8 other tests): launches per profile, most
    servers alive at once, the exit status, and the wall time."""
    tag = "xdist"
    project = _project(tmp, tag)
    pids: dict[str, set[int]] = {}
    most = 0
    stop = threading.Event()

    def sample() -> None:
        nonlocal most
        while not stop.wait(0.05):
            live = _servers(tag)
            most = max(most, len(live))
            for pid, name in live:
                pids.setdefault(name, set()).add(pid)

    sampler = threading.Thread(target=sample, daemon=True)
    sampler.start()
    started = time.monotonic()
    proc = _pytest(project, "-n", "4", "-p", "xdist", "--server-profile=p1,p2,p3", "-k", "not hang")
    code = proc.wait(timeout=1200)
    wall = time.monotonic() - started
    stop.set()
    sampler.join()
    return {name: len(found) for name, found in sorted(pids.items())}, most, code, wall


def pytest_rows(tmp: Path, repeats: int) -> list[str]:
    lines = []
    for when in ("startup", "mid-run"):
        values = [sigkill_pytest(tmp, i, when=when) for i in range(repeats)]
        lines.append(_row(f"pytest SIGKILL at {when} -> no server, port free", values, "<= 2000 ms"))
    launches, most, code, wall = xdist_schedule(tmp)
    lines.append(f"pytest -n 4, profiles p1,p2,p3: launches per profile {launches} (target 1 each); most servers "
                 f"alive at once {most} (target 1); exit {code}; {wall:.0f} s")  # fmt: skip
    return lines


def _row(name: str, values: list[float], target: str) -> str:
    return f"{name:<44} {statistics.median(values) * 1000:>9.1f} {max(values) * 1000:>9.1f} {len(values):>3}  {target}"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--reference", action="store_true")
    parser.add_argument("--pytest", action="store_true", help="the plugin end to end: SIGKILLed pytest, xdist")
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
        if args.pytest:
            for line in pytest_rows(tmp, n):
                print(line)


if __name__ == "__main__":
    main()
