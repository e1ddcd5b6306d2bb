"""Where specdec.yaml is found without --specdec-profiles, and the --specdec-dir DIR (two words) rootdir trap."""

from __future__ import annotations

from pathlib import Path

import pytest

from pytest_specdec.profiles.discovery import args_ancestor, find_profile_file, space_form_trap
from tests.helpers import run_in_process

PROFILE = "profiles:\n  eagle3:\n    server: reference\n"


@pytest.mark.slow
def test_finds_the_file_next_to_the_given_test_path(pytester: pytest.Pytester) -> None:
    pytester.makeini("[pytest]\n")
    perf = pytester.mkdir("perf")
    (perf / "specdec.yaml").write_text(PROFILE)
    result = run_in_process(pytester, "perf", "--server-profile=eagle3", "--specdec-check")
    assert result.ret == pytest.ExitCode.OK, result.stderr.str()
    result.stdout.fnmatch_lines([f"specdec check passed: 1 profile(s) from {perf / 'specdec.yaml'}; nothing launched"])


@pytest.mark.slow
def test_finds_the_rootdir_file_from_a_subdirectory(pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch) -> None:
    pytester.makeini("[pytest]\n")
    pytester.makefile(".yaml", specdec=PROFILE)
    monkeypatch.chdir(pytester.mkdir("sub"))
    result = run_in_process(pytester, "--server-profile=eagle3", "--specdec-check")
    assert result.ret == pytest.ExitCode.OK, result.stderr.str()
    result.stdout.fnmatch_lines([f"*profile(s) from {pytester.path / 'specdec.yaml'}; nothing launched"])


def test_not_found_says_where_it_looked(pytester: pytest.Pytester) -> None:
    pytester.makeini("[pytest]\n")
    sub = pytester.mkdir("sub")
    result = run_in_process(pytester, "sub", "--server-profile=eagle3")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(
        [
            f"ERROR: specdec.yaml: profile file not found; looked in {sub}, {pytester.path} (rootdir). Put "
            "specdec.yaml in one of these, or pass --specdec-profiles=PATH or set the ini key specdec_profiles"
        ]
    )


@pytest.mark.slow
def test_specdec_dir_as_two_words_that_moves_the_rootdir_is_explained(
    pytester: pytest.Pytester, tmp_path_factory: pytest.TempPathFactory
) -> None:
    pytester.makeini("[pytest]\n")
    pytester.makefile(".yaml", specdec=PROFILE)
    out = tmp_path_factory.mktemp("specdec-out")
    result = run_in_process(pytester, "--specdec-dir", str(out), "--server-profile=eagle3", "--specdec-check")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(
        [
            f"ERROR: --specdec-dir {out}: pytest took {out} for a test path when it chose its rootdir (it reads the "
            f"command line before plugins add their options), so the rootdir is {out.parent} (test ids, the ini file "
            f"and relative paths follow it); write --specdec-dir={out}"
        ]
    )
    fixed = run_in_process(pytester, f"--specdec-dir={out}", "--server-profile=eagle3", "--specdec-check")
    assert fixed.ret == pytest.ExitCode.OK, fixed.stderr.str()
    profile_file = pytester.path / "specdec.yaml"
    fixed.stdout.fnmatch_lines([f"specdec: profiles eagle3 from {profile_file}; logs/results in {out}"])


@pytest.mark.slow
def test_specdec_dir_relative_to_the_current_directory(pytester: pytest.Pytester) -> None:
    pytester.makeini("[pytest]\n")
    pytester.makefile(".yaml", specdec=PROFILE)
    pytester.mkdir("out")
    # Two words but harmless here: out/ lies inside the project, so the rootdir stays where the ini file is.
    result = run_in_process(pytester, "--specdec-dir", "out", "--server-profile=eagle3", "--specdec-check")
    assert result.ret == pytest.ExitCode.OK, result.stderr.str()
    result.stdout.fnmatch_lines([f"specdec: profiles eagle3 from *; logs/results in {pytester.path / 'out'}"])


def test_search_order_and_bounds(tmp_path: Path) -> None:
    (tmp_path / "a" / "b").mkdir(parents=True)
    (tmp_path / "specdec.yaml").write_text(PROFILE)
    start = args_ancestor(["a/b", "a/b/test_x.py::test_y"], tmp_path)
    assert start == tmp_path / "a" / "b"
    assert find_profile_file(start, tmp_path, project_root=True) == (
        tmp_path / "specdec.yaml", [tmp_path / "a" / "b", tmp_path / "a", tmp_path]
    )  # fmt: skip
    found, looked = find_profile_file(start, tmp_path / "a", project_root=False)
    assert found == tmp_path / "specdec.yaml" and looked[-1] == Path("/")
    assert args_ancestor(["missing.py"], tmp_path) == tmp_path


def test_space_form_trap_only_for_the_two_word_form(tmp_path: Path) -> None:
    project, out = tmp_path / "project", tmp_path / "out"
    project.mkdir()
    out.mkdir()
    (project / "pytest.ini").write_text("[pytest]\n")
    args = ["--specdec-dir", str(out)]
    assert space_form_trap(args, project, out, project, "--specdec-dir") is not None
    assert space_form_trap([f"--specdec-dir={out}"], project, out, project, "--specdec-dir") is None
    assert space_form_trap([*args, "--rootdir", str(out)], project, out, project, "--specdec-dir") is None
    assert space_form_trap(args, project, project, project, "--specdec-dir") is None
