"""Prior knowledge for the order of a bisect's probes: which differences the engines' documentation ties to the
acceptance of drafts, which to speed, and which to neither (probed last).

A bisect probes the likely culprits of the symptom it is bisecting first: for the exact symptom (accept length at
temperature 0) the speculative keys and the flags that change what the draft sees; for throughput the flags and
variables that SGLang's server arguments, vLLM's engine arguments or NCCL's and CUDA's documentation tie to speed
(CUDA graphs, attention backends, NCCL algorithms, ``CUDA_LAUNCH_BLOCKING``, ...); offline switches, log levels and
names last. The order changes how many probes a search needs, never what it finds (ddmin stays 1-minimal in any
order).
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Literal

from pytest_specdec.bisection.diffs import Difference

__all__ = ["Symptom", "kind", "likely", "rank"]

#: Which symptom a phase of the bisect is after: the exact metrics, or paired tok/s.
Symptom = Literal["exact", "throughput"]

#: (kind, patterns on :attr:`Difference.key`), the first match wins. Kinds: ``acceptance`` (changes which drafts
#: are accepted), ``speed`` (changes how fast the same tokens come), ``both``, ``neither`` (logging, naming, offline
#: switches, the address).
_TABLE: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("neither", (
        r"env (HF_HUB_OFFLINE|TRANSFORMERS_OFFLINE|HF_DATASETS_OFFLINE|HF_HOME|HF_TOKEN|TOKENIZERS_PARALLELISM)",
        r"env .*(_DEBUG|_DEBUG_SUBSYS|LOG_LEVEL|LOGGING_LEVEL|_LOG)$", r"env PYTHON(UNBUFFERED|WARNINGS|PATH)",
        r"extra_args --(log-level|log-requests|log-level-http|served-model-name|host|api-key|enable-metrics|"
        r"decode-log-interval|show-time-cost|trust-remote-code|skip-server-warmup|uvicorn-log-level|"
        r"disable-log-requests|disable-log-stats|disable-uvicorn-access-log)$",
    )),
    ("both", (
        r"speculative\.(algorithm|num_steps|eagle_topk|num_draft_tokens|draft_model_path)$",
        r"extra_args --speculative-", r"extra_args --(dtype|quantization|kv-cache-dtype|model-path|model)$",
        r"^(model_path|model|server|engine|python)$", r"workload\.(max_new_tokens|prompts|temperature|api)$",
    )),
    ("acceptance", (
        r"speculative\.", r"extra_args --ref-embedding-capture$", r"^random_seed$", r"workload\.(top_p|top_k|seed)$",
    )),
    ("speed", (
        r"env (CUDA_LAUNCH_BLOCKING|CUDA_VISIBLE_DEVICES|CUDA_DEVICE_MAX_CONNECTIONS|NCCL_.*|OMP_NUM_THREADS|"
        r"MKL_NUM_THREADS|TORCH_.*|PYTORCH_.*|SGLANG_.*|VLLM_.*|SPECDEC_REF_FORWARD_.*|NVIDIA_.*|"
        r"TORCHINDUCTOR_.*|TRITON_.*)$",
        r"extra_args --(cuda-graph.*|disable-cuda-graph.*|enforce-eager|attention-backend|.*-backend|tp.*|"
        r"tensor-parallel-size|dp.*|data-parallel-size|pp.*|ep.*|mem-fraction-static|gpu-memory-utilization|"
        r"max-running-requests|max-num-seqs|max-num-batched-tokens|chunked-prefill-size|enable-chunked-prefill|"
        r"schedule-.*|disable-overlap-schedule|enable-torch-compile|torch-compile-.*|disable-radix-cache|"
        r"enable-prefix-caching|max-total-tokens|page-size|block-size|enable-dp-attention|compilation-config|"
        r"ref-fault-verify-delay-ms|nccl-.*|dist-.*|nnodes|num-scheduler-steps)$",
        r"^(nodes|tp|pairing)$", r"workload\.",
    )),
)  # fmt: skip

#: Probe order per symptom (lower first); kinds not listed, and differences no pattern names ("unknown"), are 1.
_ORDER: dict[str, dict[str, int]] = {
    "exact": {"acceptance": 0, "both": 0, "unknown": 1, "speed": 2, "neither": 3},
    "throughput": {"speed": 0, "both": 0, "unknown": 1, "acceptance": 2, "neither": 3},
}


def kind(diff: Difference) -> str:
    """``acceptance``, ``speed``, ``both``, ``neither`` or ``unknown`` for one difference (:data:`_TABLE`).

    Example: ``env CUDA_LAUNCH_BLOCKING`` -> ``speed``, ``extra_args --log-level`` -> ``neither``.
    """
    for name, patterns in _TABLE:
        if any(re.search(p, diff.key) for p in patterns):
            return name
    return "unknown"


def rank(diffs: Sequence[Difference], symptom: Symptom) -> list[int]:
    """The indices of ``diffs`` in probe order for ``symptom``: likely culprits first (for the exact symptom the
    speculative keys before the flags of the same kind), ties in the given order.

    Example: [env HF_HUB_OFFLINE, env CUDA_LAUNCH_BLOCKING] for throughput -> [1, 0].
    """
    order = _ORDER[symptom]

    def key(i: int) -> tuple[int, int]:
        first = symptom == "exact" and diffs[i].path[0] == "speculative"
        return order.get(kind(diffs[i]), 1), 0 if first else 1

    return sorted(range(len(diffs)), key=key)


def likely(diff: Difference, symptom: Symptom) -> bool:
    """Whether the documentation ties ``diff`` to ``symptom`` (its kind ranks first for it)."""
    return _ORDER[symptom].get(kind(diff), 1) == 0
