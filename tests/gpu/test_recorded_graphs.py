"""What real SGLang 0.5.17 said with CUDA graphs on (issue 38), replayed without a GPU: the recorded logs and
/server_info in ``tests/data/sglang/0.5.17-graphs`` (``benchmarks/gpu/session-2026-12-02-graphs.sh`` on the lent H200,
EAGLE-3 serving with graphs once sgl-deep-gemm 0.1.5.post1 is installed; see docs/sglang-gpu.md). Runs everywhere.
"""

from __future__ import annotations

import json
import statistics
from pathlib import Path

import httpx

from pytest_specdec.engines.sglang import SglangEngine, graph_warning, parse_decode_line
from pytest_specdec.profiles.schema import Profile
from pytest_specdec.serve.diagnosis import last_exception

DATA = Path(__file__).resolve().parents[1] / "data" / "sglang" / "0.5.17-graphs"


def _decode(name: str) -> list:
    return [d for line in (DATA / name).read_text().splitlines() if (d := parse_decode_line(line)) is not None]


def _profile(*extra: str, speculative: dict | None = None) -> Profile:
    fields = {"name": "p", "server": "sglang", "url": "http://sglang", "model_path": "m", "extra_args": list(extra)}
    return Profile.model_validate({**fields, **({"speculative": speculative} if speculative else {})})


def test_eagle3_on_graphs_decodes_on_graphs_with_its_accept_length() -> None:
    lines = _decode("eagle3-graphs.log")
    assert len(lines) == 60
    assert all(d.cuda_graph for d in lines)
    # Windows of 40 decode steps: 2.2-2.96 under load, 1.0-1.16 where only the 32-token warmup request ran.
    assert 2.6 <= statistics.median(d.accept_length for d in lines) <= 2.9
    assert all(1.0 <= d.accept_length <= 3.1 and 0.0 <= d.accept_rate <= 0.7 for d in lines)
    assert graph_warning(_profile("--cuda-graph-max-bs", "64"), (DATA / "eagle3-graphs.log").read_text()) is None


def test_baseline_on_graphs_and_without() -> None:
    graphs = _decode("baseline-graphs.log")
    assert graphs and all(d.cuda_graph and d.accept_length is None for d in graphs)
    plain_log = (DATA / "baseline-nographs.log").read_text()
    plain = [d for line in plain_log.splitlines() if (d := parse_decode_line(line)) is not None]
    assert plain and not any(d.cuda_graph for d in plain)
    # The same log under a profile that expects graphs: the silent loss (3-5x at c1 here) is named.
    assert graph_warning(_profile(), plain_log) == (
        f"profile p: {len(plain)} of {len(plain)} 'Decode batch' log lines say 'cuda graph: False' although the "
        "profile does not disable CUDA graphs (capture failed, or batches exceed --cuda-graph-max-bs-decode)"
    )
    assert graph_warning(_profile("--disable-cuda-graph"), plain_log) is None


def test_clean_graph_logs_have_no_exception() -> None:
    """The graph logs carry ModuleNotFoundError text inside INFO lines (openai_harmony, helion): not a crash."""
    for name in ("eagle3-graphs.log", "baseline-graphs.log", "baseline-nographs.log"):
        text = (DATA / name).read_text()
        assert "ModuleNotFoundError" in text or "No module named" in text
        assert last_exception(text) is None, name


def test_server_info_of_eagle3_on_graphs() -> None:
    info = (DATA / "eagle3-graphs.server_info.json").read_text()
    state = json.loads(info)["internal_states"][0]
    assert state["cuda_graph_config"]["decode"]["backend"] == "full"
    assert set(state["startup_time"]["cuda_graph"]) >= {"target_verify", "draft_decode", "draft_extend"}

    def handler(request: httpx.Request) -> httpx.Response:
        if request.url.path in ("/server_info", "/get_server_info"):
            return httpx.Response(200, text=info)
        return httpx.Response(404)

    spec = {"algorithm": "EAGLE3", "num_steps": 3, "eagle_topk": 1, "num_draft_tokens": 4}
    with httpx.Client(base_url="http://sglang", transport=httpx.MockTransport(handler)) as http:
        effective = SglangEngine().effective_config(http, _profile(speculative=spec))
    assert (effective.version, effective.speculative_algorithm) == ("0.5.17", "EAGLE3")
    assert (effective.num_steps, effective.eagle_topk, effective.num_draft_tokens) == (3, 1, 4)
    assert effective.max_running_requests == 48  # SGLang's reset for speculative decoding, graphs or not
