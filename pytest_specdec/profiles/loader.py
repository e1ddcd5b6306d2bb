"""Reading a profile file: YAML (a key given twice refused), ``extends:`` chains, relative paths, and every problem
reported as ``FILE:LINE: profiles.NAME.KEY: what was expected, got VALUE``.

The models are ``schema.py``'s; what an engine adds to them (defaults, combinations it refuses) comes in as
:class:`ProfileRules` (``engines.rules``: profiles/ sits below engines/ and does not import it).
"""

from __future__ import annotations

import copy
import os
import re
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any, Literal, Protocol, get_args, get_origin

import yaml
from pydantic import BaseModel, ValidationError

from pytest_specdec.core.errors import ProfileError
from pytest_specdec.core.tolerances import ToleranceError, tolerance_key, tolerance_strings, tolerance_tokens
from pytest_specdec.profiles.schema import (
    NodesConfig,
    Profile,
    ProfileSet,
    Slo,
    SpeculativeConfig,
    Thresholds,
    TraceConfig,
    Workload,
    close_match,
    did_you_mean,
)

__all__ = ["ProfileRules", "expected_value", "read_profiles"]


class ProfileRules(Protocol):
    """What the engines add to the schema, applied to every profile that validated (``engines.rules.ENGINE_RULES``)."""

    def complete(self, profile: Profile) -> Profile:
        """The profile with its engine's defaults filled in (the same profile when none applies)."""
        ...

    def problem(self, profile: Profile) -> str | None:
        """Why the profile's engine cannot run it (one sentence with the fix), or None."""
        ...


_HOW_TO_PASS = (
    "check the path (pytest: --specdec-profiles=PATH or the ini key specdec_profiles; "
    "python -m pytest_specdec: the PROFILE_FILE argument)"
)


def read_profiles(path: str | Path, rules: ProfileRules) -> ProfileSet:
    """Load and validate a profile file (``engines.rules.load_profiles`` calls this with every engine's rules).

    Steps: ``yaml.safe_load``; the top-level ``profiles:`` mapping; ``extends:`` chains deep-merged base first
    (``_merge``); relative paths resolved against the file's directory (``model_path``,
    ``speculative.draft_model_path``, ``workload.prompts`` unless ``builtin`` or ``random``, ``python``; a value is
    treated as a path when it is absolute, starts with ``.`` or ``~``, or names an existing file relative to the YAML
    file, so Hugging Face ids such as ``meta-llama/Llama-3.1-8B-Instruct`` stay as they are); validation; then
    ``rules.complete`` fills engine defaults (the bundled assets on ``server: reference``) and ``rules.problem``
    refuses what the profile's engine cannot run.

    :param path: the YAML file; messages name it as given.
    :param rules: what the engines add to the schema (:class:`ProfileRules`).
    :returns: every profile of the file by name, each with ``source`` set to the file's absolute path.
    :raises ProfileError: missing or unreadable file, YAML syntax error (with line and column), unknown key (with a
        ``did you mean`` suggestion only for a close match, else the allowed keys), invalid value, ``extends`` to an
        unknown profile or in a cycle. The message has one line per problem, in file order:
        ``FILE:LINE: profiles.NAME.KEY.PATH: what was expected, got VALUE``, LINE being the offending key's (or its
        block's) line; a problem in a parent profile (a broken ``extends:`` too) is reported once, under the parent,
        with ``(inherited through extends: CHILD -> PARENT)``; a cycle once, from its member first in the file.
    """
    file = Path(path)
    shown = str(path)
    data, lines = _read_profile_yaml(file, shown)

    def at(*key: str) -> str:
        """``FILE:LINE`` of the key at this path from the file's root (``FILE`` when the file has no such key)."""
        line = lines.get(tuple(map(str, key)))
        return f"{shown}:{line}" if line is not None else shown

    problems = [
        f"{at(str(key))}: unknown top-level key {key!r}{did_you_mean(str(key), ['profiles'])}"
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
            # Reported once, under the profile whose `extends:` is wrong (exc.profile), as a schema error is: a profile
            # that inherits it is named in the "inherited through" note, not given the same line again.
            heirs = schema.setdefault(str(exc), [])
            chain = chains[str(name)]
            last = raw.get(chain[-1])
            back = last.get("extends") if isinstance(last, dict) else None
            reached = chain.index(back) if isinstance(back, str) and back in chain else None  # a cycle: where it starts
            if reached is None and exc.profile in chain[1:]:
                reached = chain.index(exc.profile)
            if reached:  # not for the profile itself, nor for a member of the cycle
                heirs.append(" -> ".join(chain[: reached + 1]))
            continue
        merged = _resolve_relative(merged, file.resolve().parent)
        merged["name"] = str(name)
        merged["source"] = str(file.resolve())
        try:
            profile = rules.complete(Profile.model_validate(merged))
        except ValidationError as exc:
            for err in exc.errors():
                # A tolerance is reported under the profile that wrote it, as a parent's other keys are.
                writer = _tolerance_writer(chains[str(name)], raw, err)
                line, origin = profile_set.locate(writer, tuple(str(part) for part in err["loc"]))
                message = _describe_error(f"{shown}:{line}" if line is not None else shown, origin, err)
                heirs = schema.setdefault(message, [])
                if origin != name:
                    chain = chains[str(name)]
                    heirs.append(" -> ".join(chain[: chain.index(origin) + 1]))
            continue
        problem = rules.problem(profile)
        if problem is not None:
            # Reported where a whole-profile schema error is: at the profile's name.
            line, origin = profile_set.locate(str(name), ())
            where = f"{shown}:{line}" if line is not None else shown
            schema.setdefault(f"{where}: profiles.{origin}: {problem}", [])
            continue
        profiles[str(name)] = profile
    for message, heirs in schema.items():
        # A parent's mistake is reported once, under the parent, naming who inherits it (not again per child).
        problems.append(message + (f" (inherited through extends: {'; '.join(heirs)})" if heirs else ""))
    problems += _paired_arm_problems(profiles, list(map(str, raw)), profile_set, shown)
    if problems:
        # In file order: the line numbers lead the user through the file once.
        number = re.compile(re.escape(shown) + r":(\d+)")
        problems.sort(key=lambda p: int(m.group(1)) if (m := number.match(p)) else 0)
        raise ProfileError("\n".join(problems), path=file)
    return profile_set.model_copy(update={"profiles": profiles})


def _tolerance_writer(chain: Sequence[str], raw: Mapping[str, Any], err: Any) -> str:
    """The profile of an ``extends:`` chain (the profile itself first) that wrote the tolerances a schema error is
    about (its ``ToleranceError``'s keys): the nearest whose own ``tolerances:`` names one of them. A child's
    ``tolerances:`` mapping merges over its parent's (``_merge``), so an error in the merged layer may be the
    parent's key; a trial saw it at the child's line, unsaid. ``chain[0]`` for any other error.
    """
    error = err.get("ctx", {}).get("error")
    if not isinstance(error, ToleranceError) or not error.keys:
        return chain[0]
    for link in chain:
        body = raw.get(link)
        try:
            written = tolerance_strings(body["tolerances"]) if isinstance(body, dict) and "tolerances" in body else []
        except ValueError:
            continue
        if {tolerance_key(token) for token in tolerance_tokens(written)} & set(error.keys):
            return link
    return chain[0]


def _read_profile_yaml(file: Path, shown: str) -> tuple[dict[str, Any], dict[tuple[str, ...], int]]:
    """The file's YAML with a ``profiles:`` mapping at the top, and the line of every key path.

    :raises ProfileError: missing or unreadable file, YAML syntax error (line and column), duplicate key, or no
        top-level ``profiles:`` mapping.
    """
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
        if isinstance(data, dict) and "profiles" in data:  # the key is right, its value is not a mapping
            value = data["profiles"]
            got = "an empty 'profiles:'" if value is None else f"'profiles:' holding a {type(value).__name__}"
        raise ProfileError(
            f"{shown}: expected a top-level mapping 'profiles:' of name -> profile, got {got}", path=file
        )
    return data, lines


def _paired_arm_problems(
    profiles: Mapping[str, Profile], names: Sequence[str], profile_set: ProfileSet, shown: str
) -> list[str]:
    """``thresholds.min_speedup.vs`` naming no other profile of the file, one ``FILE:LINE`` message each."""
    problems = []
    for name, profile in profiles.items():
        ms = profile.thresholds.min_speedup
        if ms is not None and (ms.vs not in names or ms.vs == name):
            others = [n for n in names if n != name]
            line, _ = profile_set.locate(name, ("thresholds", "min_speedup", "vs"))
            where = f"{shown}:{line}" if line is not None else shown
            # helper-81 read "(available: )" in a file of one profile: say what to add instead.
            listed = (f" (available: {', '.join(sorted(others))})" if others else
                      "; this file has no other profile: add the one to compare against (e.g. baseline: the same "
                      "server without speculative:) to it")  # fmt: skip
            problems.append(
                f"{where}: profiles.{name}.thresholds.min_speedup.vs: {ms.vs!r} is not another profile of this file"
                f"{did_you_mean(ms.vs, others)}{listed}"
            )
    return problems


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
            key = self.construct_object(key_node, deep=deep)
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
        node = loader.get_single_node()
        data = loader.construct_document(node) if node is not None else None
    finally:
        loader.dispose()
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


def _resolve_extends(name: str, raw: dict[str, Any], at: Callable[..., str]) -> dict[str, Any]:
    """The profile's mapping with its ``extends:`` chain merged in (base first), ``extends`` removed.

    :raises ProfileError: an ``extends:`` that is not a name, names no profile, or closes a cycle; its ``profile`` is
        the profile whose ``extends:`` it is (for a cycle, the loop's member first in the file), so that every profile
        above it reports the same message.

    :param at: key path from the file's root -> ``FILE:LINE`` (``load_profiles``).
    """
    chain = [name]
    body: dict[str, Any] = raw[name]
    while "extends" in body:
        parent = body["extends"]
        where = at("profiles", chain[-1], "extends")
        if not isinstance(parent, str):
            raise ProfileError(
                f"{where}: profiles.{chain[-1]}.extends: expected a profile name, got {parent!r}", profile=chain[-1]
            )
        if parent in chain:
            # The loop alone, from its member first in the file: every profile in or above it reports the same one.
            loop = chain[chain.index(parent) :]
            order = list(map(str, raw))
            first = min(loop, key=order.index)
            loop = loop[loop.index(first) :] + loop[: loop.index(first)]
            cycle = " -> ".join([*loop, first])
            where = at("profiles", first, "extends")
            raise ProfileError(
                f"{where}: profiles.{first}.extends: cycle {cycle}; remove one of these 'extends:'", profile=first
            )
        if parent not in raw or not isinstance(raw[parent], dict):
            available = ", ".join(sorted(map(str, raw)))
            raise ProfileError(
                f"{where}: profiles.{chain[-1]}.extends: no profile {parent!r} in this file"
                f"{did_you_mean(parent, list(map(str, raw)))} (available: {available})",
                profile=chain[-1],
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
    if (
        isinstance(workload, dict)
        and isinstance(workload.get("prompts"), str)
        and workload["prompts"]
        not in (
            "builtin",
            "random",
        )
    ):
        # A prompt file is always a path (never a hub id), so resolve it even when it does not exist yet.
        workload["prompts"] = str((base / Path(workload["prompts"]).expanduser()).resolve())
    return out


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
    close = close_match(word, by_key)
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


def expected_value(info: Any, element: bool = False) -> str:
    """'an integer >= 1', 'a number > 0', ... from a field's annotation and ``Field`` bounds (a pydantic
    ``FieldInfo``; ``element``: of the list or mapping it holds). The profile loader's and the marker's errors use
    it."""
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
        hint = did_you_mean(str(loc[-1]), choices)
        if owner is Slo:
            return f"{shown}: profiles.{'.'.join(map(str, (name, *loc[:-1])))}: unknown key {loc[-1]!r}" + _slo_hint(
                str(loc[-1]), hint, choices
            )
        elsewhere = None if hint else _keys_elsewhere(str(loc[-1]))
        if elsewhere is not None and elsewhere.rpartition(".")[0] != ".".join(map(str, loc[:-1])):
            block, _, key = elsewhere.rpartition(".")
            home = f"profiles.{name}" + (f".{block}" if block else "")
            # helper-81 read "(did you mean 'tolerances', a key of another block?)" for tolerances: under thresholds:.
            hint = (f" ({key!r} is a key of {home}: move it there)" if key == str(loc[-1]) else
                    f" (did you mean {key!r}, a key of {home}?)")  # fmt: skip
        return f"{shown}: profiles.{'.'.join(map(str, (name, *loc[:-1])))}: unknown key {loc[-1]!r}" + (
            hint or f" (allowed: {', '.join(choices)})"
        )
    if kind == "missing":
        return f"{where}: required key missing"
    if kind == "literal_error":
        hint = did_you_mean(value, _literal_choices(info)) if isinstance(value, str) else ""
        if loc[-1:] == ("server",) and (isinstance(value, dict) or str(value).startswith(("http://", "https://"))):
            # A fresh-user trial wrote server: {url: ...}: a URL is its own key beside server:.
            hint = " (a running server is given by url: http://host:port, a key of its own beside server:)"
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
            fix = ""
            if loc[-1:] == ("min_speedup",) and isinstance(value, int | float) and not isinstance(value, bool):
                fix = f"; write min_speedup: {{vs: baseline, ratio: {value:g}}} (the profile it is paired with)"
            return f"{where}: expected {what}, got {value!r}{fix}"
        fix = ""
        if str(loc[-1]).startswith("min_accept_rate") and kind == "less_than_equal" and isinstance(value, int | float):
            # 47 meant 47%; 2.5 is likely an accept length.
            fix = f" (a fraction: {value:g}% is {value / 100:g}" if value > 1 else ""
            fix += "; an accept length is min_accept_length)" if value <= 10 else ")"
        return f"{where}: expected {expected_value(info, element)}, got {value!r}{fix}"
    return f"{where}: {err['msg']}, got {value!r}"


def _slo_hint(key: str, hint: str, choices: list[str]) -> str:
    """Why an unknown ``workload.slo`` key is refused, with the fix: the names vLLM and SGLang give on their command
    line (``--goodput e2el:...``), and ITL, which has no single value per request."""
    allowed = ", ".join(choices)
    if key in ("e2el", "e2el_ms", "e2e"):
        return f" (did you mean 'e2e_ms'? vLLM and SGLang spell it e2el; allowed: {allowed})"
    if key.startswith("itl"):
        return (
            f" (allowed: {allowed}: a request's ITL is many values, so it has no goodput SLO; gate it with "
            "thresholds.max_itl_ms_p99)"
        )
    return f"{hint or ''} (allowed: {allowed}, in ms)"


def _merge(base: dict[str, Any], over: dict[str, Any]) -> dict[str, Any]:
    """Deep merge for ``extends:``: mappings merge key by key, everything else is replaced."""
    out = copy.deepcopy(base)
    for key, value in over.items():
        if isinstance(value, dict) and isinstance(out.get(key), dict):
            out[key] = _merge(out[key], value)
        else:
            out[key] = copy.deepcopy(value)
    return out
