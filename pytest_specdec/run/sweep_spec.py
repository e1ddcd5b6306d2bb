"""A sweep's points from ``--specdec-sweep`` (:func:`parse_sweep`), and one derived profile per point
(:func:`expand_profiles`), run as if each had been named with ``--server-profile``.

A sweep runs the selected profile once per point, one server per point. Derived profiles are named
``<profile>@<key>=<value>[,<key>=<value>...]`` (``core.sweep_names``), e.g. ``eagle3@num_steps=2`` or
``eagle3@num_steps=2,concurrency=8``. Usage::

    points = parse_sweep("num_steps=1..4")                       # [{"num_steps": 1}, ..., {"num_steps": 4}]
    profiles, names = expand_profiles(profile_set.profiles, ["baseline", "eagle3"], points)

After the run, ``judge.sweep`` ranks the points and ``report.sweep_table`` tabulates them.
"""

from __future__ import annotations

import difflib
import itertools
import re
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from pytest_specdec.core.sweep_names import AT, SPECULATIVE_KEYS, SWEEP_KEYS, WORKLOAD_KEYS, Point, point_label
from pytest_specdec.profiles.schema import Profile

__all__ = ["expand_profiles", "parse_sweep"]

_FORMAT = (
    "expected PARAM=VALUES joined by ';', with PARAM one of " + ", ".join(SWEEP_KEYS) + " and VALUES a range "
    '1..6 or a list 1,2,4 (integers >= 1; request_rate: requests/s > 0, e.g. 0.5,1,2), e.g. "num_steps=1..6" or '
    '"num_steps=1,2,4;concurrency=1,8"'
)
_RANGE = re.compile(r"^(\d+)\.\.(\d+)$")
_LIST = re.compile(r"^\d+(,\d+)*$")
_RATES = re.compile(r"^(\d+(\.\d*)?|\.\d+)(,(\d+(\.\d*)?|\.\d+))*$")


def parse_sweep(spec: str) -> list[Point]:
    """Parse a sweep specification into its points: the cartesian product of the axes, first axis outermost.

    ``"num_steps=1..3"`` -> ``[{"num_steps": 1}, {"num_steps": 2}, {"num_steps": 3}]`` (ranges are inclusive);
    ``"num_steps=1,2;concurrency=1,8"`` -> ``[{"num_steps": 1, "concurrency": 1}, {"num_steps": 1,
    "concurrency": 8}, {"num_steps": 2, "concurrency": 1}, {"num_steps": 2, "concurrency": 8}]``;
    ``"request_rate=0.5,2"`` -> ``[{"request_rate": 0.5}, {"request_rate": 2}]`` (an open loop's requests/s; a
    load curve).

    :param spec: ``PARAM=VALUES[;PARAM=VALUES...]``; whitespace around tokens is ignored.
    :returns: one dict per point, key order as given.
    :raises ValueError: naming the bad token and the expected format, e.g. ``'num_step=1..6': unknown parameter
        'num_step' (did you mean 'num_steps'?); expected PARAM=VALUES ...``.
    """
    axes: list[tuple[str, list[float]]] = []
    tokens = [t.strip() for t in spec.split(";")]
    if not any(tokens):
        raise ValueError(f"empty sweep; {_FORMAT}")
    for token in tokens:
        if not token:
            continue
        key, sep, raw = (part.strip() for part in token.partition("="))
        if not sep or not key:
            raise ValueError(f"{token!r}: no PARAM=VALUES; {_FORMAT}")
        if key not in SWEEP_KEYS:
            close = difflib.get_close_matches(key, SWEEP_KEYS, n=1)
            hint = f" (did you mean {close[0]!r}?)" if close else ""
            raise ValueError(f"{token!r}: unknown parameter {key!r}{hint}; {_FORMAT}")
        if any(key == k for k, _ in axes):
            raise ValueError(f"{token!r}: parameter {key!r} given twice; {_FORMAT}")
        values_text = raw.replace(" ", "")
        match = _RANGE.match(values_text)
        if match:
            low, high = int(match.group(1)), int(match.group(2))
            if low > high:
                raise ValueError(f"{token!r}: range {low}..{high} is empty (write the smaller value first); {_FORMAT}")
            values: list[float] = list(range(low, high + 1))
        elif _LIST.match(values_text):
            values = [int(v) for v in values_text.split(",")]
        elif key == "request_rate" and _RATES.match(values_text):
            values = [int(v) if v.isdigit() else float(v) for v in values_text.split(",")]
        else:
            raise ValueError(f"{token!r}: cannot read values {raw!r}; {_FORMAT}")
        if len(set(values)) != len(values):
            raise ValueError(f"{token!r}: a value is listed twice; {_FORMAT}")
        if key == "request_rate" and min(values) <= 0:
            raise ValueError(f"{token!r}: request rates must be > 0 requests/s; {_FORMAT}")
        if key != "request_rate" and min(values) < 1:
            raise ValueError(f"{token!r}: values must be >= 1; {_FORMAT}")
        axes.append((key, values))
    keys = [k for k, _ in axes]
    return [dict(zip(keys, combo, strict=True)) for combo in itertools.product(*(v for _, v in axes))]


def _derive(profile: Profile, point: Mapping[str, float], name: str) -> Profile:
    """``profile`` at ``point``; steps/topk/draft tokens kept as the profile's engine will run them
    (``Engine.speculative_at``: at topk 1 a chain verifies num_steps + 1 draft tokens, so that pair moves together).

    :raises ValueError: see ``Engine.speculative_at``.
    """
    update: dict[str, Any] = {"name": name}
    spec_keys = {k: int(v) for k, v in point.items() if k in SPECULATIVE_KEYS}
    if spec_keys:
        from pytest_specdec.engines import get_engine

        update["speculative"] = get_engine(profile).speculative_at(profile, spec_keys, label=point_label(point))
    load = {k: (int(v) if k == "concurrency" else float(v)) for k, v in point.items() if k in WORKLOAD_KEYS}
    if load:
        update["workload"] = profile.workload.model_copy(update=load)
    return profile.model_copy(update=update)


def expand_profiles(
    profiles: Mapping[str, Profile], selected: Sequence[str], points: Sequence[Mapping[str, float]]
) -> tuple[dict[str, Profile], list[str]]:
    """Derive one profile per sweep point from each selected profile.

    A speculative profile gets every point (``eagle3@num_steps=2``). A profile without speculation (the baseline)
    takes only the workload keys: one profile per distinct load when concurrency or request_rate is swept
    (``baseline@concurrency=8``, ``baseline@request_rate=4``; a derived point's ``min_speedup.vs`` is pointed at
    the baseline of its own load), else it runs once under its own name. Derived profiles are plain ``Profile``
    objects, validated by pydantic (``model_copy`` skips validation, so they are re-validated here).

    :param profiles: every profile of the file by name (``ProfileSet.profiles``).
    :param selected: the names to run (``--server-profile`` plus ``--specdec-sweep-baseline``), all in ``profiles``.
    :param points: from :func:`parse_sweep`, at least one.
    :returns: ``profiles`` plus the derived ones, and the names to run: profiles without speculation first (so
        ``min_speedup`` finds its reference already measured), then each speculative profile's points in sweep order.
    :raises ValueError: no selected profile runs speculative decoding while a speculative key is swept, a profile
        leaves steps/draft tokens to its engine, or a point is contradictory (topk 1 with draft tokens != steps + 1).
    """
    if not points:
        raise ValueError("no sweep points")
    swept = {k for p in points for k in p}
    speculative = [n for n in selected if profiles[n].is_speculative]
    plain = [n for n in selected if not profiles[n].is_speculative]
    if swept & set(SPECULATIVE_KEYS) and not speculative:
        keys = ", ".join(k for k in SPECULATIVE_KEYS if k in swept)
        raise ValueError(
            f"sweeps {keys} but no selected profile runs speculative decoding "
            f"(selected: {', '.join(selected)}); select one, e.g. --server-profile=eagle3"
        )
    out = dict(profiles)
    names: list[str] = []
    plain_by_load: dict[str, dict[str, str]] = {}
    for name in plain:
        workload_points = _unique([{k: v for k, v in p.items() if k in WORKLOAD_KEYS} for p in points])
        if workload_points == [{}]:
            names.append(name)
            continue
        for wp in workload_points:
            derived = f"{name}{AT}{point_label(wp)}"
            out[derived] = _validated(_derive(profiles[name], wp, derived))
            plain_by_load.setdefault(name, {})[point_label(wp)] = derived
            names.append(derived)
    for name in speculative:
        for point in points:
            derived = f"{name}{AT}{point_label(point)}"
            profile = _derive(profiles[name], point, derived)
            ms = profile.thresholds.min_speedup
            load = point_label({k: v for k, v in point.items() if k in WORKLOAD_KEYS})
            if ms is not None and load and ms.vs in plain_by_load:
                vs = plain_by_load[ms.vs][load]
                thresholds = profile.thresholds.model_copy(update={"min_speedup": ms.model_copy(update={"vs": vs})})
                profile = profile.model_copy(update={"thresholds": thresholds})
            out[derived] = _validated(profile)
            names.append(derived)
    return out, names


def _unique(items: Iterable[Point]) -> list[Point]:
    seen: list[Point] = []
    for item in items:
        if item not in seen:
            seen.append(item)
    return seen


def _validated(profile: Profile) -> Profile:
    return Profile.model_validate(profile.model_dump())
