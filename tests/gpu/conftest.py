"""Shared set-up of the real-SGLang tests (``tests/gpu/test_part*.py``): the profiles, and ``run_plugin``, which runs
the plugin as a user does (``pytest -m specdec --server-profile=...``) in a pytester project and then checks that
nothing of SGLang is left (zombies included).

Needs a GPU machine with SGLang installed: set ``SPECDEC_SGLANG_PYTHON`` to an interpreter that has sglang (on the
lent H200: ``source .gpu-sglang/part-NN/sgenv.sh``, then ``/tmp/sgvenv/bin/python``). Skipped everywhere else (CI
has no GPU; the recorded outputs in ``tests/data/sglang/`` pin the parsers there instead). The model is the bundled
tiny target and EAGLE-3 draft, with the flags that run on a bare SGLang wheel install
(``../shared/gpu-sglang/README.md``); ``SPECDEC_SGLANG_FLAGS`` replaces them on a runner with a full install (e.g.
``""`` to use SGLang's defaults, CUDA graphs included). ``SPECDEC_SGLANG_GRAPHS=1`` turns CUDA graphs on with the
bundle's flags; on the bundle, install sgl-deep-gemm 0.1.5.post1 beside it first
(``benchmarks/gpu/session-2026-12-02-graphs.sh`` does both).

The tests are split in parts, each under 8 minutes on the H200 without CUDA graphs, so that one part fits one
10-minute device command (the whole set took 560 s + 320 s there). With ``SPECDEC_SGLANG_GRAPHS=1`` (CUDA graphs,
2026-12-02): part 1 took 276 s and part 3 160 s (warm triton and tvm-ffi caches; a fresh machine's first EAGLE-3
launch with graphs took 117 s to ready, 58 s of it the prefill graph capture's compiles). Run one part a command::

    pytest -m gpu tests/gpu/test_part1_verdicts.py         # trained ids pass + speedup, wrong ids fail, EAGLE stopped
    pytest -m gpu tests/gpu/test_part2_crash_and_sweep.py  # the -1 crash named, a num_steps 1..3 sweep
    pytest -m gpu tests/gpu/test_part3_openai_apis.py      # /v1/completions and /v1/chat/completions streams

``SPECDEC_GPU_OUT=DIR`` keeps the plugin's terminal output of every inner run in DIR.
"""

from __future__ import annotations

import json
import os
import shlex
import subprocess
import time
from pathlib import Path

import pytest

from tests.helpers import PROFILE_TEST, plugin_args

SGLANG_PYTHON = os.environ.get("SPECDEC_SGLANG_PYTHON")

REPO = Path(__file__).resolve().parents[2]
ASSETS = REPO / "pytest_specdec" / "refserver" / "assets"
#: ``SPECDEC_SGLANG_GRAPHS=1``: CUDA graphs on, decode graphs captured up to batch size 8 (the tests run at
#: concurrency 1), as SGLang is deployed. EAGLE-3 then needs ``deep_gemm`` importable (sgl-deep-gemm 0.1.5.post1,
#: the version sglang 0.5.17 pins): its draft graph capture imports the DSA backend, which imports deep_gemm on
#: every CUDA build (docs/sglang-gpu.md). Unset: no graphs, the flags every earlier GPU figure was measured with.
GRAPHS = os.environ.get("SPECDEC_SGLANG_GRAPHS") == "1"
FLAGS = os.environ.get(
    "SPECDEC_SGLANG_FLAGS",
    "--attention-backend triton --speculative-draft-attention-backend triton --sampling-backend pytorch "
    "--grammar-backend none --skip-server-warmup --disable-radix-cache "
    "--disable-flashinfer-autotune --mm-feature-transport cpu --dtype bfloat16 --mem-fraction-static 0.3 "
    # --cuda-graph-max-bs-decode: 0.5.17's name for the --cuda-graph-max-bs of the 2026-12-02 runs (same field;
    # 0.5.23 drops the old spelling)
    + ("--cuda-graph-max-bs-decode 8" if GRAPHS else "--disable-cuda-graph"),
)
#: Passed through to the server: what the JIT kernels of a bare wheel install need (sgenv.sh exports them).
PASS_ENV = (
    "CUDA_HOME",
    "NVCC_APPEND_FLAGS",
    "TVM_FFI_CACHE_DIR",
    "HF_HUB_OFFLINE",
    "TRANSFORMERS_OFFLINE",
    "NCCL_NVLS_ENABLE",
    "TORCH_SYMM_MEM_DISABLE_MULTICAST",
    "NVSHMEM_DISABLE_NVLS",
    "SGLANG_ENABLE_JIT_DEEPGEMM",
)


def _profiles() -> str:
    env = {k: os.environ[k] for k in PASS_ENV if k in os.environ}
    env.setdefault("HF_HUB_OFFLINE", "1")
    env.setdefault("TVM_FFI_CACHE_DIR", "/tmp/tvmcache")
    base = {
        "server": "sglang",
        "python": SGLANG_PYTHON,
        "model_path": str(ASSETS / "target"),
        "startup_timeout_s": 600,
        "extra_args": shlex.split(FLAGS),
        "env": env,
        "workload": {
            "prompts": "builtin",
            "max_new_tokens": 64,
            "num_requests": 16,
            "warmup_requests": 2,
            "concurrency": 1,
            "temperature": 0.0,
            "ignore_eos": True,
            "repeats": 2,
        },
        "thresholds": {"min_tok_s": 50},
    }
    spec = {
        "algorithm": "EAGLE3",
        "draft_model_path": str(ASSETS / "draft-eagle3"),
        "num_steps": 3,
        "eagle_topk": 1,
        "num_draft_tokens": 4,
    }
    # Measured on the H200 (README "Real SGLang"): trained ids 2.78 / 0.60, [0, 2, 4] 2.59 / 0.53,
    # [0, 1, 2] 2.34 / 0.45 (accept length counted as SGLang's completion_tokens / spec_verify_ct).
    eagle3 = {
        "extends": "baseline",
        "speculative": spec,
        "thresholds": {"min_accept_length": 2.5, "min_accept_rate": 0.5},
    }
    profiles = {
        "baseline": base,
        "eagle3": eagle3,
        # Both tiny servers fit on one GPU at --mem-fraction-static 0.3: measure the arms interleaved.
        # Without graphs the tiny pair measured 1.24x at c1. With graphs (2026-12-02, H200) a cycle costs 2.81 plain
        # decode steps at accept length 2.80: median 1.00x over 6 pairs (CI 0.82-1.06), so the floor there is 0.9
        # (speculation must not lose more than 10%), not a gain the tiny model cannot give.
        "eagle3-speedup": {
            "extends": "eagle3",
            "pairing": "interleaved",
            "thresholds": {"min_speedup": {"vs": "baseline", "ratio": 0.9 if GRAPHS else 1.05}},
        },
        "eagle3-wrong-layers": {"extends": "eagle3", "speculative": {"aux_hidden_state_layer_ids": [0, 1, 2]}},
        "eagle3-embedding": {
            "extends": "eagle3",
            "speculative": {"aux_hidden_state_layer_ids": [-1, 1, 3], "allow_embedding_capture": True},
        },
        "eagle-algorithm": {"extends": "eagle3", "speculative": {"algorithm": "EAGLE"}},
        "eagle3-completions": {"extends": "eagle3", "workload": {"api": "completions"}},
        "eagle3-chat": {"extends": "eagle3", "workload": {"api": "chat"}},
    }
    return json.dumps({"profiles": profiles})  # JSON is YAML


def _sglang_processes() -> list[str]:
    """Lines of ``ps`` naming an SGLang process (its own names: sglang::scheduler, sglang::detokenizer, ...)."""
    out = subprocess.run(["ps", "-eo", "pid,stat,args"], capture_output=True, text=True).stdout
    return [line for line in out.splitlines() if "sglang::" in line or "sglang.launch_server" in line]


def _zombies() -> set[str]:
    """``pid comm`` of every <defunct> process (a zombie detokenizer was seen once after teardown)."""
    out = subprocess.run(["ps", "-eo", "pid=,stat=,comm="], capture_output=True, text=True).stdout
    return {
        f"{f[0]} {f[2]}" for line in out.splitlines() if len(f := line.split(None, 2)) == 3 and f[1].startswith("Z")
    }


@pytest.fixture
def run_plugin(pytester: pytest.Pytester):
    pytester.makefile(".yaml", specdec=_profiles())
    pytester.makepyfile(test_specdec=PROFILE_TEST)
    out_dir = os.environ.get("SPECDEC_GPU_OUT")

    def run(*args: str, timeout: float = 540) -> pytest.RunResult:
        zombies_before = _zombies()
        result = pytester.runpytest_subprocess(
            *plugin_args(),
            "-m",
            "specdec",
            "--specdec-profiles=specdec.yaml",
            "-p",
            "no:cacheprovider",
            *args,
            timeout=timeout,
        )
        if out_dir:  # keep what the user would see, for the README and the recorded data
            name = "_".join(a.strip("-").replace("=", "-").replace("/", "_") for a in args)[:80]
            Path(out_dir, f"plugin_{name}.txt").write_text(str(result.stdout) + "\n--- stderr\n" + str(result.stderr))
        # Teardown: nothing of SGLang left, zombies included (a <defunct> detokenizer was seen once).
        deadline = time.monotonic() + 10
        while _sglang_processes() and time.monotonic() < deadline:
            time.sleep(0.5)
        assert _sglang_processes() == []
        assert _zombies() <= zombies_before
        return result

    return run
