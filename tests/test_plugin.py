"""The plugin end to end through pytester: options, profile errors, marker errors, summary, verdicts, teardown.

Tests that launch the bundled reference server use a small workload; each starts one server per profile, but
for profiles whose measurement is all they read: those are given by URL, the session's shared servers
(``conftest.reference_url``).
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import textwrap
import time
from collections.abc import Callable

import psutil
import pytest

from pytest_specdec.serve.ports import port_is_free
from tests.helpers import IN_PROCESS_INI, SHARED_EAGLE3, STRICT_INI, run_in_process

PROFILES = """
profiles:
  baseline:
    server: reference
    env: {SPECDEC_TEST_TAG: "@TAG@"}
    startup_timeout_s: 180
    workload: {max_new_tokens: 24, num_requests: 6, warmup_requests: 1}
  eagle3:
    extends: baseline
    speculative: {algorithm: EAGLE3, num_steps: 3, eagle_topk: 1, num_draft_tokens: 4}
  eagle3-wrong-layers:
    extends: eagle3
    speculative: {aux_hidden_state_layer_ids: [0, 1, 2]}
  crashes:
    extends: baseline
    extra_args: ["--ref-fault-oom-at-startup", "0.5"]
  embedding:
    extends: eagle3
    speculative: {aux_hidden_state_layer_ids: [-1, 1, 3], allow_embedding_capture: true}
"""

TESTS = """
import pytest

@pytest.mark.specdec(min_accept_length=1.5)
def test_accept(specdec_run):
    assert specdec_run.metrics.num_ok == 6

def test_server_info(specdec_server):
    assert specdec_server.base_url.startswith("http://127.0.0.1:")
"""


def _tag(pytester: pytest.Pytester) -> str:
    return str(pytester.path)


def _our_servers(pytester: pytest.Pytester) -> list[psutil.Process]:
    """Processes still alive that carry this test's tag in their environment (other tests' servers do not)."""
    found = []
    for proc in psutil.process_iter():
        try:
            if proc.environ().get("SPECDEC_TEST_TAG") == _tag(pytester):
                found.append(proc)
        except (psutil.NoSuchProcess, psutil.AccessDenied, psutil.ZombieProcess):
            continue
    return found


def _write_project(pytester: pytest.Pytester, *, in_process: bool) -> pytest.Pytester:
    """The profiles (tagged with this test) and ``TESTS``. For a run in process (``run_in_process``: runs that stop
    before any launch, where a second interpreter adds only its start, about 0.4 s a run) the test module has a name
    no test module of the outer session has (docs/development.md says why) and the in-process ini."""
    pytester.makefile(".yaml", specdec=PROFILES.replace("@TAG@", _tag(pytester)))
    pytester.makepyfile(**{"test_plugin_inner" if in_process else "test_specdec": TESTS})
    pytester.makeini(IN_PROCESS_INI if in_process else STRICT_INI)
    return pytester


@pytest.fixture
def project(pytester: pytest.Pytester) -> pytest.Pytester:
    return _write_project(pytester, in_process=False)


@pytest.fixture
def inner(pytester: pytest.Pytester) -> pytest.Pytester:
    return _write_project(pytester, in_process=True)


def test_empty_server_profile_is_a_usage_error_not_a_green_run(inner: pytest.Pytester) -> None:
    """`--server-profile=$PROFILE` with PROFILE unset must not skip everything and pass (found by a fresh user)."""
    result = run_in_process(inner, "--server-profile=")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines([
        "ERROR: --server-profile=: no profile named; give NAME[[],NAME...[]], e.g. --server-profile=eagle3 "
        "(leave the option out to skip specdec tests)"
    ])  # fmt: skip


def test_a_profile_named_twice_is_a_usage_error() -> None:
    """`--server-profile=eagle3,eagle3` ran each test twice as [eagle3_0]/[eagle3_1], ids no stored run matches
    (found by a fresh user)."""
    from pytest_specdec.run.options import profile_names

    assert profile_names("baseline,eagle3") == "baseline,eagle3"
    with pytest.raises(pytest.UsageError) as info:
        profile_names("eagle3,baseline, eagle3")
    assert str(info.value) == (
        "--server-profile=eagle3,baseline, eagle3: eagle3 named more than once; name each profile once "
        "(--server-profile=eagle3,baseline); to measure more, raise --specdec-repeats"
    )


def test_unknown_profile_is_a_usage_error(inner: pytest.Pytester) -> None:
    result = run_in_process(inner, "--server-profile=eagle")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(
        [
            "ERROR: --server-profile=eagle: no such profile in *specdec.yaml (did you mean *?) (available: baseline, "
            "crashes, eagle3, *)"
        ]
    )


def test_broken_profile_file_names_file_key_and_value(pytester: pytest.Pytester) -> None:
    pytester.makefile(".yaml", specdec="profiles:\n  eagle3:\n    speculative: {algorithm: EAGLE3, num_steps: two}\n")
    pytester.makepyfile(test_x="def test_x(specdec_run): pass\n")
    result = run_in_process(pytester, "--server-profile=eagle3")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(["error: *specdec.yaml:3: profiles.eagle3.speculative.num_steps: *'two'*"])


def test_without_profile_specdec_tests_skip(inner: pytest.Pytester) -> None:
    result = run_in_process(inner, "-rs")
    result.assert_outcomes(skipped=2)
    result.stdout.fnmatch_lines(["*no --server-profile given (e.g. pytest -m specdec --server-profile=eagle3)*"])


def test_bad_marker_argument_errors_that_test_before_any_launch(inner: pytest.Pytester) -> None:
    inner.makepyfile(
        test_bad="""
        import pytest

        @pytest.mark.specdec(min_accept_lenght=2.0)
        def test_typo(specdec_run):
            pass

        @pytest.mark.specdec(min_speedup=1.2)
        def test_speedup_shape(specdec_run):
            pass
        """
    )
    result = run_in_process(inner, "test_bad.py", "--server-profile=eagle3")
    assert result.ret == pytest.ExitCode.TESTS_FAILED
    result.assert_outcomes(errors=2)
    result.stdout.fnmatch_lines(
        [
            "*@pytest.mark.specdec: unknown threshold 'min_accept_lenght' (did you mean 'min_accept_length'? valid: *",
            "*@pytest.mark.specdec: min_speedup=1.2: expected a mapping like "
            "min_speedup={'vs': 'baseline', 'ratio': 1.1}",
        ]
    )
    assert "During handling" not in result.stdout.str()
    assert not _our_servers(inner)


def test_preflight_error_stops_before_launch(inner: pytest.Pytester) -> None:
    inner.makefile(
        ".yaml",
        specdec=PROFILES.replace("@TAG@", _tag(inner))
        + textwrap.indent("eagle-on-eagle3-draft:\n  extends: eagle3\n  speculative: {algorithm: EAGLE}\n", "  "),
    )
    result = run_in_process(inner, "--server-profile=eagle-on-eagle3-draft")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(["ERROR: specdec preflight failed (nothing was launched):", "*EAGLE*Eagle3*"])
    assert not _our_servers(inner)


@pytest.mark.slow
def test_wrong_layers_and_per_position_and_category_floors_fail_naming_value_and_threshold(
    project: pytest.Pytester,
) -> None:
    """Two tests on one server (one start, not two): the wrong aux layers fail an accept-length floor, naming value,
    threshold and preflight's note on the ids; per-position and per-category floors fail, and the summary shows the
    acceptance by category and by draft position."""
    aux = "    speculative: {aux_hidden_state_layer_ids: [0, 1, 2]}\n"
    profiles = PROFILES.replace(aux, aux + "    workload: {prompts: prompts.jsonl}\n")
    assert profiles != PROFILES
    project.makefile(".yaml", specdec=profiles.replace("@TAG@", _tag(project)))
    (project.path / "prompts.jsonl").write_text(
        '{"prompt": "def read_config(path):\\n    result = {}\\n    with open(path", "category": "code"}\n'
        '{"prompt": "# This module reads files. Each line ", "category": "prose"}\n'
        '{"prompt": "class Stack:\\n    def __init__(self):\\n        self.", "category": "code"}\n'
    )
    project.makepyfile(
        test_specdec="""
        import pytest

        @pytest.mark.specdec(min_accept_length=99)
        def test_accept(specdec_run):
            pass

        @pytest.mark.specdec(min_accept_rate_at={1: 0.5, 3: 0.99}, categories={"prose": {"min_accept_length": 99}})
        def test_positions(specdec_run):
            assert len(specdec_run.metrics.accept_rate_at) == 3
            assert specdec_run.metrics.by_category["code"]["num_ok"] == 4
        """
    )
    plot = project.path / "positions.png"
    result = project.runpytest_subprocess(
        "--server-profile=eagle3-wrong-layers", f"--specdec-position-plot={plot}", timeout=600
    )
    assert result.ret == pytest.ExitCode.TESTS_FAILED, result.stdout.str()
    result.assert_outcomes(failed=2)
    context = "[[]profile eagle3-wrong-layers, 6 requests x 3 repeats[]]"
    result.stdout.fnmatch_lines(
        [
            f"*accept_length * tok/verify < min 99 (margin -*%) [[]exact; temperature 0, 3 identical repeats: decided "
            f"by the first, * server-s[]] {context}",
            # The likely cause, in the failure itself (not only in the header): the ids the draft was trained on.
            "preflight said before the launch:",
            "  note: *specdec.yaml:*: profiles.eagle3-wrong-layers.speculative.aux_hidden_state_layer_ids: differs "
            "from the ids the draft was trained on ([[]1, 3, 5[]], *(got [[]0, 1, 2[]]); "
            "fix: remove the override to use *",
        ]
    )
    result.stdout.fnmatch_lines(
        [
            f"*accept_rate_at[[]3[]] 0.* < min 0.99 (margin -0.*) [[]exact; temperature 0, 3 identical repeats: "
            f"decided by the first, * server-s[]] {context}",
            f"*accept_length[[]prose[]] * tok/verify < min 99 (margin -*) [[]exact; temperature 0, 3 identical "
            f"repeats: decided by the first, * server-s[]] {context}",
            # Each floor's cost: an exact one decided by one repeat.
            "specdec server time: test_positions[[]eagle3-wrong-layers[]]: *; min_accept_rate_at[[]1[]] passed after 1 "
            "repeat (*); min_accept_rate_at[[]3[]] FAILED after 1 repeat (*); min_accept_length[[]prose[]] FAILED "
            "after 1 repeat (*)",
            "*- specdec accept length by prompt category (requests) -*",
            "test * profile * code * prose",
            "test_positions[[]eagle3-wrong-layers[]] * eagle3-wrong-layers * *.** (4) * *.** (2)",
            "*- specdec acceptance by draft position -*",
            "rate/cond per draft position k: rate = steps accepting draft k / verify steps; "
            "cond = steps accepting draft k / steps that reached k",
            "test * profile * k=1 * k=2 * k=3  source",
            "test_positions[[]eagle3-wrong-layers[]] * eagle3-wrong-layers * 0.*/0.* * 0.*/0.* * 0.*/0.*  "
            "meta_info.spec_correct_drafts_histogram",
            "*- specdec position plot: *positions.png -*",
        ]
    )
    assert not re.search(r"^\S*accept_rate_at\[1\] ", result.stdout.str(), re.M)  # passed floors print no line
    assert plot.stat().st_size > 0
    assert not _our_servers(project)


@pytest.mark.slow
def test_servers_dying_at_startup_error_fast_naming_their_cause(project: pytest.Pytester) -> None:
    """Two deaths before ready, in one run (one pytest start, not two; each profile still launches its own server):
    the OOM fault is named as out of memory; aux id -1 fails as stock SGLang 0.5.17 did on an H200 (scheduler
    TypeError, then the server SIGKILLs its own tree), and the plugin names the exception and where it was raised,
    and blames no OOM."""
    result = project.runpytest_subprocess("--server-profile=crashes,embedding", timeout=300)
    assert result.ret == pytest.ExitCode.TESTS_FAILED
    result.assert_outcomes(errors=4)
    # Each profile's session fixture error is cached: one launch per profile, not one per test.
    for name in ("crashes", "embedding"):
        assert len(list((project.path / ".specdec" / "logs").glob(f"{name}.2*.log"))) == 1, name
    out = result.stdout.str()
    result.stdout.fnmatch_lines(["*server 'crashes' exited with code 1 before it was ready (cause: out of memory)*"])
    result.stdout.fnmatch_lines([
        "*server 'embedding' was killed by signal 9 (SIGKILL) * (cause: scheduler exception) after * s: "
        "TypeError: unsupported operand type(s) for +: 'Tensor' and 'NoneType' at "
        "pytest_specdec/refserver/decoding.py:*; the server then stopped its own process tree (signal 9); its last "
        "lines besides that one: *; log: *; fix: run its launch command by hand to see why it exits: * -m "
        "pytest_specdec.refserver *"
    ])  # fmt: skip
    # No OOM blamed for the embedding death: the whole output but the crashes profile's lines and error sections.
    rest, in_crashes = [], False
    for line in out.splitlines():
        if line.startswith(("_", "=")):  # an error section's header, or the end of the sections
            in_crashes = " ERROR at setup of " in line and "[crashes]" in line
        if not in_crashes and "crashes" not in line:
            rest.append(line)
    assert "'embedding' was killed" in "\n".join(rest)
    assert not re.search("OOM|out of memory", "\n".join(rest)), rest
    assert not _our_servers(project)


@pytest.mark.slow
def test_two_profiles_one_server_at_a_time_eagle3_summary_baseline_not_applicable_and_client_load(
    project: pytest.Pytester,
) -> None:
    """One run of two profiles checks what four runs did (5 server starts, now 2): the servers run one at a time;
    eagle3 passes and prints the summary, and its run file's accept lengths agree across their three sources; the
    plain profile's accept thresholds are n/a. Issue 13.3 on the plain profile (``watched``: two client worker
    processes, concurrency 2): every lag counts as overload (fraction 0), and as the client's own (busy from 0
    cores), so the warning path runs deterministically; the load lands in the results."""
    profiles = PROFILES.replace("@TAG@", _tag(project)) + (
        "  watched:\n    extends: baseline\n"
        "    workload: {max_new_tokens: 24, num_requests: 6, warmup_requests: 1, concurrency: 2, client_workers: 2}\n"
    )
    project.makefile(".yaml", specdec=profiles)
    project.makeconftest(
        f"""
        import psutil, pytest
        import pytest_specdec.measure.metrics

        pytest_specdec.measure.metrics.CLIENT_LAG_FRACTION = 0.0
        pytest_specdec.measure.metrics.CLIENT_BUSY_CORES = 0.0

        def _tagged(proc):
            try:
                return proc.environ().get("SPECDEC_TEST_TAG") == {_tag(project)!r}
            except (psutil.NoSuchProcess, psutil.AccessDenied, psutil.ZombieProcess):
                return False

        @pytest.fixture(autouse=True)
        def _count_servers():
            live = [p for p in psutil.process_iter() if _tagged(p)]
            assert len(live) <= 1, live
        """
    )
    # The profile's 3 repeats (not 1): the run file's per-repeat figures below are checked on each of them.
    result = project.runpytest_subprocess("-m", "specdec", "--server-profile=watched,eagle3", "-v", timeout=900)
    assert result.ret == pytest.ExitCode.OK, result.stdout.str()
    result.assert_outcomes(passed=4)
    result.stdout.fnmatch_lines(
        [
            "*test_accept[[]watched[]] PASSED*",
            "*test_server_info[[]watched[]] PASSED*",
            "*test_accept[[]eagle3[]] PASSED*",
        ]
    )
    result.stdout.fnmatch_lines(
        [
            "*= specdec summary =*",
            "test * profile * tok/s * accept_len * accept_rate * TTFT p50 ms * ITL p50 ms *",
            # No speculation, so no accept length or rate: n/a, and min_accept_length does not apply.
            # passed, or undecided where a loaded runner left a verdict open ("[pu][an]*": not failed)
            "test_accept[[]watched[]] * watched * n/a * n/a * [pu][an]*",
            "test_accept[[]eagle3[]] * eagle3 * [pu][an]*",
            "accept_len = 1 + accepted drafts / verify steps (prefill token excluded); "
            "accept_rate = (accept_len - 1) / num_steps",
            "accept_len in the engine's own definition: eagle3 * (Σcompletion_tokens / Σspec_verify_ct)",
            "prefix cache before each measured phase: reset: POST /flush_cache (watched, eagle3)",
            "*- specdec results: *.json -*",
        ]
    )
    result.stdout.fnmatch_lines(
        [
            "*LoadWarning: profile watched: client overloaded: event-loop lag p99 * ms > 0% of ITL p50 * ms "
            "(client CPU * cores, 2 worker processes); TTFT and ITL include the client's own delay; fix: raise "
            "workload.client_workers or lower workload.concurrency",
        ]
    )
    assert not _our_servers(project)
    # Issue 7: the counter-delta accept length ((generation_tokens - num_requests) / spec_verify_calls) agrees
    # with the per-request one within 2%; issue 12.4: so does the scheduler's own avg_spec_accept_length (read
    # after the /flush_cache, an independent source) within 5%.
    (run_file,) = (project.path / ".specdec" / "results").glob("*.json")
    data = json.loads(run_file.read_text())
    assert data["metric_definitions"]["accept_length"].startswith("1 + accepted draft tokens / verify steps")
    (watched,) = [r["repeats"] for r in data["results"] if r["test_id"].endswith("test_accept[watched]")]
    assert watched["client_workers"] == [2, 2, 2]
    assert all(lag is not None and lag >= 0 for lag in watched["client_lag_ms_p99"])
    (repeats,) = [r["repeats"] for r in data["results"] if r["test_id"].endswith("test_accept[eagle3]")]
    assert repeats["cache_reset"] == ["reset: POST /flush_cache"] * 3
    for client, server in zip(repeats["accept_length"], repeats["server_accept_length"], strict=True):
        assert server == pytest.approx(client, rel=0.02)
    # The reference engine launches with --decode-log-interval 1, so the scheduler's figure covers the whole phase.
    for client, scheduler in zip(repeats["accept_length"], repeats["scheduler_accept_length"], strict=True):
        assert scheduler == pytest.approx(client, rel=1e-9)
    assert all(isinstance(native, float) for native in repeats["accept_length_native"])


@pytest.mark.slow
def test_server_url_must_be_http_and_a_dead_url_fails_fast(project: pytest.Pytester) -> None:
    result = project.runpytest_subprocess("--server-profile=eagle3", "--server-url=notaurl")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(["ERROR: --server-url=notaurl: expected http://HOST:PORT, e.g. *"])
    from pytest_specdec.serve.ports import find_free_port

    dead = f"http://127.0.0.1:{find_free_port('127.0.0.1')}"
    # The grace a dead URL gets is 10 s; 1 s here tells the same story without waiting it out.
    project.makeconftest("import pytest_specdec.serve.startup\npytest_specdec.serve.startup.REFUSED_GRACE_S = 1.0\n")
    result = project.runpytest_subprocess("--server-profile=eagle3", f"--server-url={dead}", timeout=120)
    result.assert_outcomes(errors=2)
    result.stdout.fnmatch_lines(["*cannot connect for 1 s (ConnectError: *is the server running and is the URL*"])


def test_a_url_whose_health_is_no_route_fails_fast_naming_the_status(
    inner: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A wrong port that lands on another web service (a fresh-user trial: /health answered 404 and pytest waited out
    the 900 s startup budget in silence): after the grace, an error that names the status and the server software."""
    import http.server
    import threading

    class NotFound(http.server.BaseHTTPRequestHandler):
        server_version = "keryx"

        def do_GET(self) -> None:  # noqa: N802 (http.server's name)
            self.send_error(404)

        def do_POST(self) -> None:  # noqa: N802
            self.send_error(404)

        def log_message(self, *args: object) -> None:
            pass

    httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), NotFound)
    # shutdown() waits for serve_forever to look at its flag, every poll_interval (0.5 s by default) at most.
    threading.Thread(target=httpd.serve_forever, kwargs={"poll_interval": 0.02}, daemon=True).start()
    # In process, the inner run reads this module object: the outer test sets (and restores) its grace.
    from pytest_specdec.serve import startup

    monkeypatch.setattr(startup, "REFUSED_GRACE_S", 1.0)
    try:
        url = f"http://127.0.0.1:{httpd.server_address[1]}"
        result = run_in_process(inner, "--server-profile=eagle3", f"--server-url={url}")
    finally:
        httpd.shutdown()
        httpd.server_close()
    result.assert_outcomes(errors=2)
    result.stdout.fnmatch_lines(["*GET /health answered 404 Not Found for 1 s (Server: keryx*): no health route there, "
                                 "so not an SGLang or vLLM server *; is the URL's port right?*"])  # fmt: skip


def test_missing_prompt_file_and_api_key_env_stop_before_launch(pytester: pytest.Pytester) -> None:
    pytester.makefile(
        ".yaml",
        specdec="profiles:\n  p:\n    server: reference\n    api_key_env: SPECDEC_TEST_NO_SUCH_KEY\n"
        "    workload: {prompts: ./missing.jsonl}\n",
    )
    pytester.makepyfile(test_x="def test_x(specdec_run): pass\n")
    result = run_in_process(pytester, "--server-profile=p")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(
        [
            "ERROR: specdec preflight failed (nothing was launched):",
            "error: *specdec.yaml:5: profiles.p.workload.prompts: prompt file not found: *missing.jsonl; fix: *",
            "error: *specdec.yaml:4: profiles.p.api_key_env: environment variable SPECDEC_TEST_NO_SUCH_KEY is not "
            "set; *",
        ]
    )


def _hang(project: pytest.Pytester) -> tuple[subprocess.Popen[bytes], dict]:
    """A pytest holding the baseline server (its test sleeps), and the server's record once it is launched."""
    project.makepyfile(test_hang="import time\n\ndef test_hang(specdec_server):\n    time.sleep(600)\n")
    proc = subprocess.Popen(
        [sys.executable, "-m", "pytest", "test_hang.py", "--server-profile=baseline", "-p", "no:cacheprovider"],
        cwd=project.path,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    records = project.path / ".specdec" / "servers"
    deadline = time.monotonic() + 180
    while not list(records.glob("*.json")) and time.monotonic() < deadline:
        time.sleep(0.2)
    (record,) = records.glob("*.json")
    entry = json.loads(record.read_text())
    assert _our_servers(project), "the server did not start"
    return proc, entry


def _port(entry: dict) -> int:
    return int(entry["base_url"].rsplit(":", 1)[1])


@pytest.mark.slow
def test_server_dies_within_seconds_of_its_sigkilled_pytest(project: pytest.Pytester) -> None:
    """Issue 16.1: SIGKILL runs no teardown; the server's supervisor stops it (seconds: bench_lifecycle.py)."""
    proc, entry = _hang(project)
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    deadline = time.monotonic() + 10
    while (psutil.pid_exists(entry["pid"]) or _our_servers(project)) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not _our_servers(project)
    assert not psutil.pid_exists(entry["pid"])  # stopped and reaped
    assert port_is_free("127.0.0.1", _port(entry))
    result = project.runpytest_subprocess("--server-profile=eagle3", "--collect-only", timeout=120)
    assert "outlived its pytest" not in result.stdout.str()  # nothing left for the next run to reap


@pytest.mark.slow
def test_reap_stops_only_servers_whose_pytest_is_gone(project: pytest.Pytester) -> None:
    """Issue 16.2: ``python -m pytest_specdec reap``; a server whose pytest is alive is in use and left alone."""
    proc, entry = _hang(project)
    reap = [sys.executable, "-m", "pytest_specdec", "reap", "--specdec-dir", ".specdec"]
    try:
        busy = subprocess.run(reap, cwd=project.path, capture_output=True, text=True, timeout=120)
        assert busy.stdout.splitlines() == ["reap: 0 server(s) stopped (.specdec/servers)"], busy
        assert _our_servers(project)
        # Now the worst case: the supervisor dies too (SIGKILL both), so nothing stops the server but reap.
        os.kill(entry["supervisor"][0], signal.SIGKILL)
    finally:
        proc.send_signal(signal.SIGKILL)
        proc.wait()
    time.sleep(0.5)
    assert _our_servers(project)
    done = subprocess.run(reap, cwd=project.path, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done
    first, last = done.stdout.splitlines()
    # Its parent (the supervisor) is gone, so its zombie goes to PID 1, which in some containers never reaps.
    assert re.fullmatch(
        rf"server 'baseline' \(pid {entry['pid']}, {entry['base_url']}\) outlived its pytest \(pid {proc.pid}\): "
        rf"stopped(; pid {entry['pid']} left as a zombie \(already dead, holding no memory, GPU or port: only its "
        r"exit status remains, for its parent to collect\))?",
        first,
    ), first
    assert last == "reap: 1 server(s) stopped (.specdec/servers)"
    assert not _our_servers(project)
    assert port_is_free("127.0.0.1", _port(entry))
    assert not list((project.path / ".specdec" / "servers").glob("*.json"))


class _ServerSampler:
    """Samples, every 50 ms, the reference servers carrying this test's tag: pids per profile, most alive at once."""

    def __init__(self, pytester: pytest.Pytester) -> None:
        import threading

        self.tag = _tag(pytester)
        self.pids: dict[str, set[int]] = {}
        self.max_alive = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        while not self._stop.wait(0.05):
            alive = 0
            for proc in psutil.process_iter():
                try:
                    env = proc.environ()
                    if env.get("SPECDEC_TEST_TAG") == self.tag and "pytest_specdec.refserver" in proc.cmdline():
                        self.pids.setdefault(env.get("SPECDEC_TEST_PROFILE", "?"), set()).add(proc.pid)
                        alive += 1
                except (psutil.NoSuchProcess, psutil.AccessDenied, psutil.ZombieProcess):
                    continue
            self.max_alive = max(self.max_alive, alive)

    def __enter__(self) -> _ServerSampler:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()


@pytest.mark.slow
def test_xdist_schedule_one_launch_per_profile_one_server_at_a_time(project: pytest.Pytester) -> None:
    """Issue 16.3: under -n 4, the tests of 3 profiles are grouped so that each server starts once and never two run
    at once, while the other tests spread over the other workers."""
    spec = "speculative: {algorithm: EAGLE3, num_steps: 3, eagle_topk: 1, num_draft_tokens: 4}"
    profiles = "profiles:\n" + "".join(
        f"  {name}:\n    server: reference\n"
        f"    env: {{SPECDEC_TEST_TAG: {_tag(project)!r}, SPECDEC_TEST_PROFILE: {name}}}\n"
        f"    workload: {{max_new_tokens: 16, num_requests: 2, repeats: 1, warmup_requests: 0}}\n    {extra}\n"
        for name, extra in [
            ("baseline", ""),
            ("eagle3", spec),
            ("eagle3-wrong-layers", spec[:-1] + ", aux_hidden_state_layer_ids: [0, 1, 2]}"),
        ]
    )
    project.makefile(".yaml", specdec=profiles)
    project.makepyfile(
        test_specdec="""
        import pytest

        @pytest.mark.specdec(min_accept_length=1.0)
        def test_accept(specdec_run):
            assert specdec_run.metrics.num_ok == 2

        def test_server_info(specdec_server):
            assert specdec_server.base_url.startswith("http://127.0.0.1:")

        def test_run_again(specdec_run):
            assert specdec_run.metrics.num_ok == 2
        """,
        test_other="""
        import time, pytest

        @pytest.mark.parametrize("i", range(8))
        def test_other(i):
            time.sleep(0.3)
        """,
    )
    with _ServerSampler(project) as sampler:
        result = project.runpytest_subprocess(
            "-n", "4", "-p", "xdist", "--server-profile=baseline,eagle3,eagle3-wrong-layers", timeout=900
        )
    assert result.ret == pytest.ExitCode.OK, result.stdout.str()
    result.assert_outcomes(passed=17)
    assert {name: len(pids) for name, pids in sampler.pids.items()} == {
        "baseline": 1,
        "eagle3": 1,
        "eagle3-wrong-layers": 1,
    }
    assert sampler.max_alive == 1
    assert not _our_servers(project)


@pytest.mark.slow
def test_slower_verify_shows_as_a_higher_cycle_cost_with_the_same_accept_length(
    project: pytest.Pytester, reference_url: Callable[[str], str]
) -> None:
    """A lost-NCCL-env style slowdown: only the verify forward of the speculative server gets slower. One launch (the
    slowed server; it was four): the fast arm and both paired baselines are the session's shared servers
    (``conftest.reference_url``), which the bundled server without the fault is."""
    extra = (
        f"  shared-baseline:\n    extends: baseline\n    url: {reference_url('')}\n"
        f"  eagle3-paired:\n    extends: eagle3\n    url: {reference_url(SHARED_EAGLE3)}\n"
        "    thresholds: {min_speedup: {vs: shared-baseline, ratio: 0.01}}\n"
        "  eagle3-slow-verify:\n    extends: eagle3\n"
        "    thresholds: {min_speedup: {vs: shared-baseline, ratio: 0.01}}\n"
        '    extra_args: ["--ref-fault-verify-delay-ms", "30"]\n'
    )
    assert SHARED_EAGLE3 in PROFILES  # the shared server runs the eagle3 profile's speculative block
    # Half the requests and two thirds of the tokens of the other tests (both arms: the baseline's workload too): the
    # 30 ms verify delay is several plain decode steps, so ~20 cycles a phase still separate the two cycle costs by far
    # more than the 1.2x asked (1.2 vs 4.2 plain steps measured at load 5); the 3 pairs stay.
    short = "workload: {max_new_tokens: 16, num_requests: 3, warmup_requests: 1}"
    profiles = PROFILES.replace("workload: {max_new_tokens: 24, num_requests: 6, warmup_requests: 1}", short)
    assert short in profiles
    project.makefile(".yaml", specdec=profiles.replace("@TAG@", _tag(project)) + extra)
    project.makepyfile(test_specdec="def test_run(specdec_run):\n    pass\n")
    result = project.runpytest_subprocess("--server-profile=eagle3-paired,eagle3-slow-verify", timeout=900)
    assert result.ret == pytest.ExitCode.OK, result.stdout.str()
    out = result.stdout.str()
    pattern = (
        r"specdec (\S+): a speculative cycle costs ([\d.]+) plain decode steps \(accept_len ([\d.]+) / the paired "
        r"speedup over shared-baseline, \d+ pairs at concurrency 1\); speculation pays while the accept length "
        r"exceeds [\d.]+ \[server: draft ([\d.]+) ms \+ verify ([\d.]+) ms per cycle\]"
    )
    found = {m[0]: tuple(float(x) for x in m[1:]) for m in re.findall(pattern, out)}
    assert set(found) == {"eagle3-paired", "eagle3-slow-verify"}, out
    fast, slow = found["eagle3-paired"], found["eagle3-slow-verify"]
    assert fast[1] == slow[1]  # same accept length (temperature 0, same draft)
    # The cycle costs more plain decode steps: 1.2 vs 4.2 at load 5, but only x1.13 (2.40 vs 2.72) in a clean-clone CI
    # at load ~8, where a burst slowed the slow arm's paired baseline by 38% over its 3 pairs. The server's own verify
    # span (next) is what separates them whatever the load; the derived cost keeps only its direction.
    assert slow[0] > fast[0], out
    assert slow[3] - fast[3] > 15.0, out  # the verify took the delay (30 ms; the machine's load moves the rest)
    assert not _our_servers(project)
