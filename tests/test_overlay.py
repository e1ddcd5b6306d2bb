"""overlay.make_draft_overlay: rewritten config, symlinked files, stable names, concurrent creation."""

from __future__ import annotations

import json
import os
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from pytest_specdec.core.errors import ProfileError
from pytest_specdec.engines import overlay
from pytest_specdec.engines.overlay import make_draft_overlay


@pytest.fixture
def draft(tmp_path: Path) -> Path:
    d = tmp_path / "draft-eagle3"
    d.mkdir()
    config = {
        "architectures": ["LlamaForCausalLMEagle3"],
        "hidden_size": 256,
        "num_aux_hidden_states": 3,
        "eagle_config": {"eagle_aux_hidden_state_layer_ids": [1, 3, 5], "use_aux_hidden_state": True},
    }
    (d / "config.json").write_text(json.dumps(config))
    (d / "model.safetensors").write_bytes(b"weights")
    (d / "sub").mkdir()
    (d / "sub" / "x.txt").write_text("x")
    return d


def test_overlay_rewrites_ids_and_symlinks_everything_else(draft: Path, tmp_path: Path) -> None:
    out = make_draft_overlay(draft, [0, 2, 4, 6], tmp_path / "overlays")
    config = json.loads((out / "config.json").read_text())
    assert config["eagle_config"] == {"eagle_aux_hidden_state_layer_ids": [0, 2, 4, 6], "use_aux_hidden_state": True}
    assert config["num_aux_hidden_states"] == 4
    assert config["hidden_size"] == 256
    assert not (out / "config.json").is_symlink()
    assert os.readlink(out / "model.safetensors") == str(draft / "model.safetensors")
    assert (out / "sub").is_symlink() and (out / "sub" / "x.txt").read_text() == "x"
    # The source draft is untouched.
    assert json.loads((draft / "config.json").read_text())["eagle_config"]["eagle_aux_hidden_state_layer_ids"] == [
        1,
        3,
        5,
    ]


def test_top_level_ids_are_kept_coherent_and_missing_eagle_config_is_created(tmp_path: Path) -> None:
    d = tmp_path / "d"
    d.mkdir()
    (d / "config.json").write_text(json.dumps({"eagle_aux_hidden_state_layer_ids": [1, 2, 3]}))
    config = json.loads((make_draft_overlay(d, [2, 4, 6], tmp_path / "o") / "config.json").read_text())
    assert config == {
        "eagle_aux_hidden_state_layer_ids": [2, 4, 6],
        "eagle_config": {"eagle_aux_hidden_state_layer_ids": [2, 4, 6]},
    }


def test_same_inputs_reuse_the_directory_other_ids_do_not(draft: Path, tmp_path: Path) -> None:
    first = make_draft_overlay(draft, [1, 3, 5], tmp_path / "o")
    again = make_draft_overlay(draft, [1, 3, 5], tmp_path / "o")
    other = make_draft_overlay(draft, [0, 3, 5], tmp_path / "o")
    assert first == again != other
    assert first.name.startswith("draft-eagle3-aux1_3_5-")
    assert sorted(p.name for p in (tmp_path / "o").iterdir()) == sorted([first.name, other.name])


def test_concurrent_callers_get_one_directory(draft: Path, tmp_path: Path) -> None:
    with ThreadPoolExecutor(max_workers=8) as pool:
        results = list(pool.map(lambda _: make_draft_overlay(draft, [2, 4], tmp_path / "o"), range(16)))
    assert len(set(results)) == 1
    assert [p.name for p in (tmp_path / "o").iterdir()] == [results[0].name]  # no temp dirs left behind
    assert json.loads((results[0] / "config.json").read_text())["eagle_config"]["eagle_aux_hidden_state_layer_ids"] == [
        2,
        4,
    ]


def test_losing_the_rename_race_returns_the_winner(
    draft: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    real_rename = os.rename
    winner: list[Path] = []

    def rename_after_a_rival(src: str | Path, dst: str | Path) -> None:
        if not winner:
            monkeypatch.setattr(overlay.os, "rename", real_rename)
            winner.append(make_draft_overlay(draft, [1, 2], tmp_path / "o"))  # the rival finishes first
        real_rename(src, dst)

    monkeypatch.setattr(overlay.os, "rename", rename_after_a_rival)
    result = make_draft_overlay(draft, [1, 2], tmp_path / "o")
    assert winner == [result]
    assert [p.name for p in (tmp_path / "o").iterdir()] == [result.name]


def test_missing_draft_config_is_a_profile_error(tmp_path: Path) -> None:
    with pytest.raises(ProfileError, match=r"config.json: cannot read the draft config for an aux-id overlay: "):
        make_draft_overlay(tmp_path, [1], tmp_path / "o")


def test_non_integer_ids_are_rejected(draft: Path, tmp_path: Path) -> None:
    with pytest.raises(
        ProfileError, match=r"^speculative.aux_hidden_state_layer_ids: expected integers, got \[1, '2'\]$"
    ):
        make_draft_overlay(draft, [1, "2"], tmp_path / "o")  # type: ignore[list-item]
