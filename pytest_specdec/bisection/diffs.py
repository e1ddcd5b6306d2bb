"""The differences between a good and a bad profile mapping, and a configuration with some of them applied: what a
bisect searches over (``fingerprint["profile_def"]`` of two stored runs), and what no profile can apply."""

from __future__ import annotations

import copy
import dataclasses
import json
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

__all__ = ["Difference", "NotBisectable", "apply", "config_key", "differences", "launch_key", "not_bisectable"]


#: Profile keys that change nothing measured (verdicts, scheduling, timeouts, auth): never a difference.
_IGNORED_KEYS = frozenset(
    {"thresholds", "tolerances", "exclusive", "pairing", "startup_timeout_s", "startup_stall_s", "trace",
     "required_env", "port", "api_key", "api_key_env", "name", "source"}
)  # fmt: skip


@dataclass(frozen=True, slots=True)
class Difference:
    """One difference between the good and the bad profile that a profile can apply.

    ``path`` locates it in the profile mapping: ``("env", NAME)``, ``("extra_args", FLAG)`` (the flag's words as
    written, ``("--log-level", "warning")``), ``("speculative", KEY)``, ``("speculative",)`` (the whole block,
    present on one side only), ``("workload", KEY)``, or ``(KEY,)``. ``None`` is "absent".
    """

    path: tuple[str, ...]
    good: Any
    bad: Any
    #: Differences that only follow from this one and are applied with it (:data:`_DERIVED`): the permission for aux
    #: id -1 (``speculative.allow_embedding_capture``) goes with the aux ids that need it.
    also: tuple[Difference, ...] = ()

    @property
    def key(self) -> str:
        """``env SPECDEC_REF_FORWARD_DELAY_MS``, ``extra_args --log-level``, ``speculative.num_steps``."""
        if self.path[0] in ("env", "extra_args"):
            return f"{self.path[0]} {self.path[1]}"
        return ".".join(self.path)

    def line(self) -> str:
        """``env SPECDEC_REF_FORWARD_DELAY_MS: (unset) -> 20``; with derived differences,
        ``speculative.aux_hidden_state_layer_ids: (absent) -> [-1, 1, 3] (with speculative.allow_embedding_capture:
        false -> true)``."""
        missing = "(unset)" if self.path[0] == "env" else "(absent)"
        text = f"{self.key}: {_show(self.good, missing, self.path)} -> {_show(self.bad, missing, self.path)}"
        if self.also:
            text += f" (with {'; '.join(d.line() for d in self.also)})"
        return text


@dataclass(frozen=True, slots=True)
class NotBisectable:
    """A difference no profile can apply (package versions, driver, GPU, host, the caller's environment)."""

    what: str
    good: str
    bad: str

    def line(self) -> str:
        return f"{self.what}: {self.good} -> {self.bad}"


#: Profile keys whose difference only follows from another one's: (derived, its cause). Listed and applied under the
#: cause when both differ (a permission that changes nothing launched on its own).
_DERIVED = ((("speculative", "allow_embedding_capture"), ("speculative", "aux_hidden_state_layer_ids")),)


def _show(value: Any, missing: str, path: tuple[str, ...] = ()) -> str:
    if value is None:
        return missing
    if path[:1] == ("extra_args",):
        return _flag_value(value)
    if isinstance(value, bool):
        return str(value).lower()
    if isinstance(value, str):
        return value
    return json.dumps(value)


def _flags(args: Sequence[str]) -> dict[str, tuple[str, ...]]:
    """``extra_args`` words -> {flag: its words as written}: ``--flag v``, ``--flag v1 v2``, ``--flag=v``, bare
    ``--flag``; words before the first flag under ``(positional)``. A repeated flag keeps its last words, as argparse
    keeps its last value."""
    out: dict[str, tuple[str, ...]] = {}
    current = "(positional)"
    for word in args:
        if word.startswith("--"):
            current = word.partition("=")[0]
            out.pop(current, None)
            out[current] = (word,)
        else:
            out[current] = (*out.get(current, ()), word)
    return out


def _flag_value(words: Sequence[str]) -> str:
    """The value part of a flag's words: ``("--a", "1")`` and ``("--a=1",)`` -> ``1``, ``("--a",)`` -> ``(set)``."""
    if not words:
        return "(set)"
    head, eq, value = words[0].partition("=")
    rest = [value] if eq else []
    rest += list(words[1:]) if head.startswith("--") else list(words)
    return " ".join(rest) or "(set)"


def _unflag(flags: Mapping[str, tuple[str, ...]]) -> list[str]:
    words: list[str] = list(flags.get("(positional)", ()))
    for name, written in flags.items():
        if name != "(positional)":
            words += written
    return words


def differences(good: Mapping[str, Any], bad: Mapping[str, Any]) -> list[Difference]:
    """Every difference between two profile mappings (``Profile.model_dump(mode="json")``, or a stored run's
    ``fingerprint["profile_def"]``) that a profile can apply, in this order: env variables, extra flags, speculative
    keys, other profile keys, workload keys. Keys in ``_IGNORED_KEYS`` (thresholds, tolerances, timeouts, ...)
    measure nothing and are skipped; a difference that only follows from another (:data:`_DERIVED`) is listed in
    that one's ``also``, not on its own.

    Example: ``{"env": {}}`` and ``{"env": {"X": "1"}}`` -> ``[Difference(("env", "X"), None, "1")]``.
    """
    out: list[Difference] = []
    ge, be = good.get("env") or {}, bad.get("env") or {}
    out += [Difference(("env", k), ge.get(k), be.get(k)) for k in sorted(set(ge) | set(be)) if ge.get(k) != be.get(k)]
    gf, bf = _flags(good.get("extra_args") or []), _flags(bad.get("extra_args") or [])
    out += [Difference(("extra_args", k), gf.get(k), bf.get(k)) for k in [*gf, *(k for k in bf if k not in gf)]
            if gf.get(k) != bf.get(k)]  # fmt: skip
    gs, bs = good.get("speculative"), bad.get("speculative")
    if isinstance(gs, dict) and isinstance(bs, dict):
        out += [Difference(("speculative", k), gs.get(k), bs.get(k)) for k in sorted(set(gs) | set(bs))
                if gs.get(k) != bs.get(k)]  # fmt: skip
    elif gs != bs:
        out.append(Difference(("speculative",), gs, bs))
    skip = _IGNORED_KEYS | {"env", "extra_args", "speculative", "workload"}
    out += [Difference((k,), good.get(k), bad.get(k)) for k in sorted((set(good) | set(bad)) - skip)
            if good.get(k) != bad.get(k)]  # fmt: skip
    gw, bw = good.get("workload") or {}, bad.get("workload") or {}
    out += [Difference(("workload", k), gw.get(k), bw.get(k)) for k in sorted(set(gw) | set(bw))
            if gw.get(k) != bw.get(k)]  # fmt: skip
    return _grouped(out)


def _grouped(diffs: list[Difference]) -> list[Difference]:
    """``diffs`` with each derived difference (:data:`_DERIVED`) moved under its cause's ``also``, when both are
    there: one difference to bisect, as one change of the user's made them."""
    by_path = {d.path: d for d in diffs}
    moved: dict[tuple[str, ...], list[Difference]] = {}
    for derived, cause in _DERIVED:
        if derived in by_path and cause in by_path:
            moved.setdefault(cause, []).append(by_path[derived])
    gone = {d.path for group in moved.values() for d in group}
    return [dataclasses.replace(d, also=(*d.also, *moved[d.path])) if d.path in moved else d
            for d in diffs if d.path not in gone]  # fmt: skip


def apply(good: Mapping[str, Any], diffs: Iterable[Difference]) -> dict[str, Any]:
    """The good profile mapping with the bad side of each of ``diffs`` applied (a new dict; ``good`` unchanged).

    Extra flags keep the good profile's order, flags it lacks follow in the order given.
    """
    out = copy.deepcopy(dict(good))
    flags = _flags(out.get("extra_args") or [])
    changed = False
    for d in (x for given in diffs for x in (given, *given.also)):
        head = d.path[0]
        if head == "extra_args":
            changed = True
            if d.bad is None:
                flags.pop(d.path[1], None)
            else:
                flags[d.path[1]] = tuple(d.bad)
            continue
        if len(d.path) == 1:
            target, key = out, head
        else:
            sub = out.get(head)
            if not isinstance(sub, dict):
                sub = out[head] = {}
            target, key = sub, d.path[1]
        if d.bad is None:
            target.pop(key, None)
        else:
            target[key] = copy.deepcopy(d.bad)
    if changed:
        out["extra_args"] = _unflag(flags)
    return out


def config_key(config: Mapping[str, Any]) -> str:
    """A probe's cache key: its profile mapping as canonical JSON."""
    return json.dumps(config, sort_keys=True, default=str)


def launch_key(config: Mapping[str, Any]) -> str:
    """What one server launch serves: the mapping without its workload (the client changes that, not the server)."""
    return config_key({k: v for k, v in config.items() if k != "workload"})


def not_bisectable(good_fp: Mapping[str, Any], bad_fp: Mapping[str, Any]) -> list[NotBisectable]:
    """Differences between two stored runs' fingerprints (``results.build_fingerprint``) that no profile applies:
    package versions, GPUs (name, driver, CUDA), host, plugin version, launch-env variables the profile did not set
    (inherited from the caller: ``CUDA_VISIBLE_DEVICES``), a draft config.json edited in place (same path, another
    hash) and a prompt file edited in place (same ``prompts``, another prompt set hash). Values as recorded."""
    out: list[NotBisectable] = []

    def add(what: str, a: Any, b: Any, missing: str = "(absent)") -> None:
        if a != b:
            out.append(NotBisectable(what, missing if a is None else str(a), missing if b is None else str(b)))

    add("pytest-specdec", good_fp.get("plugin_version"), bad_fp.get("plugin_version"))
    gp, bp = good_fp.get("packages") or {}, bad_fp.get("packages") or {}
    for name in sorted((set(gp) | set(bp)) - {"error"}):
        add(f"package {name}", gp.get(name), bp.get(name), "(not installed)")

    def gpus(fp: Mapping[str, Any]) -> str | None:
        found = [g for g in fp.get("gpus") or [] if isinstance(g, dict)]
        return ", ".join(f"{g.get('name')} (driver {g.get('driver')}, CUDA {g.get('cuda') or '?'})"
                         for g in found) or None  # fmt: skip

    add("gpu", gpus(good_fp), gpus(bad_fp), "(none)")
    add("host", good_fp.get("host"), bad_fp.get("host"))
    gdef, bdef = good_fp.get("profile_def") or {}, bad_fp.get("profile_def") or {}
    genv, benv = good_fp.get("env") or {}, bad_fp.get("env") or {}
    for name in sorted(set(genv) | set(benv)):
        if name not in (gdef.get("env") or {}) and name not in (bdef.get("env") or {}):
            add(f"env {name} (from the caller's shell, not the profile)", genv.get(name), benv.get(name), "(unset)")
    gd, bd = good_fp.get("draft") or {}, bad_fp.get("draft") or {}
    if gd.get("path") == bd.get("path") and gd.get("config_hash") != bd.get("config_hash"):
        add(f"draft config.json at {gd.get('path')} (edited in place; hash)", gd.get("config_hash"),
            bd.get("config_hash"))  # fmt: skip
    same_prompts = (gdef.get("workload") or {}).get("prompts") == (bdef.get("workload") or {}).get("prompts")
    if same_prompts and good_fp.get("prompt_hash") != bad_fp.get("prompt_hash"):
        add("prompt file (edited in place; prompt set hash)", good_fp.get("prompt_hash"), bad_fp.get("prompt_hash"))
    return out
