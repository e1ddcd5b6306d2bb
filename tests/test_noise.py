"""Tests of pytest_specdec.judge.noise: the spread of repeated runs, as calibrate sizes with it and files keep it."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import pytest

from pytest_specdec.cli.main import main
from pytest_specdec.core.errors import NoiseFileError
from pytest_specdec.judge.noise import (
    FieldNoise,
    calibrate_noise,
    measurements,
    outlying_runs,
    paired_arm,
    proposal_sds,
    read_noise,
)
from pytest_specdec.measure.results import ResultRecord, ResultStore, RunFile
from tests.helpers import rec, run_in_process


def test_proposal_sds_are_calibrates_two_sds_per_field_with_the_repeats() -> None:
    """Per field the two sds calibrate prints and sizes its proposal for (within a run, run to run) and the repeats
    a stored run has; a constant accept length has no spread. One repeat per run: no within-run sd to split off."""
    runs = [rec(output_tok_s=[98.0, 100.0, 102.0], accept_length=[2.0] * 3),
            rec(output_tok_s=[108.0, 110.0, 112.0], accept_length=[2.0] * 3)]  # fmt: skip
    noise = calibrate_noise(runs)
    assert (noise["output_tok_s"], noise.run_to_run["output_tok_s"]) == (0.0193, 0.06876)
    assert proposal_sds(runs)["output_tok_s"] == FieldNoise("output_tok_s", "output_tok_s", 0.0193, 0.06876, 3)
    assert proposal_sds(runs)["accept_length"] == FieldNoise("accept_length", "accept_length", 0.0, 0.0, 3)
    # One repeat per run: no within-run sd to split off; the sd of all the values (of the log) is taken as within.
    single = [rec(output_tok_s=[v], accept_length=[2.0]) for v in (98.0, 100.0, 101.0, 103.0, 100.0)]
    assert proposal_sds(single)["output_tok_s"].within == pytest.approx(0.01824, abs=1e-5)
    assert proposal_sds(single)["output_tok_s"].run_to_run == 0.0


def _paired(test: str, target: list[float], reference: list[float]) -> ResultRecord:
    record = rec(test, output_tok_s=target)
    paired = {"vs": "baseline", "target": {"output_tok_s": target}, "reference": {"output_tok_s": reference}}
    return dataclasses.replace(record, paired=paired)


def test_calibrate_counts_measurements_not_tests(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Two tests of one profile in one run read one measurement: two run files of two such tests are 2
    measurements, and their values are pooled once (the later test's record, with more repeats, is kept)."""
    monkeypatch.chdir(tmp_path)
    files = []
    for run_id, tok_s in (("a", [98.0, 100.0, 101.0]), ("b", [103.0, 100.0, 100.0])):
        first = rec("t.py::test_a[eagle3]", output_tok_s=tok_s[:2], accept_length=[2.6, 2.6])
        later = rec("t.py::test_b[eagle3]", output_tok_s=tok_s, accept_length=[2.6] * 3)
        files.append(str(ResultStore(tmp_path).save(RunFile(run_id=run_id, started=0.0, results=(first, later)))))
    assert [len(r.values("output_tok_s")) for r in measurements([("a", first), ("a", later)])] == [3]
    assert main(["calibrate", "--from", *files]) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[0] == (
        "# noise from 2 measurement(s) (4 tests: the tests of a profile in one run share its measurement) -> "
        ".specdec/noise/eagle3.json (--specdec-compare reads it until 4 stored runs of the profile measure their own)"
    )
    assert json.loads((tmp_path / ".specdec/noise/eagle3.json").read_text())["runs"] == 2
    # Each record is one server start: the sd of one repeat within a run (pooled, of the log) and how much the
    # runs' means differ beyond it (one-way random-effects ANOVA; here hardly at all).
    assert "#   output_tok_s: sd 1.64% within a run, 0.04% run to run" in out


def test_calibrate_proposes_paired_fields_from_the_paired_ratios(capsys: pytest.CaptureFixture[str]) -> None:
    """The runner's load moves both arms (raw tok/s 60..100): the compare judges the ratio, whose spread is small."""
    runs = [
        _paired("t.py::test_x[eagle3]", [60.0, 80.0, 100.0], [50.0, 66.0, 84.0]),
        _paired("t.py::test_x[eagle3]", [90.0, 70.0, 95.0], [75.0, 58.0, 79.0]),
    ]
    assert paired_arm(runs) == "baseline"
    assert proposal_sds(runs, ["output_tok_s"])["output_tok_s"] == FieldNoise(
        "output_tok_s/baseline", "output_tok_s / ", 0.00673, 0.0, 3
    )
    # Unpaired, the raw values' spread: 23.9 % within, 0 run to run.
    assert proposal_sds([dataclasses.replace(r, paired={}) for r in runs], ["output_tok_s"])["output_tok_s"] == (
        FieldNoise("output_tok_s", "output_tok_s", 0.23941, 0.0, 3)
    )


def test_calibrate_noise_splits_the_spread_within_a_run_from_the_spread_between_server_starts() -> None:
    # Two server starts 10% apart, each tight: the within-run sd stays small, the run-to-run sd carries the gap (a
    # one-stored-run compare adds it for the baseline's instance and today's).
    noise = calibrate_noise([rec(output_tok_s=[98.0, 100.0, 102.0]), rec(output_tok_s=[108.0, 110.0, 112.0])],
                            ["output_tok_s"])  # fmt: skip
    assert noise == {"output_tok_s": pytest.approx(0.0193, abs=1e-4)} and noise.runs == 2
    assert noise.run_to_run == {"output_tok_s": pytest.approx(0.0688, abs=1e-4)}


def _levels(*levels: float) -> list[ResultRecord]:
    return [rec(output_tok_s=[v * 0.99, v, v * 1.01]) for v in levels]


def test_an_outlying_run_is_found_against_the_other_runs_even_among_3() -> None:
    """A run's level is judged against the other runs' median and MAD, not the whole set's: with 3 runs the whole
    set's MAD is the smaller distance of the other two from the middle one, and 58 tok/s beside 111 and 129 reads 2.9
    sds there (masked). Against the other two it is 6.5; and among 5 runs 10.2 (their MAD, 7.3%). Neither 129 nor
    111 is one."""
    (found,) = outlying_runs(_levels(111.0, 58.0, 129.0), instance_sd=0.07)
    assert (found.index, round(found.others, 1), round(found.z, 1)) == (1, 119.7, -6.5)
    (found,) = outlying_runs(_levels(58.0, 111.0, 115.0, 122.0, 129.0), instance_sd=0.07)
    assert (found.index, round(found.level, 1), round(found.others, 1), round(found.z, 1), round(found.sd, 3)) == (
        0, 58.0, 118.4, -10.2, 0.073)  # fmt: skip


def test_no_run_is_called_an_outlier_within_the_noise_or_in_a_split() -> None:
    """Two runs 1% apart do not make a third 11% off an outlier (their MAD is below the 7% run-to-run sd a compare
    assumes, which is the floor; 23% slower is one); half the runs apart from the other half is a split, not an
    outlier; fewer than 3 runs show none; a run without tok/s values leaves the check out."""
    assert outlying_runs(_levels(100.0, 101.0, 112.0), instance_sd=0.07) == []
    assert [o.index for o in outlying_runs(_levels(100.0, 101.0, 77.0), instance_sd=0.07)] == [2]
    assert outlying_runs(_levels(100.0, 101.0, 77.0), instance_sd=0.14) == []
    # A run faster than the others is the quiet one (load never speeds a server up): a trial on a loaded runner saw
    # its two quiet nights left out and the one beside a busy loop kept.
    assert outlying_runs(_levels(100.0, 101.0, 128.0), instance_sd=0.07) == []
    assert outlying_runs(_levels(86.0, 81.0, 84.0, 157.0, 135.0), instance_sd=0.07) == []
    assert outlying_runs(_levels(60.0, 61.0, 120.0, 121.0), instance_sd=0.07) == []
    assert outlying_runs(_levels(58.0, 120.0), instance_sd=0.07) == []
    assert outlying_runs([*_levels(58.0, 111.0, 129.0), rec(accept_length=[2.6])], instance_sd=0.07) == []


def test_a_noise_file_written_before_the_run_to_run_part_reads_without_it(tmp_path: Path) -> None:
    path = tmp_path / "eagle3.json"
    path.write_text(json.dumps({"profile": "eagle3", "runs": 5, "sigma_rel": {"output_tok_s": 0.07}}))
    noise = read_noise(path)
    assert (dict(noise), noise.run_to_run, noise.runs) == ({"output_tok_s": 0.07}, {}, 5)
    assert read_noise(tmp_path / "absent.json") == {}


#: A noise file's text with one value replaced (raw JSON: NaN and Infinity are what a corrupted file holds).
GOOD = '{"profile": "eagle3", "runs": 4, "sigma_rel": {"output_tok_s": %s}, "run_to_run_rel": {"output_tok_s": %s}}'
FIX = "rerun calibrate (python -m pytest_specdec calibrate PROFILE_FILE --profile eagle3 --runs K) or delete the file"


@pytest.mark.parametrize(
    ("text", "message"),
    [
        (GOOD % ("-0.05", "0.01"), "sigma_rel.output_tok_s: expected a relative sd from 0 to 1.0 (100%), got -0.05"),
        (GOOD % ("NaN", "0.01"), "sigma_rel.output_tok_s: expected a relative sd from 0 to 1.0 (100%), got NaN"),
        (GOOD % ("0.02", "Infinity"), "run_to_run_rel.output_tok_s: expected a relative sd from 0 to 1.0 (100%), got "
                                      "Infinity"),
        (GOOD % ("50", "0.01"), "sigma_rel.output_tok_s: expected a relative sd from 0 to 1.0 (100%), got 50"),
        (GOOD % ('"0.05"', "0.01"), "sigma_rel.output_tok_s: expected a relative sd from 0 to 1.0 (100%), got '0.05'"),
        (GOOD.replace('"runs": 4', '"runs": "four"') % ("0.02", "0.01"), "runs: expected the number of server starts "
                                                                        "measured (an integer >= 1), got 'four'"),
        (GOOD.replace('"runs": 4', '"runs": 0') % ("0.02", "0.01"), "runs: expected the number of server starts "
                                                                    "measured (an integer >= 1), got 0"),
        ('{"profile": "eagle3", "sigma_rel": [0.05]}', "sigma_rel: expected an object of relative sds (key -> sd), got "
                                                       "a list"),
        (GOOD.replace('"eagle3"', '"baseline"') % ("0.02", "0.01"), "profile: expected 'eagle3' (the profile of the "
                                                                    "file name), got 'baseline': the noise of another "
                                                                    "profile (a copied file?)"),
        (GOOD.replace('"eagle3"', "null") % ("0.02", "0.01"), "profile: expected 'eagle3' (the profile of the file "
                                                              "name), got null: the noise of another profile (a copied "
                                                              "file?)"),
    ],
)  # fmt: skip
def test_a_corrupted_noise_file_names_the_file_key_value_and_fix(tmp_path: Path, text: str, message: str) -> None:
    """A trial's edited files read as "math domain error" deep in a compare (negative), "σ nan%" (NaN), "σ 393%"
    (50): each is refused where it is read."""
    path = tmp_path / "eagle3.json"
    path.write_text(text)
    with pytest.raises(NoiseFileError) as info:
        read_noise(path)
    assert str(info.value) == f"{path}: {message}; {FIX}"
    assert info.value.path == path


def test_a_noise_file_of_another_profile_is_refused_unless_named_on_purpose(tmp_path: Path) -> None:
    """A profile's own file (``noise/<profile>.json``) copied from another profile was used silently; a file given
    by name (``compare --noise FILE``, one file for every test) may be named anything, and a file without the key
    (none written without it) reads."""
    copied = tmp_path / "eagle3.json"
    copied.write_text(GOOD.replace('"eagle3"', '"baseline"') % ("0.02", "0.01"))
    with pytest.raises(NoiseFileError) as info:
        read_noise(copied)
    assert info.value.key == "profile"
    assert dict(read_noise(copied, named=True)) == {"output_tok_s": 0.02}
    copied.write_text('{"runs": 4, "sigma_rel": {"output_tok_s": 0.02}}')
    assert dict(read_noise(copied)) == {"output_tok_s": 0.02}


def test_a_noise_file_that_is_not_json_is_refused_and_an_absent_one_is_no_noise(tmp_path: Path) -> None:
    path = tmp_path / "eagle3.json"
    path.write_text("{not json")
    with pytest.raises(NoiseFileError, match=r"eagle3\.json: not JSON \(Expecting property name .*\); rerun calibrate "
                       r"\(python -m pytest_specdec calibrate PROFILE_FILE --profile eagle3 --runs K\) or delete the "
                       "file"):  # fmt: skip
        read_noise(path)
    assert read_noise(tmp_path / "absent.json") == {}


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ('{"profile": "base", "runs": 4, "sigma_rel": {"output_tok_s": -0.05}}',
         "sigma_rel.output_tok_s: expected a relative sd from 0 to 1.0 (100%), got -0.05"),
        ('{"profile": "eagle3", "runs": 4, "sigma_rel": {"output_tok_s": 0.05}}',
         "profile: expected 'base' (the profile of the file name), got 'eagle3': the noise of another profile (a "
         "copied file?)"),
    ],
)  # fmt: skip
def test_a_broken_noise_file_stops_pytest_before_any_server_starts(
    pytester: pytest.Pytester, text: str, message: str
) -> None:
    """With --specdec-compare, every selected profile's noise is read when the session starts: a broken file is a
    usage error naming it (a trial measured the whole run, then failed both tests with a traceback), and so is a
    file copied from another profile (a trial's was used silently)."""
    from pytest_specdec.engines.rules import BUNDLED_TARGET

    pytester.makefile(".yaml", specdec=f"profiles:\n  base:\n    server: sglang\n    model_path: {BUNDLED_TARGET}\n")
    pytester.makepyfile(test_x="def test_run(specdec_run):\n    pass\n")
    noise = pytester.path / ".specdec" / "noise" / "base.json"
    noise.parent.mkdir(parents=True)
    noise.write_text(text)
    # In process: the usage error comes at configure, before any launch, and a pytest start in a subprocess costs
    # 2-3 s on a busy runner.
    result = run_in_process(pytester, "--server-profile=base", "--specdec-compare")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines([
        f"ERROR: --specdec-compare: calibrated noise of profile 'base': */.specdec/noise/base.json: {message}; rerun "
        "calibrate (python -m pytest_specdec calibrate PROFILE_FILE --profile base --runs K) or delete the file"
    ])  # fmt: skip
    assert not (pytester.path / ".specdec" / "logs").exists()  # no server was started
