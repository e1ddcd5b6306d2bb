"""Parsers of the plugin's command-line option values (``argparse`` ``type=`` callables).

Each raises ``pytest.UsageError`` naming the option, the value and an example of a valid one.
"""

from __future__ import annotations

from collections.abc import Callable

import pytest

__all__ = ["percent", "positive_float", "positive_int", "profile_names", "sweep_points"]


def profile_names(value: str) -> str:
    """``--server-profile``: one or more comma-separated names (kept as given; an empty value is an error, since
    ``--server-profile=$PROFILE`` with PROFILE unset would otherwise skip every specdec test and pass)."""
    if not [name for name in value.split(",") if name.strip()]:
        raise pytest.UsageError(
            f"--server-profile={value}: no profile named; give NAME[,NAME...], e.g. --server-profile=eagle3 "
            "(leave the option out to skip specdec tests)"
        )
    return value


def positive_float(option: str) -> Callable[[str], float]:
    """Seconds, > 0."""

    def parse(value: str) -> float:
        try:
            number = float(value)
        except ValueError:
            raise pytest.UsageError(f"{option}={value}: expected a number of seconds, e.g. {option}=900") from None
        if number <= 0:
            raise pytest.UsageError(f"{option}={value}: expected a positive number of seconds")
        return number

    return parse


def percent(option: str) -> Callable[[str], float]:
    """A percentage 0..100 (``5`` or ``5%``), returned as a fraction (0.05)."""

    def parse(value: str) -> float:
        try:
            number = float(value.strip().removesuffix("%"))
        except ValueError:
            raise pytest.UsageError(f"{option}={value}: expected a percentage, e.g. {option}=5") from None
        if not 0 <= number <= 100:
            raise pytest.UsageError(f"{option}={value}: expected a percentage from 0 to 100, e.g. {option}=5")
        return number / 100.0

    return parse


def sweep_points(value: str) -> list[dict[str, int]]:
    """``--specdec-sweep`` points (``sweep.parse_sweep``; imported here, when the option is given, since every
    pytest run imports this module with the plugin)."""
    from pytest_specdec import sweep

    try:
        return sweep.parse_sweep(value)
    except ValueError as exc:
        raise pytest.UsageError(f"--specdec-sweep={value}: {exc}") from None


def positive_int(option: str) -> Callable[[str], int]:
    """An integer >= 1."""

    def parse(value: str) -> int:
        try:
            number = int(value)
        except ValueError:
            raise pytest.UsageError(f"{option}={value}: expected a positive integer, e.g. {option}=3") from None
        if number < 1:
            raise pytest.UsageError(f"{option}={value}: expected a positive integer, e.g. {option}=3")
        return number

    return parse
