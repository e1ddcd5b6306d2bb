"""The reference server's Prometheus ``/metrics``: SGLang's series names and labels in a private registry.

Names follow SGLang 0.5.23 ``python/sglang/srt/observability/metrics_collector.py`` (labels ``model_name``,
``engine_type="unified"``).
"""

from __future__ import annotations

from typing import Any

from pytest_specdec.refserver.args import ServerArgs
from pytest_specdec.refserver.decoding import EngineListener, EngineStats, Sequence

__all__ = ["MetricsCollector"]


class MetricsCollector(EngineListener):
    """Prometheus metrics in a private registry, SGLang names and labels (model_name, engine_type="unified").

    :param enabled: ``--enable-metrics``; when False nothing is registered and the hooks only call
        ``on_measured_finish``.
    :param on_measured_finish: called on the engine thread after each measured request finishes (fault knobs).
    """

    def __init__(self, args: ServerArgs, enabled: bool, on_measured_finish: Any = None) -> None:
        self.enabled = enabled
        self.on_measured_finish = on_measured_finish
        if not enabled:
            return
        from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, disable_created_metrics

        disable_created_metrics()
        self.registry = CollectorRegistry(auto_describe=True)
        labels = {"model_name": args.served_model_name, "engine_type": "unified"}
        names = list(labels)
        r = self.registry

        def counter(name: str, doc: str) -> Any:
            return Counter(name, doc, names, registry=r).labels(**labels)

        def gauge(name: str, doc: str) -> Any:
            return Gauge(name, doc, names, registry=r, multiprocess_mode="mostrecent").labels(**labels)

        self.prompt_tokens = counter("sglang:prompt_tokens_total", "Number of prefill tokens processed.")
        self.generation_tokens = counter("sglang:generation_tokens_total", "Number of generation tokens processed.")
        self.verify_calls = counter("sglang:spec_verify_calls_total", "Number of speculative verification calls.")
        self.num_requests = counter("sglang:num_requests_total", "Number of requests processed.")
        # Not an SGLang series (0.5.23 reports acceptance per position only per request, in meta_info's
        # spec_correct_drafts_histogram): vLLM's counter of the same meaning, 0-based position label.
        per_pos = Counter("refserver:spec_decode_num_accepted_tokens_per_pos", "Accepted tokens per draft position.",
                          [*names, "position"], registry=r)
        # Where a speculative cycle's time goes (not SGLang series either; its profiler is /start_profile).
        self.draft_seconds = counter("refserver:spec_draft_seconds_total",
                                     "Seconds spent drafting in speculative cycles of measured requests.")
        self.verify_seconds = counter("refserver:spec_verify_seconds_total",
                                      "Seconds spent in the verify forward (and acceptance) of speculative cycles.")
        self.accepted_per_pos = [per_pos.labels(**labels, position=str(i))
                                 for i in range(max(0, (args.speculative_num_draft_tokens or 1) - 1))]
        self.ttft = Histogram(
            "sglang:time_to_first_token_seconds", "Histogram of time to first token in seconds.", names, registry=r,
            buckets=[0.1, 0.2, 0.4, 0.6, 0.8, 1, 2, 4, 6, 8, 10, 20, 40, 60, 80, 100, 200, 400],
        ).labels(**labels)
        self.accept_length = gauge("sglang:spec_accept_length",
                                   "The average acceptance length of speculative decoding.")
        self.accept_rate = gauge("sglang:spec_accept_rate", "The average acceptance rate of speculative decoding.")
        self.gen_throughput = gauge("sglang:gen_throughput", "The generation throughput (token/s).")
        self.num_running = gauge("sglang:num_running_reqs", "The number of running requests.")
        self.num_queue = gauge("sglang:num_queue_reqs", "The number of requests in the waiting queue.")
        self.is_cuda_graph = gauge("sglang:is_cuda_graph", "Whether batch is using cuda graph.")
        self.is_cuda_graph.set(0)

    def on_first_token(self, seq: Sequence) -> None:
        if self.enabled and seq.first_token_time is not None:
            self.ttft.observe(seq.first_token_time - seq.created)

    def on_finish(self, seq: Sequence) -> None:
        if self.enabled:
            self.prompt_tokens.inc(len(seq.prompt_ids))
            self.generation_tokens.inc(len(seq.output_ids))
            self.verify_calls.inc(seq.verify_ct)
            self.draft_seconds.inc(seq.draft_s)
            self.verify_seconds.inc(seq.verify_s)
            # histogram[a] = verify steps that accepted a drafts; position i (0-based) was accepted when a > i.
            for i, counter in enumerate(self.accepted_per_pos):
                counter.inc(sum(seq.histogram[i + 1:]))
            self.num_requests.inc()
        if self.on_measured_finish is not None:
            self.on_measured_finish()

    def on_log_window(self, stats: EngineStats) -> None:
        if self.enabled:
            with stats.lock:
                self.accept_length.set(stats.last_accept_length)
                self.accept_rate.set(stats.last_accept_rate)
                self.gen_throughput.set(stats.last_gen_throughput)
                self.num_running.set(stats.num_running)
                self.num_queue.set(stats.num_queue)

    def render(self, stats: EngineStats) -> bytes:
        """The exposition text (format 0.0.4), with the running/queued gauges refreshed from ``stats`` first."""
        from prometheus_client import generate_latest

        with stats.lock:
            self.num_running.set(stats.num_running)
            self.num_queue.set(stats.num_queue)
        return generate_latest(self.registry)
