"""Tests of pytest_specdec.core.redaction: one secret-name rule for env, argv, messages and kept logs."""

from __future__ import annotations

import pytest

from pytest_specdec.core.redaction import REDACTED, is_secret, launch_secrets, redact, redact_argv, redact_env


@pytest.mark.parametrize(
    ("name", "secret"),
    [
        ("HF_TOKEN", True),
        ("HUGGING_FACE_HUB_TOKEN", True),
        ("OPENAI_API_KEY", True),
        ("OPENAI_APIKEY", True),
        ("AWS_SECRET_ACCESS_KEY", True),
        ("db_password", True),
        ("--hf-token", True),
        ("--api-key", True),
        ("--admin-api-key", True),
        ("hf-token", True),
        ("TOKENIZERS_PARALLELISM", False),
        ("MAX_TOKENS", False),
        ("--speculative-num-draft-tokens", False),
        ("--max-total-tokens", False),
        ("KEYBOARD", False),
        ("MONKEY_PATCH", False),
        ("NCCL_PROTO", False),
        ("", False),
    ],
)
def test_is_secret(name: str, secret: bool) -> None:
    assert is_secret(name) is secret


def test_redact_env_and_argv() -> None:
    env = {"HF_TOKEN": "hf_x", "OPENAI_API_KEY": "sk", "db_password": "p", "NCCL_PROTO": "LL", "MAX_TOKENS": "9"}
    assert redact_env(env) == {
        "HF_TOKEN": REDACTED,
        "MAX_TOKENS": "9",
        "NCCL_PROTO": "LL",
        "OPENAI_API_KEY": REDACTED,
        "db_password": REDACTED,
    }
    argv = ["sglang", "--api-key", "sk-123", "--x", '{"key": "sk-123"}', "--admin-api-key=abc", "--hf-token", "t",
            "--speculative-num-draft-tokens", "4"]  # fmt: skip
    assert redact_argv(argv, "sk-123") == [
        "sglang",
        "--api-key",
        REDACTED,
        "--x",
        '{"key": "<redacted>"}',
        "--admin-api-key=<redacted>",
        "--hf-token",
        REDACTED,
        "--speculative-num-draft-tokens",
        "4",
    ]


def test_launch_secrets_are_found_by_the_same_rule_and_redacted_from_text() -> None:
    argv = ["python", "-m", "sglang.launch_server", "--api-key", "sk-live-123456", "--hf-token=hf_abcdef",
            "--speculative-num-draft-tokens", "1234"]  # fmt: skip
    env = {"OPENAI_API_KEY": "sk-openai-99", "TOKENIZERS_PARALLELISM": "false", "MY_SECRET": "abc"}
    secrets = launch_secrets(argv, env)
    # longest first; "abc" is too short to search for in text; the draft-token count is not a secret
    assert secrets == ("sk-live-123456", "sk-openai-99", "hf_abcdef")
    text = "launch --api-key sk-live-123456 token hf_abcdef; env sk-openai-99; parallelism false; tokens 1234"
    assert redact(text, secrets) == (
        "launch --api-key <redacted> token <redacted>; env <redacted>; parallelism false; tokens 1234"
    )
