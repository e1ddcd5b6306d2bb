"""``--specdec-requests-out``: every measured request as one JSON line, for a re-analysis outside the plugin (the
per-request export of SGLang ``bench_serving --output-details`` and vLLM ``bench serve --save-detailed``).

One line per request of every measured phase (repeats, sequential repeats, a paired reference arm's phases; not
warmups or a traced phase), in the order the phases ended::

    {"profile": "eagle3", "repeat": 0, "index": 3, "ok": true, "error": null, "category": "code",
     "arrival_s": 0.870, "queued_ms": 0.0, "ttft_ms": 41.2, "itl_ms": [9.8, 9.8, 10.1], "tpot_ms": 9.9,
     "e2e_ms": 71.0, "prompt_tokens": 12, "output_tokens": 4, "spec_verify_ct": 2, "spec_num_correct_drafts": 2,
     "accept_length": 2.0}

``arrival_s``: seconds from the phase's first request to this one's arrival (open loop) or send (closed loop);
``queued_ms``: its wait for a free ``concurrency`` slot (open loop; 0 in a closed loop); latencies as
``metrics.request_timing`` (None where not applicable); ``accept_length`` = 1 + correct drafts / verify steps.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from pytest_specdec.core.records import RequestRecord
from pytest_specdec.measure.metrics import request_timing

if TYPE_CHECKING:
    from pytest_specdec.measure.runner import Measurement

__all__ = ["RequestLog", "request_rows"]


def _ms(value_s: float | None) -> float | None:
    return None if value_s is None else round(value_s * 1000.0, 4)


def request_rows(
    records: Sequence[RequestRecord], *, profile: str, repeat: int, categories: Sequence[str | None] = ()
) -> list[dict[str, Any]]:
    """The JSON lines of one phase's requests (module docstring), in request order.

    Worked example: a closed-loop request sent 0.5 s after the first, events at +0.1 s (1 token) and +0.13 s (3
    tokens), done at +0.13 s -> ``arrival_s`` 0.5, ``queued_ms`` 0.0, ``ttft_ms`` 100.0, ``itl_ms`` [10.0, 10.0,
    10.0], ``e2e_ms`` 130.0.
    """
    if not records:
        return []
    zero = min(r.arrival_s if r.arrival_s is not None else r.start_s for r in records)
    rows = []
    for index, r in enumerate(records):
        t = request_timing(r) if r.ok else None
        arrived = r.arrival_s if r.arrival_s is not None else r.start_s
        length = (
            1.0 + r.spec_num_correct_drafts / r.spec_verify_ct
            if r.spec_verify_ct and r.spec_num_correct_drafts is not None
            else None
        )
        rows.append({
            "profile": profile,
            "repeat": repeat,
            "index": index,
            "ok": r.ok,
            "error": r.error,
            "category": categories[index] if index < len(categories) else None,
            "arrival_s": round(arrived - zero, 6),
            "queued_ms": _ms(r.start_s - arrived),
            "ttft_ms": _ms(t.ttft_s) if t else None,
            "itl_ms": [_ms(g) for g in t.itl_s] if t else [],
            "tpot_ms": _ms(t.tpot_s) if t else None,
            "e2e_ms": _ms(t.e2e_s) if t else _ms(r.end_s - r.start_s),
            "prompt_tokens": r.prompt_tokens,
            "output_tokens": r.completion_tokens,
            "spec_verify_ct": r.spec_verify_ct,
            "spec_num_correct_drafts": r.spec_num_correct_drafts,
            "accept_length": length,
        })  # fmt: skip
    return rows


class RequestLog:
    """Appends each measured phase to ``path`` (``runner.phase_recorder``), numbering a profile's phases from 0 in
    this process. The file is emptied once per run by :meth:`start`; xdist workers then append under the measure
    lock (one measured phase at a time), so lines of two phases never interleave."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._phases: dict[str, int] = {}

    @staticmethod
    def start(path: Path) -> None:
        """Create ``path`` empty (its directory too): the run's first and only truncation (the controller's)."""
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text("", encoding="utf-8")

    def __call__(self, measurement: Measurement) -> None:
        repeat = self._phases.get(measurement.profile, 0)
        self._phases[measurement.profile] = repeat + 1
        rows = request_rows(
            measurement.records, profile=measurement.profile, repeat=repeat, categories=measurement.categories
        )
        with self.path.open("a", encoding="utf-8") as out:
            out.writelines(json.dumps(row) + "\n" for row in rows)
