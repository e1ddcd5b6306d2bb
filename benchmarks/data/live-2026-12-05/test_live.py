import pytest


@pytest.mark.specdec
def test_throughput(specdec_run):
    assert specdec_run.metrics.output_tok_s > 0
