"""``run/settings.py``: our options and ini keys are read once, into ``RunSettings``, and nowhere else."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

import pytest_specdec
from pytest_specdec.core.tolerances import Tolerance
from pytest_specdec.run.settings import RunSettings
from tests.helpers import plugin_args

PACKAGE_DIR = Path(pytest_specdec.__file__).resolve().parent
#: The modules that may read options: the one that registers them and the one that reads them into RunSettings.
READERS = {"run/options.py", "run/settings.py"}
#: ``config.option.X`` for any X, and ``getoption``/``getvalue``/``getini`` of one of our names (``--server-*``,
#: ``specdec_*``); pytest-xdist's ``dist`` and pytest-benchmark's options are theirs to read.
_OPTION_READ = re.compile(
    r"\.option\.\w+|\.get(?:option|value|ini)\(\s*[\"'](?:--)?(?:specdec|server)[_-]", re.IGNORECASE
)


def option_reads(source: str) -> list[str]:
    """The lines of ``source`` that read one of our options or ini keys."""
    return [line.strip() for line in source.splitlines() if _OPTION_READ.search(line)]


def test_the_guard_finds_a_planted_read() -> None:
    planted = 'x = config.option.specdec_dir\ny = config.getini("specdec_tolerances")\nz = config.getoption("dist")\n'
    assert option_reads(planted) == ["x = config.option.specdec_dir", 'y = config.getini("specdec_tolerances")']


def test_no_module_but_settings_reads_our_options() -> None:
    found = {
        str(path.relative_to(PACKAGE_DIR)): reads
        for path in sorted(PACKAGE_DIR.rglob("*.py"))
        if str(path.relative_to(PACKAGE_DIR)) not in READERS
        and (reads := option_reads(path.read_text(encoding="utf-8")))
    }
    assert found == {}, "read them into run/settings.py::RunSettings instead"


def test_settings_are_read_once_from_the_command_line_and_ini(pytester: pytest.Pytester) -> None:
    pytester.makeini("[pytest]\nspecdec_dir = out\nspecdec_tolerances =\n    output_tok_s:5%\n")
    config = pytester.parseconfigure(
        *plugin_args(), "--specdec-repeats=2", "--specdec-compare", "--specdec-startup-timeout=30"
    )
    settings = RunSettings.from_config(config)
    assert (settings.out_dir, settings.repeats, settings.compare, settings.startup_timeout_s, settings.tolerances) == (
        pytester.path / "out",
        2,
        "latest",
        30.0,
        {"output_tok_s": Tolerance(rel=0.05)},  # parsed where it is read
    )
    assert settings.selected == () and not settings.check
    with pytest.raises(AttributeError):
        settings.repeats = 3  # type: ignore[misc]
