"""Orchestration shared by the fixtures and the CLI: start a profile's server, and measure its workload once.

``start_server`` = overlay (aux ids) -> engine argv/env -> process -> wait until it really generates -> read back the
effective config. ``measure`` = warmup -> counters -> measured phase -> counters -> metrics. The plugin wires these to
pytest; nothing here knows about pytest.
"""

from __future__ import annotations

import contextlib
import contextvars
import dataclasses
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

import httpx

from pytest_specdec.core import clock
from pytest_specdec.core.auth import bearer_headers, tls_context
from pytest_specdec.core.errors import ClientOverloadError, ProfileError, ServerStartError
from pytest_specdec.core.records import RequestRecord, RunMetrics, median_metrics
from pytest_specdec.engines import get_engine
from pytest_specdec.engines.base import EffectiveConfig, Engine, LaunchSpec, SpecCounters
from pytest_specdec.engines.common import resolve_api_key
from pytest_specdec.measure import client, metrics, workload
from pytest_specdec.profiles.schema import Profile
from pytest_specdec.serve import logfiles

if TYPE_CHECKING:
    from pytest_specdec.serve.proctree import StopReport
    from pytest_specdec.serve.server import ServerHandle

__all__ = [
    "Measurement",
    "RunResult",
    "RunningServer",
    "measure",
    "measure_repeats",
    "phase_watcher",
    "profile_prompts",
    "run_result",
    "running_server",
    "start_server",
    "trace_phase",
]

ProgressCallback = Callable[[float, float, str], None]


@dataclass
class RunningServer:
    """A server ready to generate: launched by us (``process`` set: a ``server.ServerProcess``, or a
    ``nodegroup.NodeGroup`` for ``nodes:``) or given by URL (``process`` None)."""

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
    #: The measuring client's load in the last phase on this server (``client.ClientLoad``), for auto workers.
    client_load: client.ClientLoad | None = None

    def stop(self) -> None:
        """Tear the server down (no-op for a server given by URL: we never stop what we did not start)."""
        if self.process is not None and self.stop_report is None:
            self.stop_report = self.process.stop()

    def restart(self, *, startup_timeout_s: float | None = None) -> None:
        """Stop (if running) and start the same profile again, updating this object in place, so that holders of
        it (a fixture's tests) use the new process. Used by bracketed pairing (``pairing.measure_bracketed``).

        :raises ServerStartError: the new server did not start; ``ValueError``: a server given by URL.
        """
        if self.process is None or self.log_path is None:
            raise ValueError(f"server {self.base_url} (profile {self.profile.name!r}) was not started by us")
        self.stop()
        new = start_server(self.profile, log_dir=self.log_path.parent, startup_timeout_s=startup_timeout_s)
        for f in dataclasses.fields(self):
            setattr(self, f.name, getattr(new, f.name))


@dataclass(frozen=True)
class Measurement:
    """One measured phase of a profile's workload (repeats are separate measurements)."""

    profile: str
    metrics: RunMetrics
    records: tuple[RequestRecord, ...]
    prompt_hash: str
    counters_before: SpecCounters | None
    counters_after: SpecCounters | None
    cross_check: str | None
    wall_time: float = field(default_factory=time.time)
    #: ``metrics.client_check``'s line when the measuring client was overloaded, else None.
    client_check: str | None = None
    #: Seconds the phase held the server, warmup included (``clock.now()``): what a sequential verdict spends.
    server_s: float = 0.0


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
    from pytest_specdec.serve.server import ServerProcess, find_free_port

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
    port = profile.port or find_free_port(profile.host)
    launch = engine.launch_spec(profile, port=port, draft_path=draft_path)
    # One log per launch, <name>.log linking the newest: a failure's message names a log the next run keeps.
    log_path = logfiles.new_log_path(log_dir, log_name or profile.name)
    started = time.perf_counter()
    process = ServerProcess.start(
        launch, name=profile.name, log_path=log_path, on_launch=on_launch, record_dir=log_dir.parent / "servers"
    )
    server = RunningServer(profile, engine, launch.base_url, api_key, launch, process, log_path)
    try:
        with httpx.Client(
            base_url=launch.base_url, headers=bearer_headers(api_key), timeout=10.0, verify=tls_context()
        ) as http:
            process.wait_ready(
                lambda: engine.probe_ready(http, profile),
                timeout_s=budget,
                stall_s=profile.startup_stall_s,
                on_progress=on_progress,
            )
    except BaseException:
        server.stop()
        raise
    server.startup_s = time.perf_counter() - started
    try:
        _read_back(server)
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
    from pytest_specdec.serve.server import find_free_port

    assert profile.nodes is not None
    if not isinstance(engine, NodeEngine):  # the profile schema already allows nodes: only where it is
        raise ProfileError(
            f"profiles.{profile.name}.nodes: server {engine.name} has no multi-node launch", profile=profile.name
        )
    leader = profile.nodes.hosts[0]
    port = profile.port or find_free_port(leader if leader in ("127.0.0.1", "localhost") else "127.0.0.1")
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
        _read_back(server)
    except BaseException:
        server.stop()
        raise
    return server


def attach(profile: Profile, base_url: str, *, budget_s: float) -> RunningServer:
    """A client view of a server someone else started (``--server-url``, or another xdist worker): wait until it
    generates, then read back its effective config. We never stop it.

    :raises ServerStartError: not ready within ``budget_s``, or its speculative config differs from the profile.
    """
    server = RunningServer(profile, get_engine(profile), base_url.rstrip("/"), resolve_api_key(profile))
    _wait_url(server, budget_s)
    _read_back(server)
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


def _wait_url(server: RunningServer, budget_s: float) -> None:
    """Wait for a server we did not start. Fails after ``REFUSED_GRACE_S`` of refused or timed-out connections
    (nothing listens, a wrong or firewalled host, a dead server) instead of using the whole startup budget."""
    deadline = time.monotonic() + budget_s
    refused_since: float | None = None
    where = f"server {server.base_url} (profile {server.profile.name!r}, --server-url/url:)"
    with httpx.Client(
        base_url=server.base_url, headers=bearer_headers(server.api_key), timeout=10.0, verify=tls_context()
    ) as http:
        while True:
            if server.engine.probe_ready(http, server.profile):
                return
            try:
                http.get("/health", timeout=5.0)
                refused_since = None
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


def _read_back(server: RunningServer) -> None:
    """Compare what the server reports it runs with the profile (SGLang rewrites some values silently)."""
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


#: Set around a measurement by whoever displays progress (the plugin): called as ``watch(profile, total_requests)``
#: before each measured phase (not warmup), it returns the callback the client calls with each finished request
#: (``client.run_requests(on_request_done=...)``), or None. A context variable so that every caller of
#: :func:`measure` (repeats, paired arms) reports without passing it through.
phase_watcher: contextvars.ContextVar[Callable[[str, int], Callable[[RequestRecord], None] | None] | None] = (
    contextvars.ContextVar("specdec_phase_watcher", default=None)
)


def profile_prompts(profile: Profile, *, base_dir: Path | None = None) -> list[workload.Prompt]:
    """The profile's prompt set: ``workload.prompts`` read against ``base_dir`` (default: the profile file's
    directory), or drawn for ``prompts: random`` (``workload.workload_prompts``). Load it once and pass it to
    :func:`measure` and :func:`trace_phase`.

    :raises ProfileError: the prompt file is missing or malformed (``workload.load_prompts``), or the random
        prompts' vocabulary size cannot be found.
    """
    return workload.workload_prompts(
        profile.workload, base_dir or Path(profile.source or ".").parent, profile.model_path
    )


def measure(
    server: RunningServer, *, base_dir: Path | None = None, prompts: Sequence[workload.Prompt] | None = None
) -> Measurement:
    """Run the profile's workload once: warmup (not measured), counters, measured phase, counters, metrics.

    :param prompts: the profile's prompt set (:func:`profile_prompts`; loaded here when None).
    :raises ServerError: the server stalled, died, or failed more requests than the workload allows.
    """
    started = clock.now()
    profile = server.profile
    wl = profile.workload
    if prompts is None:
        prompts = profile_prompts(profile, base_dir=base_dir)
    warmup, measured = workload.build_requests(wl, prompts)
    options = _phase_options(server)
    if warmup:
        warm = client.run_phase(server.base_url, warmup, options, workers=_client_workers(server))
        server.client_load = warm.load or server.client_load
    # Warmup request i and measured request i share a prompt, and repeats resend the list: without a reset, TTFT
    # would be measured on prefix-cache hits. The reset also zeroes SGLang's scheduler totals (the cross-check).
    cache_reset = _reset_cache(server)
    before = _counters(server)
    watch = phase_watcher.get()
    on_done = watch(profile.name, len(measured)) if watch is not None else None
    phase = client.run_phase(
        server.base_url, measured, options, workers=_client_workers(server), on_request_done=on_done
    )
    after = _counters(server)
    server.client_load = phase.load or server.client_load
    if server.process is not None:
        server.process.check_alive()
    spec = profile.speculative
    num_steps = None
    scheduler_length = None
    if spec is not None:
        eff = server.effective
        num_steps = (eff.num_steps if eff else None) or spec.num_steps
        if cache_reset.startswith("reset") and _scheduler_covers(server, phase.records):
            scheduler_length = _scheduler_accept_length(server)
    run = metrics.summarize(
        list(phase.records),
        phase.end_s - phase.start_s,
        num_steps=num_steps,
        speculative=spec is not None,
        counters_before=before,
        counters_after=after,
        max_error_rate=wl.max_error_rate,
        scheduler_accept_length=scheduler_length,
        cache_reset=cache_reset,
        categories=[spec.category for spec in measured],
    )
    if phase.load is not None:
        run = dataclasses.replace(
            run,
            client_lag_ms_p99=phase.load.lag_ms_p99,
            client_cpu_cores=phase.load.cpu_cores,
            client_workers=phase.load.workers,
        )
    return Measurement(
        profile=profile.name,
        metrics=run,
        records=tuple(phase.records),
        prompt_hash=workload.prompt_set_hash(prompts),
        counters_before=before,
        counters_after=after,
        cross_check=metrics.cross_check(run),
        client_check=client_verdict(profile, run),
        server_s=clock.now() - started,
    )


def _phase_options(server: RunningServer) -> client.PhaseOptions:
    """How ``server``'s phases are sent: the profile's ``workload`` (API, concurrency, timeouts) and the server's
    API key; the model of OpenAI APIs is asked of the server (``GET /v1/models``)."""
    wl = server.profile.workload
    return client.PhaseOptions(
        api=wl.api,
        concurrency=wl.concurrency,
        api_key=server.api_key,
        stall_timeout_s=wl.stall_timeout_s,
        request_timeout_s=wl.request_timeout_s,
    )


def _client_workers(server: RunningServer) -> int:
    """``workload.client_workers``, or for "auto" ``client.auto_workers`` from the concurrency and the client's
    load in this server's previous phase."""
    wl = server.profile.workload
    if wl.client_workers != "auto":
        return wl.client_workers
    return client.auto_workers(wl.concurrency, server.client_load)


def client_verdict(profile: Profile, run: RunMetrics) -> str | None:
    """``metrics.client_check`` of a phase, applied as the profile says (``workload.client_overload``).

    :returns: the warning line ("client overloaded: ..." or "machine busy: ..."), or None when the client kept up.
    :raises ClientOverloadError: the client itself was overloaded (``metrics.client_overloaded``) and the profile
        sets ``client_overload: fail``. A busy machine (the client mostly idle, the CPU taken by the server or other
        processes) stays a warning: more client workers would not help, and the key is about the client.
    """
    message = metrics.client_check(run)
    if message is not None and profile.workload.client_overload == "fail" and metrics.client_overloaded(run):
        raise ClientOverloadError(
            f"profile {profile.name}: {message} (workload.client_overload: fail)", profile=profile.name
        )
    return message


def _reset_cache(server: RunningServer) -> str:
    """``Engine.reset_prefix_cache`` on a fresh client; its note goes into the results (``RunMetrics.cache_reset``)."""
    with httpx.Client(base_url=server.base_url, timeout=30.0, verify=tls_context()) as http:
        return server.engine.reset_prefix_cache(http, server.profile)


#: The scheduler check runs only when its figure misses at most 1/N of the phase's decode iterations.
SCHEDULER_MIN_WINDOWS = 20


def _scheduler_covers(server: RunningServer, records: tuple[RequestRecord, ...] | list[RequestRecord]) -> bool:
    """True when the scheduler's windowed figure covers nearly all of the phase: SGLang folds its totals every
    ``decode_log_interval`` (``/server_info``; default 40) decode iterations, so the phase needs at least
    ``SCHEDULER_MIN_WINDOWS`` windows (estimated iterations = Σspec_verify_ct / concurrency)."""
    raw = server.effective.raw if server.effective is not None else {}
    value = raw.get("decode_log_interval")
    interval = value if isinstance(value, int) else 40
    steps = sum(r.spec_verify_ct or 0 for r in records if r.ok)
    return steps / max(server.profile.workload.concurrency, 1) >= SCHEDULER_MIN_WINDOWS * max(interval, 1)


def _scheduler_accept_length(server: RunningServer) -> float | None:
    with httpx.Client(base_url=server.base_url, timeout=30.0, verify=tls_context()) as http:
        return server.engine.scheduler_accept_length(http, server.profile)


def _counters(server: RunningServer) -> SpecCounters | None:
    if not server.profile.enable_metrics:
        return None
    try:
        text = client.fetch_text(server.base_url, "/metrics", server.api_key, timeout=10.0)
    except Exception:  # noqa: BLE001 - counters are a cross-check; their absence is reported, not fatal
        return None
    return server.engine.counters(text)


@dataclass(frozen=True)
class RunResult:
    """``repeats`` measured phases of one profile's workload on one server.

    ``metrics`` holds, per field, ``records.median_metrics`` over the repeats (counts: the lower median, an integer
    some repeat had; None when no repeat reported the field), so a single slow phase does not decide a verdict.
    """

    profile: str
    measurements: tuple[Measurement, ...]
    metrics: RunMetrics
    prompt_hash: str
    #: Warnings read from the server log (e.g. decode without CUDA graphs on SGLang).
    log_warnings: tuple[str, ...] = ()
    #: With ``trace:``, what the traced phase left: ``"trace: <dir> (<n> files)"`` or ``"not traced: <why>"``.
    trace: str | None = None

    @property
    def cross_checks(self) -> tuple[str, ...]:
        return tuple(m.cross_check for m in self.measurements if m.cross_check)

    @property
    def client_checks(self) -> tuple[str, ...]:
        """The client-overload lines of the repeats (``metrics.client_check``)."""
        return tuple(m.client_check for m in self.measurements if m.client_check)


def measure_repeats(
    server: RunningServer,
    repeats: int,
    *,
    base_dir: Path | None = None,
    prompts: Sequence[workload.Prompt] | None = None,
) -> RunResult:
    """``measure`` ``repeats`` times on the same server (warmup before each phase) and take medians. The prompt set
    is loaded once (or given); a ``trace:`` phase is not run here (:func:`trace_phase`)."""
    if prompts is None:
        prompts = profile_prompts(server.profile, base_dir=base_dir)
    return run_result(server, [measure(server, prompts=prompts) for _ in range(repeats)])


def run_result(server: RunningServer, measured: Sequence[Measurement]) -> RunResult:
    """A ``RunResult`` of phases already measured on ``server`` (per-field medians, the server log's warnings).
    Only summarises: no request is sent (``trace`` stays None; the caller sets it from :func:`trace_phase`)."""
    measurements = tuple(measured)
    warnings: list[str] = []
    if server.log_path is not None and server.log_path.is_file():
        warnings = server.engine.log_warnings(server.profile, server.log_path.read_text(errors="replace"))
    for note in dict.fromkeys(m.metrics.cache_reset or "" for m in measurements):
        if note.startswith("not reset"):
            warnings.append(f"prefix cache {note}; TTFT may be measured on cache hits (warmup and repeats resend the "
                            "same prompts)")  # fmt: skip
    return RunResult(
        profile=server.profile.name,
        measurements=measurements,
        metrics=median_metrics([m.metrics for m in measurements]),
        prompt_hash=measurements[0].prompt_hash,
        log_warnings=tuple(warnings),
    )


def trace_dir(profile: Profile) -> Path:
    """Where ``profile.trace`` puts its files: ``trace.dir`` against the profile file's directory, else
    ``.specdec/traces/<profile>`` under the working directory; absolute (the server's cwd is not ours)."""
    assert profile.trace is not None
    if profile.trace.dir is None:
        return (Path(".specdec") / "traces" / profile.name).resolve()
    return (Path(profile.source or ".").parent / profile.trace.dir).resolve()


def trace_phase(
    server: RunningServer, *, base_dir: Path | None = None, prompts: Sequence[workload.Prompt] | None = None
) -> str:
    """One unmeasured phase of ``trace.requests`` requests under the engine's profiler (``Engine.start_trace`` /
    ``stop_trace``), after the measured repeats (the plugin runs it for a profile with ``trace:``, and keeps the
    line in ``RunResult.trace``); a failure to trace is recorded, never fatal.

    :param prompts: the prompt set the repeats used (:func:`profile_prompts`; loaded here when None).
    :returns: ``"trace: <dir> (<n> new files)"`` or ``"not traced: <why>"``.
    :raises ServerError: the server died or stalled during the traced phase (as in :func:`measure`).
    """
    profile = server.profile
    assert profile.trace is not None
    out_dir = trace_dir(profile)
    out_dir.mkdir(parents=True, exist_ok=True)
    before = set(out_dir.rglob("*"))
    wl = profile.workload
    if prompts is None:
        prompts = profile_prompts(profile, base_dir=base_dir)
    _, measured = workload.build_requests(wl, prompts)
    requests = measured[: profile.trace.requests]
    with httpx.Client(base_url=server.base_url, timeout=60.0, verify=tls_context()) as http:
        why = server.engine.start_trace(http, profile, out_dir)
        if why is not None:
            return f"not traced: {why}"
        try:
            client.run_phase(server.base_url, requests, _phase_options(server))
        finally:
            why = server.engine.stop_trace(http, profile)
    if why is not None:
        return f"not traced: {why}"
    # SGLang writes its trace after /stop_profile returns ("This will take some time"): wait for it briefly.
    deadline = time.monotonic() + 30.0
    new: list[Path] = []
    while time.monotonic() < deadline:
        new = [p for p in out_dir.rglob("*") if p.is_file() and p not in before]
        if new:
            break
        time.sleep(0.5)
    return f"trace: {out_dir} ({len(new)} new files)" if new else f"not traced: no file appeared in {out_dir} in 30 s"
