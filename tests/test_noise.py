"""Tests of pytest_specdec.judge.noise: tolerances proposed from the spread of repeated runs."""

from __future__ import annotations

from pytest_specdec.judge.noise import calibrate_proposal
from pytest_specdec.judge.tolerances import Tolerance
from tests.helpers import rec


def test_calibrate_proposal() -> None:
    runs = [rec(output_tok_s=[v], accept_length=[2.0]) for v in (98.0, 100.0, 101.0, 103.0, 100.0)]
    # tok/s: sigma = 1.4826 * MAD 1 -> 3 * 1.4826 % = 4.45 % -> 4.5 %; accept length constant -> the 1 % floor
    assert calibrate_proposal(runs) == {"output_tok_s": Tolerance(rel=0.045), "accept_length": Tolerance(rel=0.01)}
