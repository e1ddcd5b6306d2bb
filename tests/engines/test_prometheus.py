"""engines/prometheus.py: sums over label sets, _created dropped, bad text raises."""

from __future__ import annotations

import pytest

from pytest_specdec.engines.prometheus import sum_samples

TEXT = """\
# TYPE vllm:spec_decode_num_drafts counter
vllm:spec_decode_num_drafts_total{engine="0",model_name="m"} 10.0
vllm:spec_decode_num_drafts_total{engine="1",model_name="m"} 5.0
vllm:spec_decode_num_drafts_created{engine="0",model_name="m"} 1.7e+09
# TYPE vllm:num_requests_running gauge
vllm:num_requests_running{engine="0"} 2.0
"""


def test_sum_samples() -> None:
    assert sum_samples(TEXT) == {"vllm:spec_decode_num_drafts_total": 15.0, "vllm:num_requests_running": 2.0}
    assert sum_samples("") == {}


def test_invalid_text_raises() -> None:
    with pytest.raises(ValueError):
        sum_samples("metric{unclosed 1\n")
