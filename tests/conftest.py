"""Shared fixtures of the plugin's own tests."""

from __future__ import annotations

import os
import subprocess
import sys
from collections import Counter
from collections.abc import Callable, Iterator
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


def pytest_configure(config: pytest.Config) -> None:
    """Under ``-n 2 --dist loadfile``, xdist hands out whole modules in its own order: by number of tests, most first
    (``--loadscope-reorder``), which sends the modules with few but long tests (tests/vllm: 5 tests, ~90 s) last,
    to run alone on one worker while the other has nothing left. Keep the collection order instead, which
    :func:`pytest_collection_modifyitems` makes heaviest first."""
    if hasattr(config.option, "loadscopereorder"):
        config.option.loadscopereorder = False


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """The modules with the most ``slow`` or ``vllm`` tests (each starts servers or runs pytest) first, each module's
    tests together and in their order (a stable sort), so the short modules fill the end of a distributed run."""
    def module(item: pytest.Item) -> str:
        return item.nodeid.split("::")[0]

    weight = Counter(module(i) for i in items if i.get_closest_marker("slow") or i.get_closest_marker("vllm"))
    items.sort(key=lambda item: -weight[module(item)])


@pytest.fixture
def pytester(pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch) -> pytest.Pytester:
    """pytester whose inner runs keep their tests in file order: pytest-randomly (the flake extra, on in the flake
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


# --- one bundled reference server per worker, shared by the tests that only read what the plugin prints about it

REFERENCE_PROFILE = "profiles:\n  shared:\n    server: reference\n    startup_timeout_s: 180\n"

# The owner of a shared server: a process of its own, not this one. An in-process pytester run ends with the
# plugin's session-end sweep (``serve.registry.leftovers``), which stops every server this Python process started;
# and a test process killed outright closes the pipe, so the owner stops the server (its supervisor watches the
# owner too): nothing is left behind.
REFERENCE_OWNER = """
import sys
from pathlib import Path

from pytest_specdec.engines.rules import load_profiles
from pytest_specdec.measure import runner

where = Path(sys.argv[1])
server = runner.start_server(load_profiles(where / "specdec.yaml").get("shared"), log_dir=where / "logs")
try:
    print(server.base_url, flush=True)
    sys.stdin.read()  # until the test process closes the pipe, or dies
finally:
    server.stop()
"""


@pytest.fixture(scope="session")
def reference_url(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Callable[[str], str]]:
    """``url_for(speculative)``: the base URL (``http://127.0.0.1:PORT``) of a bundled reference server launched with
    that ``speculative:`` block (a YAML flow mapping as a profile writes it; ``""`` for none), started the first time a
    test of this process (one xdist worker) asks for that block and kept for the rest of the session, then stopped
    (``runner.start_server`` and ``.stop()``, in an owner process of its own: ``REFERENCE_OWNER``).

    For tests that run the plugin in pytester and only read what it prints about a plain measurement: their profile
    gives ``url: <this>`` beside ``server: reference`` and a ``speculative:`` block the server runs (the plugin reads
    the server's config back and refuses one that differs), and the plugin measures it without a launch of its own
    (a start costs 5-15 s on a busy runner). Not for tests of launching, stopping, startup, faults, env/extra_args or
    fingerprint differences, restarts or interrupts: a server given by URL is never launched, and its fingerprint
    is not a launched one's.

    :raises RuntimeError: the server did not come up (within 180 s); the owner's stderr says why.
    """
    root = tmp_path_factory.mktemp("shared-reference")
    owners: dict[str, tuple[subprocess.Popen[str], str]] = {}

    def url_for(speculative: str = "") -> str:
        if speculative not in owners:
            where = root / f"server-{len(owners)}"
            where.mkdir()
            text = REFERENCE_PROFILE + (f"    speculative: {speculative}\n" if speculative else "")
            (where / "specdec.yaml").write_text(text)
            with (where / "owner.err").open("w") as err:
                proc = subprocess.Popen(
                    [sys.executable, "-c", REFERENCE_OWNER, str(where)],
                    stdin=subprocess.PIPE,
                    stdout=subprocess.PIPE,
                    stderr=err,
                    text=True,
                )
            assert proc.stdout is not None
            url = proc.stdout.readline().strip()
            if not url:
                proc.wait(timeout=60)
                raise RuntimeError(f"shared reference server did not start:\n{(where / 'owner.err').read_text()}")
            owners[speculative] = (proc, url)
        return owners[speculative][1]

    try:
        yield url_for
    finally:
        for proc, _ in owners.values():
            assert proc.stdin is not None and proc.stdout is not None
            proc.stdin.close()
            proc.wait(timeout=60)
            proc.stdout.close()
