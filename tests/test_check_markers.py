"""``--specdec-check`` reads every collected test's ``specdec`` marker as the run does (issue 43: a broken tolerance
and a misspelt keyword passed the check, then errored the test after the server start), and a real run errors a
broken marker's test before its server starts."""

from __future__ import annotations

import pytest

from tests.helpers import IN_PROCESS_INI, run_in_process

PROFILES = (
    "profiles:\n"
    "  baseline:\n    server: reference\n"
    "  eagle3:\n    extends: baseline\n"
    "    speculative: {algorithm: EAGLE3, num_steps: 3, eagle_topk: 1, num_draft_tokens: 4}\n"
)

VALID = "categories, max_e2e_ms_p90"  # the start of the valid keys' list


def _project(pytester: pytest.Pytester, marker: str) -> pytest.Pytester:
    pytester.makeini(IN_PROCESS_INI)
    pytester.makefile(".yaml", specdec=PROFILES)
    pytester.makepyfile(
        test_perf=f"import pytest\n\n@pytest.mark.specdec({marker})\ndef test_speed(specdec_run):\n    pass\n\n"
        "def test_plain():\n    pass\n"
    )
    return pytester


def _literal(line: str) -> str:
    """``line`` for ``fnmatch_lines`` with its brackets literal (node ids, lists); ``*`` stays a wildcard."""
    return line.replace("[", "[[]")


def _check(pytester: pytest.Pytester, *args: str) -> pytest.RunResult:
    """In process, as the real run below: the check launches nothing, and a pytest start in a subprocess costs 2-3 s
    on a busy runner."""
    return run_in_process(pytester, "--specdec-check", *args)


@pytest.mark.parametrize(
    ("marker", "message"),
    [
        pytest.param(
            "tolerances=['output_tok_s:5']",
            "@pytest.mark.specdec(tolerances=...): bad tolerance 'output_tok_s:5': a bare number on output_tok_s "
            "(tok/s) is ambiguous: write output_tok_s:5% *",
            id="bare-rate-tolerance",
        ),
        pytest.param(
            "tolerances=5",
            "@pytest.mark.specdec(tolerances=...): expected a string, a list of strings or a mapping of metric to "
            "tolerance, got 5; e.g. ['output_tok_s:5%', 'ttft_ms:10%'] or {'output_tok_s': '5%'}",
            id="tolerances-not-strings",
        ),
        pytest.param(
            "min_tok_sec=5",
            f"@pytest.mark.specdec: unknown threshold 'min_tok_sec' (did you mean 'min_tok_s'? valid: {VALID}, *, "
            "tolerances); got min_tok_sec=5",
            id="misspelt-keyword",
        ),
        pytest.param("min_tok_s=-5", "@pytest.mark.specdec: min_tok_s=-5: expected *", id="negative-threshold"),
        pytest.param("min_tok_s='fast'", "@pytest.mark.specdec: min_tok_s='fast': expected *", id="not-a-number"),
        pytest.param(
            "min_speedup={'vs': 'basline', 'ratio': 1.1}",
            "@pytest.mark.specdec: min_speedup vs 'basline': no such profile in *specdec.yaml (did you mean "
            "'baseline'? available: baseline, eagle3)",
            id="unknown-profile",
        ),
        pytest.param(
            "min_speedup={'vs': 'baseline', 'ratio': 1.1}, tolerances=['output_tok_s/basline:10%']",
            "@pytest.mark.specdec(tolerances=...): bad tolerance output_tok_s/basline:10%: this test's ratio rows are "
            "to 'baseline' (min_speedup vs), so no row would take it *; write output_tok_s/baseline:10%",
            id="ratio-tolerance-of-another-arm",
        ),
    ],
)
def test_a_broken_marker_fails_the_check(pytester: pytest.Pytester, marker: str, message: str) -> None:
    _project(pytester, marker)
    result = _check(pytester, "--server-profile=eagle3")
    assert result.ret == pytest.ExitCode.TESTS_FAILED, result.stdout.str()
    result.stdout.fnmatch_lines(
        [
            "*- specdec check: markers -*",
            _literal(f"error: test_perf.py::test_speed[eagle3]: {message}"),
            f"specdec check FAILED: 1 profile(s) from {pytester.path / 'specdec.yaml'}, 1 marked test(s); "
            "nothing launched",
        ]
    )
    assert not (pytester.path / ".specdec" / "logs").exists()  # nothing launched: no server log


def test_the_check_without_a_profile_reads_markers_too(pytester: pytest.Pytester) -> None:
    """With no --server-profile every profile is preflighted, and the marker is read against no profile's
    thresholds (the run would skip the test; the marker is broken all the same)."""
    _project(pytester, "min_tok_sec=5")
    result = _check(pytester)
    assert result.ret == pytest.ExitCode.TESTS_FAILED, result.stdout.str()
    line = "error: test_perf.py::test_speed[no-profile]: @pytest.mark.specdec: unknown threshold 'min_tok_sec' *"
    result.stdout.fnmatch_lines([_literal(line)])


def test_a_clean_marker_passes_the_check(pytester: pytest.Pytester) -> None:
    _project(pytester, "min_tok_s=5, tolerances=['output_tok_s:5%'], min_speedup={'vs': 'baseline', 'ratio': 1.1}")
    result = _check(pytester, "--server-profile=eagle3")
    assert result.ret == pytest.ExitCode.OK, result.stdout.str()
    result.stdout.fnmatch_lines(
        [
            "*- specdec check: markers -*",
            "1 marked test(s): no findings",
            f"specdec check passed: 1 profile(s) from {pytester.path / 'specdec.yaml'}, 1 marked test(s); "
            "nothing launched",
        ]
    )
    assert "error:" not in result.stdout.str()


def test_a_deselected_test_is_not_checked(pytester: pytest.Pytester) -> None:
    _project(pytester, "min_tok_sec=5")
    result = _check(pytester, "--server-profile=eagle3", "-k", "plain")
    assert result.ret == pytest.ExitCode.OK, result.stdout.str()
    result.stdout.fnmatch_lines(["specdec check passed: 1 profile(s) from *; nothing launched"])


def test_a_test_file_that_does_not_import_fails_the_check(pytester: pytest.Pytester) -> None:
    _project(pytester, "min_tok_s=5")
    pytester.makepyfile(test_broken="import no_such_module_here\n")
    result = _check(pytester, "--server-profile=eagle3")
    assert result.ret == pytest.ExitCode.TESTS_FAILED, result.stdout.str()
    result.stdout.fnmatch_lines(
        [
            "error: 1 error(s) during collection (listed above); the run would stop there",
            "specdec check FAILED: *",
        ]
    )


def test_a_broken_marker_errors_its_test_before_its_server_starts(pytester: pytest.Pytester) -> None:
    """The real run: the marker is read in ``pytest_runtest_setup`` before the test's fixtures, so the profile's
    server (here a stand-in that records its start) is never started for a test whose marker is broken."""
    _project(pytester, "min_tok_sec=5")
    pytester.makeconftest(
        "import pytest\n\n"
        "@pytest.fixture(scope='session')\n"
        "def specdec_server(specdec_profile, tmp_path_factory):\n"
        "    open('server-started', 'w').close()\n"
        "    pytest.fail('a server was started')\n"
    )
    result = run_in_process(pytester, "--server-profile=eagle3")
    assert result.ret == pytest.ExitCode.TESTS_FAILED, result.stdout.str()
    result.assert_outcomes(passed=1, errors=1)
    result.stdout.fnmatch_lines(["*@pytest.mark.specdec: unknown threshold 'min_tok_sec' *; got min_tok_sec=5"])
    assert not (pytester.path / "server-started").exists()


def test_the_check_preflights_every_point_of_a_sweep(pytester: pytest.Pytester) -> None:
    """helper-77: ``--specdec-sweep eagle_topk=1,2 --specdec-check`` passed (the base profile alone was checked), and
    the same command without the check refused the topk-2 point (the reference server drafts chains only)."""
    _project(pytester, "min_tok_s=5")
    result = _check(pytester, "--server-profile=eagle3", "--specdec-sweep=eagle_topk=1,2")
    assert result.ret != pytest.ExitCode.OK, result.stdout.str()
    out = result.stdout.str()
    assert "eagle3@eagle_topk=2" in out and "topk 1" in out, out
    assert "specdec check passed" not in out, out
    clean = _check(pytester, "--server-profile=eagle3", "--specdec-sweep=num_steps=2,3")
    assert clean.ret == pytest.ExitCode.OK, clean.stdout.str()
    clean.stdout.fnmatch_lines(["specdec check passed: 2 profile(s) from *; nothing launched"])
