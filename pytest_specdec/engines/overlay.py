"""Draft overlays: a draft directory whose config.json carries other EAGLE-3 aux layer ids, weights symlinked."""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import tempfile
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from pytest_specdec.core.errors import ProfileError

__all__ = ["make_draft_overlay", "overlay_config"]


def overlay_config(config: dict[str, Any], aux_ids: Sequence[int]) -> dict[str, Any]:
    """A copy of a draft ``config.json`` dict with the aux layer ids replaced.

    Writes ``eagle_config.eagle_aux_hidden_state_layer_ids`` (the key SGLang's target side reads,
    ``model_runner_components/spec_aux_hidden_state.py::_resolve_eagle_aux_hidden_state``); a top-level
    ``eagle_aux_hidden_state_layer_ids`` (read first by vLLM, ``v1/worker/gpu_model_runner.py``) is rewritten when
    present, and ``num_aux_hidden_states`` (K in SGLang ``models/llama_eagle3.py``) is set to ``len(aux_ids)`` when
    present, so the three never disagree.
    """
    out = json.loads(json.dumps(config))
    eagle = out.get("eagle_config")
    if not isinstance(eagle, dict):
        eagle = {}
    eagle["eagle_aux_hidden_state_layer_ids"] = list(aux_ids)
    out["eagle_config"] = eagle
    if "eagle_aux_hidden_state_layer_ids" in out:
        out["eagle_aux_hidden_state_layer_ids"] = list(aux_ids)
    if "num_aux_hidden_states" in out:
        out["num_aux_hidden_states"] = len(aux_ids)
    return out


def make_draft_overlay(draft_dir: str | Path, aux_ids: Sequence[int], dest_root: str | Path) -> Path:
    """Create (or reuse) ``dest_root/<name>``: the draft with ``overlay_config`` applied to its config.json and every
    other entry of ``draft_dir`` symlinked (weights are never copied).

    ``<name>`` is ``<draft dir name>-aux<ids>-<12 hex>``, the hash over the absolute draft path, the ids and the
    draft's config.json bytes, so the same call returns the same directory and an edited draft gets a new one.
    Safe under concurrent callers (xdist workers): each builds in a private temp dir under ``dest_root`` and
    renames it into place; the loser of the race deletes its copy and returns the winner's.

    :param draft_dir: a local draft directory with a config.json.
    :param aux_ids: the layer ids to write, kept in the given order.
    :param dest_root: where overlays live (created if missing).
    :returns: the overlay directory (absolute).
    :raises ProfileError: no readable JSON config.json in ``draft_dir``, or an id that is not an int.
    """
    src = Path(draft_dir).resolve()
    cfg_path = src / "config.json"
    try:
        raw = cfg_path.read_bytes()
        config = json.loads(raw)
    except (OSError, ValueError) as exc:
        raise ProfileError(
            f"{cfg_path}: cannot read the draft config for an aux-id overlay: {exc}", path=cfg_path
        ) from None
    if not isinstance(config, dict):
        raise ProfileError(f"{cfg_path}: expected a JSON object, got {type(config).__name__}", path=cfg_path)
    ids = list(aux_ids)
    if not all(isinstance(i, int) and not isinstance(i, bool) for i in ids):
        raise ProfileError(f"speculative.aux_hidden_state_layer_ids: expected integers, got {ids!r}")

    digest = hashlib.sha256(json.dumps([str(src), ids]).encode() + b"\0" + raw).hexdigest()[:12]
    root = Path(dest_root).resolve()
    dest = root / f"{src.name}-aux{'_'.join(map(str, ids))}-{digest}"
    if (dest / "config.json").is_file():
        return dest
    root.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{dest.name}.", dir=root))
    try:
        os.chmod(tmp, 0o755)  # mkdtemp makes it 0700; the overlay is as readable as the draft
        for entry in sorted(src.iterdir()):
            if entry.name != "config.json":
                os.symlink(entry, tmp / entry.name, target_is_directory=entry.is_dir())
        (tmp / "config.json").write_text(json.dumps(overlay_config(config, ids), indent=2) + "\n", encoding="utf-8")
        try:
            os.rename(tmp, dest)
        except OSError:
            # Another process renamed its copy first (rename onto a non-empty directory fails): use theirs.
            if not (dest / "config.json").is_file():
                raise
    finally:
        if tmp.exists():
            shutil.rmtree(tmp, ignore_errors=True)
    return dest
