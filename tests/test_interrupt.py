"""Ctrl-C during a run: pytest tears the servers down, and the summary says so (not only "KeyboardInterrupt")."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from pytest_specdec.engines.rules import BUNDLED_TARGET
from tests.helpers import IN_PROCESS_INI, STRICT_INI, run_in_process, sigint_default

FAKE = Path(__file__).resolve().parent / "fakesglang"


def test_interrupted_run_names_the_servers_it_stopped(pytester: pytest.Pytester) -> None:
    env = json.dumps({"PYTHONPATH": str(FAKE), "SPECDEC_FAKE_SGLANG": "{}"})
    pytester.makefile(".yaml", specdec=f"profiles:\n  baseline:\n    server: sglang\n    model_path: {BUNDLED_TARGET}\n"
                      f"    env: {env}\n    startup_timeout_s: 60\n")  # fmt: skip
    # KeyboardInterrupt in a test body is what Ctrl-C raises there: pytest stops, runs teardown, prints the summary.
    pytester.makepyfile(test_ctrl_c="def test_x(specdec_server):\n    raise KeyboardInterrupt\n")
    pytester.makeini(IN_PROCESS_INI)
    # In process (the server is a subprocess either way; a pytest start in one costs 2-3 s on a busy runner): a
    # KeyboardInterrupt in the test body ends the inner run, not this one. A real SIGINT to a pytest process: the
    # slow test below.
    result = run_in_process(pytester, "--server-profile=baseline", benchmark=True, ctrl_c_ends_run=True)
    assert result.ret == pytest.ExitCode.INTERRUPTED
    result.stdout.re_match_lines(
        [r"specdec: interrupted; stopped the servers this run launched: baseline \(pid \d+\)$"]
    )


@pytest.mark.slow
def test_ctrl_c_while_a_server_starts_names_it_with_the_one_already_stopped_and_leaves_no_process(
    pytester: pytest.Pytester,
) -> None:
    # A fresh-user trial: Ctrl-C while the second profile's server started named only the first one (stopped after
    # its last test); the one interrupted mid-start, stopped too, went unnamed.
    import signal
    import subprocess
    import sys
    import time

    import psutil

    def env(script: str) -> str:
        return json.dumps({"PYTHONPATH": str(FAKE), "SPECDEC_FAKE_SGLANG": script})

    pytester.makefile(".yaml", specdec=(
        f"profiles:\n  up:\n    server: sglang\n    model_path: {BUNDLED_TARGET}\n    env: {env('{}')}\n"
        f"    startup_timeout_s: 60\n  slow:\n    extends: up\n    env: {env(json.dumps({'startup_s': 120}))}\n"
        "    startup_timeout_s: 300\n"
    ))  # fmt: skip
    pytester.makepyfile(test_ctrl_c="def test_x(specdec_server):\n    pass\n")
    pytester.makeini(STRICT_INI)
    servers = pytester.path / ".specdec" / "servers"
    proc = subprocess.Popen(
        [sys.executable, "-m", "pytest", "--server-profile=up,slow", "-p", "no:cacheprovider", "-p", "no:randomly"],
        cwd=pytester.path, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, preexec_fn=sigint_default,
    )  # fmt: skip
    try:
        # The slow server is launched (recorded for reap, with its pid) and sleeping before it listens: Ctrl-C now.
        deadline = time.monotonic() + 60
        record = None
        while record is None and time.monotonic() < deadline and proc.poll() is None:
            found = [json.loads(p.read_text()) for p in servers.glob("*.json")] if servers.is_dir() else []
            record = next((r for r in found if r.get("profile") == "slow"), None)
            time.sleep(0.05)
        assert record is not None, proc.communicate(timeout=60)[0] if proc.poll() is not None else "no slow server"
        proc.send_signal(signal.SIGINT)
        out, _ = proc.communicate(timeout=120)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert proc.returncode == pytest.ExitCode.INTERRUPTED, out
    assert re.search(
        rf"^specdec: interrupted; stopped the servers this run launched: up \(pid \d+\), slow \(pid {record['pid']}, "
        r"interrupted while starting\)$", out, re.M,
    ), out  # fmt: skip
    # Nothing left behind: the server, its supervisor, their records.
    for pid in (record["pid"], record["supervisor"][0]):
        assert not psutil.pid_exists(pid) or psutil.Process(pid).status() == psutil.STATUS_ZOMBIE, pid
    assert list(servers.glob("*.json")) == []
