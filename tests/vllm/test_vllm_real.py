"""End-to-end against the real vLLM CPU build: EAGLE-3 with the bundled reference target and draft.

Needs the venv made by ``.ci/vllm-setup.sh`` (``SPECDEC_VLLM_PYTHON``, default ``<repo>/.venv-vllm/bin/python``).
Servers run one at a time (2 cores), each started once per module through ``VllmEngine.prepare``/``launch_spec`` and
``server.ServerProcess``, measured, and stopped before the next one starts.
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import httpx
import pytest

from pytest_specdec.core.records import RequestRecord
from pytest_specdec.engines.base import SpecCounters
from pytest_specdec.engines.overlay import make_draft_overlay
from pytest_specdec.engines.vllm import VllmEngine, accept_length_from_log, parse_spec_log_line, probe_vllm_install
from pytest_specdec.measure import client
from pytest_specdec.measure.workload import RequestSpec
from pytest_specdec.profiles.schema import Profile, SpeculativeConfig
from pytest_specdec.serve.server import ServerProcess
from tests.helpers import free_port

pytestmark = pytest.mark.vllm

REPO = Path(__file__).resolve().parents[2]
VLLM_PYTHON = Path(os.environ.get("SPECDEC_VLLM_PYTHON", REPO / ".venv-vllm" / "bin" / "python"))
ASSETS = REPO / "pytest_specdec" / "refserver" / "assets"
TARGET = Path(os.environ.get("SPECDEC_VLLM_TARGET", ASSETS / "target"))
DRAFT = Path(os.environ.get("SPECDEC_VLLM_DRAFT", ASSETS / "draft-eagle3"))
PROMPTS = REPO / "pytest_specdec" / "refserver" / "prompts.jsonl"

#: The draft was trained on SGLang ids [1, 3, 5] (outputs of layers 1, 3, 5 = HF hidden_states[2, 4, 6]); vLLM's
#: id i is the input of layer i (docs/vllm.md), so the same tensors are vLLM ids [2, 4, 6].
RIGHT_IDS = [2, 4, 6]
#: SGLang ids [0, 1, 2] in vLLM's convention: shallow layers the draft never saw.
WRONG_IDS = [1, 2, 3]
NUM_STEPS = 3
#: How much lower the wrong ids' accept length must be (absolute).
MIN_ACCEPT_LENGTH_DROP = 0.2
MAX_TOKENS = 64
NUM_PROMPTS = 12
#: vLLM logs "SpecDecoding metrics" every VLLM_LOG_STATS_INTERVAL seconds (vllm/envs.py, default 10).
LOG_INTERVAL_S = 1.0
#: The worker inside the engine-core process (UniProcExecutor, vLLM's default for one GPU), not a third process: on
#: CPU vLLM forces the multiproc executor unless VLLM_ENABLE_V1_MULTIPROCESSING=0 (platforms/cpu.py), and each of its
#: processes imports vllm and torch again (~15 s a server on a busy 2-core runner). The API server still talks to
#: the engine core in a process of its own (AsyncLLM always does). One OpenMP thread, as the multiproc executor
#: binds its worker to one core: with two unbound threads a loaded runner decoded 4x slower with EAGLE-3.
ONE_PROCESS_ARGS = ["--distributed-executor-backend", "uni"]
ONE_PROCESS_ENV = {"VLLM_ENABLE_V1_MULTIPROCESSING": "0", "OMP_NUM_THREADS": "1"}

if not VLLM_PYTHON.exists():
    pytest.skip(
        f"vLLM venv not found at {VLLM_PYTHON}: run `bash .ci/vllm-setup.sh` or set SPECDEC_VLLM_PYTHON",
        allow_module_level=True,
    )


@dataclass(frozen=True, slots=True)
class Run:
    """One server's measured phase."""

    texts: tuple[str, ...]
    before: SpecCounters
    after: SpecCounters
    log_lines: tuple[str, ...]
    ready_s: float
    effective_algorithm: str | None
    #: The same prompts through the plugin's own streaming client (``client.run_phase``, api completions).
    client_records: tuple[RequestRecord, ...]

    @property
    def counter_accept_length(self) -> float:
        """1 + Δaccepted / Δdrafts (vllm/v1/spec_decode/metrics.py)."""
        assert self.before.drafts is not None and self.after.drafts is not None
        assert self.before.accepted_tokens is not None and self.after.accepted_tokens is not None
        drafts = self.after.drafts - self.before.drafts
        assert drafts > 0, "no drafts during the measured phase"
        return 1.0 + (self.after.accepted_tokens - self.before.accepted_tokens) / drafts


def _prompts() -> list[str]:
    lines = PROMPTS.read_text().splitlines()
    return [json.loads(line)["prompt"] for line in lines[:NUM_PROMPTS]]


def _stream(http: httpx.Client, prompt: str) -> str:
    """One greedy streaming /v1/completions; the concatenated text."""
    body = {"prompt": prompt, "max_tokens": MAX_TOKENS, "temperature": 0.0, "ignore_eos": True, "stream": True}
    parts: list[str] = []
    with http.stream("POST", "/v1/completions", json=body, timeout=120.0) as resp:
        assert resp.status_code == 200, resp.read()
        for line in resp.iter_lines():
            if not line.startswith("data: ") or line == "data: [DONE]":
                continue
            for choice in json.loads(line[len("data: ") :]).get("choices", []):
                parts.append(choice.get("text") or "")
    return "".join(parts)


def _vllm_draft(tmp: Path) -> Path:
    """The draft as vLLM 0.32.0 loads it.

    With ``draft_vocab_size == vocab_size`` vLLM's ``llama_eagle3.py::Eagle3LlamaForCausalLM`` has no
    ``draft_id_to_target_id`` parameter, yet maps the checkpoint's ``d2t`` onto it and fails ("There is no module or
    parameter named 'draft_id_to_target_id'"). An identity d2t (all zeros) carries nothing, so drop d2t/t2d here.
    """
    from safetensors.torch import load_file, save_file

    config = json.loads((DRAFT / "config.json").read_text())
    weights = load_file(str(DRAFT / "model.safetensors"))
    if config.get("draft_vocab_size", config["vocab_size"]) != config["vocab_size"] or "d2t" not in weights:
        return DRAFT
    assert int(weights["d2t"].abs().sum()) == 0, "d2t is not the identity although draft_vocab_size == vocab_size"
    out = tmp / "draft-eagle3-vllm"
    out.mkdir()
    save_file({k: v for k, v in weights.items() if k not in ("d2t", "t2d")}, str(out / "model.safetensors"))
    (out / "config.json").write_text(json.dumps(config))
    return out


def _wait_logged(log_path: Path, counters: SpecCounters, timeout_s: float = 60.0) -> None:
    """Until the ``SpecDecoding metrics`` lines of the whole log add up to the drafted tokens ``counters`` hold: vLLM
    logs each interval's stats (``VLLM_LOG_STATS_INTERVAL``) from the same numbers /metrics counts, so every draft
    counted by then has reached the log (a fixed wait of two intervals was 5 s a run)."""
    assert counters.draft_tokens is not None, "no spec-decode counters"
    deadline = time.monotonic() + timeout_s
    while True:
        parsed = (parse_spec_log_line(line) for line in log_path.read_text(errors="replace").splitlines())
        logged = sum(p["drafted_tokens"] for p in parsed if p is not None)
        if logged >= counters.draft_tokens:
            return
        assert time.monotonic() < deadline, f"{logged} drafted tokens logged after {timeout_s} s, /metrics counts " \
                                            f"{counters.draft_tokens:g}"
        time.sleep(0.1)


@pytest.fixture(scope="module")
def run(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Callable[[str], Run]]:
    """``run(kind)`` for kind in ``eagle3``, ``wrong_ids``, ``baseline``: start that server, measure, stop; cached."""
    if not (TARGET / "config.json").exists() or not (DRAFT / "config.json").exists():
        pytest.skip(f"reference assets missing: {TARGET} / {DRAFT}")
    tmp = tmp_path_factory.mktemp("vllm")
    draft = _vllm_draft(tmp)
    overlays = {
        "eagle3": make_draft_overlay(draft, RIGHT_IDS, tmp / "overlays"),
        "wrong_ids": make_draft_overlay(draft, WRONG_IDS, tmp / "overlays"),
    }
    cache: dict[str, Run] = {}
    engine = VllmEngine()

    def measure(kind: str) -> Run:
        if kind in cache:
            return cache[kind]
        spec = None
        if kind != "baseline":
            spec = SpeculativeConfig(algorithm="EAGLE3", draft_model_path=str(draft), num_steps=NUM_STEPS)
        profile = Profile(
            name=kind,
            server="vllm",
            model_path=str(TARGET),
            python=str(VLLM_PYTHON),
            speculative=spec,
            extra_args=["--enforce-eager", "--max-model-len", "1024", *ONE_PROCESS_ARGS],
            env={
                "VLLM_CPU_KVCACHE_SPACE": "1",
                "HF_HUB_OFFLINE": "1",
                "TRANSFORMERS_OFFLINE": "1",
                "VLLM_LOG_STATS_INTERVAL": str(LOG_INTERVAL_S),
                **ONE_PROCESS_ENV,
            },
        )
        draft_path = engine.prepare(profile, work_dir=tmp / "drafts", draft_path=overlays.get(kind))
        launch = engine.launch_spec(profile, port=free_port(), draft_path=draft_path)
        log_path = tmp / f"{kind}.log"
        proc = ServerProcess.start(launch, name=kind, log_path=log_path)
        try:
            with httpx.Client(base_url=launch.base_url, timeout=30.0) as http:
                ready_s = proc.wait_ready(lambda: engine.probe_ready(http, profile), timeout_s=300, poll_s=0.5)
                effective = engine.effective_config(http, profile)
                prompts = _prompts()
                _stream(http, prompts[0])  # warmup
                # Only the eagle3 run's log window and client records are read (the other two runs' tests read
                # texts and counters, which vLLM updates before a stream's last chunk: async_llm.py output_handler).
                full = kind == "eagle3"
                before = engine.counters(http.get("/metrics").text)
                if full:  # the warmup's stats in the log before the measured window opens
                    _wait_logged(log_path, before)
                offset = log_path.stat().st_size
                texts = tuple(_stream(http, p) for p in prompts)
                after = engine.counters(http.get("/metrics").text)
                records: list[RequestRecord] = []
                if full:  # the measured prompts' last stats in the log before the window closes
                    _wait_logged(log_path, after)
                # The window closes here: the client phase below drafts too, and its stats are not in the counters.
                offset_end = log_path.stat().st_size
                if full:
                    specs = [RequestSpec(p, MAX_TOKENS, 0.0, True) for p in prompts[:2]]
                    records = client.run_phase(launch.base_url, specs, client.PhaseOptions(api="completions")).records
            with open(log_path, "rb") as log:
                log.seek(offset)
                tail = log.read(offset_end - offset).decode(errors="replace").splitlines()
            proc.check_alive()
        finally:
            report = proc.stop()
        assert report.clean, report.describe()
        lines = tuple(line for line in tail if parse_spec_log_line(line) is not None)
        cache[kind] = Run(texts, before, after, lines, ready_s, effective.speculative_algorithm, tuple(records))
        return cache[kind]

    yield measure


def test_accept_length_counters_match_log(run: Callable[[str], Run]) -> None:
    eagle = run("eagle3")
    assert eagle.effective_algorithm == "EAGLE3"
    assert eagle.log_lines, "no 'SpecDecoding metrics' line in the measured window"
    from_log = accept_length_from_log(list(eagle.log_lines))
    assert from_log is not None
    assert eagle.counter_accept_length == pytest.approx(from_log, rel=0.02)
    generated = eagle.after.generation_tokens - eagle.before.generation_tokens  # type: ignore[operator]
    assert generated == NUM_PROMPTS * MAX_TOKENS
    per_pos = [
        a - b for a, b in zip(eagle.after.accepted_per_position, eagle.before.accepted_per_position, strict=True)
    ]
    assert len(per_pos) == NUM_STEPS and per_pos == sorted(per_pos, reverse=True)


def test_greedy_output_equals_no_speculation(run: Callable[[str], Run]) -> None:
    eagle = run("eagle3")
    baseline = run("baseline")
    assert baseline.after.drafts is None, "the baseline server should have no spec-decode counters"
    for i, (spec_text, plain_text) in enumerate(zip(eagle.texts, baseline.texts, strict=True)):
        assert spec_text == plain_text, f"prompt {i}: EAGLE-3 greedy output differs from the no-spec output"


def test_wrong_aux_ids_lower_accept_length(run: Callable[[str], Run]) -> None:
    right = run("eagle3").counter_accept_length
    wrong = run("wrong_ids").counter_accept_length
    # Measured on the bundled assets (12 prompts x 64 tokens, greedy): about 2.3 vs 2.7. Adjacent shallow layers
    # still carry some signal, so the drop is a few tenths, not a collapse.
    assert wrong < right - MIN_ACCEPT_LENGTH_DROP, (
        f"accept length with vLLM ids {WRONG_IDS} ({wrong:.2f}) vs {RIGHT_IDS} ({right:.2f}): "
        f"expected a drop of more than {MIN_ACCEPT_LENGTH_DROP}"
    )


def test_plugin_client_streams_from_vllm(run: Callable[[str], Run]) -> None:
    eagle = run("eagle3")
    for i, record in enumerate(eagle.client_records):
        assert record.ok, record.error
        assert record.completion_tokens == MAX_TOKENS
        assert record.output_text == eagle.texts[i]
        assert record.chunk_times_s, "no timed chunks"


def test_probe_finds_the_cpu_build() -> None:
    # vllm-cpu's console script fails (PackageNotFoundError: vllm), so the engine must launch the module instead.
    install = probe_vllm_install(str(VLLM_PYTHON))
    assert (install.distribution, install.version, install.console_script) == ("vllm-cpu", "0.32.0", None)
    profile = Profile(name="p", server="vllm", model_path=str(TARGET), python=str(VLLM_PYTHON))
    argv = VllmEngine().launch_spec(profile, port=8000, draft_path=None).argv
    assert argv[:3] == (str(VLLM_PYTHON), "-m", "vllm.entrypoints.openai.api_server")
