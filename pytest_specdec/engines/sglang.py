"""The SGLang engine: argv and env for ``sglang serve``, readiness, ``/server_info`` readback, ``/metrics`` counters.

Every flag spelling, endpoint and field here is read from SGLang's source (file named beside each); the per-version
differences live in ``VERSIONS``. SGLang is never imported: it runs in its own interpreter (``profile.python``).
"""

from __future__ import annotations

import functools
import os
import re
import shutil
import subprocess
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
from packaging.version import InvalidVersion, Version

from pytest_specdec.core.errors import ProfileError, ServerError
from pytest_specdec.engines.base import (
    AuxIdConvention,
    EffectiveConfig,
    FlagIssue,
    LaunchSpec,
    SpecCounters,
    post_profiler,
    post_reset,
)
from pytest_specdec.engines.common import (
    GENERATE_TIMEOUT_S,
    GpuEngine,
    auth_headers,
    chain_speculative_at,
    clean_env,
    flag_name,
    probe_health_then_generate,
    resolve_api_key,
)
from pytest_specdec.engines.prometheus import sum_samples
from pytest_specdec.profiles.schema import Profile, SpeculativeConfig

__all__ = [
    "MULTINODE_FLAGS",
    "NODE_JOINED",
    "NODE_RENDEZVOUS",
    "SGLANG_FLAGS",
    "SGLANG_FLAG_TYPES",
    "VERSIONS",
    "DecodeLine",
    "SglangEngine",
    "SglangVersion",
    "flag_value_issues",
    "graph_warning",
    "node_flag_issues",
    "parse_decode_line",
    "probe_sglang_version",
    "sglang_speculative_issues",
    "version_row",
]

#: Seconds for the ``importlib.metadata`` version probe subprocess.
PROBE_TIMEOUT_S = 60.0


@dataclass(frozen=True, slots=True)
class SglangVersion:
    """How one SGLang release spells what we use. A row applies from ``since`` up to the next row."""

    since: str
    #: ``sglang serve`` exists (console script ``sglang = sglang.cli.main:main`` in the wheel's entry_points.txt).
    console_script: bool
    #: Server-info endpoints, preferred first.
    server_info_paths: tuple[str, ...]
    #: Logical name -> flag spelling.
    flags: Mapping[str, str]
    #: Flags this release no longer accepts -> what to use instead.
    removed_flags: Mapping[str, str] = field(default_factory=dict)
    #: Flags still accepted with a deprecation warning -> the replacement.
    deprecated_flags: Mapping[str, str] = field(default_factory=dict)


#: Logical name -> SGLang 0.5.23 flag spelling for every flag the plugin emits (the reference server implements
#: exactly these, ``engines.reference``).
SGLANG_FLAGS: Mapping[str, str] = {
    "model_path": "--model-path",
    "host": "--host",
    "port": "--port",
    "tp_size": "--tp-size",
    "random_seed": "--random-seed",
    "enable_metrics": "--enable-metrics",
    "api_key": "--api-key",
    "max_running_requests": "--max-running-requests",
    "algorithm": "--speculative-algorithm",
    "draft_model_path": "--speculative-draft-model-path",
    "num_steps": "--speculative-num-steps",
    "eagle_topk": "--speculative-eagle-topk",
    "num_draft_tokens": "--speculative-num-draft-tokens",
}

#: Oldest first. Sources: 0.4.6.post5 ``python/sglang/srt/server_args.py::ServerArgs.add_cli_args`` (every flag in
#: ``SGLANG_FLAGS`` is an ``add_argument`` there; ``--cuda-graph-max-bs`` still exists; no console script in the wheel;
#: ``http_server.py`` serves only ``/get_server_info``). 0.5.23: ``python/sglang/srt/arg_groups/fields/*.py`` (flag =
#: ``"--" + field.replace("_", "-")``, ``arg_utils.py::_field_to_cli_name``), ``fields/exec_.py`` (only
#: ``cuda_graph_max_bs_decode``/``_prefill``), ``server_args.py`` (deprecated ``--disable-cuda-graph``,
#: ``--enable-dp-attention``), ``http_server.py`` (``/server_info``, deprecated ``/get_server_info``).
VERSIONS: tuple[SglangVersion, ...] = (
    SglangVersion(
        since="0.4.6.post5",
        console_script=False,
        server_info_paths=("/get_server_info",),
        flags=dict(SGLANG_FLAGS),
    ),
    SglangVersion(
        since="0.5.23",
        console_script=True,
        server_info_paths=("/server_info", "/get_server_info"),
        flags=dict(SGLANG_FLAGS),
        removed_flags={"--cuda-graph-max-bs": "--cuda-graph-max-bs-decode / --cuda-graph-max-bs-prefill"},
        deprecated_flags={
            "--disable-cuda-graph": "--cuda-graph-backend-decode=disabled --cuda-graph-backend-prefill=disabled",
            "--enable-dp-attention": "--attn-dp-size <dp-size>",
        },
    ),
)


#: The value each typed flag of SGLang's server takes, the same in 0.5.17 and 0.5.23: ``"int"``, ``"float"``
#: (argparse ``type=int``/``float``) or the tuple of its ``choices``. Recorded from the wheels'
#: ``python/sglang/srt/server_args.py`` (0.5.17) and ``python/sglang/srt/arg_groups/fields/*.py`` (0.5.23): the
#: fields ``A[int | float | Optional[...], ...]`` and ``Arg(choices=[...])`` literals, whose flag is
#: ``"--" + field.replace("_", "-")`` and whose argparse ``type=`` is ``arg_utils.py::_infer_type_func``; fields with
#: a ``type_parser``, ``nargs`` or ``action``, and choices that name a constant, are left out. A flag whose value
#: does not parse makes the server exit at once (a fresh-user trial: ``--max-running-requests abc``, dead in 0.3 s):
#: preflight rejects it first.
SGLANG_FLAG_TYPES: Mapping[str, str | tuple[str, ...]] = {
    "--asr-max-buffer-seconds": "int",
    "--asr-max-concurrent-sessions": "int",
    "--attn-cp-size": "int",
    "--base-gpu-id": "int",
    "--batch-notify-size": "int",
    "--chunked-prefill-size": "int",
    "--cp-strategy": ("zigzag", "interleave"),
    "--cpu-offload-gb": "int",
    "--cuda-graph-max-bs-decode": "int",
    "--cuda-graph-max-bs-prefill": "int",
    "--dcp-comm-backend": ("ag_rs", "a2a", "fi_a2a"),
    "--dcp-size": "int",
    "--decode-log-interval": "int",
    "--decoupled-spec-rank": "int",
    "--default-priority-value": "int",
    "--detokenizer-worker-num": "int",
    "--disaggregation-bootstrap-port": "int",
    "--disaggregation-decode-extra-slots": "int",
    "--disaggregation-decode-polling-interval": "int",
    "--dist-timeout": "int",
    "--dp-size": "int",
    "--dtype": ("auto", "half", "float16", "bfloat16", "float", "float32"),
    "--dwdp-size": "int",
    "--dynamic-batch-tokenizer-batch-size": "int",
    "--dynamic-batch-tokenizer-batch-timeout": "float",
    "--elastic-ep-initial-size": "int",
    "--elastic-ep-join-rank-offset": "int",
    "--elastic-ep-scale-timeout": "float",
    "--encoder-bootstrap-port": "int",
    "--engine-info-bootstrap-port": "int",
    "--ep-num-redundant-experts": "int",
    "--ep-size": "int",
    "--eplb-min-rebalancing-utilization-threshold": "float",
    "--eplb-rebalance-layers-per-chunk": "int",
    "--eplb-rebalance-num-iterations": "int",
    "--expert-distribution-recorder-buffer-size": "int",
    "--gc-warning-threshold-secs": "float",
    "--gpu-id-step": "int",
    "--grpc-port": "int",
    "--hicache-io-backend": ("direct", "kernel", "kernel_ascend"),
    "--hicache-mem-layout": ("layer_first", "page_first", "page_first_direct", "page_first_kv_split", "page_head"),
    "--hicache-ratio": "float",
    "--hicache-size": "int",
    "--hicache-storage-prefetch-policy": ("best_effort", "wait_complete", "timeout"),
    "--hicache-write-policy": ("write_back", "write_through", "write_through_selective"),
    "--int8-mamba-ckpt-size": "int",
    "--kt-cpuinfer": "int",
    "--kt-max-deferred-experts-per-token": "int",
    "--kt-num-gpu-experts": "int",
    "--kt-threadpool-count": "int",
    "--kv-canary": ("none", "log", "raise"),
    "--kv-canary-sweep-interval": "int",
    "--linear-replayssm-cache-len": "int",
    "--load-balance-method": ("auto", "round_robin", "follow_bootstrap_room", "total_requests", "total_tokens"),
    "--load-snapshot-publish-interval": "int",
    "--log-requests-format": ("text", "json"),
    "--log-requests-level": ("0", "1", "2", "3"),
    "--lora-drain-wait-threshold": "float",
    "--lora-eviction-policy": ("lru", "fifo"),
    "--mamba-cache-philox-rounds": "int",
    "--mamba-full-memory-ratio": "float",
    "--mamba-max-states-per-path": "int",
    "--mamba-ssm-dtype": ("float32", "bfloat16", "float16"),
    "--mamba-track-interval": "int",
    "--max-ep-size": "int",
    "--max-loaded-loras": "int",
    "--max-lora-chunk-size": ("16", "32", "64", "128"),
    "--max-lora-rank": "int",
    "--max-loras-per-batch": "int",
    "--max-mamba-cache-size": "int",
    "--max-queued-requests": "int",
    "--max-running-requests": "int",
    "--mem-fraction-static": "float",
    "--min-free-slots-delay": "int",
    "--mm-attention-backend": (
        "sdpa", "fa3", "fa4", "triton_attn", "ascend_attn", "aiter_attn", "flashinfer_cudnn", "amx_attn", "xpu_attn",
    ),
    "--mm-io-worker-num": "int",
    "--mm-processor-worker-num": "int",
    "--moe-dense-tp-size": "int",
    "--moe-dp-size": "int",
    "--nccl-port": "int",
    "--nnodes": "int",
    "--node-rank": "int",
    "--num-continuous-decode-steps": "int",
    "--num-reserved-decode-tokens": "int",
    "--offload-group-size": "int",
    "--offload-num-in-group": "int",
    "--offload-prefetch-step": "int",
    "--optimistic-prefill-attempts": "int",
    "--page-size": "int",
    "--port": "int",
    "--pp-async-batch-depth": "int",
    "--pp-max-micro-batch-size": "int",
    "--pp-size": "int",
    "--prefill-delayer-max-delay-ms": "float",
    "--prefill-delayer-max-delay-passes": "int",
    "--prefill-delayer-queue-min-ratio": "float",
    "--prefill-delayer-token-usage-low-watermark": "float",
    "--prefill-max-requests": "int",
    "--priority-scheduling-preemption-threshold": "int",
    "--random-seed": "int",
    "--remote-instance-weight-loader-seed-instance-service-port": "int",
    "--return-hidden-states-mode": ("last", "full"),
    "--sampling-defaults": ("openai", "model"),
    "--schedule-conservativeness": "float",
    "--scheduler-recv-interval": "int",
    "--sm-group-num": "int",
    "--smg-http-sidecar-port": "int",
    "--soft-watchdog-timeout": "float",
    "--speculative-accept-threshold-acc": "float",
    "--speculative-accept-threshold-single": "float",
    "--speculative-attention-mode": ("prefill", "decode"),
    "--speculative-dflash-block-size": "int",
    "--speculative-draft-window-size": "int",
    "--speculative-dspark-block-size": "int",
    "--speculative-eagle-topk": "int",
    "--speculative-ngram-capacity": "int",
    "--speculative-ngram-external-corpus-max-tokens": "int",
    "--speculative-ngram-external-sam-budget": "int",
    "--speculative-ngram-max-bfs-breadth": "int",
    "--speculative-ngram-max-trie-depth": "int",
    "--speculative-ngram-min-bfs-breadth": "int",
    "--speculative-num-draft-tokens": "int",
    "--speculative-num-steps": "int",
    "--stream-interval": "int",
    "--swa-full-tokens-ratio": "float",
    "--tbo-token-distribution-threshold": "float",
    "--tokenizer-backend": ("huggingface", "fastokens"),
    "--tokenizer-mode": ("auto", "slow"),
    "--tokenizer-worker-num": "int",
    "--torch-compile-max-bs": "int",
    "--tp-size": "int",
    "--triton-attention-num-kv-splits": "int",
    "--triton-attention-split-tile-size": "int",
    "--watchdog-timeout": "float",
    "--weight-cache-mode": ("off", "daemon", "client"),
    "--weight-cache-timeout": "int",
    "--weight-loader-prefetch-num-threads": "int",
}


def flag_value_issues(
    extra_args: Sequence[str], types: Mapping[str, str | tuple[str, ...]], engine: str
) -> list[FlagIssue]:
    """Errors for values in ``extra_args`` that ``types`` (:data:`SGLANG_FLAG_TYPES`) says the server cannot parse,
    as its argparse would: ``int(value)``, ``float(value)``, or a value not among the choices. Both spellings are
    read, ``["--flag", "value"]`` and ``"--flag=value"``; a typed flag with no value after it is left to the server.

    Example: ``["--max-running-requests", "abc"]`` -> an error at ``extra_args`` naming the flag, ``'abc'`` and
    "an integer".
    """
    issues: list[FlagIssue] = []
    for i, arg in enumerate(extra_args):
        flag, eq, inline = arg.partition("=")
        kind = types.get(flag)
        if kind is None or not flag.startswith("--"):
            continue
        if eq:
            value = inline
        elif i + 1 < len(extra_args) and not extra_args[i + 1].startswith("--"):
            value = extra_args[i + 1]
        else:
            continue
        if isinstance(kind, tuple):
            if value in kind:
                continue
            expected = "one of " + ", ".join(kind)
        else:
            try:
                (int if kind == "int" else float)(value)
                continue
            except ValueError:
                expected = "an integer" if kind == "int" else "a number"
        issues.append(
            FlagIssue("error", "extra_args", arg if eq else f"{flag} {value}",
                      f"{engine}'s {flag} takes {expected}, got {value!r}; the server would exit at startup",
                      f"give {flag} {expected}")
        )  # fmt: skip
    return issues


#: SGLang's multi-node flags, the same in every release we support (0.5.23:
#: ``python/sglang/srt/arg_groups/fields/parallel.py`` fields ``nnodes``, ``node_rank``, ``dist_init_addr`` with the
#: alias ``--nccl-init-addr``; 0.4.6: ``server_args.py::add_cli_args``). ``tp_size`` is the total over all nodes.
MULTINODE_FLAGS = {"nnodes": "--nnodes", "node_rank": "--node-rank", "dist_init_addr": "--dist-init-addr"}

#: What a rank other than 0 logs once its schedulers joined torch.distributed and loaded the weights: it then
#: serves only /health (``entrypoints/engine.py::_launch_subprocesses`` -> ``utils/common.py::
#: launch_dummy_health_check_server``: "Starting dummy health check server at H:P", or "Dummy health check server
#: scheduled on existing loop at H:P" when an event loop already runs).
NODE_JOINED = re.compile(r"Starting dummy health check server at |Dummy health check server scheduled on ")
#: What every rank logs before it blocks in torch.distributed's rendezvous (``model_executor/model_runner.py::
#: init_torch_distributed``): a rank without it never got that far (launcher, host, environment).
NODE_RENDEZVOUS = re.compile(r"Init torch distributed begin")


def version_row(version: str | None) -> SglangVersion:
    """The ``VERSIONS`` row for an installed version: the newest row with ``since <= version``.

    Older than every row -> the oldest row; None or unparsable -> the newest row.
    """
    try:
        parsed = Version(version) if version else None
    except InvalidVersion:
        parsed = None
    if parsed is None:
        return VERSIONS[-1]
    chosen = VERSIONS[0]
    for row in VERSIONS:
        if Version(row.since) <= parsed:
            chosen = row
    return chosen


@functools.cache
def probe_sglang_version(python: str, env: tuple[tuple[str, str], ...] = ()) -> str | None:
    """The sglang version installed for interpreter ``python``, via ``importlib.metadata`` in a subprocess.

    Never imports sglang (its import takes seconds and needs CUDA). Runs in the environment the server will get
    (``clean_env(dict(env))``: pass the profile's ``env:`` items), so an sglang reachable only through the profile's
    PYTHONPATH is found. Cached per (interpreter, env) for the process (``probe_sglang_version.cache_clear()``).

    :returns: e.g. ``"0.5.23"``; None when the interpreter cannot run or sglang is not installed there.
    """
    code = "import importlib.metadata as m; print(m.version('sglang'))"
    try:
        done = subprocess.run(
            [python, "-c", code], capture_output=True, text=True, timeout=PROBE_TIMEOUT_S, env=clean_env(dict(env))
        )
    except (OSError, subprocess.SubprocessError):
        return None
    out = done.stdout.strip().splitlines()
    return out[-1].strip() if done.returncode == 0 and out else None


@dataclass(frozen=True, slots=True)
class DecodeLine:
    """One scheduler "Decode batch" log line; None where the line has no such field."""

    accept_length: float | None
    accept_rate: float | None
    cuda_graph: bool | None
    gen_tok_s: float | None


_DECODE_FIELDS = {
    "accept_length": re.compile(r"accept len: ([\d.]+)"),
    "accept_rate": re.compile(r"accept rate: ([\d.]+)"),
    "cuda_graph": re.compile(r"cuda graph: (True|False)"),
    "gen_tok_s": re.compile(r"gen throughput \(token/s\): ([\d.]+)"),
}


def parse_decode_line(line: str) -> DecodeLine | None:
    """Parse SGLang's periodic decode log line (``scheduler_components/metrics_reporter.py``), any release.

    0.5.23: ``Decode batch, #running-req: 1, #token: 90, token usage: 0.00, accept len: 2.63, accept rate: 0.54, cuda
    graph: True, gen throughput (token/s): 130.20, #queue-req: 0``; older releases print ``Decode batch.`` and no
    accept rate, and runs without speculation have no accept fields, so each field is matched on its own.

    :returns: None when ``line`` is not a decode line.
    """
    if "Decode batch" not in line:
        return None
    found = {name: rx.search(line) for name, rx in _DECODE_FIELDS.items()}

    def number(name: str) -> float | None:
        m = found[name]
        return float(m.group(1)) if m else None

    graph = found["cuda_graph"]
    return DecodeLine(
        accept_length=number("accept_length"),
        accept_rate=number("accept_rate"),
        cuda_graph=None if graph is None else graph.group(1) == "True",
        gen_tok_s=number("gen_tok_s"),
    )


_GRAPH_OFF_FLAGS = ("--disable-cuda-graph", "--disable-decode-cuda-graph")


def graph_warning(profile: Profile, log_text: str) -> str | None:
    """A warning when decode ran without CUDA graphs although the profile does not turn them off (a silent 10-30%
    throughput loss on GPUs: graph capture failed or the batch exceeded the captured sizes); None otherwise."""
    args = " ".join(profile.extra_args)
    if any(flag in args for flag in _GRAPH_OFF_FLAGS) or "cuda-graph-backend-decode=disabled" in args.replace(" ", "="):
        return None
    lines = [d for d in map(parse_decode_line, log_text.splitlines()) if d is not None and d.cuda_graph is not None]
    without = sum(1 for d in lines if not d.cuda_graph)
    if not without:
        return None
    return (
        f"profile {profile.name}: {without} of {len(lines)} 'Decode batch' log lines say 'cuda graph: False' although "
        "the profile does not disable CUDA graphs (capture failed, or batches exceed --cuda-graph-max-bs-decode)"
    )


def node_flag_issues(profile: Profile) -> list[FlagIssue]:
    """Errors for :data:`MULTINODE_FLAGS` (or ``--nccl-init-addr``) in ``extra_args`` of a profile with ``nodes:``,
    which sets them per rank: a copy in ``extra_args`` would give every rank the same rank."""
    if profile.nodes is None:
        return []
    return [
        FlagIssue("error", "extra_args", flag_name(arg), "nodes: sets the multi-node flags for every rank",
                  f"remove {flag_name(arg)} from extra_args")
        for arg in profile.extra_args
        if flag_name(arg) in (*MULTINODE_FLAGS.values(), "--nccl-init-addr")
    ]  # fmt: skip


#: Algorithms whose steps/topk/draft tokens SGLang resolves in ``_handle_eagle_family`` (NEXTN is EAGLE there).
EAGLE_FAMILY = ("EAGLE", "EAGLE3", "NEXTN", "STANDALONE")
#: SGLang's alias: ``--speculative-algorithm NEXTN`` runs, and reports, EAGLE (``spec_registry.py``).
ALGORITHM_ALIASES: Mapping[str, str] = {"NEXTN": "EAGLE"}


def sglang_speculative_issues(profile: Profile, *, target_arch: str | None) -> list[FlagIssue]:
    """Preflight rule 4 for SGLang (and the reference server, which resolves its flags the same way): steps / topk /
    draft tokens all three or none, and what SGLang will really run.

    Source: SGLang 0.5.23 ``arg_groups/speculative_hook.py::_handle_eagle_family`` (partial sets hit a bare assert;
    topk=1 rewrites draft tokens to steps+1) and ``_auto_choose_speculative_params`` (defaults by target
    architecture).

    :param target_arch: the target's ``architectures[0]``; None when its config.json was not read.
    """
    spec = profile.speculative
    if spec is None or spec.algorithm not in EAGLE_FAMILY:
        return []
    triple = {"num_steps": spec.num_steps, "eagle_topk": spec.eagle_topk, "num_draft_tokens": spec.num_draft_tokens}
    given = {k: v for k, v in triple.items() if v is not None}
    if not given:
        arch = target_arch or "?"
        auto = "(5, 4, 8)" if arch in ("LlamaForCausalLM", "Grok1ForCausalLM", "Grok1VForCausalLM") else "(3, 1, 4)"
        return [FlagIssue("note", "speculative", None,
                          f"steps/topk/draft tokens not set; SGLang picks {auto} for target architecture {arch} and "
                          "may change that choice between releases",
                          "set all three to pin what is measured")]  # fmt: skip
    if len(given) < 3:
        missing = [k for k in triple if k not in given]
        return [FlagIssue("error", f"speculative.{missing[0]}", None,
                          f"num_steps, eagle_topk and num_draft_tokens must be set together (missing "
                          f"{', '.join(missing)}); SGLang aborts with a bare AssertionError otherwise",
                          "set all three, or none to let SGLang choose")]  # fmt: skip
    steps, topk, tokens = given["num_steps"], given["eagle_topk"], given["num_draft_tokens"]
    if topk == 1 and tokens != steps + 1:
        return [FlagIssue("warning", "speculative.num_draft_tokens", tokens,
                          f"with eagle_topk 1 SGLang overwrites num_draft_tokens with num_steps + 1 = {steps + 1}, so "
                          f"it will run steps {steps}, topk 1, draft tokens {steps + 1}",
                          f"set num_draft_tokens: {steps + 1}")]  # fmt: skip
    if topk > 1 and tokens > topk * steps + 1:
        return [FlagIssue("error", "speculative.num_draft_tokens", tokens,
                          f"a draft tree of {steps} steps x topk {topk} holds at most topk*steps+1 = "
                          f"{topk * steps + 1} tokens",
                          f"set num_draft_tokens <= {topk * steps + 1} or raise num_steps/eagle_topk")]  # fmt: skip
    return []


class SglangEngine(GpuEngine):
    """SGLang (``server: sglang``): implements ``engines.base.Engine``."""

    name = "sglang"
    #: How this engine itself states accept length (``RunMetrics.accept_length_native``): the per-request
    #: ``meta_info.spec_accept_length`` convention (``tokenizer_manager.py``), which counts the prefill token.
    native_accept_length = "Σcompletion_tokens / Σspec_verify_ct"
    #: Explicit aux id i = output of layer i (``python/sglang/srt/models/llama.py::set_eagle3_layers_to_capture``).
    aux_id_convention: AuxIdConvention = "sglang"
    #: Stock SGLang crashes on id -1 at the first forward (measured on 0.5.17: ``tests/data/sglang/0.5.17/
    #: eagle3-aux-minus1.log``, residual None before layer 0 in ``models/llama.py``).
    crashes_on_embedding_capture = True

    # ----------------------------------------------------------------- launch
    def prepare(self, profile: Profile, *, work_dir: Path, draft_path: Path | None) -> Path | None:
        """Nothing to write: SGLang loads the draft directory as it is. :returns: ``draft_path``."""
        return draft_path

    def version(self, profile: Profile) -> str | None:
        """The SGLang version that will run (``probe_sglang_version``)."""
        return probe_sglang_version(self.python(profile), tuple(sorted(profile.env.items())))

    def row(self, profile: Profile) -> SglangVersion:
        """The flag table row for the version that will run."""
        return version_row(self.version(profile))

    def head(self, profile: Profile, env: Mapping[str, str]) -> list[str]:
        """``[<bin>/sglang, "serve"]`` when the release has the console script and it is found next to the
        interpreter or on ``env["PATH"]``; else ``[<python>, "-m", "sglang.launch_server"]``
        (``python/sglang/launch_server.py``; still supported in 0.5.23 with a warning).

        :raises ProfileError: sglang is not installed for that interpreter.
        """
        python = self.python(profile)
        version = self.version(profile)
        if version is None:
            raise ProfileError(
                f"{profile.source or '<profile>'}: profiles.{profile.name}.python: sglang is not installed for "
                f"{python} (importlib.metadata found no 'sglang'); set python: to the interpreter of the "
                "environment that has it, or pip install 'sglang>=0.5.23' there",
                path=profile.source or None,
                profile=profile.name,
            )
        if version_row(version).console_script:
            beside = Path(python).parent / "sglang"
            if beside.is_file() and os.access(beside, os.X_OK):
                return [str(beside), "serve"]
            found = shutil.which("sglang", path=env.get("PATH"))
            if found:
                return [found, "serve"]
        return [python, "-m", "sglang.launch_server"]

    def env(self, profile: Profile) -> dict[str, str]:
        """``clean_env(profile.env)``."""
        return clean_env(profile.env)

    def launch_spec(self, profile: Profile, *, port: int, draft_path: Path | None) -> LaunchSpec:
        """argv and env for ``profile`` on ``port``.

        argv: head, ``--model-path M --host H --port P --tp-size N --random-seed S``, the speculative flags
        (algorithm, draft path, then steps/topk/draft tokens always together), ``--max-running-requests`` when set,
        ``--enable-metrics`` unless ``enable_metrics: false``, ``--api-key`` when set, then ``extra_args`` verbatim.

        :param draft_path: the draft directory to pass instead of the profile's (an aux-id overlay).
        :raises ProfileError: sglang missing for the interpreter; only some of steps/topk/draft tokens set (SGLang
            0.5.23 would abort with a bare AssertionError, ``arg_groups/speculative_hook.py::_handle_eagle_family``);
            ``api_key_env`` unset.
        """
        env = self.env(profile)
        argv = [*self.head(profile, env), *self.server_args(profile, port=port, draft_path=draft_path)]
        draft = draft_path if draft_path is not None else _draft_of(profile)
        return LaunchSpec(
            argv=tuple(argv),
            env=env,
            host=profile.host,
            port=port,
            draft_path=Path(draft) if draft is not None else None,
        )

    def node_launch_spec(
        self,
        profile: Profile,
        *,
        rank: int,
        host: str,
        port: int,
        dist_init_addr: str,
        draft_path: Path | None,
    ) -> LaunchSpec:
        """argv and env of one rank of a multi-node server: ``launch_spec`` with ``--host`` set to the rank's host and
        :data:`MULTINODE_FLAGS` (``--nnodes N --node-rank R --dist-init-addr H:P``) before ``extra_args``.

        :param rank: 0 .. ``len(profile.nodes.hosts) - 1``; rank 0 serves the HTTP API, the others only /health.
        :param dist_init_addr: ``hosts[0]:port`` where rank 0 hosts torch.distributed's rendezvous.
        :raises ProfileError: as ``launch_spec``; the profile has no ``nodes:``.
        """
        if profile.nodes is None:
            raise ProfileError(f"profiles.{profile.name}: node_launch_spec needs nodes:", profile=profile.name)
        spec = self.launch_spec(profile.model_copy(update={"host": host}), port=port, draft_path=draft_path)
        cut = len(spec.argv) - len(profile.extra_args)
        node = [
            MULTINODE_FLAGS["nnodes"], str(len(profile.nodes.hosts)),
            MULTINODE_FLAGS["node_rank"], str(rank),
            MULTINODE_FLAGS["dist_init_addr"], dist_init_addr,
        ]  # fmt: skip
        return LaunchSpec(
            argv=(*spec.argv[:cut], *node, *spec.argv[cut:]),
            env=spec.env,
            host=host,
            port=port,
            draft_path=spec.draft_path,
        )

    def node_joined(self, log_text: str) -> bool:
        """Whether a non-leader rank's log says it joined (:data:`NODE_JOINED`)."""
        return NODE_JOINED.search(log_text) is not None

    def node_at_rendezvous(self, log_text: str) -> bool:
        """Whether a rank's log says it reached torch.distributed's rendezvous (:data:`NODE_RENDEZVOUS`)."""
        return NODE_RENDEZVOUS.search(log_text) is not None

    def server_args(self, profile: Profile, *, port: int, draft_path: Path | None) -> list[str]:
        """The flags after the head (see ``launch_spec``), spelled for the version that will run."""
        flags = self.row(profile).flags
        if profile.model_path is None:
            raise ProfileError(
                f"{profile.source or '<profile>'}: profiles.{profile.name}.model_path: required to launch a server",
                path=profile.source or None,
                profile=profile.name,
            )
        args = [
            flags["model_path"], profile.model_path,
            flags["host"], profile.host,
            flags["port"], str(port),
            flags["tp_size"], str(profile.tp_size),
            flags["random_seed"], str(profile.random_seed),
        ]  # fmt: skip
        spec = profile.speculative
        if spec is not None:
            args += [flags["algorithm"], spec.algorithm]
            draft = draft_path if draft_path is not None else spec.draft_model_path
            if draft is not None:
                args += [flags["draft_model_path"], str(draft)]
            triple = {
                "num_steps": spec.num_steps,
                "eagle_topk": spec.eagle_topk,
                "num_draft_tokens": spec.num_draft_tokens,
            }
            given = [k for k, v in triple.items() if v is not None]
            if given and len(given) < 3:
                missing = ", ".join(f"speculative.{k}" for k in triple if k not in given)
                raise ProfileError(
                    f"{profile.source or '<profile>'}: profiles.{profile.name}.speculative: num_steps, eagle_topk "
                    f"and num_draft_tokens must be set together or not at all; missing {missing}",
                    path=profile.source or None,
                    profile=profile.name,
                )
            for key, value in triple.items():
                if value is not None:
                    args += [flags[key], str(value)]
        if profile.max_running_requests is not None:
            args += [flags["max_running_requests"], str(profile.max_running_requests)]
        if profile.enable_metrics:
            args.append(flags["enable_metrics"])
        api_key = resolve_api_key(profile)
        if api_key is not None:
            args += [flags["api_key"], api_key]
        return [*args, *profile.extra_args]

    def flag_issues(self, profile: Profile) -> list[FlagIssue]:
        """Problems in ``extra_args``/``env`` for the SGLang version that will run (preflight rules 6 and 7).

        - a flag the version removed -> error naming the replacement; a deprecated flag -> warning;
        - ``NCCL_NVLS_ENABLE`` in ``env`` while ``--enable-nccl-nvls``/``--enable-symm-mem`` is passed -> warning:
          SGLang forces it to 1 (``python/sglang/srt/entrypoints/engine.py::_set_envs_and_config``).
        """
        version = self.version(profile)
        row = version_row(version)
        shown = version or f"unknown (assumed {row.since})"
        issues: list[FlagIssue] = []
        if version is None:
            issues.append(
                FlagIssue("note", "python", self.python(profile),
                          f"could not read the sglang version for this interpreter; flag checks assume {row.since}",
                          "set python: to the interpreter of the environment that has sglang")
            )  # fmt: skip
        for arg in profile.extra_args:
            flag = flag_name(arg)
            if flag in row.removed_flags:
                issues.append(
                    FlagIssue("error", "extra_args", arg, f"SGLang {shown} has no flag {flag}",
                              f"use {row.removed_flags[flag]}")
                )  # fmt: skip
            elif flag in row.deprecated_flags:
                issues.append(
                    FlagIssue("warning", "extra_args", arg, f"{flag} is deprecated in SGLang {shown}",
                              f"use {row.deprecated_flags[flag]}")
                )  # fmt: skip
        issues += node_flag_issues(profile)
        issues += flag_value_issues(profile.extra_args, SGLANG_FLAG_TYPES, "SGLang")
        forcing = [a for a in profile.extra_args if flag_name(a) in ("--enable-nccl-nvls", "--enable-symm-mem")]
        if forcing and "NCCL_NVLS_ENABLE" in profile.env:
            issues.append(
                FlagIssue("warning", "env.NCCL_NVLS_ENABLE", profile.env["NCCL_NVLS_ENABLE"],
                          f"{flag_name(forcing[0])} makes SGLang force NCCL_NVLS_ENABLE=1, so this value is ignored",
                          f"drop NCCL_NVLS_ENABLE from env or drop {flag_name(forcing[0])}")
            )  # fmt: skip
        return issues

    def speculative_issues(self, profile: Profile, *, target_arch: str | None) -> list[FlagIssue]:
        """:func:`sglang_speculative_issues` (preflight rule 4)."""
        return sglang_speculative_issues(profile, target_arch=target_arch)

    def max_tokens_per_step(self, profile: Profile) -> int | None:
        """``num_steps + 1`` when an EAGLE-family profile sets all of steps/topk/draft tokens; None when SGLang
        chooses them (``_auto_choose_speculative_params``), for a partial set, and without speculation."""
        spec = profile.speculative
        if spec is None or spec.algorithm not in EAGLE_FAMILY or spec.num_steps is None:
            return None
        if spec.eagle_topk is None or spec.num_draft_tokens is None:
            return None
        return spec.num_steps + 1

    def speculative_at(self, profile: Profile, point: Mapping[str, int], *, label: str) -> SpeculativeConfig:
        """``common.chain_speculative_at`` (SGLang overwrites draft tokens with steps + 1 at topk 1)."""
        return chain_speculative_at(profile, point, label=label, engine="SGLang")

    def expected_config(self, profile: Profile) -> dict[str, object]:
        """The algorithm (:data:`ALGORITHM_ALIASES` applied: NEXTN reports EAGLE) and, when ``num_steps`` is set,
        steps, topk and draft tokens, with SGLang's rewrite of draft tokens to steps + 1 at topk 1
        (``speculative_hook.py::_handle_eagle_family``; preflight warns about it)."""
        spec = profile.speculative
        if spec is None:
            return {}
        expected: dict[str, object] = {
            "speculative_algorithm": ALGORITHM_ALIASES.get(spec.algorithm, spec.algorithm)
        }
        if spec.num_steps is not None:
            expected["num_steps"] = spec.num_steps
            expected["eagle_topk"] = spec.eagle_topk
            expected["num_draft_tokens"] = spec.num_steps + 1 if spec.eagle_topk == 1 else spec.num_draft_tokens
        return expected

    def log_warnings(self, profile: Profile, log_text: str) -> list[str]:
        """Warnings read from the server log after a measured run (decode without CUDA graphs)."""
        warning = graph_warning(profile, log_text)
        return [warning] if warning else []

    # ------------------------------------------------------------- readiness
    def probe_ready(self, client: httpx.Client, profile: Profile) -> bool:
        """``GET /health_generate`` is 200 (503 until SGLang's warmup is done, ``http_server.py::health_generate``),
        then one ``POST /generate`` with ``max_new_tokens`` 1 answers 200 with a ``text`` field
        (``common.probe_health_then_generate``)."""
        body = {"text": "Hello", "sampling_params": {"max_new_tokens": 1, "temperature": 0.0}}
        return probe_health_then_generate(
            client, profile, health_path="/health_generate", generate_path="/generate", body=body,
            generated=lambda data: isinstance(data, dict) and "text" in data,
        )  # fmt: skip

    # --------------------------------------------------------------- readback
    def server_info(self, client: httpx.Client, profile: Profile) -> dict[str, Any]:
        """The server-info JSON: ``GET /server_info``, on 404 ``/get_server_info`` (releases before it existed).

        :raises ServerError: neither answers 200 with a JSON object.
        """
        headers = auth_headers(profile)
        last = ""
        for path in ("/server_info", "/get_server_info"):
            try:
                resp = client.get(path, headers=headers, timeout=GENERATE_TIMEOUT_S)
            except httpx.HTTPError as exc:
                raise ServerError(f"GET {path}: {exc}", profile=profile.name) from None
            if resp.status_code == 404:
                last = f"GET {path}: HTTP 404"
                continue
            if resp.status_code != 200:
                raise ServerError(f"GET {path}: HTTP {resp.status_code}: {resp.text[:200]}", profile=profile.name)
            try:
                info = resp.json()
            except ValueError:
                info = None
            if not isinstance(info, dict):
                raise ServerError(f"GET {path}: expected a JSON object, got {resp.text[:200]!r}", profile=profile.name)
            return info
        raise ServerError(f"{last}; the server has neither /server_info nor /get_server_info", profile=profile.name)

    def effective_config(self, client: httpx.Client, profile: Profile) -> EffectiveConfig:
        """What the server resolved: top-level ``/server_info`` fields ``version``, ``speculative_algorithm``,
        ``speculative_num_steps``, ``speculative_eagle_topk``, ``speculative_num_draft_tokens``,
        ``max_running_requests`` (``ServerArgs.resolved_dict`` + ``version`` in ``http_server.py::server_info``);
        ``max_running_requests`` falls back to ``internal_states[0].effective_max_running_requests_per_dp``
        (``managers/scheduler_components/internal_state.py``).

        :raises ServerError: see ``server_info``.
        """
        info = self.server_info(client, profile)
        states = info.get("internal_states")
        first = states[0] if isinstance(states, list) and states and isinstance(states[0], dict) else {}
        mrr = info.get("max_running_requests")
        if mrr is None:
            mrr = first.get("effective_max_running_requests_per_dp")
        return EffectiveConfig(
            version=_str_or_none(info.get("version")),
            speculative_algorithm=_str_or_none(info.get("speculative_algorithm")),
            num_steps=_int_or_none(info.get("speculative_num_steps")),
            eagle_topk=_int_or_none(info.get("speculative_eagle_topk")),
            num_draft_tokens=_int_or_none(info.get("speculative_num_draft_tokens")),
            max_running_requests=_int_or_none(mrr),
            raw=info,
        )

    def counters(self, metrics_text: str) -> SpecCounters:
        """``sglang:generation_tokens_total`` and ``sglang:spec_verify_calls_total`` summed over label sets
        (``python/sglang/srt/observability/metrics_collector.py::TokenizerMetricsCollector``; the verify counter is
        absent before 0.5 and until the first speculative request finishes -> None).

        :raises ValueError: the text is not Prometheus exposition format.
        """
        totals = sum_samples(metrics_text)
        return SpecCounters(
            generation_tokens=totals.get("sglang:generation_tokens_total"),
            verify_calls=totals.get("sglang:spec_verify_calls_total"),
        )

    # ------------------------------------------------------------ measured phase
    def reset_prefix_cache(self, client: httpx.Client, profile: Profile) -> str:
        """``POST /flush_cache`` (``http_server.py::flush_cache`` -> ``Scheduler.flush_cache``): empties the radix
        (prefix) cache and resets the scheduler's speculative totals (``reset_metrics``), so
        :meth:`scheduler_accept_length` then covers only what follows. SGLang refuses with HTTP 400 while requests
        are in flight; that is retried for ``base.CACHE_RESET_RETRY_S``.

        :returns: see ``base.post_reset``.
        """
        return post_reset(client, "/flush_cache", auth_headers(profile), busy_status=400)

    def start_trace(self, client: httpx.Client, profile: Profile, out_dir: Path) -> str | None:
        """``POST /start_profile`` with ``output_dir``, ``activities`` and ``profile_prefix`` (``http_server.py`` ->
        ``TokenizerManager.start_profile``; body ``managers/io_struct.py::ProfileReq``, same in 0.5.17 and 0.5.23).
        SGLang writes its PyTorch profiler trace there on ``/stop_profile``; the reference server writes a Chrome
        trace of its draft and verify spans. ``with_stack`` and ``record_shapes`` off: SGLang's default records the
        Python stack of every call (``scheduler_components/profiler_manager.py``), which on an H200 slowed the tiny
        pair's speculative cycle from ~3 to 9.9 ms and made the trace 12 MB for 4 requests; the spans read
        (``measure.trace_split``) need neither."""
        assert profile.trace is not None
        body: dict[str, object] = {
            "output_dir": str(out_dir),
            "activities": list(profile.trace.activities),
            "profile_prefix": profile.name,
            "with_stack": False,
            "record_shapes": False,
        }
        return post_profiler(client, "/start_profile", auth_headers(profile), body)

    def stop_trace(self, client: httpx.Client, profile: Profile) -> str | None:
        """``POST /stop_profile``."""
        return post_profiler(client, "/stop_profile", auth_headers(profile), None)

    def scheduler_accept_length(self, client: httpx.Client, profile: Profile) -> float | None:
        """``/server_info`` -> ``internal_states[0].avg_spec_accept_length``: the scheduler's accepted tokens
        (accepted drafts + 1 bonus per step) / verify forwards since the last ``/flush_cache``
        (``scheduler_components/metrics_reporter.py``: ``spec_num_accept_tokens += num_correct_drafts + bs``). It is
        counted by the scheduler, not from the per-request ``meta_info`` the client reads, so it is an independent
        check; it is folded in every ``--decode-log-interval`` (40) decode iterations, so the last < 40 iterations
        are missing from it. None when absent (no window folded yet) or unreadable.
        """
        try:
            info = self.server_info(client, profile)
        except ServerError:
            return None
        states = info.get("internal_states")
        first = states[0] if isinstance(states, list) and states and isinstance(states[0], dict) else {}
        value = first.get("avg_spec_accept_length")
        return float(value) if isinstance(value, int | float) and not isinstance(value, bool) and value > 0 else None


def _draft_of(profile: Profile) -> str | None:
    return profile.speculative.draft_model_path if profile.speculative is not None else None


def _int_or_none(value: Any) -> int | None:
    return int(value) if isinstance(value, int | float) and not isinstance(value, bool) else None


def _str_or_none(value: Any) -> str | None:
    return str(value) if value is not None else None
