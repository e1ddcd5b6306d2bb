"""Our exception and warning types.

Hierarchy::

    SpecdecError(Exception)
     ├── ProfileError            a profile file or option is invalid (plugin turns it into pytest.UsageError)
     ├── PreflightError          preflight found errors; carries the findings
     ├── ServerStartError        the server died or did not become ready; carries log_path and the log tail
     ├── ServerError             a running server stalled, died, or failed too many requests
     ├── ClientOverloadError     the measuring client was too busy to time the phase (workload.client_overload: fail)
     └── CompareError            two result sets cannot be compared (workload differs, file unreadable)
          └── NoiseFileError     a noise file written by calibrate is unreadable or holds values no calibration gives
    SpecdecWarning(pytest.PytestWarning)   fingerprint differs, baseline missing, not applicable
"""

from __future__ import annotations

from pathlib import Path

import pytest

__all__ = [
    "ClientOverloadError",
    "LoadWarning",
    "CompareError",
    "NoiseFileError",
    "PreflightError",
    "ProfileError",
    "ServerError",
    "ServerStartError",
    "SpecdecError",
    "SpecdecWarning",
]


class SpecdecError(Exception):
    """Base class of every error this plugin raises."""


class ProfileError(SpecdecError):
    """Raised when a profile file, profile name or option value is invalid; ``path`` is the file when known."""

    def __init__(self, message: str, *, path: str | Path | None = None, profile: str | None = None) -> None:
        super().__init__(message)
        self.path = path
        self.profile = profile


class PreflightError(SpecdecError):
    """Raised before launch when preflight finds at least one error; ``findings`` lists all findings."""

    def __init__(self, message: str, findings: list | tuple = ()) -> None:
        super().__init__(message)
        self.findings = tuple(findings)


class ServerStartError(SpecdecError):
    """Raised when a server process exits, stalls or times out before it is ready.

    ``cause`` is one of: out of memory, port in use, CUDA/NCCL error, missing model path, bad flag, timeout,
    stalled, unknown.
    """

    def __init__(
        self,
        message: str,
        *,
        profile: str | None = None,
        log_path: Path | None = None,
        cause: str = "unknown",
        log_tail: str = "",
    ) -> None:
        super().__init__(message)
        self.profile = profile
        self.log_path = log_path
        self.cause = cause
        self.log_tail = log_tail


class ServerError(SpecdecError):
    """Raised during a measured run: stalled stream, dead process, or an error rate above the profile's limit."""

    def __init__(self, message: str, *, profile: str | None = None, log_path: Path | None = None) -> None:
        super().__init__(message)
        self.profile = profile
        self.log_path = log_path


class ClientOverloadError(SpecdecError):
    """Raised after a measured phase whose client event-loop lag was large against the ITL while the client itself
    was busy (``metrics.client_overloaded``) when the profile sets ``workload.client_overload: fail``; by default that
    is only a warning, and so is always the same lag with an idle client (the machine was busy)."""

    def __init__(self, message: str, *, profile: str | None = None) -> None:
        super().__init__(message)
        self.profile = profile


class CompareError(SpecdecError):
    """Raised when results cannot be compared (different workloads, unreadable or missing baseline)."""


class NoiseFileError(CompareError):
    """Raised when a noise file (``calibrate``'s ``noise/<profile>.json``) is present but unusable: not JSON, not an
    object, or a value no calibration writes (a negative, non-finite or > 100 % sd, a ``runs`` that is not a positive
    integer). ``path`` is the file, ``key`` the key path (``sigma_rel.output_tok_s``), or None for the whole file."""

    def __init__(self, message: str, *, path: str | Path, key: str | None = None) -> None:
        super().__init__(message)
        self.path = path
        self.key = key


class SpecdecWarning(pytest.PytestWarning):
    """Warned when a comparison or threshold is not applicable, or a fingerprint differs from the baseline."""


class LoadWarning(SpecdecWarning):
    """Warned when the client could not keep up ("client overloaded: ...") or the machine was busy ("machine busy:
    ..."): TTFT and ITL include that delay. The plugin working as designed on a loaded runner, so a suite that turns
    warnings into errors can keep these as warnings: ``filterwarnings = default::pytest_specdec.LoadWarning``.
    """
