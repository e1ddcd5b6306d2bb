"""The reference server's decode engine: model loading, EAGLE-3 chain draft/verify, and the scheduler thread.

One engine thread owns both models. Each scheduler iteration admits waiting requests (prefill), then advances every
running request by one decode cycle (round-robin, so concurrent requests interleave and never share state). A
speculative cycle drafts ``num_steps`` tokens with the EAGLE-3 head (chain, topk 1), verifies ``[bonus, d1..dn]`` in
one target forward, keeps the longest accepted prefix plus one target token, and crops both KV caches.

Statistics follow SGLang 0.5.23 ``managers/scheduler_components/metrics_reporter.py``: per-window accept length =
accepted tokens (incl. bonus) / verify forwards, folded into the lifetime totals every ``decode_log_interval``
decode iterations (``avg_spec_accept_length`` in ``/server_info``).
"""

from __future__ import annotations

import collections
import json
import logging
import os
import signal
import threading
import time
import traceback
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch

from pytest_specdec.refserver.args import ServerArgs
from pytest_specdec.refserver.model import DraftCache, Eagle3Draft, Eagle3DraftConfig

__all__ = [
    "EngineStats",
    "Models",
    "SamplingParams",
    "Sequence",
    "SpecEngine",
    "StepOutput",
    "capture_indices",
    "forward_slowdown",
    "load_models",
    "speculative_accept",
]

logger = logging.getLogger("pytest_specdec.refserver")

#: Token pool size used for "token usage" in log lines (tokens across running requests / this), like SGLang's
#: ``max_total_num_tokens``; the reference server has no fixed pool, so this is a nominal figure.
TOKEN_POOL_SIZE = 65536
FORWARD_DELAY_ENV = "SPECDEC_REF_FORWARD_DELAY_MS"
FORWARD_SLOWDOWN_ENV = "SPECDEC_REF_FORWARD_SLOWDOWN"


def forward_slowdown(value: str | None) -> float:
    """The factor of ``SPECDEC_REF_FORWARD_SLOWDOWN``: every target forward takes that many times its own compute
    time (it sleeps ``(factor - 1) x`` the forward's measured seconds). Unset or empty: 1.0, no fault.

    Unlike ``SPECDEC_REF_FORWARD_DELAY_MS`` (fixed milliseconds), the fault keeps its relative size when CPU
    contention stretches the compute: a forward of 10 ms quiet and 30 ms on a busy runner becomes 20 and 60 ms at
    factor 2 (x0.5 both times), where a 15 ms delay makes 25 and 45 ms (x0.40, then x0.67).

    :param value: the variable's text, e.g. ``"2.5"``.
    :raises ValueError: not a number, or below 1 (a server cannot be made faster).
    """
    if value is None or not value.strip():
        return 1.0
    try:
        factor = float(value)
    except ValueError:
        factor = float("nan")
    if not factor >= 1.0 or factor == float("inf"):
        raise ValueError(
            f"{FORWARD_SLOWDOWN_ENV}={value!r}: expected a finite factor >= 1 (2 makes every target forward take "
            f'twice its compute time); set it in the profile\'s env: as a string, e.g. "2", or unset it'
        )
    return factor


def capture_indices(layer_ids: list[int] | None, num_layers: int) -> list[int]:
    """Map EAGLE-3 aux layer ids to capture indices, as SGLang 0.5.23 ``models/llama.py::set_eagle3_layers_to_capture``.

    Capture index k is the residual stream entering decoder layer k (= HF ``hidden_states[k]``; k = 0 is the
    embedding output). Explicit id i -> k = i + 1 (so -1 = embeddings); indices outside [0, L) are silently dropped;
    duplicates are captured once; the result is in ascending layer order (the order the layer loop visits them).
    No ids (None or empty) -> SGLang's default [2, L//2, L-3].

    :param layer_ids: ``eagle_config.eagle_aux_hidden_state_layer_ids`` from the draft config, or None.
    :param num_layers: L, the target's ``num_hidden_layers``.
    :returns: sorted unique capture indices, each in [0, L).

    Example: ``capture_indices([-1, 3, 3, 9], 8) == [0, 4]``; ``capture_indices(None, 8) == [2, 4, 5]``.
    """
    wanted = [2, num_layers // 2, num_layers - 3] if not layer_ids else [i + 1 for i in layer_ids]
    return sorted({k for k in wanted if 0 <= k < num_layers})


def speculative_accept(
    p_all: torch.Tensor, qs: list[torch.Tensor], drafts: list[int], gen: torch.Generator
) -> tuple[int, int]:
    """Standard speculative sampling for a chain (Leviathan et al. 2023, Alg. 1; Chen et al. 2023).

    Draft j is accepted with probability min(1, p_j(d_j) / q_j(d_j)); at the first rejection the token is resampled
    from norm(max(0, p_j - q_j)); if all n drafts are accepted the bonus token is sampled from p_n. The emitted
    tokens are then distributed exactly as sampling from the target alone.

    :param p_all: [n+1, V] target probabilities at the verify positions (after temperature/top-p).
    :param qs: n tensors [V], the distributions the drafts were sampled from (target vocab).
    :param drafts: the n draft token ids.
    :returns: (a, bonus): the number of accepted drafts and the token emitted after them.
    """
    n = len(drafts)
    for j in range(n):
        d, p, q = drafts[j], p_all[j], qs[j]
        ratio = float(p[d] / q[d]) if float(q[d]) > 0 else 0.0
        if float(torch.rand((), generator=gen)) < min(1.0, ratio):
            continue
        resid = torch.clamp(p - q, min=0.0)
        total = float(resid.sum())
        probs = resid / total if total > 0 else p
        return j, int(torch.multinomial(probs, 1, generator=gen))
    return n, int(torch.multinomial(p_all[n], 1, generator=gen))


@dataclass(frozen=True, slots=True)
class SamplingParams:
    """The subset of SGLang ``sampling_params`` the reference server implements (temperature 0 = greedy)."""

    max_new_tokens: int = 128
    temperature: float = 1.0
    top_p: float = 1.0
    ignore_eos: bool = False
    stop: tuple[str, ...] = ()

    @property
    def greedy(self) -> bool:
        return self.temperature < 1e-5


@dataclass(frozen=True, slots=True)
class StepOutput:
    """What one scheduler step produced for one request (sent to the HTTP layer)."""

    output_ids: tuple[int, ...]  # cumulative
    text: str  # cumulative, stop string trimmed
    finished: bool
    finish_reason: dict | None
    prompt_tokens: int
    spec_verify_ct: int
    spec_num_correct_drafts: int
    spec_correct_drafts_histogram: tuple[int, ...]
    first_token_time: float | None  # perf_counter seconds


@dataclass
class Sequence:
    """One request's state inside the engine. ``emit`` is called from the engine thread."""

    rid: str
    prompt_ids: list[int]
    params: SamplingParams
    emit: Callable[[StepOutput], None]
    log_metrics: bool = True
    created: float = field(default_factory=time.perf_counter)
    aborted: bool = False
    output_ids: list[int] = field(default_factory=list)
    text: str = ""
    finished: bool = False
    finish_reason: dict | None = None
    first_token_time: float | None = None
    verify_ct: int = 0
    correct: int = 0
    histogram: list[int] = field(default_factory=list)
    #: Seconds this request's speculative cycles spent drafting (draft forwards) and verifying (target forward and
    #: acceptance), for ``refserver:spec_{draft,verify}_seconds_total``.
    draft_s: float = 0.0
    verify_s: float = 0.0
    # Engine-private state.
    target_cache: Any = None  # transformers DynamicCache
    draft_cache: DraftCache | None = None
    last_token: int = 0
    draft_tokens_in: Any = None  # [n] tokens / [n, K*Ht] states still to extend the draft with
    draft_hidden_in: Any = None


@dataclass
class Models:
    """Loaded models: target in fp32; draft (None without speculation) with its capture plan."""

    target: Any  # transformers LlamaForCausalLM
    tokenizer: Any  # transformers PreTrainedTokenizerFast
    num_layers: int
    vocab_size: int
    eos_token_id: int | None
    context_len: int
    architectures: list[str]
    model_type: str
    draft: Eagle3Draft | None = None
    #: capture indices for EAGLE3; None means "final post-norm state" (algorithm EAGLE).
    capture: list[int] | None = None


def load_models(args: ServerArgs) -> Models:
    """Load target (fp32 from bf16 safetensors), tokenizer, and the draft when speculation is on.

    EAGLE3: capture indices from the draft's nested ``eagle_config`` (:func:`capture_indices`). EAGLE/NEXTN with an
    EAGLE-3 draft: no capture, the draft gets HF ``hidden_states[L]`` and the target's ``lm_head`` (SGLang
    ``speculative/eagle_worker_v2.py:init_lm_head`` for non-EAGLE3), so drafting degrades without an error.

    :raises OSError, RuntimeError: unreadable assets or weight shapes not matching the config (a traceback, exit 1).
    """
    from safetensors.torch import load_file
    from transformers import AutoTokenizer, LlamaForCausalLM
    from transformers.utils import logging as hf_logging

    hf_logging.disable_progress_bar()
    target = LlamaForCausalLM.from_pretrained(args.model_path, dtype=torch.float32)
    target.eval()
    tokenizer = AutoTokenizer.from_pretrained(args.tokenizer_path)
    cfg = target.config
    models = Models(
        target=target,
        tokenizer=tokenizer,
        num_layers=cfg.num_hidden_layers,
        vocab_size=cfg.vocab_size,
        eos_token_id=cfg.eos_token_id if isinstance(cfg.eos_token_id, int) else tokenizer.eos_token_id,
        context_len=cfg.max_position_embeddings,
        architectures=list(cfg.architectures or ["LlamaForCausalLM"]),
        model_type=cfg.model_type,
    )
    if not args.speculative:
        return models
    draft_dir = Path(args.speculative_draft_model_path or "")
    draft_cfg = json.loads((draft_dir / "config.json").read_text())
    draft = Eagle3Draft(Eagle3DraftConfig.from_json(draft_cfg), target.model.embed_tokens)
    state = load_file(str(draft_dir / "model.safetensors"))
    state = {k: (v.float() if v.is_floating_point() else v) for k, v in state.items()}
    draft.load_state_dict(state, strict=True)
    draft.eval()
    models.draft = draft
    if args.speculative_algorithm == "EAGLE3":
        # SGLang reads the ids only from the nested eagle_config (spec_aux_hidden_state.py); failures -> None.
        try:
            ids = draft_cfg["eagle_config"]["eagle_aux_hidden_state_layer_ids"]
        except (KeyError, TypeError):
            ids = None
        models.capture = capture_indices(ids, models.num_layers)
        logger.info(f"EAGLE3 aux hidden states: layer ids {ids} -> capture indices {models.capture}")
    else:
        draft.lm_head = target.lm_head
        draft.d2t = torch.zeros(draft.config.draft_vocab_size, dtype=torch.int64)
        models.capture = None
    return models


class EngineStats:
    """Server-wide counters shared with the HTTP layer (read under ``lock``)."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.spec_total_accept_tokens = 0
        self.spec_total_forward_ct = 0
        self.last_gen_throughput = 0.0
        self.last_accept_length = 0.0
        self.last_accept_rate = 0.0
        self.num_running = 0
        self.num_queue = 0
        self.total_generated_tokens = 0  # measured requests only (not warmup/health), for the stall fault
        # Measured requests' speculative cycles since the last /flush_cache: seconds drafting and verifying.
        self.spec_draft_s = 0.0
        self.spec_verify_s = 0.0
        self.spec_cycles = 0

    @property
    def avg_spec_accept_length(self) -> float | None:
        if self.spec_total_forward_ct == 0:
            return None
        return self.spec_total_accept_tokens / self.spec_total_forward_ct

    def reset(self) -> None:
        """What SGLang's ``reset_metrics`` on ``/flush_cache`` clears: the lifetime spec totals."""
        with self.lock:
            self.spec_total_accept_tokens = 0
            self.spec_total_forward_ct = 0
            self.spec_draft_s = self.spec_verify_s = 0.0
            self.spec_cycles = 0


class EngineListener:
    """Hooks the HTTP layer implements (metrics); every method runs on the engine thread."""

    def on_first_token(self, seq: Sequence) -> None: ...

    def on_finish(self, seq: Sequence) -> None: ...

    def on_log_window(self, stats: EngineStats) -> None: ...


def _kill_own_tree() -> None:
    """After a scheduler exception, end the server as SGLang 0.5.17 does: its launcher gets SIGQUIT ("It usually
    means one child failed") and calls ``kill_process_tree`` on itself, so the process dies by SIGKILL."""
    logger.error("SIGQUIT received. signum=None, frame=None. It usually means one child failed.")
    logger.error(f"kill_process_tree called: parent_pid={os.getpid()}, include_parent=True, pid={os.getpid()}")
    logging.shutdown()
    os.kill(os.getpid(), signal.SIGKILL)


class SpecEngine:
    """The scheduler thread and decode math. Thread-safe entry points: :meth:`submit`, :meth:`busy`."""

    def __init__(self, models: Models, args: ServerArgs, listener: EngineListener | None = None) -> None:
        self.m = models
        self.args = args
        self.listener = listener or EngineListener()
        self.stats = EngineStats()
        self.num_steps = args.speculative_num_steps or 0
        self.num_draft_tokens = args.speculative_num_draft_tokens or 0
        self.draft_window = args.speculative_draft_window_size
        self.verify_delay_s = (args.ref_fault_verify_delay_ms or 0.0) / 1000.0
        self.max_running = args.max_running_requests or 1024
        self.gen = torch.Generator().manual_seed(args.random_seed)
        self.delay_s = float(os.environ.get(FORWARD_DELAY_ENV, "0") or 0) / 1000.0
        self.slowdown = forward_slowdown(os.environ.get(FORWARD_SLOWDOWN_ENV))
        self._waiting: collections.deque[Sequence] = collections.deque()
        self._running: list[Sequence] = []
        # Popped from _waiting, not yet in _running: in prefill. Still busy for /flush_cache.
        self._admitted: list[Sequence] = []
        self._cv = threading.Condition()
        self._thread: threading.Thread | None = None
        # Outputs are sent at the end of a scheduler step, after its stats are folded, so a client that got its
        # response sees counters that include it (and a /flush_cache after it cannot be undone by a late fold).
        self._outbox: list[tuple[Sequence, StepOutput]] = []
        self.on_fatal: Callable[[], None] = _kill_own_tree
        #: Chrome trace events ("X" spans, µs) while a /start_profile is active; None otherwise.
        self.trace_events: list[dict[str, Any]] | None = None
        self.measured_finished = 0
        # Window accumulators (SGLang metrics_reporter fields of the same names).
        self._decode_ct = 0
        self._win_tokens = 0
        self._win_accept = 0
        self._win_forward = 0
        self._win_correct = 0
        self._win_tic = time.perf_counter()

    # ---- thread-safe API -------------------------------------------------------------------------------------
    def start(self) -> None:
        self._thread = threading.Thread(target=self._loop, name="refserver-engine", daemon=True)
        self._thread.start()

    def submit(self, seq: Sequence) -> None:
        with self._cv:
            self._waiting.append(seq)
            self._cv.notify()

    def busy(self) -> bool:
        """True while any measured request is running or waiting (SGLang's flush_cache refuses then)."""
        with self._cv:
            return any(s.log_metrics and not s.finished for s in [*self._waiting, *self._admitted, *self._running])

    # ---- engine thread ---------------------------------------------------------------------------------------
    def _loop(self) -> None:
        try:
            with torch.inference_mode():
                while True:
                    self._step()
        except BaseException:
            logger.error(f"Scheduler hit an exception: {traceback.format_exc()}")
            self.on_fatal()

    def _step(self) -> None:
        with self._cv:
            while not self._waiting and not self._running:
                self._cv.wait()
            admitted: list[Sequence] = []
            while self._waiting and len(self._running) + len(admitted) < self.max_running:
                admitted.append(self._waiting.popleft())
            self._admitted = admitted
            queued = len(self._waiting)
        admitted = [s for s in admitted if not s.aborted]
        for seq in admitted:
            self._prefill(seq)
        with self._cv:
            self._running.extend(s for s in admitted if not s.finished)
            self._admitted = []
        if admitted:
            logger.info(
                f"Prefill batch, #new-seq: {len(admitted)}, #new-token: {sum(len(s.prompt_ids) for s in admitted)}, "
                f"#cached-token: 0, token usage: {self._usage():.2f}, #running-req: {len(self._running)}, "
                f"#queue-req: {queued}"
            )
        progressed = False
        for seq in list(self._running):
            if seq.aborted:
                seq.finished = True
            elif self._stalled(seq):
                continue
            else:
                self._decode(seq)
                progressed = True
        self._running = [s for s in self._running if not s.finished]
        with self.stats.lock:
            self.stats.num_running = len(self._running)
            self.stats.num_queue = queued
        if progressed:
            self._decode_ct += 1
            if self._decode_ct % self.args.decode_log_interval == 0:
                self._log_window(queued)
        outbox, self._outbox = self._outbox, []
        for seq, out in outbox:
            seq.emit(out)
        if not progressed and not admitted:
            time.sleep(0.02)  # only stalled requests: do not spin

    def _stalled(self, seq: Sequence) -> bool:
        n = self.args.ref_fault_stall_after_tokens
        return n is not None and seq.log_metrics and self.stats.total_generated_tokens >= n

    def _usage(self) -> float:
        return sum(len(s.prompt_ids) + len(s.output_ids) for s in self._running) / TOKEN_POOL_SIZE

    def _log_window(self, queued: int) -> None:
        now = time.perf_counter()
        gap = max(now - self._win_tic, 1e-9)
        self._win_tic = now
        msg = (
            f"Decode batch, #running-req: {len(self._running)}, "
            f"#token: {sum(len(s.prompt_ids) + len(s.output_ids) for s in self._running)}, "
            f"token usage: {self._usage():.2f}, "
        )
        with self.stats.lock:
            self.stats.last_gen_throughput = self._win_tokens / gap
            if self.m.draft is not None:
                acc_len = self._win_accept / self._win_forward if self._win_forward else 0.0
                total_drafts = self._win_forward * (self.num_draft_tokens - 1)
                acc_rate = self._win_correct / total_drafts if total_drafts else 0.0
                self.stats.last_accept_length, self.stats.last_accept_rate = acc_len, acc_rate
                self.stats.spec_total_accept_tokens += self._win_accept
                self.stats.spec_total_forward_ct += self._win_forward
                msg += f"accept len: {acc_len:.2f}, accept rate: {acc_rate:.2f}, "
            gen_tp = self.stats.last_gen_throughput
        self._win_tokens = self._win_accept = self._win_forward = self._win_correct = 0
        logger.info(msg + f"cuda graph: False, gen throughput (token/s): {gen_tp:.2f}, #queue-req: {queued}")
        self.listener.on_log_window(self.stats)

    # ---- model math ------------------------------------------------------------------------------------------
    def _target(self, ids: torch.Tensor, cache: Any, hidden: bool) -> tuple[Any, torch.Tensor]:
        tic = time.perf_counter()
        out = self.m.target(input_ids=ids[None], cache=cache, use_cache=True, output_hidden_states=hidden)
        if self.slowdown > 1.0:
            # Measured on this forward, so the sleep stretches with the compute when the CPU is contended.
            time.sleep((self.slowdown - 1.0) * (time.perf_counter() - tic))
        if self.delay_s:
            time.sleep(self.delay_s)
        return out, out.logits[0]

    def _aux(self, hidden_states: tuple[torch.Tensor, ...]) -> torch.Tensor:
        """[n, K*H] draft input from one forward's HF hidden states (batch 1).

        :raises TypeError: capture index 0 (aux id -1) with ``--ref-embedding-capture stock``: stock SGLang adds the
            residual, which is None before layer 0 (``models/llama.py:437`` in 0.5.17, measured on an H200).
        """
        if self.m.capture is None:
            return hidden_states[self.m.num_layers][0]
        if 0 in self.m.capture and self.args.ref_embedding_capture == "stock":
            raise TypeError("unsupported operand type(s) for +: 'Tensor' and 'NoneType'")
        return torch.cat([hidden_states[k][0] for k in self.m.capture], dim=-1)

    def _probs(self, logits: torch.Tensor, p: SamplingParams) -> torch.Tensor:
        """Sampling distribution [.., V] after temperature and top-p (SGLang ``sampler.py`` order)."""
        probs = torch.softmax(logits / p.temperature, dim=-1)
        if p.top_p < 1.0:
            sorted_p, idx = probs.sort(dim=-1, descending=True)
            drop = (sorted_p.cumsum(-1) - sorted_p) > p.top_p
            sorted_p = sorted_p.masked_fill(drop, 0.0)
            probs = torch.zeros_like(probs).scatter_(-1, idx, sorted_p)
            probs = probs / probs.sum(-1, keepdim=True)
        return probs

    def _sample(self, probs: torch.Tensor) -> int:
        return int(torch.multinomial(probs, 1, generator=self.gen))

    def _prefill(self, seq: Sequence) -> None:
        from transformers import DynamicCache

        ids = torch.tensor(seq.prompt_ids, dtype=torch.long)
        seq.target_cache = DynamicCache()
        spec = self.m.draft is not None
        out, logits = self._target(ids, seq.target_cache, spec)
        last = logits[-1]
        tok = int(last.argmax()) if seq.params.greedy else self._sample(self._probs(last, seq.params))
        if spec:
            seq.draft_tokens_in = torch.cat([ids[1:], torch.tensor([tok])])
            seq.draft_hidden_in = self._aux(out.hidden_states)
            seq.draft_cache = None
        self._append(seq, [tok])

    def _decode(self, seq: Sequence) -> None:
        if self.m.draft is None:
            _, logits = self._target(torch.tensor([seq.last_token]), seq.target_cache, False)
            last = logits[-1]
            tok = int(last.argmax()) if seq.params.greedy else self._sample(self._probs(last, seq.params))
            self._win_tokens += 1
            self._append(seq, [tok])
            return
        self._spec_cycle(seq)

    def _spec_cycle(self, seq: Sequence) -> None:
        """One EAGLE-3 cycle for ``seq``: ``num_steps`` draft steps, one verify forward of the target over the drafts,
        acceptance, and the caches rolled back to what was accepted. Kept as one method on purpose: the steps share
        the caches and positions, and read in the order of the EAGLE-3 paper's algorithm."""
        draft = self.m.draft
        assert draft is not None
        params = seq.params
        n = self.num_steps
        prefix = seq.target_cache.get_seq_length()  # committed positions; the bonus token is not cached yet
        tic = time.perf_counter()
        # Draft step 1: extend the draft cache over the newly committed positions (token after, aux state).
        seq.draft_cache, h = draft.extend(
            seq.draft_cache,
            seq.draft_tokens_in,
            seq.draft_hidden_in,
            prefix - seq.draft_tokens_in.shape[0],
            self.draft_window,
        )
        h = h[-1:]
        drafts: list[int] = []
        qs: list[torch.Tensor] = []
        for k in range(n):
            logits = draft.logits(h)[0]
            if params.greedy:
                d = int(draft.to_target_ids(logits.argmax()))
            else:
                q_draft = self._probs(logits, params)
                q = torch.zeros(self.m.vocab_size).index_add_(
                    0, draft.to_target_ids(torch.arange(q_draft.shape[0])), q_draft
                )
                qs.append(q)
                d = self._sample(q)
            drafts.append(d)
            if k + 1 < n:
                seq.draft_cache, h = draft.extend(seq.draft_cache, torch.tensor([d]), h, prefix + k, self.draft_window)
        seq.draft_cache.crop(prefix)
        drafted = time.perf_counter()
        verify_in = torch.tensor([seq.last_token, *drafts])
        out, g = self._target(verify_in, seq.target_cache, True)
        if self.verify_delay_s:
            time.sleep(self.verify_delay_s)  # --ref-fault-verify-delay-ms: a slower verify, drafting unchanged
        if params.greedy:
            tgt = g.argmax(-1)
            match = (tgt[:n] == verify_in[1:]).to(torch.int64)
            a = int(match.cumprod(0).sum())
            bonus = int(tgt[a])
        else:
            a, bonus = speculative_accept(self._probs(g, params), qs, drafts, self.gen)
        if a < n:
            seq.target_cache.crop(-(n - a))
        kept = drafts[:a] + [bonus]
        seq.draft_tokens_in = torch.tensor(kept)
        seq.draft_hidden_in = self._aux(out.hidden_states)[: a + 1]
        done = time.perf_counter()
        seq.draft_s += drafted - tic
        seq.verify_s += done - drafted
        events = self.trace_events
        if events is not None:  # between /start_profile and /stop_profile: one span per draft and per verify
            for name, start, end in (("draft", tic, drafted), ("verify", drafted, done)):
                events.append(
                    {
                        "name": name,
                        "ph": "X",
                        "ts": start * 1e6,
                        "dur": (end - start) * 1e6,
                        "pid": os.getpid(),
                        "tid": 1,
                        "args": {"rid": seq.rid, "accepted": a},
                    }
                )
        if seq.log_metrics:
            with self.stats.lock:
                self.stats.spec_draft_s += drafted - tic
                self.stats.spec_verify_s += done - drafted
                self.stats.spec_cycles += 1
        seq.verify_ct += 1
        seq.correct += a
        if len(seq.histogram) <= a:
            seq.histogram.extend([0] * (a + 1 - len(seq.histogram)))
        seq.histogram[a] += 1
        self._win_forward += 1
        self._win_accept += a + 1
        self._win_correct += a
        self._win_tokens += a + 1
        self._append(seq, kept)

    def _append(self, seq: Sequence, tokens: list[int]) -> None:
        """Commit tokens, apply EOS / max_new_tokens / stop strings, and emit (SGLang finish_reason shapes)."""
        p = seq.params
        if seq.first_token_time is None:
            seq.first_token_time = time.perf_counter()
            if seq.log_metrics:
                self.listener.on_first_token(seq)
        for tok in tokens:
            seq.output_ids.append(tok)
            if not p.ignore_eos and tok == self.m.eos_token_id:
                seq.finish_reason = {"type": "stop", "matched": tok}
                break
            if len(seq.output_ids) >= p.max_new_tokens:
                seq.finish_reason = {"type": "length", "length": p.max_new_tokens}
                break
            if len(seq.prompt_ids) + len(seq.output_ids) >= self.m.context_len:
                seq.finish_reason = {"type": "length", "length": len(seq.output_ids)}
                break
        ids = seq.output_ids
        if seq.finish_reason and seq.finish_reason.get("matched") == self.m.eos_token_id and not p.ignore_eos:
            ids = ids[:-1]  # SGLang does not detokenize the matched EOS into text
        text = self.m.tokenizer.decode(ids, skip_special_tokens=True)
        if seq.finish_reason is None:
            # As SGLang's detokenizer: hold back an incomplete UTF-8 sequence until it completes.
            text = text.rstrip("\ufffd")
        for stop in p.stop:
            cut = text.find(stop)
            if stop and cut >= 0:
                text = text[:cut]
                seq.finish_reason = {"type": "stop", "matched": stop}
        seq.text = text
        seq.last_token = seq.output_ids[-1]
        if seq.log_metrics:
            with self.stats.lock:
                self.stats.total_generated_tokens += len(tokens)
        if seq.finish_reason is not None:
            seq.finished = True
            seq.target_cache = seq.draft_cache = None
            if seq.log_metrics:  # before the emit, so a client never sees a response its counters miss
                self.listener.on_finish(seq)
                self.measured_finished += 1
        self._outbox.append(
            (
                seq,
                StepOutput(
                    output_ids=tuple(seq.output_ids),
                    text=text,
                    finished=seq.finished,
                    finish_reason=seq.finish_reason,
                    prompt_tokens=len(seq.prompt_ids),
                    spec_verify_ct=seq.verify_ct,
                    spec_num_correct_drafts=seq.correct,
                    spec_correct_drafts_histogram=tuple(seq.histogram),
                    first_token_time=seq.first_token_time,
                ),
            )
        )
