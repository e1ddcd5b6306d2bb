"""Every pytest run in an environment with the plugin installed imports ``pytest_specdec.plugin`` and runs its
``pytest_configure``: neither may import the measuring stack (aiohttp, numpy, pydantic, httpx). Timings are in
``benchmarks/bench_import.py``; these tests pin what is imported, which does not depend on the machine's load."""

from __future__ import annotations

import subprocess
import sys

import pytest

HEAVY = ("aiohttp", "numpy", "pydantic", "httpx", "yaml", "psutil")
#: Our modules that pull the heavy ones in (client: aiohttp; profiles: pydantic, yaml; metrics: numpy).
OURS = (
    "pytest_specdec.measure.runner",
    "pytest_specdec.measure.client",
    "pytest_specdec.profiles.schema",
    "pytest_specdec.measure.metrics",
)


def test_importing_the_plugin_imports_no_heavy_module() -> None:
    code = f"import sys, pytest_specdec.plugin; print(' '.join(m for m in {HEAVY + OURS!r} if m in sys.modules))"
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=True)
    assert done.stdout.strip() == ""


def test_a_run_without_specdec_tests_imports_no_heavy_module(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(test_plain="def test_plain():\n    pass\n")
    pytester.makeconftest(
        f"""
import sys

def pytest_terminal_summary(terminalreporter):
    loaded = [m for m in {HEAVY + OURS!r} if m in sys.modules]
    terminalreporter.write_line("loaded: " + (" ".join(loaded) or "none"))
"""
    )
    result = pytester.runpytest_subprocess("-p", "no:cacheprovider", timeout=120)
    assert result.ret == pytest.ExitCode.OK
    result.assert_outcomes(passed=1)
    result.stdout.fnmatch_lines(["loaded: none"])


def test_the_public_names_still_resolve() -> None:
    import pytest_specdec
    from pytest_specdec import Profile, RunMetrics, load_profiles

    assert Profile.__module__ == "pytest_specdec.profiles.schema"
    assert RunMetrics.__module__ == "pytest_specdec.core.records"
    assert callable(load_profiles)
    with pytest.raises(AttributeError, match="no attribute 'Nope'"):
        pytest_specdec.Nope  # noqa: B018
