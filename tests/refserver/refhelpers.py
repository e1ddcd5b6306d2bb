"""Helpers for the reference server's tests (imported as `refhelpers`): assets, free ports, server subprocesses."""

from __future__ import annotations

import contextlib
import json
import os
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import httpx
import pytest

from pytest_specdec.core.auth import bearer_headers
from tests.helpers import dies_with_this_process

PACKAGE_ASSETS = Path(__file__).resolve().parents[2] / "pytest_specdec" / "refserver" / "assets"
SMOKE_ASSETS = Path("/tmp/smoke")


def asset_dir() -> Path:
    """Env ``SPECDEC_REF_ASSETS``, else the committed assets; /tmp/smoke (untrained) only while those are missing."""
    override = os.environ.get("SPECDEC_REF_ASSETS")
    if override:
        return Path(override)
    if (PACKAGE_ASSETS / "target" / "config.json").exists():
        return PACKAGE_ASSETS
    if (SMOKE_ASSETS / "target" / "config.json").exists():
        return SMOKE_ASSETS
    pytest.skip("no reference server assets (pytest_specdec/refserver/assets or /tmp/smoke)")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def spec_flags(assets: Path, steps: int = 3, draft: Path | None = None, algorithm: str = "EAGLE3") -> list[str]:
    draft = draft or assets / "draft-eagle3"
    return ["--speculative-algorithm", algorithm, "--speculative-draft-model-path", str(draft),
            "--speculative-num-steps", str(steps), "--speculative-eagle-topk", "1",
            "--speculative-num-draft-tokens", str(steps + 1)]


def server_env() -> dict[str, str]:
    env = dict(os.environ)
    env.setdefault("OMP_NUM_THREADS", "1")
    return env


def server_cmd(assets: Path, port: int, *extra: str) -> list[str]:
    return [sys.executable, "-m", "pytest_specdec.refserver", "--model-path", str(assets / "target"),
            "--port", str(port), "--random-seed", "0", *extra]


@dataclass
class RunningServer:
    proc: subprocess.Popen
    base_url: str
    log_path: Path
    api_key: str | None = None

    def client(self, auth: bool = True, timeout: float = 120) -> httpx.Client:
        headers = bearer_headers(self.api_key if auth else None)
        return httpx.Client(base_url=self.base_url, headers=headers, timeout=timeout)

    def log(self) -> str:
        return self.log_path.read_text(errors="replace")


def stop(proc: subprocess.Popen) -> None:
    if proc.poll() is None:
        proc.terminate()
        try:
            proc.wait(timeout=15)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(timeout=15)


@contextlib.contextmanager
def running_server(log_path: Path, extra: list[str], api_key: str | None = None,
                   timeout_s: float = 120) -> Iterator[RunningServer]:
    """Start the server, wait for /health 200 (fail with the log tail on death/timeout), stop it afterwards."""
    assets = asset_dir()
    port = free_port()
    cmd = server_cmd(assets, port, *extra, *(["--api-key", api_key] if api_key else []))
    with open(log_path, "wb") as log:
        proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, env=server_env(),
                                preexec_fn=dies_with_this_process())
    srv = RunningServer(proc, f"http://127.0.0.1:{port}", log_path, api_key)
    try:
        deadline = time.monotonic() + timeout_s
        while True:
            if proc.poll() is not None:
                pytest.fail(f"server exited with {proc.returncode}:\n{srv.log()[-3000:]}", pytrace=False)
            if time.monotonic() > deadline:
                pytest.fail(f"server not healthy after {timeout_s}s:\n{srv.log()[-3000:]}", pytrace=False)
            try:
                if httpx.get(srv.base_url + "/health", timeout=5).status_code == 200:
                    break
            except httpx.TransportError:
                pass
            time.sleep(0.2)
        yield srv
    finally:
        stop(proc)


def overlay_draft(src: Path, dst: Path, **config_changes: object) -> Path:
    """A draft dir whose config.json is rewritten (``None`` deletes a key) and whose weights are symlinked."""
    dst.mkdir(parents=True, exist_ok=True)
    cfg = json.loads((src / "config.json").read_text())
    for key, value in config_changes.items():
        if key == "aux_ids":
            cfg.setdefault("eagle_config", {})["eagle_aux_hidden_state_layer_ids"] = value
        elif value is None:
            cfg.pop(key, None)
        else:
            cfg[key] = value
    (dst / "config.json").write_text(json.dumps(cfg, indent=2))
    link = dst / "model.safetensors"
    if link.exists() or link.is_symlink():
        link.unlink()
    link.symlink_to((src / "model.safetensors").resolve())
    return dst


def load_prompts() -> list[str]:
    path = Path(__file__).resolve().parents[2] / "pytest_specdec" / "refserver" / "prompts.jsonl"
    return [json.loads(line)["prompt"] for line in path.read_text().splitlines() if line.strip()]


__all__ = [
    "RunningServer", "asset_dir", "free_port", "load_prompts", "overlay_draft", "running_server", "server_cmd",
    "server_env", "spec_flags", "stop",
]
