"""A port the harness picks is held until its server binds it; a port another program takes meanwhile costs one
relaunch, never a red run.

Seen in a quiet full-suite run: two xdist workers' launches picked the same free port while the first server was
still loading its model; the second server bound it, answered the first one's health checks, and the first exited
on "address already in use" in the middle of its measurement.
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from pytest_specdec.core.errors import ServerStartError
from pytest_specdec.engines.rules import BUNDLED_TARGET
from pytest_specdec.profiles.schema import Profile
from pytest_specdec.serve import ports, startup
from pytest_specdec.serve.server import ServerHandle, ServerProcess
from tests.helpers import FAKE_SGLANG

HOST = "127.0.0.1"


def _fake_sglang(port: int | None = None) -> Profile:
    """The fake SGLang (one second of "model loading" before it binds its port)."""
    env = {"PYTHONPATH": str(FAKE_SGLANG), "SPECDEC_FAKE_SGLANG": json.dumps({"startup_s": 1.0})}
    return Profile(name="eagle3", server="sglang", model_path=str(BUNDLED_TARGET), env=env, port=port,
                   startup_timeout_s=60)  # fmt: skip


@pytest.fixture
def squatter() -> Iterator[list[socket.socket]]:
    """Sockets a test opens as "another program" taking a port; closed after the test."""
    held: list[socket.socket] = []
    yield held
    for sock in held:
        sock.close()


def _take(held: list[socket.socket], port: int) -> None:
    sock = socket.socket()
    sock.bind((HOST, port))
    sock.listen()
    held.append(sock)


def test_a_reserved_port_is_skipped_until_released(monkeypatch: pytest.MonkeyPatch) -> None:
    first = ports.reserve_free_port(HOST)
    other = ports.find_free_port(HOST)
    offered = iter([first.port, other])
    real = ports.find_free_port
    monkeypatch.setattr(ports, "find_free_port", lambda host: next(offered, None) or real(host))
    second = ports.reserve_free_port(HOST)
    assert second.port == other != first.port  # the free-looking first.port was held
    second.release()
    first.release()
    offered = iter([first.port])
    with ports.reserve_free_port(HOST) as again:
        assert again == first.port


def test_a_port_held_by_another_process_is_skipped(monkeypatch: pytest.MonkeyPatch) -> None:
    code = (
        "import sys; from pytest_specdec.serve.ports import reserve_free_port; r = reserve_free_port(); "
        "print(r.port, flush=True); sys.stdin.read()"
    )
    holder = subprocess.Popen([sys.executable, "-c", code], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout is not None
        held = int(holder.stdout.readline())
        offered = iter([held])
        real = ports.find_free_port
        monkeypatch.setattr(ports, "find_free_port", lambda host: next(offered, None) or real(host))
        with ports.reserve_free_port(HOST) as port:
            assert port != held
    finally:
        holder.communicate("")  # EOF: it exits, and the OS drops its lock


@pytest.mark.slow  # two launches of the fake SGLang, one second of "loading" each
def test_a_port_taken_before_the_bind_is_relaunched_once_on_another(
    tmp_path: Path, squatter: list[socket.socket]
) -> None:
    taken: list[int] = []
    lines: list[str] = []

    def take_port(handle: ServerHandle) -> None:
        assert isinstance(handle, ServerProcess)
        if not taken:  # only the first launch's port: the relaunch must succeed
            _take(squatter, handle.spec.port)
            taken.append(handle.spec.port)

    server = startup.start_server(_fake_sglang(), log_dir=tmp_path / "logs", on_launch=take_port,
                                  on_progress=lambda elapsed, budget, line: lines.append(line))  # fmt: skip
    try:
        assert server.launch is not None and server.launch.port != taken[0]
        assert f"port {taken[0]} was taken before the server bound it; launching again on another port" in lines
        logs = sorted((tmp_path / "logs").glob("eagle3.*.log"))
        assert len(logs) == 2 and "Address already in use" in logs[0].read_text() + logs[1].read_text()
    finally:
        server.stop()


@pytest.mark.slow  # three launches
def test_a_port_taken_twice_or_named_by_the_profile_fails_naming_the_cause(
    tmp_path: Path, squatter: list[socket.socket]
) -> None:
    def take_port(handle: ServerHandle) -> None:
        assert isinstance(handle, ServerProcess)
        _take(squatter, handle.spec.port)

    with pytest.raises(ServerStartError) as info:
        startup.start_server(_fake_sglang(), log_dir=tmp_path / "twice", on_launch=take_port)
    assert info.value.cause == "port in use"
    assert len(list((tmp_path / "twice").glob("eagle3.*.log"))) == 2

    named = ports.find_free_port(HOST)
    with pytest.raises(ServerStartError) as info:
        startup.start_server(_fake_sglang(port=named), log_dir=tmp_path / "named", on_launch=take_port)
    assert info.value.cause == "port in use"
    assert len(list((tmp_path / "named").glob("eagle3.*.log"))) == 1  # the user's port: no relaunch


def test_a_port_another_program_listens_on_is_not_waited_for_after_a_stop(
    squatter: list[socket.socket], monkeypatch: pytest.MonkeyPatch
) -> None:
    """A server that died of "port in use" never held the port: its stop does not wait for it to free (each such
    launch was reported 2 s late). A port held by the server's own processes is still waited for."""
    port = ports.find_free_port(HOST)
    _take(squatter, port)  # this process listens: "another program" to a server of other pids
    naps: list[float] = []
    monkeypatch.setattr(ports.time, "sleep", naps.append)
    assert ports.wait_port_free(HOST, port, 30.0, ours={1 << 22}) is False
    assert naps == []  # not polled: the listener is not the server's
    assert ports.wait_port_free(HOST, port, 0.1, ours={os.getpid()}) is False
    assert naps  # polled until the timeout: the server's own socket may still close
