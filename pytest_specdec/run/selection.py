"""What a run makes ready before anything launches: its profiles (the profile file loaded, ``--server-url``
applied, a ``--specdec-sweep`` expanded into one profile per point, preflight run: :func:`select`; for
``--specdec-check`` preflight alone: :func:`check_only`, then the collected tests' markers: :func:`check_markers`)
and its ``--specdec-compare`` baselines (:func:`compare_setup`). Every problem is a ``pytest.UsageError`` (exit 4,
nothing launched), except ``--specdec-check``'s findings, which its summary lists (exit 1).
"""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

from pytest_specdec.core.errors import CompareError, ProfileError
from pytest_specdec.profiles import discovery
from pytest_specdec.run.settings import RunSettings

if TYPE_CHECKING:
    from pytest_specdec.engines.preflight import Finding
    from pytest_specdec.judge.baseline import Baselines
    from pytest_specdec.judge.verdict import CompareSetup
    from pytest_specdec.profiles.schema import Profile, ProfileSet

__all__ = ["Selection", "check_markers", "check_only", "compare_setup", "select"]


@dataclass(frozen=True, slots=True)
class Selection:
    """The run's profiles (None when none was selected) and what preflight said of them."""

    profile_set: ProfileSet | None = None
    #: The profiles to measure: ``--server-profile``, each swept profile replaced by its points.
    selected: tuple[str, ...] = ()
    #: Preflight's non-blocking findings by profile: the header and the summary show them
    #: (:attr:`preflight_notes`), and a failed test of the profile repeats them under its failure (a wrong aux-id
    #: list is named where the accept floor failed, not only in the header).
    findings_of: Mapping[str, tuple[Finding, ...]] = field(default_factory=dict)
    #: ``--specdec-check``: (profile, finding lines) per profile checked, and whether any blocks a launch.
    checked: tuple[tuple[str, tuple[str, ...]], ...] = ()
    check_failed: bool = False
    #: ``--specdec-check``: one ``error: NODEID: ...`` line per collected test whose ``specdec`` marker the run would
    #: refuse (:func:`check_markers`), and how many collected tests have the marker.
    marker_errors: tuple[str, ...] = ()
    marked: int = 0

    @property
    def preflight_notes(self) -> tuple[str, ...]:
        """``"<profile>: <finding>"`` lines, a count line per profile (``preflight.format_findings``)."""
        if not self.findings_of:
            return ()  # a run without specdec tests imports no profile machinery (tests/test_plugin_import.py)
        from pytest_specdec.engines.preflight import format_findings

        return tuple(f"{name}: {line}" for name, found in self.findings_of.items() for line in format_findings(found))

    @property
    def profiles(self) -> dict[str, Profile] | None:
        """The loaded profiles by name (after ``--server-url`` and ``--specdec-sweep``), None when none was loaded."""
        return self.profile_set.profiles if self.profile_set is not None else None


def select(settings: RunSettings) -> Selection:
    """Load, sweep and preflight the selected profiles (nothing when none is selected).

    :raises pytest.UsageError: no profile file, a broken one, an unknown profile, a bad value, a bad sweep, a
        blocking preflight finding.
    """
    if not settings.selected:
        return Selection()
    profile_set = _load(settings)
    profile_set, selected = _expand_sweep(settings, profile_set)
    errors: list[str] = []
    findings_of: dict[str, tuple[Finding, ...]] = {}
    from pytest_specdec.engines.preflight import blocking, format_findings, locate, run_preflight

    for name in selected:
        errors.extend(_run_inputs(settings.profile_path, profile_set, profile_set.profiles[name]))
        findings = locate(run_preflight(profile_set.profiles[name]), profile_set)
        bad = blocking(findings, strict=settings.strict)
        if bad:
            errors.extend(format_findings(bad))
        rest = [f for f in findings if f not in bad]
        if rest:
            findings_of[name] = tuple(rest)
    if errors:
        raise pytest.UsageError("specdec preflight failed (nothing was launched):\n" + "\n".join(errors))
    return Selection(profile_set, tuple(selected), findings_of)


def check_only(settings: RunSettings) -> Selection:
    """``--specdec-check``: preflight every selected profile (all when none is selected), and with ``--specdec-sweep``
    every point of the sweep instead (:func:`_expand_sweep`); launch nothing. The tests' markers are checked after
    collection (:func:`check_markers`).

    :raises pytest.UsageError: as :func:`select` for the profile file itself.
    """
    from pytest_specdec.engines.preflight import blocking, format_findings, locate, run_preflight

    profile_set = _load(settings)
    names = list(settings.selected or sorted(profile_set.profiles))
    if settings.selected and settings.sweep:
        # The points the run would launch, each preflighted (helper-77: `eagle_topk=1,2` passed the check, and the
        # run then refused the topk-2 point before any launch).
        profile_set, names = _expand_sweep(settings, profile_set)
    checked = []
    failed = False
    for name in names:
        findings = locate(run_preflight(profile_set.profiles[name]), profile_set)
        inputs = _run_inputs(settings.profile_path, profile_set, profile_set.profiles[name])
        checked.append((name, tuple(inputs + format_findings(findings) or ["no findings"])))
        failed = failed or bool(inputs) or bool(blocking(findings, strict=settings.strict))
    return Selection(profile_set, settings.selected, checked=tuple(checked), check_failed=failed)


def check_markers(
    checked: Selection, items: Sequence[pytest.Item], settings: RunSettings, *, collect_errors: int = 0
) -> Selection:
    """``--specdec-check``, after collection: read every collected test's ``specdec`` marker as the run's setup reads
    it (``marker.read_marker``: unknown keyword, bad threshold value, bad tolerance, ``min_speedup`` against a profile
    the file lacks), so a broken marker fails the check instead of erroring the test after a server start.

    :param checked: :func:`check_only`'s result; :param items: the selected tests (after ``-m``/``-k``).
    :param collect_errors: the collection's errors (``session.testsfailed``): a test file that does not import fails
        the check too, with one line pointing at pytest's errors.
    :returns: ``checked`` with :attr:`Selection.marker_errors` and :attr:`Selection.marked` filled, failed when either
        found a problem.
    """
    from pytest_specdec.run.marker import marker_errors

    errors, marked = marker_errors(items, checked.profiles, settings.profile_path)
    if collect_errors:
        errors.append(f"error: {collect_errors} error(s) during collection (listed above); the run would stop there")
    return dataclasses.replace(
        checked, marker_errors=tuple(errors), marked=marked, check_failed=checked.check_failed or bool(errors)
    )


def compare_setup(
    settings: RunSettings, run_id: str, profiles: Mapping[str, Profile] | None = None
) -> CompareSetup | None:
    """``--specdec-compare``: its baselines (loaded once, at configure) and options; None without the option.

    ``--specdec-compare-profile NAME`` maps the tests of every selected profile of NAME's kind (with speculation or
    without: NAME's profile in ``profiles``, else its stored results) to NAME's stored results.

    :param profiles: the loaded profiles (``Selection.profiles``), for NAME's kind and the selected ones'.
    :raises pytest.UsageError: the named run cannot be read; ``--specdec-compare-profile`` names a profile found
        neither in the profile file nor in the stored results, or of a kind no selected profile has (it would map
        nothing).
    """
    ref = settings.compare
    if ref is None:
        return None
    from pytest_specdec.bisection import bisect_hint
    from pytest_specdec.judge.baseline import Baselines
    from pytest_specdec.judge.history import StoredHistory
    from pytest_specdec.judge.verdict import CompareSetup
    from pytest_specdec.measure import results

    try:
        store = results.ResultStore(settings.out_dir / "results", current=run_id)
        baselines = Baselines.from_option(ref, store)
    except CompareError as exc:
        # `--specdec-compare tests/` takes the path as the baseline (the value is optional, as pytest-benchmark's).
        taken = Path(ref).suffix == ".py" or Path(ref).is_dir()
        hint = f"; a test path? write --specdec-compare=latest {ref} (or put the path first)" if taken else ""
        raise pytest.UsageError(f"--specdec-compare={ref}: {exc}{hint}") from None
    assert baselines is not None
    s = settings
    speculative = _compare_kind(settings, baselines, profiles or {}) if s.compare_profile else True
    return CompareSetup(
        baselines, run_id, s.compare_profile, profile_speculative=speculative,
        missing=s.compare_missing, force=s.compare_force, bisect_hint=bisect_hint,
        history=StoredHistory(settings.out_dir / "results"),
    )  # fmt: skip


def _compare_kind(settings: RunSettings, baselines: Baselines, profiles: Mapping[str, Profile]) -> bool:
    """Whether ``--specdec-compare-profile``'s profile runs speculative decoding: from the profile file, else from
    its stored results (``fingerprint["speculative"]``).

    :raises pytest.UsageError: the profile is in neither, or no selected profile is of its kind.
    """
    name = settings.compare_profile
    assert name is not None
    option = f"--specdec-compare-profile={name}"
    if name in profiles:
        speculative = profiles[name].is_speculative
    else:
        kind = baselines.profile_kind(name)
        if kind is None:
            raise pytest.UsageError(
                f"{option}: no profile {name!r} in {settings.profile_path} and no stored results of it in "
                f"{baselines.where()}"
            )
        speculative = kind
    selected = [profiles[n] for n in settings.selected if n in profiles]
    if selected and not any(p.is_speculative == speculative for p in selected):
        what = "runs speculative decoding" if speculative else "runs without speculation"
        names = ", ".join(p.name for p in selected)
        raise pytest.UsageError(
            f"{option}: profile {name} {what}, and none of the selected profiles ({names}) does, so it would map "
            "no test; name a profile of their kind"
        )
    return speculative


def _load(settings: RunSettings) -> ProfileSet:
    """Load the profile file (its tolerances are parsed there), apply ``--server-url``, and check the selected
    profiles' names."""
    from pytest_specdec.engines.rules import load_profiles

    path = settings.profile_path
    if settings.profile_search and not path.is_file():
        raise pytest.UsageError(discovery.not_found_message(path.name, settings.profile_search, settings.rootpath))
    try:
        profile_set = load_profiles(path)
    except ProfileError as exc:
        # The shape of `python -m pytest_specdec check` and of preflight: one `error: FILE:LINE: ...` per problem.
        problems = "\n".join(f"error: {line}" for line in str(exc).splitlines())
        raise pytest.UsageError(f"specdec: invalid profile file (nothing was launched):\n{problems}") from None
    url = settings.server_url
    if url and not url.startswith(("http://", "https://")):
        raise pytest.UsageError(
            f"--server-url={url}: expected http://HOST:PORT, e.g. --server-url=http://127.0.0.1:30000"
        )
    if url:
        urls = {n: p.model_copy(update={"url": url}) for n, p in profile_set.profiles.items()}
        profile_set = profile_set.model_copy(update={"profiles": urls})
    for name in settings.selected:
        try:
            profile_set.get(name)
        except ProfileError as exc:
            raise pytest.UsageError(str(exc)) from None
    return profile_set


def _expand_sweep(settings: RunSettings, profile_set: ProfileSet) -> tuple[ProfileSet, list[str]]:
    """``--specdec-sweep``: replace the selected profiles by one derived profile per point (``eagle3@num_steps=2``,
    see ``sweep_spec.expand_profiles``); preflight then checks every derived profile before anything launches."""
    from pytest_specdec.run import sweep_spec

    names = list(settings.selected)
    if not settings.sweep:
        return profile_set, names
    base = settings.sweep_baseline
    if base:
        try:
            baseline = profile_set.get(base)
        except ProfileError as exc:
            raise pytest.UsageError(str(exc).replace("--server-profile=", "--specdec-sweep-baseline=", 1)) from None
        if baseline.is_speculative:
            raise pytest.UsageError(
                f"--specdec-sweep-baseline={base}: profile runs speculative decoding; name one without a "
                "speculative: block"
            )
        if base not in names:
            names.append(base)
    try:
        profiles, selected = sweep_spec.expand_profiles(profile_set.profiles, names, settings.sweep)
    except ValueError as exc:
        raise pytest.UsageError(f"--specdec-sweep: {exc}") from None
    return profile_set.model_copy(update={"profiles": profiles}), selected


def _run_inputs(profile_path: Path, profile_set: ProfileSet, profile: Profile) -> list[str]:
    """What the run itself needs besides the model files: the prompt set and the API key, checked before any
    launch so a 15-minute startup is not wasted on them."""
    from pytest_specdec.measure.workload import workload_prompts

    def where(key: str) -> str:
        line = profile_set.locate(profile.name, key)[0]
        return f"{profile_path}:{line}" if line is not None else str(profile_path)

    problems = []
    try:
        workload_prompts(profile.workload, Path(profile.source or profile_path).parent, profile.model_path)
    except ProfileError as exc:
        detail = str(exc).removeprefix("workload.prompts: ")
        problems.append(f"error: {where('workload.prompts')}: profiles.{profile.name}.workload.prompts: {detail}")
    if profile.api_key_env and not os.environ.get(profile.api_key_env):
        problems.append(
            f"error: {where('api_key_env')}: profiles.{profile.name}.api_key_env: environment variable "
            f"{profile.api_key_env} is not set; export it, or remove api_key_env"
        )
    return problems
