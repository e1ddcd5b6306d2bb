"""Record what a real SGLang server says, as test data for CI (which has no GPU).

Run on a GPU machine with SGLang installed (the lent H200: ``../shared/gpu-sglang``, ``source sgenv.sh``)::

    python benchmarks/gpu/capture_sglang.py --python /tmp/sgvenv/bin/python --out /tmp/capture

For each configuration (EAGLE-3 with the trained aux layer ids, no speculation, aux ids with -1, EAGLE instead of
EAGLE3, an unknown flag) it launches ``python -m sglang.launch_server`` on the bundled tiny target and EAGLE-3 draft,
waits for /health (or for the process to die), records the control-plane endpoints, a non-streamed and a streamed
/generate, streamed /v1/completions and /v1/chat/completions (raw SSE bytes as received), a short batch that makes
the server log its "Decode batch" lines, /metrics before and after, then stops the server and records what is left
in the process table. Every file starts with (or, for JSON, holds under "_captured") the SGLang version and flags.
Standard library only: the GPU image may lack the project's dependencies.
"""

from __future__ import annotations

import argparse
import concurrent.futures
import json
import os
import shutil
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
ASSETS = REPO / "pytest_specdec" / "refserver" / "assets"
PROMPTS = REPO / "pytest_specdec" / "refserver" / "prompts.jsonl"
#: The flags that avoid native pieces the lent machine lacks (../shared/gpu-sglang/README.md).
COMMON = [
    "--attention-backend", "triton", "--sampling-backend", "pytorch", "--grammar-backend", "none",
    "--disable-cuda-graph", "--skip-server-warmup", "--disable-radix-cache", "--disable-flashinfer-autotune",
    "--mm-feature-transport", "cpu", "--dtype", "bfloat16", "--mem-fraction-static", "0.3",
    "--enable-metrics", "--decode-log-interval", "10", "--speculative-draft-attention-backend", "triton",
]
SPEC = ["--speculative-num-steps", "3",
        "--speculative-eagle-topk", "1", "--speculative-num-draft-tokens", "4"]


def http(port: int, path: str, body: dict | None = None, timeout: float = 60.0) -> tuple[int, bytes]:
    req = urllib.request.Request(
        f"http://127.0.0.1:{port}{path}",
        data=None if body is None else json.dumps(body).encode(),
        headers={"Content-Type": "application/json"},
        method="GET" if body is None else "POST",
    )
    try:
        with urllib.request.urlopen(req, timeout=timeout) as r:
            return r.status, r.read()
    except urllib.error.HTTPError as e:
        return e.code, e.read()
    except Exception as e:  # connection refused / reset: the server died under us
        return -1, repr(e).encode()


def stream(port: int, path: str, body: dict, timeout: float = 120.0) -> tuple[int, bytes, list[float]]:
    """Raw SSE bytes and the arrival time (s after the request) of each chunk read."""
    req = urllib.request.Request(f"http://127.0.0.1:{port}{path}", data=json.dumps(body).encode(),
                                 headers={"Content-Type": "application/json"}, method="POST")
    t0 = time.perf_counter()
    chunks: list[bytes] = []
    times: list[float] = []
    try:
        with urllib.request.urlopen(req, timeout=timeout) as r:
            while True:
                line = r.readline()
                if not line:
                    break
                chunks.append(line)
                times.append(round(time.perf_counter() - t0, 6))
            return r.status, b"".join(chunks), times
    except urllib.error.HTTPError as e:
        return e.code, e.read(), []
    except Exception as e:
        return -1, repr(e).encode(), []


def process_table() -> str:
    return subprocess.run(["ps", "-eo", "pid,ppid,stat,etime,args"], capture_output=True, text=True).stdout


def gpu_memory() -> str:
    if shutil.which("nvidia-smi") is None:
        return "nvidia-smi not found"
    return subprocess.run(["nvidia-smi", "--query-gpu=memory.used,memory.total", "--format=csv,noheader"],
                          capture_output=True, text=True).stdout.strip()


def draft_with_ids(tmp: Path, ids: list[int]) -> Path:
    out = tmp / ("draft-aux" + "_".join(map(str, ids)))
    out.mkdir(parents=True, exist_ok=True)
    cfg = json.loads((ASSETS / "draft-eagle3" / "config.json").read_text())
    cfg["eagle_config"]["eagle_aux_hidden_state_layer_ids"] = ids
    (out / "config.json").write_text(json.dumps(cfg, indent=2))
    weights = out / "model.safetensors"
    if not weights.exists():
        weights.symlink_to(ASSETS / "draft-eagle3" / "model.safetensors")
    return out


def run_config(name: str, argv: list[str], out: Path, header: str, port: int, prompts: list[str],
               full: bool) -> dict:
    log_path = out / f"{name}.log"
    summary: dict = {"name": name, "argv": argv}
    with open(log_path, "wb") as log:
        log.write(f"# {header}\n# argv: {' '.join(argv)}\n".encode())
        log.flush()
        t0 = time.perf_counter()
        proc = subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT, start_new_session=True,
                                env=dict(os.environ, PYTHONUNBUFFERED="1"))
        ready = False
        while time.perf_counter() - t0 < 400:
            if proc.poll() is not None:
                break
            if http(port, "/health", timeout=3)[0] == 200:
                ready = True
                break
            time.sleep(1)
        summary["ready"] = ready
        summary["ready_s"] = round(time.perf_counter() - t0, 1)
        summary["exit_before_ready"] = proc.returncode
        endpoints: dict = {}
        if ready:
            for path in ("/health", "/health_generate", "/get_server_info", "/server_info", "/get_model_info",
                         "/model_info", "/v1/models", "/metrics"):
                status, body = http(port, path)
                endpoints[path] = {"status": status, "body": body.decode(errors="replace")}
            sampling = {"max_new_tokens": 64, "temperature": 0.0, "ignore_eos": True}
            gen = {"text": prompts[0], "sampling_params": sampling}
            status, body = http(port, "/generate", gen, timeout=120)
            endpoints["POST /generate"] = {"status": status, "body": body.decode(errors="replace")}
            if status == 200 and full:
                s, raw, times = stream(port, "/generate", dict(gen, stream=True))
                (out / f"{name}.generate.sse").write_bytes(raw)
                (out / f"{name}.generate.times.json").write_text(json.dumps(times))
                comp = {"model": "default", "prompt": prompts[1], "max_tokens": 32, "temperature": 0.0,
                        "ignore_eos": True, "stream": True, "stream_options": {"include_usage": True}}
                s, raw, _ = stream(port, "/v1/completions", comp)
                (out / f"{name}.completions.sse").write_bytes(raw)
                chat = {"model": "default", "messages": [{"role": "user", "content": prompts[2]}], "max_tokens": 32,
                        "temperature": 0.0, "ignore_eos": True, "stream": True,
                        "stream_options": {"include_usage": True}}
                s, raw, _ = stream(port, "/v1/chat/completions", chat)
                (out / f"{name}.chat.sse").write_bytes(raw)

                def one(p: str) -> dict:
                    s, b = http(port, "/generate", dict(gen, text=p), timeout=120)
                    return json.loads(b) if s == 200 else {"status": s, "body": b.decode(errors="replace")}

                with concurrent.futures.ThreadPoolExecutor(4) as pool:
                    batch = list(pool.map(one, prompts[:16]))
                (out / f"{name}.batch.json").write_text(json.dumps(
                    {"_captured": header, "requests": batch}, indent=1))
                for path in ("/get_server_info", "/server_info", "/metrics"):
                    status, body = http(port, path)
                    endpoints[path + " (after batch)"] = {"status": status, "body": body.decode(errors="replace")}
                status, body = http(port, "/flush_cache", {})
                endpoints["POST /flush_cache"] = {"status": status, "body": body.decode(errors="replace")}
            time.sleep(2)  # let a crash reach the log
        (out / f"{name}.endpoints.json").write_text(json.dumps({"_captured": header, **endpoints}, indent=1))
        summary["alive_before_stop"] = proc.poll() is None
        summary["gpu_memory_before_stop"] = gpu_memory()
        t1 = time.perf_counter()
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGTERM)
            try:
                proc.wait(30)
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait(10)
        summary["returncode"] = proc.returncode
        summary["stop_s"] = round(time.perf_counter() - t1, 2)
        time.sleep(2)
        summary["gpu_memory_after_stop"] = gpu_memory()
        (out / f"{name}.ps.txt").write_text(process_table())
    return summary


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--python", default=sys.executable)
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--port", type=int, default=31000)
    ap.add_argument("--only", default="", help="comma-separated config names")
    ap.add_argument("--server-flags", default=None,
                    help="replace the GPU flags (e.g. '--enable-metrics' to dry-run on the reference server)")
    args = ap.parse_args()
    common = COMMON if args.server_flags is None else args.server_flags.split()
    args.out.mkdir(parents=True, exist_ok=True)
    version = subprocess.run([args.python, "-c", "import importlib.metadata as m; print(m.version('sglang'))"],
                             capture_output=True, text=True).stdout.strip()
    prompts = [json.loads(line)["prompt"] for line in PROMPTS.read_text().splitlines() if line.strip()]
    head = [args.python, "-m", "sglang.launch_server", "--model-path", str(ASSETS / "target"),
            "--host", "127.0.0.1", "--port", str(args.port)]
    head_c = head + common
    draft = str(ASSETS / "draft-eagle3")
    tmp = args.out / "drafts"
    configs = {
        "eagle3": (head_c + ["--speculative-algorithm", "EAGLE3", "--speculative-draft-model-path", draft]
                   + SPEC, True),
        "baseline": (head_c, True),
        "eagle3-aux-minus1": (head_c + ["--speculative-algorithm", "EAGLE3", "--speculative-draft-model-path",
                                               str(draft_with_ids(tmp, [-1, 1, 3]))] + SPEC, False),
        "eagle-algo-on-eagle3-draft": (head_c + ["--speculative-algorithm", "EAGLE",
                                                        "--speculative-draft-model-path", draft] + SPEC, True),
        "bad-flag": (head_c + ["--speculative-algorithm", "EAGLE3", "--speculative-draft-model-path", draft,
                                      "--speculative-aux-layer-ids", "1,3,5"], False),
    }
    only = [n for n in args.only.split(",") if n]
    results = []
    for name, (argv, full) in configs.items():
        if only and name not in only:
            continue
        header = (f"captured {time.strftime('%Y-%m-%d')} on {gpu_memory()} GPU memory, sglang {version}, "
                  f"by benchmarks/gpu/capture_sglang.py; config {name}")
        print(f"== {name}", flush=True)
        summary = run_config(name, argv, args.out, header, args.port, prompts, full)
        print(json.dumps(summary)[:600], flush=True)
        results.append(summary)
    (args.out / "summary.json").write_text(json.dumps({"sglang": version, "runs": results}, indent=1))
    shutil.rmtree(tmp, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
