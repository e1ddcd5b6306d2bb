"""The ``@pytest.mark.specdec(...)`` marker of one test -> its thresholds and tolerances, kept in ``item.stash``
(as pytest's ``skipping.py`` turns ``skipif`` arguments into a record at setup).

``plugin.py::pytest_runtest_setup`` calls :func:`setup_item`; bad arguments fail that test with one clean ERROR.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

from pytest_specdec.run.keys import OVERRIDES_PROPERTY, thresholds_key, tolerances_key

if TYPE_CHECKING:
    from pytest_specdec.profiles.schema import Profile, Thresholds

__all__ = ["item_profile", "item_thresholds", "setup_item", "speedup_vs"]


def item_profile(item: pytest.Item) -> str | None:
    """The name of the profile this test runs against (its ``specdec_profile`` parameter), or None."""
    return getattr(getattr(item, "callspec", None), "params", {}).get("specdec_profile")


def setup_item(item: pytest.Item, profiles: Mapping[str, Profile] | None, profile_path: Path) -> None:
    """``pytest_runtest_setup``: merge the ``specdec`` marker into the profile's thresholds (stashed on the item)
    and validate its tolerances.

    :param profiles: the loaded profiles (None when no profile file was loaded); :param profile_path: their file.
    :raises pytest.fail.Exception: positional arguments, an unknown or invalid threshold, ``min_speedup`` against a
        profile the file lacks, or tolerances that do not parse (one message naming the argument).
    """
    from pytest_specdec.core.tolerances import parse_tolerances
    from pytest_specdec.judge.thresholds import merge_marker, overrides
    from pytest_specdec.profiles.schema import Thresholds

    marker = item.get_closest_marker("specdec")
    if marker is None:
        return
    if marker.args:
        pytest.fail(
            f"@pytest.mark.specdec takes keyword arguments only, got positional {marker.args!r}; "
            "e.g. @pytest.mark.specdec(min_accept_length=2.0)",
            pytrace=False,
        )
    kwargs = dict(marker.kwargs)
    tolerances = kwargs.pop("tolerances", None)
    profile_param = item_profile(item)
    if profile_param:
        assert profiles is not None
        base = profiles[profile_param].thresholds
    else:
        base = Thresholds()
    error = None
    try:
        item.stash[thresholds_key] = merged = merge_marker(base, kwargs)
        vs = merged.min_speedup.vs if merged.min_speedup is not None else None
        if vs is not None and profiles is not None and vs not in profiles:
            available = ", ".join(sorted(profiles))
            error = f"@pytest.mark.specdec: min_speedup vs {vs!r}: no such profile in {profile_path} " + (
                f"(available: {available})"
            )
    except ValueError as exc:
        error = f"@pytest.mark.specdec: {exc}"
    else:
        changed = overrides(base, item.stash[thresholds_key]) if profile_param else []
        if changed:
            item.user_properties.append((OVERRIDES_PROPERTY, json.dumps([profile_param, changed])))
    if tolerances is not None and error is None:
        try:
            item.stash[tolerances_key] = parse_tolerances(tolerances, strict=True)
        except ValueError as exc:
            error = f"@pytest.mark.specdec(tolerances=...): {exc}"
    if error is not None:
        pytest.fail(error, pytrace=False)


def item_thresholds(item: pytest.Item, profiles: Mapping[str, Profile] | None) -> Thresholds | None:
    """The test's thresholds (profile merged with its marker; :func:`setup_item` stores them), else its profile's."""
    found = item.stash.get(thresholds_key, None)
    if found is not None:
        return found
    name = item_profile(item)
    if not name:
        return None
    assert profiles is not None
    return profiles[name].thresholds


def speedup_vs(item: pytest.Item, profiles: Mapping[str, Profile] | None) -> str | None:
    """The profile this test's ``min_speedup`` is judged against, or None."""
    thresholds = item_thresholds(item, profiles)
    return thresholds.min_speedup.vs if thresholds is not None and thresholds.min_speedup is not None else None
