"""Profile schema: the typed, strict models of a profile file (``profiles.loader`` reads the YAML into them).

A profile file looks like::

    profiles:
      baseline:
        server: reference            # reference | sglang | vllm
        workload: {max_new_tokens: 64, num_requests: 16}
      eagle3:
        extends: baseline
        speculative: {algorithm: EAGLE3, num_steps: 3, eagle_topk: 1, num_draft_tokens: 4}
        thresholds: {min_accept_length: 2.0, min_tok_s: 50}

Unknown keys are errors (strict on input). The models check what holds for every engine; what one engine asks
beyond that (SGLang needs a model path, vLLM has no multi-node launch, the reference server's bundled checkpoints)
is ``engines.rules``'s.
"""

from __future__ import annotations

import difflib
import re
from collections.abc import Iterable
from pathlib import Path
from typing import Any, Literal, get_args

from pydantic import BaseModel, ConfigDict, Field, PrivateAttr, ValidationInfo, field_validator, model_validator
from pydantic_core import PydanticCustomError

from pytest_specdec.core.errors import ProfileError
from pytest_specdec.core.tolerances import (
    ToleranceError,
    Tolerances,
    foreign_ratio_tolerances,
    misnamed_arms,
    parse_tolerances,
    tolerance_strings,
)

__all__ = [
    "LAUNCHER_FIELDS",
    "CategoryThresholds",
    "MinSpeedup",
    "NodesConfig",
    "Profile",
    "ProfileSet",
    "RandomPrompts",
    "SLO_KEYS",
    "Slo",
    "SpeculativeConfig",
    "Thresholds",
    "TAIL_KEYS",
    "TraceConfig",
    "Workload",
    "close_match",
    "did_you_mean",
    "key_parts",
]


def _takes_bool(annotation: Any) -> bool:
    return annotation is bool or annotation is Any or any(_takes_bool(a) for a in get_args(annotation))


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    @field_validator("*", mode="before")
    @classmethod
    def _no_bool_for_a_number(cls, value: Any, info: ValidationInfo) -> Any:
        # pydantic reads a bool as 1 or 0 for int and float fields: `min_accept_length: true` in YAML, or
        # `@pytest.mark.specdec(min_accept_length=True)`, would be a floor of 1 that every server passes.
        field = cls.model_fields.get(info.field_name or "")
        if isinstance(value, bool) and field is not None and not _takes_bool(field.annotation):
            raise PydanticCustomError("bool_type", "expected a number, got a bool")
        return value


class SpeculativeConfig(_Strict):
    """The ``speculative:`` block; names follow SGLang's ``--speculative-*`` flags (``arg_groups/fields/spec.py``)."""

    algorithm: str = Field(description="EAGLE3, EAGLE, NEXTN, STANDALONE, NGRAM (upper-cased, as SGLang does)")
    draft_model_path: str | None = None
    num_steps: int | None = Field(default=None, ge=1)
    eagle_topk: int | None = Field(default=None, ge=1)
    num_draft_tokens: int | None = Field(default=None, ge=1)
    #: Written into an overlay of the draft's config.json (``eagle_config.eagle_aux_hidden_state_layer_ids``).
    aux_hidden_state_layer_ids: list[int] | None = None
    #: Id -1 (SGLang: the embedding output) is a preflight error unless this is set.
    allow_embedding_capture: bool = False
    #: The aux-id convention the draft was trained for: "sglang" (id i = output of layer i) or "vllm" (i - 1).
    aux_id_convention: Literal["sglang", "vllm"] | None = None

    @field_validator("algorithm")
    @classmethod
    def _upper(cls, value: str) -> str:
        return value.upper()


class MinSpeedup(_Strict):
    """``min_speedup: {vs: baseline, ratio: 1.05}``: output tok/s of this profile / that of profile ``vs``."""

    vs: str
    ratio: float = Field(gt=0)


def _positions(value: Any) -> Any:
    """Validate ``min_accept_rate_at``: a non-empty mapping of position (int >= 1, or its digits) to a rate in
    [0, 1]; returns it sorted by position."""
    if value is None:
        return None
    example = "e.g. {1: 0.7, 2: 0.5} (draft position -> minimum rate)"
    if not isinstance(value, dict) or not value:
        raise ValueError(f"expected a non-empty mapping of draft position to rate, {example}, got {value!r}")
    out: dict[int, float] = {}
    for key, rate in value.items():
        position = key
        if isinstance(key, str) and key.strip().isdigit():
            position = int(key)
        if not isinstance(position, int) or isinstance(position, bool) or position < 1:
            raise ValueError(f"position {key!r}: positions are integers >= 1 (1 = the first draft token), {example}")
        if not isinstance(rate, int | float) or isinstance(rate, bool) or not 0 <= rate <= 1:
            raise ValueError(f"position {position}: rate {rate!r} is not a number in [0, 1], {example}")
        out[position] = float(rate)
    return dict(sorted(out.items()))


class CategoryThresholds(_Strict):
    """Floors and ceilings for the requests of one prompt category (``thresholds.categories.<name>``): the
    per-request figures only; throughput and speedup belong to the whole phase."""

    min_accept_length: float | None = Field(default=None, ge=1)
    min_accept_rate: float | None = Field(default=None, ge=0, le=1)
    max_ttft_ms: float | None = Field(default=None, gt=0)
    max_itl_ms: float | None = Field(default=None, gt=0)
    max_tpot_ms: float | None = Field(default=None, gt=0)
    min_accept_rate_at: dict[int, float] | None = None

    @field_validator("min_accept_rate_at", mode="before")
    @classmethod
    def _check_positions(cls, value: Any) -> Any:
        return _positions(value)


class Thresholds(_Strict):
    """Floors and ceilings; a marker's keyword arguments override these key by key."""

    min_accept_length: float | None = Field(default=None, ge=1)
    min_accept_rate: float | None = Field(default=None, ge=0, le=1)
    min_tok_s: float | None = Field(default=None, gt=0)
    max_ttft_ms: float | None = Field(default=None, gt=0)
    max_itl_ms: float | None = Field(default=None, gt=0)
    max_tpot_ms: float | None = Field(default=None, gt=0)
    #: Ceilings on latency percentiles (``max_<metric>_ms_p<q>``), judged with a confidence bound over every request
    #: of the run (``judge.tails``): passed, FAILED or undecided.
    max_ttft_ms_p90: float | None = Field(default=None, gt=0)
    max_ttft_ms_p95: float | None = Field(default=None, gt=0)
    max_ttft_ms_p99: float | None = Field(default=None, gt=0)
    max_itl_ms_p90: float | None = Field(default=None, gt=0)
    max_itl_ms_p95: float | None = Field(default=None, gt=0)
    max_itl_ms_p99: float | None = Field(default=None, gt=0)
    max_tpot_ms_p90: float | None = Field(default=None, gt=0)
    max_tpot_ms_p95: float | None = Field(default=None, gt=0)
    max_tpot_ms_p99: float | None = Field(default=None, gt=0)
    max_e2e_ms_p90: float | None = Field(default=None, gt=0)
    max_e2e_ms_p95: float | None = Field(default=None, gt=0)
    max_e2e_ms_p99: float | None = Field(default=None, gt=0)
    #: Requests per second that met every ``workload.slo`` (vLLM ``bench serve --goodput``), judged with a
    #: confidence bound on the share of good requests (``judge.tails``).
    min_goodput: float | None = Field(default=None, gt=0)
    min_speedup: MinSpeedup | None = None
    #: Floors on the acceptance rate per draft position k (1 = the first draft token): ``{1: 0.7, 2: 0.5}``.
    #: The rate is unconditional: verify steps that accepted draft token k / all verify steps (vLLM's
    #: per-position rate, ``metrics.PositionAcceptance.rates``).
    min_accept_rate_at: dict[int, float] | None = None
    #: Thresholds per prompt category (the workload's JSONL ``category``): ``{code: {min_accept_length: 2.5}}``.
    categories: dict[str, CategoryThresholds] | None = None

    @field_validator("min_accept_rate_at", mode="before")
    @classmethod
    def _check_positions(cls, value: Any) -> Any:
        return _positions(value)


#: The percentile ceilings of :class:`Thresholds`: key -> (``RunMetrics`` field, percentile in (0, 1)).
TAIL_KEYS: dict[str, tuple[str, float]] = {
    f"max_{metric}_ms_p{q}": (f"{metric}_ms_p{q}", q / 100)
    for metric in ("ttft", "itl", "tpot", "e2e")
    for q in (90, 95, 99)
}

#: The keys of ``workload.slo``, as vLLM's and SGLang's ``--goodput KEY:VALUE`` name them (``e2el`` there).
SLO_KEYS = ("ttft_ms", "tpot_ms", "e2e_ms")


class Slo(_Strict):
    """``workload.slo``: the latency a request must meet to count toward goodput, in ms; a request counts when it
    succeeded and meets every key given (vLLM ``benchmarks/serve.py::calculate_metrics``, SGLang
    ``benchmark/goodput.py::calculate_goodput``; a request with one output token has TPOT 0 there)."""

    ttft_ms: float | None = Field(default=None, gt=0)
    tpot_ms: float | None = Field(default=None, gt=0)
    #: End-to-end latency (``e2el`` in vLLM and SGLang).
    e2e_ms: float | None = Field(default=None, gt=0)

    @model_validator(mode="after")
    def _some(self) -> Slo:
        if self.ttft_ms is None and self.tpot_ms is None and self.e2e_ms is None:
            raise ValueError(
                f"expected at least one of {', '.join(SLO_KEYS)}; fix: e.g. slo: {{ttft_ms: 500, tpot_ms: 50}}"
            )
        return self

    def as_ms(self) -> dict[str, float]:
        """The keys given -> their limit in ms, in :data:`SLO_KEYS` order."""
        return {k: float(v) for k in SLO_KEYS if (v := getattr(self, k)) is not None}


def _rate(value: Any) -> Any:
    """``request_rate``: requests per second > 0, or ``inf`` (YAML reads ``inf`` as a string, ``.inf`` as a float)."""
    if isinstance(value, str) and value.strip().lower() in ("inf", ".inf", "+inf"):
        return float("inf")
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise ValueError(
            f"expected requests per second (a number > 0, or inf), got {value!r}; fix: e.g. request_rate: 4"
        )
    if not value > 0:  # also NaN
        raise ValueError(
            f"expected requests per second > 0, got {value!r}; fix: e.g. request_rate: 4 (a Poisson stream of 4 "
            "requests/s), inf to send every request at once, or leave request_rate out for a closed loop at "
            "concurrency"
        )
    return float(value)


class TraceConfig(_Strict):
    """``trace:``: after the measured repeats, one extra phase of ``requests`` requests under the engine's own
    profiler (SGLang ``/start_profile`` + ``/stop_profile``; the reference server writes a Chrome trace of its draft
    and verify spans). The traced phase is never measured: a profiler slows what it watches."""

    #: Where the engine writes its trace (relative: against the profile file); None: ``.specdec/traces/<profile>``
    #: under the working directory.
    dir: str | None = None
    requests: int = Field(default=4, ge=1)
    #: SGLang ``ProfileReq.activities``.
    activities: tuple[Literal["CPU", "GPU", "MEM"], ...] = ("CPU", "GPU")


class RandomPrompts(_Strict):
    """``workload.random``: the prompts of ``prompts: random``, drawn as SGLang ``bench_serving --dataset-name
    random-ids --tokenize-prompt`` draws them (``workload.random_prompts``). The defaults are bench_serving's
    (``--random-input-len 1024 --random-range-ratio 0.0 --seed 42``); ``--random-output-len`` is the workload's
    ``max_new_tokens`` and ``--num-prompts`` its ``num_requests``."""

    #: ``--random-input-len``: tokens per prompt (the most; at least ``input_len * range_ratio``).
    input_len: int = Field(default=1024, ge=1)
    #: ``--random-range-ratio``: lengths are drawn uniformly from ``[max(int(len * ratio), 1), len]``; 1 = fixed.
    range_ratio: float = Field(default=0.0, ge=0, le=1)
    #: ``--seed``: bench_serving seeds numpy's global generator with it.
    seed: int = 42
    #: The tokenizer's ``vocab_size`` (Hugging Face, added tokens not counted), which the ids wrap around; None:
    #: read from the tokenizer at ``model_path`` (needs ``transformers``).
    vocab_size: int | None = Field(default=None, ge=1)


class Workload(_Strict):
    """What the measured phase sends. ``prompts`` is ``builtin``, ``random`` (token ids as SGLang bench_serving's
    ``random-ids`` dataset, settings in ``random``), or a path to JSONL (``prompt``/``text`` per line) or
    ShareGPT-style JSON (``conversations``: first human turn)."""

    prompts: str = "builtin"
    #: Settings of ``prompts: random`` (defaults when omitted); only with ``prompts: random``.
    random: RandomPrompts | None = None
    api: Literal["generate", "completions", "chat"] = "generate"
    max_new_tokens: int = Field(default=64, ge=1)
    num_requests: int = Field(default=16, ge=1)
    concurrency: int = Field(default=1, ge=1)
    warmup_requests: int = Field(default=2, ge=0)
    temperature: float = Field(default=0.0, ge=0)
    ignore_eos: bool = True
    #: Measured phases per server; compare uses the per-repeat values for its significance test.
    repeats: int = Field(default=3, ge=1)
    #: Sequential verdicts (``sequential.py``): measure one more repeat (or pair) at a time, up to this many, until
    #: each threshold, speedup and suspected regression is decided; ``repeats`` is then the first look. None with
    #: ``max_server_s`` None: fixed repeats.
    max_repeats: int | None = Field(default=None, ge=1)
    #: Sequential verdicts: server-seconds (measured phases and their warmups, both arms of a pair) a verdict may
    #: spend; with ``max_repeats`` unset, the repeats are capped at ``sequential.DEFAULT_MAX_REPEATS``.
    max_server_s: float | None = Field(default=None, gt=0)
    #: Per request, seconds without a new token before the run aborts as "server stalled".
    stall_timeout_s: float = Field(default=60.0, gt=0)
    #: Per request, total seconds.
    request_timeout_s: float = Field(default=600.0, gt=0)
    #: Fraction of failed requests above which the run is an error instead of a measurement.
    max_error_rate: float = Field(default=0.0, ge=0, le=1)
    #: Open loop, as SGLang ``bench_serving --request-rate``: requests arrive at this mean rate (requests/s) whatever
    #: the server's pace, with inter-arrival times drawn from ``arrival_seed`` (``workload.arrival_times``);
    #: ``concurrency`` caps the requests in flight (``--max-concurrency``); ``inf`` sends all at once. None: a
    #: closed loop, ``concurrency`` requests always in flight.
    request_rate: float | None = None
    #: Gamma shape of the inter-arrival times (vLLM ``bench serve --burstiness``): 1.0 (the default) is a Poisson
    #: stream, below 1 burstier, above 1 more even, ``inf`` evenly spaced. Only with ``request_rate``.
    burstiness: float | None = None
    #: ``bench_serving --seed`` for the arrival times (numpy's generator); with ``prompts: random`` the arrival times
    #: continue ``random.seed``'s generator after the prompts, as bench_serving's one generator does.
    arrival_seed: int = 42
    #: Latency objectives of goodput (``Slo``): ``goodput_per_s`` in the results and ``thresholds.min_goodput``.
    slo: Slo | None = None
    #: Processes that send a phase's requests (each with its own event loop): "auto" picks from the concurrency and
    #: the client's measured load (``client.auto_workers``), or a number.
    client_workers: int | Literal["auto"] = "auto"
    #: When the client's event-loop lag p99 exceeds 10% of the ITL p50 and the client itself was busy
    #: (``metrics.client_overloaded``): "warn" (a SpecdecWarning) or "fail" (the phase's tests fail). A busy machine
    #: (the client mostly idle) is always a warning.
    client_overload: Literal["warn", "fail"] = "warn"

    @field_validator("client_workers", mode="before")
    @classmethod
    def _client_workers(cls, value: Any) -> Any:
        if value == "auto" or (isinstance(value, int) and not isinstance(value, bool) and value >= 1):
            return value
        raise ValueError(f"expected 'auto' or an integer >= 1, got {value!r}")

    @field_validator("request_rate", mode="before")
    @classmethod
    def _request_rate(cls, value: Any) -> Any:
        return None if value is None else _rate(value)

    @field_validator("burstiness", mode="before")
    @classmethod
    def _burstiness(cls, value: Any) -> Any:
        if value is None:
            return None
        if isinstance(value, str) and value.strip().lower() in ("inf", ".inf", "+inf"):
            return float("inf")
        if isinstance(value, bool) or not isinstance(value, int | float) or not value > 0:
            raise ValueError(
                f"expected a gamma shape > 0, got {value!r}; fix: burstiness: 1.0 (Poisson arrivals), below 1 for "
                "bursts, above 1 (or inf) for evener arrivals"
            )
        return float(value)

    @model_validator(mode="after")
    def _open_loop(self) -> Workload:
        if self.burstiness is not None and self.request_rate is None:
            raise ValueError(
                f"burstiness: {self.burstiness:g} is set but request_rate is not (burstiness shapes the arrival times "
                "of an open loop); fix: add request_rate (requests/s), e.g. request_rate: 4, or remove burstiness"
            )
        return self

    @model_validator(mode="after")
    def _max_repeats(self) -> Workload:
        if self.max_repeats is not None and self.max_repeats < self.repeats:
            raise ValueError(
                f"max_repeats {self.max_repeats} is below repeats {self.repeats} (the first look); raise max_repeats "
                "or lower repeats"
            )
        return self

    @model_validator(mode="after")
    def _random_prompts(self) -> Workload:
        if self.prompts != "random":
            if self.random is not None:
                raise ValueError(f"random: is set but prompts is {self.prompts!r}; fix: prompts: random")
            return self
        if self.api != "generate":
            raise ValueError(
                f"prompts: random sends token ids (SGLang /generate input_ids), which api: {self.api} cannot carry; "
                "fix: api: generate, or a prompt file"
            )
        if self.random is None:
            object.__setattr__(self, "random", RandomPrompts())  # frozen model: bench_serving's defaults
        return self


#: Placeholders a ``nodes.launcher`` / ``nodes.stop`` template may use.
LAUNCHER_FIELDS = ("host", "rank", "nnodes", "cmd", "shell_cmd")


class NodesConfig(_Strict):
    """``nodes:``: one server spread over several hosts with SGLang's multi-node launch (``--nnodes``,
    ``--node-rank``, ``--dist-init-addr``; tensor parallelism across nodes), one launch per host.

    ``launcher`` is a command template run once per rank, split like a shell line: ``{cmd}`` as a whole word
    becomes the server command's words (``srun ... {cmd}``, or ``{cmd}`` alone to run locally); ``{shell_cmd}`` is
    the command as one shell-quoted string, for launchers that hand a string to a remote shell (``ssh -tt {host}
    {shell_cmd}``); ``{host}``, ``{rank}`` and ``{nnodes}`` are substituted everywhere. ``stop`` (optional, same
    placeholders) runs once per rank at teardown, after the launcher process was stopped, for what the launcher
    cannot end itself (e.g. ``ssh {host} pkill -f -- '--node-rank {rank}'``).
    """

    #: Rank order: ``hosts[0]`` is rank 0, the leader that serves HTTP and hosts ``--dist-init-addr``.
    hosts: list[str] = Field(min_length=2)
    launcher: str = "{cmd}"
    #: Port of ``--dist-init-addr hosts[0]:PORT`` (default: a port free on this machine when the run starts).
    dist_init_port: int | None = Field(default=None, ge=1, le=65535)
    stop: str | None = None

    @field_validator("launcher", "stop")
    @classmethod
    def _template(cls, value: str | None, info: Any) -> str | None:
        if value is None:
            return value
        import shlex
        import string

        try:
            words = shlex.split(value)
            names = [f for _, f, _, _ in string.Formatter().parse(value) if f is not None]
        except ValueError as exc:
            raise ValueError(f"not a command template ({exc}): {value!r}") from None
        unknown = [n for n in names if n not in LAUNCHER_FIELDS]
        if unknown:
            known = ", ".join("{" + f + "}" for f in LAUNCHER_FIELDS)
            raise ValueError(f"unknown placeholder {{{unknown[0]}}} in {value!r}; use {known}")
        if info.field_name == "launcher" and not ({"cmd", "shell_cmd"} & set(names)):
            raise ValueError(f"{value!r} has neither {{cmd}} nor {{shell_cmd}}, so the server would never start")
        if any("{cmd}" in w and w != "{cmd}" for w in words):
            raise ValueError(f"{{cmd}} must be a word of its own in {value!r}; inside a string use {{shell_cmd}}")
        return value


class _ToleranceStrings(list[str]):
    """A profile's ``tolerances:`` strings carrying their parse (:attr:`layer`) from the field validator, which has
    no model to put it on, to :meth:`Profile.model_post_init`: parsed once, with the field's error location."""

    __slots__ = ("layer",)

    def __init__(self, strings: list[str], layer: Tolerances) -> None:
        super().__init__(strings)
        self.layer = layer


class Profile(_Strict):
    """One named server configuration plus its workload and thresholds.

    The model checks what holds for every engine; for a profile built in code, ``engines.rules.resolve_paths`` and
    ``engines.rules.engine_problem`` add what its engine asks, as ``engines.rules.load_profiles`` does.
    """

    name: str
    server: Literal["reference", "sglang", "vllm"] = "reference"
    #: An already-running server; we never start or stop it.
    url: str | None = None
    #: None on ``server: reference`` means the bundled target.
    model_path: str | None = None
    tp_size: int = Field(default=1, ge=1)
    #: Python interpreter whose environment has the engine (default: the one running pytest).
    python: str | None = None
    host: str = "127.0.0.1"
    port: int | None = Field(default=None, ge=1, le=65535)
    random_seed: int = 0
    #: Extra launch flags, passed verbatim after ours.
    extra_args: list[str] = Field(default_factory=list)
    #: Applied to the server process on top of a clean base environment (PATH, HOME, ...), not the caller's shell.
    env: dict[str, str] = Field(default_factory=dict)
    required_env: list[str] = Field(default_factory=list)
    api_key: str | None = None
    api_key_env: str | None = None
    startup_timeout_s: float = Field(default=900.0, gt=0)
    #: Fail the startup if the server log shows no new line for this many seconds (None: only the total budget).
    startup_stall_s: float | None = Field(default=None, gt=0)
    enable_metrics: bool = True
    #: ``--max-running-requests``; None lets the engine choose (SGLang: 48 under speculative decoding).
    max_running_requests: int | None = Field(default=None, ge=1)
    speculative: SpeculativeConfig | None = None
    #: While this profile's server runs, no other server of the session runs (under pytest-xdist too). False: it may
    #: run beside other non-exclusive ones (CPU servers, or servers pinned to disjoint GPUs); see ``schedule``.
    exclusive: bool = True
    #: Baseline-compare tolerances, e.g. ["output_tok_s:5%", "accept_length:0.02"] (``tolerances.parse_tolerances``),
    #: parsed once when the profile is read: :attr:`tolerance_layer`. A YAML mapping (``{output_tok_s: 5%}``, or
    #: list items written ``- output_tok_s: 5%``) is read as those strings (``tolerances.tolerance_strings``, the
    #: marker's reader too).
    tolerances: list[str] = Field(default_factory=list)
    _tolerance_layer: Tolerances = PrivateAttr(default_factory=Tolerances)
    thresholds: Thresholds = Field(default_factory=Thresholds)
    workload: Workload = Field(default_factory=Workload)
    #: How a ``min_speedup`` reference arm is measured with this profile (``pairing.py``): ``interleaved`` (both
    #: servers alive, phases alternate) or ``bracketed`` (one server at a time: this, reference, this). None: by
    #: server kind (interleaved for reference and url:, bracketed for sglang and vllm).
    pairing: Literal["interleaved", "bracketed"] | None = None
    #: A multi-node server (SGLang ``--nnodes``): hosts, launcher template; None: one process on this machine.
    nodes: NodesConfig | None = None
    #: Drive the engine's profiler over one extra, unmeasured phase (:class:`TraceConfig`); None: no trace.
    trace: TraceConfig | None = None
    #: Where this profile was defined (file path); set by the loader.
    source: str = ""

    @property
    def is_speculative(self) -> bool:
        return self.speculative is not None

    @field_validator("tolerances", mode="before")
    @classmethod
    def _tolerances_as_strings(cls, value: Any) -> Any:
        # `tolerances: {output_tok_s: 5%}` and `- output_tok_s: 5%` are how YAML is written: a trial got
        # "Input should be a valid list" for the first, without the fix. The marker reads the same shapes.
        return tolerance_strings(value)  # ValueError for another shape

    @field_validator("tolerances")
    @classmethod
    def _tolerances_parse(cls, value: list[str], info: ValidationInfo) -> list[str]:
        # ToleranceError (a ValueError) naming the spec and the accepted forms; the loader reads its keys.
        layer = parse_tolerances(value, strict=True, origin=f"profile {info.data.get('name', '')}".rstrip())
        return _ToleranceStrings(value, layer)

    def model_post_init(self, context: Any, /) -> None:
        # The field validator's parse (model_construct skips validation: parsed here then).
        strings = self.tolerances
        parsed = strings.layer if isinstance(strings, _ToleranceStrings) else None
        self._tolerance_layer = parsed if parsed is not None else parse_tolerances(
            strings, strict=True, origin=f"profile {self.name}")  # fmt: skip

    @property
    def tolerance_layer(self) -> Tolerances:
        """The ``tolerances:`` layer as typed values (metric or field -> :class:`Tolerance`, with its category and
        ratio rows), parsed once when the profile was read, its origin ``profile NAME``; merged over the ini's and
        under the marker's by ``tolerances.merge_tolerances``."""
        return self._tolerance_layer

    @field_validator("env", mode="before")
    @classmethod
    def _env_scalars_to_str(cls, value: Any) -> Any:
        # YAML reads `OMP_NUM_THREADS: 1` as an int; an environment only holds strings.
        if isinstance(value, dict):
            return {
                k: str(v).lower() if isinstance(v, bool) else (str(v) if isinstance(v, int | float) else v)
                for k, v in value.items()
            }
        return value

    @model_validator(mode="after")
    def _ratio_arms(self) -> Profile:
        # A ratio row's tolerance naming an arm this profile is not paired with would be taken by no row.
        speedup = self.thresholds.min_speedup
        problem = misnamed_arms(self._tolerance_layer, speedup.vs) if speedup is not None else None
        if speedup is not None and problem:
            keys = [f"{name}/{arm}" for name, arm in foreign_ratio_tolerances(self._tolerance_layer, speedup.vs)]
            raise ToleranceError(f"tolerances: {problem}", keys)
        return self

    @model_validator(mode="after")
    def _goodput(self) -> Profile:
        if self.thresholds.min_goodput is not None and self.workload.slo is None:
            raise ValueError(
                f"thresholds.min_goodput: {self.thresholds.min_goodput:g} needs workload.slo (the latencies a request "
                "must meet to count toward goodput); fix: add e.g. workload: {slo: {ttft_ms: 500, tpot_ms: 50}}"
            )
        return self

    @model_validator(mode="after")
    def _check(self) -> Profile:
        # What each engine asks beyond this (a model path, multi-node support) is engines.rules's.
        if self.nodes is not None and self.url is not None:
            raise ValueError("nodes: and url: exclude each other (a server given by URL is never launched)")
        return self


class ProfileSet(BaseModel):
    """All profiles of one file, by name."""

    model_config = ConfigDict(frozen=True)

    path: Path
    profiles: dict[str, Profile]
    #: Line (1-based) of every key in the file, by its path from the root: ``("profiles", "eagle3", "speculative",
    #: "num_steps") -> 12``; list items by index (``"0"``). Empty for a set built in code.
    key_lines: dict[tuple[str, ...], int] = Field(default_factory=dict, repr=False)
    #: Profile -> its ``extends:`` chain, itself first (``("eagle3-wrong-layers", "eagle3", "baseline")``).
    chains: dict[str, tuple[str, ...]] = Field(default_factory=dict, repr=False)

    def locate(self, profile: str, key: tuple[str, ...] | str) -> tuple[int | None, str]:
        """Where the value of ``key`` (relative to ``profiles.<profile>``; dotted, ``[i]`` for list items, or a tuple)
        is written: the line of the nearest key that the file has (the key itself, else its block, else the profile's
        name), in the first profile of the ``extends:`` chain that writes it.

        A sweep point (``eagle3@num_steps=2``) is located in the profile it was derived from.

        :returns: (line or None when the file has none of it, the profile whose block holds that line).
        """
        parts = key_parts(key) if isinstance(key, str) else tuple(key)
        name = profile if profile in self.chains else profile.split("@", 1)[0]
        chain = self.chains.get(name, (name,))
        for depth in range(len(parts), -1, -1):
            for link in chain:
                line = self.key_lines.get(("profiles", link, *parts[:depth]))
                if line is not None:
                    return line, link
        return None, profile

    def get(self, name: str, flag: str = "--server-profile") -> Profile:
        """:raises ProfileError: naming ``flag``, the file and the available profiles."""
        try:
            return self.profiles[name]
        except KeyError:
            available = ", ".join(sorted(self.profiles)) or "none"
            raise ProfileError(
                f"{flag}={name}: no such profile in {self.path}{did_you_mean(name, list(self.profiles))} "
                f"(available: {available})",
                path=self.path,
            ) from None


def key_parts(key: str) -> tuple[str, ...]:
    """``speculative.aux_hidden_state_layer_ids[1]`` -> ``("speculative", "aux_hidden_state_layer_ids", "1")``."""
    return tuple(part for part in re.split(r"[.\[\]]+", key) if part)


#: How alike a word and a suggestion must be (``difflib.SequenceMatcher.ratio``): 'num_step' -> 'num_steps' (0.94)
#: and 'bsae' -> 'base' (0.75) are suggested, 'draft_temprature' -> 'draft_model_path' (0.63) is not.
_CLOSE = 0.75


def close_match(word: str, choices: Iterable[str]) -> str | None:
    """The choice ``word`` is most likely a misspelling of: the closest at ratio >= ``_CLOSE``, else the one choice
    ``word`` begins (``sgl`` -> ``sglang``); None when nothing is that close."""
    choices = list(choices)
    close = difflib.get_close_matches(word, choices, n=1, cutoff=_CLOSE)
    if close:
        return close[0]
    prefixed = [c for c in choices if len(word) >= 3 and c.startswith(word)]
    return prefixed[0] if len(prefixed) == 1 else None


def did_you_mean(word: str, choices: list[str]) -> str:
    """`` (did you mean 'eagle3'?)`` when ``word`` is close to one of ``choices`` (``close_match``), else ``""``."""
    close = close_match(word, choices)
    return f" (did you mean {close!r}?)" if close else ""
