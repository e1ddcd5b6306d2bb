"""The names of sweep points: which keys a sweep may vary, and how a derived profile's name carries its point
(``eagle3@num_steps=2,concurrency=8``). On the ground floor because every floor reads these names: the verdicts
(a sweep point's thresholds), the ranking, the tables and plots, and the option parser that builds the points.
"""

from __future__ import annotations

from collections.abc import Mapping

__all__ = ["AT", "SPECULATIVE_KEYS", "SWEEP_KEYS", "WORKLOAD_KEYS", "point_label", "split_name"]

#: Sweepable keys of the ``speculative:`` block (SGLang ``--speculative-num-steps`` etc.).
SPECULATIVE_KEYS = ("num_steps", "num_draft_tokens", "eagle_topk")
#: Sweepable keys of the ``workload:`` block.
WORKLOAD_KEYS = ("concurrency",)
SWEEP_KEYS = SPECULATIVE_KEYS + WORKLOAD_KEYS
#: Separates a profile name from its point in a derived profile's name.
AT = "@"


def point_label(point: Mapping[str, int]) -> str:
    """``{"num_steps": 2, "concurrency": 8}`` -> ``num_steps=2,concurrency=8`` (the part after ``@``)."""
    return ",".join(f"{k}={v}" for k, v in point.items())


def split_name(profile_name: str) -> tuple[str, dict[str, int]]:
    """The base profile and the point of a derived profile's name; ``(name, {})`` for any other name.

    ``"eagle3@num_steps=2,concurrency=8"`` -> ``("eagle3", {"num_steps": 2, "concurrency": 8})``.
    """
    base, sep, label = profile_name.rpartition(AT)
    if not sep:
        return profile_name, {}
    point: dict[str, int] = {}
    for pair in label.split(","):
        key, eq, value = pair.partition("=")
        if not eq or key not in SWEEP_KEYS or not value.isdigit():
            return profile_name, {}
        point[key] = int(value)
    return base, point
