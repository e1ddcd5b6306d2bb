"""Acceptance figures of the reference server (a script, not a test): accept length per aux-id wiring, speedup,
losslessness, startup time and RSS. Prints one table.

Usage: ``OMP_NUM_THREADS=1 python benchmarks/bench_refserver.py [--runs 5] [--max-new-tokens 64]``

- Accept length (AL) = Σcompletion_tokens / Σspec_verify_ct over the built-in prompts (SGLang meta_info formula,
  counts the prefill token), and the server's ``avg_spec_accept_length`` after ``/flush_cache`` (accepted tokens per
  verify, bonus included; ``--decode-log-interval 1`` so every iteration is folded). Greedy, topk 1, 3 steps.
- Wrong wirings use an overlay draft dir: config.json rewritten with other ids, model.safetensors symlinked.
- Speed: output tok/s = Σcompletion_tokens / Σ per-request wall time (concurrency 1, prefill included); plain and
  spec requests alternate prompt by prompt; median over ``--runs`` passes, and the sum of per-prompt fastest times.
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import httpx
import psutil

ROOT = Path(__file__).resolve().parents[1]
ASSETS = ROOT / "pytest_specdec" / "refserver" / "assets"
PROMPTS = ROOT / "pytest_specdec" / "refserver" / "prompts.jsonl"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Server:
    """One reference server subprocess; records seconds from launch to the first /health 200."""

    def __init__(self, assets: Path, extra: list[str], log: Path) -> None:
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        cmd = [sys.executable, "-m", "pytest_specdec.refserver", "--model-path", str(assets / "target"),
               "--port", str(self.port), "--random-seed", "0", "--decode-log-interval", "1", *extra]
        env = {**os.environ, "OMP_NUM_THREADS": os.environ.get("OMP_NUM_THREADS", "1")}
        t0 = time.perf_counter()
        self.log = log
        with open(log, "wb") as fh:
            self.proc = subprocess.Popen(cmd, stdout=fh, stderr=subprocess.STDOUT, env=env, cwd=ROOT)
        while True:
            if self.proc.poll() is not None:
                raise RuntimeError(f"server exited {self.proc.returncode}:\n{log.read_text()[-2000:]}")
            try:
                if httpx.get(self.url + "/health", timeout=5).status_code == 200:
                    break
            except httpx.TransportError:
                pass
            time.sleep(0.05)
        self.startup_s = time.perf_counter() - t0
        self.client = httpx.Client(base_url=self.url, timeout=300)

    def rss_bytes(self) -> int:
        proc = psutil.Process(self.proc.pid)
        return proc.memory_info().rss + sum(c.memory_info().rss for c in proc.children(recursive=True))

    def run_prompts(self, prompts: list[str], max_new: int) -> tuple[list[dict], float]:
        t0 = time.perf_counter()
        outs = []
        for p in prompts:
            r = self.client.post("/generate", json={"text": p, "sampling_params": {
                "max_new_tokens": max_new, "temperature": 0, "ignore_eos": True}})
            r.raise_for_status()
            outs.append(r.json())
        return outs, time.perf_counter() - t0

    def stop(self) -> None:
        self.client.close()
        self.proc.terminate()
        try:
            self.proc.wait(timeout=15)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()


def overlay(src: Path, dst: Path, ids: list[int]) -> Path:
    dst.mkdir(parents=True, exist_ok=True)
    cfg = json.loads((src / "config.json").read_text())
    cfg["eagle_config"]["eagle_aux_hidden_state_layer_ids"] = ids
    (dst / "config.json").write_text(json.dumps(cfg, indent=2))
    (dst / "model.safetensors").symlink_to((src / "model.safetensors").resolve())
    return dst


def spec_flags(draft: Path, algorithm: str = "EAGLE3") -> list[str]:
    return ["--speculative-algorithm", algorithm, "--speculative-draft-model-path", str(draft),
            "--speculative-num-steps", "3", "--speculative-eagle-topk", "1", "--speculative-num-draft-tokens", "4"]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", type=int, default=5)
    ap.add_argument("--max-new-tokens", type=int, default=64)
    ap.add_argument("--assets", type=Path, default=ASSETS if (ASSETS / "target").exists() else Path("/tmp/smoke"))
    a = ap.parse_args()
    prompts = [json.loads(line)["prompt"] for line in PROMPTS.read_text().splitlines() if line.strip()]
    draft = a.assets / "draft-eagle3"
    tmp = Path(tempfile.mkdtemp(prefix="bench_refserver_"))
    rows: list[tuple[str, str, str, str]] = []
    print(f"assets: {a.assets}  prompts: {len(prompts)}  max_new_tokens: {a.max_new_tokens}  "
          f"OMP_NUM_THREADS={os.environ.get('OMP_NUM_THREADS', '1')}", flush=True)

    plain = Server(a.assets, [], tmp / "plain.log")
    reference, _ = plain.run_prompts(prompts, a.max_new_tokens)
    ref_ids = [o["output_ids"] for o in reference]

    configs = [
        ("EAGLE3 ids [1,3,5] (trained)", spec_flags(draft)),
        # "patched": serve id -1 as the incident's patched SGLang did (stock SGLang crashes: --ref-embedding-capture).
        ("EAGLE3 ids [-1,1,3] (patched)",
         [*spec_flags(overlay(draft, tmp / "m1", [-1, 1, 3])), "--ref-embedding-capture", "patched"]),
        ("EAGLE3 ids [0,1,2]", spec_flags(overlay(draft, tmp / "012", [0, 1, 2]))),
        ("EAGLE3 ids [2,4,6] (shift +1)", spec_flags(overlay(draft, tmp / "246", [2, 4, 6]))),
        ("EAGLE on the EAGLE-3 draft", spec_flags(draft, "EAGLE")),
    ]
    base_al = None
    spec_main: Server | None = None
    for name, flags in configs:
        srv = Server(a.assets, flags, tmp / f"{len(rows)}.log")
        srv.client.post("/flush_cache").raise_for_status()
        outs, _ = srv.run_prompts(prompts, a.max_new_tokens)
        comp = sum(o["meta_info"]["completion_tokens"] for o in outs)
        ver = sum(o["meta_info"]["spec_verify_ct"] for o in outs)
        al = comp / ver
        time.sleep(0.2)
        life = srv.client.get("/server_info").json()["internal_states"][0].get("avg_spec_accept_length", 0.0)
        lossless = sum(o["output_ids"] == r for o, r in zip(outs, ref_ids, strict=True))
        base_al = al if base_al is None else base_al
        drop = "" if al == base_al else f" ({100 * (al - base_al) / base_al:+.1f}%)"
        rows.append((name, f"{al:.3f}{drop}", f"{life:.3f}", f"{lossless}/{len(prompts)}"))
        print(f"  {name}: AL {al:.3f}{drop}, server avg_spec_accept_length {life:.3f}, lossless {lossless}/"
              f"{len(prompts)}", flush=True)
        if spec_main is None:
            spec_main = srv
        else:
            srv.stop()
    assert spec_main is not None

    # Alternate plain and spec per prompt (order flipped every run) so load changes hit both arms alike.
    plain_t = [[0.0] * len(prompts) for _ in range(a.runs)]
    spec_t = [[0.0] * len(prompts) for _ in range(a.runs)]
    tokens = [0] * len(prompts)
    for i in range(a.runs):
        for j, prompt in enumerate(prompts):
            order = ((plain, plain_t), (spec_main, spec_t))
            for srv, times in order if (i + j) % 2 == 0 else order[::-1]:
                outs, dt = srv.run_prompts([prompt], a.max_new_tokens)
                times[i][j] = dt
                tokens[j] = outs[0]["meta_info"]["completion_tokens"]
        print(f"  run {i + 1}: plain {sum(tokens) / sum(plain_t[i]):.1f} tok/s, spec "
              f"{sum(tokens) / sum(spec_t[i]):.1f} tok/s, ratio {sum(plain_t[i]) / sum(spec_t[i]):.3f}", flush=True)
    plain_tps = [sum(tokens) / sum(run) for run in plain_t]
    spec_tps = [sum(tokens) / sum(run) for run in spec_t]
    best_plain = sum(min(run[j] for run in plain_t) for j in range(len(prompts)))
    best_spec = sum(min(run[j] for run in spec_t) for j in range(len(prompts)))
    rss_spec, rss_plain = spec_main.rss_bytes(), plain.rss_bytes()
    startup = (plain.startup_s, spec_main.startup_s)
    spec_main.stop()
    plain.stop()

    p_med, s_med = statistics.median(plain_tps), statistics.median(spec_tps)
    print()
    print(f"{'configuration':<34} {'AL (meta)':>16} {'AL (server)':>12} {'lossless':>9}")
    print("-" * 74)
    for r in rows:
        print(f"{r[0]:<34} {r[1]:>16} {r[2]:>12} {r[3]:>9}")
    print("-" * 74)
    print(f"output tok/s, concurrency 1, median of {a.runs} interleaved runs: plain {p_med:.1f}, "
          f"EAGLE3 {s_med:.1f}, speedup {s_med / p_med:.3f}x (per-run "
          f"{', '.join(f'{s / p:.2f}' for s, p in zip(spec_tps, plain_tps, strict=True))})")
    print(f"fastest of {a.runs} per prompt: plain {sum(tokens) / best_plain:.1f} tok/s, EAGLE3 "
          f"{sum(tokens) / best_spec:.1f} tok/s, speedup {best_plain / best_spec:.3f}x")
    print(f"load average during the run: {os.getloadavg()[0]:.2f} (2 cores)")
    print(f"startup to /health 200: plain {startup[0]:.1f} s, EAGLE3 {startup[1]:.1f} s")
    print(f"RSS: plain {rss_plain / 2**20:.0f} MiB, EAGLE3 {rss_spec / 2**20:.0f} MiB")
    return 0


if __name__ == "__main__":
    sys.exit(main())
