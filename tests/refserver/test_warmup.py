"""The reference server's warmup (``__main__._warmup``) against a stub HTTP server: what it sends, when it gives up."""

from __future__ import annotations

import http.server
import json
import threading
import types
from collections.abc import Iterator

import pytest

from pytest_specdec.refserver import __main__ as refmain


class _Stub(http.server.BaseHTTPRequestHandler):
    generate_status = 200
    seen: list[tuple[str, str, str | None, dict | None]] = []

    def _answer(self, status: int) -> None:
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", "2")
        self.end_headers()
        self.wfile.write(b"{}")

    def do_GET(self) -> None:  # noqa: N802 (http.server's name)
        self.seen.append(("GET", self.path, self.headers.get("Authorization"), None))
        self._answer(200)

    def do_POST(self) -> None:  # noqa: N802
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        self.seen.append(("POST", self.path, self.headers.get("Authorization"), body))
        self._answer(self.generate_status)

    def log_message(self, *args: object) -> None:
        pass


@pytest.fixture
def stub() -> Iterator[str]:
    _Stub.seen = []
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Stub)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()


def _state() -> types.SimpleNamespace:
    return types.SimpleNamespace(args=types.SimpleNamespace(ref_fault_never_ready=False), status="Starting")


def test_warmup_sends_the_key_and_one_generate_then_is_up(stub: str) -> None:
    state = _state()
    refmain._warmup(state, types.SimpleNamespace(started=True), stub, "sekrit")  # type: ignore[arg-type]
    assert state.status == "Up"
    assert _Stub.seen == [
        ("GET", "/model_info", "Bearer sekrit", None),
        ("POST", "/generate", "Bearer sekrit", {
            "text": "The capital city of France is", "sampling_params": {"max_new_tokens": 8, "temperature": 0},
            "log_metrics": False,
        }),
    ]  # fmt: skip


def test_warmup_whose_generate_fails_exits_1(stub: str, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(_Stub, "generate_status", 500)
    codes: list[int] = []

    def fake_exit(code: int) -> None:
        codes.append(code)
        raise SystemExit(code)

    monkeypatch.setattr(refmain.os, "_exit", fake_exit)
    state = _state()
    with pytest.raises(SystemExit):
        refmain._warmup(state, types.SimpleNamespace(started=True), stub, None)  # type: ignore[arg-type]
    assert codes == [1] and state.status == "Starting"
    assert [(m, p, auth) for m, p, auth, _ in _Stub.seen] == [("GET", "/model_info", None), ("POST", "/generate", None)]
