"""``benchmarks/bench_vs_serving.py`` with a pause after each ``POST /flush_cache``, as bench_serving has one.

SGLang 0.5.17's bench_serving sleeps 1 s after its warmup and flush, before the measured requests
(``sglang/benchmark/serving.py:1451``, ``time.sleep(1.0)`` right after ``flush_server_cache``); the plugin's client
starts at once. For a parity run (issue 38) both arms must start alike: this wraps the script unchanged and sleeps
``FLUSH_PAUSE_S`` (default 1) after every ``/flush_cache`` it posts. Same arguments as bench_vs_serving.py::

    FLUSH_PAUSE_S=1 python benchmarks/gpu/pause_after_flush.py --base-url ... --flush-cache ...
"""

from __future__ import annotations

import os
import runpy
import sys
import time
from pathlib import Path

import httpx

_post = httpx.post
PAUSE_S = float(os.environ.get("FLUSH_PAUSE_S", "1"))


def _post_then_pause(url, *args, **kwargs):  # type: ignore[no-untyped-def]
    response = _post(url, *args, **kwargs)
    if str(url).rstrip("/").endswith("/flush_cache"):
        time.sleep(PAUSE_S)
    return response


httpx.post = _post_then_pause  # type: ignore[assignment]
SCRIPT = Path(__file__).resolve().parents[1] / "bench_vs_serving.py"
sys.argv[0] = str(SCRIPT)
runpy.run_path(str(SCRIPT), run_name="__main__")
