"""Starting a profile's server and making sure it runs what the profile asks: ``start_server`` = overlay (aux ids) ->
engine argv/env -> process (or one per rank with ``nodes:``) -> wait until it really generates -> read back the
effective config; ``attach`` gives a client view of a server someone else started (``--server-url``, another xdist
worker). Measuring it is ``measure.runner``'s job.
"""

from __future__ import annotations

import contextlib
import dataclasses
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import httpx

from pytest_specdec.core.auth import bearer_headers, tls_context
from pytest_specdec.core.errors import ProfileError, ServerStartError
from pytest_specdec.engines import get_engine
from pytest_specdec.engines.base import EffectiveConfig, Engine, LaunchSpec
from pytest_specdec.engines.common import resolve_api_key
from pytest_specdec.profiles.schema import Profile
from pytest_specdec.serve import logfiles

if TYPE_CHECKING:
    from pytest_specdec.serve.proctree import StopReport
    from pytest_specdec.serve.server import ServerHandle

__all__ = [
    "NOT_A_HEALTH_ROUTE",
    "REFUSED_GRACE_S",
    "ProgressCallback",
    "RunningServer",
    "attach",
    "read_back",
    "running_server",
    "start_server",
]

#: ``on_progress(elapsed_s, budget_s, last log line)`` while a server starts (``ServerProcess.wait_ready``).
ProgressCallback = Callable[[float, float, str], None]


@dataclass(eq=False)
class RunningServer:
    """A server ready to generate: launched by us (``process`` set: a ``server.ServerProcess``, or a
    ``nodegroup.NodeGroup`` for ``nodes:``) or given by URL (``process`` None).

    Compared and hashed by identity (``eq=False``): :meth:`restart` updates the object in place, and the measuring
    side keeps per-server state keyed by it (``runner``: the client's load in the last phase)."""

    profile: Profile
    engine: Engine
    base_url: str
    api_key: str | None
    launch: LaunchSpec | None = None
    process: ServerHandle | None = None
    log_path: Path | None = None
    effective: EffectiveConfig | None = None
    startup_s: float | None = None
    stop_report: StopReport | None = None

    def stop(self) -> None:
        """Tear the server down (no-op for a server given by URL: we never stop what we did not start)."""
        if self.process is not None and self.stop_report is None:
            self.stop_report = self.process.stop()

    def restart(
        self, *, startup_timeout_s: float | None = None, on_launch: Callable[[ServerHandle], None] | None = None
    ) -> None:
        """Stop (if running) and start the same profile again, updating this object in place, so that holders of
        it (a fixture's tests) use the new process. Used by bracketed pairing (``pairing.measure_bracketed``).

        :param on_launch: given to :func:`start_server`.
        :raises ServerStartError: the new server did not start; ``ValueError``: a server given by URL.
        """
        if self.process is None or self.log_path is None:
            raise ValueError(f"server {self.base_url} (profile {self.profile.name!r}) was not started by us")
        self.stop()
        new = start_server(self.profile, log_dir=self.log_path.parent, startup_timeout_s=startup_timeout_s,
                           on_launch=on_launch)  # fmt: skip
        for f in dataclasses.fields(self):
            setattr(self, f.name, getattr(new, f.name))


def start_server(
    profile: Profile,
    *,
    log_dir: Path,
    startup_timeout_s: float | None = None,
    on_progress: ProgressCallback | None = None,
    log_name: str | None = None,
    on_launch: Callable[[ServerHandle], None] | None = None,
) -> RunningServer:
    """Launch ``profile``'s server (or attach to ``profile.url``) and return once it really generates.

    The server is recorded in ``log_dir.parent / "servers"`` for ``registry.reap``; ``on_launch(process)`` is
    passed to ``ServerProcess.start``. Files the server needs (an aux-id overlay, ``Engine.prepare``'s draft copy)
    are written under ``log_dir`` before the argv is built.

    :param log_name: the log's name in ``log_dir`` (default: the profile name): the launch writes
        ``<log_name>.<stamp>.log``, and ``<log_name>.log`` links to it (``logfiles.new_log_path``).

    :raises ServerStartError: the process exited or stalled before ready, the budget ran out, or the effective
        speculative config read back from the server differs from the profile.
    """
    from pytest_specdec.serve.server import ServerProcess

    budget = startup_timeout_s or profile.startup_timeout_s
    if profile.url is not None:
        return attach(profile, profile.url, budget_s=budget)
    engine = get_engine(profile)
    api_key = resolve_api_key(profile)
    draft_path = None
    spec_cfg = profile.speculative
    if spec_cfg is not None and spec_cfg.aux_hidden_state_layer_ids is not None and spec_cfg.draft_model_path:
        from pytest_specdec.engines.overlay import make_draft_overlay

        draft_path = make_draft_overlay(
            Path(spec_cfg.draft_model_path), spec_cfg.aux_hidden_state_layer_ids, log_dir / "overlays"
        )
    draft_path = engine.prepare(profile, work_dir=log_dir / "drafts", draft_path=draft_path)
    if profile.nodes is not None:
        return _start_group(profile, engine, api_key, log_dir=log_dir, draft_path=draft_path, budget_s=budget,
                            on_progress=on_progress, on_launch=on_launch)  # fmt: skip
    for attempt in (1, 2):
        with _held_port(profile, profile.host) as (port, picked):
            launch = engine.launch_spec(profile, port=port, draft_path=draft_path)
            # One log per launch, <name>.log linking the newest: a failure's message names a log the next run keeps.
            log_path = logfiles.new_log_path(log_dir, log_name or profile.name)
            started = time.perf_counter()
            server = RunningServer(profile, engine, launch.base_url, api_key, launch, None, log_path)
            try:
                server.process = ServerProcess.start(
                    launch, name=profile.name, log_path=log_path, on_launch=on_launch,
                    record_dir=log_dir.parent / "servers",
                )  # fmt: skip
                with httpx.Client(
                    base_url=launch.base_url, headers=bearer_headers(api_key), timeout=10.0, verify=tls_context()
                ) as http:
                    server.process.wait_ready(
                        lambda: engine.probe_ready(http, profile),
                        timeout_s=budget,
                        stall_s=profile.startup_stall_s,
                        on_progress=on_progress,
                    )
            except ServerStartError as exc:
                server.stop()
                # Another program's socket took the port between our pick and the server's bind (the server exited
                # on "address already in use"): our pick, so ours to retry, once, on another port.
                if not picked or exc.cause != "port in use" or attempt == 2:
                    raise
                if on_progress is not None:
                    line = f"port {port} was taken before the server bound it; launching again on another port"
                    on_progress(time.perf_counter() - started, budget, line)
                continue
            except BaseException:
                server.stop()
                raise
        break
    server.startup_s = time.perf_counter() - started
    try:
        read_back(server)
    except BaseException:
        server.stop()
        raise
    return server


def _start_group(
    profile: Profile,
    engine: Engine,
    api_key: str | None,
    *,
    log_dir: Path,
    draft_path: Path | None,
    budget_s: float,
    on_progress: ProgressCallback | None,
    on_launch: Callable[[ServerHandle], None] | None = None,
) -> RunningServer:
    """``start_server`` for a profile with ``nodes:``: one launch per rank (``nodegroup.NodeGroup``, each rank
    recorded for ``registry.reap``; ``on_launch(group)`` once all are launched), ready when every rank joined and
    rank 0 really generates."""
    from pytest_specdec.serve.nodegroup import NodeEngine, NodeGroup

    assert profile.nodes is not None
    if not isinstance(engine, NodeEngine):  # the profile schema already allows nodes: only where it is
        raise ProfileError(
            f"profiles.{profile.name}.nodes: server {engine.name} has no multi-node launch", profile=profile.name
        )
    leader = profile.nodes.hosts[0]
    local = leader if leader in ("127.0.0.1", "localhost") else "127.0.0.1"
    with _held_port(profile, local) as (port, _):
        log_dir.mkdir(parents=True, exist_ok=True)
        started = time.perf_counter()
        group = NodeGroup.start(
            profile, engine, port=port, log_dir=log_dir, draft_path=draft_path,
            on_launch=on_launch, record_dir=log_dir.parent / "servers",
        )  # fmt: skip
        server = RunningServer(profile, engine, group.base_url, api_key, group.spec, group, group.log_path)
        try:
            with httpx.Client(
                base_url=group.base_url, headers=bearer_headers(api_key), timeout=10.0, verify=tls_context()
            ) as http:
                group.wait_ready(
                    lambda: engine.probe_ready(http, profile),
                    engine=engine,
                    timeout_s=budget_s,
                    on_progress=on_progress,
                )
            server.startup_s = time.perf_counter() - started
            read_back(server)
        except BaseException:
            server.stop()
            raise
    return server


@contextlib.contextmanager
def _held_port(profile: Profile, host: str) -> Iterator[tuple[int, bool]]:
    """(port, picked by us): the profile's own port, or a free one held against other pytest-specdec launches until
    the block ends, by when the server listens on it (``ports.PortReservation``)."""
    from pytest_specdec.serve.ports import reserve_free_port

    if profile.port:
        yield profile.port, False
        return
    with reserve_free_port(host) as port:
        yield port, True


def attach(profile: Profile, base_url: str, *, budget_s: float) -> RunningServer:
    """A client view of a server someone else started (``--server-url``, or another xdist worker): wait until it
    generates, then read back its effective config. We never stop it.

    :raises ServerStartError: not ready within ``budget_s``, or its speculative config differs from the profile.
    """
    server = RunningServer(profile, get_engine(profile), base_url.rstrip("/"), resolve_api_key(profile))
    _wait_url(server, budget_s)
    read_back(server)
    return server


@contextlib.contextmanager
def running_server(
    profile: Profile,
    *,
    log_dir: Path,
    startup_timeout_s: float | None = None,
    on_progress: ProgressCallback | None = None,
    log_name: str | None = None,
    on_launch: Callable[[ServerHandle], None] | None = None,
) -> Iterator[RunningServer]:
    """:func:`start_server` (same arguments) as a context manager that always tears down."""
    server = start_server(
        profile,
        log_dir=log_dir,
        startup_timeout_s=startup_timeout_s,
        on_progress=on_progress,
        log_name=log_name,
        on_launch=on_launch,
    )
    try:
        yield server
    finally:
        server.stop()


#: A server given by URL is supposed to be up: no connection for this long means nothing listens there.
REFUSED_GRACE_S = 10.0


#: ``/health`` answered with these: no such route, so not an inference server's health endpoint (a wrong port that
#: lands on another web service answered 404 for 15 minutes in a fresh-user trial). SGLang and vLLM answer 200 when
#: ready and 503 while starting or unhealthy.
NOT_A_HEALTH_ROUTE = (404, 405)


def _wait_url(server: RunningServer, budget_s: float) -> None:
    """Wait for a server we did not start. Fails after ``REFUSED_GRACE_S`` of refused or timed-out connections
    (nothing listens, a wrong or firewalled host, a dead server), or of a ``/health`` that is no route there
    (:data:`NOT_A_HEALTH_ROUTE`: another web service), instead of using the whole startup budget."""
    deadline = time.monotonic() + budget_s
    refused_since: float | None = None
    foreign_since: float | None = None
    where = f"server {server.base_url} (profile {server.profile.name!r}, --server-url/url:)"
    with httpx.Client(
        base_url=server.base_url, headers=bearer_headers(server.api_key), timeout=10.0, verify=tls_context()
    ) as http:
        while True:
            if server.engine.probe_ready(http, server.profile):
                return
            try:
                health = http.get("/health", timeout=5.0)
                refused_since = None
                now = time.monotonic()
                foreign_since = (foreign_since or now) if health.status_code in NOT_A_HEALTH_ROUTE else None
                if foreign_since is not None and now - foreign_since >= REFUSED_GRACE_S:
                    software = health.headers.get("server")
                    raise ServerStartError(
                        f"{where}: GET /health answered {health.status_code} {health.reason_phrase} for "
                        f"{REFUSED_GRACE_S:g} s{f' (Server: {software})' if software else ''}: no health route there, "
                        "so not an SGLang or vLLM server (they answer 200, or 503 while starting); is the URL's port "
                        "right?",
                        profile=server.profile.name,
                        cause="unreachable",
                    )
            except (httpx.ConnectError, httpx.ConnectTimeout) as exc:
                now = time.monotonic()
                refused_since = refused_since or now
                if now - refused_since >= REFUSED_GRACE_S:
                    raise ServerStartError(
                        f"{where}: cannot connect for {REFUSED_GRACE_S:g} s ({type(exc).__name__}: {exc}); is the "
                        "server running and is the URL right?",
                        profile=server.profile.name,
                        cause="unreachable",
                    ) from None
            except httpx.HTTPError:
                refused_since = None
            if time.monotonic() > deadline:
                raise ServerStartError(
                    f"{where} did not answer /health and a 1-token generate within {budget_s:g} s",
                    profile=server.profile.name,
                    cause="timeout",
                )
            time.sleep(1.0)


def read_back(server: RunningServer) -> None:
    """Read the server's effective config into ``server.effective`` and compare it with the profile (SGLang rewrites
    some values silently).

    :raises ServerStartError: the speculative config differs (the server is stopped first, when we started it).
    """
    profile = server.profile
    with httpx.Client(
        base_url=server.base_url, headers=bearer_headers(server.api_key), timeout=10.0, verify=tls_context()
    ) as http:
        server.effective = eff = server.engine.effective_config(http, profile)
    spec = profile.speculative
    if eff is None:
        return
    reports_algorithm = "speculative_algorithm" in eff.raw
    if spec is None:
        if reports_algorithm and eff.speculative_algorithm:
            _mismatch(
                server,
                [f"speculative_algorithm: profile none, server {eff.speculative_algorithm!r}"],
                fix=_speculative_block(server, eff),
            )
        return
    if reports_algorithm and not eff.speculative_algorithm:
        # e.g. --server-url pointing at a server started without speculation: it would pass every tok/s check.
        _mismatch(
            server,
            [f"speculative_algorithm: profile {spec.algorithm!r}, server none (no speculative decoding)"],
            fix="point the profile at a server started with speculative decoding, or remove its speculative: block",
        )
    diffs = []
    # What the engine will run for the profile, its rewrites and aliases applied (SGLang: topk 1 -> steps + 1 draft
    # tokens, NEXTN -> EAGLE).
    for key, want in server.engine.expected_config(profile).items():
        got = getattr(eff, key)
        if got is None or want is None:
            continue
        if str(got).upper() != str(want).upper():
            diffs.append(f"{key}: profile {want!r}, server {got!r}")
    if diffs:
        _mismatch(server, diffs)


def _speculative_block(server: RunningServer, eff: EffectiveConfig) -> str:
    """The fix for a profile without ``speculative:`` whose server speculates: the block that says what it runs."""
    lines = ["speculative:", f"  algorithm: {eff.speculative_algorithm}"]
    draft = eff.raw.get("speculative_draft_model_path")
    if isinstance(draft, str) and draft:
        lines.append(f"  draft_model_path: {draft}")
    for key in ("num_steps", "eagle_topk", "num_draft_tokens"):
        value = getattr(eff, key)
        if value is not None:
            lines.append(f"  {key}: {value}")
    where = f" in {server.profile.source}" if server.profile.source else ""
    block = "\n".join(f"      {line}" for line in lines)
    return (
        f"add these lines to profiles.{server.profile.name}{where} (what the server reports it runs), or point the "
        f"profile at a server without speculative decoding:\n{block}"
    )


def _mismatch(server: RunningServer, diffs: list[str], *, fix: str | None = None) -> None:
    server.stop()
    raise ServerStartError(
        f"server for profile {server.profile.name!r} ({server.base_url}) runs a different speculative config than "
        "the profile asks for:\n  " + "\n  ".join(diffs) + (f"\n  fix: {fix}" if fix else ""),
        profile=server.profile.name,
        log_path=server.log_path,
        cause="config mismatch",
    )
