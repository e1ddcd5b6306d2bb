"""The reference server's flags: rejection messages, SGLang's rewrites and asserts, and the aux-id mapping."""

from __future__ import annotations

import logging
import subprocess
import sys

import pytest

pytest.importorskip("torch", reason="the reference server needs the reference extra (torch)")

from pytest_specdec.refserver.args import MAX_RUNNING_WARNING, TOPK_WARNING, ArgsError, parse_args, resolve_args
from pytest_specdec.refserver.decoding import capture_indices

BASE = ["--model-path", "/nonexistent/target"]
SPEC = ["--speculative-algorithm", "EAGLE3", "--speculative-draft-model-path", "/nonexistent/draft"]


def run_cli(*argv: str) -> subprocess.CompletedProcess:
    # Flag errors happen before any model is loaded, so the paths need not exist.
    return subprocess.run([sys.executable, "-m", "pytest_specdec.refserver", *argv], capture_output=True, text=True,
                          timeout=60)


def test_unknown_flag_is_named_and_exits_2() -> None:
    res = run_cli(*BASE, "--cuda-graph-max-bs-decode", "8")
    assert res.returncode == 2
    assert ("error: unsupported flag --cuda-graph-max-bs-decode: the reference server implements only a subset of "
            "`sglang serve` (see --help)") in res.stderr


def test_tp_size_above_one_rejected() -> None:
    res = run_cli(*BASE, "--tp-size", "2")
    assert res.returncode == 2
    assert ("python -m pytest_specdec.refserver: error: --tp-size 2: the reference server runs on one CPU process; "
            "only --tp-size 1 (or --tp-size equal to --nnodes in node mode) is supported") in res.stderr


def test_all_three_omitted_explains_tree_drafting() -> None:
    res = run_cli(*BASE, *SPEC)
    assert res.returncode == 2
    assert ("error: --speculative-num-steps/--speculative-eagle-topk/--speculative-num-draft-tokens omitted: SGLang "
            "would auto-choose (5, 4, 8) for LlamaForCausalLM, which needs tree drafting (topk 4); the reference "
            "server implements chain drafting (topk 1) only. Pass e.g. --speculative-num-steps 3 "
            "--speculative-eagle-topk 1 --speculative-num-draft-tokens 4") in res.stderr


def test_topk_above_one_rejected() -> None:
    res = run_cli(*BASE, *SPEC, "--speculative-num-steps", "3", "--speculative-eagle-topk", "4",
                  "--speculative-num-draft-tokens", "8")
    assert res.returncode == 2
    assert ("error: --speculative-eagle-topk 4: the reference server implements chain drafting (topk 1) only; "
            "pass --speculative-eagle-topk 1 --speculative-num-draft-tokens 4") in res.stderr


def test_steps_omitted_is_a_bare_assertion_like_sglang() -> None:
    res = run_cli(*BASE, *SPEC, "--speculative-eagle-topk", "1", "--speculative-num-draft-tokens", "4")
    assert res.returncode == 1
    assert "Traceback (most recent call last)" in res.stderr
    assert res.stderr.rstrip().endswith("AssertionError")


def test_unknown_algorithm_is_sglang_value_error() -> None:
    res = run_cli(*BASE, "--speculative-algorithm", "medusa", "--speculative-draft-model-path", "/x",
                  "--speculative-num-steps", "3", "--speculative-eagle-topk", "1")
    assert res.returncode == 1
    assert "ValueError: Unknown speculative algorithm name: MEDUSA" in res.stderr


def test_help_lists_test_affordances_group() -> None:
    res = run_cli("--help")
    assert res.returncode == 0
    assert "test affordances:" in res.stdout
    for flag in ("--ref-fault-oom-at-startup", "--ref-fault-never-ready", "--ref-fault-slow-start",
                 "--ref-fault-stall-after-tokens", "--ref-fault-die-after-requests", "--ref-fault-orphan",
                 "--ref-fault-hold-port", "SPECDEC_REF_FORWARD_DELAY_MS", "SPECDEC_REF_FORWARD_SLOWDOWN"):
        assert flag in res.stdout


def test_topk_one_rewrites_draft_tokens_with_sglang_warning(caplog: pytest.LogCaptureFixture) -> None:
    ns = parse_args([*BASE, *SPEC, "--speculative-num-steps", "3", "--speculative-eagle-topk", "1",
                     "--speculative-num-draft-tokens", "8", "--random-seed", "5"])
    with caplog.at_level(logging.WARNING, logger="pytest_specdec.refserver"):
        args = resolve_args(ns)
    assert (args.speculative_num_steps, args.speculative_eagle_topk, args.speculative_num_draft_tokens) == (3, 1, 4)
    assert args.max_running_requests == 48
    assert [r.getMessage() for r in caplog.records] == [MAX_RUNNING_WARNING, TOPK_WARNING]
    assert TOPK_WARNING == ("speculative_num_draft_tokens is adjusted to speculative_num_steps + 1 when "
                            "speculative_eagle_topk == 1")


def test_nextn_alias_and_aliases_of_paths() -> None:
    ns = parse_args(["--model", "/t", "--speculative-algorithm", "nextn", "--speculative-draft-model", "/d",
                     "--speculative-num-steps", "2", "--speculative-eagle-topk", "1",
                     "--speculative-num-draft-tokens", "3", "--max-running-requests", "4"])
    args = resolve_args(ns)
    assert args.speculative_algorithm == "EAGLE"
    assert args.model_path == "/t" and args.speculative_draft_model_path == "/d"
    assert args.max_running_requests == 4


def test_no_speculation_keeps_max_running_unset_and_seed_random() -> None:
    args = resolve_args(parse_args(BASE))
    assert args.speculative_algorithm is None and args.max_running_requests is None
    assert 0 <= args.random_seed < 2**30


def test_standalone_rejected_in_process() -> None:
    ns = parse_args([*BASE, "--speculative-algorithm", "STANDALONE", "--speculative-draft-model-path", "/d"])
    with pytest.raises(ArgsError, match=r"^--speculative-algorithm STANDALONE: the reference server implements "
                                        r"only EAGLE3, EAGLE and NEXTN$"):
        resolve_args(ns)


@pytest.mark.parametrize(
    ("ids", "layers", "expected"),
    [
        ([1, 3, 5], 8, [2, 4, 6]),  # id i -> capture index i + 1
        ([-1, 1, 3], 8, [0, 2, 4]),  # -1 -> embeddings
        ([5, 3, 1], 8, [2, 4, 6]),  # ascending layer order, not list order
        ([3, 3, 1], 8, [2, 4]),  # duplicates captured once
        ([-2, 1, 6, 7], 8, [2, 7]),  # indices outside [0, L) silently dropped
        (None, 8, [2, 4, 5]),  # SGLang default [2, L//2, L-3]
        ([], 32, [2, 16, 29]),
    ],
)
def test_capture_indices(ids: list[int] | None, layers: int, expected: list[int]) -> None:
    assert capture_indices(ids, layers) == expected


def test_draft_window_size_as_sglang() -> None:
    steps = ["--speculative-num-steps", "3", "--speculative-eagle-topk", "1", "--speculative-num-draft-tokens", "4"]
    args = resolve_args(parse_args([*BASE, *SPEC, *steps, "--speculative-draft-window-size", "2"]))
    assert args.speculative_draft_window_size == 2 and args.public_dict()["speculative_draft_window_size"] == 2
    with pytest.raises(ValueError, match=r"^--speculative-draft-window-size must be positive, got 0\.$"):
        resolve_args(parse_args([*BASE, *SPEC, *steps, "--speculative-draft-window-size", "0"]))


def test_every_parsed_flag_reaches_the_server_args() -> None:
    # A flag parsed and then dropped (as --ref-embedding-capture once was) would silently do nothing.
    args = resolve_args(parse_args([*BASE, *SPEC, "--speculative-num-steps", "3", "--speculative-eagle-topk", "1",
                                    "--speculative-num-draft-tokens", "4", "--ref-embedding-capture", "patched",
                                    "--ref-fault-verify-delay-ms", "7"]))
    assert args.ref_embedding_capture == "patched"
    assert args.ref_fault_verify_delay_ms == 7
    assert set(vars(parse_args(BASE))) <= set(args.public_dict())
