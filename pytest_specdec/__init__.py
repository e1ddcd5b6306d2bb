"""pytest-specdec: performance-regression tests for speculative-decoding LLM servers (SGLang EAGLE-3 first).

The pytest plugin lives in ``pytest_specdec.plugin`` (entry point ``specdec``); the names below are the typed records
and errors users meet in fixtures and failure messages. The records and profiles (pydantic) are imported on first
use (PEP 562 ``__getattr__``): every pytest run imports this package with the plugin. So are the errors, which
subclass pytest's: the reference server (``python -m pytest_specdec.refserver``) imports this package at each start
and never pytest (0.25-0.5 s of its start).
"""

import importlib
import typing

if typing.TYPE_CHECKING:
    from pytest_specdec.core.errors import (
        ClientOverloadError,
        CompareError,
        LoadWarning,
        PreflightError,
        ProfileError,
        ServerError,
        ServerStartError,
        SpecdecError,
        SpecdecWarning,
    )
    from pytest_specdec.core.records import RequestRecord, RunMetrics
    from pytest_specdec.engines.rules import load_profiles
    from pytest_specdec.profiles.schema import Profile, SpeculativeConfig, Thresholds, Workload

__all__ = [
    "ClientOverloadError",
    "CompareError",
    "LoadWarning",
    "PreflightError",
    "Profile",
    "ProfileError",
    "RequestRecord",
    "RunMetrics",
    "ServerError",
    "ServerStartError",
    "SpecdecError",
    "SpecdecWarning",
    "SpeculativeConfig",
    "Thresholds",
    "Workload",
    "load_profiles",
]

#: Public name -> the module that defines it, imported when the name is first read.
_LAZY = {
    "Profile": "pytest_specdec.profiles.schema",
    "SpeculativeConfig": "pytest_specdec.profiles.schema",
    "Thresholds": "pytest_specdec.profiles.schema",
    "Workload": "pytest_specdec.profiles.schema",
    "load_profiles": "pytest_specdec.engines.rules",
    "RequestRecord": "pytest_specdec.core.records",
    "RunMetrics": "pytest_specdec.core.records",
    **dict.fromkeys(
        (
            "ClientOverloadError",
            "CompareError",
            "LoadWarning",
            "PreflightError",
            "ProfileError",
            "ServerError",
            "ServerStartError",
            "SpecdecError",
            "SpecdecWarning",
        ),
        "pytest_specdec.core.errors",
    ),
}


def __getattr__(name: str) -> typing.Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(__all__))
