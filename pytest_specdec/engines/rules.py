"""What each engine asks of a profile beyond the schema, one row per engine: defaults it fills in and combinations
it refuses; and ``load_profiles``, the profile loader with these rules applied.

Like ``get_engine``, a table keyed by ``profile.server``; it imports no engine module (loading a profile file starts
no engine code). ``profiles/`` sits below ``engines/``: its loader takes the rules as an argument
(``profiles.loader.ProfileRules``).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from types import MappingProxyType
from typing import Any

from pytest_specdec.profiles.loader import read_profiles
from pytest_specdec.profiles.schema import Profile, ProfileSet

__all__ = [
    "BUNDLED_ASSETS",
    "BUNDLED_DRAFT_EAGLE3",
    "BUNDLED_TARGET",
    "ENGINE_RULES",
    "RULES",
    "EngineRules",
    "engine_problem",
    "load_profiles",
    "resolve_paths",
]

#: The bundled reference server's checkpoints (``server: reference`` defaults; filled in by :func:`resolve_paths`).
BUNDLED_ASSETS = Path(__file__).resolve().parents[1] / "refserver" / "assets"
BUNDLED_TARGET = BUNDLED_ASSETS / "target"
BUNDLED_DRAFT_EAGLE3 = BUNDLED_ASSETS / "draft-eagle3"


@dataclass(frozen=True, slots=True)
class EngineRules:
    """What one engine asks of a profile that the schema does not check."""

    #: The engine has no default model: ``model_path`` (or ``url:``) is required (SGLang's ``--model-path``).
    needs_model_path: bool = False
    #: ``nodes:`` is SGLang's multi-node launch (``--nnodes``, ``--node-rank``, ``--dist-init-addr``); an engine
    #: without it refuses ``nodes:``.
    multi_node: bool = False
    #: ``model_path`` and an EAGLE/EAGLE3 draft default to the checkpoints bundled with the reference server.
    bundled_checkpoints: bool = False


#: ``profile.server`` -> its rules.
RULES: Mapping[str, EngineRules] = MappingProxyType(
    {
        "reference": EngineRules(multi_node=True, bundled_checkpoints=True),
        "sglang": EngineRules(needs_model_path=True, multi_node=True),
        "vllm": EngineRules(),
    }
)


def resolve_paths(profile: Profile) -> Profile:
    """Fill the bundled reference assets: on ``server: reference``, ``model_path`` None becomes ``BUNDLED_TARGET``
    and, for algorithm EAGLE3 or EAGLE with no ``draft_model_path``, the draft becomes ``BUNDLED_DRAFT_EAGLE3``.

    :func:`load_profiles` calls it; call it yourself on a ``Profile`` built in code. Idempotent.

    :returns: the same profile when nothing changes, else an updated copy.
    """
    if not RULES[profile.server].bundled_checkpoints:
        return profile
    update: dict[str, Any] = {}
    if profile.model_path is None:
        update["model_path"] = str(BUNDLED_TARGET)
    spec = profile.speculative
    if spec is not None and spec.algorithm in ("EAGLE3", "EAGLE") and spec.draft_model_path is None:
        update["speculative"] = spec.model_copy(update={"draft_model_path": str(BUNDLED_DRAFT_EAGLE3)})
    return profile.model_copy(update=update) if update else profile


def engine_problem(profile: Profile) -> str | None:
    """Why ``profile.server`` cannot run this profile, or None; the first problem only, as a schema error would be.

    Examples: ``model_path is required for server: sglang (or give url:)``; ``nodes: launches SGLang's multi-node
    mode; use server: sglang (or reference)``; ``tp_size 3 is not a multiple of the 2 nodes.hosts (SGLang splits
    tensor parallelism evenly across nodes)``.
    """
    rules = RULES[profile.server]
    if rules.needs_model_path and profile.url is None and profile.model_path is None:
        return f"model_path is required for server: {profile.server} (or give url:)"
    if profile.nodes is not None:
        if not rules.multi_node:
            return "nodes: launches SGLang's multi-node mode; use server: sglang (or reference)"
        if profile.tp_size % len(profile.nodes.hosts):
            return (
                f"tp_size {profile.tp_size} is not a multiple of the {len(profile.nodes.hosts)} nodes.hosts "
                "(SGLang splits tensor parallelism evenly across nodes)"
            )
    return None


class _EngineRules:
    """:class:`~pytest_specdec.profiles.loader.ProfileRules` from :data:`RULES`."""

    def complete(self, profile: Profile) -> Profile:
        return resolve_paths(profile)

    def problem(self, profile: Profile) -> str | None:
        return engine_problem(profile)


#: The rules every profile file is read with.
ENGINE_RULES = _EngineRules()


def load_profiles(path: str | Path) -> ProfileSet:
    """Load and validate a profile file: ``profiles.loader.read_profiles`` with :data:`ENGINE_RULES` (its docstring
    has the steps and the message format).

    :returns: every profile of the file by name, each with ``source`` set to the file's absolute path.
    :raises ProfileError: one line per problem, in file order (``FILE:LINE: profiles.NAME.KEY: ...``).
    """
    return read_profiles(path, ENGINE_RULES)
