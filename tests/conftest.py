"""Shared fixtures of the plugin's own tests."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

# httpx imports httpcore at its first client and maps httpcore's errors to its own through a table it fills at the
# first error. Both done first inside an in-process run, the table keeps that run's httpcore classes, which the run
# then drops: a later refused connection leaks as httpcore.ConnectError past `except httpx.TransportError`
# (tests/test_inprocess_runs.py). Imported here, httpcore outlives every in-process run.
import httpcore  # noqa: F401
import pytest

import pytest_specdec.engines.preflight  # noqa: F401

# The plugin imports its measuring stack only when a profile is selected (pytest_specdec/plugin.py). pytester's
# in-process runs drop the modules first imported inside them, so a stack imported there would be imported afresh
# by every such run (numpy and psutil do not survive that): import it once for the whole test process.
import pytest_specdec.judge.baseline  # noqa: F401
import pytest_specdec.judge.verdict  # noqa: F401
import pytest_specdec.report.benchmark  # noqa: F401
import pytest_specdec.report.summary  # noqa: F401
import pytest_specdec.run.session  # noqa: F401
import pytest_specdec.serve.sharing  # noqa: F401

try:  # the plot extra: matplotlib imported inside an in-process run, then dropped, breaks the next run's legend
    import matplotlib.backends.backend_agg  # noqa: F401
    import matplotlib.figure  # noqa: F401
except ImportError:
    pass
from tests.helpers import free_port

# Under pytest-xdist (`pytest -n 2`), the worker's PYTEST_XDIST_* variables would reach every pytest, owner script
# and server the tests start, and the plugin reads PYTEST_XDIST_WORKER: an inner pytest would believe it is a
# worker (pytest-benchmark off, its servers owned by its parent). The tests' own processes are not xdist workers.
for _name in ("PYTEST_XDIST_WORKER", "PYTEST_XDIST_WORKER_COUNT", "PYTEST_XDIST_TESTRUNUID"):
    os.environ.pop(_name, None)


@pytest.fixture
def pytester(pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch) -> pytest.Pytester:
    """pytester whose inner runs keep their tests in file order: pytest-randomly (the dev extra, on in the flake
    hunt) would shuffle them and import numpy, and several tests assert on what the first test of a run printed."""
    monkeypatch.setenv("PYTEST_ADDOPTS", "-p no:randomly")
    return pytester


@pytest.fixture
def same_instances(monkeypatch: pytest.MonkeyPatch) -> None:
    """Compares judged as if server instances never differed (``judge.sequential.ASSUMED_INSTANCE_SD``, its GPU
    one and the ratio's at 0): tests of the within-run arithmetic on hand-made records of one stored run."""
    from pytest_specdec.judge import sequential

    monkeypatch.setattr(sequential, "ASSUMED_INSTANCE_SD", 0.0)
    monkeypatch.setattr(sequential, "ASSUMED_GPU_INSTANCE_SD", 0.0)
    monkeypatch.setattr(sequential, "ASSUMED_RATIO_INSTANCE_SD", 0.0)


# --- the real streaming path (aiohttp over sockets) against benchmarks/sse_server.py

SSE_SERVER = Path(__file__).resolve().parents[1] / "benchmarks" / "sse_server.py"


@pytest.fixture(scope="module")
def sse_url() -> Iterator[str]:
    """A local SSE server (3 tokens per event, spec fields on the last event, 2 ms between events; a prompt
    holding "stall-me" gets one event and then silence)."""
    port = free_port()
    args = ["--port", str(port), "--tokens-per-event", "3", "--spec", "--itl-ms", "2", "--ttft-ms", "5"]
    args += ["--stall-prompt", "stall-me"]
    proc = subprocess.Popen([sys.executable, str(SSE_SERVER), *args], stdout=subprocess.PIPE, text=True)
    try:
        assert proc.stdout is not None
        assert proc.stdout.readline().startswith("sse_server listening")
        yield f"http://127.0.0.1:{port}"
    finally:
        proc.terminate()
        proc.wait(timeout=10)
        if proc.stdout is not None:
            proc.stdout.close()
