"""Part 3 of the real-SGLang tests (tests/gpu/conftest.py): the OpenAI-compatible streams through the plugin.
``pytest -m gpu tests/gpu/test_part3_openai_apis.py``.
"""

from __future__ import annotations

import os

import pytest

pytestmark = pytest.mark.gpu

if not os.environ.get("SPECDEC_SGLANG_PYTHON"):
    pytest.skip("real SGLang tests: set SPECDEC_SGLANG_PYTHON on a GPU machine (tests/gpu/)", allow_module_level=True)


@pytest.mark.parametrize("profile", ["eagle3-completions", "eagle3-chat"])
def test_openai_apis(run_plugin, profile: str) -> None:
    result = run_plugin(f"--server-profile={profile}")
    assert result.ret == 0, result.stdout.str()
