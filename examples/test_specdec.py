"""What a user copies: speculative-decoding performance tests, run once per --server-profile.

    pytest -m specdec --server-profile=eagle3
    pytest -m specdec --server-profile=baseline,eagle3     # one server at a time; adds the speedup check
"""

import pytest


@pytest.mark.specdec  # the profile's thresholds apply
def test_profile_thresholds(specdec_run):
    assert specdec_run.metrics.num_errors == 0


@pytest.mark.specdec(min_accept_length=2.4, min_accept_rate=0.47)  # not applicable on profiles without speculation
def test_acceptance(specdec_run):
    pass


@pytest.mark.specdec(max_ttft_ms=1000, max_itl_ms=100)
def test_latency(specdec_run):
    metrics = specdec_run.metrics
    assert metrics.ttft_ms_p50 is not None and metrics.itl_ms_p50 is not None
