"""engines.rules: each engine's row, the problems it reports, and the loader applying them (messages exact)."""

from __future__ import annotations

from pathlib import Path

import pytest

from pytest_specdec.core.errors import ProfileError
from pytest_specdec.engines.rules import BUNDLED_TARGET, RULES, engine_problem, load_profiles, resolve_paths
from pytest_specdec.profiles.schema import Profile


def test_every_server_kind_has_a_row() -> None:
    assert set(RULES) == {"reference", "sglang", "vllm"}


def test_sglang_needs_a_model_path_unless_given_a_url() -> None:
    assert engine_problem(Profile(name="s", server="sglang")) == (
        "model_path is required for server: sglang (or give url:)"
    )
    assert engine_problem(Profile(name="s", server="sglang", url="http://h:1")) is None
    assert engine_problem(Profile(name="v", server="vllm")) is None


def test_nodes_need_a_multi_node_engine_and_an_even_tp_split() -> None:
    nodes = {"hosts": ["a", "b"]}
    assert engine_problem(Profile(name="v", server="vllm", model_path="m", tp_size=2, nodes=nodes)) == (
        "nodes: launches SGLang's multi-node mode; use server: sglang (or reference)"
    )
    assert engine_problem(Profile(name="s", server="sglang", model_path="m", tp_size=3, nodes=nodes)) == (
        "tp_size 3 is not a multiple of the 2 nodes.hosts (SGLang splits tensor parallelism evenly across nodes)"
    )
    assert engine_problem(Profile(name="r", tp_size=4, nodes=nodes)) is None


def test_only_the_reference_server_gets_the_bundled_checkpoints() -> None:
    assert resolve_paths(Profile(name="r")).model_path == str(BUNDLED_TARGET)
    vllm = Profile(name="v", server="vllm")
    assert resolve_paths(vllm) is vllm


def test_the_loader_reports_an_engine_problem_at_the_profile_line(tmp_path: Path) -> None:
    path = tmp_path / "specdec.yaml"
    path.write_text("profiles:\n  ok: {}\n  v:\n    server: vllm\n    tp_size: 2\n    nodes: {hosts: [a, b]}\n")
    with pytest.raises(ProfileError) as info:
        load_profiles(path)
    assert str(info.value) == (
        f"{path}:3: profiles.v: nodes: launches SGLang's multi-node mode; use server: sglang (or reference)"
    )
