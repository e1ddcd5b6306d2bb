"""Server log files: one per launch (``<name>.<stamp>.log``), the newest ``KEEP`` per name kept, and ``<name>.log``
a link to the newest, so an earlier run's failure keeps the log its message names."""

from __future__ import annotations

import os
import re
import time
from pathlib import Path

__all__ = ["KEEP", "new_log_path"]

#: Launch logs kept per name (profile, ``<profile>.paired``, ``<profile>.rank<R>``); older ones are deleted.
KEEP = 10


def new_log_path(log_dir: Path, name: str, *, stamp: str | None = None) -> Path:
    """A fresh log file path for one launch of ``name``, with ``<name>.log`` pointing at it.

    Layout: ``<log_dir>/<name>.<UTC time>-<pid>.log`` (e.g. ``eagle3.20261202T010632Z-1a2b.log``; ``-2``, ``-3``
    appended when that name is taken), and ``<log_dir>/<name>.log``, a relative symlink to the newest (a regular
    file there, from an older layout or a system without symlinks, is renamed to a kept log first). Of the
    ``<name>.<stamp>.log`` files, the newest :data:`KEEP` are kept (stamps sort by time); ``<name>.paired.*`` is
    another name, never pruned with ``<name>``'s.

    :param stamp: shared by the logs of one launch (the ranks of a node group); default: now and this pid.
    :returns: the path the server's output goes to, named in every message about this launch.
    """
    log_dir.mkdir(parents=True, exist_ok=True)
    stamp = stamp or launch_stamp()
    path = log_dir / f"{name}.{stamp}.log"
    n = 2
    while path.exists():
        path = log_dir / f"{name}.{stamp}-{n}.log"
        n += 1
    path.touch()
    pointer = log_dir / f"{name}.log"
    if pointer.is_file() and not pointer.is_symlink():
        mtime = time.strftime("%Y%m%dT%H%M%SZ", time.gmtime(pointer.stat().st_mtime))
        os.replace(pointer, log_dir / f"{name}.{mtime}-0000.log")
    _prune(log_dir, name)
    tmp = log_dir / f".{name}.log.{os.getpid()}"
    try:
        tmp.unlink(missing_ok=True)
        tmp.symlink_to(path.name)
        os.replace(tmp, pointer)
    except OSError:  # no symlinks here (some Windows set-ups): the kept logs are still there
        tmp.unlink(missing_ok=True)
    return path


def launch_stamp() -> str:
    """``20261202T010632Z-1a2b``: UTC second and this process's id (xdist workers launch at once)."""
    return time.strftime("%Y%m%dT%H%M%SZ", time.gmtime()) + f"-{os.getpid() & 0xFFFF:04x}"


def _prune(log_dir: Path, name: str) -> None:
    pattern = re.compile(re.escape(name) + r"\.\d{8}T\d{6}Z-[0-9a-f]{4}(?:-\d+)?\.log")
    kept = sorted(p for p in log_dir.iterdir() if pattern.fullmatch(p.name))
    for old in kept[:-KEEP]:
        old.unlink(missing_ok=True)
