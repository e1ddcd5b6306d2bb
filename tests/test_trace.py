"""``trace:`` end to end on the reference server: one unmeasured phase under the engine's profiler (SGLang's
/start_profile + /stop_profile), whose trace shows where the speculative cycle goes (draft vs verify spans)."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

import pytest

from pytest_specdec.engines.rules import BUNDLED_DRAFT_EAGLE3, BUNDLED_TARGET
from pytest_specdec.measure import runner
from pytest_specdec.profiles.schema import Profile
from tests.helpers import SHARED_EAGLE3


@pytest.mark.slow
def test_trace_phase_writes_draft_and_verify_spans_outside_the_measurement(
    tmp_path: Path, reference_url: Callable[[str], str]
) -> None:
    """On the session's shared EAGLE3 server (``conftest.reference_url``; the trace is asked of a running server,
    nothing here depends on a launch): ``start_server`` attaches to it, ``stop`` leaves it running."""
    profile = Profile(
        name="eagle3", server="reference", source=str(tmp_path / "specdec.yaml"), url=reference_url(SHARED_EAGLE3),
        model_path=str(BUNDLED_TARGET),
        speculative={"algorithm": "EAGLE3", "draft_model_path": str(BUNDLED_DRAFT_EAGLE3), "num_steps": 3,
                     "eagle_topk": 1, "num_draft_tokens": 4},
        workload={"max_new_tokens": 16, "num_requests": 3, "warmup_requests": 1, "repeats": 1},
        trace={"dir": "traces", "requests": 2},
    )  # fmt: skip
    server = runner.start_server(profile, log_dir=tmp_path / "logs")
    try:
        prompts = runner.profile_prompts(profile)
        result = runner.measure_repeats(server, 1, prompts=prompts)
        assert not list((tmp_path / "traces").glob("*")), "measuring does not trace"
        trace = runner.trace_phase(server, prompts=prompts)
    finally:
        server.stop()
    assert result.trace is None
    assert trace.line == f"trace: {tmp_path / 'traces'} (1 new file)"
    # The engine's own split of the cycle: every traced cycle has one draft and one verify span.
    split = trace.split
    assert split is not None and split.clock == "CPU" and split.source.startswith("the server's draft/verify spans")
    assert split.cycles >= 2 * 15 // 4 and split.draft_ms > 0 and split.verify_ms > 0 and split.period_ms
    assert 0 < split.verify_share < 1
    (path,) = (tmp_path / "traces").glob("eagle3-*.trace.json")
    spans = json.loads(path.read_text())["traceEvents"]
    names = {span["name"] for span in spans}
    assert names == {"draft", "verify"}
    assert all(span["dur"] > 0 for span in spans)
    # The measured phase is not the traced one: 3 measured requests, a trace over 2.
    assert result.metrics.num_ok == 3
    assert len({span["args"]["rid"] for span in spans}) == 2
