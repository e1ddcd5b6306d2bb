"""Stand-in for SGLang's multi-node launch on one machine (``--nnodes N --node-rank R --dist-init-addr HOST:PORT``).

Every rank first logs SGLang's ``Init torch distributed begin.`` (``model_runner.py::init_torch_distributed``).
Rank 0 (the leader) listens on the dist-init address until every other rank has registered (torch.distributed's
rendezvous, which SGLang's ranks join before loading weights), tells them to go, then loads the model and serves HTTP
as usual. A non-leader rank registers, waits for the go, logs SGLang's line ``Starting dummy health check server at
HOST:PORT`` and answers ``/health`` and ``/health_generate`` with 200 on its own host and port, as SGLang's non-zero
ranks do (``entrypoints/engine.py::_launch_subprocesses`` -> ``utils/common.py::launch_dummy_health_check_server``).
When a peer's connection drops, the other side logs it and exits 1, as a lost rank ends SGLang with an NCCL error.

Wire protocol (TCP, one line each way): the rank sends ``"<rank>\\n"``; rank 0 answers ``"go\\n"`` once all joined.
"""

from __future__ import annotations

import http.server
import logging
import os
import socket
import sys
import threading
import time
from typing import Any

from pytest_specdec.refserver.args import ServerArgs

__all__ = ["JOINED_LINE", "run_follower", "wait_for_followers"]

logger = logging.getLogger("pytest_specdec.refserver")

#: What a non-leader rank logs once it joined (SGLang ``utils/common.py::launch_dummy_health_check_server``).
JOINED_LINE = "Starting dummy health check server at {host}:{port}"
_RETRY_S = 0.2


def _address(args: ServerArgs) -> tuple[str, int]:
    assert args.dist_init_addr is not None  # args.py::_check_nodes
    host, _, port = args.dist_init_addr.rpartition(":")
    return host.strip("[]"), int(port)


def _exit_when_closed(conn: socket.socket, what: str) -> None:
    """Block until the peer closes ``conn`` (recv returns b""), then log ``what`` and end the process with 1."""
    try:
        while conn.recv(64):
            pass
    except OSError:
        pass
    logger.error(f"{what}; exiting with status 1 (a lost rank ends SGLang with an NCCL error)")
    logging.shutdown()
    os._exit(1)


def wait_for_followers(args: ServerArgs) -> list[socket.socket]:
    """Rank 0: accept ``nnodes - 1`` registrations on ``--dist-init-addr``, log each, send every rank ``go``, and
    watch the connections (a closed one ends this process with exit status 1).

    Waits without limit, as a rendezvous does; the harness's startup budget decides when to give up.

    :returns: the open connections (keep them referenced for the process lifetime).
    :raises OSError: the address cannot be bound (a traceback, exit 1).
    """
    host, port = _address(args)
    server = socket.create_server((host, port), reuse_port=False)
    logger.info(f"Init torch distributed begin. waiting for {args.nnodes - 1} node(s) at {host}:{port}")
    conns: dict[int, socket.socket] = {}
    while len(conns) < args.nnodes - 1:
        conn, peer = server.accept()
        line = conn.makefile("r").readline().strip()
        if not line.isdigit() or not 1 <= int(line) < args.nnodes or int(line) in conns:
            logger.warning(f"ignored a registration {line!r} from {peer[0]}")
            conn.close()
            continue
        conns[int(line)] = conn
        logger.info(f"node rank {line} joined from {peer[0]} ({len(conns)}/{args.nnodes - 1})")
    server.close()
    for rank, conn in sorted(conns.items()):
        conn.sendall(b"go\n")
        threading.Thread(target=_exit_when_closed, args=(conn, f"lost node rank {rank}"), daemon=True).start()
    logger.info(f"Init torch distributed ends. nnodes={args.nnodes}")
    return list(conns.values())


class _Health(http.server.BaseHTTPRequestHandler):
    def do_GET(self) -> None:  # noqa: N802 - http.server's naming
        code = 200 if self.path.split("?")[0] in ("/health", "/health_generate", "/ping") else 404
        self.send_response(code)
        self.send_header("Content-Length", "0")
        self.end_headers()

    def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 - signature of the base class
        pass


def run_follower(args: ServerArgs) -> int:
    """Rank >= 1: register with rank 0 (retrying every 0.2 s until it listens), wait for ``go``, log
    :data:`JOINED_LINE`, then serve the dummy health endpoints until SIGTERM, or exit 1 if rank 0 goes away.

    Faults: ``--ref-fault-node-never-join R`` makes rank R idle without registering; ``--ref-fault-node-exit
    R:S`` makes rank R exit 1 S seconds after it joined.
    """
    rank = args.node_rank
    if args.ref_fault_node_never_join == rank:
        logger.info(f"ref fault: --ref-fault-node-never-join {rank}: this rank never registers with rank 0")
        while True:
            time.sleep(3600)
    host, port = _address(args)
    logger.info(f"Init torch distributed begin. node rank {rank}/{args.nnodes}: registering with rank 0 at "
                f"{host}:{port}")  # fmt: skip
    while True:
        try:
            conn = socket.create_connection((host, port), timeout=5.0)
            break
        except OSError:
            time.sleep(_RETRY_S)
    conn.settimeout(None)
    conn.sendall(f"{rank}\n".encode())
    if conn.makefile("r").readline().strip() != "go":
        logger.error(f"node rank {rank}: rank 0 closed the rendezvous; exiting with status 1")
        return 1
    httpd = http.server.ThreadingHTTPServer((args.host, args.port), _Health)
    threading.Thread(target=_exit_when_closed, args=(conn, "lost rank 0"), daemon=True).start()
    if args.ref_fault_node_exit is not None:
        fault_rank, _, seconds = args.ref_fault_node_exit.partition(":")
        if int(fault_rank) == rank:
            threading.Thread(target=_exit_later, args=(float(seconds), rank), daemon=True).start()
    logger.info(JOINED_LINE.format(host=args.host, port=args.port))
    sys.stdout.flush()
    httpd.serve_forever()
    return 0


def _exit_later(seconds: float, rank: int) -> None:
    time.sleep(seconds)
    logger.error(f"ref fault: --ref-fault-node-exit {rank}:{seconds:g}: node rank {rank} exits with status 1")
    logging.shutdown()
    os._exit(1)
