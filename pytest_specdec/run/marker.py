"""The ``@pytest.mark.specdec(...)`` marker of one test -> its thresholds and tolerances, kept in ``item.stash``
(as pytest's ``skipping.py`` turns ``skipif`` arguments into a record at setup).

``plugin.py::pytest_runtest_setup`` calls :func:`setup_item`; bad arguments fail that test with one clean ERROR,
before its fixtures (the profile's server) are set up. ``--specdec-check`` reads every collected test's marker with
the same :func:`read_marker` (:func:`marker_errors`), so a broken marker fails the check, not the run.
"""

from __future__ import annotations

import difflib
import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

from pytest_specdec.run.keys import OVERRIDES_PROPERTY, thresholds_key, tolerances_key

if TYPE_CHECKING:
    from pytest_specdec.core.tolerances import Tolerances
    from pytest_specdec.profiles.schema import Profile, Thresholds

__all__ = [
    "MarkerArgs",
    "item_profile",
    "item_thresholds",
    "marker_errors",
    "measures",
    "read_marker",
    "setup_item",
    "speedup_vs",
]


def measures(item: pytest.Item) -> bool:
    """Whether the test is measured and judged: it requests ``specdec_run``, or its ``specdec`` marker has arguments
    (thresholds, tolerances), which are judged on the profile's measurement after its body whether or not it asks
    for the measurement. A bare marker (or the one a test using ``specdec_server`` gets for ``-m specdec``) selects
    only: a test that talks to the server itself is not measured for it."""
    if "specdec_run" in getattr(item, "fixturenames", ()):
        return True
    return any(m.args or m.kwargs for m in item.iter_markers("specdec"))


def item_profile(item: pytest.Item) -> str | None:
    """The name of the profile this test runs against (its ``specdec_profile`` parameter), or None."""
    return getattr(getattr(item, "callspec", None), "params", {}).get("specdec_profile")


@dataclass(frozen=True, slots=True)
class MarkerArgs:
    """A test's ``specdec`` marker, read: its thresholds (the profile's with the marker's on top), its
    ``tolerances=`` layer (None when not given) and what it changed in the profile's thresholds."""

    thresholds: Thresholds
    tolerances: Tolerances | None
    #: ``min_accept_length 2.4 (profile: 2.6)`` per key the marker changed (``thresholds.overrides``); empty
    #: for a test without a profile.
    overrides: tuple[str, ...]


def read_marker(item: pytest.Item, profiles: Mapping[str, Profile] | None, profile_path: Path) -> MarkerArgs | None:
    """Read and validate the test's ``specdec`` marker; the one reader of its arguments, for the run
    (:func:`setup_item`) and for ``--specdec-check`` (:func:`marker_errors`).

    :param profiles: the loaded profiles (None when no profile file was loaded); :param profile_path: their file.
    :returns: None when the test has no ``specdec`` marker.
    :raises ValueError: positional arguments, an unknown keyword (with a did-you-mean), an invalid threshold value,
        ``min_speedup`` against a profile the file lacks, or tolerances that do not parse: one message naming the
        keyword, its value and the fix, starting ``@pytest.mark.specdec``.
    """
    from pytest_specdec.core.tolerances import misnamed_arms, parse_tolerances, tolerance_strings
    from pytest_specdec.judge.thresholds import merge_marker, overrides
    from pytest_specdec.profiles.schema import Thresholds

    marker = item.get_closest_marker("specdec")
    if marker is None:
        return None
    if marker.args:
        raise ValueError(
            f"@pytest.mark.specdec takes keyword arguments only, got positional {marker.args!r}; "
            "e.g. @pytest.mark.specdec(min_accept_length=2.0)"
        )
    kwargs = dict(marker.kwargs)
    tolerances = kwargs.pop("tolerances", None)
    profile_param = item_profile(item)
    base = profiles[profile_param].thresholds if profile_param and profiles is not None else Thresholds()
    try:
        merged = merge_marker(base, kwargs)
    except ValueError as exc:
        raise ValueError(f"@pytest.mark.specdec: {exc}") from None
    vs = merged.min_speedup.vs if merged.min_speedup is not None else None
    if vs is not None and profiles is not None and vs not in profiles:
        close = difflib.get_close_matches(vs, list(profiles), n=1)
        hint = f"did you mean {close[0]!r}? " if close else ""
        raise ValueError(
            f"@pytest.mark.specdec: min_speedup vs {vs!r}: no such profile in {profile_path} "
            f"({hint}available: {', '.join(sorted(profiles))})"
        )
    parsed = None
    if tolerances is not None:
        # The shapes and errors of a profile's `tolerances:` (one reader): a trial's tolerances={"output_tok_s": "5%"}
        # was refused here while the profile took it.
        try:
            parsed = parse_tolerances(tolerance_strings(tolerances), strict=True, origin="marker")
        except ValueError as exc:
            raise ValueError(f"@pytest.mark.specdec(tolerances=...): {exc}") from None
        problem = misnamed_arms(parsed, vs) if vs is not None else None
        if problem:
            raise ValueError(f"@pytest.mark.specdec(tolerances=...): {problem}")
    changed = tuple(overrides(base, merged)) if profile_param else ()
    return MarkerArgs(merged, parsed, changed)


def setup_item(item: pytest.Item, profiles: Mapping[str, Profile] | None, profile_path: Path) -> None:
    """``pytest_runtest_setup``: merge the ``specdec`` marker into the profile's thresholds and parse its
    tolerances (:func:`read_marker`), stashed on the item.

    :param profiles: the loaded profiles (None when no profile file was loaded); :param profile_path: their file.
    :raises pytest.fail.Exception: :func:`read_marker`'s ``ValueError``, as one clean ERROR of the test.
    """
    try:
        args = read_marker(item, profiles, profile_path)
    except ValueError as exc:
        error = str(exc)
    else:
        error = ""
    if error:
        pytest.fail(error, pytrace=False)  # outside the except: no "During handling" chain under the message
    if args is None:
        return
    item.stash[thresholds_key] = args.thresholds
    if args.tolerances is not None:
        item.stash[tolerances_key] = args.tolerances
    if args.overrides:
        item.user_properties.append((OVERRIDES_PROPERTY, json.dumps([item_profile(item), list(args.overrides)])))


def marker_errors(
    items: Sequence[pytest.Item], profiles: Mapping[str, Profile] | None, profile_path: Path
) -> tuple[list[str], int]:
    """``--specdec-check``: every collected test's ``specdec`` marker read as the run reads it (:func:`read_marker`),
    without setting anything up.

    :returns: one ``error: NODEID: MESSAGE`` line per test whose marker the run would refuse, and the number of
        tests with a ``specdec`` marker.
    """
    errors, marked = [], 0
    for item in items:
        if item.get_closest_marker("specdec") is None:
            continue
        marked += 1
        try:
            read_marker(item, profiles, profile_path)
        except ValueError as exc:
            errors.append(f"error: {item.nodeid}: {exc}")
    return errors, marked


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
