"""pytest-specdec: performance-regression tests for speculative-decoding LLM servers (SGLang EAGLE-3 first).

The pytest plugin lives in ``pytest_specdec.plugin`` (entry point ``specdec``); the names below are the typed records
and errors users meet in fixtures and failure messages.
"""

from pytest_specdec.errors import (
    ClientOverloadError,
    CompareError,
    PreflightError,
    ProfileError,
    ServerError,
    ServerStartError,
    SpecdecError,
    SpecdecWarning,
)
from pytest_specdec.profiles import Profile, SpeculativeConfig, Thresholds, Workload, load_profiles
from pytest_specdec.records import RequestRecord, RunMetrics

__all__ = [
    "ClientOverloadError",
    "CompareError",
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
