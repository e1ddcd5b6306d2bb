"""``measure.trace_split`` on hand-made Chrome traces shaped as SGLang's torch profiler and the reference server write
them (span names from SGLang 0.5.17: ``draft``, ``draft_extend``, ``step[TARGET_VERIFY bs=1]``)."""

from __future__ import annotations

import gzip
import json
from pathlib import Path

import pytest

from pytest_specdec.measure.trace_split import cycle_split, split_of_events


def span(name: str, start_ms: float, dur_ms: float, cat: str = "user_annotation") -> dict[str, object]:
    return {"ph": "X", "cat": cat, "name": name, "ts": start_ms * 1000.0, "dur": dur_ms * 1000.0, "pid": 1, "tid": 1}


def sglang_cycles(n: int, *, cat: str) -> list[dict[str, object]]:
    """n cycles of 3 ms: draft 1.0 ms, verify 0.9 ms, draft_extend 0.3 ms (and a decode step that is not a verify)."""
    out = []
    for i in range(n):
        t = 3.0 * i
        out += [span("draft", t, 1.0, cat), span("step[TARGET_VERIFY bs=1]", t + 1.0, 0.9, cat),
                span("draft_extend", t + 1.9, 0.3, cat)]  # fmt: skip
    return [*out, span("step[DECODE bs=1]", 100.0, 5.0, cat)]


def test_the_worked_example() -> None:
    events = [span("draft", 0, 1.2), span("verify", 1.2, 0.9), span("draft", 3.0, 1.2), span("verify", 4.2, 0.9)]
    split = split_of_events(events, "x")
    assert split is not None
    assert (split.draft_ms, split.verify_ms, split.period_ms, split.cycles, split.clock) == pytest.approx(
        (1.2, 0.9, 3.0, 2, "CPU"))  # fmt: skip
    assert split.verify_share == pytest.approx(0.9 / 2.1)


def test_gpu_extents_win_over_the_cpu_spans_and_one_rank_is_read(tmp_path: Path) -> None:
    # The CPU spans time launches (SGLang overlaps scheduling with the GPU); the GPU extents time the work.
    cpu = [span("draft", 3.0 * i, 0.1) for i in range(40)] + [span("step[TARGET_VERIFY bs=1]", 3.0 * i + 0.1, 0.05)
                                                            for i in range(40)]  # fmt: skip
    events = cpu + sglang_cycles(40, cat="gpu_user_annotation")
    for rank in (0, 1):  # two tensor-parallel ranks: each runs every cycle
        (tmp_path / f"eagle3-1700000000-TP-{rank}.trace.json.gz").write_bytes(
            gzip.compress(json.dumps({"traceEvents": events}).encode()))  # fmt: skip
    (tmp_path / "notes.txt").write_text("not a trace")
    split = cycle_split(tmp_path.iterdir())
    assert split is not None and split.clock == "GPU" and split.cycles == 40
    assert (split.draft_ms, split.verify_ms, split.period_ms) == pytest.approx((1.3, 0.9, 3.0))
    assert split.source == "SGLang profiler spans in eagle3-1700000000-TP-0.trace.json.gz"
    assert split.text() == ("verify 0.90 ms + draft 1.30 ms a cycle (medians of 40 cycles): verify 41% of the two; "
                            "cycle period 3.00 ms (GPU time of SGLang profiler spans in "
                            "eagle3-1700000000-TP-0.trace.json.gz)")


def test_a_trace_without_speculation_or_unreadable_gives_no_split(tmp_path: Path) -> None:
    (tmp_path / "baseline.trace.json").write_text(json.dumps({"traceEvents": [span("step[DECODE bs=1]", 0, 1.0)]}))
    (tmp_path / "broken.trace.json.gz").write_bytes(b"\x1f\x8b not gzip")
    assert cycle_split(tmp_path.iterdir()) is None


RECORDED = Path(__file__).parent / "data" / "sglang" / "0.5.17-graphs" / "trace"


def test_the_split_of_a_real_sglang_trace() -> None:
    """SGLang 0.5.17 on an H200 with CUDA graphs (the bundled tiny pair, 4 traced requests of 64 tokens; the files
    keep the trace's user_annotation and gpu_user_annotation spans, README in benchmarks/gpu/results-2026-12-04-c).
    The run printed means then (``verify 0.63 ms + draft 3.29 ms per cycle``); the medians read 0.59 ms (the
    ``step[TARGET_VERIFY bs=1]`` spans) and 2.94 ms (``draft`` 1.18 + ``draft_extend`` 1.76). The baseline's trace
    has decode steps and no verify."""
    (eagle3,) = RECORDED.glob("eagle3-*.spans.trace.json.gz")
    split = cycle_split([eagle3])
    assert split is not None and (split.clock, split.cycles) == ("GPU", 97)
    assert (round(split.verify_ms, 2), round(split.draft_ms, 2), round(split.period_ms or 0, 2)) == (0.59, 2.94, 9.94)
    assert f"{split.verify_share:.0%}" == "17%"
    assert cycle_split(RECORDED.glob("baseline-*.spans.trace.json.gz")) is None
