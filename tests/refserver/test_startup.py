"""Startup behaviour: bind only after loading, SGLang-style failures for a mis-sized aux config, startup faults."""

from __future__ import annotations

import subprocess
import time
from pathlib import Path

import httpx
import pytest

from tests.helpers import dies_with_this_process

pytest.importorskip("torch", reason="the reference server needs the reference extra (torch)")
from refhelpers import asset_dir, free_port, overlay_draft, server_cmd, server_env, spec_flags, stop

pytestmark = pytest.mark.slow

#: How long a test waits for a server's startup line or exit: a start takes 5.5 s quiet, but two clean-clone CI runs
#: beside a flake hunt (load 13) took 27 s to their first torch line and over 60 s to the startup line. Each wait
#: ends as soon as the line shows (or the server exits), so a wide budget costs nothing on a quiet runner.
STARTUP_WAIT_S = 180


def test_aux_width_mismatch_fails_at_warmup_like_sglang(tmp_path: Path) -> None:
    assets = asset_dir()
    # id 9 -> capture index 10, outside [0, 8): silently not captured, so 2 states (512 wide) reach an fc built
    # for 3 (768): SGLang fails with a matmul shape error during warmup; so must we.
    draft = overlay_draft(assets / "draft-eagle3", tmp_path / "draft", aux_ids=[1, 3, 9])
    port = free_port()
    log_path = tmp_path / "server.log"
    with open(log_path, "wb") as log:
        proc = subprocess.Popen(server_cmd(assets, port, *spec_flags(assets, draft=draft)), stdout=log,
                                stderr=subprocess.STDOUT, env=server_env(), preexec_fn=dies_with_this_process())
    try:
        ret = proc.wait(timeout=STARTUP_WAIT_S)
    finally:
        stop(proc)
    text = log_path.read_text()
    # As real SGLang 0.5.17 (tests/data/sglang/0.5.17/eagle3-aux-minus1.log): after a scheduler exception the server
    # kills its own tree, so it dies by SIGKILL.
    assert ret == -9
    assert "kill_process_tree called" in text
    assert "layer ids [1, 3, 9] -> capture indices [2, 4]" in text
    assert "Scheduler hit an exception: Traceback (most recent call last)" in text
    assert "RuntimeError: mat1 and mat2 shapes cannot be multiplied" in text
    assert "The server is fired up and ready to roll!" not in text


def test_slow_start_refuses_connections_until_bound_then_eagle_algorithm_serves(tmp_path: Path) -> None:
    assets = asset_dir()
    log_path = tmp_path / "server.log"
    extra = [*spec_flags(assets, algorithm="NEXTN"), "--ref-fault-slow-start", "3"]
    port = free_port()
    with open(log_path, "wb") as log:
        proc = subprocess.Popen(server_cmd(assets, port, *extra), stdout=log, stderr=subprocess.STDOUT,
                                env=server_env(), preexec_fn=dies_with_this_process())
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + STARTUP_WAIT_S
        while "Capturing batches (bs=8 avail_mem=" not in log_path.read_text():
            assert proc.poll() is None and time.monotonic() < deadline, log_path.read_text()
            time.sleep(0.1)
        with pytest.raises(httpx.ConnectError):
            httpx.get(url + "/health", timeout=2)
        status = None
        while status != 200:
            assert proc.poll() is None and time.monotonic() < deadline, log_path.read_text()
            try:
                status = httpx.get(url + "/health", timeout=5).status_code
            except httpx.TransportError:
                status = None
            time.sleep(0.2)
        info = httpx.get(url + "/server_info", timeout=10).json()
        out = httpx.post(url + "/generate", timeout=60, json={
            "text": "def f(x):\n", "sampling_params": {"max_new_tokens": 12, "temperature": 0, "ignore_eos": True}})
    finally:
        stop(proc)
    assert info["speculative_algorithm"] == "EAGLE"  # NEXTN alias, SGLang spec_registry.py
    assert out.json()["meta_info"]["spec_verify_ct"] >= 1
    assert "aux hidden states" not in log_path.read_text()  # no aux capture for EAGLE


def test_oom_fault_exits_1_with_cuda_traceback() -> None:
    assets = asset_dir()
    t0 = time.monotonic()
    res = subprocess.run(server_cmd(assets, free_port(), "--ref-fault-oom-at-startup", "1"), capture_output=True,
                         text=True, timeout=STARTUP_WAIT_S, env=server_env(), preexec_fn=dies_with_this_process())
    assert res.returncode == 1
    assert time.monotonic() - t0 >= 1
    assert "torch.OutOfMemoryError: CUDA out of memory." in res.stdout


def test_never_ready_fault_keeps_health_503(tmp_path: Path) -> None:
    assets = asset_dir()
    port = free_port()
    log_path = tmp_path / "server.log"
    with open(log_path, "wb") as log:
        proc = subprocess.Popen(server_cmd(assets, port, "--ref-fault-never-ready"), stdout=log,
                                stderr=subprocess.STDOUT, env=server_env(), preexec_fn=dies_with_this_process())
    try:
        deadline = time.monotonic() + STARTUP_WAIT_S
        while "--ref-fault-never-ready, /health stays 503" not in log_path.read_text():
            assert proc.poll() is None and time.monotonic() < deadline, log_path.read_text()
            time.sleep(0.1)
        codes = {p: httpx.get(f"http://127.0.0.1:{port}{p}", timeout=5).status_code
                 for p in ("/health", "/health_generate", "/ready", "/model_info")}
    finally:
        stop(proc)
    assert codes == {"/health": 503, "/health_generate": 503, "/ready": 503, "/model_info": 200}

