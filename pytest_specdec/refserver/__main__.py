"""Entry point ``python -m pytest_specdec.refserver``: parse flags, load models, bind, warm up, serve (SGLang order).

Exit statuses: 0 after a clean shutdown (SIGTERM/SIGINT); 2 for unsupported flags or flag combinations; 1 for
startup failures (tracebacks, as SGLang: a bare AssertionError for a partial spec-flag set, a shape error during the
warmup for aux states that do not fit the draft's ``fc``).
"""

from __future__ import annotations

import logging
import os
import shlex
import sys
import threading
import time
import traceback
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from pytest_specdec.refserver.state import AppState

__all__ = ["main"]

logger = logging.getLogger("pytest_specdec.refserver")

WARMUP_PROMPT = "The capital city of France is"


def _configure_logging(level: str) -> None:
    # SGLang utils/common.py:configure_logger: "[%(asctime)s] %(message)s", datefmt "%Y-%m-%d %H:%M:%S".
    logging.basicConfig(format="[%(asctime)s] %(message)s", datefmt="%Y-%m-%d %H:%M:%S",
                        level=getattr(logging, level.upper()), stream=sys.stdout, force=True)
    logging.getLogger("httpx").setLevel(logging.WARNING)  # the warmup client's request lines


def _warmup(state: AppState, server: object, base_url: str, api_key: str | None) -> None:
    """SGLang ``http_server.py::_execute_server_warmup``: poll /model_info, then one /generate; exit 1 on failure."""
    import httpx

    from pytest_specdec.core.auth import bearer_headers

    headers = bearer_headers(api_key)
    try:
        while not getattr(server, "started", False):
            time.sleep(0.05)
        with httpx.Client(base_url=base_url, headers=headers, timeout=600) as client:
            for _ in range(120):
                try:
                    if client.get("/model_info").status_code == 200:
                        break
                except httpx.TransportError:
                    pass
                time.sleep(1)
            resp = client.post("/generate", json={
                "text": WARMUP_PROMPT, "sampling_params": {"max_new_tokens": 8, "temperature": 0},
                "log_metrics": False,
            })
            resp.raise_for_status()
    except Exception:
        logger.error(f"Initialization failed. warmup error: {traceback.format_exc()}")
        os._exit(1)
    if state.args.ref_fault_never_ready:
        logger.info("ref fault: --ref-fault-never-ready, /health stays 503")
        return
    state.status = "Up"
    logger.info("The server is fired up and ready to roll!")


def main(argv: list[str] | None = None) -> int:
    """Run the server until SIGTERM/SIGINT. See ``--help``; flag semantics in :mod:`pytest_specdec.refserver.args`."""
    from pytest_specdec.refserver import faults
    from pytest_specdec.refserver.args import ArgsError, parse_args, resolve_args

    argv = sys.argv[1:] if argv is None else argv
    ns = parse_args(argv)
    _configure_logging(ns.log_level)
    try:
        args = resolve_args(ns)
    except ArgsError as exc:
        print(f"python -m pytest_specdec.refserver: error: {exc}", file=sys.stderr)
        return 2
    logger.info(f"server_args={args.public_dict()}")
    keep: list[object] = []
    if args.nnodes > 1:
        from pytest_specdec.refserver import nodes

        if args.node_rank > 0:
            return nodes.run_follower(args)
        keep.append(nodes.wait_for_followers(args))
    if args.ref_fault_orphan:
        keep.append(faults.spawn_orphan())
    if args.ref_fault_hold_port is not None:
        keep.append(faults.hold_port(args.ref_fault_hold_port, args.host))
    if args.ref_fault_oom_at_startup is not None:
        faults.oom_at_startup(args.ref_fault_oom_at_startup)

    import torch
    import uvicorn

    from pytest_specdec.refserver.app import AppState, MetricsCollector, create_app, exit_later
    from pytest_specdec.refserver.decoding import SpecEngine, load_models

    if "OMP_NUM_THREADS" not in os.environ:
        # Batch-1 decoding of a 7M-parameter model gains nothing from a second thread, and two OpenMP threads
        # competing with the client for 2 cores made one target forward 3-8x slower (10 ms -> 34-85 ms, measured).
        torch.set_num_threads(1)
    logger.info(f"Load weight begin. torch threads: {torch.get_num_threads()}")
    models = load_models(args)
    logger.info("Load weight end.")
    if args.ref_fault_slow_start:
        faults.slow_start(args.ref_fault_slow_start)

    measured = [0]

    def on_measured_finish() -> None:
        measured[0] += 1
        n = args.ref_fault_die_after_requests
        if n is not None and measured[0] == n:
            exit_later(0.3, f"ref fault: --ref-fault-die-after-requests {n} reached; exiting with status 1")

    # The api key is never echoed back (/server_info is behind the key, but logs and reports copy it around).
    shown_argv = [("<redacted>" if args.api_key is not None and v == args.api_key else v) for v in argv]
    metrics = MetricsCollector(args, args.enable_metrics, on_measured_finish)
    engine = SpecEngine(models, args, metrics)
    state = AppState(args=args, models=models, engine=engine, metrics=metrics,
                     launch_command=shlex.join([sys.executable, "-m", "pytest_specdec.refserver", *shown_argv]))
    engine.start()
    app = create_app(state)
    config = uvicorn.Config(app, host=args.host, port=args.port, log_config=None, access_log=False,
                            log_level=args.log_level, timeout_graceful_shutdown=2)
    server = uvicorn.Server(config)
    if args.skip_server_warmup:
        state.status = "Up" if not args.ref_fault_never_ready else "Starting"
    else:
        base_url = f"http://{'127.0.0.1' if args.host in ('0.0.0.0', '') else args.host}:{args.port}"
        threading.Thread(target=_warmup, args=(state, server, base_url, args.api_key), daemon=True).start()
    server.run()
    return 0 if server.started else 1


if __name__ == "__main__":
    sys.exit(main())
