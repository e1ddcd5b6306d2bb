"""The run's settings: every ``specdec`` option and ini key, read once in ``pytest_configure`` into a frozen
:class:`RunSettings`. Nothing else in the package reads ``config.option`` or ``config.getini`` for our options
(``tests/test_settings.py`` guards it), as pytest's ``LogXML`` is built once from plain values.

Imports only ``pytest`` and light modules at the top: every pytest run with the plugin builds it.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

from pytest_specdec.core.tolerances import Tolerance, parse_tolerances
from pytest_specdec.profiles import discovery

if TYPE_CHECKING:
    from pytest_specdec.profiles.schema import Profile
    from pytest_specdec.report.summary import OutputOptions

__all__ = ["RunSettings"]


@dataclass(frozen=True, slots=True)
class RunSettings:
    """What the command line and the ini file asked of this run (values as the options' parsers returned them).

    Usage (``plugin.pytest_configure``)::

        settings = RunSettings.from_config(config)  # pytest.UsageError on a bad value
        settings.repeats_of(profile)  # --specdec-repeats, else the profile's workload.repeats
    """

    #: ``--server-profile`` names, in order (empty: specdec tests skip).
    selected: tuple[str, ...]
    #: The profile file: ``--specdec-profiles``, ini ``specdec_profiles``, else the ``specdec.yaml`` found.
    profile_path: Path
    #: Directories searched for ``specdec.yaml`` (empty when an option or ini key named the file).
    profile_search: tuple[Path, ...]
    #: ``--specdec-dir`` (relative to the invocation directory), ini ``specdec_dir`` (to the rootdir), or ``.specdec``.
    out_dir: Path
    #: pytest's rootdir (named in the "profile file not found" message).
    rootpath: Path
    #: ``--server-url``: an already-running server used for every selected profile (checked when profiles load).
    server_url: str | None = None
    #: ``--specdec-startup-timeout`` in seconds (None: the profile's ``startup_timeout_s``).
    startup_timeout_s: float | None = None
    #: ``--specdec-repeats`` (None: the profile's ``workload.repeats``).
    repeats: int | None = None
    #: ``--specdec-check``: preflight only, launch nothing.
    check: bool = False
    #: ``--specdec-strict``: preflight warnings fail like errors.
    strict: bool = False
    #: ``--specdec-compare``: ``"latest"``, a name, a run id or file; None without the option.
    compare: str | None = None
    #: ``--specdec-compare-profile``: compare the tests of profiles of this profile's kind with its stored results.
    compare_profile: str | None = None
    #: ``--specdec-compare-missing``: ``fail`` or ``warn`` for a test without a baseline.
    compare_missing: str = "fail"
    #: ``--specdec-save``: the name to save this run under (None: only its run id).
    save: str | None = None
    #: ``--specdec-compare-force``: compare although the workloads differ.
    compare_force: bool = False
    #: ``--specdec-undecided`` / ini ``specdec_undecided``: ``fail`` or ``warn`` (``verdict.UNDECIDED_POLICIES``).
    undecided: str = "warn"
    #: ini ``specdec_tolerances`` (``METRIC:TOL`` lines), parsed here: metric or field -> Tolerance.
    tolerances: Mapping[str, Tolerance] = field(default_factory=dict)
    #: ``--specdec-sweep`` points (``sweep_spec.parse_sweep``); None without the option.
    sweep: tuple[Mapping[str, float], ...] | None = None
    #: ``--specdec-sweep-baseline``: the profile without speculation that sweep speedups are computed against.
    sweep_baseline: str | None = None
    #: ``--specdec-sweep-max-gap`` as a fraction (0.05).
    sweep_max_gap: float = 0.05
    #: ``--specdec-sweep-plot`` (None: ``<specdec dir>/sweep-<run id>.png``).
    sweep_plot: str | None = None
    #: ``--specdec-position-plot`` (None: no plot).
    position_plot: str | None = None
    #: ``--specdec-report`` (None: no JSON report).
    report: str | None = None
    #: ``--specdec-markdown`` (None: only ``$GITHUB_STEP_SUMMARY`` when set).
    markdown: str | None = None
    #: ``--specdec-requests-out``, absolute (relative to the invocation directory); None: no per-request export.
    requests_out: Path | None = None

    def repeats_of(self, profile: Profile) -> int:
        """Measured phases of ``profile``'s first measurement: ``--specdec-repeats``, else ``workload.repeats``."""
        return int(self.repeats or profile.workload.repeats)

    def output_options(self) -> OutputOptions:
        """Where the end of the run writes its files (``summary.finish``)."""
        from pytest_specdec.report.summary import OutputOptions

        return OutputOptions(
            out_dir=self.out_dir, sweep=self.sweep is not None, sweep_baseline=self.sweep_baseline,
            sweep_max_gap=self.sweep_max_gap, sweep_plot=self.sweep_plot, position_plot=self.position_plot,
            report=self.report, markdown=self.markdown, save_name=self.save, compare=self.compare is not None,
            compare_missing=self.compare_missing, undecided=self.undecided,
        )  # fmt: skip

    @classmethod
    def from_config(cls, config: pytest.Config) -> RunSettings:
        """Read our options and ini keys from ``config``.

        :raises pytest.UsageError: ``--specdec-dir DIR`` in two words that moved the rootdir, an ini tolerance that
            does not parse, ``--specdec-sweep`` without a selected profile (outside ``--specdec-check``),
            ``--specdec-compare-profile`` or ``--specdec-compare-force`` without ``--specdec-compare``.
        """
        option = config.option
        ancestor = discovery.args_ancestor(config.args, config.invocation_params.dir)
        trap = discovery.space_form_trap(
            config.invocation_params.args, config.invocation_params.dir, config.rootpath, ancestor, "--specdec-dir"
        )
        if trap:
            raise pytest.UsageError(trap)
        if option.specdec_dir:  # command-line paths are relative to the current directory, ini ones to rootdir
            out_dir = Path(os.path.abspath(config.invocation_params.dir / option.specdec_dir))
        else:
            out_dir = config.rootpath / (config.getini("specdec_dir") or ".specdec")
        profile_path, searched = _profile_path(config, ancestor)
        try:
            tolerances = parse_tolerances(
                list(config.getini("specdec_tolerances")), strict=True, origin="ini specdec_tolerances"
            )
        except ValueError as exc:
            where = f" ({config.inipath})" if config.inipath is not None else ""
            raise pytest.UsageError(f"ini specdec_tolerances{where}: {exc}") from None
        selected = tuple(n.strip() for n in (option.server_profile or "").split(",") if n.strip())
        if not option.specdec_check and not selected and option.specdec_sweep:
            raise pytest.UsageError("--specdec-sweep: no profile selected; add --server-profile=NAME (e.g. eagle3)")
        # Options that only shape a compare do nothing without one: say so rather than measure for nothing.
        mapped = option.specdec_compare_profile
        alone = [f"--specdec-compare-profile={mapped}"] if mapped else []
        alone += ["--specdec-compare-force"] if option.specdec_compare_force else []
        if alone and option.specdec_compare is None:
            raise pytest.UsageError(
                f"{' and '.join(alone)} only shape{'s' if len(alone) == 1 else ''} a compare and none was asked for: "
                "add --specdec-compare (each "
                "test's newest clean stored run, or its reference) or --specdec-compare=NAME"
            )
        return cls(
            selected=selected,
            profile_path=profile_path,
            profile_search=tuple(searched),
            out_dir=out_dir,
            rootpath=config.rootpath,
            server_url=option.server_url,
            startup_timeout_s=option.specdec_startup_timeout,
            repeats=option.specdec_repeats,
            check=bool(option.specdec_check),
            strict=bool(option.specdec_strict),
            compare=option.specdec_compare,
            compare_profile=option.specdec_compare_profile,
            compare_missing=option.specdec_compare_missing,
            save=option.specdec_save,
            compare_force=bool(option.specdec_compare_force),
            undecided=_undecided_policy(option.specdec_undecided, config.getini("specdec_undecided")),
            tolerances=tolerances,
            sweep=tuple(option.specdec_sweep) if option.specdec_sweep else None,
            sweep_baseline=option.specdec_sweep_baseline,
            sweep_max_gap=option.specdec_sweep_max_gap,
            sweep_plot=option.specdec_sweep_plot,
            position_plot=option.specdec_position_plot,
            report=option.specdec_report,
            markdown=option.specdec_markdown,
            requests_out=(
                Path(os.path.abspath(config.invocation_params.dir / option.specdec_requests_out))
                if option.specdec_requests_out
                else None
            ),
        )


def _profile_path(config: pytest.Config, ancestor: Path) -> tuple[Path, list[Path]]:
    """The profile file, and the directories searched when neither the option nor the ini key names one."""
    if config.option.specdec_profiles:
        return Path(os.path.abspath(config.invocation_params.dir / config.option.specdec_profiles)), []
    raw = config.getini("specdec_profiles")
    if raw:
        return (Path(raw) if Path(raw).is_absolute() else config.rootpath / raw), []
    found, looked = discovery.find_profile_file(ancestor, config.rootpath, project_root=config.inipath is not None)
    return found or config.rootpath / discovery.DEFAULT_PROFILE_FILE, looked


def _undecided_policy(option: str | None, ini: str | None) -> str:
    """``--specdec-undecided`` over ini ``specdec_undecided`` over ``warn``.

    :raises pytest.UsageError: the ini value is not ``fail`` or ``warn``.
    """
    value = option or (ini or "warn").strip()
    if value not in ("fail", "warn"):
        raise pytest.UsageError(f"ini specdec_undecided = {value!r}: expected fail or warn")
    return value
