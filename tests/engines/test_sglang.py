"""engines/sglang.py: exact argv per SGLang version, clean env, readiness, /server_info readback, /metrics counters.

The argv is pinned against SGLang's own flag definitions:
- 0.5.23: ``python/sglang/srt/arg_groups/fields/{model,serving,parallel,device,observability,schedule,spec}.py``
  (flag = ``"--" + field_name.replace("_", "-")``, ``arg_groups/arg_utils.py::_field_to_cli_name``), console script
  ``sglang = sglang.cli.main:main`` (wheel ``entry_points.txt``), ``python/sglang/cli/serve.py``.
- 0.4.6.post5: ``python/sglang/srt/server_args.py::ServerArgs.add_cli_args`` (same spellings, no console script, so
  ``python -m sglang.launch_server``).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import httpx
import pytest

from pytest_specdec.core.errors import ProfileError, ServerError
from pytest_specdec.engines import get_engine
from pytest_specdec.engines.base import EffectiveConfig, SpecCounters
from pytest_specdec.engines.common import BASE_ENV_KEYS, clean_env, resolve_api_key
from pytest_specdec.engines.sglang import SglangEngine, probe_sglang_version, version_row
from pytest_specdec.profiles.schema import Profile

RECORDER = """#!{python}
import json, os, sys
if len(sys.argv) > 1 and sys.argv[1] == "-c":
    with open({count!r}, "a") as fh:
        fh.write("probe\\n")
    {version_line}
    sys.exit(0)
with open({record!r}, "w") as fh:
    json.dump({{"argv": sys.argv, "env": dict(os.environ)}}, fh)
"""


def make_stand_in(path: Path, *, version: str | None, record: Path, count: Path) -> Path:
    """An executable that records argv+env, or answers the importlib.metadata version probe."""
    version_line = f"print({version!r})" if version else "sys.exit(1)"
    path.write_text(
        RECORDER.format(python=sys.executable, record=str(record), count=str(count), version_line=version_line)
    )
    path.chmod(0o755)
    return path


@pytest.fixture(autouse=True)
def _fresh_probe_cache() -> None:
    probe_sglang_version.cache_clear()


@pytest.fixture
def env_dirs(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> dict[str, Path]:
    """venv/bin/python (stand-in) and a separate bin dir first on PATH; a caller env with a stray variable."""
    venv_bin = tmp_path / "venv" / "bin"
    venv_bin.mkdir(parents=True)
    path_bin = tmp_path / "pathbin"
    path_bin.mkdir()
    monkeypatch.setenv("PATH", f"{path_bin}:/usr/bin:/bin")
    monkeypatch.setenv("HOME", str(tmp_path))
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv("SGLANG_STRAY_FROM_SHELL", "1")
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    return {"venv_bin": venv_bin, "path_bin": path_bin, "record": tmp_path / "record.json", "count": tmp_path / "n"}


def eagle3_profile(python: Path, **extra: object) -> Profile:
    fields: dict[str, object] = {
        "name": "eagle3",
        "server": "sglang",
        "python": str(python),
        "model_path": "meta-llama/Llama-3.1-8B-Instruct",
        "random_seed": 7,
        "tp_size": 2,
        "max_running_requests": 16,
        "env": {"NCCL_DEBUG": "WARN"},
        "speculative": {
            "algorithm": "EAGLE3",
            "draft_model_path": "/models/draft",
            "num_steps": 3,
            "eagle_topk": 1,
            "num_draft_tokens": 4,
        },
        "extra_args": ["--mem-fraction-static", "0.7"],
    }
    fields.update(extra)
    return Profile.model_validate(fields)


SERVER_ARGS_0523 = [
    "--model-path", "meta-llama/Llama-3.1-8B-Instruct",
    "--host", "127.0.0.1",
    "--port", "31000",
    "--tp-size", "2",
    "--random-seed", "7",
    "--speculative-algorithm", "EAGLE3",
    "--speculative-draft-model-path", "/models/draft",
    "--speculative-num-steps", "3",
    "--speculative-eagle-topk", "1",
    "--speculative-num-draft-tokens", "4",
    "--max-running-requests", "16",
    "--enable-metrics",
    "--mem-fraction-static", "0.7",
]  # fmt: skip


def run_spec(argv: tuple[str, ...], env: dict[str, str], record: Path) -> dict:
    subprocess.run(list(argv), env=env, check=True, timeout=60)
    return json.loads(record.read_text())


def test_0_5_23_uses_sglang_serve_from_path_with_exact_argv_and_clean_env(env_dirs: dict[str, Path]) -> None:
    python = make_stand_in(env_dirs["venv_bin"] / "python", version="0.5.23", **_rc(env_dirs))
    sglang = make_stand_in(env_dirs["path_bin"] / "sglang", version="0.5.23", **_rc(env_dirs))
    spec = SglangEngine().launch_spec(eagle3_profile(python), port=31000, draft_path=None)
    assert spec.argv == (str(sglang), "serve", *SERVER_ARGS_0523)
    assert spec.draft_path == Path("/models/draft") and spec.base_url == "http://127.0.0.1:31000"
    seen = run_spec(spec.argv, spec.env, env_dirs["record"])
    assert seen["argv"][1:] == ["serve", *SERVER_ARGS_0523]
    assert "SGLANG_STRAY_FROM_SHELL" not in seen["env"]
    assert seen["env"]["NCCL_DEBUG"] == "WARN" and seen["env"]["HF_HUB_OFFLINE"] == "1"
    inherited = {k: os.environ[k] for k in BASE_ENV_KEYS if k in os.environ}
    assert spec.env == {**inherited, "NCCL_DEBUG": "WARN"}
    assert inherited["PATH"] == f"{env_dirs['path_bin']}:/usr/bin:/bin" and inherited["HF_HUB_OFFLINE"] == "1"


def test_console_script_beside_the_interpreter_wins_over_path(env_dirs: dict[str, Path]) -> None:
    python = make_stand_in(env_dirs["venv_bin"] / "python", version="0.5.23", **_rc(env_dirs))
    beside = make_stand_in(env_dirs["venv_bin"] / "sglang", version="0.5.23", **_rc(env_dirs))
    make_stand_in(env_dirs["path_bin"] / "sglang", version="0.5.23", **_rc(env_dirs))
    spec = SglangEngine().launch_spec(eagle3_profile(python), port=31000, draft_path=None)
    assert spec.argv[:2] == (str(beside), "serve")


def test_0_4_6_uses_launch_server_module_even_with_sglang_on_path(env_dirs: dict[str, Path]) -> None:
    python = make_stand_in(env_dirs["venv_bin"] / "python", version="0.4.6.post5", **_rc(env_dirs))
    make_stand_in(env_dirs["path_bin"] / "sglang", version="0.4.6.post5", **_rc(env_dirs))
    spec = SglangEngine().launch_spec(eagle3_profile(python), port=31000, draft_path=None)
    assert spec.argv == (str(python), "-m", "sglang.launch_server", *SERVER_ARGS_0523)
    seen = run_spec(spec.argv, spec.env, env_dirs["record"])
    assert seen["argv"][1:] == ["-m", "sglang.launch_server", *SERVER_ARGS_0523]


def test_0_5_23_without_console_script_falls_back_to_module(env_dirs: dict[str, Path]) -> None:
    python = make_stand_in(env_dirs["venv_bin"] / "python", version="0.5.23", **_rc(env_dirs))
    spec = SglangEngine().launch_spec(eagle3_profile(python), port=1, draft_path=None)
    assert spec.argv[:3] == (str(python), "-m", "sglang.launch_server")


def test_overlay_draft_metrics_off_api_key_and_no_spec(env_dirs: dict[str, Path]) -> None:
    python = make_stand_in(env_dirs["venv_bin"] / "python", version="0.5.23", **_rc(env_dirs))
    profile = eagle3_profile(python, enable_metrics=False, api_key="k", extra_args=[], max_running_requests=None)
    spec = SglangEngine().launch_spec(profile, port=5, draft_path=Path("/tmp/overlay"))
    assert spec.argv[5:] == (
        "--host", "127.0.0.1", "--port", "5", "--tp-size", "2", "--random-seed", "7",
        "--speculative-algorithm", "EAGLE3", "--speculative-draft-model-path", "/tmp/overlay",
        "--speculative-num-steps", "3", "--speculative-eagle-topk", "1", "--speculative-num-draft-tokens", "4",
        "--api-key", "k",
    )  # fmt: skip
    assert spec.draft_path == Path("/tmp/overlay")
    plain = eagle3_profile(python, speculative=None, extra_args=[])
    argv = SglangEngine().launch_spec(plain, port=5, draft_path=None).argv
    assert not any(a.startswith("--speculative") for a in argv)


def test_probe_is_cached_per_interpreter(env_dirs: dict[str, Path]) -> None:
    python = make_stand_in(env_dirs["venv_bin"] / "python", version="0.5.23", **_rc(env_dirs))
    assert probe_sglang_version(str(python)) == "0.5.23"
    assert probe_sglang_version(str(python)) == "0.5.23"
    assert env_dirs["count"].read_text() == "probe\n"


def test_sglang_not_installed_is_a_profile_error(env_dirs: dict[str, Path]) -> None:
    python = make_stand_in(env_dirs["venv_bin"] / "python", version=None, **_rc(env_dirs))
    with pytest.raises(ProfileError) as info:
        SglangEngine().launch_spec(eagle3_profile(python, source="specdec.yaml"), port=1, draft_path=None)
    assert str(info.value) == (
        f"specdec.yaml: profiles.eagle3.python: sglang is not installed for {python} (importlib.metadata found no "
        "'sglang'); set python: to the interpreter of the environment that has it, "
        "or pip install 'sglang>=0.5.23' there"
    )


def test_partial_steps_topk_tokens_is_a_profile_error(env_dirs: dict[str, Path]) -> None:
    python = make_stand_in(env_dirs["venv_bin"] / "python", version="0.5.23", **_rc(env_dirs))
    profile = eagle3_profile(python, source="specdec.yaml", speculative={"algorithm": "EAGLE3", "num_steps": 3})
    with pytest.raises(ProfileError) as info:
        SglangEngine().launch_spec(profile, port=1, draft_path=None)
    assert str(info.value) == (
        "specdec.yaml: profiles.eagle3.speculative: num_steps, eagle_topk and num_draft_tokens must be set together "
        "or not at all; missing speculative.eagle_topk, speculative.num_draft_tokens"
    )


def test_version_rows() -> None:
    assert version_row("0.5.23").since == "0.5.23" and version_row("0.6.1").since == "0.5.23"
    assert version_row("0.5.0").since == "0.4.6.post5" and version_row("0.3.0").since == "0.4.6.post5"
    assert version_row(None).since == "0.5.23" and version_row("garbage").since == "0.5.23"
    assert version_row("0.5.23").removed_flags["--cuda-graph-max-bs"] == (
        "--cuda-graph-max-bs-decode / --cuda-graph-max-bs-prefill"
    )
    assert "--cuda-graph-max-bs" not in version_row("0.4.6.post5").removed_flags


def test_flag_issues_follow_the_installed_version(env_dirs: dict[str, Path]) -> None:
    new = make_stand_in(env_dirs["venv_bin"] / "python", version="0.5.23", **_rc(env_dirs))
    args = ["--cuda-graph-max-bs=8", "--disable-cuda-graph", "--enable-symm-mem"]
    profile = eagle3_profile(new, extra_args=args, env={"NCCL_NVLS_ENABLE": "0"})
    issues = [(i.severity, i.key, i.value, i.fix) for i in SglangEngine().flag_issues(profile)]
    assert issues == [
        ("error", "extra_args", "--cuda-graph-max-bs=8",
         "use --cuda-graph-max-bs-decode / --cuda-graph-max-bs-prefill"),
        ("warning", "extra_args", "--disable-cuda-graph",
         "use --cuda-graph-backend-decode=disabled --cuda-graph-backend-prefill=disabled"),
        ("warning", "env.NCCL_NVLS_ENABLE", "0", "drop NCCL_NVLS_ENABLE from env or drop --enable-symm-mem"),
    ]  # fmt: skip
    old_bin = env_dirs["venv_bin"].parent / "old"
    old_bin.mkdir()
    old = make_stand_in(old_bin / "python", version="0.4.6.post5", **_rc(env_dirs))
    assert SglangEngine().flag_issues(eagle3_profile(old, extra_args=["--cuda-graph-max-bs", "8"])) == []


def test_clean_env_and_api_key_env() -> None:
    src = {"PATH": "/bin", "HOME": "/h", "SECRET": "x", "CUDA_VISIBLE_DEVICES": "0"}
    assert clean_env({"A": "1"}, source=src) == {"PATH": "/bin", "HOME": "/h", "CUDA_VISIBLE_DEVICES": "0", "A": "1"}
    profile = Profile(name="p", api_key_env="MY_KEY", source="specdec.yaml")
    assert resolve_api_key(profile, source={"MY_KEY": "s3"}) == "s3"
    with pytest.raises(ProfileError) as info:
        resolve_api_key(profile, source={})
    assert str(info.value) == (
        "specdec.yaml: profiles.p.api_key_env: variable 'MY_KEY' is not set; export it or give api_key:"
    )


def test_get_engine_dispatch() -> None:
    assert get_engine(Profile(name="s", server="sglang", model_path="m")).name == "sglang"
    assert get_engine(Profile(name="r")).name == "reference"
    assert get_engine(Profile(name="v", server="vllm", model_path="m")).name == "vllm"


def _rc(dirs: dict[str, Path]) -> dict[str, Path]:
    return {"record": dirs["record"], "count": dirs["count"]}


# --------------------------------------------------------------------------------------------- HTTP surface

#: /server_info as SGLang 0.5.23 builds it: ``ServerArgs.resolved_dict()`` fields at the top level
#: (``srt/server_args.py``, fields from ``arg_groups/fields/*.py``) + ``launch_command`` + scheduler info
#: (``srt/utils/common.py::build_server_info``) + ``startup_time``, ``internal_states``, ``version``, ``frontend``
#: (``srt/entrypoints/http_server.py::server_info``); internal_states entries from
#: ``managers/scheduler_components/internal_state.py`` (_add_topology, _add_speculative).
SERVER_INFO_0523 = {
    "model_path": "meta-llama/Llama-3.1-8B-Instruct",
    "tp_size": 1,
    "random_seed": 7,
    "enable_metrics": True,
    "max_running_requests": 48,
    "speculative_algorithm": "EAGLE3",
    "speculative_draft_model_path": "/models/draft",
    "speculative_num_steps": 3,
    "speculative_eagle_topk": 1,
    "speculative_num_draft_tokens": 4,
    "cuda_graph_max_bs_decode": 8,
    "launch_command": "sglang serve --model-path meta-llama/Llama-3.1-8B-Instruct",
    "max_total_num_tokens": 500000,
    "kv_events": None,
    "startup_time": 12.5,
    "internal_states": [
        {
            "world_size": 1,
            "startup_time": 11.0,
            "effective_max_running_requests_per_dp": 48,
            "last_gen_throughput": 151.2,
            "avg_spec_accept_length": 2.61,
        }
    ],
    "version": "0.5.23",
    "frontend": "python",
}

#: /get_server_info of 0.4.6.post5 (``srt/entrypoints/http_server.py::get_server_info``): dataclass fields of
#: ServerArgs + scheduler info + internal_states + version; no max_running_requests resolved here.
SERVER_INFO_046 = {
    "model_path": "m",
    "speculative_algorithm": "EAGLE",
    "speculative_num_steps": 5,
    "speculative_eagle_topk": 4,
    "speculative_num_draft_tokens": 8,
    "max_running_requests": None,
    "internal_states": [{"effective_max_running_requests_per_dp": 32, "avg_spec_accept_length": 3.1}],
    "version": "0.4.6.post5",
}


def client_for(routes: dict[tuple[str, str], httpx.Response | Exception], seen: list[httpx.Request]) -> httpx.Client:
    def handler(request: httpx.Request) -> httpx.Response:
        seen.append(request)
        answer = routes.get((request.method, request.url.path), httpx.Response(404))
        if isinstance(answer, Exception):
            raise answer
        return answer

    return httpx.Client(base_url="http://127.0.0.1:31000", transport=httpx.MockTransport(handler))


PROFILE = Profile(name="e", server="sglang", model_path="m", api_key="k")


def test_effective_config_reads_server_info_0_5_23() -> None:
    seen: list[httpx.Request] = []
    with client_for({("GET", "/server_info"): httpx.Response(200, json=SERVER_INFO_0523)}, seen) as client:
        got = SglangEngine().effective_config(client, PROFILE)
    assert got == EffectiveConfig("0.5.23", "EAGLE3", 3, 1, 4, 48, raw=SERVER_INFO_0523)
    assert [r.url.path for r in seen] == ["/server_info"]
    assert seen[0].headers["authorization"] == "Bearer k"


def test_effective_config_falls_back_to_get_server_info_on_404() -> None:
    seen: list[httpx.Request] = []
    routes = {("GET", "/get_server_info"): httpx.Response(200, json=SERVER_INFO_046)}
    with client_for(routes, seen) as client:  # type: ignore[arg-type]
        got = SglangEngine().effective_config(client, PROFILE)
    assert (got.version, got.speculative_algorithm, got.num_steps, got.eagle_topk, got.num_draft_tokens) == (
        "0.4.6.post5", "EAGLE", 5, 4, 8,
    )  # fmt: skip
    assert got.max_running_requests == 32
    assert [r.url.path for r in seen] == ["/server_info", "/get_server_info"]


def test_effective_config_errors_are_server_errors() -> None:
    with client_for({("GET", "/server_info"): httpx.Response(500, text="boom")}, []) as client:
        with pytest.raises(ServerError, match=r"^GET /server_info: HTTP 500: boom$"):
            SglangEngine().effective_config(client, PROFILE)
    with client_for({}, []) as client:
        with pytest.raises(ServerError, match=r"^GET /get_server_info: HTTP 404; the server has neither"):
            SglangEngine().effective_config(client, PROFILE)


@pytest.mark.parametrize(
    ("health", "generate", "ready"),
    [
        (httpx.Response(200), httpx.Response(200, json={"text": "!", "meta_info": {}}), True),
        (httpx.Response(503), httpx.Response(200, json={"text": "!"}), False),
        (httpx.ConnectError("refused"), httpx.Response(200, json={"text": "!"}), False),
        (httpx.Response(200), httpx.Response(500), False),
        (httpx.Response(200), httpx.ReadTimeout("slow"), False),
        (httpx.Response(200), httpx.Response(200, text="not json"), False),
    ],
)
def test_probe_ready(health: httpx.Response | Exception, generate: httpx.Response | Exception, ready: bool) -> None:
    seen: list[httpx.Request] = []
    routes = {("GET", "/health_generate"): health, ("POST", "/generate"): generate}
    with client_for(routes, seen) as client:
        assert SglangEngine().probe_ready(client, PROFILE) is ready
    if ready:
        body = json.loads(seen[1].content)
        assert body["sampling_params"]["max_new_tokens"] == 1


#: /metrics of SGLang 0.5.23 (``srt/observability/metrics_collector.py``): tokenizer counters carry labels
#: model_name, engine_type (+ is_streaming on the token counters); the scheduler gauges add tp_rank etc.
METRICS_0523 = """\
# HELP sglang:generation_tokens_total Number of generation tokens processed.
# TYPE sglang:generation_tokens_total counter
sglang:generation_tokens_total{engine_type="unified",is_streaming="true",model_name="m"} 300.0
sglang:generation_tokens_total{engine_type="unified",is_streaming="false",model_name="m"} 100.0
# HELP sglang:generation_tokens_created Number of generation tokens processed.
# TYPE sglang:generation_tokens_created gauge
sglang:generation_tokens_created{engine_type="unified",is_streaming="true",model_name="m"} 1.7e+09
# HELP sglang:spec_verify_calls_total Number of speculative decoding verification calls.
# TYPE sglang:spec_verify_calls_total counter
sglang:spec_verify_calls_total{engine_type="unified",model_name="m"} 160.0
# HELP sglang:spec_accept_length The average acceptance length of speculative decoding.
# TYPE sglang:spec_accept_length gauge
sglang:spec_accept_length{engine_type="unified",model_name="m",moe_ep_rank="0",pp_rank="0",tp_rank="0"} 2.5
# HELP sglang:time_to_first_token_seconds Histogram of time to first token in seconds.
# TYPE sglang:time_to_first_token_seconds histogram
sglang:time_to_first_token_seconds_bucket{engine_type="unified",le="0.1",model_name="m"} 3.0
sglang:time_to_first_token_seconds_bucket{engine_type="unified",le="+Inf",model_name="m"} 4.0
sglang:time_to_first_token_seconds_count{engine_type="unified",model_name="m"} 4.0
sglang:time_to_first_token_seconds_sum{engine_type="unified",model_name="m"} 0.42
"""


def test_counters_sum_over_label_sets() -> None:
    assert SglangEngine().counters(METRICS_0523) == SpecCounters(generation_tokens=400.0, verify_calls=160.0)


def test_counters_absent_are_none() -> None:
    text = '# TYPE sglang:num_running_reqs gauge\nsglang:num_running_reqs{tp_rank="0"} 1.0\n'
    assert SglangEngine().counters(text) == SpecCounters()


# Decode log lines as SGLang prints them (python/sglang/srt/managers/scheduler_components/metrics_reporter.py).
DECODE_0523 = (
    "[2026-11-30 12:00:00] Decode batch, #running-req: 1, #token: 90, token usage: 0.00, accept len: 2.63, "
    "accept rate: 0.54, cuda graph: False, gen throughput (token/s): 130.20, #queue-req: 0"
)
DECODE_OLD = (
    "[2025-01-01 00:00:00] Decode batch. #running-req: 8, #token: 900, accept len: 3.10, "
    "gen throughput (token/s): 512.5"
)


def test_parse_decode_line_current_and_old_formats() -> None:
    from pytest_specdec.engines.sglang import DecodeLine, parse_decode_line

    assert parse_decode_line(DECODE_0523) == DecodeLine(2.63, 0.54, False, 130.2)
    assert parse_decode_line(DECODE_OLD) == DecodeLine(3.10, None, None, 512.5)
    assert parse_decode_line("Prefill batch, #new-seq: 1") is None


def test_graph_warning_only_when_the_profile_expects_graphs() -> None:
    from pytest_specdec.engines.sglang import graph_warning
    from pytest_specdec.profiles.schema import Profile

    profile = Profile(name="eagle3", server="sglang", model_path="m")
    log = "\n".join([DECODE_0523, DECODE_0523.replace("cuda graph: False", "cuda graph: True")])
    assert graph_warning(profile, log) == (
        "profile eagle3: 1 of 2 'Decode batch' log lines say 'cuda graph: False' although the profile does not "
        "disable CUDA graphs (capture failed, or batches exceed --cuda-graph-max-bs-decode)"
    )
    disabled = profile.model_copy(update={"extra_args": ["--disable-cuda-graph"]})
    assert graph_warning(disabled, log) is None
    assert graph_warning(profile, DECODE_0523.replace("cuda graph: False", "cuda graph: True")) is None


def test_probe_sees_the_profiles_env(tmp_path: Path) -> None:
    """An sglang reachable only through the profile's PYTHONPATH is found (seen on the GPU machine, issue 12)."""
    import sys

    dist = tmp_path / "site" / "sglang-0.5.17.dist-info"
    dist.mkdir(parents=True)
    (dist / "METADATA").write_text("Metadata-Version: 2.1\nName: sglang\nVersion: 0.5.17\n")
    probe_sglang_version.cache_clear()
    assert probe_sglang_version(sys.executable) is None
    profile = eagle3_profile(sys.executable, env={"PYTHONPATH": str(tmp_path / "site")})
    assert SglangEngine().version(profile) == "0.5.17"


def test_reset_prefix_cache_retries_while_busy_then_flushes() -> None:
    """Issue 14.4: SGLang's /flush_cache answers 400 while requests are in flight; the reset is retried."""
    answers = [httpx.Response(400, text="Cache not flushed because there are pending requests."), httpx.Response(200)]
    seen: list[httpx.Request] = []

    def handler(request: httpx.Request) -> httpx.Response:
        seen.append(request)
        return answers.pop(0)

    with httpx.Client(base_url="http://127.0.0.1:31000", transport=httpx.MockTransport(handler)) as http:
        assert SglangEngine().reset_prefix_cache(http, PROFILE) == "reset: POST /flush_cache"
    assert [(r.method, r.url.path, r.headers["authorization"]) for r in seen] == [
        ("POST", "/flush_cache", "Bearer k"),
        ("POST", "/flush_cache", "Bearer k"),
    ]


def test_reset_that_stays_refused_is_recorded_not_raised() -> None:
    from pytest_specdec.engines.base import post_reset

    busy = httpx.MockTransport(lambda r: httpx.Response(400, text="Cache not flushed because there are\npending"))
    with httpx.Client(base_url="http://x", transport=busy) as http:
        # "for 0 s" on a quiet machine; the retries of a 0.3 s budget ran past 0.5 s on a busy one (flake hunt 217).
        line = post_reset(http, "/flush_cache", {}, retry_s=0.3)
        assert line.removesuffix("0 s").removesuffix("1 s") == (
            "not reset: POST /flush_cache answered HTTP 400 (Cache not flushed because there are pending) for "
        ), line
    with httpx.Client(base_url="http://x", transport=httpx.MockTransport(lambda r: httpx.Response(404))) as http:
        assert post_reset(http, "/flush_cache", {}) == "not reset: POST /flush_cache answered HTTP 404 ()"


def test_scheduler_accept_length_from_server_info() -> None:
    seen: list[httpx.Request] = []
    routes: dict[tuple[str, str], httpx.Response | Exception] = {
        ("GET", "/server_info"): httpx.Response(200, json=SERVER_INFO_0523)
    }
    assert SglangEngine().scheduler_accept_length(client_for(routes, seen), PROFILE) == 2.61
    no_key = {**SERVER_INFO_0523, "internal_states": [{"world_size": 1}]}
    routes = {("GET", "/server_info"): httpx.Response(200, json=no_key)}
    assert SglangEngine().scheduler_accept_length(client_for(routes, seen), PROFILE) is None
    routes = {("GET", "/server_info"): httpx.Response(500)}
    assert SglangEngine().scheduler_accept_length(client_for(routes, seen), PROFILE) is None
