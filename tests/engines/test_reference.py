"""engines/reference.py: the bundled server's argv head, supported flags and clean env."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest

from pytest_specdec.core.errors import ProfileError
from pytest_specdec.engines.reference import ENV_KNOBS, REFERENCE_FLAGS, ReferenceEngine
from pytest_specdec.engines.rules import resolve_paths
from pytest_specdec.profiles.schema import Profile
from pytest_specdec.run.session import shell_knobs_left_out
from tests.helpers import IN_PROCESS_SHOWN_INI, run_in_process

REPO = str(Path(__file__).resolve().parents[2])


def profile(**extra: object) -> Profile:
    fields: dict[str, object] = {
        "name": "eagle3",
        "source": "specdec.yaml",
        "model_path": "/assets/target",
        "speculative": {"algorithm": "EAGLE3", "draft_model_path": "/assets/draft", "num_steps": 2,
                        "eagle_topk": 1, "num_draft_tokens": 3},
    }  # fmt: skip
    fields.update(extra)
    return Profile.model_validate(fields)


def test_argv_is_the_refserver_module_with_sglang_flags() -> None:
    spec = ReferenceEngine().launch_spec(profile(extra_args=["--decode-log-interval", "1"]), port=4000, draft_path=None)
    assert spec.argv == (
        sys.executable, "-m", "pytest_specdec.refserver",
        "--model-path", "/assets/target", "--host", "127.0.0.1", "--port", "4000", "--tp-size", "1",
        "--random-seed", "0", "--speculative-algorithm", "EAGLE3", "--speculative-draft-model-path", "/assets/draft",
        "--speculative-num-steps", "2", "--speculative-eagle-topk", "1", "--speculative-num-draft-tokens", "3",
        "--enable-metrics", "--decode-log-interval", "1",
    )  # fmt: skip
    assert set(a for a in spec.argv if a.startswith("--")) <= REFERENCE_FLAGS


def test_env_is_clean_and_this_package_is_importable(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("OMP_NUM_THREADS", "8")
    monkeypatch.setenv("SPECDEC_REF_FAULT", "crash")
    env = ReferenceEngine().launch_spec(profile(), port=1, draft_path=None).env
    assert "OMP_NUM_THREADS" not in env and "SPECDEC_REF_FAULT" not in env
    assert env["PYTHONPATH"].split(os.pathsep)[0] == REPO
    env = (
        ReferenceEngine()
        .launch_spec(profile(env={"OMP_NUM_THREADS": "1", "PYTHONPATH": "/x"}), port=1, draft_path=None)
        .env
    )
    assert env["OMP_NUM_THREADS"] == "1"
    assert env["PYTHONPATH"] == os.pathsep.join([REPO, "/x"])


def test_unsupported_flag_is_a_profile_error() -> None:
    with pytest.raises(ProfileError) as info:
        ReferenceEngine().launch_spec(profile(extra_args=["--mem-fraction-static=0.7"]), port=1, draft_path=None)
    assert str(info.value).startswith(
        "specdec.yaml: profiles.eagle3.extra_args: --mem-fraction-static not supported by the reference server; "
        "supported: --api-key, --decode-log-interval,"
    )
    issues = ReferenceEngine().flag_issues(profile(extra_args=["--cuda-graph-max-bs", "8"]))
    assert [(i.severity, i.key, i.value) for i in issues] == [("error", "extra_args", "--cuda-graph-max-bs")]


def test_bundled_defaults_reach_the_argv() -> None:
    p = resolve_paths(Profile.model_validate({"name": "r", "speculative": {"algorithm": "EAGLE3"}}))
    argv = ReferenceEngine().launch_spec(p, port=1, draft_path=None).argv
    assert argv[argv.index("--model-path") + 1].endswith("refserver/assets/target")
    assert argv[argv.index("--speculative-draft-model-path") + 1].endswith("refserver/assets/draft-eagle3")


def test_flags_are_read_from_the_refserver_parser() -> None:
    brief = {
        "--model-path", "--host", "--port", "--api-key", "--random-seed", "--log-level", "--decode-log-interval",
        "--enable-metrics", "--max-running-requests", "--served-model-name", "--skip-server-warmup", "--tp-size",
        "--speculative-algorithm", "--speculative-draft-model-path", "--speculative-num-steps",
        "--speculative-eagle-topk", "--speculative-num-draft-tokens",
    }  # fmt: skip
    assert brief <= REFERENCE_FLAGS
    assert "--cuda-graph-max-bs" not in REFERENCE_FLAGS
    spec = ReferenceEngine().launch_spec(profile(extra_args=["--ref-fault-never-ready"]), port=1, draft_path=None)
    assert spec.argv[-1] == "--ref-fault-never-ready"


def test_flag_issues_catch_what_the_refserver_rejects() -> None:
    p = profile(tp_size=2, speculative={"algorithm": "NGRAM"})
    assert [(i.key, i.value, i.fix) for i in ReferenceEngine().flag_issues(p)] == [
        ("tp_size", 2, "set tp_size: 1, or the number of nodes.hosts"),
        ("speculative.algorithm", "NGRAM", "use algorithm: EAGLE3, or server: sglang for other algorithms"),
    ]
    p = profile(speculative={"algorithm": "EAGLE3", "num_steps": 2, "eagle_topk": 2, "num_draft_tokens": 5})
    assert [i.key for i in ReferenceEngine().flag_issues(p)] == ["speculative.eagle_topk"]


def test_counters_read_the_per_position_series() -> None:
    text = (
        "# TYPE sglang:spec_verify_calls_total counter\n"
        'sglang:spec_verify_calls_total{model_name="m",engine_type="unified"} 10.0\n'
        "# TYPE refserver:spec_decode_num_accepted_tokens_per_pos_total counter\n"
        'refserver:spec_decode_num_accepted_tokens_per_pos_total{model_name="m",engine_type="unified",position="1"}'
        " 4.0\n"
        'refserver:spec_decode_num_accepted_tokens_per_pos_total{model_name="m",engine_type="unified",position="0"}'
        " 8.0\n"
    )
    counters = ReferenceEngine().counters(text)
    assert (counters.verify_calls, counters.accepted_per_position) == (10.0, (8.0, 4.0))
    assert counters.per_position_series == "refserver:spec_decode_num_accepted_tokens_per_pos_total"
    assert ReferenceEngine().counters("").per_position_series is None


def test_env_knobs_are_the_ones_the_server_reads() -> None:
    decoding = pytest.importorskip("pytest_specdec.refserver.decoding")  # imports torch
    assert ENV_KNOBS == (decoding.FORWARD_DELAY_ENV, decoding.FORWARD_SLOWDOWN_ENV)


def test_a_knob_in_the_shell_but_not_in_the_profile_is_named_with_the_fix() -> None:
    """An adversarial trial: ``SPECDEC_REF_FORWARD_SLOWDOWN=2 pytest ...`` measured an unslowed server, silently (the
    server's environment is clean: ``clean_env``)."""
    shell = {"SPECDEC_REF_FORWARD_SLOWDOWN": "2", "SPECDEC_REF_ASSETS": "/x", "PATH": "/bin"}
    slowed = profile(name="eagle3-slow", env={"SPECDEC_REF_FORWARD_SLOWDOWN": "3"})
    points = [profile(name="eagle3@num_steps=1"), profile(name="eagle3@num_steps=2")]
    assert shell_knobs_left_out([*points, slowed], shell) == [
        'SPECDEC_REF_FORWARD_SLOWDOWN=2 is set in the shell, but the reference server of profile eagle3 never sees it '
        "(servers start with a clean environment); set it under the profile's env: (env: "
        '{SPECDEC_REF_FORWARD_SLOWDOWN: "2"}), or unset it in the shell'
    ]
    # Set in the profile, a server not launched (--server-url), or another engine: nothing to say.
    given = [slowed, profile(url="http://127.0.0.1:1"), profile(server="sglang")]
    assert shell_knobs_left_out(given, shell) == []
    assert shell_knobs_left_out(points, {"SPECDEC_REF_ASSETS": "/x"}) == []  # the test suite's, not a knob


def test_the_run_warns_once_of_a_shell_knob(pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SPECDEC_REF_FORWARD_DELAY_MS", "5")
    pytester.makeini(IN_PROCESS_SHOWN_INI)
    pytester.makefile(".yaml", specdec="profiles:\n  baseline: {server: reference}\n  eagle3:\n    extends: baseline\n"
                      "    speculative: {algorithm: EAGLE3, num_steps: 3, eagle_topk: 1, num_draft_tokens: 4}\n")
    pytester.makepyfile(test_perf="def test_speed(specdec_run):\n    pass\n")
    result = run_in_process(pytester, "--specdec-check", "--server-profile=eagle3,baseline",
                            "--specdec-sweep=num_steps=1,2")  # fmt: skip
    result.stdout.fnmatch_lines([
        "*SpecdecWarning: SPECDEC_REF_FORWARD_DELAY_MS=5 is set in the shell, but the reference server of profiles "
        "eagle3, baseline never sees it *; set it under the profile's env: (env: {SPECDEC_REF_FORWARD_DELAY_MS: "
        '"5"}), or unset it in the shell',
    ])  # fmt: skip
    assert result.stdout.str().count("SPECDEC_REF_FORWARD_DELAY_MS=5 is set") == 1
