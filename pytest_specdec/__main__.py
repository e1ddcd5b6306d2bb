"""Command line: ``python -m pytest_specdec check PROFILE_FILE [--profile NAME] [--strict]``; more subcommands later."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence

from pytest_specdec.errors import ProfileError
from pytest_specdec.preflight import Finding, format_findings, run_preflight
from pytest_specdec.profiles import load_profiles

__all__ = ["main"]

#: Exit codes of ``check``.
EXIT_OK, EXIT_FINDINGS, EXIT_BAD_PROFILE = 0, 1, 2


def _build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m pytest_specdec", description="pytest-specdec tools")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    check = sub.add_parser(
        "check",
        help="run preflight checks on a profile file without launching anything",
        description="Check profiles against their model files; exit 1 on errors (or warnings with --strict), "
        "2 on an invalid profile file, 0 otherwise.",
    )
    check.add_argument("profile_file", metavar="PROFILE_FILE", help="the specdec YAML file")
    check.add_argument("--profile", metavar="NAME", action="append", help="check only this profile (repeatable)")
    check.add_argument("--strict", action="store_true", help="exit 1 on warnings too")
    check.set_defaults(func=_cmd_check)
    return parser


def _cmd_check(args: argparse.Namespace) -> int:
    try:
        profiles = load_profiles(args.profile_file)
    except ProfileError as exc:
        print(f"ERROR: {exc}", file=sys.stderr)
        return EXIT_BAD_PROFILE
    names = args.profile or sorted(profiles.profiles)
    unknown = [n for n in names if n not in profiles.profiles]
    if unknown:
        available = ", ".join(sorted(profiles.profiles))
        print(f"ERROR: --profile={unknown[0]}: no such profile in {args.profile_file} (available: {available})",
              file=sys.stderr)  # fmt: skip
        return EXIT_BAD_PROFILE
    findings: list[Finding] = []
    for name in names:
        try:
            found = run_preflight(profiles.get(name))
        except ProfileError as exc:
            print(f"ERROR: {exc}", file=sys.stderr)
            return EXIT_BAD_PROFILE
        findings += found
        if not found:
            print(f"profile {name}: ok")
    for line in format_findings(findings):
        print(line)
    failing = {"error", "warning"} if args.strict else {"error"}
    return EXIT_FINDINGS if any(f.severity in failing for f in findings) else EXIT_OK


def main(argv: Sequence[str] | None = None) -> int:
    """Run the CLI; returns the exit code."""
    args = _build_parser().parse_args(argv)
    return int(args.func(args))


if __name__ == "__main__":
    sys.exit(main())
