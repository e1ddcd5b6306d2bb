"""Tests of pytest_specdec.core.tolerances: the tolerance strings, their errors, and the layers over the defaults."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from pytest_specdec.core.tolerances import (
    Tolerance,
    Tolerances,
    format_tolerances,
    merge_tolerances,
    parse_tolerances,
)
from pytest_specdec.profiles.schema import Profile
from pytest_specdec.run.marker import read_marker


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
            "bad tolerance 'output_tok_s=5%': expected METRIC:TOL with TOL as 5% (relative), 5tok/s or 0.05 "
            "(absolute) or 10%+5ms (both), e.g. output_tok_s:5%",
        ),
        (
            "ttft_ms:+5",
            "bad tolerance 'ttft_ms:+5': expected METRIC:TOL with TOL as 5% (relative), 5tok/s or 0.05 (absolute) "
            "or 10%+5ms (both), e.g. output_tok_s:5%",
        ),
        (
            "ttft_ms:-5%",
            "bad tolerance 'ttft_ms:-5%': a tolerance is how much worse ttft_ms may get, a positive amount: write "
            "ttft_ms:5% (the metric's direction is its own: lower tok/s and higher latency are worse)",
        ),
        (
            "tok_s:5%",
            "bad tolerance 'tok_s:5%': unknown metric 'tok_s' (known: accept_length, accept_rate, "
            "decode_tok_s, e2e_ms, goodput_per_s, input_tok_s, itl_ms, output_tok_s, requests_per_s, slo_attainment, "
            "total_tok_s, tpot_ms, ttft_ms, or a field like ttft_ms_p99)",
        ),
        (
            "tpot[code]:80%",
            "bad tolerance 'tpot[code]:80%': unknown metric 'tpot' (known: accept_length, accept_rate, "
            "decode_tok_s, e2e_ms, goodput_per_s, input_tok_s, itl_ms, output_tok_s, requests_per_s, slo_attainment, "
            "total_tok_s, tpot_ms, ttft_ms, or a field like ttft_ms_p99)",
        ),
        (
            "output_tok_s[code]:20%",
            "bad tolerance 'output_tok_s[code]:20%': output_tok_s has no rows per category (the compare judges "
            "accept_length, accept_rate, ttft_ms_p50, itl_ms_p50, tpot_ms_p50 per prompt category), e.g. "
            "tpot_ms_p50[code]:30%",
        ),
        (
            "tpot_ms_p50[]:80%",
            "bad tolerance 'tpot_ms_p50[]:80%': expected FIELD[CATEGORY]:TOL for one prompt category's row, e.g. "
            "tpot_ms_p50[code]:30%",
        ),
        (
            "tpot_ms_p50[code:80%",
            "bad tolerance 'tpot_ms_p50[code:80%': expected FIELD[CATEGORY]:TOL for one prompt category's row, e.g. "
            "tpot_ms_p50[code]:30%",
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


def test_a_category_row_has_a_tolerance_of_its_own() -> None:
    """Fresh-user trial: ``-t 'tpot_ms_p50[code]:80%'`` was refused as an unknown metric, and a category row whose
    medians spread 10-15% could only be given room by widening its field's top row too. ``FIELD[CATEGORY]:TOL``
    parses (a metric names its category field, ``ttft_ms`` -> ``ttft_ms_p50``; a category is free text, spaces
    included), and a row without one takes its field's."""
    got = parse_tolerances(["tpot_ms_p50:51%, tpot_ms_p50[code]:80%", "ttft_ms[creative writing]:20%+5"])
    assert dict(got) == {"tpot_ms_p50": Tolerance(rel=0.51)}
    assert got.categories == {("tpot_ms_p50", "code"): Tolerance(rel=0.80),
                              ("ttft_ms", "creative writing"): Tolerance(rel=0.20, abs=5.0)}  # fmt: skip
    merged = merge_tolerances(got)
    assert merged.row("tpot_ms_p50", "code") == Tolerance(rel=0.80)
    assert merged.row("tpot_ms_p50", "chat") == Tolerance(rel=0.51)
    assert merged.row("ttft_ms_p50", "creative writing") == Tolerance(rel=0.20, abs=5.0)
    assert merged.row("itl_ms_p50", "code") == Tolerance(rel=0.10)  # the default, as the field's top row
    # What a stored record keeps (verdict's cost) reads back to the same tolerances, categories included.
    text = format_tolerances(merged)
    assert text.endswith(" ttft_ms_p50[creative writing]:20%+5 tpot_ms_p50[code]:80%")
    assert merge_tolerances(parse_tolerances(text)) == merged
    assert merged != merge_tolerances(dict(merged))  # the categories count in the equality


def test_a_later_layer_naming_the_field_sets_its_category_rows_too() -> None:
    # The rule of the fields: the later layer wins for every row it names; a field names its category rows unless
    # the same layer gives them their own.
    ini = parse_tolerances("tpot_ms_p50:51% tpot_ms_p50[code]:80% itl_ms_p50[code]:30%")
    marker = parse_tolerances("tpot_ms:5%")
    merged = merge_tolerances(ini, marker)
    assert merged.row("tpot_ms_p50", "code") == Tolerance(rel=0.05)
    assert merged.row("itl_ms_p50", "code") == Tolerance(rel=0.30)
    again = merge_tolerances(ini, parse_tolerances("tpot_ms_p50:5% tpot_ms:7% tpot_ms[code]:60% tpot_ms_p50[code]:70%"))
    assert (again["tpot_ms_p50"], again.row("tpot_ms_p50", "code")) == (Tolerance(rel=0.05), Tolerance(rel=0.70))
    assert merge_tolerances(Tolerances()) == merge_tolerances()


def test_a_category_tolerance_reads_from_the_ini_the_profile_and_the_marker(pytester: pytest.Pytester) -> None:
    """The same grammar in every layer pytest merges (ini, profile, marker), the category rows' merged with the
    fields' rule; a bad one in the ini stops the run at configure, naming the key and the token."""
    from pytest_specdec.run.settings import RunSettings
    from tests.helpers import plugin_args

    pytester.makeini("[pytest]\nspecdec_tolerances =\n    tpot_ms_p50:51%\n    tpot_ms_p50[code]:80%\n"
                     "    itl_ms_p50[creative writing]:40%\n")  # fmt: skip
    settings = RunSettings.from_config(pytester.parseconfigure(*plugin_args()))
    profile = Profile.model_validate({"name": "p", "tolerances": ["itl_ms_p50[creative writing]:45%"]})
    marker = parse_tolerances(["ttft_ms[code]:25%"])
    merged = merge_tolerances(settings.tolerances, profile.tolerance_layer, marker)
    assert merged.categories == {("ttft_ms_p50", "code"): Tolerance(rel=0.25),
                                 ("itl_ms_p50", "creative writing"): Tolerance(rel=0.45),
                                 ("tpot_ms_p50", "code"): Tolerance(rel=0.80)}  # fmt: skip
    ini = pytester.makeini("[pytest]\nspecdec_tolerances =\n    tpot[code]:80%\n")
    result = pytester.runpytest(*plugin_args())
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    # fnmatch would read [code] as a character class: the line is compared as it is.
    error = f"ERROR: ini specdec_tolerances ({ini}): bad tolerance 'tpot[code]:80%': unknown metric 'tpot' (known: "
    assert [line for line in result.stderr.lines if line.startswith(error)], result.stderr.str()


def test_an_absolute_part_may_carry_its_fields_unit() -> None:
    """``5tok/s``, ``10%+5ms``, ``0.5req/s``: absolute, as a bare number reads from a stored spec; another unit is
    refused with the field's own."""
    got = parse_tolerances("output_tok_s:5tok/s ttft_ms:10%+5ms requests_per_s:0.5req/s", strict=True)
    assert got == {"output_tok_s": Tolerance(abs=5.0), "ttft_ms": Tolerance(rel=0.10, abs=5.0),
                   "requests_per_s": Tolerance(abs=0.5)}  # fmt: skip
    # A stored record's spec (format_tolerances) is read as written: a bare number is absolute.
    assert parse_tolerances("output_tok_s:5") == {"output_tok_s": Tolerance(abs=5.0)}
    with pytest.raises(ValueError) as info:
        parse_tolerances("output_tok_s:5ms")
    assert str(info.value) == ("bad tolerance 'output_tok_s:5ms': output_tok_s is in tok/s, not ms; e.g. "
                               "output_tok_s:5% or output_tok_s:5tok/s")  # fmt: skip
    with pytest.raises(ValueError) as info:
        parse_tolerances("accept_length:1tok/s")
    assert str(info.value) == ("bad tolerance 'accept_length:1tok/s': accept_length takes a bare number (no unit), "
                               "not tok/s; e.g. accept_length:5% or accept_length:0.02")  # fmt: skip


@pytest.mark.parametrize(
    ("token", "fixes"),
    [
        ("output_tok_s:5", "output_tok_s (tok/s) is ambiguous: write output_tok_s:5% for 5 percent of the baseline, "
                           "or output_tok_s:5tok/s for 5 tok/s absolute"),
        ("ttft_ms_p99:20", "ttft_ms_p99 (ms) is ambiguous: write ttft_ms_p99:20% for 20 percent of the baseline, or "
                           "ttft_ms_p99:20ms for 20 ms absolute"),
        ("tpot_ms_p50[code]:2.5", "tpot_ms_p50 (ms) is ambiguous: write tpot_ms_p50[code]:2.5% for 2.5 percent of "
                                  "the baseline, or tpot_ms_p50[code]:2.5ms for 2.5 ms absolute"),
    ],
)  # fmt: skip
def test_a_bare_number_on_a_rate_or_time_field_is_refused_from_a_user(token: str, fixes: str) -> None:
    """A fresh-user trial wrote ``output_tok_s:5`` meaning 5%: it was 5 tok/s, a 0.5% gate at 1000 tok/s."""
    with pytest.raises(ValueError) as info:
        parse_tolerances(f"output_tok_s:5% {token}", strict=True)
    assert str(info.value) == f"bad tolerance {token!r}: a bare number on {fixes}"


def test_exact_fields_and_a_written_relative_part_keep_bare_numbers() -> None:
    got = parse_tolerances("accept_length:0.05 accept_rate:0.02 slo_attainment:0.05 ttft_ms:10%+5 itl_ms:0%+1",
                           strict=True)  # fmt: skip
    assert got == {"accept_length": Tolerance(abs=0.05), "accept_rate": Tolerance(abs=0.02),
                   "slo_attainment": Tolerance(abs=0.05), "ttft_ms": Tolerance(rel=0.10, abs=5.0),
                   "itl_ms": Tolerance(abs=1.0)}  # fmt: skip


BARE = ("bad tolerance 'output_tok_s:5': a bare number on output_tok_s (tok/s) is ambiguous: write output_tok_s:5% for "
        "5 percent of the baseline, or output_tok_s:5tok/s for 5 tok/s absolute")


def test_a_bare_rate_tolerance_in_the_ini_is_a_usage_error_naming_the_file(pytester: pytest.Pytester) -> None:
    from tests.helpers import plugin_args

    ini = pytester.makeini("[pytest]\nspecdec_tolerances =\n    accept_length:0.05\n    output_tok_s:5\n")
    result = pytester.runpytest(*plugin_args())
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    assert f"ERROR: ini specdec_tolerances ({ini}): {BARE}" in result.stderr.lines, result.stderr.str()


def test_a_bare_rate_tolerance_in_a_profile_names_the_file_line_and_key(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from pytest_specdec.cli.main import main

    path = tmp_path / "specdec.yaml"
    path.write_text('profiles:\n  eagle3:\n    server: reference\n    tolerances: ["output_tok_s:5", "ttft_ms:10%"]\n')
    assert main(["check", str(path)]) == 2
    assert capsys.readouterr().err.startswith(f"error: {path}:4: profiles.eagle3.tolerances: {BARE}")


def test_a_bare_rate_tolerance_in_the_marker_errors_the_test(pytester: pytest.Pytester) -> None:
    from tests.helpers import plugin_args

    pytester.makepyfile(
        "import pytest\n\n"
        "@pytest.mark.specdec(tolerances=['output_tok_s:5'])\n"
        "def test_x():\n    pass\n"
    )
    result = pytester.runpytest(*plugin_args())
    result.assert_outcomes(errors=1)
    # The ERROR header names the test; its one line, the argument, the value and both fixes.
    assert f"@pytest.mark.specdec(tolerances=...): {BARE}" in result.stdout.lines, result.stdout.str()


def test_a_ratio_row_has_a_tolerance_of_its_own() -> None:
    """GPU nights (issue 43): a paired field's raw row spreads with the server instance (14% run to run on one
    H100), its ratio to the paired arm 0-5%; one tolerance for both left the raw row undecided on every unchanged
    night. ``FIELD/ARM:TOL`` gives the ratio row its own (a metric names its paired field, ``ttft_ms`` ->
    ``ttft_ms_p50``); without one it takes the field's; a later layer naming the field resets it, as for categories;
    stored records read it back."""
    got = parse_tolerances("output_tok_s:40% output_tok_s/baseline:15% ttft_ms/baseline:20%+5ms", strict=True)
    assert dict(got) == {"output_tok_s": Tolerance(rel=0.40)}
    merged = merge_tolerances(got)
    assert merged.ratio("output_tok_s", "baseline") == Tolerance(rel=0.15)
    assert merged.ratio("output_tok_s", "base") == Tolerance(rel=0.40)  # another arm: the field's
    assert merged.ratio("ttft_ms_p50", "baseline") == Tolerance(rel=0.20, abs=5.0)
    assert merged.ratio("itl_ms_p50", "baseline") == Tolerance(rel=0.10)  # the default
    assert merge_tolerances(parse_tolerances(format_tolerances(merged))) == merged
    # A marker naming the field holds both rows to it, unless it gives the ratio row its own.
    assert merge_tolerances(got, parse_tolerances("output_tok_s:3%")).ratio("output_tok_s", "baseline") == (
        Tolerance(rel=0.03))


@pytest.mark.parametrize(
    ("spec", "fragment"),
    [
        ("accept_length/baseline:1%", "accept_length has no ratio row"),
        ("output_tok_s/:5%", "expected FIELD/ARM:TOL"),
        ("output_tok_s:0%", "0 on output_tok_s leaves no room for noise"),
        ("itl_ms:0ms", "0 on itl_ms leaves no room for noise"),
    ],
)
def test_a_tolerance_no_unchanged_run_can_pass_is_refused(spec: str, fragment: str) -> None:
    """Fresh-user trial: ``0%`` on tok/s was accepted silently (no unchanged run passes it; 500% is said by the
    compare: ``tests/test_compare.py``)."""
    with pytest.raises(ValueError, match=re.escape(fragment)):
        parse_tolerances(spec, strict=True)


def test_what_stays_accepted_and_a_space_after_the_colon() -> None:
    # Latency may grow by more than itself; exact fields keep 0 (equal-or-not); a stored spec is read as written.
    assert parse_tolerances("ttft_ms:500% accept_length:0 output_tok_s:500%", strict=True) == Tolerances(
        {"ttft_ms": Tolerance(rel=5.0), "accept_length": Tolerance(), "output_tok_s": Tolerance(rel=5.0)})
    assert parse_tolerances("output_tok_s:0%")["output_tok_s"] == Tolerance()
    # ``output_tok_s: 5%`` as YAML is written: the space splits no token.
    assert parse_tolerances("output_tok_s: 5%, ttft_ms: 10%+5ms", strict=True) == parse_tolerances(
        "output_tok_s:5% ttft_ms:10%+5ms")


@pytest.mark.parametrize(
    "written",
    [
        {"output_tok_s": "5%", "accept_length": 0.05},
        [{"output_tok_s": "5%"}, "accept_length:0.05"],
        "output_tok_s:5% accept_length:0.05",
    ],
)
def test_a_profile_writes_its_tolerances_as_yaml_is_written(written: object) -> None:
    """Fresh-user trial: ``tolerances: {output_tok_s: 5%}`` got pydantic's "Input should be a valid list"."""
    profile = Profile.model_validate({"name": "p", "tolerances": written})
    assert profile.tolerance_layer == {"output_tok_s": Tolerance(rel=0.05), "accept_length": Tolerance(abs=0.05)}


def test_a_ratio_tolerance_naming_another_arm_than_min_speedups_is_refused(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Fresh-user trial: ``output_tok_s/basline:10%`` passed every preflight, and at run time the -26% ratio row ran at
    the raw row's 500%, ``ok``; only a note under the table said so. A profile with ``min_speedup`` knows its arm."""
    from pytest_specdec.cli.main import main

    path = tmp_path / "specdec.yaml"
    path.write_text("profiles:\n  baseline:\n    server: reference\n  eagle3:\n    extends: baseline\n"
                    "    tolerances: {output_tok_s: 40%, output_tok_s/basline: 10%}\n"
                    "    thresholds:\n      min_speedup: {vs: baseline, ratio: 0.8}\n")  # fmt: skip
    assert main(["check", str(path)]) == 2
    assert capsys.readouterr().err.strip() == (
        f"error: {path}:4: profiles.eagle3: tolerances: bad tolerance output_tok_s/basline:10%: this test's ratio "
        "rows are to 'baseline' (min_speedup vs), so no row would take it and the ratio row would run at its field's "
        "tolerance; write output_tok_s/baseline:10%"
    )
    # Without min_speedup the arm is not known here (an unpaired base profile's layer that a paired one extends).
    assert Profile.model_validate({"name": "p", "tolerances": ["output_tok_s/base:10%"]}).tolerances


class _MarkedItem:
    """The one part of a ``pytest.Item`` :func:`read_marker` reads without a profile: its ``specdec`` marker."""

    def __init__(self, **kwargs: object) -> None:
        self.mark = pytest.mark.specdec(**kwargs).mark

    def get_closest_marker(self, name: str) -> pytest.Mark | None:
        return self.mark if name == "specdec" else None


def _marker_layer(written: object) -> Tolerances | None:
    args = read_marker(_MarkedItem(tolerances=written), None, Path("specdec.yaml"))  # type: ignore[arg-type]
    assert args is not None
    return args.tolerances


@pytest.mark.parametrize(
    "written",
    [
        {"output_tok_s": "5%", "accept_length": 0.05},
        [{"output_tok_s": "5%"}, "accept_length:0.05"],
        ("output_tok_s:5%", "accept_length:0.05"),
        "output_tok_s:5% accept_length:0.05",
    ],
)
def test_a_marker_takes_the_tolerance_shapes_a_profile_takes(written: object) -> None:
    """Issue 43 (fresh-user trial): ``tolerances={"output_tok_s": "5%"}`` was refused by the marker ("expected a
    string or a list of strings") while a profile's ``tolerances:`` took the same mapping."""
    expected = {"output_tok_s": Tolerance(rel=0.05), "accept_length": Tolerance(abs=0.05)}
    assert _marker_layer(written) == expected
    assert Profile.model_validate({"name": "p", "tolerances": written}).tolerance_layer == expected


@pytest.mark.parametrize(
    ("written", "message"),
    [
        (5, "expected a string, a list of strings or a mapping of metric to tolerance, got 5; e.g. "
            "['output_tok_s:5%', 'ttft_ms:10%'] or {'output_tok_s': '5%'}"),
        ({"output_tok_s": 5}, "bad tolerance 'output_tok_s:5': a bare number on output_tok_s (tok/s) is ambiguous: "
                              "write output_tok_s:5% for 5 percent of the baseline, or output_tok_s:5tok/s for 5 tok/s "
                              "absolute"),
    ],
)  # fmt: skip
def test_a_marker_and_a_profile_refuse_a_tolerance_alike(tmp_path: Path, written: object, message: str) -> None:
    from pytest_specdec.core.errors import ProfileError
    from pytest_specdec.engines.rules import load_profiles

    with pytest.raises(ValueError) as marker:
        _marker_layer(written)
    assert str(marker.value) == f"@pytest.mark.specdec(tolerances=...): {message}"
    path = tmp_path / "specdec.yaml"
    path.write_text(f"profiles:\n  p:\n    tolerances: {written!r}\n")
    with pytest.raises(ProfileError) as profile:
        load_profiles(path)
    assert str(profile.value) == f"{path}:3: profiles.p.tolerances: {message}"


def test_each_row_says_which_layer_its_tolerance_came_from() -> None:
    """Issue 43: which layer a row's tolerance came from (default, ini, profile, marker, compare -t) was shown
    nowhere; a merge keeps it per row, and a later layer naming a field takes its rows' origin too."""
    ini = parse_tolerances("output_tok_s:4% tpot_ms[code]:30%", strict=True, origin="ini specdec_tolerances")
    profile = Profile.model_validate({"name": "eagle3", "tolerances": {"ttft_ms_p50": "20%",
                                                                       "output_tok_s/baseline": "15%"}})  # fmt: skip
    marker = _marker_layer("tpot_ms_p50:5%")
    merged = merge_tolerances(ini, profile.tolerance_layer, marker)
    assert [merged.describe("output_tok_s"), merged.describe("output_tok_s", vs="baseline"),
            merged.describe("output_tok_s", vs="base"), merged.describe("ttft_ms_p50"),
            merged.describe("tpot_ms_p50", "code"), merged.describe("accept_rate"),
            merged.describe("ttft_ms_p99")] == [  # fmt: skip
        "output_tok_s:4% (ini specdec_tolerances)",
        "output_tok_s/baseline:15% (profile eagle3)",
        "output_tok_s/base:4% (ini specdec_tolerances)",  # no ratio tolerance of its own: the field's
        "ttft_ms_p50:20% (profile eagle3)",
        "tpot_ms_p50[code]:5% (marker)",  # the marker's tpot_ms_p50 replaced the ini's category row
        "accept_rate:0.02 (default)",
        "ttft_ms_p99: no tolerance",
    ]
    assert merged.origin("ttft_ms_p99") is None
    shown = {"output_tok_s", "ttft_ms_p50", "accept_rate"}
    assert merged.origins_note(shown) == ("tolerances from: output_tok_s:4% (ini specdec_tolerances), ttft_ms_p50:20% "
                                          "(profile eagle3), output_tok_s/baseline:15% (profile eagle3), the rest "
                                          "default")  # fmt: skip
    assert merge_tolerances(merged).origins == merged.origins  # merging a merged layer again keeps them
    # An unnamed layer (a stored spec) gives no origin, and no "the rest default" that would not be true.
    unnamed = merge_tolerances(ini, parse_tolerances("accept_length:0.05"))
    assert unnamed.describe("accept_length") == "accept_length:0.05"
    assert unnamed.origins_note({"output_tok_s", "accept_length"}) == (
        "tolerances from: output_tok_s:4% (ini specdec_tolerances)")
    assert merge_tolerances().origins_note() is None
    # Origins are not compared: the same tolerances from another layer are equal.
    assert parse_tolerances("output_tok_s:4%", origin="marker") == parse_tolerances("output_tok_s:4%")
