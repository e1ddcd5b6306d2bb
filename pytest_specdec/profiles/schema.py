"""Profile schema (typed, strict) and YAML loading with ``extends:``.

A profile file looks like::

    profiles:
      baseline:
        server: reference            # reference | sglang | vllm
        workload: {max_new_tokens: 64, num_requests: 16}
      eagle3:
        extends: baseline
        speculative: {algorithm: EAGLE3, num_steps: 3, eagle_topk: 1, num_draft_tokens: 4}
        thresholds: {min_accept_length: 2.0, min_tok_s: 50}

Relative paths resolve against the YAML file's directory. Unknown keys are errors (strict on input).
"""

from __future__ import annotations

import copy
import difflib
import os
import re
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any, Literal, get_args, get_origin

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from pytest_specdec.core.errors import ProfileError

__all__ = [
    "BUNDLED_DRAFT_EAGLE3",
    "BUNDLED_TARGET",
    "CategoryThresholds",
    "MinSpeedup",
    "NodesConfig",
    "Profile",
    "ProfileSet",
    "RandomPrompts",
    "SpeculativeConfig",
    "Thresholds",
    "TraceConfig",
    "Workload",
    "did_you_mean",
    "load_profiles",
    "resolve_paths",
]


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


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


class Profile(_Strict):
    """One named server configuration plus its workload and thresholds."""

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
    #: Baseline-compare tolerances, e.g. ["output_tok_s:5%", "accept_length:0.02"] (``tolerances.parse_tolerances``).
    tolerances: list[str] = Field(default_factory=list)
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
    def _check(self) -> Profile:
        if self.server == "sglang" and self.url is None and self.model_path is None:
            raise ValueError("model_path is required for server: sglang (or give url:)")
        if self.nodes is not None:
            if self.url is not None:
                raise ValueError("nodes: and url: exclude each other (a server given by URL is never launched)")
            if self.server == "vllm":
                raise ValueError("nodes: launches SGLang's multi-node mode; use server: sglang (or reference)")
            if self.tp_size % len(self.nodes.hosts):
                raise ValueError(
                    f"tp_size {self.tp_size} is not a multiple of the {len(self.nodes.hosts)} nodes.hosts "
                    "(SGLang splits tensor parallelism evenly across nodes)"
                )
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
        parts = _key_parts(key) if isinstance(key, str) else tuple(key)
        name = profile if profile in self.chains else profile.split("@", 1)[0]
        chain = self.chains.get(name, (name,))
        for depth in range(len(parts), -1, -1):
            for link in chain:
                line = self.key_lines.get(("profiles", link, *parts[:depth]))
                if line is not None:
                    return line, link
        return None, profile

    def get(self, name: str) -> Profile:
        """:raises ProfileError: naming the file and the available profiles."""
        try:
            return self.profiles[name]
        except KeyError:
            available = ", ".join(sorted(self.profiles)) or "none"
            raise ProfileError(
                f"--server-profile={name}: no such profile in {self.path}{_did_you_mean(name, list(self.profiles))} "
                f"(available: {available})",
                path=self.path,
            ) from None


#: The bundled reference server's checkpoints (``server: reference`` defaults; filled in by ``resolve_paths``).
BUNDLED_ASSETS = Path(__file__).resolve().parents[1] / "refserver" / "assets"
BUNDLED_TARGET = BUNDLED_ASSETS / "target"
BUNDLED_DRAFT_EAGLE3 = BUNDLED_ASSETS / "draft-eagle3"

_HOW_TO_PASS = (
    "check the path (pytest: --specdec-profiles=PATH or the ini key specdec_profiles; "
    "python -m pytest_specdec: the PROFILE_FILE argument)"
)


def load_profiles(path: str | Path) -> ProfileSet:
    """Load and validate a profile file.

    Steps: ``yaml.safe_load``; the top-level ``profiles:`` mapping; ``extends:`` chains deep-merged base first
    (``_merge``); relative paths resolved against the file's directory (``model_path``,
    ``speculative.draft_model_path``, ``workload.prompts`` unless ``builtin`` or ``random``, ``python``; a value is
    treated as a path when it is absolute, starts with ``.`` or ``~``, or names an existing file relative to the YAML
    file, so Hugging Face ids such as ``meta-llama/Llama-3.1-8B-Instruct`` stay as they are); validation; then
    ``resolve_paths`` fills the bundled assets on ``server: reference``.

    :param path: the YAML file; messages name it as given.
    :returns: every profile of the file by name, each with ``source`` set to the file's absolute path.
    :raises ProfileError: missing or unreadable file, YAML syntax error (with line and column), unknown key (with a
        ``did you mean`` suggestion only for a close match, else the allowed keys), invalid value, ``extends`` to an
        unknown profile or in a cycle. The message has one line per problem, in file order:
        ``FILE:LINE: profiles.NAME.KEY.PATH: what was expected, got VALUE``, LINE being the offending key's (or its
        block's) line; a problem in a parent profile is reported once, under the parent, with
        ``(inherited through extends: CHILD -> PARENT)``.
    """
    file = Path(path)
    shown = str(path)
    try:
        text = file.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise ProfileError(f"{shown}: profile file not found; {_HOW_TO_PASS}", path=file) from None
    except (OSError, UnicodeDecodeError) as exc:
        raise ProfileError(f"{shown}: cannot read profile file: {exc}", path=file) from None
    try:
        data, lines = _load_yaml(text)
    except _DuplicateKeyError as exc:
        raise ProfileError(f"{shown}{exc}", path=file) from None
    except yaml.MarkedYAMLError as exc:
        raise ProfileError(_yaml_error(shown, text, exc), path=file) from None
    except yaml.YAMLError as exc:
        raise ProfileError(f"{shown}: YAML syntax error: {exc}", path=file) from None

    if not isinstance(data, dict) or not isinstance(data.get("profiles"), dict):
        got = type(data).__name__ if not isinstance(data, dict) else f"keys {sorted(map(str, data))}"
        got = "an empty file" if data is None else got
        raise ProfileError(
            f"{shown}: expected a top-level mapping 'profiles:' of name -> profile, got {got}", path=file
        )

    def at(*key: str) -> str:
        """``FILE:LINE`` of the key at this path from the file's root (``FILE`` when the file has no such key)."""
        line = lines.get(tuple(map(str, key)))
        return f"{shown}:{line}" if line is not None else shown

    problems = [
        f"{at(str(key))}: unknown top-level key {key!r}{_did_you_mean(str(key), ['profiles'])}"
        for key in data
        if key != "profiles"
    ]
    raw: dict[str, Any] = data["profiles"]
    if not raw:
        problems.append(f"{at('profiles')}: profiles: is empty; define at least one profile")
    chains = {str(name): tuple(_chain(str(name), raw)) for name in raw}
    profile_set = ProfileSet(path=file, profiles={}, key_lines=lines, chains=chains)
    profiles: dict[str, Profile] = {}
    #: message, under the profile that sets the key -> the extends chains it reached other profiles through
    schema: dict[str, list[str]] = {}
    for name, body in raw.items():
        if not isinstance(body, dict):
            where = at("profiles", name)
            problems.append(f"{where}: profiles.{name}: expected a mapping of profile keys, got {body!r}")
            continue
        try:
            merged = _resolve_extends(str(name), raw, at)
        except ProfileError as exc:
            problems.append(str(exc))
            continue
        merged = _resolve_relative(merged, file.resolve().parent)
        merged["name"] = str(name)
        merged["source"] = str(file.resolve())
        try:
            profiles[str(name)] = resolve_paths(Profile.model_validate(merged))
        except ValidationError as exc:
            for err in exc.errors():
                line, origin = profile_set.locate(str(name), tuple(str(part) for part in err["loc"]))
                message = _describe_error(f"{shown}:{line}" if line is not None else shown, origin, err)
                heirs = schema.setdefault(message, [])
                if origin != name:
                    chain = chains[str(name)]
                    heirs.append(" -> ".join(chain[: chain.index(origin) + 1]))
    for message, heirs in schema.items():
        # A parent's mistake is reported once, under the parent, naming who inherits it (not again per child).
        problems.append(message + (f" (inherited through extends: {'; '.join(heirs)})" if heirs else ""))
    names = list(map(str, raw))
    for name, profile in profiles.items():
        ms = profile.thresholds.min_speedup
        if ms is not None and (ms.vs not in names or ms.vs == name):
            others = [n for n in names if n != name]
            line, origin = profile_set.locate(name, ("thresholds", "min_speedup", "vs"))
            where = f"{shown}:{line}" if line is not None else shown
            problems.append(
                f"{where}: profiles.{name}.thresholds.min_speedup.vs: {ms.vs!r} is not another profile of this file"
                f"{_did_you_mean(ms.vs, others)} (available: {', '.join(sorted(others))})"
            )
    if problems:
        # In file order: the line numbers lead the user through the file once.
        number = re.compile(re.escape(shown) + r":(\d+)")
        problems.sort(key=lambda p: int(m.group(1)) if (m := number.match(p)) else 0)
        raise ProfileError("\n".join(problems), path=file)
    return profile_set.model_copy(update={"profiles": profiles})


#: PyYAML's context -> what usually went wrong at the context mark (an opening that was never closed).
_UNCLOSED = {
    "while parsing a flow mapping": "is its closing '}' missing?",
    "while parsing a flow sequence": "is its closing ']' missing?",
    "while scanning a quoted scalar": "is its closing quote missing?",
}


class _DuplicateKeyError(yaml.YAMLError):
    """A key given twice in one YAML mapping; ``str()`` is ``:LINE:COL: duplicate key ...`` (after the file name)."""


class _UniqueKeyLoader(yaml.SafeLoader):
    """PyYAML's ``SafeLoader``, refusing a key given twice in one mapping: PyYAML keeps the last value silently, so
    ``num_steps: 3`` then ``num_steps: 4`` in one block would run 4 steps with no word. Merge keys (``<<: *base``)
    and the keys they bring in are not duplicates."""

    def construct_mapping(self, node: yaml.MappingNode, deep: bool = False) -> dict[Any, Any]:
        seen: dict[Any, int] = {}
        for key_node, _ in node.value:
            if key_node.tag == "tag:yaml.org,2002:merge":
                continue
            key = self.construct_object(key_node, deep=deep)  # type: ignore[no-untyped-call]
            if not isinstance(key, str | int | float | bool):
                continue
            mark = key_node.start_mark
            if key in seen:
                raise _DuplicateKeyError(
                    f":{mark.line + 1}:{mark.column + 1}: duplicate key {key!r} in one mapping (first at line "
                    f"{seen[key]}); YAML would silently keep only this last value: remove one of them"
                )
            seen[key] = mark.line + 1
        return super().construct_mapping(node, deep=deep)


def _load_yaml(text: str) -> tuple[Any, dict[tuple[str, ...], int]]:
    """The document (``_UniqueKeyLoader``) and the line of every key in it, from PyYAML's node marks.

    :raises yaml.YAMLError: as ``yaml.load`` does (``_DuplicateKeyError`` for a key given twice).
    """
    loader = _UniqueKeyLoader(text)
    try:
        node = loader.get_single_node()  # type: ignore[no-untyped-call]
        data = loader.construct_document(node) if node is not None else None  # type: ignore[no-untyped-call]
    finally:
        loader.dispose()  # type: ignore[no-untyped-call]
    lines: dict[tuple[str, ...], int] = {}

    def walk(node: yaml.Node, path: tuple[str, ...]) -> None:
        if isinstance(node, yaml.MappingNode):
            for key_node, value_node in node.value:
                if isinstance(key_node, yaml.ScalarNode) and key_node.tag != "tag:yaml.org,2002:merge":
                    here = (*path, str(key_node.value))
                    lines.setdefault(here, key_node.start_mark.line + 1)
                    walk(value_node, here)
        elif isinstance(node, yaml.SequenceNode):
            for i, item in enumerate(node.value):
                lines.setdefault((*path, str(i)), item.start_mark.line + 1)
                walk(item, (*path, str(i)))

    if node is not None:
        walk(node, ())
    return data, lines


def _key_parts(key: str) -> tuple[str, ...]:
    """``speculative.aux_hidden_state_layer_ids[1]`` -> ``("speculative", "aux_hidden_state_layer_ids", "1")``."""
    return tuple(part for part in re.split(r"[.\[\]]+", key) if part)


def _chain(name: str, raw: dict[str, Any]) -> list[str]:
    """``name`` and the profiles its ``extends:`` reaches, nearest first; stops at a cycle or a missing profile (those
    are reported by ``_resolve_extends``)."""
    chain = [name]
    while isinstance(raw.get(chain[-1]), dict) and isinstance(raw[chain[-1]].get("extends"), str):
        parent = raw[chain[-1]]["extends"]
        if parent in chain or not isinstance(raw.get(parent), dict):
            break
        chain.append(parent)
    return chain


def _yaml_error(shown: str, text: str, exc: yaml.MarkedYAMLError) -> str:
    """``FILE:LINE:COL: YAML syntax error: PROBLEM`` at PyYAML's problem mark, plus the context mark when PyYAML
    gives one on another line: an unclosed ``{`` on line 4 is only noticed on line 5, so both lines are named.

    Example: ``specdec.yaml:5:15: YAML syntax error: expected ',' or '}', but got ':' (while parsing a flow mapping
    that starts at 4:15: `workload: {max_new_tokens: 64`; is its closing '}' missing?)``. A tab gets its own message,
    naming the line: ``specdec.yaml:3:1: YAML syntax error: a tab in the indentation of line 3 ('\\tserver: sglang');
    tabs are not allowed in YAML indentation: indent with spaces``.
    """
    mark = exc.problem_mark or exc.context_mark
    where = f":{mark.line + 1}:{mark.column + 1}" if mark is not None else ""
    lines = text.splitlines()
    line = lines[mark.line] if mark is not None and mark.line < len(lines) else ""
    if mark is not None and (line[mark.column : mark.column + 1] == "\t" or "tab character" in (exc.problem or "")):
        # PyYAML says "found character '\t' that cannot start any token", which does not say what to do.
        if not line[: mark.column].strip(" \t"):
            return (
                f"{shown}{where}: YAML syntax error: a tab in the indentation of line {mark.line + 1} ({line!r}); "
                "tabs are not allowed in YAML indentation: indent with spaces"
            )
        return (
            f"{shown}{where}: YAML syntax error: a tab in line {mark.line + 1} ({line!r}); YAML (PyYAML) accepts a "
            "tab only inside quotes or a comment: use spaces"
        )
    message = f"{shown}{where}: YAML syntax error: {exc.problem or exc.context or 'invalid YAML'}"
    ctx = exc.context_mark
    if exc.context and exc.problem and ctx is not None and (mark is None or ctx.line != mark.line):
        snippet = lines[ctx.line].strip() if ctx.line < len(lines) else ""
        hint = _UNCLOSED.get(exc.context)
        message += f" ({exc.context} that starts at {ctx.line + 1}:{ctx.column + 1}"
        message += f": `{snippet}`" if snippet else ""
        message += f"; {hint})" if hint else ")"
    return message


def resolve_paths(profile: Profile) -> Profile:
    """Fill the bundled reference assets: on ``server: reference``, ``model_path`` None becomes ``BUNDLED_TARGET``
    and, for algorithm EAGLE3 or EAGLE with no ``draft_model_path``, the draft becomes ``BUNDLED_DRAFT_EAGLE3``.

    ``load_profiles`` calls it; call it yourself on a ``Profile`` built in code. Idempotent.

    :returns: the same profile when nothing changes, else an updated copy.
    """
    if profile.server != "reference":
        return profile
    update: dict[str, Any] = {}
    if profile.model_path is None:
        update["model_path"] = str(BUNDLED_TARGET)
    spec = profile.speculative
    if spec is not None and spec.algorithm in ("EAGLE3", "EAGLE") and spec.draft_model_path is None:
        update["speculative"] = spec.model_copy(update={"draft_model_path": str(BUNDLED_DRAFT_EAGLE3)})
    return profile.model_copy(update=update) if update else profile


def _resolve_extends(name: str, raw: dict[str, Any], at: Callable[..., str]) -> dict[str, Any]:
    """The profile's mapping with its ``extends:`` chain merged in (base first), ``extends`` removed.

    :param at: key path from the file's root -> ``FILE:LINE`` (``load_profiles``).
    """
    chain = [name]
    body: dict[str, Any] = raw[name]
    while "extends" in body:
        parent = body["extends"]
        where = at("profiles", chain[-1], "extends")
        if not isinstance(parent, str):
            raise ProfileError(
                f"{where}: profiles.{chain[-1]}.extends: expected a profile name, got {parent!r}", profile=name
            )
        if parent in chain:
            cycle = " -> ".join([*chain, parent])
            where = at("profiles", name, "extends")
            raise ProfileError(
                f"{where}: profiles.{name}.extends: cycle {cycle}; remove one of these 'extends:'", profile=name
            )
        if parent not in raw or not isinstance(raw[parent], dict):
            available = ", ".join(sorted(map(str, raw)))
            raise ProfileError(
                f"{where}: profiles.{chain[-1]}.extends: no profile {parent!r} in this file"
                f"{_did_you_mean(parent, list(map(str, raw)))} (available: {available})",
                profile=name,
            )
        chain.append(parent)
        body = raw[parent]
    merged: dict[str, Any] = {}
    for link in reversed(chain):
        merged = _merge(merged, {k: v for k, v in raw[link].items() if k != "extends"})
    return merged


def _looks_like_path(value: str, base: Path) -> bool:
    return value.startswith((".", "~", "/")) or (base / value).exists()


def _resolve_one(value: Any, base: Path) -> Any:
    if not isinstance(value, str) or not value or not _looks_like_path(value, base):
        return value
    # abspath, not resolve(): a venv's bin/python is a symlink whose target is outside the venv.
    return os.path.normpath(os.path.abspath(base / Path(value).expanduser()))


def _resolve_relative(merged: dict[str, Any], base: Path) -> dict[str, Any]:
    out = copy.deepcopy(merged)
    for key in ("model_path", "python"):
        out[key] = _resolve_one(out.get(key), base) if key in out else None
        if out[key] is None:
            del out[key]
    spec = out.get("speculative")
    if isinstance(spec, dict) and "draft_model_path" in spec:
        spec["draft_model_path"] = _resolve_one(spec["draft_model_path"], base)
    workload = out.get("workload")
    if isinstance(workload, dict) and isinstance(workload.get("prompts"), str) and workload["prompts"] not in (
        "builtin",
        "random",
    ):
        # A prompt file is always a path (never a hub id), so resolve it even when it does not exist yet.
        workload["prompts"] = str((base / Path(workload["prompts"]).expanduser()).resolve())
    return out


#: How alike a word and a suggestion must be (``difflib.SequenceMatcher.ratio``): 'num_step' -> 'num_steps' (0.94)
#: and 'bsae' -> 'base' (0.75) are suggested, 'draft_temprature' -> 'draft_model_path' (0.63) is not.
_CLOSE = 0.75


def _close_match(word: str, choices: Iterable[str]) -> str | None:
    """The choice ``word`` is most likely a misspelling of: the closest at ratio >= ``_CLOSE``, else the one choice
    ``word`` begins (``sgl`` -> ``sglang``); None when nothing is that close."""
    choices = list(choices)
    close = difflib.get_close_matches(word, choices, n=1, cutoff=_CLOSE)
    if close:
        return close[0]
    prefixed = [c for c in choices if len(word) >= 3 and c.startswith(word)]
    return prefixed[0] if len(prefixed) == 1 else None


def did_you_mean(word: str, choices: list[str]) -> str:
    """`` (did you mean 'eagle3'?)`` when ``word`` is close to one of ``choices`` (``_close_match``), else ``""``."""
    close = _close_match(word, choices)
    return f" (did you mean {close!r}?)" if close else ""


_did_you_mean = did_you_mean


def _keys_elsewhere(word: str) -> str | None:
    """The key of another profile block ``word`` is close to (``temprature`` -> ``workload.temperature``)."""
    blocks: dict[str, type[BaseModel]] = {
        "": Profile, "speculative.": SpeculativeConfig, "workload.": Workload, "thresholds.": Thresholds,
        "nodes.": NodesConfig, "trace.": TraceConfig,
    }  # fmt: skip
    by_key: dict[str, list[str]] = {}
    for prefix, model in blocks.items():
        for k in model.model_fields:
            if k not in ("name", "source"):
                by_key.setdefault(k, []).append(f"{prefix}{k}")
    close = _close_match(word, by_key)
    return by_key[close][0] if close is not None else None


_TYPE_WORDS = {int: "an integer", float: "a number", bool: "true or false", str: "a string"}


def _walk(model: type[BaseModel], loc: tuple[int | str, ...]) -> tuple[type[BaseModel] | None, Any]:
    """Follow ``loc`` through nested models: (the model owning the last named key, that key's FieldInfo)."""
    owner: type[BaseModel] | None = model
    info: Any = None
    for part in loc:
        if isinstance(part, int) or owner is None:
            continue
        info = owner.model_fields.get(part)
        if info is None:
            return owner, None
        nested = [a for a in (info.annotation, *get_args(info.annotation)) if _is_model(a)]
        owner_next = nested[0] if nested else None
        if part == loc[-1] or owner_next is None:
            return owner, info
        owner = owner_next
    return owner, info


def _is_model(obj: Any) -> bool:
    return isinstance(obj, type) and issubclass(obj, BaseModel)


def _expected(info: Any, element: bool) -> str:
    """'an integer >= 1', 'a number > 0', ... from a field's annotation and ``Field`` bounds."""
    annotation = info.annotation if info is not None else None
    args = [a for a in get_args(annotation) if a is not type(None)] or [annotation]
    if element:
        inner = [get_args(a) for a in args if get_origin(a) in (list, dict)]
        args = [x for group in inner for x in group[-1:]] or args
    words = [_TYPE_WORDS[a] for a in args if a in _TYPE_WORDS]
    text = words[0] if words else "a valid value"
    if info is not None and not element:
        bounds: list[tuple[str, Any]] = []
        for meta in info.metadata:
            for attr, sign in (("ge", ">="), ("gt", ">"), ("le", "<="), ("lt", "<")):
                bound = getattr(meta, attr, None)
                if bound is not None:
                    bounds.append((sign, f"{bound:g}" if isinstance(bound, float) else str(bound)))
        signs = dict(bounds)
        if set(signs) == {">=", "<="}:
            text += f" between {signs['>=']} and {signs['<=']}"  # "a number between 0 and 1", not ">= 0 <= 1"
        else:
            text += "".join(f" {sign} {bound}" for sign, bound in bounds)
    return text


def _literal_choices(info: Any) -> list[str]:
    """The string values a ``Literal[...]`` field (possibly inside ``X | None``) allows, e.g. ``server``'s."""
    annotation = info.annotation if info is not None else None
    literals = [a for a in (annotation, *get_args(annotation)) if get_origin(a) is Literal]
    return [str(v) for lit in literals for v in get_args(lit) if isinstance(v, str)]


def _describe_error(shown: str, name: str, err: Any) -> str:
    """One line for one pydantic error: file, key path, what was expected, the value, and the fix when known."""
    loc: tuple[int | str, ...] = tuple(err["loc"])
    key = ".".join(f"[{p}]" if isinstance(p, int) else str(p) for p in loc).replace(".[", "[")
    where = f"{shown}: profiles.{name}" + (f".{key}" if key else "")
    kind = err["type"]
    value = err.get("input")
    owner, info = _walk(Profile, loc)
    element = bool(loc) and isinstance(loc[-1], int)
    if kind == "extra_forbidden":
        choices = sorted(owner.model_fields) if owner is not None else []
        choices = [c for c in choices if c not in ("name", "source")]
        hint = _did_you_mean(str(loc[-1]), choices)
        elsewhere = None if hint else _keys_elsewhere(str(loc[-1]))
        if elsewhere is not None and elsewhere.rpartition(".")[0] != ".".join(map(str, loc[:-1])):
            hint = f" (did you mean {elsewhere!r}, a key of another block?)"
        return f"{shown}: profiles.{'.'.join(map(str, (name, *loc[:-1])))}: unknown key {loc[-1]!r}" + (
            hint or f" (allowed: {', '.join(choices)})"
        )
    if kind == "missing":
        return f"{where}: required key missing"
    if kind == "literal_error":
        hint = _did_you_mean(value, _literal_choices(info)) if isinstance(value, str) else ""
        return f"{where}: expected one of {err['ctx']['expected']}, got {value!r}{hint}"
    if kind in ("value_error", "assertion_error"):
        msg = str(err["msg"]).removeprefix("Value error, ").removeprefix("Assertion failed, ")
        return f"{where}: {msg}"
    if kind.endswith(("_type", "_parsing", "_from_float")) or kind in (
        "greater_than",
        "greater_than_equal",
        "less_than",
        "less_than_equal",
    ):
        if kind in ("list_type", "dict_type", "model_type", "model_attributes_type"):
            what = {"list_type": "a list", "dict_type": "a mapping"}.get(kind, "a mapping of keys")
            return f"{where}: expected {what}, got {value!r}"
        return f"{where}: expected {_expected(info, element)}, got {value!r}"
    return f"{where}: {err['msg']}, got {value!r}"


def _merge(base: dict[str, Any], over: dict[str, Any]) -> dict[str, Any]:
    """Deep merge for ``extends:``: mappings merge key by key, everything else is replaced."""
    out = copy.deepcopy(base)
    for key, value in over.items():
        if isinstance(value, dict) and isinstance(out.get(key), dict):
            out[key] = _merge(out[key], value)
        else:
            out[key] = copy.deepcopy(value)
    return out
