"""How a server process ended, in words: its exit status, the log tail to show (the cause: ``diagnosis``), and the
command that starts it by hand."""

from __future__ import annotations

import os
import shlex
import signal
from collections.abc import Mapping, Sequence
from pathlib import Path

__all__ = ["TAIL_LINES", "describe_exit", "display_lines", "launch_command", "read_tail", "tail_lines"]

TAIL_LINES = 20
_TAIL_BYTES = 64 * 1024


def describe_exit(returncode: int | None) -> str:
    """``exited with code 3``, ``was killed by signal 9 (SIGKILL)`` (``Popen.returncode`` convention), or, for None
    (the supervisor that reaped it is gone), ``exited (exit status unknown)``."""
    if returncode is None:
        return "exited (exit status unknown)"
    if returncode < 0:
        try:
            name = signal.Signals(-returncode).name
        except ValueError:
            name = "unknown signal"
        return f"was killed by signal {-returncode} ({name})"
    return f"exited with code {returncode}"


def launch_command(argv: Sequence[str], env: Mapping[str, str], *, shell_env: Mapping[str, str] | None = None) -> str:
    """``argv`` as a shell command line, preceded by the ``NAME=value`` of each variable of ``env`` that the shell
    lacks or has another value of: what to paste into the shell pytest ran in to start the server by hand, e.g.
    ``PYTHONPATH=/src SGLANG_X=1 /venv/bin/python -m sglang.launch_server --model-path /m --port 30000``.

    :param env: the server's whole environment (``LaunchSpec.env``: a clean base plus the profile's ``env:``).
    :param shell_env: the shell's environment (default: this process's, ``os.environ``).
    """
    shell = os.environ if shell_env is None else shell_env
    assignments = [f"{name}={shlex.quote(value)}" for name, value in env.items() if shell.get(name) != value]
    return " ".join([*assignments, shlex.join(argv)])


def read_tail(path: Path, max_bytes: int = _TAIL_BYTES) -> str:
    """The last ``max_bytes`` of ``path`` as text ("" when unreadable)."""
    try:
        with open(path, "rb") as f:
            f.seek(0, os.SEEK_END)
            size = f.tell()
            f.seek(max(0, size - max_bytes))
            data = f.read()
    except OSError:
        return ""
    return data.decode("utf-8", "replace")


def display_lines(text: str) -> list[str]:
    """Non-empty lines as a terminal shows them: for a tqdm-style line, the part after its last carriage return."""
    out = []
    for raw in text.split("\n"):
        line = raw.rstrip("\r").rsplit("\r", 1)[-1].rstrip()
        if line:
            out.append(line)
    return out


def tail_lines(path: Path, n: int = TAIL_LINES) -> str:
    """The last ``n`` displayed lines of the log at ``path``, joined by newlines."""
    return "\n".join(display_lines(read_tail(path))[-n:])
