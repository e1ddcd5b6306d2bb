"""What travels on a test's pytest objects: its stash keys, and the names of the ``item.user_properties`` entries
that carry its results to the xdist controller. (The session's own key is ``session.session_key``.)
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import pytest

if TYPE_CHECKING:
    from pytest_specdec.core.tolerances import Tolerance
    from pytest_specdec.measure.results import ResultRecord
    from pytest_specdec.profiles.schema import Thresholds

__all__ = [
    "CHECKS_PROPERTY",
    "OVERRIDES_PROPERTY",
    "RECORD_PROPERTY",
    "record_key",
    "thresholds_key",
    "tolerances_key",
]

#: ``item.stash``: the test's thresholds, its profile's merged with its marker (``marker.setup_item``).
thresholds_key: pytest.StashKey[Thresholds] = pytest.StashKey()
#: ``item.stash``: the test's result record (``fixtures.measure_for``; ``SpecdecSession.judge`` updates it).
record_key: pytest.StashKey[ResultRecord] = pytest.StashKey()
#: ``item.stash``: the marker's ``tolerances=`` layer, parsed (``marker.setup_item``), for ``--specdec-compare``.
tolerances_key: pytest.StashKey[dict[str, Tolerance]] = pytest.StashKey()

#: user_properties entry: the test's ``results.ResultRecord`` as JSON, read by the controller.
RECORD_PROPERTY = "specdec"
#: Per-threshold outcomes of a test (``thresholds.ThresholdChecks.outcomes``), joined to its record on the controller.
CHECKS_PROPERTY = "specdec_checks"
#: An xdist worker's compare of a test (``Outcomes.compare_of``): the controller says which run it was compared with.
COMPARE_PROPERTY = "specdec_compare"
#: user_properties entry listing what a test's marker changed in its profile's thresholds (shown in the summary).
OVERRIDES_PROPERTY = "specdec_threshold_overrides"
