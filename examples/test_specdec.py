"""What a user copies: speculative-decoding performance tests, run once per --server-profile.

    pytest -m specdec --server-profile=eagle3
    pytest -m specdec --server-profile=baseline,eagle3     # both profiles' tests; eagle3's min_speedup pairs the two

Every test that uses ``specdec_run`` is held to its profile's ``thresholds:`` in specdec.yaml, checked after the
test body; all tests of one profile share one measurement. To hold one test to another bar, override key by key
with ``@pytest.mark.specdec(max_ttft_ms=500)``; the summary lists every override next to the profile's value.
"""


def test_profile_thresholds(specdec_run):
    assert specdec_run.metrics.num_errors == 0


def test_latency_reported(specdec_run):
    metrics = specdec_run.metrics
    assert metrics.ttft_ms_p50 is not None and metrics.itl_ms_p50 is not None
