"""``python -m pytest_specdec reap``: stop the recorded servers whose pytest is gone, and list them."""

from __future__ import annotations

import argparse
from pathlib import Path

from pytest_specdec.cli.exits import EXIT_OK
from pytest_specdec.serve.registry import reap

__all__ = ["reap_command"]


def reap_command(args: argparse.Namespace) -> int:
    """``reap [--specdec-dir DIR]``: stops the servers recorded in ``DIR/servers`` whose pytest is gone
    (``registry.reap``), one line each, then a count; returns ``EXIT_OK``."""

    where = Path(args.specdec_dir) / "servers"
    if not Path(args.specdec_dir).is_dir():  # a mistyped --specdec-dir reaps nothing: say so, not "0 stopped"
        print(f"reap: no directory {args.specdec_dir} (pytest's --specdec-dir; default .specdec): nothing recorded "
              "there")  # fmt: skip
        return EXIT_OK
    lines = reap(where)
    for line in lines:
        print(line)
    print(f"reap: {len(lines)} server(s) stopped ({where})")
    return EXIT_OK
