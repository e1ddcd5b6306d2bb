"""Request-time and process fault knobs (``--ref-fault-*``) behave as documented in ``--help``."""

from __future__ import annotations

import os
import re
import signal
import socket
import time
from pathlib import Path

import httpx
import psutil
import pytest

pytest.importorskip("torch", reason="the reference server needs the reference extra (torch)")
from refhelpers import asset_dir, free_port, running_server

pytestmark = pytest.mark.slow

GEN = {"sampling_params": {"max_new_tokens": 10, "temperature": 0, "ignore_eos": True}}


def test_stall_after_tokens_keeps_health_green(tmp_path: Path) -> None:
    asset_dir()
    with running_server(tmp_path / "server.log", ["--ref-fault-stall-after-tokens", "15"]) as srv:
        with srv.client(timeout=30) as c:
            first = c.post("/generate", json={"text": "def f(x):\n", **GEN})
            assert first.status_code == 200
            # 1.5 s: the first 10 tokens came back within a second even at load 8 on 2 cores; this one stalls at 5.
            with pytest.raises(httpx.ReadTimeout):
                c.post("/generate", json={"text": "def g(x):\n", **GEN}, timeout=1.5)
            assert c.get("/health").status_code == 200  # the engine still answers its own probes


def test_die_after_requests_orphan_and_held_port(tmp_path: Path) -> None:
    asset_dir()
    held = free_port()
    extra = ["--ref-fault-die-after-requests", "2", "--ref-fault-orphan", "--ref-fault-hold-port", str(held)]
    orphan_pid = None
    try:
        with running_server(tmp_path / "server.log", extra) as srv:
            m = re.search(r"spawned orphan-prone child pid (\d+) \(ignores SIGTERM\)", srv.log())
            assert m, srv.log()
            orphan_pid = int(m.group(1))
            with socket.create_connection(("127.0.0.1", held), timeout=5):
                pass  # something listens on the extra port
            with srv.client() as c:
                assert c.get("/health").status_code == 200  # not a measured request
                for _ in range(2):
                    assert c.post("/generate", json={"text": "x = 1\n", **GEN}).status_code == 200
            assert srv.proc.wait(timeout=30) == 1
            assert "--ref-fault-die-after-requests 2 reached; exiting with status 1" in srv.log()
        orphan = psutil.Process(orphan_pid)
        assert orphan.is_running() and orphan.status() != psutil.STATUS_ZOMBIE
        os.kill(orphan_pid, signal.SIGTERM)
        time.sleep(0.3)
        assert orphan.is_running()  # SIGTERM is ignored
    finally:
        if orphan_pid is not None and psutil.pid_exists(orphan_pid):
            os.kill(orphan_pid, signal.SIGKILL)
