"""``python -m pytest_specdec check``: preflight checks of a profile file, launching nothing."""

from __future__ import annotations

import argparse
import sys

from pytest_specdec.cli.exits import EXIT_BAD_PROFILE, EXIT_FINDINGS, EXIT_OK
from pytest_specdec.core.errors import ProfileError
from pytest_specdec.engines.preflight import Finding, format_findings, locate, run_preflight
from pytest_specdec.engines.rules import load_profiles
from pytest_specdec.profiles.schema import did_you_mean

__all__ = ["check_command"]


def check_command(args: argparse.Namespace) -> int:
    """``check PROFILE_FILE [--profile NAME] [--strict]``: ``profile NAME: ok`` on stdout for each profile without
    errors or warnings, its notes indented below it; every other finding one line on stderr, then a count line.
    Returns ``EXIT_FINDINGS`` on errors (warnings too with ``--strict``), ``EXIT_BAD_PROFILE`` on a file that cannot
    be loaded or an unknown profile, else ``EXIT_OK``.

    Example (a ``url:`` profile whose model is not on this machine: a note, not a problem)::

        profile remote: ok
          note: specdec.yaml:4: profiles.remote.model_path: the server at http://... is not launched here ...
    """
    # Every error and warning goes to stderr in one shape, ``SEVERITY: FILE:LINE: profiles.NAME.KEY: ...``; stdout
    # says which profiles are fine, with what a note says of them (a fresh-user trial read no ok line for a profile
    # whose only finding was a note, as if it had failed). Exit codes: EXIT_OK, EXIT_FINDINGS, EXIT_BAD_PROFILE
    # (README "Profiles").
    try:
        profiles = load_profiles(args.profile_file)
    except ProfileError as exc:
        for line in str(exc).splitlines():
            print(f"error: {line}", file=sys.stderr)
        return EXIT_BAD_PROFILE
    names = args.profile or sorted(profiles.profiles)
    unknown = [n for n in names if n not in profiles.profiles]
    if unknown:
        available = ", ".join(sorted(profiles.profiles))
        print(f"error: --profile={unknown[0]}: no such profile in {args.profile_file}"
              f"{did_you_mean(unknown[0], list(profiles.profiles))} (available: {available})",
              file=sys.stderr)  # fmt: skip
        return EXIT_BAD_PROFILE
    findings: list[Finding] = []
    for name in names:
        try:
            found = locate(run_preflight(profiles.get(name)), profiles)
        except ProfileError as exc:
            print(f"error: {exc}", file=sys.stderr)
            return EXIT_BAD_PROFILE
        if any(f.severity != "note" for f in found):
            findings += found  # its notes stay beside its problems, on stderr
            continue
        print(f"profile {name}: ok")
        for note in found:
            print(f"  {note}")
    for line in format_findings(findings):
        print(line, file=sys.stderr)
    failing = {"error", "warning"} if args.strict else {"error"}
    return EXIT_FINDINGS if any(f.severity in failing for f in findings) else EXIT_OK
