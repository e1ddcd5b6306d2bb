"""Shared fixtures of the plugin's own tests."""

from __future__ import annotations

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
