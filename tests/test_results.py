"""Tests of measure/results.py: records from measurements, fingerprints (secrets redacted), the JSON store."""

from __future__ import annotations

import dataclasses
import importlib.metadata
import json
import os
import sys
from pathlib import Path

import pytest

from pytest_specdec.core.errors import CompareError
from pytest_specdec.core.records import RequestRecord
from pytest_specdec.core.redaction import REDACTED
from pytest_specdec.engines.base import EffectiveConfig, LaunchSpec
from pytest_specdec.measure.results import (
    FINGERPRINT_PACKAGES,
    ResultRecord,
    ResultStore,
    RunFile,
    build_fingerprint,
    package_versions,
)
from pytest_specdec.measure.runner import Measurement, RunningServer
from pytest_specdec.profiles.schema import Profile, SpeculativeConfig, Workload
from tests.helpers import run_metrics

# start 0.0, events at 0.100 s (1 token), 0.130 s (3), 0.170 s (4), done 0.170 s: TTFT 100 ms, ITL 10 ms,
# TPOT (170 - 100) / 7 = 10 ms, e2e 170 ms (metrics.request_timing's worked example).
REQUEST = RequestRecord(
    ok=True,
    error=None,
    start_s=0.0,
    end_s=0.170,
    prompt_tokens=5,
    completion_tokens=8,
    chunk_times_s=(0.100, 0.130, 0.170),
    chunk_tokens=(1, 3, 4),
)
FAILED = RequestRecord(ok=False, error="boom", start_s=0.0, end_s=0.05, prompt_tokens=5, completion_tokens=0)


def measurement(
    tok_s: float, accept_length: float | None, records: tuple[RequestRecord, ...] = (REQUEST,)
) -> Measurement:
    return Measurement(
        profile="eagle3",
        metrics=run_metrics(output_tok_s=tok_s, accept_length=accept_length),
        records=records,
        prompt_hash="ab" * 32,
        counters_before=None,
        counters_after=None,
        cross_check=None,
        wall_time=1700000000.0,
    )


def test_record_from_measurements_medians_repeats_and_samples() -> None:
    ms = [measurement(100.0, 2.0), measurement(90.0, None, (REQUEST, FAILED)), measurement(95.0, 2.2)]
    record = ResultRecord.from_measurements("t.py::test_x[eagle3]", ms, {"prompt_hash": "ab" * 32})
    assert record.repeats["output_tok_s"] == [100.0, 90.0, 95.0]
    assert record.metrics["output_tok_s"] == 95.0
    assert record.metrics["accept_length"] == pytest.approx(2.1)  # None skipped
    assert record.values("accept_length") == [2.0, 2.2]
    assert record.profile == "eagle3"
    assert len(record.samples) == 4
    first = record.samples[0]
    assert (first.repeat, first.ok, first.completion_tokens) == (0, True, 8)
    assert (first.ttft_ms, first.itl_ms_mean, first.tpot_ms, first.e2e_ms) == pytest.approx((100.0, 10.0, 10.0, 170.0))
    assert (record.samples[2].repeat, record.samples[2].ok, record.samples[2].ttft_ms) == (1, False, None)


def test_medians_of_counts_are_one_integer_in_the_record_and_the_run() -> None:
    """Issue 14.8: num_ok 15 in one place and 15.5 in another; counts take the lower median everywhere."""
    from pytest_specdec.measure.runner import pooled_metrics

    ms = [measurement(100.0, 2.0), measurement(90.0, 2.5)]
    ms = [dataclasses.replace(m, metrics=dataclasses.replace(m.metrics, num_ok=n, output_tokens=n * 64))
          for m, n in zip(ms, (15, 16), strict=True)]  # fmt: skip
    record = ResultRecord.from_measurements("t", ms, {})
    run = pooled_metrics(ms)  # runner.RunResult.metrics: medians, and the tails over both repeats' requests
    assert (record.metrics["num_ok"], record.metrics["output_tokens"]) == (15, 960)
    assert (run.num_ok, run.output_tokens) == (15, 960)
    assert record.metrics == run.as_dict()
    assert (run.output_tok_s, run.accept_length) == (95.0, 2.25)


def test_counts_stay_integers_in_the_median_over_repeats() -> None:
    ms = [measurement(100.0, 2.0), measurement(90.0, 2.0), measurement(95.0, 2.2)]
    metrics = ResultRecord.from_measurements("t", ms, {}).metrics
    assert (metrics["num_requests"], metrics["output_tokens"]) == (1, 100)
    assert type(metrics["num_requests"]) is int and type(metrics["output_tokens"]) is int
    assert json.loads(json.dumps(metrics))["num_requests"] == 1  # stored as 1, not 1.0
    assert type(metrics["output_tok_s"]) is float


def test_single_repeat_metrics_are_run_metrics() -> None:
    record = ResultRecord.from_measurements("t", [measurement(100.0, 2.0)], {})
    expected = run_metrics(output_tok_s=100.0, accept_length=2.0).as_dict()
    got = {k: v for k, v in record.metrics.items() if k != "tails"}
    assert got == {k: v for k, v in expected.items() if k != "tails"}
    assert record.metrics["tails"]["ttft_ms_p90"]["n"] == 1  # the tail evidence of the repeat's one request


def test_record_json_round_trip_and_lenient_reading() -> None:
    record = ResultRecord.from_measurements("t", [measurement(100.0, 2.0)], {"workload": {"concurrency": 1}})
    data = json.loads(json.dumps(record.to_dict()))
    assert ResultRecord.from_dict(data) == record
    data["added_in_a_later_version"] = {"x": 1}
    data["samples"][0]["new_field"] = 3
    del data["outcome"]
    assert ResultRecord.from_dict(data) == record
    with pytest.raises(ValueError) as info:
        ResultRecord.from_dict({"profile": "p", "metrics": {}})
    assert str(info.value) == "result record: 'test_id' missing or not a str"


def test_package_versions_reads_metadata_in_a_subprocess() -> None:
    expected = {}
    for name in FINGERPRINT_PACKAGES:
        try:
            expected[name] = importlib.metadata.version(name)
        except importlib.metadata.PackageNotFoundError:
            pass
    assert package_versions(sys.executable, {"PATH": os.environ.get("PATH", "")}) == expected
    assert package_versions("/nonexistent/python") == {
        "error": "/nonexistent/python: [Errno 2] No such file or directory: '/nonexistent/python'"
    }


class FakeEngine:
    name = "sglang"
    native_accept_length = "Σcompletion_tokens / Σspec_verify_ct"

    def python(self, profile: Profile) -> str:
        return sys.executable


def test_build_fingerprint(tmp_path: Path) -> None:
    draft = tmp_path / "draft"
    draft.mkdir()
    (draft / "config.json").write_text(json.dumps({"eagle_config": {"eagle_aux_hidden_state_layer_ids": [1, 3, 5]}}))
    profile = Profile(
        name="eagle3",
        server="sglang",
        model_path="/models/llama",
        env={"NCCL_PROTO": "LL", "HF_TOKEN": "hf_secret", "OMP_NUM_THREADS": "1"},
        speculative=SpeculativeConfig(
            algorithm="EAGLE3", draft_model_path=str(draft), num_steps=3, eagle_topk=1, num_draft_tokens=4
        ),
        workload=Workload(max_new_tokens=32, num_requests=8, concurrency=2),
        api_key="sk-123",
    )
    launch = LaunchSpec(
        argv=("python", "-m", "sglang.launch_server", "--port", "30000", "--api-key", "sk-123"),
        env={
            "PATH": os.environ.get("PATH", ""),
            "HOME": "/root",
            "NCCL_PROTO": "LL",
            "HF_TOKEN": "hf_secret",
            "OMP_NUM_THREADS": "1",
            "CUDA_VISIBLE_DEVICES": "0",
            "SGLANG_ENABLE_SPEC_V2": "1",
        },
        host="127.0.0.1",
        port=30000,
        draft_path=draft,
    )
    server = RunningServer(
        profile=profile,
        engine=FakeEngine(),
        base_url=launch.base_url,
        api_key="sk-123",
        launch=launch,  # type: ignore[arg-type]
        effective=EffectiveConfig("0.5.23", "EAGLE3", 3, 1, 4, 48, raw={"huge": "x"}),
    )
    fp = build_fingerprint(server, "cd" * 32)
    assert fp["engine"] == "sglang"
    assert fp["argv"] == ["python", "-m", "sglang.launch_server", "--port", "30000", "--api-key", REDACTED]
    assert fp["env"] == {
        "CUDA_VISIBLE_DEVICES": "0",
        "HF_TOKEN": REDACTED,
        "NCCL_PROTO": "LL",
        "OMP_NUM_THREADS": "1",
        "SGLANG_ENABLE_SPEC_V2": "1",
    }
    assert fp["draft"]["aux_ids"] == [1, 3, 5]
    assert len(fp["draft"]["config_hash"]) == 16
    assert fp["effective"] == {
        "version": "0.5.23",
        "speculative_algorithm": "EAGLE3",
        "num_steps": 3,
        "eagle_topk": 1,
        "num_draft_tokens": 4,
        "max_running_requests": 48,
    }
    assert fp["prompt_hash"] == "cd" * 32
    assert (fp["workload"]["max_new_tokens"], fp["workload"]["concurrency"], fp["workload"]["num_requests"]) == (
        32,
        2,
        8,
    )
    assert "sk-123" not in json.dumps(fp) and "hf_secret" not in json.dumps(fp)
    assert "error" not in fp["packages"]
    assert fp["profile_def"]["env"]["HF_TOKEN"] == REDACTED  # what merge compares between shards
    assert fp["profile_def"]["workload"]["num_requests"] == 8


def test_a_server_given_by_url_is_fingerprinted_with_the_draft_it_reports(tmp_path: Path) -> None:
    # A fresh-user trial: a URL server restarted with another draft's aux ids read "fingerprint: same as baseline",
    # the profile's draft standing in for the server's. The draft is what /server_info reports, read from its path.
    from pytest_specdec.judge.fingerprint import fingerprint_diff

    def url_server(draft: Path) -> RunningServer:
        profile = Profile(name="eagle3", server="sglang", model_path="/models/llama",
                          speculative=SpeculativeConfig(algorithm="EAGLE3", draft_model_path="/profile/draft",
                                                        num_steps=3, eagle_topk=1, num_draft_tokens=4))  # fmt: skip
        raw = {"speculative_draft_model_path": str(draft)}
        effective = EffectiveConfig("0.5.23", "EAGLE3", 3, 1, 4, 48, raw=raw)
        return RunningServer(profile=profile, engine=FakeEngine(), base_url="http://127.0.0.1:30000", api_key=None,
                             launch=None, effective=effective)  # fmt: skip

    drafts = {}
    for name, ids in (("trained", [1, 3, 5]), ("shifted", [0, 1, 2])):
        drafts[name] = tmp_path / name
        drafts[name].mkdir()
        config = {"eagle_config": {"eagle_aux_hidden_state_layer_ids": ids}}
        (drafts[name] / "config.json").write_text(json.dumps(config))
    base, cur = (build_fingerprint(url_server(drafts[n]), "cd" * 32) for n in ("trained", "shifted"))
    assert base["draft"]["aux_ids"] == [1, 3, 5] and base["draft"]["path"] == str(drafts["trained"])
    assert fingerprint_diff(base, cur)[0] == "draft aux ids: [1, 3, 5] -> [0, 1, 2] (with its draft config hash)"
    # Against a launched run: one line for what a URL server cannot report, not a line per launch flag or package.
    launched = {**base, "argv": ["python", "-m", "sglang.launch_server", "--tp-size", "1", "--port", "30000"],
                "packages": {"torch": "2.13.0"}}  # fmt: skip
    launched.pop("url")
    diff = fingerprint_diff(launched, cur)
    assert diff[0] == ("server: launched -> given by URL (launch argv and packages not compared: a server given by "
                       "URL does not report them)")  # fmt: skip
    assert not any(line.startswith(("argv ", "torch")) for line in diff)
    assert "draft aux ids: [1, 3, 5] -> [0, 1, 2] (with its draft config hash)" in diff
    # The field as real SGLang 0.5.17 reports it (its /server_info, recorded on the H200 with CUDA graphs).
    recorded = Path(__file__).parent / "data" / "sglang" / "0.5.17-graphs" / "eagle3-graphs.server_info.json"
    raw = json.loads(recorded.read_text())
    server = url_server(drafts["trained"])
    server = dataclasses.replace(server, effective=dataclasses.replace(server.effective, raw=raw))
    assert build_fingerprint(server, "cd" * 32)["draft"]["path"] == raw["speculative_draft_model_path"]


def run_file(run_id: str, started: float, test_id: str = "t") -> RunFile:
    record = ResultRecord.from_measurements(test_id, [measurement(100.0, 2.0)], {"prompt_hash": "x"})
    return RunFile(run_id, started, {"host": "h"}, (record,))


def test_store_save_load_latest(tmp_path: Path) -> None:
    store = ResultStore(tmp_path / "results", current="20260103T000000Z-cccccc")
    paths = [
        store.save(run_file(rid, t))
        for rid, t in [
            ("20260101T000000Z-aaaaaa", 1.0),
            ("20260102T000000Z-bbbbbb", 2.0),
            ("20260103T000000Z-cccccc", 3.0),
        ]
    ]
    assert store.list() == paths
    assert sorted(p.name for p in (tmp_path / "results").iterdir()) == [p.name for p in paths]  # no temp file left
    assert store.load("latest").run_id == "20260102T000000Z-bbbbbb"  # the newest other than the current run
    # Never a later run: `compare latest RUN` once took a run stored after RUN as its BASE (a fresh-user trial).
    earlier = ResultStore(tmp_path / "results", current="20260102T000000Z-bbbbbb")
    assert earlier.load("latest").run_id == "20260101T000000Z-aaaaaa"
    assert store.load("20260101").run_id == "20260101T000000Z-aaaaaa"
    assert store.load(str(paths[2])) == run_file("20260103T000000Z-cccccc", 3.0)
    with pytest.raises(CompareError) as info:
        store.load("2026010")
    assert str(info.value) == (
        f"run '2026010' is ambiguous in {tmp_path / 'results'}: 20260101T000000Z-aaaaaa, 20260102T000000Z-bbbbbb, "
        "20260103T000000Z-cccccc"
    )


def test_latest_before_the_oldest_run_says_so_and_what_to_do(tmp_path: Path) -> None:
    """``compare latest RUN`` with RUN the oldest stored run advised "run once to create one" beside stored runs."""
    root = tmp_path / "results"
    advice = ("so 'latest' (the newest run stored before CURRENT) names none; name BASE explicitly (a run id or a "
              "saved name), or store a later run and compare that with 'latest'")  # fmt: skip
    ResultStore(root).save(run_file("20260102T000000Z-bbbbbb", 2.0))
    with pytest.raises(CompareError) as info:
        ResultStore(root, current="20260102T000000Z-bbbbbb").load("latest")
    where = f"20260102T000000Z-bbbbbb is the only run stored in {root}"
    assert str(info.value) == f"no run stored before 20260102T000000Z-bbbbbb: {where}, {advice}"
    ResultStore(root).save(run_file("20260103T000000Z-cccccc", 3.0))
    for current, where in [
        ("20260102T000000Z-bbbbbb", f"20260102T000000Z-bbbbbb is the oldest of the 2 runs stored in {root}"),
        ("20260101T000000Z-aaaaaa", f"every run stored in {root} (2) is newer than 20260101T000000Z-aaaaaa"),
    ]:
        with pytest.raises(CompareError) as info:
            ResultStore(root, current=current).load("latest")
        assert str(info.value) == f"no run stored before {current}: {where}, {advice}"


def test_store_errors_and_lenient_files(tmp_path: Path) -> None:
    store = ResultStore(tmp_path)
    with pytest.raises(CompareError) as info:
        store.load("latest")
    assert str(info.value) == (
        f"no run stored in {tmp_path}: run the tests once to store one, then compare the next run with it"
    )
    broken = tmp_path / "broken.json"
    broken.write_text("{")
    with pytest.raises(CompareError) as info:
        store.load(str(broken))
    assert (
        str(info.value)
        == f"{broken}: not JSON: Expecting property name enclosed in double quotes: line 1 column 2 (char 1)"
    )
    old = tmp_path / "old.json"
    old.write_text(
        json.dumps(
            {
                "run_id": "old",
                "results": [{"test_id": "t", "profile": "p", "metrics": {"output_tok_s": 5}, "future": True}],
                "future_top": 1,
            }
        )
    )
    loaded = store.load(str(old))
    assert loaded.results[0].values("output_tok_s") == [5.0]  # no repeats stored: falls back to metrics
    not_run = tmp_path / "x.json"
    not_run.write_text("[]")
    with pytest.raises(CompareError) as info:
        store.load(str(not_run))
    assert str(info.value) == f"{not_run}: not a pytest-specdec run file: no 'run_id'"


#: The fix every refused run file names.
EDITED = "the file was edited or damaged: store the run again (rerun its tests) or remove the file"
#: The start of the message for a stored ``cost.tolerances`` that is not a string of tolerances.
NOT_TOLERANCES = (
    'cost.tolerances: expected the tolerances the test was judged with, e.g. "output_tok_s:5% accept_length:2%", got '
)
#: What ``verdict.record_cost`` stores: the design and the merged tolerances the test was judged with.
COST = {"design": {"start": 3, "max_repeats": 24}, "tolerances": "output_tok_s:5% accept_length:2% accept_rate:0.02"}


@pytest.mark.parametrize(
    ("key", "value", "message"),
    [
        ("design", [3, 24], 'cost.design: expected an object {"start": N, "max_repeats": M} (the sequential design the '
                            "test was judged with), got [3, 24]"),
        ("design", {"start": "3", "max_repeats": 24}, 'cost.design.start: expected an integer >= 1, got "3"'),
        ("design", {"start": 3, "max_repeats": 2.5}, "cost.design.max_repeats: expected an integer >= 1, got 2.5"),
        ("design", {"start": 0, "max_repeats": 24}, "cost.design.start: expected an integer >= 1, got 0"),
        ("design", {"start": True, "max_repeats": 24}, "cost.design.start: expected an integer >= 1, got true"),
        ("design", {"start": 3}, "cost.design.max_repeats: expected an integer >= 1, got nothing (the key is missing)"),
        ("design", {"start": 8, "max_repeats": 3}, "cost.design.max_repeats: expected an integer >= start (8), got 3"),
        ("tolerances", 5, f"{NOT_TOLERANCES}5"),
        ("tolerances", None, f"{NOT_TOLERANCES}null"),
        ("tolerances", "", f'{NOT_TOLERANCES}""'),
        ("tolerances", ["output_tok_s:5%", 3], f'{NOT_TOLERANCES}["output_tok_s:5%", 3]'),
        ("tolerances", "output_tok_s:five accept_length:2%", "cost.tolerances: bad tolerance 'output_tok_s:five': "
                                                             "expected METRIC:TOL with TOL as 5% (relative), 5tok/s "
                                                             "or 0.05 (absolute) or 10%+5ms (both), e.g. "
                                                             "output_tok_s:5%"),
        ("tolerances", "tok_s:5%", "cost.tolerances: bad tolerance 'tok_s:5%': unknown metric 'tok_s' (known: "),
    ],
)  # fmt: skip
def test_a_run_file_with_an_edited_design_or_tolerances_is_refused(
    tmp_path: Path, key: str, value: object, message: str
) -> None:
    """The compare judges a stored record at the design and tolerances pytest judged it with (``cost``): a
    hand-edited one was ignored, silently (a single look, or the profile's tolerances). It is refused where the file
    is read, naming the file, the test, the key, the value and the fix."""
    path = ResultStore(tmp_path).save(run_file("r1", 1.0, "t.py::test_x[eagle3]"))
    data = json.loads(path.read_text())
    data["results"][0]["cost"] = {**COST, key: value}
    path.write_text(json.dumps(data))
    with pytest.raises(CompareError) as info:
        ResultStore(tmp_path).load("r1")
    prefix = f"{path}: t.py::test_x[eagle3]: {message}"
    assert str(info.value).startswith(prefix)
    assert str(info.value).endswith(f"; {EDITED}")


def test_a_stored_design_and_tolerances_read_and_old_records_without_them_too(tmp_path: Path) -> None:
    path = ResultStore(tmp_path).save(run_file("r1", 1.0))
    data = json.loads(path.read_text())
    for cost in [COST, {}, {"server_s": 1.0}, {**COST, "tolerances": ["output_tok_s:5%", "ttft_ms:10%+5"]}]:
        data["results"][0]["cost"] = cost
        path.write_text(json.dumps(data))
        assert ResultStore(tmp_path).load("r1").results[0].cost == cost
