"""The bridge to pytest-benchmark: each measured specdec profile becomes one pytest-benchmark entry (the only module
that imports ``pytest_benchmark`` or reads ``config._benchmarksession``).

One entry per profile, not per test: every specdec test of a profile shares one measurement, so per-test entries
were identical rows. The entry is named ``specdec[<profile>]`` (its ``fullname`` too, which
``--benchmark-compare`` matches across runs), and ``extra_info["specdec"]["tests"]`` lists the tests that used it.

What users get with pytest-benchmark installed and enabled: ``--benchmark-autosave``, ``--benchmark-save``,
``--benchmark-compare``, ``--benchmark-compare-fail=mean:5%``, ``--benchmark-json`` and ``--benchmark-histogram``
include specdec tests. Each entry's samples are **seconds per output token**, one per repeat
(``duration_s / output_tokens`` of the measured phase), so the OPS column reads output tok/s (``ops = 1 / mean``:
the harmonic mean of the repeats' tok/s) and a throughput loss is a larger time, which ``--benchmark-compare-fail``
catches. Other metrics and the fingerprint ride in ``extra_info["specdec"]``; GPUs are added to ``machine_info``
through the public hook ``pytest_benchmark_update_machine_info``.

Limits (pytest-benchmark's, not ours): ``--benchmark-compare-fail`` sees time stats only (min, max, mean, median,
stddev, iqr; larger = worse) and fails the whole session from the terminal summary, never one test (it raises
``PerformanceRegression`` there; :class:`BenchmarkBridge` turns that into one red line naming each failed check and
a failed exit status, instead of a traceback); extra_info is saved but never compared (use ``python -m
pytest_specdec compare`` for accept length, TTFT, per-test tolerances).
Under xdist pytest-benchmark disables itself; specdec tests are then not recorded and :class:`BenchmarkBridge`
emits one ``SpecdecWarning`` saying so. ``--benchmark-only`` skips specdec tests unless they request the
``benchmark`` fixture (pytest-benchmark selects by fixture name).

Private pytest-benchmark use is confined to :func:`_session` (``config._benchmarksession``: its ``benchmarks``
list, ``disabled`` flag and ``performance_regressions`` list) and :func:`_entry`
(``pytest_benchmark.stats.Metadata(fixture, iterations, options)``, the object its own fixture appends);
``tests/test_benchmark_bridge.py::test_private_contract`` fails loudly if a release changes either.
"""

from __future__ import annotations

import json
from collections.abc import Generator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import pytest

from pytest_specdec.core.errors import SpecdecWarning
from pytest_specdec.core.xdistnode import is_worker
from pytest_specdec.measure.results import gpu_info, plugin_version

if TYPE_CHECKING:
    from pytest_specdec.measure.runner import Measurement

__all__ = [
    "BenchmarkBridge",
    "GROUP",
    "XDIST_WARNING",
    "available",
    "enabled",
    "extend",
    "record",
    "seconds_per_token",
]

#: Group name of specdec entries; pytest-benchmark prints it above the table, so it carries the unit.
GROUP = "specdec: seconds per output token (OPS = output tok/s)"
XDIST_WARNING = (
    "pytest-benchmark is disabled under xdist (-n/--dist): specdec tests are not recorded for --benchmark-* "
    "options; run without -n for pytest-benchmark files, or use the specdec results and "
    "'python -m pytest_specdec compare'"
)
#: Options pytest-benchmark stores per entry; "timer" names how our samples were taken.
_OPTIONS = {
    "disable_gc": False,
    "timer": "specdec: client time.perf_counter, measured phase duration / output tokens",
    "min_rounds": 1,
    "max_time": 0.0,
    "min_time": 0.0,
    "warmup": False,
}
_STORAGE_OPTIONS = (
    "benchmark_save",
    "benchmark_autosave",
    "benchmark_compare",
    "benchmark_compare_fail",
    "benchmark_json",
    "benchmark_histogram",
)


def available() -> bool:
    """True when pytest-benchmark can be imported."""
    try:
        import pytest_benchmark  # noqa: F401
    except ImportError:
        return False
    return True


def _session(config: pytest.Config) -> Any | None:
    """pytest-benchmark's session object (private ``config._benchmarksession``), or None when the plugin is not
    loaded (not installed, or ``-p no:benchmark``) or the attribute moved."""
    bs = getattr(config, "_benchmarksession", None)
    if bs is None or not isinstance(getattr(bs, "benchmarks", None), list):
        return None
    return bs


def enabled(config: pytest.Config) -> bool:
    """True when entries recorded now will be saved/compared: pytest-benchmark loaded, not disabled
    (``--benchmark-disable``, xdist) and not on an xdist worker."""
    bs = _session(config)
    return bs is not None and not getattr(bs, "disabled", True) and not is_worker(config)


def seconds_per_token(measurements: Sequence[Measurement]) -> list[float]:
    """One sample per repeat: ``metrics.duration_s / metrics.output_tokens`` in seconds per output token; repeats
    with no output token are left out.

    Example: 2.0 s for 200 tokens -> 0.01 s/token (100 tok/s)."""
    out = []
    for m in measurements:
        tokens = m.metrics.output_tokens
        if tokens > 0 and m.metrics.duration_s > 0:
            out.append(m.metrics.duration_s / tokens)
    return out


@dataclass
class _FixtureShape:
    """The attributes ``pytest_benchmark.stats.Metadata`` reads from its ``fixture`` argument."""

    name: str
    fullname: str
    group: str | None
    param: str | None
    params: dict[str, Any] | None
    extra_info: dict[str, Any] = field(default_factory=dict)
    cprofile_stats: Any = None
    has_error: bool = False


def _entry(shape: _FixtureShape, samples: Sequence[float]) -> Any:
    """A pytest-benchmark ``Metadata`` holding ``samples`` (seconds, iterations 1)."""
    from pytest_benchmark.stats import Metadata

    meta = Metadata(shape, iterations=1, options=dict(_OPTIONS))
    for value in samples:
        meta.update(value)
    return meta


def _json_safe(value: Any) -> Any:
    try:
        json.dumps(value)
    except (TypeError, ValueError):
        return str(value)
    return value


def record(
    node: pytest.Item | pytest.FixtureRequest,
    measurements: Sequence[Measurement],
    fingerprint: Mapping[str, Any],
    *,
    metrics: Mapping[str, Any] | None = None,
) -> bool:
    """Add the pytest-benchmark entry of a measured profile, once per profile and session (call it from the
    ``specdec_run`` fixture for every test; the profile's later tests only add their node id to the entry).

    Entry: name and fullname ``specdec[<profile>]`` (stable across runs, so ``--benchmark-compare`` matches it),
    param/params the profile, group :data:`GROUP` (or the first test's ``@pytest.mark.benchmark(group=...)``),
    samples :func:`seconds_per_token`, ``extra_info["specdec"]`` = {unit, profile, tests (node ids), metrics
    (``metrics``, default the per-field median over repeats, ``records.median_metrics``), per_repeat (field ->
    values), fingerprint}.

    :param node: the test item, or the fixture ``request`` (its ``node`` is used).
    :param measurements: the profile's repeats (``runner.Measurement``), at least one.
    :param fingerprint: ``results.build_fingerprint(...)``.
    :returns: True when this call added the entry; False when pytest-benchmark is absent or disabled (xdist,
        ``--benchmark-disable``), no repeat produced a token, or the profile's entry already exists.
    """
    from pytest_specdec.core.records import median_metrics

    if isinstance(node, pytest.FixtureRequest):
        node = node.node  # type: ignore[assignment]
    assert isinstance(node, pytest.Item)
    if not enabled(node.config) or not measurements:
        return False
    samples = seconds_per_token(measurements)
    if not samples:
        return False
    bs = _session(node.config)
    assert bs is not None  # enabled() checked it
    profile = measurements[0].profile
    name = f"specdec[{profile}]"
    per_repeat: dict[str, list[Any]] = {}
    for m in measurements:
        for key, value in m.metrics.as_dict().items():
            per_repeat.setdefault(key, []).append(value)
    summary = dict(metrics) if metrics is not None else median_metrics([m.metrics for m in measurements]).as_dict()
    entry = _entry_of(bs, name)
    if entry is not None:
        entry.extra_info.setdefault("specdec", {}).setdefault("tests", []).append(node.nodeid)
        _extend(entry, measurements, summary, per_repeat)
        return False
    marker = node.get_closest_marker("benchmark")
    group = marker.kwargs.get("group") if marker is not None else None
    shape = _FixtureShape(
        name=name,
        fullname=name,
        group=group or GROUP,
        param=profile,
        params={"profile": profile},
        extra_info={
            "specdec": {
                "unit": "seconds per output token",
                "profile": profile,
                "tests": [node.nodeid],
                "metrics": summary,
                "per_repeat": per_repeat,
                "fingerprint": dict(fingerprint),
            }
        },
    )
    bs.benchmarks.append(_entry(shape, samples))
    return True


def _entry_of(bs: Any, name: str) -> Any | None:
    """The entry named ``name`` (``specdec[<profile>]``) in pytest-benchmark's session, or None."""
    for entry in bs.benchmarks:
        if getattr(entry, "fullname", None) == name and isinstance(getattr(entry, "extra_info", None), dict):
            return entry
    return None


def _extend(entry: Any, measurements: Sequence[Measurement], summary: Mapping[str, Any],
            per_repeat: Mapping[str, list[Any]]) -> None:  # fmt: skip
    """Add the repeats measured since the entry was recorded, so its Rounds and Median match the summary's."""
    info = entry.extra_info.setdefault("specdec", {})
    recorded = len(info.get("per_repeat", {}).get("duration_s", []))
    if len(measurements) > recorded:
        for value in seconds_per_token(measurements[recorded:]):
            entry.update(value)
        info.update(metrics=dict(summary), per_repeat=dict(per_repeat))


def extend(config: pytest.Config, measurements: Sequence[Measurement]) -> bool:
    """After a test's verdicts: add the repeats they measured (``MeasureHandle.more``: the compare, ``min_speedup``
    and the sequential thresholds measure after the ``specdec_run`` fixture recorded the entry) to the profile's
    entry, so its Rounds and Median match the summary's repeats and tok/s.

    :param measurements: the profile's repeats now (``runner.RunResult.measurements``).
    :returns: True when repeats were added; False when pytest-benchmark is disabled or the profile has no entry.
    """
    from pytest_specdec.core.records import median_metrics

    if not enabled(config) or not measurements:
        return False
    bs = _session(config)
    entry = _entry_of(bs, f"specdec[{measurements[0].profile}]") if bs is not None else None
    if entry is None:
        return False
    before = len(entry.extra_info.get("specdec", {}).get("per_repeat", {}).get("duration_s", []))
    per_repeat: dict[str, list[Any]] = {}
    for m in measurements:
        for key, value in m.metrics.as_dict().items():
            per_repeat.setdefault(key, []).append(value)
    _extend(entry, measurements, median_metrics([m.metrics for m in measurements]).as_dict(), per_repeat)
    return len(measurements) > before


class BenchmarkBridge:
    """pytest-benchmark hooks for specdec; register it only when pytest-benchmark is loaded (its hook specs must
    exist, or pluggy rejects the ``pytest_benchmark_*`` names).

    Usage (``plugin.py::pytest_configure``)::

        bridge = benchmark.BenchmarkBridge.from_config(config)
        if bridge is not None:
            config.pluginmanager.register(bridge, "specdec-benchmark")
    """

    def __init__(self, config: pytest.Config) -> None:
        self.config = config
        self.session: pytest.Session | None = None

    @classmethod
    def from_config(cls, config: pytest.Config) -> BenchmarkBridge | None:
        """The bridge, or None when pytest-benchmark is not loaded. On the xdist controller, when a
        ``--benchmark-*`` storage option is given, warns once (:data:`XDIST_WARNING`, a ``SpecdecWarning``)."""
        if not config.pluginmanager.hasplugin("benchmark") or not available():
            return None
        xdist = config.getoption("dist", "no") != "no" if config.pluginmanager.hasplugin("xdist") else False
        asked = any(config.getoption(opt, None) for opt in _STORAGE_OPTIONS)
        if xdist and asked and not is_worker(config):
            config.issue_config_time_warning(SpecdecWarning(XDIST_WARNING), stacklevel=2)
        return cls(config)

    def pytest_benchmark_update_machine_info(self, config: pytest.Config, machine_info: dict[str, Any]) -> None:
        """Add ``gpus`` (name, driver, CUDA per GPU from nvidia-smi; ``[]`` without one) and
        ``pytest_specdec`` (plugin version) to pytest-benchmark's ``machine_info``."""
        machine_info["gpus"] = [dict(g) for g in gpu_info()]
        machine_info["pytest_specdec"] = plugin_version()

    def pytest_sessionstart(self, session: pytest.Session) -> None:
        self.session = session

    @pytest.hookimpl(wrapper=True, tryfirst=True)
    def pytest_terminal_summary(self, terminalreporter: Any) -> Generator[None, object, object]:
        """``--benchmark-compare-fail``: take pytest-benchmark's failed checks before its summary raises
        ``PerformanceRegression`` (a 60-line traceback), let it print its table, then end the output with one red
        line and a failed exit status.

        The line: ``specdec: pytest-benchmark --benchmark-compare-fail: performance regressed: specdec[eagle3] (0001)
        - Field 'mean' has failed PercentageRegressionCheck: 11.1 > 5.0`` (checks joined by ``; ``).
        """
        bs = _session(self.config)
        regressions = list(getattr(bs, "performance_regressions", None) or [])
        if regressions:
            bs.performance_regressions = []  # type: ignore[union-attr]
        try:
            return (yield)
        finally:
            if regressions:
                checks = "; ".join(f"{name} - {' '.join(str(reason).split())}" for name, reason in regressions)
                terminalreporter.write_line(
                    f"specdec: pytest-benchmark --benchmark-compare-fail: performance regressed: {checks}", red=True
                )
                if self.session is not None:
                    self.session.exitstatus = pytest.ExitCode.TESTS_FAILED
