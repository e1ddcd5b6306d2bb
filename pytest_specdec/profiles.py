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
from pathlib import Path
from typing import Any, Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from pytest_specdec.errors import ProfileError

__all__ = [
    "MinSpeedup",
    "Profile",
    "ProfileSet",
    "SpeculativeConfig",
    "Thresholds",
    "Workload",
    "load_profiles",
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


class Thresholds(_Strict):
    """Floors and ceilings; a marker's keyword arguments override these key by key."""

    min_accept_length: float | None = Field(default=None, ge=1)
    min_accept_rate: float | None = Field(default=None, ge=0, le=1)
    min_tok_s: float | None = Field(default=None, gt=0)
    max_ttft_ms: float | None = Field(default=None, gt=0)
    max_itl_ms: float | None = Field(default=None, gt=0)
    max_tpot_ms: float | None = Field(default=None, gt=0)
    min_speedup: MinSpeedup | None = None


class Workload(_Strict):
    """What the measured phase sends. ``prompts`` is ``builtin`` or a path to JSONL (``prompt``/``text`` per line)
    or ShareGPT-style JSON (``conversations``: first human turn)."""

    prompts: str = "builtin"
    api: Literal["generate", "completions", "chat"] = "generate"
    max_new_tokens: int = Field(default=64, ge=1)
    num_requests: int = Field(default=16, ge=1)
    concurrency: int = Field(default=1, ge=1)
    warmup_requests: int = Field(default=2, ge=0)
    temperature: float = Field(default=0.0, ge=0)
    ignore_eos: bool = True
    repeats: int = Field(default=1, ge=1)
    #: Per request, seconds without a new token before the run aborts as "server stalled".
    stall_timeout_s: float = Field(default=60.0, gt=0)
    #: Per request, total seconds.
    request_timeout_s: float = Field(default=600.0, gt=0)
    #: Fraction of failed requests above which the run is an error instead of a measurement.
    max_error_rate: float = Field(default=0.0, ge=0, le=1)


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
    speculative: SpeculativeConfig | None = None
    thresholds: Thresholds = Field(default_factory=Thresholds)
    workload: Workload = Field(default_factory=Workload)
    #: Where this profile was defined (file path); set by the loader.
    source: str = ""

    @property
    def is_speculative(self) -> bool:
        return self.speculative is not None

    @model_validator(mode="after")
    def _check(self) -> Profile:
        if self.server == "sglang" and self.url is None and self.model_path is None:
            raise ValueError("model_path is required for server: sglang (or give url:)")
        return self


class ProfileSet(BaseModel):
    """All profiles of one file, by name."""

    model_config = ConfigDict(frozen=True)

    path: Path
    profiles: dict[str, Profile]

    def get(self, name: str) -> Profile:
        """:raises ProfileError: naming the file and the available profiles."""
        try:
            return self.profiles[name]
        except KeyError:
            available = ", ".join(sorted(self.profiles)) or "none"
            raise ProfileError(
                f"--server-profile={name}: no such profile in {self.path} (available: {available})", path=self.path
            ) from None


def load_profiles(path: str | Path) -> ProfileSet:
    """Load and validate a profile file.

    :raises ProfileError: unreadable file, YAML syntax error, unknown or invalid key, ``extends`` cycle; the message
        names the file, the profile, the key path and the value.
    """
    raise NotImplementedError


def _merge(base: dict[str, Any], over: dict[str, Any]) -> dict[str, Any]:
    """Deep merge for ``extends:``: mappings merge key by key, everything else is replaced."""
    out = copy.deepcopy(base)
    for key, value in over.items():
        if isinstance(value, dict) and isinstance(out.get(key), dict):
            out[key] = _merge(out[key], value)
        else:
            out[key] = copy.deepcopy(value)
    return out


_ = (yaml, ValidationError)
