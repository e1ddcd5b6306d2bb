"""examples/: what a user copies works on its own, and the repository's profile file keeps the same two profiles."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from pytest_specdec.engines.rules import load_profiles

EXAMPLES = Path(__file__).resolve().parents[1] / "examples"


def test_copied_profile_file_passes_check_in_an_empty_project(tmp_path: Path) -> None:
    shutil.copy(EXAMPLES / "specdec.yaml", tmp_path / "specdec.yaml")
    done = subprocess.run(
        [sys.executable, "-m", "pytest_specdec", "check", "specdec.yaml"],
        cwd=tmp_path, capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert (done.returncode, done.stdout, done.stderr) == (0, "profile baseline: ok\nprofile eagle3: ok\n", "")


def test_repository_profile_file_repeats_the_copied_profiles_unchanged() -> None:
    copied = load_profiles(EXAMPLES / "specdec.yaml").profiles
    repo = load_profiles(EXAMPLES / "more" / "specdec.yaml").profiles
    assert sorted(copied) == ["baseline", "eagle3"]
    for name, profile in copied.items():
        assert repo[name].model_dump(exclude={"source"}) == profile.model_dump(exclude={"source"}), name
    assert {"eagle3-wrong-layers", "eagle3-shifted-layers", "vllm-eagle3"} <= set(repo)


def test_copied_tests_leave_thresholds_to_the_profile(pytester: pytest.Pytester) -> None:
    shutil.copy(EXAMPLES / "specdec.yaml", pytester.path / "specdec.yaml")
    shutil.copy(EXAMPLES / "test_specdec.py", pytester.path / "test_specdec.py")
    # importlib mode: the outer run already imported examples/test_specdec.py under the same module name.
    items, _ = pytester.inline_genitems("--server-profile=eagle3", "-m", "specdec", "--import-mode=importlib")
    assert [item.name for item in items] == ["test_profile_thresholds[eagle3]", "test_latency_reported[eagle3]"]
    for item in items:
        marker = item.get_closest_marker("specdec")
        assert marker is not None and marker.kwargs == {}, item.name


def test_verdicts_doc_names_the_floor_that_catches_the_shifted_ids() -> None:
    """docs/verdicts.md said ids off by one pass the markers, but examples/' position-1 floor is above what they
    measure on the reference server: the doc's row must agree with the example's thresholds, figure by figure."""
    thresholds = load_profiles(EXAMPLES / "specdec.yaml").get("eagle3").thresholds
    doc = (EXAMPLES.parent / "docs" / "verdicts.md").read_text(encoding="utf-8")
    row = next(line for line in doc.splitlines() if "`eagle3-shifted-layers`" in line)
    caught, measured = (cell.strip() for cell in row.strip(" |").split(" | ")[1:])
    accept = float(measured.split(" → ")[1].split()[0])
    position_1 = float(measured.split("position 1 ")[1].split(" → ")[1].split()[0])
    assert accept >= (thresholds.min_accept_length or 0) and "passes the accept-length" in caught
    assert thresholds.min_accept_rate_at is not None and position_1 < thresholds.min_accept_rate_at[1]
    assert "per-position floor at position 1" in caught and "passes the markers" not in caught


@pytest.mark.parametrize("workflow", sorted(p.name for p in (EXAMPLES / "ci").glob("*.yml")))
def test_example_workflow_is_a_valid_github_workflow(workflow: str) -> None:
    """check-jsonschema's vendored GitHub-workflow schema (no network): a broken example workflow cannot ship."""
    pytest.importorskip("check_jsonschema", reason="check-jsonschema is in the dev extra")
    done = subprocess.run(
        [sys.executable, "-m", "check_jsonschema", "--builtin-schema", "vendor.github-workflows",
         str(EXAMPLES / "ci" / workflow)],
        capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert done.returncode == 0, done.stdout + done.stderr
