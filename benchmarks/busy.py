"""Busy processes beside a benchmark: the other jobs of a loaded CI runner (bench_false_alarms, bench_sequential)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys

#: What each busy process runs: a CPU-bound loop, forever.
BUSY = "import time\nwhile True:\n    sum(i * i for i in range(10000))\n"


class Load:
    """``procs`` busy processes in their own process groups, stopped by :meth:`off`."""

    def __init__(self, procs: int) -> None:
        self.procs = procs
        self.children: list[subprocess.Popen[bytes]] = []

    def on(self) -> None:
        self.children = [subprocess.Popen([sys.executable, "-c", BUSY], start_new_session=True)
                         for _ in range(self.procs)]  # fmt: skip

    def off(self) -> None:
        for child in self.children:
            os.killpg(child.pid, signal.SIGKILL)
            child.wait()
        self.children = []
