"""Where a speculative cycle's time goes, read from the engine's own profiler trace (the ``trace:`` phase).

A cycle is one draft (``num_steps`` draft forwards), one verify (the target's forward over the draft tokens) and,
on SGLang, one draft extend (the draft model run over the accepted tokens). The trace files are Chrome trace JSON
(``traceEvents``, "X" spans in µs; gzip or not):

- SGLang (torch profiler behind ``/start_profile``; 0.5.17 ``srt/speculative/spec_utils.py::spec_stage_span`` and
  ``srt/model_executor/model_runner.py`` with ``srt/utils/profile_utils.py::build_step_span_name``): spans
  ``draft`` and ``draft_extend`` around the draft model's stages, ``step[TARGET_VERIFY bs=N]`` around the target's
  verify forward. With GPU activity Kineto also writes each span's extent on the GPU (``cat``
  ``gpu_user_annotation``), which is taken when present: SGLang overlaps scheduling with the GPU, so a span's CPU
  extent times the launch, not the work.
- The reference server: ``draft`` and ``verify`` spans of its own compute (CPU).

The plain-decode comparison the summary's cycle-cost line makes (``report.terminal.cycle_cost``) derives the cycle
from throughput; this reads the split the engine itself timed.
"""

from __future__ import annotations

import gzip
import json
import statistics
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

__all__ = ["CycleSplit", "cycle_split", "split_of_events"]

#: Span names of the draft model's stages (SGLang and the reference server).
DRAFT_SPANS = frozenset({"draft", "draft_extend"})
#: The reference server's verify span; SGLang's is the target's step span of forward mode TARGET_VERIFY.
VERIFY_SPAN = "verify"
SGLANG_VERIFY_PREFIX = "step[TARGET_VERIFY"


@dataclass(frozen=True, slots=True)
class CycleSplit:
    """A cycle's draft stages and verify, from one trace: medians over the traced cycles, in ms (``cycles`` verify
    spans). Medians, not means: a busy host stalls a few spans by 5-10x, and one estimator for every figure keeps
    them comparable (draft + verify never exceeds the period because of a stall).

    ``draft_ms``: the sum over the draft span names (``draft``, ``draft_extend``) of each name's median span.
    ``period_ms``: the median gap between successive verify starts, the cycle's wall time at concurrency 1 (None
    with fewer than 2 verify spans); it also holds what no span covers (scheduling, sampling, the HTTP side).
    ``clock``: ``GPU`` (Kineto's GPU extents) or ``CPU``. ``source``: the file and span names read.
    """

    draft_ms: float
    verify_ms: float
    period_ms: float | None
    cycles: int
    clock: str
    source: str

    @property
    def verify_share(self) -> float:
        """verify / (draft + verify): the verify's part of the timed draft-and-verify work (0-1), not of the period."""
        total = self.draft_ms + self.verify_ms
        return self.verify_ms / total if total > 0 else 0.0

    def text(self) -> str:
        """``verify 0.90 ms + draft 1.70 ms a cycle (medians of 180 cycles): verify 35% of the two; cycle period
        2.60 ms (GPU time of SGLang profiler spans in F)``."""
        period = f"; cycle period {self.period_ms:.2f} ms" if self.period_ms is not None else ""
        return (
            f"verify {self.verify_ms:.2f} ms + draft {self.draft_ms:.2f} ms a cycle (medians of {self.cycles} "
            f"cycles): verify {self.verify_share:.0%} of the two{period} ({self.clock} time of {self.source})"
        )


def _is_verify(name: str) -> bool:
    return name == VERIFY_SPAN or name.startswith(SGLANG_VERIFY_PREFIX)


def _union(spans: Iterable[tuple[float, float]]) -> list[tuple[float, float]]:
    """Overlapping (start, end) intervals merged: Kineto may write one GPU extent per stream for a span."""
    merged: list[tuple[float, float]] = []
    for start, end in sorted(spans):
        if merged and start <= merged[-1][1]:
            merged[-1] = (merged[-1][0], max(merged[-1][1], end))
        else:
            merged.append((start, end))
    return merged


def split_of_events(events: Sequence[dict[str, Any]], source: str) -> CycleSplit | None:
    """The split of one trace's events (``traceEvents``): GPU extents (``cat == "gpu_user_annotation"``) when the
    trace has verify spans among them, else the CPU spans. None without a verify span.

    Worked example: draft spans 0-1.2 ms and 3-4.2 ms, verify 1.2-2.1 ms and 4.2-5.1 ms -> draft 1.20 ms + verify
    0.90 ms a cycle, verify 43% of the two, period 3.00 ms, 2 cycles.
    """
    spans = [e for e in events if isinstance(e, dict) and e.get("ph") == "X" and isinstance(e.get("name"), str)]
    gpu = [e for e in spans if e.get("cat") == "gpu_user_annotation"]
    clock = "GPU" if any(_is_verify(e["name"]) for e in gpu) else "CPU"
    chosen = gpu if clock == "GPU" else [e for e in spans if e.get("cat") != "gpu_user_annotation"]

    def intervals(keep: Any) -> list[tuple[float, float]]:
        return _union(
            (float(e["ts"]), float(e["ts"]) + float(e.get("dur", 0.0))) for e in chosen if keep(e["name"])
        )

    def median_ms(spans: list[tuple[float, float]]) -> float:
        return statistics.median(e - s for s, e in spans) / 1000.0 if spans else 0.0

    verify = intervals(_is_verify)
    if not verify:
        return None
    gaps = [b[0] - a[0] for a, b in zip(verify, verify[1:], strict=False)]
    return CycleSplit(
        draft_ms=sum(median_ms(intervals(lambda name, n=n: name == n)) for n in sorted(DRAFT_SPANS)),
        verify_ms=median_ms(verify),
        period_ms=statistics.median(gaps) / 1000.0 if gaps else None,
        cycles=len(verify),
        clock=clock,
        source=source,
    )


def _events(path: Path) -> list[dict[str, Any]]:
    raw = path.read_bytes()
    if raw[:2] == b"\x1f\x8b":
        raw = gzip.decompress(raw)
    data = json.loads(raw)
    events = data.get("traceEvents") if isinstance(data, dict) else data
    return events if isinstance(events, list) else []


def cycle_split(paths: Iterable[Path]) -> CycleSplit | None:
    """The split of the trace among ``paths`` with the most verify spans (one file per tensor-parallel rank on
    SGLang: each rank runs every cycle, so one is read, not their sum). Files that are not Chrome traces are
    skipped.

    :returns: None when no file holds a verify span (a trace of a server without speculation).
    """
    best: CycleSplit | None = None
    for path in sorted(paths):
        if not path.name.endswith((".json", ".json.gz")):
            continue
        try:
            events = _events(path)
        except (OSError, ValueError, EOFError):
            continue
        engine = "SGLang profiler spans" if any(
            isinstance(e, dict) and str(e.get("name", "")).startswith(SGLANG_VERIFY_PREFIX) for e in events
        ) else "the server's draft/verify spans"  # fmt: skip
        found = split_of_events(events, f"{engine} in {path.name}")
        if found is not None and (best is None or found.cycles > best.cycles):
            best = found
    return best
