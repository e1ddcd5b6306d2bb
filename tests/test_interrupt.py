"""Ctrl-C during a run: pytest tears the servers down, and the summary says so (not only "KeyboardInterrupt")."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from pytest_specdec.engines.rules import BUNDLED_TARGET
from tests.helpers import STRICT_INI

FAKE = Path(__file__).resolve().parent / "fakesglang"


def test_interrupted_run_names_the_servers_it_stopped(pytester: pytest.Pytester) -> None:
    env = json.dumps({"PYTHONPATH": str(FAKE), "SPECDEC_FAKE_SGLANG": "{}"})
    pytester.makefile(".yaml", specdec=f"profiles:\n  baseline:\n    server: sglang\n    model_path: {BUNDLED_TARGET}\n"
                      f"    env: {env}\n    startup_timeout_s: 60\n")  # fmt: skip
    # KeyboardInterrupt in a test body is what Ctrl-C raises there: pytest stops, runs teardown, prints the summary.
    pytester.makepyfile(test_ctrl_c="def test_x(specdec_server):\n    raise KeyboardInterrupt\n")
    pytester.makeini(STRICT_INI)
    result = pytester.runpytest_subprocess("--server-profile=baseline", "-p", "no:cacheprovider", timeout=120)
    assert result.ret == pytest.ExitCode.INTERRUPTED
    result.stdout.re_match_lines(
        [r"specdec: interrupted; stopped the servers this run launched: baseline \(pid \d+\)$"]
    )
