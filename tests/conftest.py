"""Shared fixtures of the plugin's own tests."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

# The plugin imports its measuring stack only when a profile is selected (pytest_specdec/plugin.py). pytester's
# in-process runs drop the modules first imported inside them, so a stack imported there would be imported afresh
# by every such run (numpy and psutil do not survive that): import it once for the whole test process.
import pytest_specdec.baseline  # noqa: F401
import pytest_specdec.benchmark  # noqa: F401
import pytest_specdec.preflight  # noqa: F401
import pytest_specdec.session  # noqa: F401
import pytest_specdec.sharing  # noqa: F401
import pytest_specdec.summary  # noqa: F401
import pytest_specdec.verdict  # noqa: F401
from tests.helpers import free_port

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
