"""The reference server's command line: SGLang 0.5.23 flag names, parsing, and SGLang's speculative arg resolution.

Flag names, defaults and rewrites follow ``sglang serve`` (``python/sglang/srt/arg_groups/fields/*.py`` and
``arg_groups/speculative_hook.py::_handle_eagle_family``). Flags the reference server does not implement are rejected
with exit status 2 and a message naming the flag. The resolved values are what ``/server_info`` reports.
"""

from __future__ import annotations

import argparse
import logging
import random
import sys
from dataclasses import asdict, dataclass, fields
from typing import NoReturn

__all__ = [
    "ArgsError",
    "ServerArgs",
    "build_parser",
    "parse_args",
    "resolve_args",
]

logger = logging.getLogger("pytest_specdec.refserver")

#: Algorithms the reference server runs (after SGLang's alias ``NEXTN`` -> ``EAGLE``).
SUPPORTED_ALGORITHMS = ("EAGLE", "EAGLE3")
#: SGLang 0.5.23 builtins (``--speculative-algorithm`` help text); the rest raise ValueError as in ``spec_info.py``.
SGLANG_BUILTIN_ALGORITHMS = ("EAGLE", "EAGLE3", "NEXTN", "STANDALONE", "NGRAM", "DFLASH", "DSPARK", "UNO")

TOPK_WARNING = "speculative_num_draft_tokens is adjusted to speculative_num_steps + 1 when speculative_eagle_topk == 1"
MAX_RUNNING_WARNING = (
    "Max running requests is reset to 48 for speculative decoding. "
    "You can override this by explicitly setting --max-running-requests."
)


class ArgsError(Exception):
    """A flag combination the reference server cannot run; ``__main__`` prints it and exits with status 2."""


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> NoReturn:
        self.print_usage(sys.stderr)
        self.exit(2, f"{self.prog}: error: {message}\n")


@dataclass(frozen=True, slots=True)
class ServerArgs:
    """Resolved server arguments (field names = SGLang ``ServerArgs`` names, reported by ``/server_info``)."""

    model_path: str
    tokenizer_path: str
    served_model_name: str
    host: str
    port: int
    api_key: str | None
    random_seed: int
    log_level: str
    decode_log_interval: int
    enable_metrics: bool
    max_running_requests: int | None
    skip_server_warmup: bool
    tp_size: int
    speculative_algorithm: str | None
    speculative_draft_model_path: str | None
    speculative_num_steps: int | None
    speculative_eagle_topk: int | None
    speculative_num_draft_tokens: int | None
    #: What aux layer id -1 (capture index 0, the embedding output) does: "stock" = as stock SGLang 0.5.17 on an
    #: H200 (scheduler raises TypeError on the first forward, then the server kills itself; recorded in
    #: tests/data/sglang/0.5.17/eagle3-aux-minus1.log), "patched" = serve it, as the patched SGLang of the original
    #: incident did (accept length drops instead).
    ref_embedding_capture: str = "stock"
    #: SGLang's ``--speculative-draft-window-size``: the drafter attends to the most recent N keys only.
    speculative_draft_window_size: int | None = None
    # Test affordances (reference-server only, all off by default).
    ref_fault_oom_at_startup: float | None = None
    ref_fault_never_ready: bool = False
    ref_fault_slow_start: float | None = None
    ref_fault_stall_after_tokens: int | None = None
    ref_fault_die_after_requests: int | None = None
    ref_fault_orphan: bool = False
    ref_fault_hold_port: int | None = None
    ref_fault_verify_delay_ms: float | None = None
    # Multi-node (SGLang arg_groups/fields/parallel.py: nnodes, node_rank, dist_init_addr); see refserver.nodes.
    nnodes: int = 1
    node_rank: int = 0
    dist_init_addr: str | None = None
    ref_fault_node_never_join: int | None = None
    ref_fault_node_exit: str | None = None

    @property
    def speculative(self) -> bool:
        return self.speculative_algorithm is not None

    def public_dict(self) -> dict:
        """The fields ``/server_info`` reports at top level (the api key is redacted as SGLang's is not shown)."""
        out = asdict(self)
        out["api_key"] = None if self.api_key is None else "<redacted>"
        return out


def build_parser() -> argparse.ArgumentParser:
    """The argparse parser; ``--help`` lists the SGLang flags, then the "test affordances" group."""
    p = _Parser(
        prog="python -m pytest_specdec.refserver",
        description="The pytest-specdec reference server: a tiny Llama target + EAGLE-3 draft on CPU behind "
        "SGLang 0.5.23's HTTP API. Flags are a subset of `sglang serve`.",
    )
    p.add_argument("--model-path", "--model", dest="model_path", required=True, help="Target model directory.")
    p.add_argument("--tokenizer-path", default=None, help="Tokenizer directory (default: --model-path).")
    p.add_argument("--served-model-name", default=None, help="Model name in API responses (default: --model-path).")
    p.add_argument("--host", default="127.0.0.1")
    p.add_argument("--port", type=int, default=30000)
    p.add_argument("--api-key", default=None, help="Require `Authorization: Bearer KEY` (not on /health*, /ready, "
                   "/metrics).")
    p.add_argument("--random-seed", type=int, default=None, help="Sampling seed (default: random in [0, 2^30)).")
    p.add_argument("--log-level", default="info", choices=["debug", "info", "warning", "error", "critical"])
    p.add_argument("--decode-log-interval", type=int, default=40,
                   help="Decode iterations between 'Decode batch' log lines and accept-length folds (default: 40).")
    p.add_argument("--enable-metrics", action="store_true", help="Serve Prometheus /metrics.")
    p.add_argument("--max-running-requests", type=int, default=None)
    p.add_argument("--skip-server-warmup", action="store_true")
    p.add_argument("--tp-size", "--tensor-parallel-size", dest="tp_size", type=int, default=1,
                   help="1, or --nnodes in node mode (one CPU process per node).")
    nodes = p.add_argument_group(
        "multi-node (stand-in)",
        "SGLang's multi-node flags. Rank 0 serves HTTP once every rank registered at --dist-init-addr; other ranks "
        "register, then answer /health like SGLang's non-zero ranks (see refserver.nodes).",
    )
    nodes.add_argument("--nnodes", type=int, default=1, help="The number of nodes.")
    nodes.add_argument("--node-rank", type=int, default=0, help="The node rank.")
    nodes.add_argument("--dist-init-addr", "--nccl-init-addr", dest="dist_init_addr", default=None,
                       help="HOST:PORT where rank 0 listens for the other ranks.")
    spec = p.add_argument_group("speculative decoding")
    spec.add_argument("--speculative-algorithm", type=str.upper, default=None,
                      help="EAGLE3, EAGLE or NEXTN (-> EAGLE). Chain drafting (topk 1) only.")
    spec.add_argument("--speculative-draft-model-path", "--speculative-draft-model",
                      dest="speculative_draft_model_path", default=None)
    spec.add_argument("--speculative-num-steps", type=int, default=None)
    spec.add_argument("--speculative-eagle-topk", type=int, default=None)
    spec.add_argument("--speculative-num-draft-tokens", type=int, default=None)
    spec.add_argument("--ref-embedding-capture", choices=["stock", "patched"], default="stock",
                      help="Aux layer id -1 (the embedding output): 'stock' crashes on the first forward like stock "
                      "SGLang 0.5.17 (scheduler TypeError, then the server kills itself); 'patched' serves it like the "
                      "patched SGLang of the incident this project comes from (default: stock).")
    spec.add_argument("--speculative-draft-window-size", type=int, default=None, metavar="N",
                      help="The drafter attends to the most recent N keys only (SGLang's sliding window for Llama "
                      "EAGLE-3 drafters; default: full context).")
    faults = p.add_argument_group(
        "test affordances",
        "Fault knobs for testing a harness (reference server only, off by default). Env SPECDEC_REF_FORWARD_DELAY_MS "
        "sleeps that many milliseconds per target forward, to make the server measurably slower; env "
        "SPECDEC_REF_FORWARD_SLOWDOWN=F makes every target forward take F times its compute time, a slowdown that "
        "keeps its size when a busy CPU stretches the compute.",
    )
    faults.add_argument("--ref-fault-oom-at-startup", type=float, metavar="SECONDS", default=None,
                        help="Print a CUDA out-of-memory style traceback, then exit 1 after SECONDS.")
    faults.add_argument("--ref-fault-never-ready", action="store_true",
                        help="Load and bind, but /health stays 503 forever.")
    faults.add_argument("--ref-fault-slow-start", type=float, metavar="SECONDS", default=None,
                        help="Print SGLang-style 'Capturing batches' progress once a second for SECONDS before "
                        "binding.")
    faults.add_argument("--ref-fault-stall-after-tokens", type=int, metavar="N", default=None,
                        help="After N tokens generated in total for measured requests (warmup and health checks not "
                        "counted), measured generation stalls forever while /health stays 200.")
    faults.add_argument("--ref-fault-die-after-requests", type=int, metavar="N", default=None,
                        help="Exit 1 after serving N measured requests.")
    faults.add_argument("--ref-fault-orphan", action="store_true",
                        help="Spawn a grandchild process that ignores SIGTERM and sleeps.")
    faults.add_argument("--ref-fault-verify-delay-ms", type=float, metavar="MS", default=None,
                        help="Sleep MS milliseconds in every verify forward of a speculative cycle (drafting and "
                        "plain decoding unchanged): a slower verify with the same accept length.")
    faults.add_argument("--ref-fault-hold-port", type=int, metavar="PORT", default=None,
                        help="Bind and hold an extra TCP port, like an engine's derived port.")
    faults.add_argument("--ref-fault-node-never-join", type=int, metavar="RANK", default=None,
                        help="Node mode: the rank RANK (>= 1) runs but never registers with rank 0.")
    faults.add_argument("--ref-fault-node-exit", metavar="RANK:SECONDS", default=None,
                        help="Node mode: the rank RANK (>= 1) exits 1 SECONDS after it joined (a lost node).")
    return p


def parse_args(argv: list[str]) -> argparse.Namespace:
    """Parse ``argv``; an unknown flag exits 2 with ``error: unsupported flag --X ...``.

    :raises SystemExit: status 2 on unknown or malformed flags (argparse behaviour).
    """
    parser = build_parser()
    ns, rest = parser.parse_known_args(argv)
    if rest:
        flags = [a for a in rest if a.startswith("-")] or rest
        parser.error(
            f"unsupported flag {flags[0]}: the reference server implements only a subset of `sglang serve` "
            "(see --help)"
        )
    return ns


def _spec_values(ns: argparse.Namespace) -> tuple[int | None, int | None, int | None]:
    return ns.speculative_num_steps, ns.speculative_eagle_topk, ns.speculative_num_draft_tokens


def resolve_args(ns: argparse.Namespace) -> ServerArgs:
    """Apply SGLang 0.5.23's resolution (``speculative_hook.py::_handle_eagle_family``) to parsed flags.

    - ``NEXTN`` -> ``EAGLE``; unknown names raise ``ValueError("Unknown speculative algorithm name: X")`` (a traceback,
      as ``spec_info.py:from_string``).
    - steps omitted but topk/draft tokens given: SGLang's bare ``assert`` (AssertionError, no message).
    - topk 1 and draft tokens != steps + 1: logs :data:`TOPK_WARNING` and rewrites draft tokens.
    - max_running_requests unset with speculation -> 48 and :data:`MAX_RUNNING_WARNING`.
    - ``--speculative-draft-window-size`` <= 0: ``ValueError`` with SGLang's text.

    :raises ArgsError: what the reference server does not implement (tree drafting, tp > 1, other algorithms).
    :raises AssertionError: as SGLang, for a partial steps/topk/draft-tokens set.
    :raises ValueError: an unknown algorithm or a non-positive draft window, as SGLang (a traceback, exit 1).
    """
    _check_nodes(ns)
    if ns.tp_size != 1 and not (ns.nnodes > 1 and ns.tp_size == ns.nnodes):
        raise ArgsError(f"--tp-size {ns.tp_size}: the reference server runs on one CPU process; only --tp-size 1 "
                        "(or --tp-size equal to --nnodes in node mode) is supported")
    algo = ns.speculative_algorithm
    steps, topk, draft_tokens = _spec_values(ns)
    max_running = ns.max_running_requests
    if algo is not None:
        if algo == "NEXTN":
            algo = "EAGLE"
        if algo not in SGLANG_BUILTIN_ALGORITHMS:
            raise ValueError(f"Unknown speculative algorithm name: {algo}")
        if algo not in SUPPORTED_ALGORITHMS:
            raise ArgsError(f"--speculative-algorithm {ns.speculative_algorithm}: the reference server implements "
                            f"only EAGLE3, EAGLE and NEXTN")
        if ns.speculative_draft_model_path is None:
            raise ArgsError("--speculative-algorithm needs --speculative-draft-model-path (the reference target "
                            "has no built-in draft layer)")
        if max_running is None:
            max_running = 48
            logger.warning(MAX_RUNNING_WARNING)
        if steps is None:
            # SGLang 0.5.23 _handle_eagle_family: a bare assert, so the user sees an AssertionError traceback.
            assert topk is None and draft_tokens is None
            # _auto_choose_speculative_params picks (5, 4, 8) for LlamaForCausalLM: tree drafting.
            raise ArgsError(
                "--speculative-num-steps/--speculative-eagle-topk/--speculative-num-draft-tokens omitted: SGLang "
                "would auto-choose (5, 4, 8) for LlamaForCausalLM, which needs tree drafting (topk 4); the reference "
                "server implements chain drafting (topk 1) only. Pass e.g. --speculative-num-steps 3 "
                "--speculative-eagle-topk 1 --speculative-num-draft-tokens 4"
            )
        if topk is None or topk != 1:
            raise ArgsError(
                f"--speculative-eagle-topk {topk}: the reference server implements chain drafting (topk 1) only; "
                f"pass --speculative-eagle-topk 1 --speculative-num-draft-tokens {steps + 1}"
            )
        if steps < 1:
            raise ArgsError(f"--speculative-num-steps {steps}: expected an integer >= 1")
        if draft_tokens != steps + 1:
            logger.warning(TOPK_WARNING)
            draft_tokens = steps + 1
    elif ns.speculative_draft_model_path is not None or any(v is not None for v in (steps, topk, draft_tokens)):
        # SGLang ignores speculative flags without an algorithm; say so instead of silently running without spec.
        logger.warning("Speculative flags given without --speculative-algorithm; speculative decoding is off.")
    window = ns.speculative_draft_window_size
    if window is not None and window <= 0:
        # SGLang 0.5.23 arg_groups/speculative_hook.py raises this ValueError (a traceback, exit 1).
        raise ValueError(f"--speculative-draft-window-size must be positive, got {window}.")
    if ns.decode_log_interval < 1:
        raise ArgsError(f"--decode-log-interval {ns.decode_log_interval}: expected an integer >= 1")
    seed = ns.random_seed if ns.random_seed is not None else random.randint(0, 2**30 - 1)
    # Every parsed flag reaches ServerArgs by name (a flag the dataclass lacks is an error here, never dropped);
    # only the values SGLang resolves are overridden.
    known = {f.name for f in fields(ServerArgs)}
    given = vars(ns)
    missing = sorted(set(given) - known)
    if missing:
        raise TypeError(f"refserver flags without a ServerArgs field: {missing}")
    resolved = dict(
        tokenizer_path=ns.tokenizer_path or ns.model_path,
        served_model_name=ns.served_model_name or ns.model_path,
        random_seed=seed,
        max_running_requests=max_running,
        speculative_algorithm=algo,
        speculative_draft_model_path=ns.speculative_draft_model_path if algo else None,
        speculative_num_steps=steps if algo else None,
        speculative_eagle_topk=topk if algo else None,
        speculative_num_draft_tokens=draft_tokens if algo else None,
        speculative_draft_window_size=window if algo else None,
    )
    return ServerArgs(**{**given, **resolved})


def _check_nodes(ns: argparse.Namespace) -> None:
    """Node-mode flag rules: ``--nnodes`` >= 1, ``0 <= --node-rank < --nnodes``, ``--dist-init-addr HOST:PORT``
    when ``--nnodes`` > 1 (SGLang needs it to find rank 0), fault ranks >= 1.

    :raises ArgsError: naming the flag and value.
    """
    if ns.nnodes < 1:
        raise ArgsError(f"--nnodes {ns.nnodes}: expected an integer >= 1")
    if not 0 <= ns.node_rank < ns.nnodes:
        raise ArgsError(f"--node-rank {ns.node_rank}: expected 0 <= rank < --nnodes ({ns.nnodes})")
    if ns.nnodes > 1:
        host, sep, port = (ns.dist_init_addr or "").rpartition(":")
        if not sep or not host or not port.isdigit():
            raise ArgsError(f"--dist-init-addr {ns.dist_init_addr}: --nnodes {ns.nnodes} needs HOST:PORT of rank 0")
    if ns.ref_fault_node_never_join is not None and ns.ref_fault_node_never_join < 1:
        raise ArgsError(f"--ref-fault-node-never-join {ns.ref_fault_node_never_join}: expected a rank >= 1")
    if ns.ref_fault_node_exit is not None:
        rank, sep, seconds = ns.ref_fault_node_exit.partition(":")
        try:
            ok = bool(sep) and int(rank) >= 1 and float(seconds) >= 0
        except ValueError:
            ok = False
        if not ok:
            raise ArgsError(f"--ref-fault-node-exit {ns.ref_fault_node_exit}: expected RANK:SECONDS with RANK >= 1")
