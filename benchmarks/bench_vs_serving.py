"""The plugin's measuring client against a running server, printed like ``sglang.bench_serving`` (a script, not a test).

Runs one or more phases of ``--num-prompts`` streamed requests at ``--concurrency`` through
``pytest_specdec.measure.client.run_phase`` (the exact code the plugin measures with) and summarizes them with
``pytest_specdec.measure.metrics.phase_metrics``, so its lines can be set beside those of
``python -m sglang.bench_serving --backend sglang --dataset-name random-ids`` on the same server. Only what the
plugin ships is used (no SGLang, no GPU).

Requests: ``ignore_eos`` and temperature 0, so each emits exactly its output length. Prompts are the token ids
bench_serving's ``random-ids`` dataset draws with ``--tokenize-prompt`` (``workload.random_prompts``, the plugin's
``prompts: random``: ``--input-len``, ``--output-len``, ``--range-ratio``, ``--seed``, ``--num-prompts`` and
``--vocab-size`` as bench_serving's ``--random-*`` flags), sent as ``input_ids`` to ``/generate``, the same list in
every repeat; or, with ``--prompts builtin``, the plugin's built-in short text prompts (the only choice for the
OpenAI APIs). ``--warmup-requests`` (default 1, as bench_serving: the first prompt, at most 32 tokens) run first
and are not measured; ``--flush-cache`` posts ``/flush_cache`` before each measured phase (bench_serving's
``--flush-cache``). ``--speculative``: the accept length too (the plugin's, 1 + accepted drafts / verify steps from
the responses) and ``/server_info``'s ``avg_spec_accept_length`` after the phase (bench_serving's "Accept length").

Figures (as bench_serving's ``calculate_metrics``): duration = first request sent to last response finished;
output tok/s = Σ completion_tokens / duration; TTFT per request; ITL = each event gap divided over its tokens,
pooled; ``events/s`` = token-carrying SSE events / duration (the client's load); client CPU (cores, summed over
workers) and event-loop lag p99 from ``PhaseResult.load``, with the plugin's overload warning when lag p99 > 10% of
the ITL p50. ``--workers N|auto`` spreads the requests over client processes as ``workload.client_workers`` does.

Usage::

    python benchmarks/bench_vs_serving.py --base-url http://127.0.0.1:30000 --concurrency 64 \\
        --num-prompts 256 --output-len 256 --input-len 128 --range-ratio 1 [--seed 42] [--repeats 3] \\
        [--workers auto|N] [--prompts builtin] [--api generate] [--flush-cache] [--speculative] [--json-out FILE]

    # the same load through SGLang's own client, for comparison:
    python -m sglang.bench_serving --backend sglang --base-url http://127.0.0.1:30000 --dataset-name random-ids \\
        --tokenize-prompt --random-input-len 128 --random-output-len 256 --random-range-ratio 1 --num-prompts 256 \\
        --max-concurrency 64 --seed 42 [--flush-cache]
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import sys
from pathlib import Path

import httpx

from pytest_specdec.core.auth import bearer_headers
from pytest_specdec.measure import client, metrics, workload
from pytest_specdec.measure.workload import RequestSpec
from pytest_specdec.profiles.schema import RandomPrompts


def build_requests(args: argparse.Namespace) -> tuple[list[RequestSpec], list[RequestSpec]]:
    """(warmup, measured): bench_serving's warmup is its first prompt at most 32 tokens long."""
    if args.prompts == "builtin":
        texts = [p.text for p in workload.load_prompts("builtin", Path("."))]
        measured = [RequestSpec(texts[i % len(texts)], args.output_len, 0.0, True) for i in range(args.num_prompts)]
    else:
        settings = RandomPrompts(input_len=args.input_len, range_ratio=args.range_ratio, seed=args.seed)
        prompts = workload.random_prompts(settings, args.num_prompts, args.output_len, args.vocab_size)
        measured = [
            RequestSpec("", p.max_new_tokens or args.output_len, 0.0, True, input_ids=p.input_ids) for p in prompts
        ]
    first = measured[0]
    warmup = [dataclasses.replace(first, max_new_tokens=min(first.max_new_tokens, 32))] * args.warmup_requests
    return warmup, measured


def scheduler_accept_length(args: argparse.Namespace) -> float | None:
    """``/server_info`` ``internal_states[0].avg_spec_accept_length``, read as bench_serving reads it."""
    try:
        info = httpx.get(args.base_url.rstrip("/") + "/server_info", headers=bearer_headers(args.api_key), timeout=30)
        value = (info.json().get("internal_states") or [{}])[0].get("avg_spec_accept_length")
    except (httpx.HTTPError, ValueError, AttributeError, IndexError):
        return None
    return float(value) if isinstance(value, int | float) else None


def report(args: argparse.Namespace, phase: client.PhaseResult) -> dict[str, float | None]:
    run = metrics.phase_metrics(
        list(phase.records), phase.duration_s, num_steps=args.num_steps, speculative=args.speculative,
        max_error_rate=1.0,
    )  # fmt: skip
    scheduler = scheduler_accept_length(args) if args.speculative else None
    ok = [r for r in phase.records if r.ok]
    events = sum(len(r.chunk_times_s) for r in ok)
    out = {
        "duration_s": phase.duration_s,
        "completed": run.num_ok,
        "output_tokens": run.output_tokens,
        "output_tok_s": run.output_tok_s,
        "request_s": run.num_ok / phase.duration_s,
        "ttft_ms_mean": run.ttft_ms_mean,
        "ttft_ms_p50": run.ttft_ms_p50,
        "ttft_ms_p99": run.ttft_ms_p99,
        "tpot_ms_p50": run.tpot_ms_p50,
        "itl_ms_mean": run.itl_ms_mean,
        "itl_ms_p50": run.itl_ms_p50,
        "itl_ms_p99": run.itl_ms_p99,
        "e2e_ms_p50": run.e2e_ms_p50,
        "events_s": events / phase.duration_s,
        "client_cpu_cores": phase.load.cpu_cores if phase.load else None,
        "client_lag_ms_p99": phase.load.lag_ms_p99 if phase.load else None,
        "client_workers": phase.load.workers if phase.load else 1,
        "accept_length": run.accept_length,
        "accept_length_native": run.accept_length_native,
        "scheduler_accept_length": scheduler,
    }

    def f(v: float | None, fmt: str = "{:.2f}") -> str:
        return "n/a" if v is None else fmt.format(v)

    w = 41
    print("{s:{c}^{n}}".format(s=" pytest-specdec client (bench_serving layout) ", n=50, c="="))
    print(f"{'Backend:':<{w}}{args.api}")
    print(f"{'Max request concurrency:':<{w}}{args.concurrency}")
    print(f"{'Successful requests:':<{w}}{run.num_ok} (failed {run.num_errors})")
    print(f"{'Benchmark duration (s):':<{w}}{phase.duration_s:.2f}")
    print(f"{'Total generated tokens:':<{w}}{run.output_tokens}")
    print(f"{'Request throughput (req/s):':<{w}}{out['request_s']:.2f}")
    print(f"{'Output token throughput (tok/s):':<{w}}{run.output_tok_s:.2f}")
    if args.speculative:
        print(f"{'Accept length:':<{w}}{f(run.accept_length)}")
        print(f"{'Accept length (server_info):':<{w}}{f(scheduler)}")
    print("{s:{c}^{n}}".format(s="Time to First Token", n=50, c="-"))
    print(f"{'Mean TTFT (ms):':<{w}}{f(run.ttft_ms_mean)}")
    print(f"{'Median TTFT (ms):':<{w}}{f(run.ttft_ms_p50)}")
    print(f"{'P99 TTFT (ms):':<{w}}{f(run.ttft_ms_p99)}")
    print("{s:{c}^{n}}".format(s="Time per Output Token (excl. 1st token)", n=50, c="-"))
    print(f"{'Median TPOT (ms):':<{w}}{f(run.tpot_ms_p50)}")
    print("{s:{c}^{n}}".format(s="Inter-Token Latency", n=50, c="-"))
    print(f"{'Mean ITL (ms):':<{w}}{f(run.itl_ms_mean)}")
    print(f"{'Median ITL (ms):':<{w}}{f(run.itl_ms_p50)}")
    print(f"{'P99 ITL (ms):':<{w}}{f(run.itl_ms_p99)}")
    print("{s:{c}^{n}}".format(s="End-to-End Latency", n=50, c="-"))
    print(f"{'Median E2E Latency (ms):':<{w}}{f(run.e2e_ms_p50)}")
    print("{s:{c}^{n}}".format(s="Client load", n=50, c="-"))
    print(f"{'SSE events/s (token-carrying):':<{w}}{out['events_s']:.0f}")
    print(f"{'Client CPU (cores, all workers):':<{w}}{f(out['client_cpu_cores'])}")
    print(f"{'Client event-loop lag p99 (ms):':<{w}}{f(out['client_lag_ms_p99'])}")
    print(f"{'Client worker processes:':<{w}}{out['client_workers']}")
    check = metrics.client_check(
        dataclasses.replace(
            run,
            client_lag_ms_p99=out["client_lag_ms_p99"],
            client_cpu_cores=out["client_cpu_cores"],
            client_workers=phase.load.workers if phase.load else 1,
        )
    )
    if check:
        print(f"WARNING: {check}")
    print("=" * 50, flush=True)
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--base-url", required=True)
    parser.add_argument("--concurrency", type=int, default=64)
    parser.add_argument("--num-prompts", type=int, default=256)
    parser.add_argument("--output-len", type=int, default=256)
    parser.add_argument("--input-len", type=int, default=1024, help="--random-input-len (default 1024)")
    parser.add_argument("--range-ratio", type=float, default=0.0, help="--random-range-ratio (default 0.0)")
    parser.add_argument(
        "--vocab-size", type=int, default=2048, help="the tokenizer's vocab_size (default 2048: the tiny model)"
    )
    parser.add_argument("--prompts", choices=["random-ids", "builtin"], default="random-ids")
    parser.add_argument("--api", choices=["generate", "completions", "chat"], default="generate")
    parser.add_argument("--warmup-requests", type=int, default=1)
    parser.add_argument("--repeats", type=int, default=1, help="measured phases, each printed (default 1)")
    parser.add_argument("--flush-cache", action="store_true", help="POST /flush_cache before each measured phase")
    parser.add_argument("--seed", type=int, default=42)
    parser.add_argument("--speculative", action="store_true", help="also the accept length (client and server)")
    parser.add_argument("--num-steps", type=int, default=None, help="for the accept rate (--speculative)")
    parser.add_argument("--api-key", default=None)
    parser.add_argument("--json-out", default=None, help="append one JSON line per phase to this file")
    parser.add_argument(
        "--workers",
        default="auto",
        help="client processes: a number or 'auto' (client.auto_workers, as workload.client_workers; default auto)",
    )
    args = parser.parse_args()
    if args.api != "generate" and args.prompts != "builtin":
        parser.error("--api completions/chat send text: add --prompts builtin")
    last_load: client.ClientLoad | None = None
    warmup, requests = build_requests(args)
    for repeat in range(args.repeats):
        if warmup:
            client.run_phase(
                args.base_url,
                warmup,
                client.PhaseOptions(api=args.api, concurrency=args.concurrency, api_key=args.api_key),
            )
        if args.flush_cache:
            httpx.post(args.base_url.rstrip("/") + "/flush_cache", headers=bearer_headers(args.api_key), timeout=30.0)
        workers = client.auto_workers(args.concurrency, last_load) if args.workers == "auto" else int(args.workers)
        phase = client.run_phase(
            args.base_url,
            requests,
            client.PhaseOptions(api=args.api, concurrency=args.concurrency, api_key=args.api_key),
            workers=workers,
        )
        last_load = phase.load
        errors = [r.error for r in phase.records if not r.ok]
        if errors:
            print(f"{len(errors)} failed requests; first: {errors[0]}", file=sys.stderr)
        out = report(args, phase)
        if args.json_out:
            with open(args.json_out, "a") as fh:
                fh.write(json.dumps({"repeat": repeat, **vars(args), **out}) + "\n")


if __name__ == "__main__":
    main()
