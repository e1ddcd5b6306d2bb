"""A fake SGLang 0.5.17 server: ``python -m sglang.launch_server`` with SGLang's flags, no model, no GPU.

It exists so the plugin's fast tests can run ``server: sglang`` profiles end to end (version probe, flag table,
preflight, launch, readiness, read-back, measurement, verdicts, sweeps) in well under a second per server start.
Put ``tests/fakesglang`` on the profile's ``PYTHONPATH`` (``env:``); its ``sglang-0.5.17.dist-info`` answers
``importlib.metadata.version("sglang")``.

What it serves, shaped as real SGLang 0.5.17 answered on an H200 (``tests/data/sglang/0.5.17/``, recorded):

- ``GET /health``, ``/health_generate`` (200, empty body); ``/server_info`` and ``/get_server_info`` (the recorded
  body with this launch's flags: ``speculative_*``, ``decode_log_interval``, ``internal_states[0]
  .avg_spec_accept_length`` folded every ``--decode-log-interval`` verify steps since the last ``/flush_cache``);
  ``/model_info``, ``/get_model_info``, ``/v1/models``; ``/metrics`` with ``--enable-metrics`` (the counters
  ``engines/sglang.py::SglangEngine.counters`` reads); ``POST /flush_cache`` (400 while requests are in flight).
- ``POST /generate``: non-streamed JSON, or with ``"stream": true`` SSE events ``data: {json}\\n\\n`` with cumulative
  ``text``/``output_ids``/``meta_info.completion_tokens``: the first event carries the prefill token, then one event
  per verify step (accepted drafts + 1 tokens), the last one the spec fields (``spec_verify_ct``,
  ``spec_accept_length`` = completion_tokens / verify_ct, ``spec_num_correct_drafts``, ``spec_correct_drafts_histogram``
  ...), then ``data: [DONE]``. Like SGLang, verify steps run until ``max_new_tokens`` is reached; the last step's
  drafts count in full even when its tokens are cut.
- SGLang's argv: the 0.5.17 flag set is read from the recorded usage text (``bad-flag.log``); an unknown flag ends
  with argparse's ``sglang serve: error: unrecognized arguments: ...`` and exit 2.
- The draft's aux layer ids, read like SGLang from ``--speculative-draft-model-path``/config.json
  ``eagle_config.eagle_aux_hidden_state_layer_ids`` (the plugin's overlay rewrites them), pick the acceptance:
  a cycle of "correct drafts per verify step" (``ACCEPT``), each value capped at ``--speculative-num-steps``.
  ``EAGLE`` on an EAGLE-3 draft accepts almost nothing; ``-1`` in the ids crashes at the first forward with the
  recorded scheduler traceback, then the server SIGKILLs itself (SGLang's ``kill_process_tree``).

Scripted through the environment variable ``SPECDEC_FAKE_SGLANG``: inline JSON or the path of a JSON file, keys:

- ``accept``: a list (one cycle for every config) or ``{"1,3,5": [3, 3, 2, 1, 0], "default": [...]}`` keyed as
  ``ACCEPT``; the cycle restarts with each request, so every request of a phase gets the same figures;
- ``prefill_ms`` (2), ``step_ms`` (2: one target forward: a plain decode step or a verify), ``draft_ms`` (0.2 per
  draft step), ``verify_ms_extra`` (0): the sleeps that make tok/s predictable;
- ``env_slowdown``: ``{"NCCL_PROTO": 3.0}``: target forwards take 3x as long when NCCL_PROTO is not set (a lost
  NCCL variable on restart);
- ``cuda_graph``: what the Decode lines say (default: False with ``--disable-cuda-graph``, else True);
- ``counter_skew``: multiply ``sglang:spec_verify_calls_total`` by this (a metrics bug for the cross-check);
- ``server_info``: fields to report in ``/server_info`` instead of the launch's own (SGLang resolving a flag to
  something else than asked);
- ``startup_s`` (0): sleep before serving;
- ``exit_at_startup``: ``{"code": 3, "line": "..."}``: log ``line`` and exit with ``code`` before serving (a death
  whose log names no cause);
- ``crash_after_requests``: N: the scheduler crashes mid-run, on the first ``/generate`` after N requests served
  since the first ``/flush_cache`` (the plugin flushes before each measured phase, so N measured requests), with
  the recorded scheduler traceback and ``kill_process_tree``, as aux id -1 does at the first forward.

Standard library only. Logs go to stdout in SGLang's format (``[YYYY-mm-dd HH:MM:SS] ...``).
"""

from __future__ import annotations

import argparse
import http.server
import json
import os
import re
import signal
import sys
import threading
import time
import uuid
from pathlib import Path
from typing import Any

#: The recorded SGLang 0.5.17 output this fake imitates.
DATA = Path(__file__).resolve().parents[2] / "data" / "sglang" / "0.5.17"

#: Correct drafts per verify step, cycled per request, by the draft's aux ids as SGLang reads them (explicit ids =
#: outputs of those target layers). Figures chosen near what real SGLang measured on the bundled model (README "Real
#: SGLang"): trained [1, 3, 5] 2.8 (rates 0.8/0.6/0.4), [0, 1, 2] 2.33, EAGLE on the EAGLE-3 draft 1.2.
ACCEPT: dict[str, list[int]] = {
    "1,3,5": [3, 3, 2, 1, 0],  # 1 + 9/5 = 2.8; per position 0.8 / 0.6 / 0.4; 14 tokens per cycle
    "0,2,4": [3, 3, 1, 1, 0],  # 2.6 (-7%): ids off by one
    "0,1,2": [3, 2, 2, 1, 0, 0],  # 2.333 (-17%): wrong layers; 0.667 / 0.5 / 0.167
    "2,4,6": [3, 3, 3, 1, 0],  # 3.0: deeper layers than trained
    "eagle-on-eagle3-draft": [1, 0, 0, 0, 0],  # 1.2: EAGLE captures no aux layers
    "default": [3, 2, 2, 1, 0, 0],  # any other ids, or a draft without ids
}

_SSE_HEAD = "text/event-stream; charset=utf-8"
_FLUSHED = (
    "Cache flushed.\nPlease check backend logs for more details. (When there are running or waiting requests, the "
    "operation will not be performed.)\n"
)


def log(line: str) -> None:
    """One SGLang-style log line on stdout (the plugin's log file)."""
    print(f"[{time.strftime('%Y-%m-%d %H:%M:%S')}] {line}", flush=True)


def _known_flags() -> dict[str, bool]:
    """0.5.17's flags -> takes a value, read from the usage text argparse printed for a bad flag."""
    flags: dict[str, bool] = {}
    try:
        text = (DATA / "bad-flag.log").read_text()
    except OSError:
        text = ""
    for match in re.finditer(r"\[(--[a-z0-9][a-z0-9-]*)( [A-Z_{\[])?", text):
        flags.setdefault(match.group(1), match.group(2) is not None)
    for flag in ("--model-path", "--host", "--port", "--tp-size", "--random-seed", "--api-key",
                 "--speculative-algorithm", "--speculative-draft-model-path", "--speculative-num-steps",
                 "--speculative-eagle-topk", "--speculative-num-draft-tokens", "--max-running-requests",
                 "--decode-log-interval"):  # fmt: skip
        flags[flag] = True
    flags.setdefault("--enable-metrics", False)
    return flags


def parse_args(argv: list[str]) -> argparse.Namespace:
    """SGLang's command line; exits 2 with argparse's message on an unknown flag, as SGLang does."""
    parser = argparse.ArgumentParser(prog="sglang serve", add_help=True)
    for flag, takes_value in _known_flags().items():
        if takes_value:
            parser.add_argument(flag, nargs="+", default=None)
        else:
            parser.add_argument(flag, action="store_true")
    args = parser.parse_args(argv)
    if args.model_path is None:
        parser.error("the following arguments are required: --model-path")
    return args


def _one(args: argparse.Namespace, name: str, default: Any = None, kind: type = str) -> Any:
    value = getattr(args, name, None)
    return default if value is None else kind(value[-1])


def _script() -> dict[str, Any]:
    raw = os.environ.get("SPECDEC_FAKE_SGLANG", "").strip()
    if not raw:
        return {}
    return json.loads(raw if raw.startswith("{") else Path(raw).read_text())


class Config:
    """What this launch runs, resolved from argv, the draft's config.json and the script."""

    def __init__(self, args: argparse.Namespace, script: dict[str, Any]) -> None:
        self.args = args
        self.script = script
        self.model_path: str = _one(args, "model_path")
        self.host: str = _one(args, "host", "127.0.0.1")
        self.port: int = _one(args, "port", 30000, int)
        self.api_key: str | None = _one(args, "api_key")
        self.decode_log_interval: int = _one(args, "decode_log_interval", 40, int)
        self.enable_metrics: bool = bool(args.enable_metrics)
        algorithm = _one(args, "speculative_algorithm")
        self.algorithm: str | None = None if algorithm is None else ("EAGLE" if algorithm == "NEXTN" else algorithm)
        self.draft_path: str | None = _one(args, "speculative_draft_model_path")
        self.num_steps: int | None = None
        self.topk: int | None = None
        self.draft_tokens: int | None = None
        self.pattern: list[int] | None = None
        self.crash = False
        if self.algorithm is not None:
            self.num_steps = _one(args, "speculative_num_steps", 3, int)
            self.topk = _one(args, "speculative_eagle_topk", 1, int)
            self.draft_tokens = _one(args, "speculative_num_draft_tokens", self.num_steps + 1, int)
            if self.topk == 1:
                # SGLang rewrites draft tokens to steps + 1 for chains (speculative_hook.py); /server_info shows it.
                self.draft_tokens = self.num_steps + 1
            self.pattern, self.crash = self._acceptance()
        graph = script.get("cuda_graph")
        self.cuda_graph = (not (args.disable_cuda_graph or args.disable_decode_cuda_graph)) if graph is None else graph
        slow = 1.0
        for name, factor in (script.get("env_slowdown") or {}).items():
            if name not in os.environ:
                slow *= float(factor)
        self.prefill_s = float(script.get("prefill_ms", 2.0)) * slow / 1000
        self.step_s = float(script.get("step_ms", 2.0)) * slow / 1000
        self.draft_s = float(script.get("draft_ms", 0.2)) / 1000
        self.verify_extra_s = float(script.get("verify_ms_extra", 0.0)) / 1000
        self.counter_skew = float(script.get("counter_skew", 1.0))

    def _acceptance(self) -> tuple[list[int], bool]:
        cfg: dict[str, Any] = {}
        if self.draft_path is not None:
            try:
                cfg = json.loads((Path(self.draft_path) / "config.json").read_text())
            except (OSError, ValueError):
                cfg = {}
        eagle3_draft = any("Eagle3" in str(a) for a in cfg.get("architectures") or [])
        ids = (cfg.get("eagle_config") or {}).get("eagle_aux_hidden_state_layer_ids")
        if self.algorithm == "EAGLE" and eagle3_draft:
            key = "eagle-on-eagle3-draft"
        elif isinstance(ids, list):
            key = ",".join(str(i) for i in ids)
        else:
            key = "default"
        crash = self.algorithm == "EAGLE3" and isinstance(ids, list) and -1 in ids
        accept = self.script.get("accept")
        table = {**ACCEPT, **(accept if isinstance(accept, dict) else {})}
        cycle = accept if isinstance(accept, list) else table.get(key, table["default"])
        assert self.num_steps is not None
        return [min(int(a), self.num_steps) for a in cycle], crash


class State:
    """Counters since start (``/metrics``) and since the last ``/flush_cache`` (the scheduler's folded average)."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.in_flight = 0
        self.generation_tokens = 0
        self.prompt_tokens = 0
        self.requests = 0
        self.verify_calls = 0
        # scheduler window: iterations since the last fold, and the folded totals since /flush_cache
        self.window_steps = 0
        self.window_accept_tokens = 0
        self.window_tokens = 0
        self.window_start = time.perf_counter()
        self.folded_steps = 0
        self.folded_accept_tokens = 0
        # /generate requests since the first /flush_cache (``crash_after_requests``); None before it
        self.measured: int | None = None


def _tokens(n: int) -> tuple[str, list[int]]:
    ids = [300 + (i * 7) % 1500 for i in range(n)]
    return "".join(f" t{i}" for i in ids), ids


class Handler(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    # Small SSE writes must not wait for the client's delayed ACK (Nagle): uvicorn sets TCP_NODELAY too.
    disable_nagle_algorithm = True
    config: Config
    state: State
    server_info: dict[str, Any]
    model_info: dict[str, Any]

    def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 - BaseHTTPRequestHandler's signature
        pass

    # ------------------------------------------------------------------ plumbing
    def _send(self, status: int, body: bytes, content_type: str = "application/json") -> None:
        self.send_response(status)
        self.send_header("content-type", content_type)
        self.send_header("content-length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)
        log(f'INFO:     {self.client_address[0]}:{self.client_address[1]} - "{self.command} {self.path} HTTP/1.1" '
            f"{status} {'OK' if status == 200 else 'ERR'}")  # fmt: skip

    def _json(self, status: int, obj: Any) -> None:
        self._send(status, json.dumps(obj, separators=(",", ":"), ensure_ascii=False).encode())

    def _authorized(self) -> bool:
        key = self.config.api_key
        if key is None or self.path in ("/health", "/metrics"):
            return True
        if self.headers.get("Authorization") == f"Bearer {key}":
            return True
        self._json(401, {"error": "Unauthorized"})
        return False

    def _chunk(self, data: bytes) -> None:
        self.wfile.write(b"%x\r\n%s\r\n" % (len(data), data))
        self.wfile.flush()

    # ------------------------------------------------------------------ GET
    def do_GET(self) -> None:  # noqa: N802 - http.server's naming
        if not self._authorized():
            return
        path = self.path.split("?", 1)[0]
        if path in ("/health", "/health_generate"):
            self._send(200, b"", "text/plain")
        elif path in ("/server_info", "/get_server_info"):
            if path == "/get_server_info":
                log("Endpoint '/get_server_info' is deprecated and will be removed in a future version. Please use "
                    "'/server_info' instead.")  # fmt: skip
            self._json(200, self._server_info())
        elif path in ("/model_info", "/get_model_info"):
            self._json(200, self.model_info)
        elif path == "/v1/models":
            self._json(200, {"object": "list", "data": [{"id": self.config.model_path, "object": "model",
                             "created": int(time.time()), "owned_by": "sglang", "root": self.config.model_path,
                             "parent": None, "max_model_len": 2048}]})  # fmt: skip
        elif path == "/metrics" and self.config.enable_metrics:
            self._send(200, self._metrics().encode(), "text/plain; version=0.0.4; charset=utf-8")
        else:
            self._json(404, {"detail": "Not Found"})

    def _server_info(self) -> dict[str, Any]:
        info = dict(self.server_info)
        st = self.state
        with st.lock:
            avg = st.folded_accept_tokens / st.folded_steps if st.folded_steps and self.config.pattern else None
        state = dict(info["internal_states"][0]) if info.get("internal_states") else {}
        state["avg_spec_accept_length"] = avg
        info["internal_states"] = [state]
        return info

    def _metrics(self) -> str:
        st = self.state
        labels = f'engine_type="unified",model_name="{self.config.model_path}"'
        with st.lock:
            lines = [
                "# HELP sglang:prompt_tokens_total Number of prefill tokens processed.",
                "# TYPE sglang:prompt_tokens_total counter",
                f'sglang:prompt_tokens_total{{{labels},is_streaming="true"}} {float(st.prompt_tokens)}',
                "# HELP sglang:generation_tokens_total Number of generation tokens processed.",
                "# TYPE sglang:generation_tokens_total counter",
                f'sglang:generation_tokens_total{{{labels},is_streaming="true"}} {float(st.generation_tokens)}',
                "# HELP sglang:num_requests_total Number of requests processed.",
                "# TYPE sglang:num_requests_total counter",
                f"sglang:num_requests_total{{{labels}}} {float(st.requests)}",
            ]
            if self.config.pattern is not None and st.verify_calls:
                lines += [
                    "# HELP sglang:spec_verify_calls_total Number of speculative decoding verification calls.",
                    "# TYPE sglang:spec_verify_calls_total counter",
                    f"sglang:spec_verify_calls_total{{{labels}}} {float(st.verify_calls * self.config.counter_skew)}",
                ]
        return "\n".join(lines) + "\n"

    # ------------------------------------------------------------------ POST
    def do_POST(self) -> None:  # noqa: N802 - http.server's naming
        length = int(self.headers.get("content-length") or 0)
        raw = self.rfile.read(length) if length else b""
        if not self._authorized():
            return
        path = self.path.split("?", 1)[0]
        if path == "/flush_cache":
            with self.state.lock:
                busy = self.state.in_flight > 0
                if not busy:
                    self.state.measured = self.state.measured or 0
                    self.state.window_steps = self.state.window_accept_tokens = self.state.window_tokens = 0
                    self.state.folded_steps = self.state.folded_accept_tokens = 0
            if busy:
                self._send(400, _FLUSHED.encode(), "text/plain")
            else:
                log("Cache flushed successfully!")
                self._send(200, _FLUSHED.encode(), "text/plain")
        elif path == "/generate":
            try:
                body = json.loads(raw or b"{}")
            except ValueError:
                self._json(400, {"error": {"message": "invalid JSON body"}})
                return
            self._generate(body)
        else:
            self._json(404, {"detail": "Not Found"})

    def _generate(self, body: dict[str, Any]) -> None:
        cfg = self.config
        if cfg.crash:
            _crash()
        limit = cfg.script.get("crash_after_requests")
        if limit is not None:
            with self.state.lock:
                if self.state.measured is not None:
                    self.state.measured += 1
                    if self.state.measured > int(limit):
                        _crash()
        sampling = body.get("sampling_params") or {}
        max_new = int(sampling.get("max_new_tokens", 128))
        prompt = body.get("text")
        prompt_tokens = len(body["input_ids"]) if "input_ids" in body else max(1, len(str(prompt or "").split()))
        stream = bool(body.get("stream"))
        rid = uuid.uuid4().hex
        received = time.time()
        with self.state.lock:
            self.state.in_flight += 1
        try:
            self._run(rid, max_new, prompt_tokens, stream, received)
        finally:
            with self.state.lock:
                self.state.in_flight -= 1

    def _run(self, rid: str, max_new: int, prompt_tokens: int, stream: bool, received: float) -> None:
        cfg = self.config
        st = self.state
        log(
            f"Prefill batch, #new-seq: 1, #new-token: {prompt_tokens}, #cached-token: 0, token usage: 0.00, "
            "#running-req: 0, #queue-req: 0, #pending-token: 0, cuda graph: False, input throughput (token/s): 0.00"
        )
        time.sleep(cfg.prefill_s)
        base: dict[str, Any] = {
            "id": rid, "finish_reason": None, "prompt_tokens": prompt_tokens, "weight_version": "default",
            "num_retractions": 0, "forward_entry_time": received, "prefill_finished_time": time.time(),
            "queue_time": 0.0002, "reasoning_tokens": 0, "completion_tokens": 1, "cached_tokens": 0,
            "cached_tokens_details": None, "dp_rank": None,
        }  # fmt: skip
        if stream:
            self.send_response(200)
            self.send_header("content-type", _SSE_HEAD)
            self.send_header("transfer-encoding", "chunked")
            self.end_headers()
            first = dict(base, response_sent_to_client_ts=time.time())
            self._event(1, first)
        done = 1
        steps = 0
        correct = 0
        hist = [0] * ((cfg.num_steps or 0) + 1)
        cycle = cfg.pattern
        while done < max_new:
            if cycle is None:
                time.sleep(cfg.step_s)
                new = 1
            else:
                accepted = cycle[steps % len(cycle)]
                time.sleep((cfg.num_steps or 0) * cfg.draft_s + cfg.step_s + cfg.verify_extra_s)
                steps += 1
                correct += accepted
                hist[accepted] += 1
                new = accepted + 1
            done = min(max_new, done + new)
            self._iteration(new if cycle is None else accepted + 1, done)
            if stream and done < max_new:
                self._event(done, dict(base, completion_tokens=done))
        finished = time.time()
        meta = dict(base, completion_tokens=done, finish_reason={"type": "length", "length": max_new})
        meta["e2e_latency"] = finished - received
        if cycle is not None and steps:
            proposed = steps * (cfg.num_steps or 0)
            meta.update(
                spec_accept_rate=correct / proposed if proposed else 0.0,
                spec_accept_length=done / steps,
                spec_num_correct_drafts=correct,
                spec_num_proposed_drafts=proposed,
                spec_verify_ct=steps,
                spec_accepted_drafts=correct,
                spec_proposed_drafts=proposed,
                spec_correct_drafts_histogram=hist,
                spec_accept_histogram=hist,
            )
        meta.update(request_received_ts=received, api_server_dispatch_finish_ts=received,
                    response_sent_to_client_ts=time.time(), request_finished_ts=finished,
                    decode_throughput=done / max(finished - received, 1e-9))  # fmt: skip
        with st.lock:
            st.generation_tokens += done
            st.prompt_tokens += prompt_tokens
            st.requests += 1
            st.verify_calls += steps
        text, ids = _tokens(done)
        if stream:
            self._event(done, meta)
            self._chunk(b"data: [DONE]\n\n")
            self._chunk(b"")
            log(f'INFO:     {self.client_address[0]}:{self.client_address[1]} - "POST /generate HTTP/1.1" 200 OK')
        else:
            self._json(200, {"text": text, "output_ids": ids, "meta_info": meta})

    def _event(self, n: int, meta: dict[str, Any]) -> None:
        text, ids = _tokens(n)
        event = {"text": text, "output_ids": ids, "meta_info": meta}
        self._chunk(b"data: " + json.dumps(event, separators=(",", ":"), ensure_ascii=False).encode() + b"\n\n")

    def _iteration(self, accept_tokens: int, running_tokens: int) -> None:
        """One decode iteration (batch size 1): fold the scheduler window every ``--decode-log-interval``."""
        cfg = self.config
        st = self.state
        with st.lock:
            st.window_steps += 1
            st.window_accept_tokens += accept_tokens
            st.window_tokens += accept_tokens
            if st.window_steps < cfg.decode_log_interval:
                return
            now = time.perf_counter()
            gen = st.window_tokens / max(now - st.window_start, 1e-9)
            length = st.window_accept_tokens / st.window_steps
            st.folded_steps += st.window_steps
            st.folded_accept_tokens += st.window_accept_tokens
            st.window_steps = st.window_accept_tokens = st.window_tokens = 0
            st.window_start = now
        spec = ""
        if cfg.pattern is not None and cfg.num_steps:
            spec = f"accept len: {length:.2f}, accept rate: {(length - 1) / cfg.num_steps:.2f}, "
        log(f"Decode batch, #running-req: 1, #token: {running_tokens}, token usage: 0.00, {spec}cuda graph: "
            f"{cfg.cuda_graph}, gen throughput (token/s): {gen:.2f}, #queue-req: 0")  # fmt: skip


def _crash() -> None:
    """The first forward with aux id -1 on stock SGLang 0.5.17: the recorded scheduler traceback, then SGLang's
    SIGQUIT handler and ``kill_process_tree`` on itself (exit by SIGKILL)."""
    try:
        lines = (DATA / "eagle3-aux-minus1.log").read_text().splitlines()
        start = next(i for i, line in enumerate(lines) if "Scheduler hit an exception" in line)
        end = next(i for i, line in enumerate(lines) if "kill_process_tree called" in line)
        tail = lines[start : end + 1]
    except (OSError, StopIteration):
        pid = os.getpid()
        tail = ["Scheduler hit an exception: Traceback (most recent call last):",
                '  File "/sgl-workspace/sglang/python/sglang/srt/models/llama.py", line 437, in forward',
                "TypeError: unsupported operand type(s) for +: 'Tensor' and 'NoneType'",
                "SIGQUIT received. signum=None, frame=None. It usually means one child failed.",
                f"kill_process_tree called: parent_pid={pid}, include_parent=True, pid={pid}"]  # fmt: skip
    for line in tail:
        print(line, flush=True)
    os.kill(os.getpid(), signal.SIGKILL)


def _recorded(name: str, config: str) -> dict[str, Any]:
    try:
        body = json.loads((DATA / f"{config}.endpoints.json").read_text())[name]["body"]
        value = json.loads(body)
        return value if isinstance(value, dict) else {}
    except (OSError, ValueError, KeyError):
        return {}


def main(argv: list[str] | None = None) -> None:
    """Parse SGLang's flags, log like SGLang's startup, serve until SIGTERM."""
    print("/fake/site/sglang/launch_server.py:56: UserWarning: 'python -m sglang.launch_server' is still supported, "
          "but 'sglang serve' is the recommended entrypoint.", flush=True)  # fmt: skip
    args = parse_args(sys.argv[1:] if argv is None else argv)
    script = _script()
    config = Config(args, script)
    signal.signal(signal.SIGTERM, lambda *_: os._exit(0))
    if not Path(config.model_path).exists():
        log(f"FileNotFoundError: [Errno 2] No such file or directory: '{config.model_path}/config.json'")
        sys.exit(1)
    time.sleep(float(script.get("startup_s", 0.0)))
    death = script.get("exit_at_startup")
    if isinstance(death, dict):
        log(str(death.get("line", "")))
        sys.exit(int(death.get("code", 1)))
    info = _recorded("/server_info", "eagle3")
    for key in list(info):
        if key.startswith("speculative_") and key != "speculative_draft_model_path":
            info[key] = None
    info.update(
        version="0.5.17", model_path=config.model_path, tokenizer_path=config.model_path, host=config.host,
        port=config.port, random_seed=_one(args, "random_seed", 42, int),
        decode_log_interval=config.decode_log_interval,
        enable_metrics=config.enable_metrics, speculative_algorithm=config.algorithm,
        speculative_draft_model_path=config.draft_path, speculative_num_steps=config.num_steps,
        speculative_eagle_topk=config.topk, speculative_num_draft_tokens=config.draft_tokens,
        max_running_requests=_one(args, "max_running_requests", 48 if config.algorithm else 2048, int),
        disable_cuda_graph=bool(args.disable_cuda_graph),
    )  # fmt: skip
    info.update(script.get("server_info") or {})
    info.setdefault("internal_states", [{}])
    model = _recorded("/model_info", "eagle3")
    model.update(model_path=config.model_path, tokenizer_path=config.model_path)
    Handler.config = config
    Handler.state = State()
    Handler.server_info = info
    Handler.model_info = model
    log(f"server_args=ServerArgs(model_path='{config.model_path}', speculative_algorithm={config.algorithm!r}, "
        f"speculative_draft_model_path={config.draft_path!r}, speculative_num_steps={config.num_steps}, "
        f"speculative_eagle_topk={config.topk}, speculative_num_draft_tokens={config.draft_tokens}, "
        f"port={config.port})")  # fmt: skip
    log("Load weight begin. avail mem=139.13 GB")
    log("Load weight end. elapsed=0.01 s, type=LlamaForCausalLM, avail mem=139.11 GB, mem usage=0.01 GB.")
    server = http.server.ThreadingHTTPServer((config.host, config.port), Handler)
    server.daemon_threads = True
    log("The server is fired up and ready to roll!")
    log(f"INFO:     Uvicorn running on http://{config.host}:{config.port} (Press CTRL+C to quit)")
    server.serve_forever()


if __name__ == "__main__":
    main()
