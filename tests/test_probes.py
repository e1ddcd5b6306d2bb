"""``python -m pytest_specdec bisect`` (``probes.py`` + ``__main__``): its inputs from profiles or stored runs, its
usage errors, and, on the reference server, the incident's two causes named among harmless differences."""

from __future__ import annotations

import argparse
import re
from pathlib import Path

import pytest

from pytest_specdec.cli.bisect import _bisect_inputs
from pytest_specdec.cli.main import main
from pytest_specdec.engines.rules import load_profiles
from pytest_specdec.measure.results import ResultRecord, ResultStore, RunFile, profile_definition

#: good: the bundled EAGLE-3 draft on its trained ids; bad: the incident (aux id -1 served through the patched
#: capture, plus the slow-forward knob standing in for lost NCCL tuning) mixed with three harmless differences.
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
    speculative: {aux_hidden_state_layer_ids: [-1, 1, 3], allow_embedding_capture: true}
    extra_args: ["--ref-embedding-capture", "patched", "--log-level", "warning", "--served-model-name", "demo"]
    env: {SPECDEC_REF_FORWARD_DELAY_MS: "60", HF_HUB_OFFLINE: "1"}
"""


def _args(**kw: object) -> argparse.Namespace:
    base = {"profile_file": None, "good": "good", "bad": "bad", "test": None, "good_test": None,
            "results_dir": ".specdec/results", "profiles_dir": "."}  # fmt: skip
    return argparse.Namespace(**{**base, **kw})


def test_inputs_from_two_profiles(tmp_path: Path) -> None:
    (tmp_path / "specdec.yaml").write_text(INCIDENT)
    good, bad, name, source, fixed, tolerances = _bisect_inputs(_args(profile_file=str(tmp_path / "specdec.yaml")))
    assert (name, source, fixed, tolerances) == ("good", str(tmp_path / "specdec.yaml"), [], ["output_tok_s:8%"])
    assert bad["env"] == {"SPECDEC_REF_FORWARD_DELAY_MS": "60", "HF_HUB_OFFLINE": "1"} and good["env"] == {}


def test_inputs_from_two_stored_runs_restore_paths_and_list_what_no_profile_applies(tmp_path: Path) -> None:
    (tmp_path / "specdec.yaml").write_text(INCIDENT)
    profiles = load_profiles(tmp_path / "specdec.yaml")
    runs = []
    for run_id, name, torch in (("r-good", "good", "2.13.0"), ("r-bad", "bad", "2.14.1")):
        fp = {"profile_def": profile_definition(profiles.get(name)), "packages": {"torch": torch}, "env": {}}
        record = ResultRecord("t.py::test_x[eagle3]", name, {}, {}, fp)
        runs.append(RunFile(run_id, 0.0, results=(record,)))
        ResultStore(tmp_path / "results").save(runs[-1])
    good, bad, name, _, fixed, _ = _bisect_inputs(_args(results_dir=str(tmp_path / "results"),
                                                        good="r-good", bad="r-bad", profiles_dir=str(tmp_path)))
    assert name == "good" and [f.line() for f in fixed] == ["package torch: 2.13.0 -> 2.14.1"]
    # Bundled assets recorded as <pytest_specdec>/... are paths of this installation again.
    draft = good["speculative"]["draft_model_path"]
    assert "<" not in draft and Path(draft, "config.json").is_file()
    assert bad["speculative"]["aux_hidden_state_layer_ids"] == [-1, 1, 3]


def test_bisect_usage_errors(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    (tmp_path / "specdec.yaml").write_text(INCIDENT)
    assert main(["bisect", str(tmp_path / "specdec.yaml"), "--good", "good", "--bad", "bda"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("ERROR: --server-profile=bda: no such profile in ") and "(available: bad, good)" in err
    assert main(["bisect", "--good", "nope", "--bad", "bad", "--results-dir", str(tmp_path / "none")]) == 2
    assert capsys.readouterr().err.startswith("ERROR: no run 'nope'")
    assert main(["bisect", str(tmp_path / "specdec.yaml"), "--good", "good", "--bad", "good"]) == 1
    assert capsys.readouterr().out == "bisect: good and good have no difference a profile can apply\n"


@pytest.mark.slow
def test_bisect_names_the_two_causes_of_the_incident_on_the_reference_server(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    (tmp_path / "specdec.yaml").write_text(INCIDENT)
    rc = main(["bisect", str(tmp_path / "specdec.yaml"), "--good", "good", "--bad", "bad",
               "--log-dir", str(tmp_path / "logs")])  # fmt: skip
    out = capsys.readouterr().out
    report = out[out.index("\nbisect: ") + 1 :].splitlines()
    assert rc == 0, out
    head = re.fullmatch(r"bisect: 2 causes \(3 of 7 differences\) in (\d+) launches, (\d+) server-s, [\d.]+ min",
                        report[0])  # fmt: skip
    assert head is not None, out
    assert int(head.group(1)) <= 24  # good, bad, ddmin's probes, the causes alone
    assert report[1].startswith("symptoms: accept_length ") and report[1].endswith(": slower")
    causes = "\n".join(report[2:])
    cause1 = causes[: causes.index("cause 2: ")]
    assert re.match(r"cause 1: accept_length [\d.]+ -> [\d.]+ \(exact\)", cause1)
    assert "  extra_args --ref-embedding-capture: (absent) -> patched" in cause1
    assert "  speculative.aux_hidden_state_layer_ids: (absent) -> [-1, 1, 3]" in cause1
    cause2 = causes[causes.index("cause 2: ") :]
    assert cause2.startswith("cause 2: accept_length = good; accept_rate = good; tok/s x0.")
    assert "  env SPECDEC_REF_FORWARD_DELAY_MS: (unset) -> 60" in cause2
    assert "cause 3" not in causes
    assert (
        "harmless: env HF_HUB_OFFLINE: (unset) -> 1; extra_args --log-level: (absent) -> warning; "
        "extra_args --served-model-name: (absent) -> demo; speculative.allow_embedding_capture: false -> true"
    ) in report
    # Every server was stopped: nothing left for reap.
    assert not list((tmp_path / "servers").glob("*.json"))
