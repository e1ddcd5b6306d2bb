"""Fault knobs of the reference server (``--ref-fault-*``): scripted failures a harness must survive.

Each function does one fault; ``__main__`` calls them at the matching point of startup. Request-time faults (stall,
die-after-requests) live where requests are counted: ``decoding.SpecEngine._stalled`` and ``app.exit_later``.
"""

from __future__ import annotations

import logging
import socket
import subprocess
import sys
import time

__all__ = ["hold_port", "oom_at_startup", "slow_start", "spawn_orphan"]

logger = logging.getLogger("pytest_specdec.refserver")

#: What a CUDA OOM during SGLang's memory-pool init looks like (text of torch's OutOfMemoryError).
OOM_TRACEBACK = """Traceback (most recent call last):
  File "/usr/local/lib/python3.11/site-packages/sglang/srt/managers/scheduler.py", line 3021, in \
run_scheduler_process
    scheduler = Scheduler(server_args, port_args, gpu_id, tp_rank, moe_ep_rank, pp_rank, dp_rank)
  File "/usr/local/lib/python3.11/site-packages/sglang/srt/model_executor/model_runner.py", line 1584, in \
init_memory_pool
    self.req_to_token_pool = ReqToTokenPool(size=max_num_reqs, max_context_len=self.model_config.context_len + 4)
torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB. GPU 0 has a total capacity of 79.10 GiB of \
which 1.21 GiB is free. Including non-PyTorch memory, this process has 77.88 GiB memory in use. Of the allocated \
memory 76.50 GiB is allocated by PyTorch, and 0.43 GiB is reserved by PyTorch but unallocated. [reference server \
fault: --ref-fault-oom-at-startup]
"""


def oom_at_startup(seconds: float) -> None:
    """Print an SGLang-style CUDA OOM traceback to stderr, wait ``seconds``, then exit with status 1 (never returns)."""
    logger.error(f"Scheduler hit an exception: {OOM_TRACEBACK}")
    sys.stderr.flush()
    time.sleep(seconds)
    sys.exit(1)


def slow_start(seconds: float) -> None:
    """Log SGLang's CUDA-graph capture progress line once a second for ``seconds`` (before the port is bound)."""
    start = time.monotonic()
    total = max(1, int(seconds))
    i = 0
    while time.monotonic() - start < seconds:
        pct = min(100, int(100 * i / total))
        logger.info(f"Capturing batches (bs=8 avail_mem={70.0 - 0.01 * i:.2f} GB): {pct:3d}%| {i}/{total}")
        i += 1
        time.sleep(min(1.0, max(0.0, seconds - (time.monotonic() - start))))


def spawn_orphan() -> subprocess.Popen:
    """Start a child (a grandchild of whoever launched us) that ignores SIGTERM and sleeps an hour.

    It stays in our process group, so killing the group ends it; SIGTERM to the server alone leaves it behind.
    """
    code = "import signal, time; signal.signal(signal.SIGTERM, signal.SIG_IGN); time.sleep(3600)"
    proc = subprocess.Popen([sys.executable, "-c", code])
    logger.info(f"ref fault: spawned orphan-prone child pid {proc.pid} (ignores SIGTERM)")
    return proc


def hold_port(port: int, host: str = "127.0.0.1") -> socket.socket:
    """Bind and listen on ``host:port`` for the process lifetime (like an engine's derived port).

    :raises OSError: when the port is taken (a traceback, exit 1, as SGLang's port check).
    """
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.bind((host, port))
    sock.listen(1)
    logger.info(f"ref fault: holding extra port {port}")
    return sock
