"""Tests of pytest_specdec.core.tolerances: the tolerance strings, their errors, and the layers over the defaults."""

from __future__ import annotations

from pathlib import Path

import pytest

from pytest_specdec.core.tolerances import Tolerance, format_tolerances, merge_tolerances, parse_tolerances
from pytest_specdec.profiles.schema import Profile


def test_parse_tolerances_forms() -> None:
    got = parse_tolerances(["output_tok_s:5%, accept_length:0.02", "ttft_ms:10%+5 tpot_ms_p99:150%"])
    assert got == {
        "output_tok_s": Tolerance(rel=0.05),
        "accept_length": Tolerance(abs=0.02),
        "ttft_ms": Tolerance(rel=0.10, abs=5.0),
        "tpot_ms_p99": Tolerance(rel=1.5),
    }
    assert format_tolerances(got) == "output_tok_s:5% accept_length:0.02 ttft_ms:10%+5 tpot_ms_p99:150%"
    assert Tolerance(rel=0.10, abs=5.0).allowed(50.0) == 10.0


@pytest.mark.parametrize(
    ("spec", "message"),
    [
        (
            "output_tok_s=5%",
            "bad tolerance 'output_tok_s=5%': expected METRIC:TOL with TOL as 5% (relative), 0.02 "
            "(absolute) or 10%+5 (both), e.g. output_tok_s:5%",
        ),
        (
            "ttft_ms:+5",
            "bad tolerance 'ttft_ms:+5': expected METRIC:TOL with TOL as 5% (relative), 0.02 (absolute) "
            "or 10%+5 (both), e.g. output_tok_s:5%",
        ),
        (
            "ttft_ms:-5%",
            "bad tolerance 'ttft_ms:-5%': expected METRIC:TOL with TOL as 5% (relative), 0.02 "
            "(absolute) or 10%+5 (both), e.g. output_tok_s:5%",
        ),
        (
            "tok_s:5%",
            "bad tolerance 'tok_s:5%': unknown metric 'tok_s' (known: accept_length, accept_rate, "
            "decode_tok_s, e2e_ms, goodput_per_s, input_tok_s, itl_ms, output_tok_s, requests_per_s, slo_attainment, "
            "total_tok_s, tpot_ms, ttft_ms, or a field like ttft_ms_p99)",
        ),
    ],
)
def test_parse_tolerances_errors(spec: str, message: str) -> None:
    with pytest.raises(ValueError) as info:
        parse_tolerances(f"output_tok_s:5% {spec}")
    assert str(info.value) == message


def test_merge_tolerances_layers() -> None:
    merged = merge_tolerances(parse_tolerances("ttft_ms_p50:5%"), parse_tolerances("ttft_ms:20% output_tok_s:3%"))
    assert format_tolerances(merged) == (
        "output_tok_s:3% accept_length:2% accept_rate:0.02 ttft_ms_mean:20% ttft_ms_p50:20% ttft_ms_p90:20% "
        "ttft_ms_p95:20% ttft_ms_p99:20% itl_ms_p50:10% tpot_ms_p50:10%"
    )
    # within one layer a field key beats its metric's key
    assert merge_tolerances(parse_tolerances("ttft_ms_p50:50% ttft_ms:20%"))["ttft_ms_p50"] == Tolerance(rel=0.5)
    assert merge_tolerances() == merge_tolerances(None, {})


def test_a_profile_tolerance_is_parsed_where_the_file_is_read(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # Parsed once, when the profile file is read: the check command names the file, line and key (before the
    # parse moved there, only pytest's selection caught it, without a line).
    from pytest_specdec.cli.main import main

    path = tmp_path / "specdec.yaml"
    path.write_text('profiles:\n  eagle3:\n    server: reference\n    tolerances: ["output_tok_s:five"]\n')
    assert main(["check", str(path)]) == 2
    assert capsys.readouterr().err.startswith(
        f"error: {path}:4: profiles.eagle3.tolerances: bad tolerance 'output_tok_s:five': expected METRIC:TOL"
    )
    good = Profile.model_validate({"name": "p", "tolerances": ["output_tok_s:3%", "ttft_ms:10%+5"]})
    assert good.tolerance_layer == {"output_tok_s": Tolerance(rel=0.03), "ttft_ms": Tolerance(rel=0.10, abs=5.0)}
