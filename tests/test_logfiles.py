"""One log per launch, the newest kept, ``<name>.log`` linking the newest (pytest_specdec.serve.logfiles)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from pytest_specdec.serve import logfiles


def test_each_launch_gets_its_own_log_and_the_pointer_follows_the_newest(tmp_path: Path) -> None:
    first = logfiles.new_log_path(tmp_path, "eagle3", stamp="20261202T010000Z-00aa")
    first.write_text("first run: crashed\n")
    second = logfiles.new_log_path(tmp_path, "eagle3", stamp="20261202T010000Z-00aa")  # same second and process
    assert second.name == "eagle3.20261202T010000Z-00aa-2.log"
    second.write_text("second run\n")
    assert first.read_text() == "first run: crashed\n"  # the earlier failure's log is kept
    assert (tmp_path / "eagle3.log").read_text() == "second run\n"
    paired = logfiles.new_log_path(tmp_path, "eagle3.paired", stamp="20261202T010001Z-00aa")
    assert paired.name == "eagle3.paired.20261202T010001Z-00aa.log"
    assert (tmp_path / "eagle3.log").read_text() == "second run\n"


def test_only_the_newest_are_kept_and_an_old_plain_log_is_kept_too(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(logfiles, "KEEP", 3)
    old = tmp_path / "eagle3.log"
    old.write_text("from before per-run logs\n")
    os.utime(old, (1764630000, 1764630000))  # 2025-12-01T23:00:00Z: older than every launch below
    paths = [logfiles.new_log_path(tmp_path, "eagle3", stamp=f"20261202T01000{i}Z-00aa") for i in range(5)]
    other = logfiles.new_log_path(tmp_path, "eagle3.paired", stamp="20261202T000000Z-00aa")
    names = sorted(p.name for p in tmp_path.iterdir())
    assert names == [  # the renamed old log (20251201T230000Z-0000) was the oldest: pruned
        "eagle3.20261202T010002Z-00aa.log",
        "eagle3.20261202T010003Z-00aa.log",
        "eagle3.20261202T010004Z-00aa.log",
        "eagle3.log",
        other.name,
        "eagle3.paired.log",
    ]
    assert (tmp_path / "eagle3.log").resolve() == paths[-1].resolve()
