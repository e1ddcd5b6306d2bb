"""pytest hooks only: options, ini keys, the ``specdec`` marker, fixtures, and hooks that forward to the session.

The run's wiring lives in ``run.session.SpecdecSession`` (built once from ``run.settings.RunSettings``,
registered as a plugin: the summary hooks are its methods); a test's marker is read by ``run.marker``, its
verdict judged by ``judge.verdict``, the end of the run reported by ``report.summary``. The options, ini keys
and their value parsers are in ``run.options``.

Every pytest run in an environment with the plugin installed imports this module, so it imports only ``pytest``
and light modules (``options``, ``schedule``, ``keys``) at the top; the rest (aiohttp, numpy, pydantic behind them)
is imported by the hook or fixture that needs it (``benchmarks/bench_import.py`` measures it,
``tests/test_plugin_import.py`` guards it).
"""

from __future__ import annotations

import sys
from collections.abc import Generator, Iterator
from typing import TYPE_CHECKING, Any

import pytest

from pytest_specdec.core import xdistnode
from pytest_specdec.run import marker, options, schedule
from pytest_specdec.run.keys import record_key, thresholds_key, tolerances_key
from pytest_specdec.run.session import SpecdecSession, XdistCrashes, session_key

if TYPE_CHECKING:
    from pytest_specdec.measure.runner import RunningServer, RunResult
    from pytest_specdec.profiles.schema import Profile

__all__ = ["record_key", "session_key", "thresholds_key", "tolerances_key"]

_SERVER_FIXTURES = ("specdec_server", "specdec_run", "specdec_profile")


def pytest_addoption(parser: pytest.Parser) -> None:
    options.register(parser)


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line(
        "markers",
        "specdec(min_accept_length=None, min_accept_rate=None, min_tok_s=None, max_ttft_ms=None, max_itl_ms=None, "
        "max_tpot_ms=None, min_speedup=None, tolerances=None): a speculative-decoding performance test, run once "
        "per --server-profile; thresholds override the profile's (latency ceilings apply to the p50; min_speedup="
        "{'vs': 'baseline', 'ratio': 1.1}); tolerances=['output_tok_s:5%'] for --specdec-compare. With arguments the "
        "profile is measured (specdec_run) and judged after the test body, whether or not the test asks for it. "
        "Example: @pytest.mark.specdec(min_accept_length=2.0, min_tok_s=100)",
    )
    for engine in ("reference", "sglang", "vllm"):
        config.addinivalue_line("markers", f"{engine}: added to specdec tests that run on a `server: {engine}` profile")

    session = SpecdecSession.from_config(config)
    config.stash[session_key] = session
    config.pluginmanager.register(session, "specdec-session")
    if config.pluginmanager.hasplugin("benchmark"):
        from pytest_specdec.report import benchmark

        bridge = benchmark.BenchmarkBridge.from_config(config)
        if bridge is not None:
            config.pluginmanager.register(bridge, "specdec-benchmark")
    if session.selected and config.pluginmanager.hasplugin("xdist") and not xdistnode.is_worker(config):
        config.pluginmanager.register(schedule.XdistSchedule(config), "specdec-xdist-schedule")
        config.pluginmanager.register(XdistCrashes(session), "specdec-xdist-crashes")


def pytest_unconfigure(config: pytest.Config) -> None:
    session = config.stash.get(session_key, None)
    if session is not None:
        del config.stash[session_key]
        config.pluginmanager.unregister(session)
    for name in ("specdec-benchmark", "specdec-xdist-schedule", "specdec-xdist-crashes"):
        plugin = config.pluginmanager.get_plugin(name)
        if plugin is not None:
            config.pluginmanager.unregister(plugin)
    registry = _registry()
    if registry is not None:
        registry.leftovers()  # an atexit-style last resort; the session-end sweep below reports


def _registry() -> Any:
    """``pytest_specdec.serve.registry`` (where every server started in this process is recorded) when this process
    imported it, else None: then no server was started here, and there is nothing to sweep or to import."""
    return sys.modules.get("pytest_specdec.serve.registry")


@pytest.hookimpl(wrapper=True, tryfirst=True)
def pytest_sessionfinish(session: pytest.Session) -> Generator[None, object, object]:
    # Outermost wrapper: session fixtures (our servers) are torn down inside, so whatever is still alive here leaked.
    result = yield
    registry = _registry()
    left = registry.leftovers(kill=True) if registry is not None else []
    if left:
        session.exitstatus = pytest.ExitCode.TESTS_FAILED
        tr = session.config.pluginmanager.get_plugin("terminalreporter")
        if tr is not None:
            pids = ", ".join(str(p.pid) for p in left)
            tr.write_line(f"specdec: server process(es) left after teardown, killed: pid {pids}", red=True)
    return result


@pytest.hookimpl(trylast=True)
def pytest_terminal_summary(terminalreporter: Any, config: pytest.Config) -> None:
    # After every plugin's summary (ours is the session's hook), right above pytest's final "N passed" line: the
    # reason a sweep fails the run, as pytest-cov puts "FAIL Required test coverage ..." last.
    session = config.stash.get(session_key, None)
    if session is not None:
        session.write_final_lines(terminalreporter)


def pytest_itemcollected(item: pytest.Item) -> None:
    # Tests that use the server are specdec tests, so `-m specdec` selects them even without the marker.
    names = getattr(item, "fixturenames", ())
    if any(n in names for n in _SERVER_FIXTURES) and item.get_closest_marker("specdec") is None:
        item.add_marker("specdec")


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    # `-m "specdec and vllm"` selects the tests that run on vLLM profiles (likewise sglang, reference).
    session = config.stash.get(session_key, None)
    if session is None or session.profiles is None:
        return
    units: dict[str, str] = {}
    for item in items:
        name = marker.item_profile(item)
        if name:
            profile = session.profile(name)
            item.add_marker(profile.server)
            units[item.nodeid] = schedule.unit_of(name, exclusive=profile.exclusive and profile.url is None)
    worker = xdistnode.worker_id(config)
    root = xdistnode.shared_dir(config) if worker and units else None
    if worker and root is not None:
        # The controller's scheduler groups by these units (schedule.py): one worker per server.
        schedule.write_units(root, worker, units)


@pytest.hookimpl(wrapper=True)
def pytest_fixture_setup(
    fixturedef: pytest.FixtureDef[Any], request: pytest.FixtureRequest
) -> Generator[None, Any, Any]:
    result = yield
    if fixturedef.argname == "specdec_server":
        session = request.config.stash.get(session_key, None)
        if session is not None:
            session.server_stop.set_up(fixturedef, request, result.profile.name)
    return result


@pytest.hookimpl(wrapper=True)
def pytest_runtest_teardown(item: pytest.Item, nextitem: pytest.Item | None) -> Generator[None, object, object]:
    result = yield
    # Stop a profile's server right after its last test (in collection order), not at the end of the session: the
    # tests that follow may not need it, and under xdist another worker may be waiting to start the next server.
    session = item.config.stash.get(session_key, None)
    if session is not None:
        session.server_stop.after_teardown(item, nextitem)
    return result


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    uses_server = any(n in metafunc.fixturenames for n in _SERVER_FIXTURES)
    marked = metafunc.definition.get_closest_marker("specdec") is not None
    if not (uses_server or marked):
        return
    if "specdec_profile" not in metafunc.fixturenames:
        metafunc.fixturenames.append("specdec_profile")
    session = metafunc.config.stash[session_key]
    names: list[str | None] = list(session.selected) or [None]
    ids = [n or "no-profile" for n in names]
    metafunc.parametrize("specdec_profile", names, indirect=True, scope="session", ids=ids)


@pytest.fixture(scope="session")
def specdec_profile(request: pytest.FixtureRequest) -> Profile:
    """The profile (``pytest_specdec.profiles.schema.Profile``) this test runs against, one of ``--server-profile``."""
    name = request.param
    if name is None:
        pytest.skip("specdec: no --server-profile given (e.g. pytest -m specdec --server-profile=eagle3)")
    return request.config.stash[session_key].profile(name)


@pytest.fixture(scope="session")
def specdec_server(
    specdec_profile: Profile, request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[RunningServer]:
    """The profile's server, started once per session and ready to generate (``runner.RunningServer``).

    Ready means ``/health`` 200 *and* a real 1-token generate. Torn down (whole process tree) right after the
    profile's last test, or at the end of the session; its supervisor stops it if pytest dies first. Under
    pytest-xdist the profile's tests go to one worker (``schedule``); a server is still shared if two workers need
    it (the last one out tears it down).
    """
    session: SpecdecSession = request.config.stash[session_key]
    yield from session.serve(specdec_profile, tmp_path_factory)


@pytest.fixture(autouse=True)
def _specdec_marker_measures(request: pytest.FixtureRequest) -> None:
    """A test whose ``specdec`` marker has thresholds is measured and judged even when it does not request
    ``specdec_run`` (``marker.measures``). A name appended to ``metafunc.fixturenames`` in ``pytest_generate_tests``
    is pruned again (pytest keeps only what the test's own fixtures reach), so such a test passed without a verdict:
    ``@pytest.mark.specdec(min_tok_s=100000)`` on ``def test_x(): pass`` was green (an adversarial trial)."""
    if "specdec_run" not in request.fixturenames and marker.measures(request.node):
        if "specdec_profile" not in getattr(getattr(request.node, "callspec", None), "params", {}):
            # The marker came with one parameter (pytest.param(..., marks=...)) of a test that asks for no specdec
            # fixture: collection did not see it, so the test was not run per profile (a trial's AttributeError).
            pytest.fail(
                f"{request.node.nodeid}: a specdec marker given through pytest.param(marks=...) on a test that uses "
                "no specdec fixture is not run per --server-profile: put @pytest.mark.specdec(...) on the test (or "
                "its class or module), or request specdec_run",
                pytrace=False,
            )
        request.getfixturevalue("specdec_run")


@pytest.fixture
def specdec_run(specdec_profile: Profile, request: pytest.FixtureRequest) -> RunResult:
    """The profile's workload, measured ``repeats`` times once per session and profile (``runner.RunResult``:
    ``.metrics`` is the per-metric median over repeats — output_tok_s, accept_length, accept_rate, TTFT/ITL/TPOT/e2e
    percentiles in ms; ``.measurements`` the repeats). When a ``min_speedup`` applies, the repeats are paired with
    phases of the reference profile measured close in time (``pairing.py``). Marker and profile thresholds, and the
    baseline compare when ``--specdec-compare`` is given, are checked after the test body. The server
    (``specdec_server``) is started or attached only when no measurement of the profile exists yet in this session
    (under xdist: in any worker)."""
    return request.config.stash[session_key].measure_for(specdec_profile, request)


# First, before pytest's own setup sets up the test's fixtures: a broken marker errors the test without starting
# its profile's server (tests/test_check_markers.py).
@pytest.hookimpl(tryfirst=True)
def pytest_runtest_setup(item: pytest.Item) -> None:
    if item.get_closest_marker("specdec") is not None:
        session = item.config.stash[session_key]
        marker.setup_item(item, session.profiles, session.settings.profile_path)


@pytest.hookimpl(wrapper=True)
def pytest_runtest_call(item: pytest.Item) -> Generator[None, object, object]:
    result = yield
    if item.stash.get(record_key, None) is not None:
        item.config.stash[session_key].judge(item)
    return result
