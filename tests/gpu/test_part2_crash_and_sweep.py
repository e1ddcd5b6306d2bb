"""Part 2 of the real-SGLang tests (tests/gpu/conftest.py): the aux-id -1 crash named, a num_steps 1..3 sweep.
``pytest -m gpu tests/gpu/test_part2_crash_and_sweep.py``.
"""

from __future__ import annotations

import os

import pytest

pytestmark = pytest.mark.gpu

if not os.environ.get("SPECDEC_SGLANG_PYTHON"):
    pytest.skip("real SGLang tests: set SPECDEC_SGLANG_PYTHON on a GPU machine (tests/gpu/)", allow_module_level=True)


def test_embedding_layer_id_crash_is_named(run_plugin) -> None:
    result = run_plugin("--server-profile=eagle3-embedding")
    assert result.ret != 0
    result.stdout.fnmatch_lines([
        "*(cause: scheduler exception)*TypeError: unsupported operand type(s) for +: 'Tensor' and 'NoneType' "
        "at sglang/srt/models/llama.py:437; the server then stopped its own process tree*"
    ])  # fmt: skip
    assert "OOM" not in result.stdout.str()


def test_sweep_num_steps(run_plugin) -> None:
    result = run_plugin("--server-profile=eagle3", "--specdec-sweep=num_steps=1..3", "--specdec-repeats=1")
    result.stdout.fnmatch_lines(["*num_steps*"])
    for steps in ("1", "2", "3"):
        assert f"num_steps={steps}" in result.stdout.str()
