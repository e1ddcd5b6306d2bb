"""The names of sweep points: which keys a sweep may vary, and how a derived profile's name carries its point
(``eagle3@num_steps=2,concurrency=8``). On the ground floor because every floor reads these names: the verdicts
(a sweep point's thresholds), the ranking, the tables and plots, and the option parser that builds the points.
"""

from __future__ import annotations

from collections.abc import Mapping

__all__ = ["AT", "SPECULATIVE_KEYS", "SWEEP_KEYS", "WORKLOAD_KEYS", "Point", "point_label", "split_name"]

#: Sweepable keys of the ``speculative:`` block (SGLang ``--speculative-num-steps`` etc.).
SPECULATIVE_KEYS = ("num_steps", "num_draft_tokens", "eagle_topk")
#: Sweepable keys of the ``workload:`` block: they set the load, so points that differ in them are not ranked
#: against each other. ``request_rate`` (requests/s of an open loop) may be fractional; the others are integers.
WORKLOAD_KEYS = ("concurrency", "request_rate")
SWEEP_KEYS = SPECULATIVE_KEYS + WORKLOAD_KEYS
#: Separates a profile name from its point in a derived profile's name.
AT = "@"


#: A sweep point: key -> value (an int, or a float for ``request_rate``).
Point = dict[str, float]


def point_label(point: Mapping[str, float]) -> str:
    """``{"num_steps": 2, "concurrency": 8}`` -> ``num_steps=2,concurrency=8`` (the part after ``@``);
    ``{"request_rate": 2.5}`` -> ``request_rate=2.5``."""
    return ",".join(f"{k}={v:g}" for k, v in point.items())


def _number(key: str, value: str) -> float | None:
    if value.isdigit():
        return int(value)
    if key != "request_rate":
        return None
    try:
        number = float(value)
    except ValueError:
        return None
    return number if number > 0 and number != float("inf") else None


def split_name(profile_name: str) -> tuple[str, Point]:
    """The base profile and the point of a derived profile's name; ``(name, {})`` for any other name.

    ``"eagle3@num_steps=2,concurrency=8"`` -> ``("eagle3", {"num_steps": 2, "concurrency": 8})``;
    ``"eagle3@request_rate=2.5"`` -> ``("eagle3", {"request_rate": 2.5})``.
    """
    base, sep, label = profile_name.rpartition(AT)
    if not sep:
        return profile_name, {}
    point: Point = {}
    for pair in label.split(","):
        key, eq, value = pair.partition("=")
        number = _number(key, value) if eq and key in SWEEP_KEYS else None
        if number is None:
            return profile_name, {}
        point[key] = number
    return base, point
