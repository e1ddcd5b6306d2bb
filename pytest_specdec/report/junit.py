"""Per-test metrics as JUnit XML properties (``item.user_properties``, written by ``--junitxml``) for CI dashboards."""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any

from pytest_specdec.core.records import RunMetrics

__all__ = ["JUNIT_PREFIX", "junit_properties"]

#: Prefix of the JUnit XML properties written per metric (``specdec_output_tok_s``).
JUNIT_PREFIX = "specdec_"


def junit_properties(metrics: Mapping[str, Any]) -> list[tuple[str, object]]:
    """Per-test metrics as ``item.user_properties`` entries, which ``--junitxml`` writes as ``<property>`` elements
    (``record_property`` style) for CI dashboards.

    Every numeric ``RunMetrics`` field present in ``metrics`` becomes ``("specdec_<field>", value)``, in
    ``RunMetrics`` field order, and each entry k of a per-position field ``("specdec_<field>_<k>", value)``
    (k from 1); None (not applicable), strings and booleans are left out.
    Example: ``{"output_tok_s": 94.0, "accept_length": None, "num_ok": 16}`` ->
    ``[("specdec_num_ok", 16), ("specdec_output_tok_s", 94.0)]``.

    :param metrics: ``ResultRecord.metrics`` or ``RunMetrics.as_dict()``.
    """
    out: list[tuple[str, object]] = []
    for f in dataclasses.fields(RunMetrics):
        value = metrics.get(f.name)
        if isinstance(value, int | float) and not isinstance(value, bool):
            out.append((f"{JUNIT_PREFIX}{f.name}", value))
        elif isinstance(value, list | tuple):
            # Per-position fields: one property per draft position, 1-based (specdec_accept_rate_at_1).
            out.extend(
                (f"{JUNIT_PREFIX}{f.name}_{k}", v)
                for k, v in enumerate(value, start=1)
                if isinstance(v, int | float) and not isinstance(v, bool)
            )
    return out
