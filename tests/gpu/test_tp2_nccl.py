"""Issue 30: tensor-parallel SGLang on two GPUs (tp_size 2), its NCCL tuning env lost on a restart, caught and named.

Modes (the module is skipped otherwise):

- GPU: ``SPECDEC_SGLANG_PYTHON`` set (``tests/gpu/conftest.py``) on a machine with at least two GPUs (the
  lent ``nvidia-h200-x2``): real SGLang 0.5.17 at ``--tp-size 2`` on the bundled tiny target (4 heads: TP=2 divides
  them) and its EAGLE-3 draft.
- Dry run: ``SPECDEC_TP2_DRYRUN=1``: the same runs on the reference server's multi-rank mode (``nodes:`` with two
  ranks on 127.0.0.1 and 127.0.0.2, ``tp_size 2``, ``launcher: "{cmd}"``), where the lost env is made visible with
  the reference server's forward delay knob (it has no NCCL).

``SPECDEC_GPU_OUT=DIR`` keeps each inner run's terminal output there (test data, like ``tests/data/sglang/``).
The profiles: ``tp2-baseline`` and ``tp2-eagle3`` with ``NCCL_PROTO=LL NCCL_ALGO=Ring NCCL_P2P_LEVEL=SYS`` in
``env:``, then the same names with those three removed (the incident's restart), compared with ``--specdec-compare``.
What losing the env does to tok/s and the speedup is measured, not assumed: the tests assert that the compare names
the env diff first, and record the verdicts either way.
"""

from __future__ import annotations

import json
import os
import shlex
import signal
import subprocess
import sys
import time
from pathlib import Path

import psutil
import pytest

from tests.helpers import PROFILE_TEST, plugin_args

pytestmark = pytest.mark.gpu

SGLANG_PYTHON = os.environ.get("SPECDEC_SGLANG_PYTHON")
DRY_RUN = os.environ.get("SPECDEC_TP2_DRYRUN") == "1"


def _gpu_count() -> int:
    try:
        out = subprocess.run(["nvidia-smi", "-L"], capture_output=True, text=True, timeout=30).stdout
    except (OSError, subprocess.SubprocessError):
        return 0
    return sum(1 for line in out.splitlines() if line.startswith("GPU "))


if not DRY_RUN and not (SGLANG_PYTHON and _gpu_count() >= 2):
    pytest.skip(
        "TP=2 tests: set SPECDEC_SGLANG_PYTHON on a machine with 2 GPUs, or SPECDEC_TP2_DRYRUN=1 (reference server)",
        allow_module_level=True,
    )

REPO = Path(__file__).resolve().parents[2]
ASSETS = REPO / "pytest_specdec" / "refserver" / "assets"
NCCL_ENV = {"NCCL_PROTO": "LL", "NCCL_ALGO": "Ring", "NCCL_P2P_LEVEL": "SYS"}
#: Kept in both arms: NVLink multicast stays off on the lent machines (KINDS.md), and the JIT needs the rest.
PASS_ENV = ("CUDA_HOME", "NVCC_APPEND_FLAGS", "TVM_FFI_CACHE_DIR", "HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE",
            "NCCL_NVLS_ENABLE", "TORCH_SYMM_MEM_DISABLE_MULTICAST", "NVSHMEM_DISABLE_NVLS")  # fmt: skip
FLAGS = os.environ.get(
    "SPECDEC_SGLANG_FLAGS",
    "--attention-backend triton --speculative-draft-attention-backend triton --sampling-backend pytorch "
    "--grammar-backend none --disable-cuda-graph --skip-server-warmup --disable-radix-cache "
    "--disable-flashinfer-autotune --mm-feature-transport cpu --dtype bfloat16 --mem-fraction-static 0.3",
)
#: The dry run's stand-in for what the lost env costs (reference server knob, ms per target forward).
DRY_RUN_LOST_DELAY_MS = "30"


def profiles(*, nccl: bool, tag: str) -> str:
    """The profile file: ``tp2-baseline`` and ``tp2-eagle3`` (min_speedup vs the baseline), with or without
    :data:`NCCL_ENV` (every other key equal, so the stored compare's env diff is exactly the three variables)."""
    env = {k: os.environ[k] for k in PASS_ENV if k in os.environ}
    env.setdefault("NCCL_NVLS_ENABLE", "0")
    env["SPECDEC_TEST_TAG"] = tag  # finds every process of these servers (teardown checks)
    if nccl:
        env.update(NCCL_ENV)
    elif DRY_RUN:
        env["SPECDEC_REF_FORWARD_DELAY_MS"] = DRY_RUN_LOST_DELAY_MS
    workload = {"prompts": "random", "random": {"input_len": 128, "range_ratio": 1, "vocab_size": 2048},
                "max_new_tokens": 64, "num_requests": 64, "concurrency": 16, "warmup_requests": 2, "repeats": 3}
    if DRY_RUN:
        workload.update(max_new_tokens=16, num_requests=8, concurrency=4, warmup_requests=1, repeats=2)
        base: dict[str, object] = {
            "server": "reference", "tp_size": 2, "env": env, "startup_timeout_s": 240,
            "nodes": {"hosts": ["127.0.0.1", "127.0.0.2"], "launcher": "{cmd}"},
        }  # fmt: skip
    else:
        base = {"server": "sglang", "python": SGLANG_PYTHON, "model_path": str(ASSETS / "target"), "tp_size": 2,
                "startup_timeout_s": 600, "extra_args": shlex.split(FLAGS), "env": env}  # fmt: skip
    spec = {"algorithm": "EAGLE3", "draft_model_path": str(ASSETS / "draft-eagle3"), "num_steps": 3,
            "eagle_topk": 1, "num_draft_tokens": 4}  # fmt: skip
    return json.dumps({"profiles": {
        "tp2-baseline": {**base, "workload": workload},
        "tp2-eagle3": {"extends": "tp2-baseline", "speculative": spec,
                       "thresholds": {"min_speedup": {"vs": "tp2-baseline", "ratio": 1.0}}},
    }})  # fmt: skip  (JSON is YAML)


def _left_over(tag: str) -> list[str]:
    """Processes of this test's servers still alive: tagged by env, or SGLang's own names (ranks included)."""
    found = []
    for proc in psutil.process_iter(["pid", "name", "cmdline"]):
        try:
            cmd = " ".join(proc.info["cmdline"] or [])
            if proc.environ().get("SPECDEC_TEST_TAG") == tag or "sglang::" in cmd or "sglang.launch_server" in cmd:
                found.append(f"{proc.info['pid']} {cmd[:120]}")
        except (psutil.NoSuchProcess, psutil.AccessDenied, psutil.ZombieProcess):
            continue
    return found


def _gpu_memory_used_mib() -> list[int]:
    if DRY_RUN:
        return []
    out = subprocess.run(["nvidia-smi", "--query-gpu=memory.used", "--format=csv,noheader,nounits"],
                         capture_output=True, text=True, timeout=30).stdout  # fmt: skip
    return [int(x) for x in out.split()]


def _assert_torn_down(tag: str, timeout_s: float = 30) -> None:
    """Issue 30.3: no process of the server left and (GPU mode) both GPUs back at 0 MiB."""
    deadline = time.monotonic() + timeout_s
    while (_left_over(tag) or any(_gpu_memory_used_mib())) and time.monotonic() < deadline:
        time.sleep(0.5)
    assert _left_over(tag) == []
    assert all(m == 0 for m in _gpu_memory_used_mib()), _gpu_memory_used_mib()


@pytest.fixture
def run_plugin(pytester: pytest.Pytester):
    pytester.makepyfile(test_specdec=PROFILE_TEST)
    pytester.makeini("[pytest]\nfilterwarnings =\n    error\n    default::pytest_specdec.SpecdecWarning\n")
    tag = str(pytester.path)
    out_dir = os.environ.get("SPECDEC_GPU_OUT")

    def run(name: str, *args: str, nccl: bool, timeout: float = 900) -> pytest.RunResult:
        pytester.makefile(".yaml", specdec=profiles(nccl=nccl, tag=tag))
        result = pytester.runpytest_subprocess(
            *plugin_args(), "-p", "no:benchmark", "-p", "no:cacheprovider", "-m", "specdec",
            "--specdec-profiles=specdec.yaml", *args, timeout=timeout,
        )  # fmt: skip
        if out_dir:
            Path(out_dir, f"tp2_{name}.txt").write_text(str(result.stdout) + "\n--- stderr\n" + str(result.stderr))
        _assert_torn_down(tag)
        return result

    return run


def test_lost_nccl_env_is_named_first_by_the_stored_compare(run_plugin) -> None:
    """Issue 30.1/30.2: measure both profiles with the NCCL env, restart without it, compare with the stored run."""
    kept = run_plugin("kept", "--server-profile=tp2-baseline,tp2-eagle3", nccl=True)
    assert kept.ret in (pytest.ExitCode.OK, pytest.ExitCode.TESTS_FAILED), kept.stdout.str()
    kept.stdout.fnmatch_lines(["*test_profile[[]tp2-baseline[]]*passed*"])
    lost = run_plugin("lost", "--server-profile=tp2-baseline,tp2-eagle3", "--specdec-compare", nccl=False)
    out = lost.stdout.str()
    for key, value in NCCL_ENV.items():
        assert f"env {key}: {value} -> (unset)" in out, out
    if "REGRESSED" in out:  # where the effect is real, the env diff is what the failure leads with
        assert out.index("env NCCL_") < out.index("REGRESSED")
        assert lost.ret == pytest.ExitCode.TESTS_FAILED
    elif DRY_RUN:  # the dry run's lost arm is slower by construction: it must fail
        pytest.fail("the dry run's slower restart was not caught:\n" + out)


def test_sigkilled_pytest_stops_both_ranks(pytester: pytest.Pytester) -> None:
    """Issue 30.3: pytest SIGKILLed while the TP=2 server measures: no rank survives, the GPUs are freed."""
    tag = str(pytester.path)
    pytester.makefile(".yaml", specdec=profiles(nccl=True, tag=tag))
    pytester.makepyfile(test_specdec=PROFILE_TEST)
    pytester.makeini("[pytest]\n")
    cmd = [sys.executable, "-m", "pytest", *plugin_args(), "-p", "no:benchmark", "-p", "no:cacheprovider",
           "-m", "specdec", "--specdec-profiles=specdec.yaml", "--server-profile=tp2-baseline"]  # fmt: skip
    owner = subprocess.Popen(cmd, cwd=pytester.path, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 600
        ranks = 2 if DRY_RUN else 3  # dry run: one process per rank; SGLang: launcher + scheduler_TP0 + _TP1
        while len(_left_over(tag)) < ranks and time.monotonic() < deadline and owner.poll() is None:
            time.sleep(0.5)
        assert len(_left_over(tag)) >= ranks, _left_over(tag)
    finally:
        owner.send_signal(signal.SIGKILL)  # no teardown in pytest: the supervisors must stop the ranks
        owner.wait()
    _assert_torn_down(tag, timeout_s=60)
