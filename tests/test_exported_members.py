"""The public API is exactly ``__all__``, kept sorted (as httpx tests/test_exported_members.py)."""

from __future__ import annotations

import pytest_specdec


def test_all_is_sorted_and_complete() -> None:
    assert pytest_specdec.__all__ == sorted(pytest_specdec.__all__)
    public = {name for name in dir(pytest_specdec) if not name.startswith("_")}
    modules = {name for name in public if type(getattr(pytest_specdec, name)).__name__ == "module"}
    assert public - modules == set(pytest_specdec.__all__)
