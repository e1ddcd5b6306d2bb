"""How fast and how truthfully the plugin's client reads SSE streams (a script, not a test). Prints two tables.

1. Floor: ``benchmarks/sse_server.py`` emitting flat out (SGLang ``/generate`` events, cumulative text, 256 tokens
   per request); events/s of the plugin's client (``client.run_phase``) against a bare aiohttp line reader
   (``async for line in resp.content``, no parsing: the floor) and a ``bench_serving``-style reader (aiohttp lines,
   ``json.loads`` per event as SGLang's ``async_request_sglang_generate`` does), at concurrency 1 and 64. Goal: ours
   >= 0.8x the bare reader.
2. Truth: the server paced (first event ``--ttft-ms`` after the request, then one per ``--itl-ms`` per stream) with
   ``--record``, so each event's send instant (``perf_counter``, one system-wide monotonic clock) is known. Per
   reader and concurrency (1, 64, 256, 1024): events/s, ITL p50/p99 and TTFT p50 measured and true (from the send
   instants), and the client's delay (arrival - send) p50/p99. Goal: ITL p50 within 2% of the truth and TTFT p50
   within 1 ms up to 20,000 events/s.

Usage: ``python benchmarks/bench_client.py [--concurrency 1,64,256,1024] [--output-len 64] [--itl-ms 5]
[--ttft-ms 20] [--plugin-workers 2,4] [--skip-floor] [--skip-truth]``. The server runs in its own process; on a
shared machine the figures move with the load, so compare the readers within one run (they alternate per
concurrency).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import socket
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import aiohttp
import httpx
import numpy as np

from pytest_specdec.measure import client
from pytest_specdec.measure.workload import RequestSpec

SERVER = Path(__file__).resolve().parent / "sse_server.py"


@dataclass
class Stream:
    """One request as a reader saw it: send instant, arrival per token event (1 token per event here)."""

    prompt: str
    start_s: float
    arrivals: list[float]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def start_server(*extra: str) -> tuple[subprocess.Popen[str], str]:
    port = free_port()
    proc = subprocess.Popen(
        [sys.executable, str(SERVER), "--port", str(port), *extra], stdout=subprocess.PIPE, text=True
    )
    assert proc.stdout is not None
    proc.stdout.readline()
    return proc, f"http://127.0.0.1:{port}"


def body(prompt: str, n: int) -> dict[str, object]:
    return {
        "text": prompt,
        "sampling_params": {"max_new_tokens": n, "temperature": 0.0, "ignore_eos": True},
        "stream": True,
    }


async def _aiohttp_reader(url: str, prompts: list[str], n: int, conc: int, parse: bool) -> list[Stream]:
    """bench_serving's shape: one session, a semaphore, ``async for line in response.content``."""
    sem = asyncio.Semaphore(conc)
    out: list[Stream] = []
    async with aiohttp.ClientSession(
        connector=aiohttp.TCPConnector(limit=conc), timeout=aiohttp.ClientTimeout(total=None)
    ) as session:

        async def one(prompt: str) -> None:
            async with sem:
                arrivals: list[float] = []
                start = time.perf_counter()
                async with session.post(url + "/generate", json=body(prompt, n)) as resp:
                    async for line in resp.content:
                        line = line.strip()
                        if not line.startswith(b"data:"):
                            continue
                        now = time.perf_counter()
                        payload = line[5:].strip()
                        if payload == b"[DONE]":
                            continue
                        if parse:
                            data = json.loads(payload)
                            if data.get("text"):
                                arrivals.append(now)
                        else:
                            arrivals.append(now)
                out.append(Stream(prompt, start, arrivals))

        await asyncio.gather(*(one(p) for p in prompts))
    return out


def aiohttp_bare(url: str, prompts: list[str], n: int, conc: int) -> list[Stream]:
    return asyncio.run(_aiohttp_reader(url, prompts, n, conc, parse=False))


def aiohttp_bench_serving(url: str, prompts: list[str], n: int, conc: int) -> list[Stream]:
    return asyncio.run(_aiohttp_reader(url, prompts, n, conc, parse=True))


def plugin(url: str, prompts: list[str], n: int, conc: int, workers: int = 1) -> list[Stream]:
    specs = [RequestSpec(prompt=p, max_new_tokens=n, temperature=0.0, ignore_eos=True) for p in prompts]
    phase = client.run_phase(url, specs, client.PhaseOptions(concurrency=conc), workers=workers)
    bad = [r.error for r in phase.records if not r.ok]
    if bad:
        raise SystemExit(f"plugin client: {len(bad)} failed requests, first: {bad[0]}")
    return [Stream(p, r.start_s, list(r.chunk_times_s)) for p, r in zip(prompts, phase.records, strict=True)]


READERS: dict[str, Callable[[str, list[str], int, int], list[Stream]]] = {
    "plugin": plugin,
    "aiohttp bare": aiohttp_bare,
    "bench_serving-like": aiohttp_bench_serving,
}


def timed(fn: Callable[[], list[Stream]]) -> tuple[list[Stream], float]:
    """The streams and this process's CPU seconds spent getting them (the client's cost; the server is apart)."""
    cpu0 = time.process_time()
    streams = fn()
    return streams, time.process_time() - cpu0


def floor_table(args: argparse.Namespace) -> None:
    proc, url = start_server()
    try:
        print(f"\nFloor: flat-out server, {args.floor_tokens} tokens per request (events/s, higher is better)\n")
        print("| concurrency | reader | events/s | vs bare | client CPU µs/event | vs bare |")
        print("|---|---|---|---|---|---|")
        for conc, nreq in ((1, 40), (64, 256)):
            for rep in range(args.floor_repeats):
                rates: dict[str, float] = {}
                costs: dict[str, float] = {}
                for name in ("aiohttp bare", "plugin", "bench_serving-like"):
                    prompts = [f"f{rep}-{i}" for i in range(nreq)]
                    streams, cpu_s = timed(lambda: READERS[name](url, prompts, args.floor_tokens, conc))  # noqa: B023
                    first = min(s.start_s for s in streams)
                    last = max(s.arrivals[-1] for s in streams)
                    events = sum(len(s.arrivals) for s in streams)
                    rates[name] = events / (last - first)
                    costs[name] = cpu_s / events * 1e6
                for name, rate in rates.items():
                    print(
                        f"| {conc} | {name} | {rate:,.0f} | {rate / rates['aiohttp bare']:.2f}x | {costs[name]:.1f} | "
                        f"{costs[name] / costs['aiohttp bare']:.2f}x |",
                        flush=True,
                    )
    finally:
        proc.terminate()
        proc.wait()
        if proc.stdout is not None:
            proc.stdout.close()


def pct(values: list[float], q: float) -> float:
    return float(np.percentile(np.asarray(values) * 1000.0, q)) if values else float("nan")


def truth_table(args: argparse.Namespace) -> None:
    proc, url = start_server("--itl-ms", str(args.itl_ms), "--ttft-ms", str(args.ttft_ms), "--record")
    n = args.output_len
    try:
        print(
            f"\nTruth: paced server ({args.ttft_ms:g} ms to the first event, one event per {args.itl_ms:g} ms per "
            f"stream, {n} tokens); measured (true) in ms; delay = arrival - send\n"
        )
        print("| concurrency | reader | events/s | ITL p50 | ITL p99 | TTFT p50 | delay p50 | delay p99 |")
        print("|---|---|---|---|---|---|---|---|")
        for conc in args.concurrency:
            nreq = max(2 * conc, 16)
            for name in args.readers:
                prompts = [f"{name}-{conc}-{i}" for i in range(nreq)]
                streams, _ = timed(lambda: READERS[name](url, prompts, n, conc))  # noqa: B023
                sent = httpx.get(url + "/send_times", timeout=30).json()
                itl, itl_true, ttft, ttft_true, delay = [], [], [], [], []
                for s in streams:
                    truth = sent[s.prompt]
                    if len(truth) != len(s.arrivals):
                        raise SystemExit(f"{name}: {len(s.arrivals)} events read, {len(truth)} sent ({s.prompt})")
                    ttft.append(s.arrivals[0] - s.start_s)
                    ttft_true.append(truth[0] - s.start_s)
                    itl += [b - a for a, b in zip(s.arrivals, s.arrivals[1:], strict=False)]
                    itl_true += [b - a for a, b in zip(truth, truth[1:], strict=False)]
                    delay += [a - t for a, t in zip(s.arrivals, truth, strict=True)]
                first = min(s.start_s for s in streams)
                last = max(s.arrivals[-1] for s in streams)
                rate = sum(len(s.arrivals) for s in streams) / (last - first)
                print(
                    f"| {conc} | {name} | {rate:,.0f} | {pct(itl, 50):.2f} ({pct(itl_true, 50):.2f}) | "
                    f"{pct(itl, 99):.2f} ({pct(itl_true, 99):.2f}) | {pct(ttft, 50):.2f} ({pct(ttft_true, 50):.2f}) | "
                    f"{pct(delay, 50):.2f} | {pct(delay, 99):.2f} |",
                    flush=True,
                )
    finally:
        proc.terminate()
        proc.wait()
        if proc.stdout is not None:
            proc.stdout.close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--concurrency", default="1,64,256,1024", help="comma-separated (default 1,64,256,1024)")
    parser.add_argument("--readers", default="plugin,aiohttp bare,bench_serving-like")
    parser.add_argument("--output-len", type=int, default=64, help="tokens per paced request (default 64)")
    parser.add_argument("--itl-ms", type=float, default=5.0)
    parser.add_argument("--ttft-ms", type=float, default=20.0)
    parser.add_argument("--floor-tokens", type=int, default=256)
    parser.add_argument("--floor-repeats", type=int, default=2)
    parser.add_argument(
        "--plugin-workers", default="", help="also the plugin with these worker counts in the truth table, e.g. 2,4"
    )
    parser.add_argument("--skip-floor", action="store_true")
    parser.add_argument("--skip-truth", action="store_true")
    args = parser.parse_args()
    args.concurrency = [int(c) for c in args.concurrency.split(",")]
    args.plugin_workers = [int(w) for w in args.plugin_workers.split(",") if w]
    args.readers = args.readers.split(",")
    for workers in args.plugin_workers:
        name = f"plugin x{workers}"
        READERS[name] = lambda url, prompts, n, conc, w=workers: plugin(url, prompts, n, conc, w)  # type: ignore[misc]
        args.readers.append(name)
    if not args.skip_floor:
        floor_table(args)
    if not args.skip_truth:
        truth_table(args)


if __name__ == "__main__":
    main()
