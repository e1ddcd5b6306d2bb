"""What pytester's in-process runs leave behind for the tests after them in one process.

An in-process run drops every module first imported inside it (``SysModulesSnapshot``). tests/conftest.py imports
the modules whose second import breaks the next test: here, httpcore. httpx imports it only when a first client is
made, and fills its httpcore -> httpx exception map once, at the first error it maps. Both first done inside an
in-process run, the map keeps that run's httpcore classes, the next httpcore import makes new ones, and a refused
connection then leaks as ``httpcore.ConnectError`` past ``except httpx.TransportError``. Seen in a flake hunt
(random order, one worker): after tests/test_verdicts_fast.py, every test of tests/refserver/test_server.py failed
at setup in its health wait.
"""

from __future__ import annotations

import httpx
import pytest

from tests.helpers import free_port, run_in_process


def test_a_refused_connection_after_an_in_process_run_is_still_httpx_s(pytester: pytest.Pytester) -> None:
    refused = f"http://127.0.0.1:{free_port()}/health"
    pytester.makepyfile(test_inner_httpx_error_map=f"""
import httpx, pytest

def test_inner():
    with pytest.raises(httpx.ConnectError):
        httpx.get("{refused}", timeout=5)
""")
    run_in_process(pytester, benchmark=True).assert_outcomes(passed=1)
    with pytest.raises(httpx.ConnectError):  # a subclass of httpx.TransportError, which the health waits catch
        httpx.get(refused, timeout=5)
