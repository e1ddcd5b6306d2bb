"""Tests of pytest_specdec.report.request_log (``--specdec-requests-out``): one JSON line per request, hand-made
records."""

from __future__ import annotations

import json
from pathlib import Path

from pytest_specdec.core.records import RequestRecord
from pytest_specdec.measure.runner import Measurement
from pytest_specdec.report.request_log import RequestLog, request_rows
from tests.helpers import run_metrics

SENT = RequestRecord(ok=True, error=None, start_s=10.0, end_s=10.13, prompt_tokens=12, completion_tokens=4,
                     chunk_times_s=(10.1, 10.13), chunk_tokens=(1, 3), spec_verify_ct=2,
                     spec_num_correct_drafts=2)  # fmt: skip
LATE = RequestRecord(ok=True, error=None, start_s=10.6, end_s=10.8, prompt_tokens=12, completion_tokens=1,
                     chunk_times_s=(10.8,), chunk_tokens=(1,), arrival_s=10.5)  # fmt: skip
FAILED = RequestRecord(ok=False, error="HTTP 500", start_s=10.2, end_s=10.25, prompt_tokens=0, completion_tokens=0)


def test_rows_worked_example() -> None:
    rows = request_rows([SENT, LATE, FAILED], profile="eagle3", repeat=1, categories=("code", None, None))
    assert rows[0] == {
        "profile": "eagle3", "repeat": 1, "index": 0, "ok": True, "error": None, "category": "code",
        "arrival_s": 0.0, "queued_ms": 0.0, "ttft_ms": 100.0, "itl_ms": [10.0, 10.0, 10.0], "tpot_ms": 10.0,
        "e2e_ms": 130.0, "prompt_tokens": 12, "output_tokens": 4, "spec_verify_ct": 2, "spec_num_correct_drafts": 2,
        "accept_length": 2.0,
    }  # fmt: skip
    assert (rows[1]["arrival_s"], rows[1]["queued_ms"], rows[1]["itl_ms"]) == (0.5, 100.0, [])
    assert (rows[2]["ok"], rows[2]["error"], rows[2]["ttft_ms"], rows[2]["e2e_ms"]) == (False, "HTTP 500", None, 50.0)


def test_log_numbers_each_profiles_phases_and_appends(tmp_path: Path) -> None:
    path = tmp_path / "out" / "requests.jsonl"
    RequestLog.start(path)
    log = RequestLog(path)
    phase = Measurement("eagle3", run_metrics(), (SENT, FAILED), "h", None, None, None)
    log(phase)
    log(phase)
    log(Measurement("baseline", run_metrics(), (SENT,), "h", None, None, None))
    lines = [json.loads(line) for line in path.read_text().splitlines()]
    assert [(r["profile"], r["repeat"], r["index"]) for r in lines] == [
        ("eagle3", 0, 0), ("eagle3", 0, 1), ("eagle3", 1, 0), ("eagle3", 1, 1), ("baseline", 0, 0),
    ]  # fmt: skip
    RequestLog.start(path)
    assert path.read_text() == ""


def test_serving_table_shows_open_loop_rows_and_every_row_with_v() -> None:
    from pytest_specdec.report.terminal import serving_lines

    metrics = {"request_rate": 4.0, "requests_per_s": 3.5, "ttft_ms_p99": 812.0}
    open_loop = ("t.py::test_a[eagle3]", "eagle3", metrics, "")
    closed = ("t.py::test_b[baseline]", "baseline", {"request_rate": None, "requests_per_s": 9.0}, "")
    lines = serving_lines([open_loop, closed])
    assert len(lines) == 2 and lines[1].startswith("test_a[eagle3]") and "812.0" in lines[1]
    assert lines[0].split()[:4] == ["test", "rate", "req/s", "in"]
    everything = serving_lines([open_loop, closed], everything=True)
    assert [line.split()[:2] for line in everything[1:]] == [["test_a[eagle3]", "4"], ["test_b[baseline]", "closed"]]
    assert serving_lines([closed]) == []
