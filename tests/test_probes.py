"""``python -m pytest_specdec bisect`` (``probes.py`` + ``__main__``): its inputs from profiles or stored runs, its
usage errors, and, on the reference server, the incident's exact cause named among harmless differences in 3
launches, and a SIGTERM that leaves a report and no server; ``hold`` (the tok/s search on top of cause 1) on stand-in
servers. The search itself, the incident's two causes included, is tested on hand-made probe outcomes in
``tests/test_bisection.py``."""

from __future__ import annotations

import argparse
import re
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from pytest_specdec.cli.bisect import _bisect_inputs
from pytest_specdec.cli.main import main
from pytest_specdec.engines.rules import load_profiles
from pytest_specdec.measure.results import ResultRecord, ResultStore, RunFile, profile_definition
from tests.helpers import dies_with_this_process

#: good: the bundled EAGLE-3 draft on its trained ids; bad: the incident (aux ids that are not the trained ones,
#: plus the slow-forward knob standing in for lost NCCL tuning) mixed with three harmless differences. The slowdown
#: is relative (every target forward takes 3x its compute time: x0.40 quiet), not a fixed sleep: the bisect judges a
#: probe against the midpoint of a level measured earlier, and a busy CPU stretches the compute but not a
#: sleep: at load 7-8 a 15 ms delay (x0.46 quiet) made x0.625, and a probe holding it measured x0.690 against the
#: midpoint x0.732 of the level before it, undecided after 24 pairs: 1 cause named instead of 2 (issue 45). A factor
#: keeps its size at any load (tests/refserver/test_decoding.py).
INCIDENT = """\
profiles:
  good:
    server: reference
    startup_timeout_s: 300
    workload: {max_new_tokens: 16, num_requests: 3, warmup_requests: 1, temperature: 0.0}
    speculative: {algorithm: EAGLE3, num_steps: 3, eagle_topk: 1, num_draft_tokens: 4}
    tolerances: ["output_tok_s:8%"]
  bad:
    extends: good
    speculative: {aux_hidden_state_layer_ids: [0, 1, 2]}
    extra_args: ["--log-level", "warning", "--served-model-name", "demo"]
    env: {SPECDEC_REF_FORWARD_SLOWDOWN: "3", HF_HUB_OFFLINE: "1"}
"""


def _args(**kw: object) -> argparse.Namespace:
    base = {"profile_file": None, "good": "good", "bad": "bad", "test": None, "good_test": None,
            "results_dir": ".specdec/results", "profiles_dir": "."}  # fmt: skip
    return argparse.Namespace(**{**base, **kw})


def test_inputs_from_two_profiles(tmp_path: Path) -> None:
    (tmp_path / "specdec.yaml").write_text(INCIDENT)
    good, bad, name, source, fixed, tolerances = _bisect_inputs(_args(profile_file=str(tmp_path / "specdec.yaml")))
    assert (name, source, fixed, tolerances) == ("good", str(tmp_path / "specdec.yaml"), [], ["output_tok_s:8%"])
    assert bad["env"] == {"SPECDEC_REF_FORWARD_SLOWDOWN": "3", "HF_HUB_OFFLINE": "1"} and good["env"] == {}


def test_inputs_from_two_stored_runs_restore_paths_and_list_what_no_profile_applies(tmp_path: Path) -> None:
    (tmp_path / "specdec.yaml").write_text(INCIDENT)
    profiles = load_profiles(tmp_path / "specdec.yaml")
    runs = []
    for run_id, name, torch in (("r-good", "good", "2.13.0"), ("r-bad", "bad", "2.14.1")):
        fp = {"profile_def": profile_definition(profiles.get(name)), "packages": {"torch": torch}, "env": {}}
        record = ResultRecord("t.py::test_x[eagle3]", name, {}, {}, fp)
        runs.append(RunFile(run_id, 0.0, results=(record,)))
        ResultStore(tmp_path / "results").save(runs[-1])
    good, bad, name, _, fixed, _ = _bisect_inputs(
        _args(results_dir=str(tmp_path / "results"), good="r-good", bad="r-bad", profiles_dir=str(tmp_path))
    )
    assert name == "good" and [f.line() for f in fixed] == ["package torch: 2.13.0 -> 2.14.1"]
    # Bundled assets recorded as <pytest_specdec>/... are paths of this installation again.
    draft = good["speculative"]["draft_model_path"]
    assert "<" not in draft and Path(draft, "config.json").is_file()
    assert bad["speculative"]["aux_hidden_state_layer_ids"] == [0, 1, 2]


def test_bisect_usage_errors(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    (tmp_path / "specdec.yaml").write_text(INCIDENT)
    assert main(["bisect", str(tmp_path / "specdec.yaml"), "--good", "good", "--bad", "bda"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: --bad=bda: no such profile in ") and "(available: bad, good)" in err
    assert main(["bisect", "--good", "nope", "--bad", "bad", "--results-dir", str(tmp_path / "none")]) == 2
    assert capsys.readouterr().err.startswith("error: no run 'nope'")
    assert main(["bisect", str(tmp_path / "specdec.yaml"), "--good", "good", "--bad", "good"]) == 1
    assert capsys.readouterr().out == "bisect: good and good have no difference a profile can apply\n"


def test_runs_of_different_test_ids_name_the_good_test_option(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """The good run holds its test under another profile's id: the error names --good-test (the option that
    applies), with the good run's only test as the example; a wrong --good-test is named as such."""
    (tmp_path / "specdec.yaml").write_text(INCIDENT)
    profiles = load_profiles(tmp_path / "specdec.yaml")
    for run_id, name in (("r-good", "good"), ("r-bad", "bad")):
        record = ResultRecord(f"t.py::test_x[{name}]", name, {}, {}, {"profile_def": profile_definition(
            profiles.get(name))})  # fmt: skip
        ResultStore(tmp_path / "results").save(RunFile(run_id, 0.0, results=(record,)))
    args = ["bisect", "--good", "r-good", "--bad", "r-bad", "--results-dir", str(tmp_path / "results")]
    assert main(args) == 2
    assert capsys.readouterr().err == (
        "error: no test t.py::test_x[bad] in good run r-good (tests: t.py::test_x[good]); --test names the bad run's "
        "test: when the good run's has another id, add --good-test 't.py::test_x[good]'\n"
    )
    assert main([*args, "--good-test", "t.py::test_x[goood]"]) == 2
    assert capsys.readouterr().err == (
        "error: --good-test=t.py::test_x[goood]: no such test in good run r-good (tests: t.py::test_x[good])\n"
    )
    good, bad, name, *_ = _bisect_inputs(_args(results_dir=str(tmp_path / "results"), good="r-good", bad="r-bad",
                                               good_test="t.py::test_x[good]", profiles_dir=str(tmp_path)))  # fmt: skip
    assert name == "good" and bad["speculative"]["aux_hidden_state_layer_ids"] == [0, 1, 2]


def test_one_difference_is_singular_and_no_launch_stops_at_once(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    one = INCIDENT.split("  bad:")[0] + '  bad:\n    extends: good\n    env: {SPECDEC_REF_FORWARD_DELAY_MS: "60"}\n'
    (tmp_path / "specdec.yaml").write_text(one)
    rc = main(["bisect", str(tmp_path / "specdec.yaml"), "--good", "good", "--bad", "bad", "--max-launches", "0",
               "--log-dir", str(tmp_path / "logs")])  # fmt: skip
    out = capsys.readouterr().out.splitlines()
    assert rc == 3
    assert out[:2] == ["bisect: 1 difference between good (good) and bad (bad):",
                       "  env SPECDEC_REF_FORWARD_DELAY_MS: (unset) -> 60"]  # fmt: skip
    assert out[2].startswith("bisect stopped (--max-launches 0 spent) after 0 launches, ")


def test_the_estimate_counts_server_starts_and_the_paired_phases(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """A fresh-user trial read "2-2 launches ... ~1.4 min" (GOOD's start and 2 phases, times 2) for a bisect that
    took 5.5 min: BAD's paired tok/s phases, up to --max-pairs of them, were in no figure. GOOD here: 25 s to start,
    then 2 phases of 8 s (41 s in all)."""
    from pytest_specdec import bisection
    from pytest_specdec.cli import bisect as cli_bisect
    from pytest_specdec.core import clock
    from pytest_specdec.core.errors import SpecdecError

    now = [1000.0]
    monkeypatch.setattr(clock, "now", lambda: now[0])

    class GoodMeasured:
        def __init__(self, *args: object, **kwargs: object) -> None:
            self.launches, self.server_s, self.start_s, self.phase_s = 0, 0.0, None, None

        def close(self) -> None:
            pass

    def bisect(good: object, diffs: object, prober: GoodMeasured, **kwargs: object) -> None:
        prober.launches, prober.start_s, prober.phase_s = 1, 25.0, 8.0
        now[0] += 41.0
        on_estimate = kwargs["on_estimate"]
        assert callable(on_estimate)
        on_estimate(2, 2, "if each symptom has one cause (before the symptoms are known)")
        raise SpecdecError("stopped here by the test")

    monkeypatch.setattr(cli_bisect, "Prober", GoodMeasured)
    monkeypatch.setattr(bisection, "bisect", bisect)
    one = INCIDENT.split("  bad:")[0] + '  bad:\n    extends: good\n    env: {SPECDEC_REF_FORWARD_DELAY_MS: "60"}\n'
    (tmp_path / "specdec.yaml").write_text(one)
    assert main(["bisect", str(tmp_path / "specdec.yaml"), "--good", "good", "--bad", "bad"]) == 1
    estimate = [line for line in capsys.readouterr().out.splitlines() if line.startswith("estimate:")]
    # 41 s + BAD (25 s start, 2 phases) + 3..24 pairs of two 8 s phases: 130..466 s.
    assert estimate == [
        "estimate: 2 launches if each symptom has one cause (before the symptoms are known): ~2.2-7.8 min from the "
        "start at the pace so far (25 s to start GOOD, 8 s a phase; BAD's tok/s: 3-24 pairs of ~16 s); each probe "
        "measured for tok/s adds 3-24 pairs (~0.8-6.4 min)"
    ]


#: The real servers' instance: the incident's exact cause among its harmless differences, without the tok/s one (a
#: tok/s search on top of cause 1 is a 4th launch and ~8 pairs more, each arm of them 3x slower: issue 45). The
#: search on both sides of cause 1 runs on hand-made probe outcomes (tests/test_bisection.py), ``hold`` on stand-in
#: servers (below). Aux ids leave tok/s within a few % on the CPU (x1.06); the 80% tolerance passes BAD's tok/s at
#: the first look even beside a busy runner's bursts (x1.24, CI 0.69-2.2 at load 8), and only a passed tok/s
#: verdict calls the rest harmless.
EXACT_INCIDENT = INCIDENT.replace('SPECDEC_REF_FORWARD_SLOWDOWN: "3", ', "").replace(
    "output_tok_s:8%", "output_tok_s:80%"
)


@pytest.mark.slow
def test_bisect_names_the_exact_cause_among_harmless_differences_on_the_reference_server(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    (tmp_path / "specdec.yaml").write_text(EXACT_INCIDENT)
    rc = main(["bisect", str(tmp_path / "specdec.yaml"), "--good", "good", "--bad", "bad",
               "--log-dir", str(tmp_path / "logs")])  # fmt: skip
    out = capsys.readouterr().out
    report = out[out.index("\nbisect: ") + 1 :].splitlines()
    assert rc == 0, out
    # A progress line per launch, the estimate once GOOD was measured.
    assert re.search(r"^launch 1: good: ready in \d+ s \([\d.]+ min so far\)$", out, re.M), out
    assert re.search(r"^estimate: 4-10 launches if each symptom has one cause \(before the symptoms are known\): "
                     r"~[\d.]+-[\d.]+ min from the start at the pace so far \(\d+ s to start GOOD, \d+ s a phase; "
                     r"BAD's tok/s: 3-24 pairs of ~\d+ s\); each probe measured for tok/s adds 3-24 pairs", out,
                     re.M), out  # fmt: skip
    # The aux ids probed alone first: one measured phase decides. Good, bad, 1 probe.
    assert re.search(r"^probe speculative.aux_hidden_state_layer_ids: reproduces \[exact: accept_length [\d.]+ = bad; "
                     r"accept_rate [\d.]+ = bad\] \(3 launches\)$", out, re.M), out  # fmt: skip
    assert re.fullmatch(r"bisect: 1 cause \(1 of 4 differences\) in 3 launches, \d+ server-s, [\d.]+ min", report[0]), (
        out
    )
    assert report[1].startswith("symptoms: accept_length ") and report[1].endswith("within 80% (passed)"), out
    assert re.fullmatch(r"cause 1 \(exact symptom\): accept_length [\d.]+ -> [\d.]+ \(exact\); accept_rate [\d.]+ -> "
                        r"[\d.]+ \(exact\)", report[2]), out  # fmt: skip
    assert report[3] == "  speculative.aux_hidden_state_layer_ids: (absent) -> [0, 1, 2]"
    assert report[4:] == [
        "harmless: env HF_HUB_OFFLINE: (unset) -> 1; extra_args --log-level: (absent) -> warning; "
        "extra_args --served-model-name: (absent) -> demo"
    ]
    # Every server was stopped: nothing left for reap.
    assert not list((tmp_path / "servers").glob("*.json"))


@pytest.mark.slow
def test_sigterm_stops_the_bisect_with_a_report_and_no_server_left(tmp_path: Path) -> None:
    (tmp_path / "specdec.yaml").write_text(EXACT_INCIDENT)
    command = [sys.executable, "-m", "pytest_specdec", "bisect", str(tmp_path / "specdec.yaml"), "--good", "good",
               "--bad", "bad", "--log-dir", str(tmp_path / "logs")]  # fmt: skip
    proc = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, cwd=tmp_path,
                            preexec_fn=dies_with_this_process())  # fmt: skip
    assert proc.stdout is not None
    lines = []
    for line in proc.stdout:  # SIGTERM while GOOD is measured, before BAD starts
        lines.append(line.rstrip("\n"))
        if line.startswith("launch 1: good: ready"):
            proc.send_signal(signal.SIGTERM)
            break
    rest, _ = proc.communicate(timeout=120)
    lines += rest.splitlines()
    out = "\n".join(lines)
    assert proc.returncode == 3, out
    assert re.search(r"^bisect stopped \(SIGTERM\) after [12] launch", out, re.M), out
    assert "known so far: no cause yet" in out
    assert not list((tmp_path / "servers").glob("*.json")), out


def test_hold_keeps_the_probe_server_as_the_reference_arm_and_stops_the_one_before(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The tok/s search on top of cause 1 (``hold``), on stand-in servers: the probe server that serves the held
    configuration becomes the reference arm with no launch, GOOD's server stops; a later probe pairs against it; a
    held configuration not running is launched, and the probe and the old reference arm stop. The real servers run
    the exact symptom's search end to end (above); this path is the hand-made one's (tests/test_bisection.py)."""
    from pytest_specdec.bisection import apply, differences
    from pytest_specdec.bisection.probes import Prober
    from pytest_specdec.measure import runner
    from pytest_specdec.serve.startup import RunningServer

    events: list[str] = []

    class Handle:
        def __init__(self, name: str) -> None:
            self.name = name

        def stop(self) -> None:
            events.append(f"stop {self.name}")

    def start_server(profile: object, *, log_name: str, **kwargs: object) -> RunningServer:
        events.append(f"start {log_name}")
        return RunningServer(profile=profile, engine=None, base_url=f"http://{log_name}", api_key=None,  # type: ignore[arg-type]
                             process=Handle(log_name))  # type: ignore[arg-type]  # fmt: skip

    monkeypatch.setattr(runner, "start_server", start_server)
    (tmp_path / "specdec.yaml").write_text(INCIDENT)
    good, bad, name, source, _, _ = _bisect_inputs(_args(profile_file=str(tmp_path / "specdec.yaml")))
    by_key = {d.key: d for d in differences(good, bad)}
    aux = apply(good, [by_key["speculative.aux_hidden_state_layer_ids"]])
    slow = apply(aux, [by_key["env SPECDEC_REF_FORWARD_SLOWDOWN"]])
    offline = apply(aux, [by_key["env HF_HUB_OFFLINE"]])
    prober = Prober(good, name=name, source=source, log_dir=tmp_path / "logs", log_prefix="p")
    assert prober._server(aux, "cause 1").base_url == "http://p-02"  # GOOD first, then the probe
    prober.hold(aux, "cause 1")
    assert (prober.launches, prober.running()) == (2, None)
    assert prober._server(slow, "slow on cause 1").base_url == "http://p-03"
    assert prober._good_server().base_url == "http://p-02"  # the held probe server is the reference arm
    prober.hold(offline, "offline on cause 1")
    assert prober._good_server().base_url == "http://p-04"
    prober.close()
    assert events == ["start p-01", "start p-02", "stop p-01", "start p-03", "stop p-03", "start p-04", "stop p-02",
                      "stop p-04"]  # fmt: skip
