"""Preflight: rules over (profile, target/draft config.json, draft safetensors header) -> findings, before launch.

Rules (each names the SGLang source it encodes):

1. algorithm vs draft architecture (EAGLE3 needs an EAGLE-3 draft; EAGLE/NEXTN must not get one);
2. EAGLE-3 aux layer ids: nested under ``eagle_config``, ints, unique, ascending, in the range the target captures,
   ``-1`` (the embedding output) only with ``speculative.allow_embedding_capture``;
3. ``len(ids) x target hidden == fc.weight`` input width (safetensors header only);
4. steps / topk / draft tokens as the engine resolves them (``Engine.speculative_issues``: for SGLang all three or
   none, and what SGLang will really run); acceptance floors beyond ``Engine.max_tokens_per_step``;
5. draft vs target: hidden size, vocab size, context length vs the workload;
6. ``required_env`` present in the launch environment; env the engine overrides;
7. flags renamed or removed in the engine version that will run; aux-id convention vs the engine's.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

from pytest_specdec.core.metric_table import METRICS, tail_samples_needed
from pytest_specdec.core.order_stats import TAIL_CONFIDENCE, min_samples
from pytest_specdec.core.tolerances import field_specs
from pytest_specdec.engines.rules import BUNDLED_ASSETS
from pytest_specdec.profiles.schema import TAIL_KEYS, Profile, ProfileSet
from pytest_specdec.profiles.weights import read_safetensors_header

if TYPE_CHECKING:
    from pytest_specdec.engines.base import Engine

__all__ = ["Finding", "blocking", "format_findings", "locate", "read_safetensors_header", "run_preflight"]

Severity = Literal["error", "warning", "note"]
_ORDER = {"error": 0, "warning": 1, "note": 2}
_HUB_ID = re.compile(r"^[A-Za-z0-9][\w.-]*/[\w.-]+$")


@dataclass(frozen=True, slots=True)
class Finding:
    """One preflight result.

    ``file`` is where the offending value lives: the profile YAML (then ``key`` is relative to
    ``profiles.<profile>``), or a config.json / safetensors file (then ``key`` is the JSON key or tensor name).
    """

    severity: Severity
    profile: str
    file: str
    key: str
    value: Any
    why: str
    fix: str
    #: Line of the key in ``file`` (``locate``); None when unknown.
    line: int | None = None
    #: The profile whose block writes the key, when it is not ``profile`` (inherited through ``extends:``).
    via: str | None = None

    def __str__(self) -> str:
        """``SEVERITY: FILE:LINE: profiles.PROFILE.KEY: why (got VALUE); fix: FIX`` for a profile key (the shape of
        the profile loader's errors), ``SEVERITY: FILE: KEY: ... [profile P]; fix: ...`` for a model file's."""
        # A float as written (800, not the 800.0 pydantic made of it); anything else as its repr.
        shown = f"{self.value:g}" if isinstance(self.value, float) else repr(self.value)
        got = f" (got {shown})" if self.value is not None else ""
        where = f"{self.file}:{self.line}" if self.line is not None else self.file
        if self.file.endswith((".yaml", ".yml")) or self.file == "<profile>":
            via = f" (set in profiles.{self.via}, through extends:)" if self.via else ""
            key = f"profiles.{self.profile}.{self.key}{via}"
            return f"{self.severity}: {where}: {key}: {self.why}{got}; fix: {self.fix}"
        return f"{self.severity}: {where}: {self.key}: {self.why}{got} [profile {self.profile}]; fix: {self.fix}"


def locate(findings: Sequence[Finding], profile_set: ProfileSet) -> list[Finding]:
    """``findings`` with the line of each profile key filled in (``ProfileSet.locate``) and the profile file named as
    the user gave it (``profile_set.path``), so preflight and the loader's errors read alike."""
    out = []
    for f in findings:
        profile = profile_set.profiles.get(f.profile)
        if profile is not None and f.file == profile.source:
            line, owner = profile_set.locate(f.profile, f.key)
            via = owner if owner != f.profile and owner != f.profile.split("@", 1)[0] else None
            f = replace(f, file=str(profile_set.path), line=line, via=via)
        out.append(f)
    return out


def blocking(findings: Sequence[Finding], *, strict: bool) -> list[Finding]:
    """The findings that stop a run: errors, and warnings too when ``strict`` (``--specdec-strict``)."""
    return [f for f in findings if f.severity == "error" or (strict and f.severity == "warning")]


def format_findings(findings: Sequence[Finding]) -> list[str]:
    """Lines for a terminal: errors, then warnings, then notes (stable within a severity), then a count line.

    :returns: e.g. ``["error: ...", "preflight: 1 error, 0 warnings, 0 notes"]``; ``[]`` for no findings.
    """
    if not findings:
        return []
    lines = [str(f) for f in sorted(findings, key=lambda f: _ORDER[f.severity])]
    counts = {sev: sum(f.severity == sev for f in findings) for sev in _ORDER}
    plural = {sev: "" if n == 1 else "s" for sev, n in counts.items()}
    lines.append(
        f"preflight: {counts['error']} error{plural['error']}, {counts['warning']} warning{plural['warning']}, "
        f"{counts['note']} note{plural['note']}"
    )
    return lines


@dataclass
class _Ctx:
    profile: Profile
    engine: Engine | None
    findings: list[Finding] = field(default_factory=list)
    target_dir: Path | None = None
    target_cfg: dict[str, Any] | None = None
    draft_dir: Path | None = None
    draft_cfg: dict[str, Any] | None = None

    @property
    def source(self) -> str:
        return self.profile.source or "<profile>"

    def add(self, severity: Severity, file: str | Path, key: str, value: Any, why: str, fix: str) -> None:
        self.findings.append(Finding(severity, self.profile.name, str(file), key, value, why, fix))

    def at_profile(self, severity: Severity, key: str, value: Any, why: str, fix: str) -> None:
        self.add(severity, self.source, key, value, why, fix)

    @property
    def draft_cfg_path(self) -> str:
        return str(self.draft_dir / "config.json") if self.draft_dir else "<draft config.json>"

    @property
    def num_layers(self) -> int | None:
        return _int(_text_cfg(self.target_cfg).get("num_hidden_layers")) if self.target_cfg else None

    @property
    def target_hidden(self) -> int | None:
        return _int(_text_cfg(self.target_cfg).get("hidden_size")) if self.target_cfg else None


def run_preflight(profile: Profile, *, engine: Engine | None = None) -> list[Finding]:
    """Check ``profile`` and its model files before anything is launched.

    Reads the target and draft ``config.json`` (local directories, or Hugging Face ids found in the local HF cache;
    an id not cached gives one note and skips the file checks) and the draft's safetensors header (never weights).

    :param engine: the profile's engine (default ``engines.get_engine(profile)``): its ``aux_id_convention``,
        ``env``, ``speculative_issues``, ``max_tokens_per_step`` and ``flag_issues`` (``engines.base.Engine``).
    :returns: findings in rule order; an empty list means nothing to say.
    """
    if engine is None:
        try:
            from pytest_specdec.engines import get_engine

            engine = get_engine(profile)
        except ImportError as exc:
            engine = None
            ctx = _Ctx(profile, None)
            ctx.at_profile("note", "server", profile.server, f"engine module not importable ({exc})",
                           "engine-specific checks (flags, steps/topk/draft tokens, aux-id convention) were "
                           "skipped")  # fmt: skip
            return ctx.findings + _run(profile, None)
    return _run(profile, engine)


def _run(profile: Profile, engine: Engine | None) -> list[Finding]:
    ctx = _Ctx(profile, engine)
    spec = profile.speculative
    ctx.target_dir, ctx.target_cfg = _load_model(ctx, profile.model_path, "model_path", "target")
    if spec is not None and spec.draft_model_path is not None:
        ctx.draft_dir, ctx.draft_cfg = _load_model(ctx, spec.draft_model_path, "speculative.draft_model_path", "draft")
    _rule_algorithm(ctx)
    ids = _rule_aux_ids(ctx)
    _rule_fc_width(ctx, ids)
    _rule_spec_params(ctx)
    _rule_sizes(ctx)
    if profile.url is None:  # nothing is launched for an external server: no launch environment to check
        _rule_env(ctx)
    _rule_engine(ctx)
    _rule_tails(ctx)
    _rule_goodput(ctx)
    _rule_tolerances(ctx)
    return ctx.findings


# ------------------------------------------------------------------ loading
def _load_model(ctx: _Ctx, where: str | None, key: str, what: str) -> tuple[Path | None, dict[str, Any] | None]:
    if where is None:
        return None, None
    local = Path(where).expanduser()
    if ctx.profile.url is not None and not local.is_dir():
        # An external server (url:) is launched elsewhere: its model files need not exist here.
        ctx.at_profile("note", key, where, f"the server at {ctx.profile.url} is not launched here and its {what} "
                       "is not on this machine, so the file checks were skipped",
                       f"point {key} to a local copy to have it checked")  # fmt: skip
        return None, None
    if local.is_dir():
        directory: Path | None = local
    elif _HUB_ID.match(where) and not where.startswith((".", "/", "~")):
        directory = _hub_cache_dir(where)
        if directory is None:
            ctx.at_profile("note", key, where, f"{what} is a Hugging Face id not found in the local HF cache, so the "
                           f"{what} file checks were skipped", f"download it first (hf download {where}) "
                           "or point to a local directory")  # fmt: skip
            return None, None
    elif local.is_relative_to(BUNDLED_ASSETS):
        ctx.at_profile("error", key, where, f"the bundled reference {what} is missing from this installation",
                       "reinstall pytest-specdec (its package data includes refserver/assets)")  # fmt: skip
        return None, None
    else:
        ctx.at_profile("error", key, where, f"no such {what} directory", "fix the path (relative paths resolve "
                       "against the profile file's directory)")  # fmt: skip
        return None, None
    assert directory is not None
    cfg_path = directory / "config.json"
    try:
        cfg = json.loads(cfg_path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        ctx.add("error", cfg_path, "config.json", None, f"the {what} directory has no config.json",
                f"point {key} at a Hugging Face model directory")  # fmt: skip
        return directory, None
    except (OSError, ValueError) as exc:
        ctx.add("error", cfg_path, "config.json", None, f"unreadable JSON: {exc}", "repair or re-download the file")
        return directory, None
    if not isinstance(cfg, dict):
        ctx.add("error", cfg_path, "config.json", None, "not a JSON object", "repair or re-download the file")
        return directory, None
    return directory, cfg


def _hub_cache_dir(repo_id: str) -> Path | None:
    try:
        from huggingface_hub import try_to_load_from_cache
    except ImportError:
        return None
    found = try_to_load_from_cache(repo_id, "config.json")
    return Path(found).parent if isinstance(found, str) else None


def _text_cfg(cfg: dict[str, Any] | None) -> dict[str, Any]:
    """Multimodal targets keep the language model's sizes under ``text_config``."""
    if not cfg:
        return {}
    inner = cfg.get("text_config")
    return inner if isinstance(inner, dict) and "num_hidden_layers" in inner else cfg


def _int(value: Any) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def _eagle_cfg(cfg: dict[str, Any] | None) -> dict[str, Any]:
    inner = (cfg or {}).get("eagle_config")
    return inner if isinstance(inner, dict) else {}


_IDS = "eagle_aux_hidden_state_layer_ids"


# ------------------------------------------------------------------- rule 1
def _rule_algorithm(ctx: _Ctx) -> None:
    """Source: SGLang picks the draft class from the draft's ``architectures`` and enables aux capture only for
    EAGLE3 (``spec_aux_hidden_state.py``); EAGLE with an EAGLE-3 draft skips ``fc`` and swaps its lm_head
    (``models/llama_eagle3.py``); EAGLE3 with an EAGLE-2 draft feeds 3H into ``Linear(2H->H)`` (``llama_eagle.py``)."""
    spec = ctx.profile.speculative
    if spec is None or ctx.draft_cfg is None:
        return
    archs = [str(a) for a in ctx.draft_cfg.get("architectures") or []]
    has_ids = _IDS in _eagle_cfg(ctx.draft_cfg) or _IDS in ctx.draft_cfg
    is_eagle3 = any("eagle3" in a.lower() for a in archs) or has_ids
    is_eagle2 = not is_eagle3 and any("eagle" in a.lower() for a in archs)
    arch = ", ".join(archs) or "none"
    if spec.algorithm == "EAGLE3" and not is_eagle3:
        if is_eagle2:
            ctx.at_profile("error", "speculative.algorithm", spec.algorithm,
                           f"the draft is an EAGLE(-2) model ({arch}); SGLang would feed it 3 concatenated target "
                           "layers where its fc expects 2 x hidden (shape error at warmup)",
                           "set speculative.algorithm: EAGLE for this draft, or use an EAGLE-3 draft")  # fmt: skip
        else:
            ctx.at_profile("error", "speculative.algorithm", spec.algorithm,
                           f"the draft ({arch}) is not an EAGLE-3 draft: no *Eagle3* architecture and no "
                           f"eagle_config.{_IDS}",
                           "point speculative.draft_model_path at an EAGLE-3 draft")  # fmt: skip
    elif spec.algorithm in ("EAGLE", "NEXTN") and is_eagle3:
        ctx.at_profile("error", "speculative.algorithm", spec.algorithm,
                       f"the draft is an EAGLE-3 model ({arch}); under {spec.algorithm} SGLang captures no aux "
                       "layers, silently skips the draft's fc and swaps in the target's lm_head, so acceptance "
                       "collapses or the shapes break", "set speculative.algorithm: EAGLE3")  # fmt: skip


# ------------------------------------------------------------------- rule 2
def _convention(ctx: _Ctx) -> str:
    return ctx.engine.aux_id_convention if ctx.engine is not None else "sglang"


def _rule_aux_ids(ctx: _Ctx) -> list[int] | None:
    """The effective ids (profile override, else the draft's nested ids), checked.

    Sources: SGLang 0.5.23 reads only ``eagle_config.eagle_aux_hidden_state_layer_ids`` on the target side
    (``model_runner_components/spec_aux_hidden_state.py``), maps id -> capture index id + 1 and captures in ascending
    layer order, once per index, only for indices in [0, L) (``models/llama.py::set_eagle3_layers_to_capture``,
    ``layers/aux_hidden_states.py``): valid ids are [-1, L-2], -1 being the embedding output. vLLM 0.32 uses capture
    index = id, valid [0, L], 0 the embedding output
    (``vllm/model_executor/models/interfaces.py::_maybe_add_hidden_state``; docs/vllm.md).
    vLLM reads the draft's top-level ``eagle_aux_hidden_state_layer_ids`` first, else the nested one
    (``v1/worker/gpu_model_runner.py``), so top-level-only ids are an error only for SGLang's convention.
    :returns: the ids the engine will feed the draft, or None when they cannot be known.
    """
    spec = ctx.profile.speculative
    if spec is None or spec.algorithm != "EAGLE3" or ctx.draft_cfg is None and spec.aux_hidden_state_layer_ids is None:
        return None
    found = _ids_and_source(ctx, spec.aux_hidden_state_layer_ids)
    if found is None:
        return None
    ids, file, key = found
    if not isinstance(ids, list) or not all(_int(i) is not None for i in ids) or not ids:
        ctx.add("error", file, key, ids, "expected a non-empty list of integers",
                "write the layer ids as a YAML/JSON list of integers, e.g. [1, 3, 5]")  # fmt: skip
        return None
    errors = sum(f.severity == "error" for f in ctx.findings)
    _check_ids(ctx, ids, file, key, allow_embedding=spec.allow_embedding_capture)
    if spec.aux_hidden_state_layer_ids is not None and errors == sum(f.severity == "error" for f in ctx.findings):
        _note_override(ctx, ids, file, key)
    k = _int((ctx.draft_cfg or {}).get("num_aux_hidden_states"))
    if k is not None and k != len(ids) and spec.aux_hidden_state_layer_ids is None:
        ctx.add("error", ctx.draft_cfg_path, "num_aux_hidden_states", k,
                f"the draft sizes fc for {k} aux states but eagle_config lists {len(ids)} ids "
                "(SGLang models/llama_eagle3.py takes num_aux_hidden_states first)",
                f"set num_aux_hidden_states to {len(ids)} or remove it")  # fmt: skip
    return list(ids)


def _note_override(ctx: _Ctx, ids: list[Any], file: Any, key: str) -> None:
    """A note when valid profile ids differ from those the draft was trained on (its config's nested ids, SGLang's
    count; the same set in another order is ``_check_ids``' note): the incident this tool exists for, a "fixed" id
    list fed to a drafter trained on other layers. Shown in pytest's header and by ``check`` before any launch."""
    if _convention(ctx) == "vllm":
        return  # vLLM counts ids from the embedding (id = capture index): the config's own may be in either count
    own = _eagle_cfg(ctx.draft_cfg).get(_IDS)
    if not isinstance(own, list) or sorted(map(str, own)) == sorted(map(str, ids)):
        return
    ctx.add("note", file, key, ids,
            f"differs from the ids the draft was trained on ({own}, {ctx.draft_cfg_path}); a drafter fed other "
            "layers accepts fewer drafts (a reported case: 47% -> 19% per draft token)",
            f"remove the override to use {own}, or keep it to test the drafter on other layers")  # fmt: skip


def _ids_and_source(ctx: _Ctx, override: Any) -> tuple[Any, Any, str] | None:
    """(the ids as written, the file and key they come from): the profile's ``override``, else the draft's ids as
    the engine reads them (vLLM: top level first, SGLang: only ``eagle_config``). None, with a note or an error
    added, when the draft names none the engine would read."""
    nested = _eagle_cfg(ctx.draft_cfg).get(_IDS)
    top = (ctx.draft_cfg or {}).get(_IDS)
    vllm = _convention(ctx) == "vllm"
    if override is not None:
        ids: Any = override
        file, key = ctx.source, "speculative.aux_hidden_state_layer_ids"
    elif vllm and top is not None:  # vLLM reads the top-level key first (v1/worker/gpu_model_runner.py)
        ids, file, key = top, ctx.draft_cfg_path, _IDS
        if nested is not None and nested != top:
            ctx.add("note", ctx.draft_cfg_path, f"eagle_config.{_IDS}", nested,
                    f"vLLM captures the top-level {_IDS} {top}; SGLang would capture these",
                    "keep one copy of the ids, or make both the same")  # fmt: skip
    elif nested is not None:
        ids, file, key = nested, ctx.draft_cfg_path, f"eagle_config.{_IDS}"
    elif top is not None:
        ctx.add("error", ctx.draft_cfg_path, _IDS, top,
                "the ids are only at the top level; SGLang's target side reads only "
                f"eagle_config.{_IDS}, so it captures its default layers while the draft sizes itself from these",
                f"move the key under eagle_config, or set speculative.aux_hidden_state_layer_ids: {top} in the "
                "profile (the plugin then launches on an overlay)")  # fmt: skip
        return None
    else:
        layers = ctx.num_layers
        default = f"[1, {layers // 2 - 1}, {layers - 4}]" if layers else "[1, L//2-1, L-4]"
        ctx.add("note", ctx.draft_cfg_path, f"eagle_config.{_IDS}", None,
                f"the draft names no aux layer ids; SGLang captures its default ids {default}",
                "set speculative.aux_hidden_state_layer_ids if the draft was trained on other layers")  # fmt: skip
        return None
    return ids, file, key


def _check_ids(ctx: _Ctx, ids: list[Any], file: Any, key: str, *, allow_embedding: bool) -> None:
    """Duplicates, order, range and the embedding id of a list of integer ids, against the engine's convention
    (``_rule_aux_ids`` gives the sources)."""
    vllm = _convention(ctx) == "vllm"
    dupes = sorted({i for i in ids if ids.count(i) > 1})
    if dupes:
        ctx.add("error", file, key, ids, f"duplicate ids {dupes}: the target captures each layer once, so it sends "
                f"{len(set(ids))} states where the draft expects {len(ids)}", "list each layer once")  # fmt: skip
    if ids != sorted(ids):
        ctx.add("note", file, key, ids, "SGLang concatenates the captured states in ascending layer order, not list "
                f"order, so the draft receives them as {sorted(ids)}",
                f"write them ascending ({sorted(ids)}) so the config says what runs")  # fmt: skip
    layers = ctx.num_layers
    low, emb = (0, 0) if vllm else (-1, -1)
    high = (layers if vllm else layers - 2) if layers else None
    engine = "vLLM" if vllm else "SGLang"
    outside = [i for i in ids if i < low or (high is not None and i > high)]
    if outside:
        ctx.add("error", file, key, ids,
                f"ids {outside} are outside [{low}, {high}], the range {engine} captures for a target with "
                f"num_hidden_layers {layers}; they are silently never captured",
                f"use ids between {low} and {high} (id i = output of layer {'i-1' if vllm else 'i'})")  # fmt: skip
    # Measured: stock SGLang 0.5.17 crashes on the first forward with id -1 (tests/data/sglang/0.5.17/
    # eagle3-aux-minus1.log); the incident's patched SGLang served it with accept rate ~47% -> ~19%.
    stock = "" if vllm else (
        "; stock SGLang crashes on it at the first forward (measured on 0.5.17: the scheduler raises TypeError at "
        "models/llama.py:437, residual None before layer 0); a patched SGLang serves it with a lower acceptance")
    if emb in ids and not allow_embedding:
        ctx.add("error", file, key, ids,
                f"id {emb} is the embedding output in {engine} (capture index 0, the input to layer 0), not a "
                f"decoder layer{stock}", "use decoder layer ids, or set speculative.allow_embedding_capture: true "
                "if the draft was trained on the embeddings and your SGLang is patched to capture them")  # fmt: skip
    elif emb in ids and stock and ctx.engine is not None and ctx.engine.crashes_on_embedding_capture:
        ctx.add("warning", file, key, ids,
                f"id {emb} is the embedding output (allowed by speculative.allow_embedding_capture){stock}",
                "expect a scheduler exception at the first request unless your SGLang is patched")  # fmt: skip


# ------------------------------------------------------------------- rule 3
def _rule_fc_width(ctx: _Ctx, ids: list[int] | None) -> None:
    """Source: SGLang ``models/llama_eagle3.py``: ``fc = Linear(target_hidden_size * K -> hidden_size)``; the
    checkpoint's ``fc.weight`` is [hidden, K * Ht], so its input width must equal len(ids) x target hidden."""
    hidden = ctx.target_hidden
    if ids is None or ctx.draft_dir is None or hidden is None:
        return
    located = _find_tensor(ctx.draft_dir, "fc.weight")
    if located is None:
        ctx.add("note", ctx.draft_dir, "fc.weight", None,
                "no safetensors file with an fc.weight tensor in the draft directory, so the fc width check was "
                "skipped", "ship the draft as safetensors to enable it")  # fmt: skip
        return
    path, name, header_or_error = located
    if isinstance(header_or_error, str):
        ctx.add("error", path, name, None, f"unreadable safetensors header: {header_or_error}",
                "repair or re-download the file")  # fmt: skip
        return
    shape = header_or_error.get("shape")
    if not isinstance(shape, list) or len(shape) != 2:
        return
    width = shape[1]
    need = len(ids) * hidden
    if width != need:
        fix = (f"use exactly {width // hidden} aux ids (the draft was trained with that many)" if width % hidden == 0
               else "this draft does not fit this target; use the draft trained for it")  # fmt: skip
        ctx.add(
            "error",
            path,
            name,
            shape,
            f"fc.weight takes {width} inputs but {len(ids)} aux ids x target hidden_size {hidden} = {need}",
            fix,
        )


def _find_tensor(directory: Path, suffix: str) -> tuple[Path, str, dict[str, Any] | str] | None:
    """(file, tensor name, its header entry or an error string) for the first tensor named ``suffix`` or
    ``*.suffix``; single-file and sharded (``model.safetensors.index.json``) checkpoints."""
    index = directory / "model.safetensors.index.json"
    files: list[Path] = []
    if index.is_file():
        try:
            weight_map = json.loads(index.read_text(encoding="utf-8")).get("weight_map", {})
        except (OSError, ValueError):
            weight_map = {}
        for name, shard in weight_map.items():
            if name == suffix or name.endswith("." + suffix):
                files = [directory / shard]
                break
    if not files:
        files = sorted(directory.glob("*.safetensors"))
    for path in files:
        try:
            header = read_safetensors_header(path)
        except (OSError, ValueError) as exc:
            return path, suffix, str(exc)
        for name, entry in header.items():
            if (name == suffix or name.endswith("." + suffix)) and isinstance(entry, dict):
                return path, name, entry
    return None


# ------------------------------------------------------------------- rule 4
def _rule_spec_params(ctx: _Ctx) -> None:
    """The engine's own rule for steps/topk/draft tokens (``Engine.speculative_issues``; SGLang's: all three or
    none, topk 1 rewrites draft tokens), then the acceptance floors the configuration can never meet."""
    if ctx.engine is None:
        return
    arch = str(((ctx.target_cfg or {}).get("architectures") or ["?"])[0])
    for issue in ctx.engine.speculative_issues(ctx.profile, target_arch=arch):
        ctx.at_profile(issue.severity, issue.key, issue.value, issue.why, issue.fix)
    most = ctx.engine.max_tokens_per_step(ctx.profile)
    if most is not None:
        _rule_reachable_thresholds(ctx, most - 1)


def _rule_reachable_thresholds(ctx: _Ctx, steps: int) -> None:
    """Acceptance floors the configuration can never meet: one verify step emits at most num_steps + 1 tokens (the
    deepest draft path plus the bonus token; SGLang ``speculative/eagle_info.py`` verify), and draft positions beyond
    num_steps are never proposed. A sweep point (``eagle3@num_steps=1``) is exempt: there such a floor is reported
    as not applicable at that point instead (``thresholds.py``)."""
    if "@" in ctx.profile.name:
        return
    th = ctx.profile.thresholds
    most = steps + 1
    if th.min_accept_length is not None and th.min_accept_length > most:
        ctx.at_profile("error", "thresholds.min_accept_length", th.min_accept_length,
                       f"can never be met: with num_steps {steps} one verify step emits at most num_steps + 1 = "
                       f"{most} tokens",
                       f"set min_accept_length <= {most} (or raise speculative.num_steps)")  # fmt: skip
    never = sorted(k for k in (th.min_accept_rate_at or {}) if k > steps)
    if never:
        ctx.at_profile("error", "thresholds.min_accept_rate_at", th.min_accept_rate_at,
                       f"draft position(s) {never} are never proposed with num_steps {steps} (positions 1..{steps})",
                       f"keep positions 1..{steps} (or raise speculative.num_steps)")  # fmt: skip


# ------------------------------------------------------------------- rule 5
def _rule_tails(ctx: _Ctx) -> None:
    """A percentile ceiling on too few requests: the order-statistics bound (``judge.tails``) needs
    ``min_samples(p)`` requests (all under the ceiling) to pass at all; with fewer the verdict can only be FAILED or
    undecided. Counted per request (TTFT, TPOT, E2E) over ``num_requests x repeats``; ITL pools every token, so it is
    not checked here."""
    wl = ctx.profile.workload
    total = wl.num_requests * wl.repeats
    for key, (field_name, p) in TAIL_KEYS.items():
        ceiling = getattr(ctx.profile.thresholds, key)
        if ceiling is None or field_name.startswith("itl_"):
            continue
        need = min_samples(p, TAIL_CONFIDENCE)
        if total >= need:
            continue
        metric, _, q = field_name.rpartition("_p")
        # A lower percentile of the same metric that this many requests can show (p90 needs 44), as the alternative.
        lower = [
            f"max_{metric}_p{f.rpartition('_p')[2]} ({min_samples(pp, TAIL_CONFIDENCE)} suffice)"
            for f, pp in TAIL_KEYS.values()
            if f.startswith(metric + "_p") and pp < p and min_samples(pp, TAIL_CONFIDENCE) <= total
        ]
        gate = f", or gate {lower[-1]} instead" if lower else ""
        ctx.at_profile(
            "warning", f"thresholds.{key}", ceiling,
            f"{total} requests (num_requests {wl.num_requests} x repeats {wl.repeats}) cannot show p{q} under the "
            f"ceiling at {TAIL_CONFIDENCE:.0%} confidence: that needs {need} with none over, so the verdict can only "
            "be FAILED or undecided",
            f"raise workload.num_requests (or repeats) to {need} requests in all{gate}",
        )  # fmt: skip


def _rule_goodput(ctx: _Ctx) -> None:
    """``min_goodput`` (good requests per second, ``pytest_specdec.measure.metrics``) above an open loop's
    ``request_rate``: the phase sends requests at that mean rate, so goodput stays below it but for a short phase's
    lucky arrivals (a fresh user set 8 at request_rate 4 and waited for a verdict that could only fail)."""
    rate, floor = ctx.profile.workload.request_rate, ctx.profile.thresholds.min_goodput
    if rate is None or floor is None or not math.isfinite(rate) or floor <= rate:
        return
    ctx.at_profile("warning", "thresholds.min_goodput", floor,
                   f"above workload.request_rate {rate:g}: goodput counts the requests that met the SLO per second, "
                   f"and this open loop sends {rate:g} requests/s, so the floor can only fail",
                   f"set min_goodput below {rate:g} (e.g. {rate * 0.9:g}, 90% of the requests within the SLO) or "
                   "raise request_rate")  # fmt: skip


def _rule_tolerances(ctx: _Ctx) -> None:
    """Tolerances that do not do what they seem to: a tail percentile field (``ttft_ms_p99:20%``) on fewer samples
    per repeat than its compare row needs (``metric_table.tail_samples_needed``: 100 for p99) only ever reads n/a.
    (A bare number on a rate or time field, ``output_tok_s:5``, is refused where the profile is read:
    ``tolerances.parse_tolerances(strict=True)``.)"""
    specs = {**METRICS, **field_specs()}
    wl = ctx.profile.workload
    for key in ctx.profile.tolerance_layer:
        spec = specs.get(key)
        if spec is None:
            continue
        needed = tail_samples_needed(key) if key != spec.name else None
        if needed is None:
            continue
        per_token = key.startswith("itl_ms")
        samples = wl.num_requests * max(wl.max_new_tokens - 1, 1) if per_token else wl.num_requests
        if samples < needed:
            what = "inter-token intervals" if per_token else "requests"
            ctx.at_profile("warning", "tolerances", key,
                           f"{'about ' if per_token else ''}{samples} {what} a repeat (workload.num_requests "
                           f"{wl.num_requests}): a compare "
                           f"row of {key} needs {needed} per repeat for a verdict and will read n/a",
                           f"raise workload.num_requests to {needed}, or use a lower percentile")  # fmt: skip


def _rule_sizes(ctx: _Ctx) -> None:
    """Source: SGLang ``models/llama_eagle3.py`` (``target_hidden_size`` falls back to ``hidden_size``; the draft
    maps its vocab onto the target's through ``d2t``)."""
    spec = ctx.profile.speculative
    if spec is None or ctx.draft_cfg is None:
        return
    target = _text_cfg(ctx.target_cfg)
    draft = ctx.draft_cfg
    t_hidden = _int(target.get("hidden_size"))
    d_key = "target_hidden_size" if _int(draft.get("target_hidden_size")) is not None else "hidden_size"
    d_hidden = _int(draft.get(d_key))
    if t_hidden is not None and d_hidden is not None and t_hidden != d_hidden:
        ctx.add("error", ctx.draft_cfg_path, d_key, d_hidden,
                f"the draft expects target states of width {d_hidden}; the target's hidden_size is {t_hidden}",
                "use the draft trained for this target")  # fmt: skip
    t_vocab, d_vocab = _int(target.get("vocab_size")), _int(draft.get("vocab_size"))
    if t_vocab is not None and d_vocab is not None and t_vocab != d_vocab:
        ctx.add("error", ctx.draft_cfg_path, "vocab_size", d_vocab,
                f"the draft's vocab_size differs from the target's {t_vocab} (different tokenizer)",
                "use the draft trained for this target")  # fmt: skip
    d_ctx = _int(draft.get("max_position_embeddings"))
    longest = _longest_prompt_tokens(ctx.profile)
    if d_ctx is not None and longest is not None:
        need = longest + ctx.profile.workload.max_new_tokens
        if need > d_ctx:
            ctx.add("warning", ctx.draft_cfg_path, "max_position_embeddings", d_ctx,
                    f"the longest prompt (~{longest} tokens, estimated as UTF-8 bytes / 3) plus max_new_tokens "
                    f"{ctx.profile.workload.max_new_tokens} is ~{need} positions, beyond the draft's context",
                    "use shorter prompts or fewer max_new_tokens, or a draft with a longer context")  # fmt: skip


def _prompt_file(profile: Profile) -> Path | None:
    if profile.workload.prompts != "builtin":
        return Path(profile.workload.prompts)
    path = Path(__file__).resolve().parents[1] / "refserver" / "prompts.jsonl"
    return path if path.is_file() else None


def _longest_prompt_tokens(profile: Profile) -> int | None:
    """An estimate (UTF-8 bytes / 3, rounded up) of the longest prompt's token count, exact for ``prompts: random``
    (``random.input_len``); None when unreadable."""
    if profile.workload.prompts == "random":
        return profile.workload.random.input_len if profile.workload.random is not None else None
    path = _prompt_file(profile)
    if path is None:
        return None
    try:
        text = path.read_text(encoding="utf-8")
    except OSError:
        return None
    prompts: list[str] = []
    try:
        data = json.loads(text)
        rows = data if isinstance(data, list) else [data]
    except ValueError:
        rows = []
        for line in text.splitlines():
            try:
                rows.append(json.loads(line)) if line.strip() else None
            except ValueError:
                continue
    for row in rows:
        if isinstance(row, dict):
            if isinstance(row.get("prompt"), str):
                prompts.append(row["prompt"])
            elif isinstance(row.get("text"), str):
                prompts.append(row["text"])
            elif isinstance(row.get("conversations"), list):
                human = [
                    c.get("value") for c in row["conversations"] if isinstance(c, dict) and c.get("from") == "human"
                ]
                if human and isinstance(human[0], str):
                    prompts.append(human[0])
        elif isinstance(row, str):
            prompts.append(row)
    if not prompts:
        return None
    return max(math.ceil(len(p.encode("utf-8")) / 3) for p in prompts)


# ------------------------------------------------------------------- rule 6
def _rule_env(ctx: _Ctx) -> None:
    """``required_env`` must be in the server's environment: the engine's ``env(profile)`` (clean base + ``env:``)."""
    if ctx.engine is not None:
        env = ctx.engine.env(ctx.profile)
    else:
        from pytest_specdec.engines.common import clean_env

        env = clean_env(ctx.profile.env)
    for name in ctx.profile.required_env:
        if name not in env:
            ctx.at_profile("error", "required_env", name,
                           f"{name} is not in the server's launch environment (a clean base plus env:; the caller's "
                           "shell is not inherited)", f"add {name} under env: in this profile")  # fmt: skip


# ------------------------------------------------------------------- rule 7
def _rule_engine(ctx: _Ctx) -> None:
    """Engine-specific flag/env problems (``engine.flag_issues``) and the aux-id convention mismatch
    (SGLang 0.5.23 ``models/llama.py::set_eagle3_layers_to_capture``: id i = output of layer i; vLLM 0.32
    ``models/interfaces.py::_maybe_add_hidden_state``: id i = output of layer i-1; docs/vllm.md)."""
    if ctx.engine is None:
        return
    for issue in ctx.engine.flag_issues(ctx.profile):
        ctx.at_profile(issue.severity, issue.key, issue.value, issue.why, issue.fix)
    spec = ctx.profile.speculative
    engine_conv = ctx.engine.aux_id_convention
    if spec is None or spec.aux_id_convention is None or spec.aux_id_convention == engine_conv:
        return
    shift = 1 if engine_conv == "vllm" else -1
    ids = spec.aux_hidden_state_layer_ids or _eagle_cfg(ctx.draft_cfg).get(_IDS)
    shifted = (
        f" ({[i + shift for i in ids]})" if isinstance(ids, list) and all(_int(i) is not None for i in ids) else ""
    )
    ctx.at_profile("warning", "speculative.aux_id_convention", spec.aux_id_convention,
                   f"the draft's ids follow the {spec.aux_id_convention} convention but server {ctx.profile.server} "
                   f"reads them in the {engine_conv} convention, so every id feeds a layer "
                   f"{'one lower' if shift > 0 else 'one higher'} than trained",
                   f"shift every id by {shift:+d}{shifted} in speculative.aux_hidden_state_layer_ids")  # fmt: skip
