"""A scripted fake inference server for the lifecycle tests: http.server on --port, one flag per fault.

Run as a script (never imported by the tests). ``GET /health`` answers 200 once ready, 503 before.
Stamps (``time.monotonic()``, system-wide on Linux) go to --stamp-file so benchmarks can time detection delays.
"""

from __future__ import annotations

import argparse
import http.server
import os
import signal
import socket
import subprocess
import sys
import threading
import time

GRANDCHILD = """
import os, signal, sys, time
os.setsid()
signal.signal(signal.SIGTERM, signal.SIG_IGN)
with open(sys.argv[1], "w") as f:
    f.write(str(os.getpid()))
time.sleep(600)
"""

OOM = """Traceback (most recent call last):
  File "/sgl-workspace/sglang/python/sglang/srt/model_executor/cuda_graph_runner.py", line 391, in capture
    out = self.capture_one_batch_size(bs, forward)
torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB. GPU 0 has a total capacity of 79.10 GiB"""


def log(line: str) -> None:
    print(line, flush=True)


def stamp(path: str | None, what: str) -> None:
    if path:
        with open(path, "a") as f:
            f.write(f"{what} {time.monotonic()!r}\n")


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--model-path", default=None)
    parser.add_argument("--crash-at", type=float, default=None, help="exit before ready after S s")
    parser.add_argument("--crash-text", default=OOM)
    parser.add_argument("--crash-code", type=int, default=1)
    parser.add_argument("--slow-start", type=float, default=0.0, help="print a progress line every 0.2 s for S s")
    parser.add_argument("--silent-start", type=float, default=0.0, help="print nothing for S s")
    parser.add_argument("--never-ready", action="store_true", help="listen, answer 503 forever, print heartbeats")
    parser.add_argument("--die-after", type=float, default=None, help="exit 3 S s after ready")
    parser.add_argument("--orphan", default=None, help="start a setsid grandchild ignoring SIGTERM; pid -> file")
    parser.add_argument("--ignore-term", action="store_true")
    parser.add_argument("--term-delay", type=float, default=0.0, help="graceful shutdown takes S s")
    parser.add_argument("--bind-also", type=int, default=None, help="bind this port too (fails if held)")
    parser.add_argument("--print-env", action="store_true")
    parser.add_argument("--stamp-file", default=None)
    parser.add_argument("--count-file", default=None, help="append one line per start")
    parser.add_argument("--zombie-child", default=None, help="fork a child that exits at once, unreaped; pid -> file")
    parser.add_argument("--adopted-grandchild", default=None,
                        help="a grandchild whose parent exits at once (orphaned), sleeping 600 s; pid -> file")
    args = parser.parse_args()

    if args.count_file:
        with open(args.count_file, "a") as f:
            f.write(f"{os.getpid()}\n")
    log(f"fake server pid {os.getpid()} starting on port {args.port}")
    if args.print_env:
        log("ENV " + " ".join(sorted(os.environ)))
    if args.model_path is not None and not os.path.exists(args.model_path):
        log(f"FileNotFoundError: [Errno 2] No such file or directory: '{args.model_path}/config.json'")
        sys.exit(1)
    if args.orphan:
        subprocess.Popen([sys.executable, "-c", GRANDCHILD, args.orphan])
    if args.zombie_child:
        # As SGLang's engine children after it kills its own tree: exited, and the parent never waits for them.
        pid = os.fork()
        if pid == 0:
            os._exit(0)
        with open(args.zombie_child, "w") as f:
            f.write(str(pid))
    if args.adopted_grandchild:
        if os.fork() == 0:
            if os.fork() == 0:
                with open(args.adopted_grandchild, "w") as f:
                    f.write(str(os.getpid()))
                time.sleep(600)
            os._exit(0)
    ready = threading.Event()

    def on_term(signum: int, frame: object) -> None:
        if args.term_delay:
            time.sleep(args.term_delay)
        stamp(args.stamp_file, "term-done")
        os._exit(0)

    signal.signal(signal.SIGTERM, signal.SIG_IGN if args.ignore_term else on_term)
    if args.bind_also is not None:
        extra = socket.socket()
        extra.bind((args.host, args.bind_also))  # raises OSError: [Errno 98] Address already in use
    if args.crash_at is not None:
        time.sleep(args.crash_at)
        log(args.crash_text)
        stamp(args.stamp_file, "exit")
        os._exit(args.crash_code)
    time.sleep(args.silent_start)
    end = time.monotonic() + args.slow_start
    step = 0
    while time.monotonic() < end:
        log(f"Capturing batches (bs={step})")
        step += 1
        time.sleep(0.2)

    class Handler(http.server.BaseHTTPRequestHandler):
        def do_GET(self) -> None:  # noqa: N802
            code = 200 if ready.is_set() else 503
            self.send_response(code)
            self.send_header("Content-Length", "2")
            self.end_headers()
            self.wfile.write(b"ok")

        def log_message(self, format: str, *a: object) -> None:  # noqa: A002
            pass

    server = http.server.ThreadingHTTPServer((args.host, args.port), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    if args.never_ready:
        while True:
            log("still loading")
            time.sleep(0.2)
    ready.set()
    stamp(args.stamp_file, "ready")
    log("The server is fired up and ready to roll!")
    if args.die_after is not None:
        time.sleep(args.die_after)
        log("RuntimeError: scheduler died")
        os._exit(3)
    while True:
        time.sleep(1)


if __name__ == "__main__":
    main()
