"""One measured phase shorter than SGLang's decode_log_interval after the plugin's /flush_cache (issue 29.6): run
with ``benchmarks/gpu/short-phase.yaml`` against a running server (see that file). Not collected by the suite."""

import pytest


@pytest.mark.specdec
def test_short_phase(specdec_run):
    assert specdec_run.metrics.num_errors == 0
    assert specdec_run.metrics.accept_length is not None  # judged on the per-request figures
