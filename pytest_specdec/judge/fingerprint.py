"""The fingerprint diff of two results (what changed between the baseline's measurement and the current one), and
the workload differences that make them incomparable."""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from pathlib import PurePath
from typing import Any

from pytest_specdec.measure.results import ResultRecord

__all__ = ["WORKLOAD_KEYS", "fingerprint_diff", "workload_differences"]

#: Workload keys whose difference makes two results incomparable (``fingerprint["workload"]``) — refused
#: unless forced. ``prompt_hash`` is checked too.
WORKLOAD_KEYS = (
    "max_new_tokens", "concurrency", "num_requests", "temperature", "api", "request_rate", "burstiness", "slo",
)  # fmt: skip
#: The tail of an aux-id overlay's directory name (``engines.overlay.make_draft_overlay``).
_OVERLAY = re.compile(r"-aux-?\d+(_-?\d+)*-[0-9a-f]{12}$")


def _show(value: Any, missing: str = "(absent)") -> str:
    if value is None:
        return missing
    if isinstance(value, bool):
        return str(value).lower()
    if isinstance(value, float) and value.is_integer():
        return f"{value:g}"
    return str(value)


def _dict_lines(prefix: str, a: Any, b: Any, missing: str = "(absent)", skip: Iterable[str] = ()) -> list[str]:
    a = a if isinstance(a, dict) else {}
    b = b if isinstance(b, dict) else {}
    lines = []
    for key in sorted(set(a) | set(b)):
        if key in skip or a.get(key) == b.get(key):
            continue
        lines.append(f"{prefix}{key}: {_show(a.get(key), missing)} -> {_show(b.get(key), missing)}")
    return lines


def _argv_flags(argv: Any) -> dict[str, str]:
    """``--flag value`` / ``--flag=value`` / bare ``--flag`` -> {flag: value}; the command before the first flag is
    ``(command)``. ``--port`` is dropped: a free port is picked per run."""
    if not isinstance(argv, list):
        return {}
    flags: dict[str, str] = {}
    head: list[str] = []
    i = 0
    while i < len(argv):
        arg = str(argv[i])
        if arg.startswith("--"):
            name, eq, value = arg.partition("=")
            if not eq and i + 1 < len(argv) and not str(argv[i + 1]).startswith("--"):
                value = str(argv[i + 1])
                i += 1
            flags[name] = value
        elif not flags:
            head.append(arg)
        i += 1
    flags.pop("--port", None)
    if head:
        flags["(command)"] = " ".join(head)
    return flags


def _gpus(value: Any) -> str | None:
    if not isinstance(value, list) or not value:
        return None
    shown = [
        f"{g.get('name')} (driver {g.get('driver')}, CUDA {g.get('cuda') or '?'})" for g in value if isinstance(g, dict)
    ]
    return ", ".join(shown) or None


def fingerprint_diff(base: Mapping[str, Any], current: Mapping[str, Any]) -> list[str]:
    """One line per fingerprint difference, ``what: baseline -> current``, in a fixed order: versions, engine
    config, draft, env, argv, workload, hardware. Examples: ``torch: 2.13.0 -> 2.14.1``,
    ``env NCCL_PROTO: LL -> (unset)``, ``draft aux ids: [1, 3, 5] -> [2, 4, 6]``. What an aux-id change brings
    with it (the draft config hash, an overlay directory of the same draft, the argv flag that passes it) is one
    difference: ``draft aux ids: [1, 3, 5] -> [0, 1, 2] (with its draft config hash, draft path (an aux-id
    overlay), argv --speculative-draft-model-path)``.

    A server given by URL has no launch argv or package list of its own: against a launched one those are not
    compared (one line says so, not a line per flag); its draft is what it reports it runs.

    :param base: ``ResultRecord.fingerprint`` of the baseline (``results.build_fingerprint``).
    :param current: the current one.
    """
    lines: list[str] = []
    by_url = ("url" in base, "url" in current)
    unknown = by_url[0] != by_url[1]  # launched on one side, given by URL on the other
    if base.get("plugin_version") != current.get("plugin_version"):
        lines.append(f"pytest-specdec: {_show(base.get('plugin_version'))} -> {_show(current.get('plugin_version'))}")
    if base.get("engine") != current.get("engine"):
        lines.append(f"engine: {_show(base.get('engine'))} -> {_show(current.get('engine'))}")
    if unknown:
        shown = ["given by URL" if side else "launched" for side in by_url]
        lines.append(f"server: {shown[0]} -> {shown[1]} (launch argv and packages not compared: a server given by URL "
                     "does not report them)")  # fmt: skip
    else:
        lines += _dict_lines("", base.get("packages"), current.get("packages"), skip=("error",))
    lines += _dict_lines("effective ", base.get("effective"), current.get("effective"))
    lines += _dict_lines(
        "speculative ",
        base.get("speculative"),
        current.get("speculative"),
        skip=("aux_hidden_state_layer_ids", "draft_model_path"),
    )
    bd, cd = base.get("draft") or {}, current.get("draft") or {}
    derived: list[str] = []  # what an aux-id change brings with it: one difference, not four
    draft_lines: list[str] = []
    aux_changed = bd.get("aux_ids") != cd.get("aux_ids")
    overlay = aux_changed and _same_draft(bd.get("path"), cd.get("path"))
    if bd.get("config_hash") != cd.get("config_hash"):
        if aux_changed:
            derived.append("draft config hash")
        else:
            draft_lines.append(f"draft config hash: {_show(bd.get('config_hash'))} -> {_show(cd.get('config_hash'))}")
    if bd.get("path") != cd.get("path"):
        if overlay:
            derived.append("draft path (an aux-id overlay)")
        else:
            draft_lines.append(f"draft path: {_show(bd.get('path'))} -> {_show(cd.get('path'))}")
    argv = [] if unknown else _dict_lines("argv ", _argv_flags(base.get("argv")), _argv_flags(current.get("argv")))
    if overlay:
        paths = {str(bd.get("path")), str(cd.get("path"))}
        derived += [line.partition(":")[0] for line in argv
                    if any(side in paths for side in line.partition(": ")[2].split(" -> "))]  # fmt: skip
        argv = [line for line in argv if line.partition(":")[0] not in derived]
    if aux_changed:
        with_ = f" (with its {', '.join(derived)})" if derived else ""
        lines.append(f"draft aux ids: {_show(bd.get('aux_ids'))} -> {_show(cd.get('aux_ids'))}{with_}")
    lines += draft_lines
    lines += _dict_lines("env ", base.get("env"), current.get("env"), missing="(unset)")
    lines += argv
    if base.get("prompt_hash") != current.get("prompt_hash"):
        lines.append(
            f"prompt set hash: {_show(_short(base.get('prompt_hash')))} -> {_show(_short(current.get('prompt_hash')))}"
        )
    lines += _dict_lines("workload ", base.get("workload"), current.get("workload"))
    if _gpus(base.get("gpus")) != _gpus(current.get("gpus")):
        lines.append(
            f"gpu: {_show(_gpus(base.get('gpus')), '(none)')} -> {_show(_gpus(current.get('gpus')), '(none)')}"
        )
    if base.get("host") != current.get("host"):
        lines.append(f"host: {_show(base.get('host'))} -> {_show(current.get('host'))}")
    if base.get("url") != current.get("url"):
        lines.append(f"url: {_show(base.get('url'))} -> {_show(current.get('url'))}")
    return lines


def _same_draft(a: Any, b: Any) -> bool:
    """Whether two draft paths are one draft, either side possibly an aux-id overlay of it
    (``engines.overlay.make_draft_overlay``: ``<draft dir name>-aux<ids>-<12 hex>``)."""
    if not isinstance(a, str) or not isinstance(b, str):
        return False

    names = PurePath(a).name, PurePath(b).name
    overlays = [bool(_OVERLAY.search(n)) for n in names]
    return any(overlays) and len({_OVERLAY.sub("", n) for n in names}) == 1


def _short(digest: Any) -> Any:
    return digest[:12] if isinstance(digest, str) else digest


def workload_differences(base: ResultRecord, current: ResultRecord) -> list[str]:
    """What makes two records incomparable: ``prompt set hash A -> B`` and ``KEY A -> B`` for
    :data:`WORKLOAD_KEYS`; a key absent on either side (an old file) is not checked."""
    out = []
    bh, ch = base.fingerprint.get("prompt_hash"), current.fingerprint.get("prompt_hash")
    if bh is not None and ch is not None and bh != ch:
        out.append(f"prompt set hash {_short(bh)} -> {_short(ch)}")
    bw, cw = base.workload, current.workload
    for key in WORKLOAD_KEYS:
        if key in bw and key in cw and bw[key] != cw[key]:
            out.append(f"{key} {_show(bw[key])} -> {_show(cw[key])}")
    return out
