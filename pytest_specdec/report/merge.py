"""Merge the run files of a suite split across several runners (CI matrix shards) into one run.

Each shard's pytest session writes its own run file (``<specdec dir>/results/<run id>.json``, ``results.ResultStore``).
``python -m pytest_specdec merge DIR...`` (``cli.merge``) reads them, refuses shards that measured different code
(commit id or dirty flag, ``results.commit_info``) or define one profile differently (``fingerprint["profile_def"]``,
``results.profile_definition``) or measured the same test twice, and otherwise writes one run file holding every
shard's results into the store, one markdown summary and one trend PNG of the store. The merged run's id is derived
from the shards' ids, so merging the same shards again replaces the same file instead of adding a second run.

Typical use (the merge job of ``examples/ci/nightly-gpu.yml``)::

    python -m pytest_specdec merge shards/ --results-dir .specdec/results --markdown summary.md --trend trend.png
"""

from __future__ import annotations

import hashlib
import json
import time
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pytest_specdec.core.errors import CompareError
from pytest_specdec.measure.results import ErroredTest, ResultRecord, RunFile, metric_definitions

__all__ = [
    "Shard",
    "find_run_files",
    "load_shards",
    "merge_problems",
    "merge_runs",
    "merged_markdown",
]

#: Runs drawn in the trend PNG by default: the newest ones (each stored run is read whole: about 12 ms per run file
#: of 4 tests here, so a store of 1,000 nightly runs would add seconds to every merge for a plot nobody can read).
DEFAULT_TREND_RUNS = 30


@dataclass(frozen=True, slots=True, eq=False)
class Shard:
    """One input run file: where it was read from, and its content. Compared by identity (a run holds thousands
    of values)."""

    path: Path
    run: RunFile
    #: The file's ``metric_definitions`` (``results.metric_definitions`` of the plugin that wrote it); None in files
    #: from before they were written.
    metric_definitions: dict[str, str] | None = None

    @property
    def label(self) -> str:
        """``<run id> (<path>)``, the way messages name a shard."""
        return f"{self.run.run_id} ({self.path})"


def find_run_files(paths: Iterable[str | Path]) -> list[Path]:
    """The ``*.json`` files named by ``paths``: a file as given; a directory searched recursively (hidden
    directories included: a downloaded artifact may hold ``.specdec/results``). Sorted, duplicates removed.

    :raises CompareError: a path does not exist.
    """
    found: dict[Path, None] = {}
    for raw in paths:
        path = Path(raw)
        if path.is_file():
            found[path] = None
        elif path.is_dir():
            for file in sorted(path.rglob("*.json")):
                if file.is_file() and not file.name.startswith("."):
                    found[file] = None
        else:
            raise CompareError(f"{raw}: no such file or directory")
    return list(found)


def _read_json(path: Path) -> Any:
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise CompareError(f"{path}: not a readable JSON file: {exc}") from None


def load_shards(paths: Iterable[str | Path]) -> tuple[list[Shard], list[Path]]:
    """Read every run file under ``paths`` (see ``find_run_files``).

    JSON files that are not run files (pytest-benchmark's, a JUnit converter's) are skipped and returned. The same
    run read twice (``--specdec-report`` writes a copy of the run file) counts once when both copies hold the same
    results.

    :returns: (shards sorted by start time, skipped files).
    :raises CompareError: a path is missing, a JSON file is unreadable, or two different files claim one run id.
    """
    shards: dict[str, Shard] = {}
    skipped: list[Path] = []
    for path in find_run_files(paths):
        data = _read_json(path)
        if not (
            isinstance(data, dict) and isinstance(data.get("run_id"), str) and isinstance(data.get("results"), list)
        ):
            skipped.append(path)
            continue
        try:
            run = RunFile.from_dict(data)
        except (ValueError, TypeError) as exc:
            raise CompareError(f"{path}: {exc}") from None
        seen = shards.get(run.run_id)
        if seen is not None:
            if [r.to_dict() for r in seen.run.results] != [r.to_dict() for r in run.results]:
                raise CompareError(
                    f"run id {run.run_id} is in two files with different results: {seen.path} and {path}; "
                    "keep one of them"
                )
            continue
        defs = data.get("metric_definitions")
        shards[run.run_id] = Shard(path, run, dict(defs) if isinstance(defs, dict) else None)
    ordered = sorted(shards.values(), key=lambda s: (s.run.started, s.run.run_id))
    return ordered, skipped


def _commit_key(run: RunFile) -> str:
    commit = run.machine.get("commit")
    if not isinstance(commit, dict) or not commit.get("id"):
        return "unknown (no git checkout and no $GITHUB_SHA)"
    text = str(commit["id"])[:12]
    if commit.get("dirty"):
        text += " with uncommitted changes"
    return text


def _flatten(value: Any, prefix: str = "") -> dict[str, Any]:
    if isinstance(value, dict):
        out: dict[str, Any] = {}
        for key in sorted(value):
            out.update(_flatten(value[key], f"{prefix}.{key}" if prefix else str(key)))
        return out if out or not prefix else {prefix: {}}
    return {prefix: value}


def _show(value: Any) -> str:
    return "(unset)" if value is None else json.dumps(value)


def _definition_diff(base: Mapping[str, Any], other: Mapping[str, Any]) -> list[str]:
    """``key.path: A -> B`` for every leaf that differs between two profile definitions."""
    a, b = _flatten(dict(base)), _flatten(dict(other))
    return [f"{key}: {_show(a.get(key))} -> {_show(b.get(key))}" for key in sorted(set(a) | set(b)) if a.get(key) !=
            b.get(key)]  # fmt: skip


def merge_problems(shards: Sequence[Shard]) -> list[str]:
    """Why ``shards`` should not be merged, one multi-line text per problem (empty: mergeable).

    - different code: the shards' ``machine["commit"]`` (id, dirty flag) differ; lists each commit with its runs;
    - a profile defined differently: for a profile name measured in several shards, the ``profile_def`` of the
      fingerprints differ; lists each differing key (``workload.num_requests: 16 -> 32``) against the first shard;
    - metric definitions: a shard's ``metric_definitions`` differ from this installation's (``merge`` writes the
      merged run with its own, so its plugin version must match the shards');
    - a test measured twice: the same test id in two shards (the matrix selections overlap).
    Records without ``profile_def`` (files from before it existed) are not checked for definitions.
    """
    problems: list[str] = []
    commits: dict[str, list[Shard]] = {}
    for shard in shards:
        commits.setdefault(_commit_key(shard.run), []).append(shard)
    if len(commits) > 1:
        lines = ["the runs measured different code:"]
        for key, group in commits.items():
            lines.append(f"  commit {key}: " + ", ".join(s.label for s in group))
        lines.append("  merge the shards of one commit (one workflow run), or pass --force")
        problems.append("\n".join(lines))
    definitions: dict[str, dict[str, tuple[dict[str, Any], list[Shard]]]] = {}
    for shard in shards:
        for record in shard.run.results:
            definition = record.fingerprint.get("profile_def")
            if not isinstance(definition, dict):
                continue
            key = json.dumps(definition, sort_keys=True)
            entry = definitions.setdefault(record.profile, {}).setdefault(key, (definition, []))
            if not entry[1] or entry[1][-1] is not shard:  # shards are visited in turn: no quadratic search
                entry[1].append(shard)
    for profile, variants in definitions.items():
        if len(variants) < 2:
            continue
        (first_def, first_shards), *others = variants.values()
        lines = [f"profile {profile!r} is defined differently:"]
        for definition, group in others:
            base_ids = ", ".join(s.run.run_id for s in first_shards)
            lines.append(f"  {base_ids} -> {', '.join(s.run.run_id for s in group)}:")
            lines += [f"    {line}" for line in _definition_diff(first_def, definition)]
        lines.append("  run every shard from the same profile file, or pass --force")
        problems.append("\n".join(lines))
    problems += _definition_problems(shards)
    owners: dict[str, Shard] = {}
    for shard in shards:
        for record in shard.run.results:
            other = owners.get(record.test_id)
            if other is not None and other is not shard:
                problems.append(
                    f"test {record.test_id} was measured in two runs: {other.label} and {shard.label}; the shards' "
                    "selections overlap (check each matrix entry's --server-profile / -k), or pass --force to keep "
                    "the later one"
                )
            owners[record.test_id] = shard
    return problems


def _definition_problems(shards: Sequence[Shard]) -> list[str]:
    """Metric definitions (formula per metric) that differ between shards, or from this installation's, which the
    merged file is written with: an accept length of one definition is not comparable with another's."""
    current = metric_definitions()
    problems = []
    for shard in shards:
        theirs = shard.metric_definitions
        if theirs is None or theirs == current:
            continue
        keys = sorted(k for k in set(theirs) | set(current) if theirs.get(k) != current.get(k))
        lines = [f"{shard.label} defines metrics differently from this pytest-specdec (the merged run is written "
                 "with this one's definitions):"]  # fmt: skip
        lines += [f"  {key}: {_show(theirs.get(key))} -> {_show(current.get(key))}" for key in keys]
        lines.append("  merge with the pytest-specdec version the shards ran, or pass --force")
        problems.append("\n".join(lines))
    return problems


def merged_run_id(shards: Sequence[Shard]) -> str:
    """``<earliest shard start, UTC>-<6 hex of sha256 over the sorted shard ids>``: the format of
    ``results.new_run_id`` (sorts by time), and the same id each time the same shards are merged."""
    started = min(s.run.started for s in shards)
    stamp = time.strftime("%Y%m%dT%H%M%SZ", time.gmtime(started))
    digest = hashlib.sha256("\n".join(sorted(s.run.run_id for s in shards)).encode()).hexdigest()[:6]
    return f"{stamp}-{digest}"


def merge_runs(shards: Sequence[Shard], *, forced: Sequence[str] = ()) -> RunFile:
    """One run holding every shard's results, in shard start order (a test measured twice keeps the later shard's
    record, at the later position), and every shard's tests that errored before they measured (``RunFile.errored``)
    but those measured in another shard (a retried shard measured them: they are not errored), each once. It is
    ``interrupted`` when a shard was.

    ``machine`` is the first shard's, plus ``shards``: one ``{"run_id", "host", "gpus", "started", "results"}`` per
    shard; and ``merge_forced``: the problems overridden with ``--force`` (absent when none).

    :raises ValueError: no shards.
    """
    if not shards:
        raise ValueError("merge_runs: no runs to merge")
    by_test: dict[str, ResultRecord] = {}
    for shard in shards:
        for record in shard.run.results:
            by_test.pop(record.test_id, None)
            by_test[record.test_id] = record
    machine = dict(shards[0].run.machine)
    machine["shards"] = [
        {
            "run_id": s.run.run_id,
            "host": s.run.machine.get("host"),
            "gpus": s.run.machine.get("gpus", []),
            "started": s.run.started,
            "results": len(s.run.results),
        }
        for s in shards
    ]
    if forced:
        machine["merge_forced"] = list(forced)
    errored: dict[str, ErroredTest] = {}
    for shard in shards:
        for entry in shard.run.errored:
            if entry.test_id not in by_test:
                errored.pop(entry.test_id, None)
                errored[entry.test_id] = entry
    return RunFile(
        run_id=merged_run_id(shards),
        started=min(s.run.started for s in shards),
        machine=machine,
        results=tuple(by_test.values()),
        errored=tuple(errored.values()),
        interrupted=any(shard.run.interrupted for shard in shards),
    )


def merged_markdown(run: RunFile, shards: Sequence[Shard], saved: Path) -> list[str]:
    """The merged run's summary as markdown lines (``markdown.markdown_summary`` titled ``specdec summary (N shards
    merged)``, with the shards' tests that errored before they measured and whether one was interrupted), then a
    table of the shards (run id, host, results), then what ``--force`` merged despite, if anything."""
    from pytest_specdec.core.table import Column, markdown_table
    from pytest_specdec.report.markdown import markdown_summary

    lines = markdown_summary(run.results, title=f"specdec summary ({len(shards)} shards merged)", results_path=saved,
                             errored=run.errored, interrupted=run.interrupted)  # fmt: skip
    columns = [Column("shard run"), Column("host"), Column("results", "right")]
    rows = [[f"`{s.run.run_id}`", str(s.run.machine.get("host", "?")), len(s.run.results)] for s in shards]
    lines += ["", *markdown_table(columns, rows)]
    forced = run.machine.get("merge_forced") or []
    if forced:
        lines += ["", "> **Merged with --force** although:", ""]
        lines += [f"> {line}" for problem in forced for line in str(problem).splitlines()]
    return lines
